#!/usr/bin/env bash
# 16-bit training (--precision bf16|fp16, docs/training.md "16-bit training") on the 2-layer flat
# character GPT of the pipeline tests (gpt_char_l2):
# (1) per-step loss over 200 steps within a measured tolerance of the f32 run (bf16 0.05, fp16
#     0.005 absolute; measured: 0.021 and 0.0016), and not equal to it (the rounding is real);
# (2) bitwise the same across S = 1, S = 2 (1f1b, gpipe) and S = 2, V = 2 (interleaved) at each
#     precision (and with --recompute all, and --replicas 2 at zb-h1): loss log, saved master
#     weights and optimizer state (same_bits); and at the kernels' ISA level v3 against the
#     default (v4 here), v1 (OpenBLAS's GEMM, not pipec's FMA chain: march.sh) against itself
#     at 2 threads; the checkpoints hold f32 master weights (the f32 run's names, dtypes
#     and shapes);
# (3) the plan: parameters take exactly half the bytes, the optimizer state 3/2 (AdamW m and v
#     plus the f32 master weights), every message between stages half (the plan's JSON), the
#     slots fewer bytes (exact numbers from the plan's JSON), a conversion area, the precision
#     in the plan's text; --stats counts the halved bytes sent;
# (4) fp16 overflow: an initial loss scale of 2^40 overflows the first steps: each is reported,
#     skipped (the parameters and optimizer state after them are those saved at step 0, bit for
#     bit) and halves the scale, and the first update after skips is AdamW's step 1 (its bias
#     correction: |dp| about lr); from 2^24 with --loss-scale-window 3 the reported skips follow
#     the scaler's rule (halve on overflow, double after 3 good steps: the steps succeed, the
#     scale grows back and overflows again); a run resumed at step 8 (single file and sharded)
#     continues bit for bit with the same skips (the scaler's state is in the checkpoint);
# (5) bad uses: --precision fp8 and --precision on the cuda target (usage errors, exit 2), the
#     runtime's --loss-scale on a bf16 program, a --loss-scale that is not a power of two,
#     --gradcheck on a 16-bit program, fp16 gradients that overflow at the smallest scale (a
#     diverged run: --lr 1e30).
#
# Usage: precision.sh PIPEC ROOT
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
. "$root/tests/e2e/mpi_env.sh"
file=$tmp/gpt_char_l2.json
gpt_char_l2 "$file"
opts=(--threads 1 --quiet --eval-every 0 --eval-batches 1)

# ---- (5) bad uses (first: cheap)
expect "fp8" 2 "^pipec: --precision: unknown precision 'fp8' \(expected f32, bf16 or fp16\)$" \
  "$pipec" compile --precision fp8 "$file" -o "$tmp/x"
expect "cuda" 2 "^pipec: --precision bf16: 16-bit training runs the cpu target only \(not built yet for --target cuda\)$" \
  "$pipec" compile --precision bf16 --target cuda "$file" -o "$tmp/x" --no-build

# ---- (1) tolerance against f32 over 200 steps
for p in f32 bf16 fp16; do
  if ! "$pipec" compile "$file" --precision "$p" -o "$tmp/one-$p" >/dev/null 2>"$tmp/err" ||
    ! "$tmp/one-$p/bin/train" --steps 200 "${opts[@]}" --loss-log "$tmp/one-$p.loss" \
      >"$tmp/out" 2>&1; then
    bad "$p: compile or run: $(head -n 3 "$tmp/err" "$tmp/out")"
  fi
done
# within TOL at every step, and some step differs by more than 1e-5 (16-bit storage is real)
tol() {
  python3 - "$tmp/one-f32.loss" "$tmp/one-$1.loss" "$2" <<'EOF'
import sys
f = [float(l.split()[1]) for l in open(sys.argv[1])]
g = [float(l.split()[1]) for l in open(sys.argv[2])]
tol = float(sys.argv[3])
d = [abs(a - b) for a, b in zip(f, g)]
ok = len(f) == len(g) == 200 and max(d) <= tol and max(d) > 1e-5
if not ok:
    print("steps %d/%d, max |loss - f32 loss| %.6g (tolerance %g)" % (len(f), len(g), max(d), tol))
sys.exit(0 if ok else 1)
EOF
}
check "bf16 within 0.05 of f32 over 200 steps" tol bf16 0.05
check "fp16 within 0.005 of f32 over 200 steps" tol fp16 0.005

# ---- (2) bitwise across S and schedules, at each precision (3 steps, launch.sh)
# (gpipe: in the release tree; in the sanitizer tree the 16-bit channels' code runs under 1f1b and
# interleaved, gpipe's schedule in the equality matrix)
for p in bf16 fp16; do
  pipe_same "$p-s2-1f1b" "$file" 2 4 1f1b --precision "$p"
  sanitized "$tmp/one-f32/bin/train" || pipe_same "$p-s2-gpipe" "$file" 2 4 gpipe --precision "$p"
  pipe_same "$p-s4-interleaved" "$file" 2 4 'interleaved --virtual 2' --precision "$p"
done
# with --recompute and --replicas 2 too (against the one-stage run with the same options)
pipe_same "bf16-s2-recompute" "$file" 2 4 1f1b --precision bf16 --recompute all
pipe_same "fp16-s2-replicas" "$file" 2 4 zb-h1 --precision fp16 --replicas 2

# ... and at every ISA level of the kernels (the conversions are integer code; march.sh's promise:
# v3 = v4; v1 runs OpenBLAS's GEMM, whose order is its own, so v1 is compared with itself at 2
# threads)
for p in bf16 fp16; do
  for isa in v1 v3 v1t2; do
    PIPEC_ISA=${isa%t2} "$tmp/one-$p/bin/train" --steps 3 "${opts[@]}" --save "$tmp/isa-$p-$isa.st" \
      --loss-log "$tmp/isa-$p-$isa.loss" $([ $isa = v1t2 ] && echo --threads 2) >"$tmp/out" 2>&1 ||
      bad "$p $isa: $(tail -n 2 "$tmp/out")"
  done
  "$tmp/one-$p/bin/train" --steps 3 "${opts[@]}" --save "$tmp/isa-$p.st" --loss-log "$tmp/isa-$p.loss" \
    >"$tmp/out" 2>&1 || bad "$p: $(tail -n 2 "$tmp/out")"
  same_bits "$p: PIPEC_ISA=v1 its own bits at 2 threads" "$tmp/isa-$p-v1" "$tmp/isa-$p-v1t2"
  same_bits "$p: PIPEC_ISA=v3 the default's bits" "$tmp/isa-$p" "$tmp/isa-$p-v3"
done

# The checkpoint holds the f32 master weights: the f32 run's names, dtypes (F32) and shapes
"$tmp/one-f32/bin/train" --steps 3 "${opts[@]}" --save "$tmp/ck-f32.st" >"$tmp/out" 2>&1 || bad "f32 save: $(tail -n 2 "$tmp/out")"
layout() {
  python3 -c '
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
print(sorted((k, v["dtype"], v["shape"]) for k, v in h.items() if k != "__metadata__"))' "$1"
}
for p in bf16 fp16; do
  for f in st st.optim; do
    check "$p: the checkpoint ($f) is f32's layout" \
      eval '[ "$(layout "$tmp/ck-f32.$f")" = "$(layout "$tmp/isa-$p.$f")" ] && grep -q F32 <(layout "$tmp/isa-$p.$f")'
  done
done

# ---- (3) the plan's bytes, at one cut (the automatic partitioner weighs 16-bit messages and
# activations, so at bf16 it may cut elsewhere)
cut=(--split transformer.h.1.ln_1)
for p in f32 bf16; do
  "$pipec" plan --stages 2 --microbatches 4 --precision "$p" "${cut[@]}" "$file" --json "$tmp/plan-$p.json" \
    >"$tmp/plan-$p.txt" 2>&1 || bad "plan $p: $(head -n 3 "$tmp/plan-$p.txt")"
done
# The partition table's estimates count 16-bit bytes: the one activation sent (B,16,32) at 3
# rows, 6144 bytes in f32, 3072 in bf16.
for p in f32 bf16; do
  want=$([ $p = f32 ] && echo "6.14 KB" || echo "3.07 KB")
  got=$(grep -m1 '^  sends' "$tmp/plan-$p.txt")
  check "$p: the partition table's sends: $got" test "$got" = "  sends     $want activations, 0 B gradients per microbatch"
done
# ... and the memory estimate the plan's conversion area (73728 B at this cut, checked below);
# f32 has none.
got=$(grep -m1 '^  memory' "$tmp/plan-bf16.txt")
check "bf16: the partition table's memory counts the conversion area: $got" \
  grep -q '; conversion area 73.73 KB)$' <<<"$got"
check "f32: no conversion area in the estimate" test -z "$(grep '^  memory.*conversion' "$tmp/plan-f32.txt")"
plan_bytes() {
  python3 - "$tmp/plan-f32.json" "$tmp/plan-bf16.json" <<'EOF'
import json, sys
f, h = (json.load(open(a)) for a in sys.argv[1:3])
bad = []
for r, (a, b) in enumerate(zip(f["rank_programs"], h["rank_programs"])):
    a, b = a["memory"], b["memory"]
    if b["params"] * 2 != a["params"]: bad.append("rank %d params %d vs %d" % (r, b["params"], a["params"]))
    if b["optimizer"] * 2 != a["optimizer"] * 3: bad.append("rank %d optimizer %d vs %d" % (r, b["optimizer"], a["optimizer"]))
    if b["grads"] != a["grads"]: bad.append("rank %d grads %d vs %d" % (r, b["grads"], a["grads"]))
    if "conversion_area" in a or b.get("conversion_area") != 73728: bad.append("rank %d conversion area %s" % (r, b.get("conversion_area")))
# the slots: every 16-bit buffer at 2 bytes (numbers of this plan, f32 160704 and 179904; rank 0's
# sent activation lives only to its wait before B, the send-wait rule: 166848 and 99264 before)
slots = [[s["slot_bytes"] for s in x["memory"]["slots"]] for x in h["rank_programs"]]
if slots != [[96192], [112256]]: bad.append("bf16 slots %s" % slots)
fc = [c["bytes"] for c in f["channels"]]
hc = [c["bytes"] for c in h["channels"]]
if len(fc) != 3 or [2 * x for x in hc] != fc: bad.append("channels %s vs %s" % (hc, fc))
print("; ".join(bad))
sys.exit(1 if bad else 0)
EOF
}
check "plan bytes at bf16 against f32" plan_bytes
check "plan text names the precision" \
  grep -qx 'memory plans of gpt_char_l2: batch 12 = 4 microbatches of 3, adamw, bf16 storage, 2 ranks' "$tmp/plan-bf16.txt"
check "plan text names the conversion area" \
  grep -q '^rank 0: params 29888 B, .*; conversion area 73728 B), total 551744 B' "$tmp/plan-bf16.txt"
# --stats: the bytes rank 0 sends in 3 steps (its activation channel; the exchange of the tied
# embedding's gradient stays f32)
sent() {
  "$pipec" compile "$file" --stages 2 --microbatches 4 --precision "$1" "${cut[@]}" -o "$tmp/st-$1" >/dev/null 2>&1 &&
    "$tmp/st-$1/launch.sh" --steps 3 --threads 1 --eval-every 0 --eval-batches 1 --stats \
      --log-every 3 >"$tmp/st-$1.out" 2>&1
}
stats_half() {
  sent f32 && sent bf16 || return 1
  python3 - "$tmp/st-f32.out" "$tmp/st-bf16.out" <<'EOF'
import re, sys
def sent(path):  # per rank: the bytes sent per step in the table of the whole run
    rows, on = {}, False
    for line in open(path):
        on = on or "statistics of the run" in line
        m = re.match(r"\[rank \d\]\s+(\d)\s+(\S+\s+){5}(\S+ \S+)\s+\S+ \S+$", line)
        if on and m: rows[int(m.group(1))] = m.group(3)
    return rows
# per step: 4 microbatches x 3072 (f32 6144) bytes per channel, 1 channel from rank 0, 2 from
# rank 1, and each the tied embedding's f32 gradient (8320 bytes)
want = ({0: "32.1 KiB", 1: "56.1 KiB"}, {0: "20.1 KiB", 1: "32.1 KiB"})
got = (sent(sys.argv[1]), sent(sys.argv[2]))
if got != want: print("sent per step: f32 %s, bf16 %s; want %s, %s" % (got + want))
sys.exit(0 if got == want else 1)
EOF
}
check "--stats: the bytes sent per step at bf16" stats_half

# ---- (4) fp16 overflow and the loss scaler
h=$tmp/one-fp16/bin/train
"$h" --steps 0 "${opts[@]}" --save "$tmp/s0.st" >"$tmp/out" 2>&1 || bad "fp16 save at step 0: $(tail -n 2 "$tmp/out")"
"$h" --steps 3 --threads 1 --eval-every 0 --eval-batches 1 --loss-scale 0x1p40 --save "$tmp/s3.st" \
  >"$tmp/ov.out" 2>&1 || bad "fp16 overflow run: $(tail -n 2 "$tmp/ov.out")"
check "overflow: steps 1-3 reported skipped, the scale halving" \
  diff <(grep 'overflow' "$tmp/ov.out") <(printf '%s\n' \
    "step 1: fp16 gradient overflow at loss scale 2^40: step skipped, loss scale 2^39" \
    "step 2: fp16 gradient overflow at loss scale 2^39: step skipped, loss scale 2^38" \
    "step 3: fp16 gradient overflow at loss scale 2^38: step skipped, loss scale 2^37")
for f in st st.optim; do
  check "overflow: $f after 3 skipped steps is step 0's, bit for bit" \
    python3 "$root/tests/e2e/st_tool.py" same-tensors "$tmp/s0.$f" "$tmp/s3.$f"
done
# A skipped step is no update: the optimizer's step counter counts the updates made (torch's
# GradScaler skips optimizer.step()). From 2^24 the first 3 steps overflow; step 4 is AdamW's
# first update, whose bias correction makes |dp| = lr |g| / (|g| + eps), about lr, on every
# element (counted as AdamW's step 4 it would be 0.577 lr). Layernorm weights (no decay), lr
# 1e-3 without warmup.
"$pipec" compile "$file" --precision fp16 --set schedule.warmup=0 -o "$tmp/w0" >/dev/null 2>&1 ||
  bad "compile fp16 without warmup"
w0=(--threads 1 --eval-every 0 --eval-batches 1 --loss-scale 0x1p24)
"$tmp/w0/bin/train" --steps 3 "${w0[@]}" --save "$tmp/w3.st" >/dev/null 2>&1 &&
  "$tmp/w0/bin/train" --steps 4 "${w0[@]}" --save "$tmp/w4.st" >"$tmp/w4.out" 2>&1 ||
  bad "fp16 runs without warmup: $(tail -n 2 "$tmp/w4.out")"
check "overflow: steps 1-3 of the run without warmup skipped" \
  test "$(grep -c 'step [123]: fp16 gradient overflow' "$tmp/w4.out")" = 3
first=$(python3 "$root/tests/e2e/st_tool.py" median-step "$tmp/w3.st" "$tmp/w4.st" .ln_)
check "overflow: the first update after 3 skips is AdamW's step 1 (median |dp|, elements: $first)" \
  python3 -c 'import sys; d, n = sys.argv[1].split(); sys.exit(not (int(n) > 10 and 0.95e-3 < float(d) < 1.0001e-3))' "$first"
# The scaler against its rule over 16 steps from 2^24 (this model overflows from about 2^22),
# window 3: every reported skip is at the scale the rule gives (halved on a skip, doubled after 3
# good steps), the scale doubles at least once and a doubled scale overflows again.
sc=(--threads 1 --eval-every 0 --eval-batches 1 --loss-scale 0x1p24 --loss-scale-window 3)
"$h" --steps 16 "${sc[@]}" --save "$tmp/w16.st" --loss-log "$tmp/w16.loss" >"$tmp/w16.out" 2>&1 ||
  bad "fp16 window run: $(tail -n 2 "$tmp/w16.out")"
scaler_rule() {
  python3 - "$tmp/w16.out" <<'EOF'
import re, sys
skips = {}
for line in open(sys.argv[1]):
    m = re.match(r"step (\d+): fp16 gradient overflow at loss scale 2\^(-?\d+): step skipped, loss scale 2\^(-?\d+)$", line)
    if m: skips[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
e, good, grew, regrown = 24, 0, False, False
for step in range(1, 17):
    if step in skips:
        if skips[step] != (e, e - 1): sys.exit("step %d: reported %s, the rule's scale 2^%d" % (step, skips[step], e))
        regrown |= grew
        e, good = e - 1, 0
    else:
        good += 1
        if good == 3: e, good, grew = e + 1, 0, True
if not (1 in skips and grew and regrown): sys.exit("skips %s: no skip at step 1, no doubling, or no overflow after one" % sorted(skips))
EOF
}
check "fp16 loss scaler: halves on overflow, doubles after the window" scaler_rule
# --resume continues the scaler bit for bit (its state is in the checkpoint): 8 steps, saved,
# resumed to 16, against the 16 straight (single file and sharded)
for form in file dir; do
  s=$tmp/r8-$form.st
  [ $form = dir ] && s=$tmp/r8-dir/
  "$h" --steps 8 "${sc[@]}" --save "$s" --loss-log "$tmp/r8-$form.a" >"$tmp/r8.out" 2>&1 &&
    "$h" --steps 16 "${sc[@]}" --resume "$s" --save "$tmp/r16-$form.st" --loss-log "$tmp/r8-$form.b" \
      >"$tmp/r16-$form.out" 2>&1 || bad "fp16 resume ($form): $(tail -n 2 "$tmp/r8.out" "$tmp/r16-$form.out")"
  cat "$tmp/r8-$form.a" "$tmp/r8-$form.b" >"$tmp/r16-$form.loss"
  same_bits "fp16 resume ($form) continues the scaler" "$tmp/w16" "$tmp/r16-$form"
  grep -E '^step (9|1[0-6]): fp16' "$tmp/w16.out" >"$tmp/w16.skips"
  grep 'fp16 gradient' "$tmp/r16-$form.out" >"$tmp/r16-$form.skips"
  check "fp16 resume ($form): the same skips after step 8 (some)" \
    eval '[ -s "$tmp/w16.skips" ] && cmp -s "$tmp/w16.skips" "$tmp/r16-$form.skips"'
done

# ---- (5) the runtime's bad uses
b=$tmp/one-bf16/bin/train
expect "--loss-scale on bf16" 1 "^trainloop.c:[0-9]+: rank 0: error: --loss-scale and --loss-scale-window: only an fp16 program scales its loss \(this one is bf16\)$" \
  "$b" --steps 1 --loss-scale 1024
expect "--loss-scale not a power of two" 2 "loss-scale: expected a power of two from 2\^-24 to 2\^120, got '1000'$" \
  "$h" --steps 1 --loss-scale 1000
expect "fp16: not finite at the smallest scale" 1 "^half.c:[0-9]+: rank 0: error: step 6: fp16: the gradients are not finite even at loss scale 2\^-24 \(4 steps skipped before\)$" \
  "$h" --steps 20 --threads 1 --eval-every 0 --eval-batches 1 --loss-scale 0x1p-20 --lr 1e30
expect "--gradcheck on bf16" 1 "^trainloop.c:[0-9]+: rank 0: error: --gradcheck needs f32 storage; this program was compiled with --precision bf16$" \
  "$b" --gradcheck
finish
