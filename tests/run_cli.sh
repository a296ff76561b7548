#!/usr/bin/env bash
# The command-line contract: --help and --version, exit 2 with a one-line reason for usage errors,
# exit 1 for model errors, -D overrides, the pass table (--dump-after, --stop-after,
# --time-passes) and --set overrides.
set -u
pipec=$1
root=$2
cd "$root" || exit 1
pass=0 fail=0

# expect NAME WANT_RC WANT_STDERR_REGEX CMD...  (stderr's first line must match the regex; the
# warning of a pipeline with fewer microbatches than ranks, which the samples' M = 1 gives every
# --stages S > 1 here, is skipped: its own tests are at the end)
expect() {
  local name=$1 want_rc=$2 want_err=$3
  shift 3
  local out err rc
  out=$("$@" 2>/tmp/pipec_cli_err.$$)
  rc=$?
  err=$(grep -v ': warning: .* of every step (the pipeline bubble' /tmp/pipec_cli_err.$$ | head -n 1)
  if [ "$rc" -ne "$want_rc" ]; then
    echo "FAIL $name: exit $rc, want $want_rc (stderr: $err)"
    fail=$((fail + 1))
  elif [ -n "$want_err" ] && ! [[ "$err" =~ $want_err ]]; then
    echo "FAIL $name: stderr '$err' does not match '$want_err'"
    fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
  LAST_OUT=$out
}

expect help 0 '' "$pipec" --help
[[ "$LAST_OUT" == Usage:* ]] && pass=$((pass + 1)) || { echo "FAIL help text"; fail=$((fail + 1)); }
expect version 0 '' "$pipec" --version
# The version, the model format version it reads (docs/model-format.md's title says which) and the
# targets: cuda exactly where --target cuda is not refused for a pipec built without the toolkit.
fmt_version=$(sed -n '1s/^# pipec model format, version \([0-9]*\)$/\1/p' docs/model-format.md)
targets=cpu
"$pipec" compile --target cuda --stop-after=expand samples/mlp_digits.json >/dev/null 2>&1 && targets="cpu, cuda"
want_version="^pipec [0-9]+\.[0-9]+\.[0-9]+
model format: version $fmt_version
targets: $targets\$"
[ -n "$fmt_version" ] && [[ "$LAST_OUT" =~ $want_version ]] && pass=$((pass + 1)) || { echo "FAIL version '$LAST_OUT' (want model format $fmt_version, targets $targets)"; fail=$((fail + 1)); }
expect no-command 2 "^pipec: no command given" "$pipec"
expect unknown-command 2 "^pipec: unknown command 'frobnicate'" "$pipec" frobnicate samples/mlp_digits.json
expect no-model 2 "^pipec: 'check' needs a model file" "$pipec" check
expect extra-arg 2 "^pipec: unexpected argument 'extra'" "$pipec" check samples/mlp_digits.json extra
expect unknown-option 2 "^pipec: unknown option '--frob'" "$pipec" check --frob samples/mlp_digits.json
expect missing-optarg 2 "^pipec: option '--dump-after' needs an argument" "$pipec" check samples/mlp_digits.json --dump-after
expect bad-pass 2 "^pipec: --dump-after: unknown pass 'nope'" "$pipec" print --dump-after=nope samples/mlp_digits.json
expect missing-file 1 "^does/not/exist.json: error: cannot open model file: No such file or directory$" \
  "$pipec" check does/not/exist.json
expect directory 1 "^samples: error: model file is a directory, not a regular file$" "$pipec" check samples
# Every file pipec reads is refused unread unless it is a regular file: a FIFO blocked the open
# (or the read) forever. The model, --costs, --schedule F.csv, --topology, plan --trace, each
# under timeout: a hang is a failure, not a stuck test.
fifos=$(mktemp -d)
mkfifo "$fifos/m.json" "$fifos/s.csv"
f=$fifos/m.json
mlp=samples/mlp_digits.json
expect fifo-model 1 "^$f: error: model file is a FIFO, not a regular file$" timeout 10 "$pipec" check "$f"
expect fifo-costs 1 "^$f: error: the costs file is a FIFO, not a regular file$" \
  timeout 10 "$pipec" plan --stages 2 --costs "$f" $mlp
expect fifo-schedule 1 "^$fifos/s.csv: error: the schedule is a FIFO, not a regular file$" \
  timeout 10 "$pipec" plan --schedule "$fifos/s.csv" $mlp
expect fifo-topology 1 "^$f: error: the topology file is a FIFO, not a regular file$" \
  timeout 10 "$pipec" plan --stages 2 --topology "$f" $mlp
expect fifo-trace 1 "^$mlp: error: trace '$f' is a FIFO, not a regular file$" \
  timeout 10 "$pipec" plan --stages 2 --svg "$fifos/p.svg" --trace "$f" $mlp
rm -rf "$fifos"
expect define-unknown 1 "^samples/gpt_char.json: error: -D Q=3: the model has no dim 'Q'$" \
  "$pipec" check -D Q=3 samples/gpt_char.json
expect define-bad 1 "^samples/gpt_char.json: error: -D L: expected NAME=VALUE$" "$pipec" check -D L samples/gpt_char.json

# -D changes the model: 8 layers have twice the layer parameters of 4.
expect define-layers 0 '' "$pipec" check --define L=8 samples/gpt_char.json
[[ "$LAST_OUT" == *"1,591,552 in 51 tensors"* ]] && pass=$((pass + 1)) || { echo "FAIL -D L=8 summary: $LAST_OUT"; fail=$((fail + 1)); }
# Options may come before or after the command and the model (GNU style).
expect options-anywhere 0 '' "$pipec" -D L=2 check samples/gpt_char.json
# --dump-after=expand prints the IR before shapes are known; =shape prints the same as `print`.
expect dump-shape 0 '' "$pipec" check --dump-after=shape samples/mlp_digits.json
[[ "$LAST_OUT" == "$("$pipec" print samples/mlp_digits.json)"* ]] && pass=$((pass + 1)) || { echo "FAIL dump-after=shape"; fail=$((fail + 1)); }
expect dump-expand 0 '' "$pipec" check --dump-after=expand samples/mlp_digits.json
[[ "$LAST_OUT" == *"node logits = linear(relu2, fc3.weight, fc3.bias): ?"* ]] && pass=$((pass + 1)) || { echo "FAIL dump-after=expand: $LAST_OUT"; fail=$((fail + 1)); }
expect time-passes 0 "^pipec: pass parse +[0-9.]+ ms$" "$pipec" check --time-passes samples/mlp_digits.json
expect plan 0 '' "$pipec" plan samples/mlp_digits.json
[[ "$LAST_OUT" == "memory plan for mlp_digits: batch 64 = 1 microbatch of 64, adamw"* ]] && pass=$((pass + 1)) || { echo "FAIL plan: $LAST_OUT"; fail=$((fail + 1)); }
expect plan-set 0 '' "$pipec" plan --batch 128 --microbatches 4 samples/mlp_digits.json
[[ "$LAST_OUT" == *"batch 128 = 4 microbatches of 32"* ]] && pass=$((pass + 1)) || { echo "FAIL plan --batch: $LAST_OUT"; fail=$((fail + 1)); }
expect set-unknown 1 "^samples/mlp_digits.json: error: --set frob=1: expected KEY=VALUE with a training key" \
  "$pipec" plan --set frob=1 samples/mlp_digits.json
expect set-range 1 "^samples/mlp_digits.json: error: --set batch=0: must be from 1 to" "$pipec" plan --batch 0 samples/mlp_digits.json
# data.shuffle: true or false; false (and train_fraction 1) for tables only, named as --set's.
expect set-bool 1 "^samples/mlp_digits.json: error: --set data.shuffle=1: expected true or false$" \
  "$pipec" plan --set data.shuffle=1 samples/mlp_digits.json
expect set-shuffle-tokens 1 "^samples/gpt_char.json: error: training.data.shuffle: false is for tables \(csv, npy\); token data draws its windows at random offsets$" \
  "$pipec" plan --set data.shuffle=false samples/gpt_char.json
expect set-shuffle-table 0 '' "$pipec" plan --set data.shuffle=false --set data.train_fraction=1 samples/mlp_digits.json
expect batch-not-multiple 1 "^samples/mlp_digits.json: error: training: batch 10 is not a multiple of microbatches 4$" \
  "$pipec" plan --batch 10 --microbatches 4 samples/mlp_digits.json
expect bad-target 2 "^pipec: --target: unknown target 'gpu' \(available: cpu, cuda\)$" "$pipec" compile --target gpu samples/mlp_digits.json
expect cuda-arch-bad 2 "^pipec: --cuda-arch: expected compute capabilities like 80,90, got '80,,90'$" "$pipec" compile --target cuda --cuda-arch 80,,90 samples/mlp_digits.json
expect cuda-arch-cpu 2 "^pipec: --cuda-arch needs --target cuda$" "$pipec" compile --cuda-arch 80 samples/mlp_digits.json
expect comm-nccl 2 "^pipec: --comm: unknown transport 'nccl' \(available: mpi; nccl is not built yet, docs/cuda.md\)$" "$pipec" compile --comm nccl samples/mlp_digits.json
expect march-unknown 2 "^pipec: --march: unknown value 'skylake' \(available: native\)$" "$pipec" compile --march=skylake samples/mlp_digits.json
expect march-missing 2 "^pipec: option '--march' needs an argument$" "$pipec" compile samples/mlp_digits.json --march
"$pipec" --help | grep -q -- '--march=native' && pass=$((pass + 1)) || { echo "FAIL --help does not mention --march=native"; fail=$((fail + 1)); }
expect args-not-run 2 "^pipec: arguments after '--' are for 'run' and 'profile' only" "$pipec" check samples/mlp_digits.json -- --steps 3
# --diagnostics-format: a bad or missing value is a usage error; both GNU spellings take a value.
expect diag-format-bad 2 "^pipec: --diagnostics-format: unknown format 'xml' \(text, json, sarif\)$" "$pipec" check --diagnostics-format=xml samples/mlp_digits.json
expect diag-format-missing 2 "^pipec: option '--diagnostics-format' needs an argument$" "$pipec" check samples/mlp_digits.json --diagnostics-format
expect diag-format-time 2 "^pipec: --time-passes prints text to stderr, where --diagnostics-format writes its document: use one of them$" \
  "$pipec" check --time-passes --diagnostics-format=json samples/mlp_digits.json
expect diag-format-space 1 '^\[\{"kind":"error","file":"samples/mlp_digits.json","line":null,"column":null,"path":null,"message":"-D Q=3: the model has no dim .Q.","hint":null,"pass":"expand"\}\]$' \
  "$pipec" check -D Q=3 --diagnostics-format json samples/mlp_digits.json
"$pipec" --help | grep -q -- '--diagnostics-format=FORMAT' && pass=$((pass + 1)) || { echo "FAIL --help does not mention --diagnostics-format"; fail=$((fail + 1)); }
"$pipec" --help | grep -q -- '--recompute all|none|STAGES' && pass=$((pass + 1)) || { echo "FAIL --help does not mention --recompute"; fail=$((fail + 1)); }
# --list-ops: the registry's ops a model may use, matmul first; the same set as the gradient check's
# models (tests/gradcheck/OP.json, one per op, run.sh), so adding an op needs no count here.
expect list-ops 0 '' "$pipec" --list-ops
gc_ops=$(for f in tests/gradcheck/*.json; do b=$(basename "$f" .json); echo "${b%%.*}"; done | sort -u)
[ "$(printf '%s\n' "$LAST_OUT" | sort)" = "$gc_ops" ] && [[ "$LAST_OUT" == matmul* ]] && pass=$((pass + 1)) || { echo "FAIL --list-ops: $LAST_OUT"; fail=$((fail + 1)); }

# The pass table: --dump-after takes a list, --stop-after caps the passes; the passes run are the
# ones up to the last the command, --dump-after and --stop-after ask for, and no further.
passes="expand, shape, training, fuse, autodiff, partition, comm, schedule, memplan, codegen"
expect bad-stop-pass 2 "^pipec: --stop-after: unknown pass 'nope' \(passes: $passes\)$" "$pipec" check --stop-after=nope samples/mlp_digits.json
expect bad-pass-in-list 2 "^pipec: --dump-after: unknown pass 'plan' \(passes: $passes\)$" "$pipec" print --dump-after=expand,plan samples/mlp_digits.json
expect dump-after-stop 2 "^pipec: --dump-after=memplan: the pass comes after --stop-after=shape$" "$pipec" print --dump-after=memplan --stop-after=shape samples/mlp_digits.json
expect missing-stop-optarg 2 "^pipec: option '--stop-after' needs an argument" "$pipec" check samples/mlp_digits.json --stop-after
# --help lists every pass of the table.
[ "$("$pipec" --help | sed -n '/^Passes, in order/,/^$/p' | awk 'NF && !/^Passes/ {print $1}' | paste -sd, | sed 's/,/, /g')" = "$passes" ] &&
  pass=$((pass + 1)) || { echo "FAIL --help does not list the passes $passes"; fail=$((fail + 1)); }
# A list prints each dump in pass order, the same as one pass at a time.
expect dump-list 0 '' "$pipec" print --dump-after=autodiff,expand samples/mlp_digits.json
[ "$LAST_OUT" = "$("$pipec" print --dump-after=expand samples/mlp_digits.json)
$("$pipec" print --dump-after=autodiff samples/mlp_digits.json)" ] && pass=$((pass + 1)) || { echo "FAIL --dump-after=autodiff,expand"; fail=$((fail + 1)); }
expect dump-repeated 0 '' "$pipec" print --dump-after=expand --dump-after=shape samples/mlp_digits.json
[ "$LAST_OUT" = "$("$pipec" print --dump-after=expand,shape samples/mlp_digits.json)" ] && pass=$((pass + 1)) || { echo "FAIL repeated --dump-after"; fail=$((fail + 1)); }
# The memplan dump is the plan; the training dump is the configuration with --set applied.
expect dump-memplan 0 '' "$pipec" print --dump-after=memplan samples/gpt_char.json
[ "$LAST_OUT" = "$("$pipec" plan samples/gpt_char.json)" ] && pass=$((pass + 1)) || { echo "FAIL --dump-after=memplan is not the plan"; fail=$((fail + 1)); }
expect dump-training 0 '' "$pipec" print --dump-after=training --set steps=7 --microbatches 4 samples/gpt_char.json
[[ "$LAST_OUT" == "training for gpt_char: batch 12 = 4 microbatches of 3"* && "$LAST_OUT" == *$'\n  steps                    7\n'* &&
   "$LAST_OUT" == *$'\n  optimizer.lr             0.001\n'* && "$LAST_OUT" == *$'\n  data.target              targets' ]] &&
  pass=$((pass + 1)) || { echo "FAIL --dump-after=training: $LAST_OUT"; fail=$((fail + 1)); }
# Only the passes up to the last one asked for run: dumping after autodiff runs no memory plan
# (whose warning, with a batch no machine holds, would show on stderr).
expect dump-autodiff-no-plan 0 '' "$pipec" print --dump-after=autodiff --time-passes --batch 16777216 samples/gpt_char.json
grep -q 'memplan' /tmp/pipec_cli_err.$$ && { echo "FAIL --dump-after=autodiff ran memplan"; fail=$((fail + 1)); } || pass=$((pass + 1))
"$pipec" print --dump-after=autodiff --batch 16777216 samples/gpt_char.json 2>&1 >/dev/null | grep -q . &&
  { echo "FAIL --dump-after=autodiff printed diagnostics"; fail=$((fail + 1)); } || pass=$((pass + 1))
"$pipec" plan --batch 16777216 samples/gpt_char.json 2>&1 >/dev/null | grep -q "warning: the memory plan needs" &&
  pass=$((pass + 1)) || { echo "FAIL plan --batch 16777216: no memory warning (the test above proves nothing)"; fail=$((fail + 1)); }
# --time-passes: one line per pass run, and one per checker, in table order.
expect time-plan 0 '' "$pipec" plan --time-passes samples/mlp_digits.json
[ "$(sed -E 's/^pipec: (pass|check) +([a-z]+) .*/\1 \2/' /tmp/pipec_cli_err.$$ | paste -sd,)" = \
  "pass parse,pass expand,check expand,pass shape,check shape,pass training,pass fuse,check fuse,pass autodiff,check autodiff,pass partition,check partition,pass comm,check comm,pass schedule,check schedule,pass memplan" ] &&
  pass=$((pass + 1)) || { echo "FAIL plan --time-passes: $(paste -sd, /tmp/pipec_cli_err.$$)"; fail=$((fail + 1)); }
# Pipeline stages (docs/pipeline.md): the partition and comm passes run for check and print, plan
# runs the schedule and the per-rank memory plans too and prints them; compile and run stop at
# codegen with one error (no per-rank programs yet); usage errors exit 2.
expect plan-s2 0 '' "$pipec" plan --stages 2 --microbatches 4 --schedule 1f1b samples/mlp_digits.json
[[ "$LAST_OUT" == "partition of mlp_digits: 2 stages"* ]] && grep -qx "c0 'relu1' v0 -> v1 as 'relu1@v1' 8192 B per microbatch fwd" <<<"$LAST_OUT" &&
  grep -qx "schedule 1f1b: 2 ranks, 1 stage per rank, 4 microbatches" <<<"$LAST_OUT" &&
  grep -qx "  rank 0: ld F0 s> ld F1 s> .  .  .  r< B0 ld F2 s> .  r< B1 ld F3 s> .  r< B2 .  .  .  .  r< B3 T  N  O" <<<"$LAST_OUT" &&
  grep -qx "predicted bubble: 20.0% of the ranks' time (unit costs F 1, B 2)" <<<"$LAST_OUT" &&
  grep -qx "predicted step time 0.152 ms, bubble 38.6% (stage costs: 0.008978 GFLOP per step at 50 GFLOP/s, 0.06554 MB through channels at 10 GB/s)" <<<"$LAST_OUT" &&
  grep -qx "peak microbatches in flight: v0 2 v1 1" <<<"$LAST_OUT" &&
  grep -qx "memory plans of mlp_digits: batch 64 = 4 microbatches of 16, adamw, 2 ranks" <<<"$LAST_OUT" &&
  grep -q "^rank 0: params 33280 B, grads 33280 B, optimizer 66560 B, activations 49152 B (constants 0 B; v0: 2 slots of 20480 B; work area 8192 B), total " <<<"$LAST_OUT" &&
  [[ "$(tail -n 1 <<<"$LAST_OUT")" == "rank 1: params 71232 B, grads 71232 B, optimizer 142464 B, activations 41024 B (constants 64 B; v1: 1 slot of 40960 B), total "* ]] &&
  pass=$((pass + 1)) || { echo "FAIL plan --stages 2: $LAST_OUT"; fail=$((fail + 1)); }
# The predicted step time scales with --flops-rate and --bandwidth (the costs are seconds).
expect plan-s2-rates 0 '' "$pipec" plan --stages 2 --microbatches 4 --schedule 1f1b --flops-rate 25 --bandwidth 5 samples/mlp_digits.json
grep -qx "predicted step time 0.303 ms, bubble 38.6% (stage costs: 0.008978 GFLOP per step at 25 GFLOP/s, 0.06554 MB through channels at 5 GB/s)" <<<"$LAST_OUT" &&
  pass=$((pass + 1)) || { echo "FAIL plan --flops-rate 25 --bandwidth 5: $(grep predicted <<<"$LAST_OUT")"; fail=$((fail + 1)); }
expect plan-s4 0 '' "$pipec" plan --stages 4 --microbatches 8 --schedule zb-h1 samples/skip_net.json
grep -qx "schedule zb-h1: 4 ranks, 1 stage per rank, 8 microbatches" <<<"$LAST_OUT" && grep -q "^  rank 3: " <<<"$LAST_OUT" &&
  ! grep -q "^  rank 4: " <<<"$LAST_OUT" && grep -qx "peak microbatches in flight: v0 4 v1 3 v2 2 v3 1" <<<"$LAST_OUT" &&
  grep -qx "B and W split on no stage (B keeps the weight gradients: none is compute-bound, or the split would neither send earlier nor fill a bubble)" <<<"$LAST_OUT" &&
  grep -qx "predicted bubble: 27.3% of the ranks' time (unit costs F 1, B 2)" <<<"$LAST_OUT" &&
  pass=$((pass + 1)) || { echo "FAIL plan --stages 4 zb-h1: $LAST_OUT"; fail=$((fail + 1)); }
# zb-h1 splits where it buys something: every stage of gpt_char at S = 4 (W deferred on the first
# three, gradients sent before W on the last three); only the last at S = 2 (stage 0 sends no
# gradient and runs each W right after its B).
expect plan-s4-zb-gpt 0 '' "$pipec" plan --stages 4 --batch 96 --microbatches 8 --schedule zb-h1 samples/gpt_char.json
grep -qx "B and W split on v0 v1 v2 v3 (all)" <<<"$LAST_OUT" &&
  grep -qx "predicted bubble: 22.6% of the ranks' time (unit costs F 1, B 1, W 1)" <<<"$LAST_OUT" &&
  pass=$((pass + 1)) || { echo "FAIL plan --stages 4 zb-h1 gpt_char: $LAST_OUT"; fail=$((fail + 1)); }
expect plan-s2-zb-gpt 0 '' "$pipec" plan --stages 2 --batch 96 --microbatches 8 --schedule zb-h1 samples/gpt_char.json
grep -qx "B and W split on v1 (elsewhere B keeps the weight gradients: nothing is sent before W and no W is deferred, or none is compute-bound)" <<<"$LAST_OUT" &&
  grep -qx "  rank 0: ld F0 s> ld F1 s> .  .  .  r< r< B0 ld F2 s> .  .  r< r< B1 ld F3 s> .  .  r< r< B2 ld F4 s> .  .  r< r< B3 ld F5 s> .  .  r< r< B4 ld F6 s> .  .  r< r< B5 ld F7 s> .  .  r< r< B6 .  .  .  .  .  r< r< B7 T  N  O" <<<"$LAST_OUT" &&
  pass=$((pass + 1)) || { echo "FAIL plan --stages 2 zb-h1 gpt_char: $LAST_OUT"; fail=$((fail + 1)); }
expect plan-interleaved 0 '' "$pipec" plan --stages 2 --microbatches 4 --schedule interleaved --virtual 2 samples/skip_net.json
[[ "$LAST_OUT" == "partition of skip_net: 4 stages"* ]] && grep -qx "stage 2 (rank 0)" <<<"$LAST_OUT" && grep -qx "schedule interleaved: 2 ranks, 2 stages per rank, 4 microbatches" <<<"$LAST_OUT" &&
  grep -q "^  rank 1: .* F0.1 " <<<"$LAST_OUT" && pass=$((pass + 1)) || { echo "FAIL plan interleaved: $LAST_OUT"; fail=$((fail + 1)); }
expect plan-bad-schedule 2 "^pipec: --schedule: unknown schedule 'pipedream' \(gpipe, 1f1b, interleaved, zb-h1, zb-v, or a FILE.csv\)$" "$pipec" plan --stages 2 --schedule pipedream samples/mlp_digits.json
expect plan-virtual-one-stage 2 "^pipec: --virtual 2 needs --stages >= 2: interleaving runs the stages of several ranks$" "$pipec" plan --stages 1 --schedule interleaved --virtual 2 samples/mlp_digits.json
expect plan-virtual-no-stages 2 "^pipec: --virtual 2 needs --stages >= 2: interleaving runs the stages of several ranks$" "$pipec" check --schedule interleaved --virtual 2 samples/mlp_digits.json
expect plan-virtual-split-one 1 "^samples/mlp_digits.json: error: --virtual 2 needs --stages >= 2: interleaving runs the stages of several ranks$" "$pipec" plan --split relu1 --schedule interleaved --virtual 2 samples/mlp_digits.json
expect plan-virtual-not-interleaved 2 "^pipec: --virtual 2: only --schedule interleaved \(or zb-v, V = 2\) runs several stages per rank$" "$pipec" plan --stages 2 --virtual 2 samples/mlp_digits.json
# zb-v: two stages per rank in a V (rank 0 the first and the last, rank 1 the middle two), V = 2
# implied; --virtual 2 the same program; another V a usage error; at S = 1 the one-stage plan.
expect plan-zbv 0 '' "$pipec" plan --stages 2 --microbatches 4 --schedule zb-v samples/skip_net.json
zbv_out=$LAST_OUT
[[ "$LAST_OUT" == "partition of skip_net: 4 stages"* ]] && grep -qx "stage 3 (rank 0)" <<<"$LAST_OUT" && grep -qx "stage 2 (rank 1)" <<<"$LAST_OUT" &&
  grep -qx "schedule zb-v: 2 ranks, 2 stages per rank, 4 microbatches" <<<"$LAST_OUT" &&
  grep -q "^  rank 0: ld   F0.0 s>  .* F0.1 .* B0.1 .* B0.0 " <<<"$LAST_OUT" &&
  grep -qx "peak microbatches in flight: v0 3 v1 2 v2 2 v3 2" <<<"$LAST_OUT" &&
  pass=$((pass + 1)) || { echo "FAIL plan zb-v: $LAST_OUT"; fail=$((fail + 1)); }
expect plan-zbv-virtual-2 0 '' "$pipec" plan --stages 2 --microbatches 4 --schedule zb-v --virtual 2 samples/skip_net.json
[ "$LAST_OUT" = "$zbv_out" ] && pass=$((pass + 1)) || { echo "FAIL plan zb-v --virtual 2: not the implied V's plan"; fail=$((fail + 1)); }
expect plan-zbv-virtual-3 2 "^pipec: --virtual 3: --schedule zb-v runs two stages per rank in a V \(--virtual 2, or none\)$" "$pipec" plan --stages 2 --schedule zb-v --virtual 3 samples/skip_net.json
expect plan-zbv-virtual-1 2 "^pipec: --virtual 1: --schedule zb-v runs two stages per rank in a V \(--virtual 2, or none\)$" "$pipec" plan --stages 2 --schedule zb-v --virtual 1 samples/skip_net.json
# The partitioner's memory estimate counts zb-v's slots: each stage's "acts x N in flight" in the
# partition table is the K the schedule then keeps (2S - 1 - v on the way down the V, 2S - v on
# the way up, at most M), not 1F1B's count along the chain of 2S stages (2S - v).
for a in "--stages 2 --microbatches 8" "--stages 2 --microbatches 2" "-D L=8 --stages 4 --microbatches 8"; do
  expect "plan-zbv-inflight $a" 0 '' "$pipec" plan samples/gpt_char.json $a --batch 96 --schedule zb-v
  est=$(grep -o 'acts x [0-9]* in flight' <<<"$LAST_OUT" | awk '{printf "%s ", $3}')
  k=$(grep '^peak microbatches in flight:' <<<"$LAST_OUT" | grep -o 'v[0-9]* [0-9]*' | awk '{printf "%s ", $2}')
  [ -n "$est" ] && [ "$est" = "$k" ] && pass=$((pass + 1)) ||
    { echo "FAIL zb-v $a: the estimate counts '$est' in flight, the schedule keeps '$k'"; fail=$((fail + 1)); }
done
expect plan-zbv-virtual-one-stage 2 "^pipec: --virtual 2 needs --stages >= 2: zb-v places two stages on each of several ranks in a V \(at one stage it is the one-stage program: leave --virtual out\)$" "$pipec" plan --stages 1 --schedule zb-v --virtual 2 samples/mlp_digits.json
expect plan-zbv-virtual-no-stages 2 "^pipec: --virtual 2 needs --stages >= 2: zb-v places two stages on each of several ranks in a V \(at one stage it is the one-stage program: leave --virtual out\)$" "$pipec" check --schedule zb-v --virtual 2 samples/mlp_digits.json
expect plan-zbv-split-one 1 "^samples/mlp_digits.json: error: --schedule zb-v needs --stages >= 2: it places two stages on each of several ranks in a V, and --split made 2 stages, one rank's \(name 2S - 1 cuts\)$" "$pipec" plan --split relu1 --schedule zb-v samples/mlp_digits.json
expect plan-zbv-too-many 1 "^samples/mlp_digits.json: error: --stages 8: the model has only 6 forward nodes$" "$pipec" plan --stages 4 --schedule zb-v samples/mlp_digits.json
[ "$(sed -n 2p /tmp/pipec_cli_err.$$)" = "pipec: note: with --schedule zb-v (two stages per rank) the partition cuts S x 2 = 8 stages" ] && pass=$((pass + 1)) || { echo "FAIL zb-v: no note on the S x 2 stages: $(sed -n 2p /tmp/pipec_cli_err.$$)"; fail=$((fail + 1)); }
expect plan-zbv-s1 0 '' "$pipec" plan --schedule zb-v samples/mlp_digits.json
[ "$LAST_OUT" = "$(cat tests/golden/mlp_digits.plan)" ] && pass=$((pass + 1)) || { echo "FAIL plan zb-v at S = 1: not the one-stage plan"; fail=$((fail + 1)); }
grep -q "zb-v (two stages per rank in a V" <<<"$("$pipec" --help)" && pass=$((pass + 1)) || { echo "FAIL --help: no zb-v"; fail=$((fail + 1)); }
expect plan-interleaved-bad-m 1 "^samples/mlp_digits.json: error: schedule interleaved: needs the microbatches M a multiple of the stages S \(M = 4, S = 3\)$" "$pipec" plan --stages 3 --microbatches 4 --schedule interleaved --virtual 2 samples/mlp_digits.json
[ -z "$LAST_OUT" ] && [ "$(wc -l </tmp/pipec_cli_err.$$)" -eq 1 ] && pass=$((pass + 1)) || { echo "FAIL interleaved bad M: not one error, no output"; fail=$((fail + 1)); }
expect plan-virtual-too-many 1 "^samples/mlp_digits.json: error: --stages 8: the model has only 6 forward nodes$" "$pipec" plan --stages 4 --microbatches 8 --schedule interleaved --virtual 2 samples/mlp_digits.json
[ "$(sed -n 2p /tmp/pipec_cli_err.$$)" = "pipec: note: with --virtual 2 the partition cuts S x V = 8 stages" ] && pass=$((pass + 1)) || { echo "FAIL --virtual: no note on the S x V stages"; fail=$((fail + 1)); }
expect plan-s1-schedule 0 '' "$pipec" plan --schedule gpipe samples/mlp_digits.json
[ "$LAST_OUT" = "$(cat tests/golden/mlp_digits.plan)" ] && pass=$((pass + 1)) || { echo "FAIL plan at S = 1 with --schedule: not the one-stage plan"; fail=$((fail + 1)); }
# compile at S > 1: a program per rank and launch.sh (an MPMD mpirun line over the ranks).
s3=$(mktemp -d)
expect stages-compile 0 "^pipec: wrote $s3/x/rank0.c .. rank2.c, $s3/x/bin/rank0 .. rank2 and $s3/x/launch.sh \(3 ranks\)$" "$pipec" compile --stages 3 samples/mlp_digits.json -o "$s3/x"
[ -x "$s3/x/bin/rank0" ] && [ -x "$s3/x/bin/rank2" ] && [ ! -e "$s3/x/bin/rank3" ] && [ -x "$s3/x/launch.sh" ] &&
  [ "$(grep -c -- '-np 1 "$here/bin/rank[0-2]" "$@"' "$s3/x/launch.sh")" -eq 3 ] &&
  pass=$((pass + 1)) || { echo "FAIL compile --stages 3: the rank programs and launch.sh"; fail=$((fail + 1)); }
expect stages-dump-codegen 0 '' "$pipec" compile --stages 2 --dump-after=codegen samples/mlp_digits.json -o "$s3/y"
[ "$(grep -c '^// Training program for model mlp_digits, rank [01] of 2 (cpu target).$' <<<"$LAST_OUT")" -eq 2 ] &&
  pass=$((pass + 1)) || { echo "FAIL --dump-after=codegen at S = 2: both ranks' programs"; fail=$((fail + 1)); }
rm -rf "$s3"
expect stages-check 0 '' "$pipec" check --stages 2 samples/gpt_char.json
[ "$LAST_OUT" = "$(cat tests/golden/gpt_char.check)" ] && pass=$((pass + 1)) || { echo "FAIL check --stages 2: not the summary"; fail=$((fail + 1)); }
expect stages-one 0 '' "$pipec" print --stages 1 --dump-after=partition samples/skip_net.json
[[ "$LAST_OUT" == "partition of skip_net: 1 stage (one stage)"* ]] && pass=$((pass + 1)) || { echo "FAIL --stages 1: $LAST_OUT"; fail=$((fail + 1)); }
expect split-blocks 0 '' "$pipec" print --split transformer.h.1,layer.3 --dump-after=partition samples/gpt_char.json
[ "$(grep '^  nodes' <<<"$LAST_OUT" | paste -sd'|')" = "  nodes     transformer.wte, transformer.emb, transformer.h.0|  nodes     transformer.h.1..2|  nodes     transformer.h.3, transformer.ln_f, logits, loss" ] &&
  pass=$((pass + 1)) || { echo "FAIL --split transformer.h.1,layer.3: $LAST_OUT"; fail=$((fail + 1)); }
expect split-node 0 '' "$pipec" print --split narrow --stages 2 --dump-after=partition samples/skip_net.json
grep -q "^  nodes     narrow, diff, skip, body2, t2, logits, loss$" <<<"$LAST_OUT" && pass=$((pass + 1)) || { echo "FAIL --split narrow: $LAST_OUT"; fail=$((fail + 1)); }
expect split-unknown 1 "^samples/gpt_char.json: error: --split: the model has no node, block instance or module named 'nope'$" "$pipec" check --split nope samples/gpt_char.json
expect split-order 1 "^samples/gpt_char.json: error: --split: 'transformer.h.1' comes before 'transformer.h.2'" "$pipec" check --split transformer.h.2,transformer.h.1 samples/gpt_char.json
expect split-count 1 "^samples/gpt_char.json: error: --split names 2 cuts, which make 3 stages, but --stages is 2$" "$pipec" check --split transformer.h.1,transformer.h.2 --stages 2 samples/gpt_char.json
expect split-empty 2 "^pipec: --split: an empty name in 'a,,b'$" "$pipec" check --split a,,b samples/gpt_char.json
expect stages-zero 2 "^pipec: --stages: expected a number of stages from 1 to 65536, got '0'$" "$pipec" check --stages 0 samples/gpt_char.json
expect stages-many 1 "^samples/mlp_digits.json: error: --stages 7: the model has only 6 forward nodes$" "$pipec" check --stages 7 samples/mlp_digits.json
expect rate-bad 2 "^pipec: --flops-rate: expected a positive number \(GFLOP/s\), got '-1'$" "$pipec" check --stages 2 --flops-rate -1 samples/gpt_char.json
expect bw-bad 2 "^pipec: --bandwidth: expected a positive number \(GB/s\), got 'x'$" "$pipec" check --stages 2 --bandwidth x samples/gpt_char.json
expect memcap-bad 2 "^pipec: --mem-cap: expected a number of bytes, got '1G'$" "$pipec" check --stages 2 --mem-cap 1G samples/gpt_char.json
expect memcap-tight 1 "^samples/gpt_char.json: error: --mem-cap 1000: no cut into 3 stages keeps every stage's estimated memory under the cap$" "$pipec" check --stages 3 --mem-cap 1000 samples/gpt_char.json
# The estimate lets this cap through; the real per-rank plan refuses it: rank 1 (26580032 bytes)
# only, rank 0's 26318848 fit. A cap every plan fits is no error.
expect memcap-plan 1 "^samples/gpt_char.json: error: --mem-cap 26400000: rank 1's memory plan needs 26580032 bytes \(params 1608704, grads 1675264, optimizer 3217408, activations 20078656\): use more --stages, a schedule that keeps fewer microbatches in flight \(1f1b or zb-h1 rather than gpipe\), or a larger cap$" "$pipec" plan --stages 2 --mem-cap 26400000 samples/gpt_char.json
[ "$(grep -c 'error: --mem-cap' /tmp/pipec_cli_err.$$)" = 1 ] && pass=$((pass + 1)) || { echo "FAIL memcap-plan: not one error (rank 0 fits)"; fail=$((fail + 1)); }
expect memcap-plan-fits 0 '' "$pipec" plan --stages 2 --mem-cap 26580032 samples/gpt_char.json
# Any DAG: a tensor read by two later stages is sent to each (the sender counts both).
expect split-fanout 0 '' "$pipec" print --split gate,narrow --dump-after=partition samples/skip_net.json
grep -qx "send 'a0' (B,64) stage 0 -> 1 2" <<<"$LAST_OUT" && grep -q "^  sends     6.14 KB activations, 0 B gradients" <<<"$LAST_OUT" &&
  pass=$((pass + 1)) || { echo "FAIL --split gate,narrow (fan-out): $LAST_OUT"; fail=$((fail + 1)); }
# The comm pass on the same cut: a0 goes directly to both later stages (never relayed by stage 1),
# each of its gradient contributions comes back as a channel of its own, the shared weight's two
# stages exchange their partial sums.
expect comm-fanout 0 '' "$pipec" print --split gate,narrow --dump-after=comm samples/skip_net.json
grep -qx "c0 'a0' v0 -> v1 as 'a0@v1' 2048 B per microbatch fwd" <<<"$LAST_OUT" && grep -qx "c1 'a0' v0 -> v2 as 'a0@v2' 2048 B per microbatch fwd" <<<"$LAST_OUT" &&
  ! grep -q "'a0' v1 -> v2" <<<"$LAST_OUT" && grep -qx "c5 'd:skip@body2#0' v2 -> v0 as 'd:skip@body2#0@v0' 2048 B per microbatch grad" <<<"$LAST_OUT" &&
  grep -qx "c9 'd:a0@gate#0' v1 -> v0 as 'd:a0@gate#0@v0' 2048 B per microbatch grad" <<<"$LAST_OUT" &&
  grep -qx "exchange 'shared.weight' stages v0 v2 (partial sums, in use order)" <<<"$LAST_OUT" &&
  [ "$(grep '^  use buffer' <<<"$LAST_OUT" | paste -sd'|')" = "  use buffer 'd:shared.weight@body1#1' v0|  use buffer 'd:shared.weight@body2#1' v2" ] &&
  pass=$((pass + 1)) || { echo "FAIL comm --split gate,narrow: $LAST_OUT"; fail=$((fail + 1)); }
# The IR after the comm pass: each received copy declared, its stage's reads rewired to it.
expect print-recv 0 '' "$pipec" print --stages 2 samples/mlp_digits.json
grep -qx 'recv "relu1@v1": f32(B,128)' <<<"$LAST_OUT" && grep -qx 'node fc2 = linear("relu1@v1", fc2.weight, fc2.bias): f32(B,128)' <<<"$LAST_OUT" &&
  pass=$((pass + 1)) || { echo "FAIL print --stages 2: no received copy of relu1: $LAST_OUT"; fail=$((fail + 1)); }
# Hints: split_before marks restrict the automatic cut to them; a stage hint pins, and a hint that
# sends an edge backwards is an error at the node with its caret.
hint=$(mktemp -d)
python3 - "$hint" <<'PY'
import json, sys
d = sys.argv[1]
m = json.load(open("samples/gpt_char.json"))
rep = [n for n in m["nodes"] if "repeat" in n][0]
rep["split_before"] = True
json.dump(m, open(d + "/marks.json", "w"), indent=1)
rep.pop("split_before")
rep["stage"] = [0, 0, 1, 1]
json.dump(m, open(d + "/stages.json", "w"), indent=1)
rep["stage"] = [0, 1, 1, 0]
json.dump(m, open(d + "/back.json", "w"), indent=1)
PY
expect hint-marks 0 '' "$pipec" print --stages 3 --dump-after=partition "$hint/marks.json"
[ "$(grep -c '^  nodes     transformer.h' <<<"$LAST_OUT")" = 2 ] && ! grep -q '^  nodes     logits' <<<"$LAST_OUT" &&
  pass=$((pass + 1)) || { echo "FAIL split_before marks: $LAST_OUT"; fail=$((fail + 1)); }
expect hint-stages 0 '' "$pipec" print --stages 2 --dump-after=partition "$hint/stages.json"
[ "$(grep '^  nodes' <<<"$LAST_OUT" | paste -sd'|')" = "  nodes     transformer.wte, transformer.emb, transformer.h.0..1|  nodes     transformer.h.2..3, transformer.ln_f, logits, loss" ] && grep -q "(stage hints)" <<<"$LAST_OUT" &&
  pass=$((pass + 1)) || { echo "FAIL stage hints: $LAST_OUT"; fail=$((fail + 1)); }
expect hint-back 1 "^$hint/back.json:[0-9]+:[0-9]+: error: blocks\[0\]\.nodes\[0\] \(instance 3\) \"transformer.h.3.ln_1\": on stage 0, but its input 'transformer.h.2.out' is made on stage 1" "$pipec" check --stages 2 "$hint/back.json"
grep -q '^ *\^$' /tmp/pipec_cli_err.$$ && pass=$((pass + 1)) || { echo "FAIL stage hint error: no caret"; fail=$((fail + 1)); }
rm -rf "$hint"
# A slow link moves the cut to where less crosses: with transfers nearly free the FLOPs decide.
expect rate-cut 0 '' "$pipec" print --stages 2 --bandwidth 1e-6 --dump-after=partition samples/skip_net.json
slow=$(grep -c "^send " <<<"$LAST_OUT")
expect rate-cut-fast 0 '' "$pipec" print --stages 2 --bandwidth 1e6 --dump-after=partition samples/skip_net.json
fast=$(grep -c "^send " <<<"$LAST_OUT")
[ "$slow" -le "$fast" ] && [ "$(grep -c 'cost model: FLOPs at 50 GFLOP/s, transfers at 1e-06 GB/s' <<<"$("$pipec" print --stages 2 --bandwidth 1e-6 --dump-after=partition samples/skip_net.json)")" = 1 ] &&
  pass=$((pass + 1)) || { echo "FAIL --bandwidth: $slow sends at a slow link, $fast at a fast one"; fail=$((fail + 1)); }
# --stop-after: the command's output only when its passes ran.
expect stop-check-early 0 '' "$pipec" check --stop-after=expand samples/mlp_digits.json
[ -z "$LAST_OUT" ] && pass=$((pass + 1)) || { echo "FAIL check --stop-after=expand printed: $LAST_OUT"; fail=$((fail + 1)); }
expect stop-check-late 0 '' "$pipec" check --stop-after=memplan --time-passes samples/mlp_digits.json
[[ "$LAST_OUT" == "model        mlp_digits"* ]] && grep -q "pass memplan" /tmp/pipec_cli_err.$$ && ! grep -q codegen /tmp/pipec_cli_err.$$ &&
  pass=$((pass + 1)) || { echo "FAIL check --stop-after=memplan"; fail=$((fail + 1)); }
expect stop-print 0 '' "$pipec" print --stop-after=expand samples/mlp_digits.json
[ "$LAST_OUT" = "$("$pipec" print --dump-after=expand samples/mlp_digits.json)" ] && pass=$((pass + 1)) || { echo "FAIL print --stop-after=expand"; fail=$((fail + 1)); }
expect stop-print-autodiff 0 '' "$pipec" print --stop-after=autodiff samples/mlp_digits.json
[ "$LAST_OUT" = "$("$pipec" print --dump-after=autodiff samples/mlp_digits.json)" ] && pass=$((pass + 1)) || { echo "FAIL print --stop-after=autodiff"; fail=$((fail + 1)); }
stopdir=$(mktemp -d)
expect stop-compile 0 '' "$pipec" compile --stop-after=memplan samples/mlp_digits.json -o "$stopdir/a"
[ -z "$LAST_OUT" ] && [ ! -e "$stopdir/a" ] && ! [ -s /tmp/pipec_cli_err.$$ ] && pass=$((pass + 1)) || { echo "FAIL compile --stop-after=memplan wrote something"; fail=$((fail + 1)); }
# The codegen dump is the program as written; print does not build it.
expect dump-codegen 0 '' "$pipec" print --dump-after=codegen samples/mlp_digits.json -o "$stopdir/b"
[ "$LAST_OUT" = "$(cat "$stopdir/b/rank0.c")" ] && [[ "$LAST_OUT" == *"int main("* ]] && [ ! -e "$stopdir/b/bin/train" ] &&
  pass=$((pass + 1)) || { echo "FAIL --dump-after=codegen"; fail=$((fail + 1)); }
rm -rf "$stopdir"
# A model error in a pass that runs for a dump is exit 1, with its diagnostic.
expect dump-model-error 1 "^tests/bad_training/lr_negative.json:157:4: error: training.optimizer.lr: " "$pipec" print --dump-after=autodiff tests/bad_training/lr_negative.json

# The batch/microbatch mismatch points at the file unless an override of batch or microbatches
# is the cause: other overrides keep the location.
bnm=tests/bad_training/batch_not_multiple.json
expect mismatch-file 1 "^$bnm:152:3: error: training: batch 10 is not a multiple of microbatches 4$" "$pipec" plan "$bnm"
expect mismatch-other-set 1 "^$bnm:152:3: error: training: batch 10 is not a multiple of microbatches 4$" "$pipec" plan --set steps=5 --set optimizer.lr=0.01 "$bnm"
expect mismatch-set-batch 1 "^$bnm: error: training: batch 6 is not a multiple of microbatches 4$" "$pipec" plan --batch 6 "$bnm"
expect mismatch-set-microbatches 1 "^$bnm: error: training: batch 10 is not a multiple of microbatches 3$" "$pipec" plan --set microbatches=3 "$bnm"
# The excerpt under the located message, and none under the unlocated one.
"$pipec" plan --set steps=5 "$bnm" 2>&1 | sed -n 2,3p | cmp -s - <(printf '  "microbatches": 4,\n  ^\n') &&
  pass=$((pass + 1)) || { echo "FAIL mismatch excerpt"; fail=$((fail + 1)); }
[ "$("$pipec" plan --batch 6 "$bnm" 2>&1 | wc -l)" -eq 1 ] && pass=$((pass + 1)) || { echo "FAIL unlocated mismatch has an excerpt"; fail=$((fail + 1)); }

# run = compile + build + exec: the program's own exit status and arguments come through.
rundir=$(mktemp -d)
expect run 0 '' "$pipec" run samples/mlp_digits.json -o "$rundir" -- --steps 3 --quiet --loss-log "$rundir/l"
[ "$(wc -l <"$rundir/l")" -eq 3 ] && pass=$((pass + 1)) || { echo "FAIL run: --loss-log has not 3 lines"; fail=$((fail + 1)); }
expect run-bad-program-flag 2 "^train: --steps: expected a non-negative integer, got 'x'$" \
  "$pipec" run samples/mlp_digits.json -o "$rundir" -- --steps x
# -o creates missing parents (mkdir -p); a component that is a file is a clear error.
expect output-parents 0 '' "$pipec" compile samples/mlp_digits.json -o "$rundir/a/b/c"
[ -x "$rundir/a/b/c/bin/train" ] && pass=$((pass + 1)) || { echo "FAIL -o a/b/c: no a/b/c/bin/train"; fail=$((fail + 1)); }
touch "$rundir/file"
expect output-through-file 1 "^samples/mlp_digits.json: error: cannot create output directory '$rundir/file/x': '$rundir/file' is not a directory$" \
  "$pipec" compile samples/mlp_digits.json -o "$rundir/file/x"
expect output-is-file 1 "^samples/mlp_digits.json: error: cannot create output directory '$rundir/file': '$rundir/file' is not a directory$" \
  "$pipec" run samples/mlp_digits.json -o "$rundir/file"
expect output-empty 2 "^pipec: -o: the output directory is an empty string$" "$pipec" compile samples/mlp_digits.json -o ""
# The program's --help says what it was built for.
"$rundir/a/b/c/bin/train" --help | grep -qF "built for any x86-64 CPU" && pass=$((pass + 1)) || { echo "FAIL train --help: no 'built for any x86-64 CPU'"; fail=$((fail + 1)); }
expect march-native 0 '' "$pipec" compile --march=native samples/mlp_digits.json -o "$rundir/n"
"$rundir/n/bin/train" --help | grep -qF "built for this machine's CPU, --march=native" && pass=$((pass + 1)) || { echo "FAIL train --help: no 'built for this machine'"; fail=$((fail + 1)); }
rm -rf "$rundir"

# --stages S with fewer microbatches M than S: one warning naming the bubble it implies (exit 0):
# (S - 1) / (M + S - 1) for gpipe and 1f1b, the simulation's at unit costs for the others; none
# with M >= S.
bubble_err() { "$pipec" plan samples/gpt_char.json --batch 8 "$@" 2>&1 >/dev/null; }
expect bubble-warning 0 '' "$pipec" plan samples/gpt_char.json --stages 4 --microbatches 2 --batch 8
want="samples/gpt_char.json: warning: --stages 4 with 2 microbatches: the ranks idle (S - 1) / (M + S - 1) = 3 / 5 = 60.0% of every step (the pipeline bubble); use --microbatches >= 4 (docs/pipeline.md)"
[ "$(cat /tmp/pipec_cli_err.$$)" = "$want" ] && pass=$((pass + 1)) ||
  { echo "FAIL bubble warning (1f1b): $(cat /tmp/pipec_cli_err.$$)"; fail=$((fail + 1)); }
want="samples/gpt_char.json: warning: --stages 2 with 1 microbatch per replica: the ranks idle (S - 1) / (M + S - 1) = 1 / 2 = 50.0% of every step (the pipeline bubble); use --microbatches >= 4 (docs/pipeline.md)"
[ "$(bubble_err --stages 2 --microbatches 2 --replicas 2 --schedule gpipe)" = "$want" ] && pass=$((pass + 1)) ||
  { echo "FAIL bubble warning (--replicas 2): $(bubble_err --stages 2 --microbatches 2 --replicas 2 --schedule gpipe)"; fail=$((fail + 1)); }
want="samples/gpt_char.json: warning: --stages 2 with 1 microbatch: the ranks idle 40.0% of every step (the pipeline bubble of zb-v at unit costs, as plan predicts it); use --microbatches >= 2 (docs/pipeline.md)"
[ "$(bubble_err --stages 2 --microbatches 1 --schedule zb-v)" = "$want" ] && pass=$((pass + 1)) ||
  { echo "FAIL bubble warning (zb-v): $(bubble_err --stages 2 --microbatches 1 --schedule zb-v)"; fail=$((fail + 1)); }
[ -z "$(bubble_err --stages 4 --microbatches 4)" ] && pass=$((pass + 1)) ||
  { echo "FAIL bubble warning with M = S: $(bubble_err --stages 4 --microbatches 4)"; fail=$((fail + 1)); }

rm -f /tmp/pipec_cli_err.$$
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
