# Shared helpers of the end-to-end tests: counters, expectations, a temp dir removed at exit.
# Usage: source lib.sh; each test script ends with `finish`.
set -u
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
# sanitized PROGRAM: whether PROGRAM was built with AddressSanitizer (the sanitizer tree's programs).
sanitized() { nm "$1" 2>/dev/null | grep -q __asan_init; }
bad() {
  echo "FAIL $*"
  fail=$((fail + 1))
}
# check NAME CONDITION-COMMAND...: counts a pass when the command succeeds.
check() {
  local name=$1
  shift
  if "$@"; then ok; else bad "$name"; fi
}
# expect NAME RC STDERR-REGEX CMD...: the command's exit status, its first stderr line, a HINT line
# when it fails with 1 (matching $hint_re, default '^HINT: '), and no sanitizer report (a leak
# report on an error path does not change the exit status).
expect() {
  local name=$1 want=$2 re=$3
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? first
  first=$(head -n 1 "$tmp/err")
  # A job under launch.sh: its first rank's line (mpirun's MPI_ABORT banner may come first).
  [ -n "${expect_job_line:-}" ] && first=$(grep -m1 '^\[rank ' "$tmp/err")
  if [ $rc -ne "$want" ]; then
    bad "$name: exit $rc, want $want ($first)"
  elif grep -q 'Sanitizer' "$tmp/err"; then
    bad "$name: sanitizer report: $(grep -m1 'Sanitizer' "$tmp/err")"
  elif ! [[ "$first" =~ $re ]]; then
    bad "$name: stderr '$first' does not match '$re'"
  elif [ "$want" -eq 1 ] && ! grep -qE "${hint_re:-^HINT: }" "$tmp/err"; then
    bad "$name: no HINT line"
  else
    ok
  fi
}
# expect_job NAME STATUS REGEX CMD...: expect for a job that one rank ends through MPI_Abort (the
# others are stopped): REGEX matches its first '[rank r]' line, wherever mpirun's banner falls.
expect_job() {
  expect_job_line=1
  expect "$@"
  expect_job_line=
}
# gpt_char_l2 FILE: the flat 2-layer character GPT the pipeline tests share (2 heads, width 32,
# context 16: tied embedding and head, cuts inside its layers), its data path made absolute.
gpt_char_l2() {
  python3 "$root/samples/gen_gpt.py" --layers 2 --heads 2 --embd 32 --context 16 --flat \
    --name gpt_char_l2 | sed "s#\"../../shared/data/#\"$root/../shared/data/#" >"$1"
}
finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
# same_bits NAME REF RUN: the loss log, the parameters and the optimizer state of a run
# (RUN.loss, RUN.st, RUN.st.optim) are byte for byte the reference run's (REF.*).
same_bits() {
  local name=$1 ref=$2 run=$3 f
  for f in loss st st.optim; do
    if ! cmp -s "$ref.$f" "$run.$f"; then
      bad "$name: $f differs from the reference: $(cmp "$ref.$f" "$run.$f" 2>&1 | head -n 1)"
      return 1
    fi
  done
  ok
}

# ---- Configurations of one model (the checkpoint, shard and replica tests): $file compiled
# with ${common[@]}, run with ${run_args[@]}; the script sets the three.
# build NAME ARGS...: compile a configuration into $tmp/NAME (its compile messages in NAME.msg).
build() {
  local name=$1
  shift
  "$pipec" compile "$file" "${common[@]}" "$@" -o "$tmp/$name" >/dev/null 2>"$tmp/$name.msg" ||
    bad "compile $name: $(head -3 "$tmp/$name.msg")"
}
# go NAME LABEL ARGS...: run configuration NAME (launch.sh, at most 120 s), outputs under
# $tmp/LABEL.* (.loss, .out, .err).
go() {
  local name=$1 label=$2 out=$tmp/$2
  shift 2
  timeout -k 5 120 "$tmp/$name/launch.sh" "${run_args[@]}" --loss-log "$out.loss" "$@" </dev/null \
    >"$out.out" 2>"$out.err"
  local rc=$?
  [ $rc -eq 0 ] || bad "$label ($name): launch.sh exit $rc: $(grep -v '^-*$' "$out.err" | head -2 | tr '\n' ' ')"
}

# ---- Pipelines (pipeline.sh and the equality matrix): the one-stage reference and the run at S
# stages, compared by same_bits. They use $pipec, $tmp and pipe_opts (the program's options).
pipe_opts=(--steps 3 --threads 1 --quiet --eval-every 0 --eval-batches 1)

# pipe_run PREFIX DIR: DIR/launch.sh for 3 steps, saving PREFIX.st (and .optim), PREFIX.loss.
pipe_run() { "$2/launch.sh" "${pipe_opts[@]}" --save "$1.st" --loss-log "$1.loss" >"$1.out" 2>&1; }

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
