#!/usr/bin/env bash
# Repeat blocks survive into the generated program: the program of a 96-layer GPT
# (samples/gen_gpt.py) is about as long as a 1-layer one (at most 1.5x its lines), its layers run
# as loops over the instances (the forward one over all 96; the backward one over 95, the last
# layer staying straight-line because its gradient has no sum node, unlike the others), its
# parameter table and initialisation loop too, and it builds. That the loops compute the
# straight-line program's numbers is the hashes test (gpt_char's 4 layers loop; the hashes were
# recorded before loops existed).
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
for L in 1 96; do
  python3 samples/gen_gpt.py --layers $L -o "$tmp/gpt$L.json" || bad "gen_gpt.py --layers $L"
done
# The 1-layer program is only printed (CC=true: no build); the 96-layer one is built for real.
if CC=true "$pipec" compile "$tmp/gpt1.json" -o "$tmp/gpt1" 2>"$tmp/err"; then ok; else bad "gpt1: compile: $(tail -3 "$tmp/err")"; fi
if "$pipec" compile "$tmp/gpt96.json" -o "$tmp/gpt96" 2>"$tmp/err"; then ok; else bad "gpt96: compile: $(tail -3 "$tmp/err")"; fi
check "the 96-layer program is built" test -x "$tmp/gpt96/bin/train"
l1=$(wc -l <"$tmp/gpt1/rank0.c")
l96=$(wc -l <"$tmp/gpt96/rank0.c")
echo "lines: 1 layer $l1, 96 layers $l96"
check "96 layers: $l96 lines, at most 1.5x the 1-layer program's $l1" test $((2 * l96)) -le $((3 * l1))
c=$tmp/gpt96/rank0.c
check "forward: one loop over instances 0 to 95" grep -q "Repeat block layer, instances 0 to 95 (96 x" "$c"
check "backward: one loop over instances 94 to 0" grep -q "Repeat block layer, instances 94 to 0 (95 x" "$c"
# gpt_char, whose numbers the hashes test pins, runs both kinds of per-instance offsets: evenly
# spaced ones (base + l * stride) and a per-instance table (a buffer the planner placed apart, in
# today's plan), so the hashes cover both.
if CC=true "$pipec" compile samples/gpt_char.json -o "$tmp/gpt_char" 2>"$tmp/err"; then ok; else bad "gpt_char: compile: $(tail -3 "$tmp/err")"; fi
check "gpt_char: a per-instance offset table" grep -qE "static const int64_t off[0-9]+\[[0-9]+\]\[[0-9]+\] = " "$tmp/gpt_char/rank0.c"
check "gpt_char: evenly spaced offsets" grep -qE "\((params|acts) \+ [0-9]+ [-+] l \* [0-9]+\)" "$tmp/gpt_char/rank0.c"
check "parameter table: one loop over the 96 instances" grep -q "Repeat block layer, instances 0 to 95: P\[4 + 6 \* l" "$c"
check "init_params: one loop over the 96 instances" grep -q "for (int l = 0; l < 96; l++) { // repeat block layer" "$c"
check "layer 50's tensors are not named outside the loops" bash -c "! grep -q 'transformer_h_50_attn' '$c'"
check "the 1-layer program has no loop" bash -c "! grep -q 'Repeat block' '$tmp/gpt1/rank0.c'"
finish
