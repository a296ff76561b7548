#!/usr/bin/env bash
# Pipeline parallelism end to end (docs/pipeline.md): `pipec compile --stages S` builds one program
# per rank and launch.sh runs them under mpirun; 3 training steps must give a loss log, parameters
# and optimizer state byte for byte those of the one-stage program with the same microbatches M,
# for every schedule (gpipe, 1f1b, zb-h1, interleaved with --virtual 2), on mlp_digits, a 2-layer
# gpt_char (tied embedding and head on different ranks) and skip_net (a skip across stages, a
# shared weight). pipe_same is the comparison, reused by the full matrix.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
export OMPI_MCA_mpi_yield_when_idle=1 # more ranks than cores here: ranks yield while they wait
run_opts=(--steps 3 --threads 1 --quiet --eval-every 0 --eval-batches 1)

# pipe_run PREFIX DIR: DIR/launch.sh for 3 steps, saving PREFIX.st (and .optim), PREFIX.loss.
pipe_run() { "$2/launch.sh" "${run_opts[@]}" --save "$1.st" --loss-log "$1.loss" >"$1.out" 2>&1; }

# pipe_ref MODEL M [PIPEC-OPTIONS...]: the one-stage reference run (built once per arguments);
# prints its prefix.
pipe_ref() {
  local model=$1 M=$2 key
  shift 2
  key=ref-$(echo "$model $M $*" | md5sum | cut -c1-10)
  if [ ! -e "$tmp/$key.loss" ]; then
    "$pipec" compile "$model" --microbatches "$M" "$@" -o "$tmp/$key.d" >/dev/null 2>"$tmp/$key.cerr" &&
      pipe_run "$tmp/$key" "$tmp/$key.d" || rm -f "$tmp/$key.loss"
  fi
  echo "$tmp/$key"
}

# pipe_same NAME MODEL S M 'SCHEDULE-OPTIONS' [PIPEC-OPTIONS...]: compiled with --stages S
# --microbatches M and the schedule options (word-split: 'interleaved --virtual 2'), run under
# launch.sh, the bits of the one-stage run with the same M and PIPEC-OPTIONS.
pipe_same() {
  local name=$1 model=$2 S=$3 M=$4 sched=$5 ref dir
  shift 5
  ref=$(pipe_ref "$model" "$M" "$@")
  if [ ! -e "$ref.loss" ]; then
    bad "$name: the one-stage reference failed: $(tail -n 2 "$ref.cerr" "$ref.out" 2>/dev/null)"
    return 1
  fi
  dir="$tmp/$name.d"
  # shellcheck disable=SC2086 # the schedule options are words
  if ! "$pipec" compile "$model" --stages "$S" --microbatches "$M" --schedule $sched "$@" \
    -o "$dir" >/dev/null 2>"$tmp/$name.cerr"; then
    bad "$name: compile: $(head -n 3 "$tmp/$name.cerr")"
    return 1
  fi
  if ! pipe_run "$tmp/$name" "$dir"; then
    bad "$name: run: $(tail -n 3 "$tmp/$name.out")"
    return 1
  fi
  same_bits "$name" "$ref" "$tmp/$name"
}

# ---- launch.sh at S = 1 runs the one program (bin/rank0 is bin/train): the same bits.
"$pipec" compile samples/mlp_digits.json -o "$tmp/one" >/dev/null 2>&1 || bad "compile S = 1"
check "S = 1: bin/rank0 is bin/train" test "$tmp/one/bin/rank0" -ef "$tmp/one/bin/train"
pipe_run "$tmp/one-launch" "$tmp/one" || bad "S = 1: launch.sh: $(tail -n 3 "$tmp/one-launch.out")"
"$tmp/one/bin/train" "${run_opts[@]}" --save "$tmp/one-train.st" --loss-log "$tmp/one-train.loss" \
  >/dev/null 2>&1 || bad "S = 1: bin/train"
same_bits "S = 1: launch.sh = bin/train" "$tmp/one-train" "$tmp/one-launch"

# ---- The equality matrix (small; the full one is pipeline_matrix.sh).
pipe_same mlp-s2-m4-gpipe samples/mlp_digits.json 2 4 gpipe
pipe_same mlp-s2-m4-1f1b samples/mlp_digits.json 2 4 1f1b
pipe_same mlp-s2-m4-zbh1 samples/mlp_digits.json 2 4 zb-h1
pipe_same mlp-s2-m4-interleaved samples/mlp_digits.json 2 4 'interleaved --virtual 2'
pipe_same mlp-s2-m1-1f1b samples/mlp_digits.json 2 1 1f1b
pipe_same mlp-s3-m2-1f1b samples/mlp_digits.json 3 2 1f1b
pipe_same gpt2-s2-m2-1f1b samples/gpt_char.json 2 2 1f1b -D L=2
# skip_net has no data binding: the synthetic table of the parity and hashes tests (batch 16).
python3 "$root/tests/skip_net_table.py" samples/skip_net.json "$tmp/skip.json" "$tmp/skip.csv"
pipe_same skip-s2-m2-zbh1 "$tmp/skip.json" 2 2 zb-h1
pipe_same skip-s3-m4-gpipe "$tmp/skip.json" 3 4 gpipe
pipe_same skip-s2-m4-interleaved "$tmp/skip.json" 2 4 'interleaved --virtual 2'
pipe_same skip-s4-m8-1f1b "$tmp/skip.json" 4 8 1f1b
# Cuts by name: inside the skip span (3 stages), and between the tied embedding and the head.
pipe_same skip-split-zbh1 "$tmp/skip.json" 3 4 'zb-h1 --split gated,skip'
pipe_same gpt2-split-1f1b samples/gpt_char.json 2 4 '1f1b --split transformer.ln_f' -D L=2

# ---- pipec run --stages S: compiles and replaces itself with launch.sh; the job's exit status.
"$pipec" run samples/mlp_digits.json --stages 2 --microbatches 2 -o "$tmp/run" -- \
  "${run_opts[@]}" --steps 2 --loss-log "$tmp/run.loss" >"$tmp/run.out" 2>&1
check "run --stages 2: exit 0" test $? -eq 0
check "run --stages 2: 2 loss lines" test "$(wc -l <"$tmp/run.loss" 2>/dev/null)" = 2
"$pipec" run samples/mlp_digits.json --stages 2 --microbatches 2 -o "$tmp/run" -- --steps x \
  >"$tmp/run.out" 2>&1
check "run --stages 2 with a bad program option: the program's exit status 2" test $? -eq 2
check "run --stages 2 with a bad program option: its message, rank-prefixed" \
  grep -q "^\[rank [01]\] .*--steps: expected a non-negative integer, got 'x'" "$tmp/run.out"

# ---- launch.sh: nothing of the model reaches it raw (a name with quotes, $(...) and a line
# break); it runs the job all the same.
python3 - "$tmp/evil.json" <<'PY'
import json, os, sys
m = json.load(open("samples/mlp_digits.json"))
m["name"] = "x'\"; touch PWNED; $(touch PWNED2)\n`touch PWNED3`"
d = m["training"]["data"]
d["path"] = os.path.abspath(os.path.join("samples", d["path"]))
json.dump(m, open(sys.argv[1], "w"))
PY
"$pipec" compile "$tmp/evil.json" --stages 2 --microbatches 2 -o "$tmp/evil" >/dev/null 2>&1 || bad "compile the odd name"
check "launch.sh is executable" test -x "$tmp/evil/launch.sh"
check "launch.sh holds the name only in a comment, defused" \
  grep -qxF "# Runs the training job of model x'\"; touch PWNED; \$(touch PWNED2)_\`touch PWNED3\`: 2 ranks, one program per rank (bin/rank<r>) under mpirun." "$tmp/evil/launch.sh"
check "launch.sh: the name in no other line" test "$(grep -c PWNED "$tmp/evil/launch.sh")" -eq 1
(cd "$tmp" && "$tmp/evil/launch.sh" "${run_opts[@]}" --loss-log "$tmp/evil.loss" >"$tmp/evil.out" 2>&1) ||
  bad "run the odd name: $(tail -n 3 "$tmp/evil.out")"
check "the odd name ran nothing" test ! -e "$tmp/PWNED" -a ! -e "$tmp/PWNED2" -a ! -e "$tmp/PWNED3"
check "the odd name trains: 3 loss lines" test "$(wc -l <"$tmp/evil.loss" 2>/dev/null)" = 3
finish
