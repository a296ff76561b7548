#!/usr/bin/env bash
# Stage replication (--replicas D, docs/pipeline.md "Stage replication"): at D = 2 and M = 4 the
# pure data-parallel job (S = 1, 2 ranks) and the 2-stage pipelines under 1f1b and zb-h1 (4 ranks)
# write the same loss log and the same checkpoint pair, byte for byte (the promise across S and
# schedules at a fixed D); against D = 1 (the same global batch and M) the losses and the
# parameters after 5 steps stay within the stated tolerance (losses: relative 1e-6; parameters
# and optimizer state: 1e-5 of each tensor's largest magnitude; measured 0 at the loss log's 9
# digits and 7e-8 / 2e-7); a checkpoint written at D = 2 resumes at D = 2 bit for bit (one file,
# and a sharded directory) and continues at D = 1; the exchange is overlapped (buckets per action,
# layer and 1 MiB, sent from inside a stage's last B or W right after the kernel that makes them
# final, and after the tied sums; the same bits as the step-end exchange; --stats shows its
# exposed wait); per-stage counts: equal ones are the uniform form; PipeDream's uneven form
# (2,1, 4,1, 1,4 at S = 2, 2,1,1 at S = 3, 2,1,2 with a tied parameter: bitwise or within the
# tolerance as its section says, resumes, the plan's lists); the bad uses with their messages.
# The model is the flat 2-layer character GPT of pipeline_checkpoint.sh (tied embedding and head
# on different stages at S = 2); the per-layer buckets are checked on models with repeat blocks
# (gpt_char itself, a 3-layer GPT of width 32 that runs, one of width 256 compiled only).
pipec=$1
root=$2
shim=${3-} # tests/alloc's allocation counter (count_alloc.so), for the no-allocation check
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
st() { python3 "$root/tests/e2e/st_tool.py" "$@"; }
. "$root/tests/e2e/mpi_env.sh"
file=$tmp/gpt_char_l2.json
gpt_char_l2 "$file"
common=(--batch 24 --microbatches 4)
run_args=(--threads 1 --quiet --eval-every 0 --eval-batches 1)

build d1
build d2s1 --replicas 2
build d2s2 --replicas 2 --stages 2 --schedule 1f1b
build d2zb --replicas 2 --stages 2 --schedule zb-h1
build d2v2 --replicas 2 --stages 2 --schedule interleaved --virtual 2

# The compile's message and launch.sh: S x D processes, world rank d * S + s runs bin/rank<s>.
check "compile message at S = 2, D = 2" grep -q 'launch.sh (4 ranks: 2 stages x 2 replicas)$' \
  "$tmp/d2s2.msg"
check "launch.sh runs S x D processes in world-rank order" \
  test "$(grep -o '/bin/rank[0-9]*"' "$tmp/d2s2/launch.sh" | tr '\n' ' ')" = \
  '/bin/rank0" /bin/rank1" /bin/rank0" /bin/rank1" '
check "launch.sh at S = 1, D = 2: two processes" \
  test "$(grep -c 'bin/rank0' "$tmp/d2s1/launch.sh")" = 2

go d1 ref1 --steps 5 --save "$tmp/ref1.st"
go d2s1 s1 --steps 5 --save "$tmp/s1.st"
go d2s2 s2 --steps 5 --save "$tmp/s2.st"
go d2zb zb --steps 5 --save "$tmp/zb.st"
go d2v2 v2 --steps 5 --save "$tmp/v2.st"
PIPEC_REPLICAS_OVERLAP=0 go d2v2 v2sync --steps 5 --save "$tmp/v2sync.st"

# At D = 2: bitwise identical across S and schedules.
same_bits "D = 2: S = 2 1f1b = S = 1" "$tmp/s1" "$tmp/s2"
same_bits "D = 2: S = 2 zb-h1 = S = 1" "$tmp/s1" "$tmp/zb"
same_bits "D = 2: S = 2 zb-h1 = S = 2 1f1b" "$tmp/s2" "$tmp/zb"
same_bits "D = 2: S = 2 interleaved (V = 2) = S = 1" "$tmp/s1" "$tmp/v2"

# The overlapped exchange: a bucket per point where gradients become final, sent right there. On
# rank 0 of the interleaved pipeline (stages 0 and 2) stage 2's bucket goes from inside its last
# backward B(v2, m1), right after the kernel that makes its last gradient (the attention's
# c_proj, before the attention's backward), before stage 0's backward runs; stage 0's from inside
# B(v0, m1), after the embedding's wpe gradient; the tied embedding's after its sum (step_end_0).
# train_step sets rep_final around those two actions only (the guard of the calls inside). The
# same bits with the exchange at the step end (PIPEC_REPLICAS_OVERLAP=0), and --stats shows the
# exchange's exposed wait.
# ready_after FILE FUNCTION: each pr_replicas_ready call in FUNCTION's body after the node of the
# call before it ("NODE>CALL": the last comment before it, a call's node name, at the end of the
# call's line or on its own line above a call that leaves it no room), and its loops' "for{" and
# "}".
ready_after() {
  awk -v fn="$2" '$0 ~ "^static void " fn "\\(" { on = 1; next } on && /^}/ { exit }
    on && /^  for \(int l/ { printf "for{ " } on && /^  }$/ { printf "} " }
    on && /pr_replicas_ready/ { match($0, /pr_replicas_ready\([^)]*\)/)
      printf "%s>%s ", node, substr($0, RSTART + 18, RLENGTH - 19); next }
    on && /\/\/ / { n = split($0, w, "// "); node = w[n] }' "$1"
}
check "overlap: stage 2's bucket 0 from inside B_2, after the attention's c_proj gradient" test \
  "$(ready_after "$tmp/d2v2/rank0.c" B_2)" = 'transformer.h.1.attn.c_proj:d1>0 '
check "overlap: stage 0's bucket 1 from inside B_0, after the wpe gradient" test \
  "$(ready_after "$tmp/d2v2/rank0.c" B_0)" = 'transformer.emb:d1>1 '
check "overlap: rep_final around B(v2, m1) and B(v0, m1) only, the tied bucket after step_end_0" test \
  "$(grep -E -o 'B_[0-9]\([01], [01]\)|step_end_0\(\)|rep_final = [a-z]*;|^  pr_replicas_ready\([0-9]\)' "$tmp/d2v2/rank0.c" |
    tr '\n' ' ')" = \
  'B_2(0, 0) rep_final = true; B_2(1, 1) rep_final = false; B_0(0, 0) rep_final = true; B_0(1, 1) rep_final = false; step_end_0()   pr_replicas_ready(2) '
check "overlap: rank 0's 3 buckets (stage 2's 3 parameters, stage 0's 6, the tied embedding)" \
  grep -q '^static const int REP_END\[3\] = {3, 9, 10}; // 0: 41 1: 53 2: 58$' "$tmp/d2v2/rank0.c"
# Per-layer buckets inside one stage's backward (S = 1, plain data parallel): gpt_char's 4 layers
# (repeat-block instances) make 4 buckets of its one backward, ln_f's and wpe's 2 more (the nodes
# outside the blocks), in the order the backward makes them final: ln_f, layer 3, layers 2, 1, 0
# (the loop over instances 2 to 0 sends bucket 2 + l), wpe; the tied embedding's a seventh, after
# its sum. Each layer (about 0.77 MiB) is under the bucket size (1 MiB).
"$pipec" compile samples/gpt_char.json --batch 24 --microbatches 2 --replicas 2 -o "$tmp/g12" \
  >/dev/null 2>"$tmp/g12.msg" || bad "compile g12: $(head -2 "$tmp/g12.msg")"
check "per layer: gpt_char's backward sends its buckets after ln_f, each layer, wpe" test \
  "$(ready_after "$tmp/g12/rank0.c" B_0)" = \
  'transformer.ln_f:d1>0 transformer.h.3.ln_1:d1>1 for{ transformer.h[2 - l].ln_1:d1>2 + l } transformer.emb:d1>5 '
check "per layer: gpt_char's bucket table (ln_f, 4 layers of 6, wpe; the tied embedding)" \
  grep -q '^static const int REP_END\[7\] = {1, 7, 13, 19, 25, 26, 27}; // 0: 3 1: 3 2: 3 3: 3 4: 3 5: 3 6: 4$' \
  "$tmp/g12/rank0.c"
check "per layer: gpt_char's buckets in the order they become final (layer 3's first)" test \
  "$(grep -A1 '^static const int REP_PARAM\[27\]' "$tmp/g12/rank0.c" | tr -d '\n')" = \
  'static const int REP_PARAM[27] = {2, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13,    12, 11, 10, 9, 8, 7, 6, 5, 4, 1, 0};'
# The bucket size (1 MiB, codegen/buckets.c) within a layer: C = 256 makes 3 MiB per layer,
# mlp.c_proj (1 MiB) and mlp.c_fc (1 MiB) a bucket each, ln_2 + attn.c_proj (257 KiB) one,
# attn.c_attn + ln_1 (769 KiB) one: 4 per layer, the loop over layers 1 to 0 sends 4 + l * 4 ..
python3 "$root/samples/gen_gpt.py" --layers 3 --heads 4 --embd 256 --context 16 --name gpt_wide \
  >"$tmp/wide.json" || bad "gen_gpt.py gpt_wide"
"$pipec" compile "$tmp/wide.json" --batch 4 --microbatches 2 --replicas 2 -o "$tmp/wide" \
  --no-build >/dev/null 2>"$tmp/wide.msg" || bad "compile wide: $(head -2 "$tmp/wide.msg")"
check "bucket size: 4 buckets per 3 MiB layer, the loop's at 4 + l * 4 .. 7 + l * 4" test \
  "$(ready_after "$tmp/wide/rank0.c" B_0)" = \
  'transformer.ln_f:d1>0 transformer.h.2.mlp.c_proj:d1>1 transformer.h.2.mlp.c_fc:d1>2 transformer.h.2.attn.c_proj:d1>3 transformer.h.2.ln_1:d1>4 for{ transformer.h[1 - l].mlp.c_proj:d1>5 + l * 4 transformer.h[1 - l].mlp.c_fc:d1>6 + l * 4 transformer.h[1 - l].attn.c_proj:d1>7 + l * 4 transformer.h[1 - l].ln_1:d1>8 + l * 4 } transformer.emb:d1>13 '
# And at run time, on a 3-layer GPT with repeat blocks at M / D = 2 microbatches per replica: the
# buckets go from inside the second B only (rep_final; the first would send them again: an
# error); the bits are the step-end exchange's and the 2-stage zb-h1 pipeline's (its W sends from
# inside); --stats still shows the exposed wait.
python3 "$root/samples/gen_gpt.py" --layers 3 --heads 2 --embd 32 --context 16 --bias \
  --name gpt_blk | sed "s#\"../../shared/data/#\"$root/../shared/data/#" >"$tmp/blk.json" ||
  bad "gen_gpt.py gpt_blk"
for cfg in "b1" "b2zb --stages 2 --schedule zb-h1"; do
  set -- $cfg
  n=$1
  shift
  "$pipec" compile "$tmp/blk.json" "${common[@]}" --replicas 2 "$@" -o "$tmp/$n" >/dev/null \
    2>"$tmp/$n.msg" || bad "compile $n: $(head -3 "$tmp/$n.msg")"
done
check "per layer at run time: B_0's buckets after ln_f, layer 2, the loop over 1, 0, wpe" test \
  "$(ready_after "$tmp/b1/rank0.c" B_0)" = \
  'transformer.ln_f:d2>0 transformer.h.2.ln_1:d2>1 for{ transformer.h[1 - l].ln_1:d2>2 + l } transformer.emb:d1>4 '
check "per layer at run time: rep_final around the second B only" test \
  "$(grep -E -o 'B_0\([01], [01]\)|rep_final = [a-z]*;' "$tmp/b1/rank0.c" | tr '\n' ' ')" = \
  'B_0(0, 0) rep_final = true; B_0(0, 1) rep_final = false; '
check "per layer at S = 2 zb-h1: rank 1's W_1 sends layer 2's weight GEMMs' bucket from inside" \
  test "$(ready_after "$tmp/b2zb/rank1.c" W_1)" = 'transformer.h.2.attn.c_attn:d1>2 '
go b1 b1 --steps 5 --save "$tmp/b1.st"
PIPEC_REPLICAS_OVERLAP=0 go b1 b1sync --steps 5 --save "$tmp/b1sync.st"
go b2zb b2zb --steps 5 --save "$tmp/b2zb.st"
same_bits "per layer, S = 1: the exchange at the step end (PIPEC_REPLICAS_OVERLAP=0) = overlapped" \
  "$tmp/b1" "$tmp/b1sync"
same_bits "per layer: S = 2 zb-h1 = S = 1 at D = 2" "$tmp/b1" "$tmp/b2zb"
timeout -k 5 120 "$tmp/b1/launch.sh" --threads 1 --eval-every 0 --eval-batches 1 --steps 2 \
  --stats --log-every 2 </dev/null >"$tmp/st_b1.out" 2>&1 || bad "--stats b1: $(tail -2 "$tmp/st_b1.out")"
check "per layer: --stats' exposed wait line (6 buckets, overlapped)" grep -qE \
  "^\[rank 0\]   replicas' gradient exchange \(6 buckets, overlapped\), exposed wait ms per step: rank 0 [0-9]+\.[0-9]{2}\$" \
  "$tmp/st_b1.out"
same_bits "D = 2 interleaved: the exchange at the step end (PIPEC_REPLICAS_OVERLAP=0) = overlapped" \
  "$tmp/v2" "$tmp/v2sync"
for mode in overlapped sync; do
  env_=()
  [ $mode = sync ] && env_=(PIPEC_REPLICAS_OVERLAP=0)
  env "${env_[@]}" timeout -k 5 120 "$tmp/d2v2/launch.sh" --threads 1 --eval-every 0 \
    --eval-batches 1 --steps 2 --stats --log-every 2 </dev/null >"$tmp/st_$mode.out" 2>&1 ||
    bad "--stats ($mode): $(tail -2 "$tmp/st_$mode.out")"
done
re_ms='[0-9]+\.[0-9]{2}'
check "--stats: the exchange's exposed wait per rank, overlapped" test "$(grep -cE \
  "^\[rank 1\]   replicas' gradient exchange \(3 buckets, overlapped\), exposed wait ms per step: rank 0 $re_ms, rank 1 $re_ms\$" \
  "$tmp/st_overlapped.out")" = 2
check "--stats: the exchange's wait at the step end (PIPEC_REPLICAS_OVERLAP=0)" grep -qE \
  "^\[rank 1\]   replicas' gradient exchange \(3 buckets, at the step end: PIPEC_REPLICAS_OVERLAP=0\), exposed wait ms per step: rank 0 $re_ms, rank 1 $re_ms\$" \
  "$tmp/st_sync.out"
check "D = 2: 5 losses logged" test "$(wc -l <"$tmp/s1.loss")" = 5
# One replica reports: one progress line source, only replica 0's report rank (world rank 1).
check "D = 2, S = 2: the eval line once, from world rank 1" \
  test "$(grep -c 'eval  step 5' "$tmp/s2.out")" = 1 -a "$(grep -c '^\[rank 1\] eval  step 5' "$tmp/s2.out")" = 1

# Across D (D = 1 against D = 2, the same global batch and M): within the stated tolerance, and
# not bitwise (the gradients are summed in another order: a test that could not fail otherwise).
maxrel_loss() {
  paste "$1" "$2" | awk '{ if ($1 != $3) { print "step mismatch"; exit } d = $2 - $4; if (d < 0) d = -d;
    r = d / ($2 < 0 ? -$2 : $2); if (r > m) m = r } END { printf "%.3g\n", m + 0 }'
}
# close_runs NAME REF RUN: RUN's losses within 1e-6 of REF's, its parameters and optimizer state
# within 1e-5 (max relative differences), and its parameters not bitwise REF's.
close_runs() {
  local rl rp ro
  rl=$(maxrel_loss "$2.loss" "$3.loss")
  rp=$(st maxrel "$2.st" "$3.st")
  ro=$(st maxrel "$2.st.optim" "$3.st.optim")
  echo "$1: losses max relative difference $rl, parameters $rp, optimizer state $ro"
  check "$1: losses within 1e-6 ($rl)" awk -v r="$rl" 'BEGIN { exit !(r < 1e-6) }'
  check "$1: parameters within 1e-5 ($rp)" awk -v r="$rp" 'BEGIN { exit !(r < 1e-5) }'
  check "$1: optimizer state within 1e-5 ($ro)" awk -v r="$ro" 'BEGIN { exit !(r < 1e-5) }'
  check "$1: the parameters are not bitwise equal (another summation order)" test "$rp" != 0
}
close_runs "D = 1 vs D = 2 after 5 steps" "$tmp/ref1" "$tmp/s1"

# D = M (one microbatch per replica) on a model without shared parameters: the replicas' sum
# g0 + g1 + g2 + g3 in replica order is the D = 1 program's accumulation, so the bits are D = 1's
# (measured; gpt_char's tied embedding and head sum their two uses per replica instead).
digits=(samples/mlp_digits.json --microbatches 4)
"$pipec" compile "${digits[@]}" -o "$tmp/dg1" >/dev/null 2>"$tmp/dg.msg" || bad "compile dg1: $(head -2 "$tmp/dg.msg")"
"$pipec" compile "${digits[@]}" --replicas 4 --stages 2 -o "$tmp/dg4" >/dev/null 2>"$tmp/dg.msg" ||
  bad "compile dg4: $(head -2 "$tmp/dg.msg")"
go dg1 dg1 --steps 3 --save "$tmp/dg1.st"
go dg4 dg4 --steps 3 --save "$tmp/dg4.st"
same_bits "mlp_digits at D = M = 4, S = 2 (8 ranks): the bits of D = 1" "$tmp/dg1" "$tmp/dg4"
# A rank without parameters (mlp_digits' stage 3 of 4 holds only the loss) has no bucket to send
# from inside a backward: its program declares no rep_final (unused: -Werror) and builds.
"$pipec" compile "${digits[@]}" --replicas 2 --stages 4 -o "$tmp/dg24" >/dev/null 2>"$tmp/dg.msg"
check "a rank without parameters at D = 2 builds ($(grep -m1 error "$tmp/dg.msg"))" \
  test -x "$tmp/dg24/bin/rank3"

# PipeDream's uneven form (--replicas D0,D1,..., counts that differ; docs/pipeline.md): stage s on
# D_s ranks, stage by stage in the world (launch.sh), replica r of stage s runs the microbatches
# m with m mod D_s = r of the unreplicated list, microbatch m's messages pair replica m mod D_s
# with replica m mod D_t. Where every D_s is 1 or M the bits are the unreplicated run's (each
# replica's sum is one microbatch's, the replica-order sum the accumulation order); otherwise
# within the tolerance (measured on mlp_digits, M = 4, 3 steps: 2,1 and 2,1,1 at 1.2e-7 of the
# parameters, 1.5e-7 of the optimizer state, losses equal at the log's 9 digits), bitwise across
# schedules with the same cut (1f1b, gpipe, zb-h1 at 2,1).
u=(--microbatches 4)
for cfg in "ud2 --stages 2" "ud3 --stages 3" "u21 --stages 2 --replicas 2,1" \
  "u41 --stages 2 --replicas 4,1" "u14 --stages 2 --replicas 1,4" \
  "u21g --stages 2 --replicas 2,1 --schedule gpipe" "u21zb --stages 2 --replicas 2,1 --schedule zb-h1" \
  "u211 --stages 3 --replicas 2,1,1"; do
  set -- $cfg
  n=$1
  shift
  "$pipec" compile samples/mlp_digits.json "${u[@]}" "$@" -o "$tmp/$n" >/dev/null 2>"$tmp/$n.msg" ||
    bad "compile $n: $(head -3 "$tmp/$n.msg")"
done
check "uneven: the compile message (3 ranks)" grep -q \
  'launch.sh (3 ranks: stages on 2,1 replicas)$' "$tmp/u21.msg"
check "uneven: launch.sh runs stage 0's 2 replicas, then stage 1's" \
  test "$(grep -o '/bin/rank[0-9]*"' "$tmp/u21/launch.sh" | tr '\n' ' ')" = \
  '/bin/rank0" /bin/rank0" /bin/rank1" '
check "uneven: 2,1,1 at S = 3 starts 4 processes" \
  test "$(grep -o '/bin/rank[0-9]*"' "$tmp/u211/launch.sh" | tr '\n' ' ')" = \
  '/bin/rank0" /bin/rank0" /bin/rank1" /bin/rank2" '
check "uneven: replica r of stage 0 runs the microbatches m mod 2 = r (B(v0, m3) on replica 1)" \
  grep -q -A1 '^  if (pr_replica == 1) { // m3.s replica$' "$tmp/u21/rank0.c"
for n in ud2 u21 u41 u14 u21g u21zb ud3 u211; do go "$n" "$n" --steps 3 --save "$tmp/$n.st"; done
same_bits "uneven 4,1 (D_0 = M): the bits of the unreplicated run" "$tmp/ud2" "$tmp/u41"
same_bits "uneven 1,4 (D_1 = M): the bits of the unreplicated run" "$tmp/ud2" "$tmp/u14"
same_bits "uneven 2,1: gpipe = 1f1b" "$tmp/u21" "$tmp/u21g"
same_bits "uneven 2,1: zb-h1 = 1f1b" "$tmp/u21" "$tmp/u21zb"
close_runs "uneven 2,1 vs D = 1 after 3 steps" "$tmp/ud2" "$tmp/u21"
close_runs "uneven 2,1,1 vs D = 1 after 3 steps" "$tmp/ud3" "$tmp/u211"
check "uneven 2,1: the eval line once, from world rank 2 (stage 1's replica 0)" \
  test "$(grep -c 'eval  step 3' "$tmp/u21.out")" = 1 -a "$(grep -c '^\[rank 2\] eval  step 3' "$tmp/u21.out")" = 1
# Checkpoints: replica 0 of each stage saves; a resume continues bit for bit at the same layout
# (one file and a sharded directory) and within the tolerance at D = 1.
go u21 u21two --steps 1 --save "$tmp/u21two.st"
go u21zb u21res --steps 3 --resume "$tmp/u21two.st" --save "$tmp/u21res.st"
check "uneven: resume 2,1 (zb-h1) from 2,1's step 1: the unstopped run's pair" \
  cmp -s "$tmp/u21res.st" "$tmp/u21.st"
check "uneven: resume: the optimizer state" cmp -s "$tmp/u21res.st.optim" "$tmp/u21.st.optim"
check "uneven: resume: the losses of steps 1..2" \
  test "$(cat "$tmp/u21res.loss")" = "$(awk '$1 >= 1' "$tmp/u21.loss")"
go u21 u21sh --steps 1 --save "$tmp/u21sh/"
check "uneven: sharded save at 2,1: two shards (each stage's replica 0)" \
  test -e "$tmp/u21sh/model-00002-of-00002.safetensors" -a ! -e "$tmp/u21sh/model-00003-of-00003.safetensors"
go u21 u21rsh --steps 3 --resume "$tmp/u21sh/" --save "$tmp/u21rsh.st"
check "uneven: resume a sharded 2,1 checkpoint: the unstopped run's parameters" \
  cmp -s "$tmp/u21rsh.st" "$tmp/u21.st"
check "uneven: resume a sharded 2,1 checkpoint: its optimizer state" \
  cmp -s "$tmp/u21rsh.st.optim" "$tmp/u21.st.optim"
go ud2 u21d1 --steps 3 --resume "$tmp/u21two.st" --save "$tmp/u21d1.st"
r1=$(st maxrel "$tmp/ud2.st" "$tmp/u21d1.st")
check "uneven: 2,1's checkpoint resumed at D = 1: within 1e-5 of the D = 1 run ($r1)" \
  awk -v r="$r1" 'BEGIN { exit !(r < 1e-5) }'
timeout -k 5 120 "$tmp/u211/launch.sh" "${run_args[@]}" --steps 2 --stats --log-every 2 </dev/null \
  >"$tmp/u211st.out" 2>&1 || bad "--stats u211: $(tail -2 "$tmp/u211st.out")"
check "uneven: --stats' table of the pipeline's 3 ranks and the exchange's wait line" grep -qE \
  "^\[rank 3\]   replicas' gradient exchange \(overlapped\), exposed wait ms per step: rank 0 $re_ms, rank 1 $re_ms, rank 2 $re_ms\$" \
  "$tmp/u211st.out"
# A tied parameter (gpt_char's embedding and head) across stages of the same count: 2,1,2 holds
# it on stages 0 and 2 (its use gradients summed per replica, replica r with r, then between the
# replicas): within the tolerance of the unreplicated 3-stage run (measured 5.4e-8).
for cfg in "gu3 --stages 3" "gu212 --stages 3 --replicas 2,1,2" "guv --stages 2 --schedule zb-v" \
  "guv21 --stages 2 --schedule zb-v --replicas 2,1"; do
  set -- $cfg
  n=$1
  shift
  build "$n" "$@"
  go "$n" "$n" --steps 3 --save "$tmp/$n.st"
done
rg=$(st maxrel "$tmp/gu3.st" "$tmp/gu212.st")
check "uneven 2,1,2 with the tied embedding on stages 0 and 2: within 1e-5 of S = 3 ($rg)" \
  awk -v r="$rg" 'BEGIN { exit !(r < 1e-5) }'
check "uneven 2,1,2: the losses within 1e-6" \
  awk -v r="$(maxrel_loss "$tmp/gu3.loss" "$tmp/gu212.loss")" 'BEGIN { exit !(r < 1e-6) }'
# zb-v at S = 2 holds both uses on rank 0 (stages 0 and 3): 2,1 runs gpt_char (measured 5.4e-8).
rv=$(st maxrel "$tmp/guv.st" "$tmp/guv21.st")
check "uneven 2,1 under zb-v, the tied uses both on rank 0: within 1e-5 of D = 1 ($rv)" \
  awk -v r="$rv" 'BEGIN { exit !(r < 1e-5) }'
# The plan shows every replica's list.
"$pipec" plan samples/mlp_digits.json "${u[@]}" --stages 2 --replicas 2,1 >"$tmp/uplan.out" 2>&1 ||
  bad "plan --replicas 2,1: $(head -2 "$tmp/uplan.out")"
check "uneven plan: stage 0's replica 1 runs microbatches 1 and 3" grep -q \
  '^  rank 1 (stage 0, replica 1 of 2): F1 B1 F3 B3$' "$tmp/uplan.out"
check "uneven plan: stage 1's one replica runs all 4" grep -q \
  '^  rank 2 (stage 1, replica 0 of 1): F0 B0 F1 B1 F2 B2 F3 B3$' "$tmp/uplan.out"
# A replica keeps only the slots of its own microbatches: stage 0 of 2,1 under 1f1b (K = 2) one
# slot on each replica (its m mod 2 = r all fall in slot m mod 2 = r of the unreplicated plan),
# gpipe's (K = 4) two; 2,1,1's stage 0 (K = 3: gcd(2, 3) = 1) all three. Above, gpipe = 1f1b
# bitwise with 2 and 1 slots.
for c in "1f1b 2 2,1 1" "gpipe 2 2,1 2" "1f1b 3 2,1,1 3"; do
  set -- $c
  "$pipec" plan samples/mlp_digits.json "${u[@]}" --stages $2 --replicas $3 --schedule $1 \
    >"$tmp/uslots.out" 2>&1 || bad "plan $c: $(head -2 "$tmp/uslots.out")"
  got=$(grep -o '^rank 0: .*v0: [0-9]* slots\?' "$tmp/uslots.out" | grep -o '[0-9]* slots\?$')
  check "uneven $3 ($1): stage 0's replicas keep $4 slot(s) each: $got" \
    test "$got" = "$4 slot$([ $4 = 1 ] || echo s)"
done
# The exchange at the step end (PIPEC_REPLICAS_OVERLAP=0) writes the overlapped exchange's bits
# (each replica of stage 0 sends its buckets from inside the last B it runs: B(v0, m2) on
# replica 0, B(v0, m3) on replica 1).
PIPEC_REPLICAS_OVERLAP=0 go u21 u21sync --steps 3 --save "$tmp/u21sync.st"
same_bits "uneven 2,1: the exchange at the step end = overlapped" "$tmp/u21" "$tmp/u21sync"
check "uneven 2,1: rep_final around each replica's last B of stage 0" test \
  "$(grep -E -o 'B_0\([01], [01]\); pr_trace_end\(\); // m[0-9]|rep_final = [a-z]*;' "$tmp/u21/rank0.c" |
    sed 's/; pr_trace_end(); \/\/ / /' | tr '\n' ' ')" = \
  'B_0(0, 0) m0 B_0(0, 0) m1 rep_final = true; B_0(0, 1) m2 rep_final = false; rep_final = true; B_0(0, 1) m3 rep_final = false; '
timeout -k 5 60 "$tmp/u21/launch.sh" "${run_args[@]}" --steps 1 --init "$tmp/u21.st" \
  --predict "$tmp/none.csv" --out "$tmp/x.npy" \
  >"$tmp/upred.out" 2>"$tmp/upred.err"
check "uneven: --predict refused on every rank (stage 0's 2, stage 1's 1)" test \
  "$(grep -cE "^\[rank [0-2]\] trainloop.c:[0-9]+: rank [0-2]: error: --predict is not supported yet with --replicas \(the uneven form: this rank's stage runs on [12] ranks?\)$" "$tmp/upred.err")" -ge 1
expect "uneven: a replica's program run alone" 1 \
  "^comm_mpi.c:[0-9]+: rank 0: error: this program is pipeline rank 0 of 2 with 2 replicas \(world ranks 0 .. 1 of a 3-rank job\), but mpirun started it as rank 0 of 1$" \
  timeout -k 5 60 "$tmp/u21/bin/rank0" "${run_args[@]}" --steps 1

# Resume from a D = 2 checkpoint: at D = 2 (another S and schedule) bit for bit the unstopped
# run, from one file and from a sharded directory; at D = 1 it continues (within the tolerance).
go d2s2 two --steps 2 --save "$tmp/two.st"
go d2zb res --steps 5 --resume "$tmp/two.st" --save "$tmp/res.st"
check "resume at D = 2: the pair of the unstopped run" cmp -s "$tmp/res.st" "$tmp/s1.st"
check "resume at D = 2: its optimizer state" cmp -s "$tmp/res.st.optim" "$tmp/s1.st.optim"
check "resume at D = 2: the losses of steps 2..4" \
  test "$(cat "$tmp/res.loss")" = "$(awk '$1 >= 2' "$tmp/s1.loss")"
go d2s2 twosh --steps 2 --save "$tmp/sh/"
check "sharded save at D = 2, S = 2: two shards (replica 0's)" \
  test -e "$tmp/sh/model-00002-of-00002.safetensors" -a -e "$tmp/sh/model.safetensors.index.json"
go d2s1 ressh --steps 5 --resume "$tmp/sh/" --save "$tmp/ressh.st"
check "resume a sharded D = 2 checkpoint at D = 2, S = 1: the unstopped run's pair" \
  cmp -s "$tmp/ressh.st" "$tmp/s1.st"
check "resume a sharded D = 2 checkpoint: its optimizer state" cmp -s "$tmp/ressh.st.optim" "$tmp/s1.st.optim"
check "resume a sharded D = 2 checkpoint: the losses of steps 2..4" \
  test "$(cat "$tmp/ressh.loss")" = "$(awk '$1 >= 2' "$tmp/s1.loss")"
go d1 res1 --steps 5 --resume "$tmp/two.st" --save "$tmp/res1.st"
check "resume at D = 1 from D = 2: steps 2..4 logged" \
  test "$(cut -d' ' -f1 "$tmp/res1.loss" | tr '\n' ' ')" = "2 3 4 "
r1=$(st maxrel "$tmp/ref1.st" "$tmp/res1.st")
check "resume at D = 1 from D = 2: within 1e-5 of the D = 1 run ($r1)" \
  awk -v r="$r1" 'BEGIN { exit !(r < 1e-5) }'

# And the other way: the D = 1 run's 2-step checkpoint resumes at D = 2 (the file has no D).
go d1 two1 --steps 2 --save "$tmp/two1.st"
go d2s2 res2 --steps 5 --resume "$tmp/two1.st" --save "$tmp/res2.st"
r2=$(st maxrel "$tmp/ref1.st" "$tmp/res2.st")
check "resume at D = 2 from D = 1: within 1e-5 of the D = 1 run ($r2)" \
  awk -v r="$r2" 'BEGIN { exit !(r < 1e-5) }'

# No allocation in a replicated step (the exchange's requests are persistent, made at the start):
# every rank's count at --steps 11 is its count at --steps 1. (tests/alloc wants the counts
# equal; at D > 1 the start's count varies by a few under load, Open MPI's at the first messages
# between the replicas, so the bound here is 10 - one allocation per step would exceed it; the
# per-call MPI_Iallgather this replaced added 7 per step.)
# (Not in the sanitizer tree, whose runtime must come first and intercepts malloc.)
# alloc_steps NAME DIR RANKS: each rank's allocations at --steps 1 and 11 of DIR's job, and the
# check that their difference is under 10 on every rank.
alloc_steps() {
  local name=$1 dir=$2 n=$3 steps r line counts=()
  for steps in 1 11; do
    rm -f "$tmp"/count.*
    OMPI_MCA_mca_base_env_list="LD_PRELOAD=$shim;ALLOC_COUNT_FILE=$tmp/count.%r" \
      timeout -k 5 120 "$dir/launch.sh" --steps "$steps" --threads 1 --eval-every 0 \
      --eval-batches 2 --log-every 1000 >"$tmp/alloc.out" 2>"$tmp/alloc.err" ||
      bad "alloc $name --steps $steps: $(grep -m2 . "$tmp/alloc.err")"
    line=
    for ((r = 0; r < n; r++)); do line+=" $(awk '{ print $1 }' "$tmp/count.$r" 2>/dev/null)"; done
    counts+=("$line")
  done
  echo "$name: allocations per rank at --steps 1:${counts[0]}; at --steps 11:${counts[1]}"
  check "$name: no allocation in a step (--steps 1:${counts[0]}, 11:${counts[1]})" \
    awk -v a="${counts[0]}" -v b="${counts[1]}" -v r="$n" 'BEGIN { n = split(a, x); m = split(b, y);
      if (n != r || m != r) exit 1; for (i = 1; i <= r; i++) if (y[i] - x[i] >= 10 || x[i] - y[i] >= 10) exit 1 }'
}
if [ -n "$shim" ] && ! sanitized "$tmp/d2s2/bin/rank0"; then
  alloc_steps "replicated (S = 2, D = 2)" "$tmp/d2s2" 4
  # The uneven form too (2,1: stage 0's two replicas exchange, the step end's all-gather spans
  # the 3 ranks).
  alloc_steps "uneven 2,1" "$tmp/u21" 3
fi

# The plan says how the ranks are replicated.
"$pipec" plan "$file" "${common[@]}" --replicas 2 --stages 2 >"$tmp/plan.out" 2>&1 ||
  bad "plan --replicas 2: $(head -2 "$tmp/plan.out")"
check "plan --replicas 2: the replicas line" grep -q \
  '^replicas: 2 (each stage on 2 ranks; 4 ranks in all, rank d x 2 + s is replica d.s rank s); replica d runs microbatches d x 2 .. d x 2 + 1 of the step.s 4' \
  "$tmp/plan.out"

# Bad uses.
hint_re=. expect "D not dividing M" 1 \
  'error: --replicas 3: the microbatches M = 4 are not a multiple of the replicas D \(each replica takes M / D of every step.s microbatches\)$' \
  "$pipec" compile "$file" "${common[@]}" --replicas 3 -o "$tmp/bad"
expect "D = 0" 2 "^pipec: --replicas: expected a number of replicas from 1 to 65536, got '0'$" \
  "$pipec" compile "$file" "${common[@]}" --replicas 0 -o "$tmp/bad"
expect "D = -1" 2 "^pipec: --replicas: expected a number of replicas from 1 to 65536, got '-1'$" \
  "$pipec" compile "$file" "${common[@]}" --replicas -1 -o "$tmp/bad"
# Per-stage counts (PipeDream's form): equal counts are the uniform form (the same programs);
# counts that differ are the uneven form (above); each count is checked.
build d22 --replicas 2,2 --stages 2 --schedule 1f1b
# (the programs but their "// Command" lines, which quote the command line)
for f in rank0.c rank1.c; do
  check "--replicas 2,2 at S = 2: $f as --replicas 2's" cmp -s <(grep -v '^// Command' "$tmp/d22/$f") \
    <(grep -v '^// Command' "$tmp/d2s2/$f")
done
hint_re=. expect "uneven: a tied parameter across stages of different counts" 1 \
  "error: --replicas 2,1: parameter 'transformer.wte.weight' is held on stages 0 and 1, whose replica counts differ \(2 and 1\): a tied or shared parameter needs the same count on every stage that holds it \(its use gradients are summed per replica, then between the stages, replica r with replica r\)$" \
  "$pipec" compile "$file" "${common[@]}" --stages 2 --replicas 2,1 -o "$tmp/bad"
expect "a count that is not a number" 2 \
  "^pipec: --replicas 2,x: expected a replica count from 1 to 65536 per stage, separated by commas, got 'x'$" \
  "$pipec" compile "$file" "${common[@]}" --stages 2 --replicas 2,x -o "$tmp/bad"
expect "a count 0" 2 \
  "^pipec: --replicas 2,0: expected a replica count from 1 to 65536 per stage, separated by commas, got '0'$" \
  "$pipec" compile "$file" "${common[@]}" --stages 2 --replicas 2,0 -o "$tmp/bad"
expect "an empty count" 2 \
  "^pipec: --replicas 2,: expected a replica count from 1 to 65536 per stage, separated by commas, got ''$" \
  "$pipec" compile "$file" "${common[@]}" --stages 2 --replicas 2, -o "$tmp/bad"
hint_re=. expect "the wrong number of counts" 1 \
  "error: --replicas 2,1: 2 per-stage replica counts for a pipeline of 3 stages: give one count per stage \(or one count D for every stage\)$" \
  "$pipec" compile "$file" "${common[@]}" --stages 3 --replicas 2,1 -o "$tmp/bad"
hint_re=. expect "a count not dividing M" 1 \
  "error: --replicas 2,3: stage 1's count 3 does not divide the microbatches M = 4 \(each of its replicas takes M / 3 of every step's microbatches\)$" \
  "$pipec" compile "$file" "${common[@]}" --stages 2 --replicas 2,3 -o "$tmp/bad"
expect "--replicas with --target cuda" 2 \
  "^pipec: --replicas 2: stage replication runs the cpu target only \(not built yet for --target cuda\)$" \
  "$pipec" compile "$file" "${common[@]}" --replicas 2 --target cuda -o "$tmp/bad"
expect "--replicas 2,1 with --target cuda" 2 \
  "^pipec: --replicas 2,1: stage replication runs the cpu target only \(not built yet for --target cuda\)$" \
  "$pipec" compile "$file" "${common[@]}" --stages 2 --replicas 2,1 --target cuda -o "$tmp/bad"
expect "a replica's program run alone" 1 \
  "^comm_mpi.c:[0-9]+: rank 0: error: this program is pipeline rank 0 of 1 with 2 replicas \(a 2-rank job\), but mpirun started it as rank 0 of 1$" \
  timeout -k 5 60 "$tmp/d2s1/bin/rank0" "${run_args[@]}" --steps 1
# (Both ranks stop; mpirun's own banner may come before the ranks' lines: they are searched for.)
timeout -k 5 60 "$tmp/d2s1/launch.sh" "${run_args[@]}" --steps 1 --trace "$tmp/t.json" \
  >"$tmp/trace.out" 2>"$tmp/trace.err"
rc=$?
check "--trace with replicas: non-zero exit ($rc)" test $rc -ne 0 -a $rc -ne 124
check "--trace with replicas: the error" grep -qE \
  "^\[rank [01]\] trainloop.c:[0-9]+: rank [01]: error: --trace is not supported yet with --replicas \(this job has 2 replicas\)$" \
  "$tmp/trace.err"
check "--trace with replicas: its HINT" grep -qE \
  "^\[rank [01]\] HINT: run it without --replicas \(the same model at D = 1\)$" "$tmp/trace.err"
finish
