#!/usr/bin/env bash
# Activation recomputation (--recompute, docs/pipeline.md) on gpt_char (the 2-layer flat
# character GPT of pipeline_matrix.sh): (1) the loss log, the saved parameters and optimizer
# state are byte for byte those of the same configuration without --recompute, at S = 1, S = 2
# (1f1b and zb-h1) and S = 4 (interleaved, V = 2), with --recompute all and with a list of
# stages; (2) the per-rank memory plan shows the saving: a recomputing rank's activations drop,
# and are at most constants + K x its boundary bytes (what its stages receive, load and send,
# from the comm dump) + one working set (the unrecomputed slot); (3) bad values are usage errors
# with their messages; the plan checker (plan_check.c) runs on every plan compiled here.
#
# Usage: recompute.sh PIPEC ROOT
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
. "$root/tests/e2e/mpi_env.sh"
file=$tmp/gpt_char_l2.json
gpt_char_l2 "$file"
common=(--batch 24)
quiet() { "$@" >/dev/null 2>&1; }

# rc_same NAME 'PIPEC-OPTIONS' 'RECOMPUTE': compiled with the options, then with --recompute too;
# both runs (3 steps, launch.sh) give the same bits (same_bits).
declare -A built
rc_same() {
  local name=$1 opts=$2 rc=$3 key
  key=$(echo "$opts" | md5sum | cut -c1-10)
  # shellcheck disable=SC2086 # the options are words
  if [ -z "${built[$key]:-}" ]; then
    if ! "$pipec" compile "$file" "${common[@]}" $opts -o "$tmp/ref-$key.d" >/dev/null 2>"$tmp/err" ||
      ! pipe_run "$tmp/ref-$key" "$tmp/ref-$key.d"; then
      bad "$name: the reference ($opts): $(head -n 3 "$tmp/err" "$tmp/ref-$key.out" 2>/dev/null)"
      return
    fi
    built[$key]=1
  fi
  local d=$tmp/$name.d
  # shellcheck disable=SC2086
  if ! "$pipec" compile "$file" "${common[@]}" $opts --recompute "$rc" -o "$d" >/dev/null 2>"$tmp/err"; then
    bad "$name: compile: $(head -n 3 "$tmp/err")"
    return
  fi
  if ! pipe_run "$tmp/$name" "$d"; then
    bad "$name: run: $(tail -n 3 "$tmp/$name.out")"
    return
  fi
  # B reruns the forward: the generated B_v says so.
  check "$name: B reruns the forward" grep -q "Recompute: the forward" "$d"/rank*.c
  same_bits "$name" "$tmp/ref-$key" "$tmp/$name"
  echo "ran $name"
}

rc_same s1-all "--microbatches 2" all
rc_same s2-1f1b-all "--microbatches 4 --stages 2 --schedule 1f1b" all
rc_same s2-1f1b-v0 "--microbatches 4 --stages 2 --schedule 1f1b" 0
rc_same s2-zbh1-all "--microbatches 4 --stages 2 --schedule zb-h1" all
rc_same s2-zbh1-v1 "--microbatches 4 --stages 2 --schedule zb-h1" 1
rc_same s4-int-all "--microbatches 4 --stages 4 --schedule interleaved --virtual 2" all
rc_same s4-int-list "--microbatches 4 --stages 4 --schedule interleaved --virtual 2" 0,3,5

# Only what B needs is rerun: of stage 0's 12 forward nodes, not transformer.h.0.out (it makes
# the sent tensor) nor the mlp.c_proj only it reads.
check "S = 2: stage 0's B reruns 10 forward nodes" \
  grep -q "Recompute: the forward's 10 nodes B needs" "$tmp/s2-1f1b-all.d/rank0.c"

# Evaluation and --predict run the forward alone (F_v, the area as in training): the logits of a
# recomputing S = 4 program are the plain one's, byte for byte, from the same parameters.
head -c 3000 "$root/../shared/data/tinyshakespeare.txt" | tail -c 2000 >"$tmp/text.txt"
ref4=$tmp/ref-$(echo "--microbatches 4 --stages 4 --schedule interleaved --virtual 2" | md5sum | cut -c1-10)
for d in "$ref4.d" "$tmp/s4-int-all.d"; do
  timeout -k 5 120 "$d/launch.sh" --threads 1 --quiet --predict "$tmp/text.txt" --out "$d/p.npy" \
    --init "$ref4.st" >"$d/p.out" 2>&1 || bad "--predict in $d: $(tail -n 2 "$d/p.out")"
done
check "--predict at S = 4 with --recompute all: the plain program's logits" \
  cmp -s "$ref4.d/p.npy" "$tmp/s4-int-all.d/p.npy"
check "the final evaluation line too" \
  test -n "$(grep ' eval ' "$ref4.out")" -a "$(grep ' eval ' "$ref4.out")" = "$(grep ' eval ' "$tmp/s4-int-all.out")"

# zb-h1 splits stage 1's backward into B and W; recomputing, it stays fused (no W_1).
for rc in none 1; do
  quiet "$pipec" compile "$file" "${common[@]}" --microbatches 4 --stages 2 --schedule zb-h1 \
    --recompute $rc --no-build -o "$tmp/zb-$rc"
done
check "zb-h1: stage 1 splits without recomputation" grep -q "static void W_1(" "$tmp/zb-none/rank1.c"
check "zb-h1 --recompute 1: stage 1 fused" test -f "$tmp/zb-1/rank1.c" -a -z "$(grep "static void W_1(" "$tmp/zb-1/rank1.c")"

# ---- The memory plan: pipec plan's per-rank lines, without and with --recompute all.
plan_line() { # plan_line RANK FILE: that rank's line
  grep "^rank $1: " "$2"
}
num() { # num FIELD LINE: the bytes after "FIELD " ("activations", "constants", "work area")
  sed -n "s/.*$1 \([0-9]*\) B.*/\1/p" <<<"$2"
}
pargs=(--microbatches 4 --stages 2 --schedule 1f1b)
"$pipec" plan "$file" "${common[@]}" "${pargs[@]}" >"$tmp/plan0" 2>&1 || bad "plan: $(head -n 2 "$tmp/plan0")"
"$pipec" plan "$file" "${common[@]}" "${pargs[@]}" --recompute all >"$tmp/plan1" 2>&1 ||
  bad "plan --recompute all: $(head -n 2 "$tmp/plan1")"
"$pipec" print "$file" "${common[@]}" "${pargs[@]}" --dump-after=comm >"$tmp/comm" 2>&1 ||
  bad "comm dump: $(head -n 2 "$tmp/comm")"
# The boundary bytes of stage 0 per microbatch: its channels (sent and received, the comm
# dump's "c<i> 'T' vA -> vB ... N B" lines) and its loaded input (idx: 4 x T int32 per row).
bnd0=$(awk '/^c[0-9]+ / && ($3 == "v0" || $5 == "v0") {
    for (i = 1; i <= NF; i++) if ($(i + 1) == "B" && $i ~ /^[0-9]+$/) { s += int(($i + 63) / 64) * 64 } }
  END { print s + 0 }' "$tmp/comm")
mb=6 # 24 rows in 4 microbatches
bnd0=$((bnd0 + (mb * 16 * 4 + 63) / 64 * 64))
for r in 0 1; do
  l0=$(plan_line $r "$tmp/plan0") l1=$(plan_line $r "$tmp/plan1")
  a0=$(num activations "$l0") a1=$(num activations "$l1") c1=$(num constants "$l1")
  w1=$(num "work area" "$l1")
  k=$(sed -n 's/.*v[0-9]*: \([0-9]*\) slots\{0,1\} of.*/\1/p' <<<"$l1")
  s0=$(sed -n 's/.*v[0-9]*: [0-9]* slots\{0,1\} of \([0-9]*\) B.*/\1/p' <<<"$l0")
  s1=$(sed -n 's/.*v[0-9]*: [0-9]* slots\{0,1\} of \([0-9]*\) B.*/\1/p' <<<"$l1")
  echo "rank $r: activations $a0 B -> $a1 B with --recompute all (K $k: slot $s0 B -> $s1 B, work area $w1 B)"
  check "rank $r: a plan line with its work area ($l1)" test -n "$a1" -a -n "$w1" -a -n "$k"
  [ -n "$a1" ] && [ -n "$w1" ] && [ -n "$k" ] || continue
  check "rank $r: its slot shrinks ($s0 -> $s1 B)" test "$s1" -lt "$s0"
  check "rank $r: the work area is at most one unrecomputed slot ($w1 <= $s0)" test "$w1" -le "$s0"
  check "rank $r: activations = constants + K slots + work area" test "$a1" -eq $((c1 + k * s1 + w1))
  if [ "$k" -gt 1 ]; then
    check "rank $r (K = $k): its activations drop ($a0 -> $a1 B)" test "$a1" -lt "$a0"
  fi
  if [ $r = 0 ]; then # the cut is between the layers: the slot holds exactly the boundary
    check "rank 0: its slot is its boundary bytes ($s1 = $bnd0 B)" test "$s1" -eq "$bnd0"
    check "rank 0: activations <= constants + K x boundary ($bnd0 B) + one working set" \
      test "$a1" -le $((c1 + k * bnd0 + s0))
  fi
done
check "the per-rank lines name the recomputing stages" grep -q "(recompute)" "$tmp/plan1"

# The partition table's estimate: the recomputing stage counts its activations once.
"$pipec" print "$file" "${common[@]}" "${pargs[@]}" --recompute 0 --dump-after=partition >"$tmp/part" 2>&1
check "the partition table estimates stage 0 with recomputation" \
  grep -qE "^  memory .* estimated \(params, grads, optimizer state; recompute: acts once \+ boundary .* x 2 in flight\)" "$tmp/part"

hint_re=. # the driver's errors below have no HINT line
# --mem-cap. The partitioner's estimate: at 700000 bytes no cut of this model into 2 stages fits
# without recomputation, and one does with it (the plan then fits too). The real plans at the
# automatic cut (fixed by --split): a cap between rank 0's totals passes only with recomputation.
cap=700000
expect "--mem-cap $cap: no cut without recomputation" 1 "error: --mem-cap $cap: no cut into 2 stages keeps every stage's estimated memory under the cap$" \
  "$pipec" plan "$file" "${common[@]}" "${pargs[@]}" --mem-cap $cap
check "--mem-cap $cap: a cut with --recompute all" \
  quiet "$pipec" plan "$file" "${common[@]}" "${pargs[@]}" --mem-cap $cap --recompute all
t0=$(sed -n 's/^rank 0: .*, total \([0-9]*\) B.*/\1/p' "$tmp/plan0")
t1=$(sed -n 's/^rank 0: .*, total \([0-9]*\) B.*/\1/p' "$tmp/plan1")
cut=$(awk '/^stage 1 \(rank/ { getline; sub(/^  nodes +/, ""); split($0, a, ", "); print a[1] }' "$tmp/part")
if [ -n "$t0" ] && [ -n "$t1" ] && [ "$t1" -lt "$t0" ] && [ -n "$cut" ]; then
  cap=$(((t0 + t1) / 2))
  expect "--split $cut --mem-cap $cap without recomputation" 1 "error: --mem-cap $cap: rank 0's memory plan needs $t0 bytes" \
    "$pipec" plan "$file" "${common[@]}" --microbatches 4 --split "$cut" --mem-cap "$cap"
  check "--split $cut --mem-cap $cap with --recompute 0 fits" \
    quiet "$pipec" plan "$file" "${common[@]}" --microbatches 4 --split "$cut" --mem-cap "$cap" --recompute 0
else
  bad "rank 0's totals: $t0 B, with --recompute all $t1 B; the cut before '$cut'"
fi

# ---- Bad values: usage errors (exit 2) with their messages.
expect "--recompute 7 at S = 2" 2 "^pipec: --recompute 7: no such stage \(the pipeline has 2 stages: 0 to 1\)$" \
  "$pipec" compile "$file" --stages 2 --recompute 7 -o "$tmp/bad"
expect "--recompute 4 at S = 2, V = 2" 2 "^pipec: --recompute 4: no such stage \(the pipeline has 4 stages: 0 to 3\)$" \
  "$pipec" plan "$file" --stages 2 --schedule interleaved --virtual 2 --microbatches 2 --recompute 0,4
expect "--recompute x" 2 "^pipec: --recompute: expected all, none or stage indices separated by commas \(0,2\), got 'x'$" \
  "$pipec" compile "$file" --stages 2 --recompute x -o "$tmp/bad"
expect "--recompute ''" 2 "^pipec: --recompute: expected all, none or stage indices separated by commas \(0,2\), got an empty string$" \
  "$pipec" compile "$file" --stages 2 --recompute "" -o "$tmp/bad"
expect "--recompute 0,,1" 2 "^pipec: --recompute: an empty stage index in '0,,1'$" \
  "$pipec" compile "$file" --stages 2 --recompute 0,,1 -o "$tmp/bad"
expect "--recompute 1 at S = 1" 2 "^pipec: --recompute 1: no such stage \(the pipeline has 1 stage: 0 to 0\)$" \
  "$pipec" plan "$file" --recompute 1
# With --split the stages are known after the partition: an error naming the count.
expect "--recompute 5 with --split" 1 "error: --recompute 5: no such stage \(the pipeline has 2 stages: 0 to 1\)" \
  "$pipec" plan "$file" --split "${cut:-transformer.h.1.ln_1}" --recompute 5
# none is the default: the same sources as without the flag.
"$pipec" compile "$file" "${common[@]}" --stages 2 --recompute none --no-build -o "$tmp/none" >/dev/null 2>&1
"$pipec" compile "$file" "${common[@]}" --stages 2 --no-build -o "$tmp/dflt" >/dev/null 2>&1
# (The command line's comment: "// Command: " and, past 200 characters, "// Command (continued): "
# lines, codegen/emit_c.c; a long clone path makes the --recompute one wrap.)
cmdline='^// Command\( (continued)\)\?: '
check "--recompute none writes the sources the default writes (but the command line)" \
  diff -q <(grep -v "$cmdline" "$tmp/none/rank0.c") <(grep -v "$cmdline" "$tmp/dflt/rank0.c")
finish
