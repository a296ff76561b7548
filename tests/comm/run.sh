#!/usr/bin/env bash
# The pipeline runtime under mpirun, without the compiler: tests/comm/test_comm.c (a hand-written
# rank program over libpipert + libpipert_mpi; its top paragraph lists the modes).
# Usage: run.sh TEST_COMM_BINARY (empty: Open MPI was not found at build time). Exit 77: skipped.
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../e2e/lib.sh"
bin=${1:+$(realpath "$1")}
if [ -z "$bin" ]; then
  echo "SKIP: Open MPI (pkg-config ompi-c) was not found at build time: no libpipert_mpi"
  exit 77
fi
if ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun not found (apt-get install openmpi-bin)"
  exit 77
fi
export OMPI_MCA_mpi_yield_when_idle=1 # more ranks than cores here
mpi=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
cd "$tmp" || exit 1

# job S MODE ARGS...: runs the rank program on S ranks (S = 1: alone, no mpirun); stdout in
# $tmp/out, stderr in $tmp/err, exit status in $rc, wall seconds in $secs.
job() {
  local s=$1 mode=$2 t0
  shift 2
  t0=$(date +%s.%N)
  if [ "$s" = 1 ]; then
    TEST_COMM_MODE=$mode TEST_COMM_RANKS=1 timeout 60 "$bin" "$@" >out 2>err
  else
    TEST_COMM_MODE=$mode TEST_COMM_RANKS=$s timeout 60 "${mpi[@]}" -np "$s" "$bin" "$@" >out 2>err
  fi
  rc=$?
  if grep -q 'Sanitizer' err; then # the whole report, so that a rare one can be read afterwards
    bad "$mode S=$s: sanitizer report: $(grep -m1 Sanitizer err)"
    grep -A40 -m1 Sanitizer err
  fi
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}
# Every line of out and err starts with "[rank R] " for R < $1.
all_prefixed() {
  ! grep -qvE "^\[rank [0-$(($1 - 1))]\] " out err
}
has() { grep -qE "$2" "$1"; }
fast() { awk -v s="$secs" -v m="$1" 'BEGIN { exit !(s < m) }'; }

# 1. Messages of several streams and microbatches arrive whole, in their own buffers, 3 steps in a
#    row (the requests are reused); every line prefixed, from stdio, an OpenMP thread, stderr, and
#    a last line without a newline printed after MPI_Finalize.
for s in 2 3; do
  job $s messages
  check "messages S=$s: exit 0 ($(head -c 300 err))" [ $rc -eq 0 ]
  check "messages S=$s: every rank ok" [ "$(grep -c 'messages ok' out)" -eq $s ]
  check "messages S=$s: every line prefixed" all_prefixed $s
  for ((r = 0; r < s; r++)); do
    check "messages S=$s: rank $r's lines" has out "^\[rank $r\] from an OpenMP thread$"
    check "messages S=$s: rank $r's last line" has out "^\[rank $r\] the last line has no newline$"
    check "messages S=$s: rank $r's stderr" has err "^\[rank $r\] a line on stderr$"
  done
done

# 1b. Progress during compute: rank 0's wait for a 1 MiB send completes while rank 1 computes and
#     calls pr_comm_progress, before rank 1 waits for anything (test_comm.c: ordered by a second
#     message that rank 1 sees land while computing); the data arrives whole, 3 steps.
job 2 progress
check "progress: exit 0 ($(grep -m1 error err))" [ $rc -eq 0 ]
check "progress: every step" [ "$(grep -c '^\[rank 1\] progress ok: step [0-2] (computed)$' out)" -eq 3 ]

# 2. The step end's all-gather: the squared norm of parameters spread over the ranks equals
#    pr_grad_norm2 of the whole table bit for bit (test_comm.c checks; step 0's sums of squares
#    1, 2^-53, 2^-53, 2^-52 give another sum when grouped by rank).
for s in 2 3; do
  job $s norm
  check "norm S=$s: exit 0 ($(head -c 300 err))" [ $rc -eq 0 ]
  check "norm S=$s: 5 steps on every rank" [ "$(grep -c 'norm ok' out)" -eq $((5 * s)) ]
  check "norm S=$s: step 0 is 1 + 2^-52" [ "$(grep -c 'norm ok 0x3ff0000000000001$' out)" -eq $s ]
done

# 3. The watchdog: rank 1 waits for a message rank 0 never sends; --timeout 2 ends the job in
#    seconds with the tensor, microbatch, peer and action, and who is missing: rank 0, which
#    sleeps outside MPI, does not answer the probe. When both wait for each other (a deadlock)
#    both answer, and the message says whom each waits for.
job 2 watchdog 2
check "watchdog: non-zero exit" [ $rc -ne 0 ]
check "watchdog: within seconds ($secs s)" fast 15
check "watchdog: the message ($(grep -m1 error err))" has err \
  "^\[rank 1\] comm_mpi\.c:[0-9]+: rank 1: error: timeout: waited 2 s for tensor 'blocks\.1\.h' microbatch 3 from rank 0 \(F\(v1, m3\)\); rank 0 does not respond$"
check "watchdog: the hint" has err "^\[rank 1\] HINT: .*raise --timeout SECONDS"
job 2 deadlock 2
check "deadlock: non-zero exit" [ $rc -ne 0 ]
check "deadlock: within seconds ($secs s)" fast 15
check "deadlock: the message ($(grep -m1 error err))" has err \
  "^\[rank ([01])\] comm_mpi\.c:[0-9]+: rank \1: error: timeout: waited 2 s for tensor 'blocks\.1\.h' microbatch 3 from rank [01] \(F\(v1, m3\)\); every rank responds \(rank 0 waits for rank 1, rank 1 for rank 0\)$"

# 4. A rank failing a prCheck takes the job down at once (rank 0 waits for it with the default
#    watchdog of 300 s), its message out first, prefixed.
job 2 fail
check "fail: non-zero exit" [ $rc -ne 0 ]
check "fail: within seconds ($secs s)" fast 15
check "fail: the message ($(grep -m1 error err))" has err \
  "^\[rank 1\] test_comm\.c:[0-9]+: rank 1: error: a deliberate failure$"
check "fail: the hint" has err "^\[rank 1\] HINT: nothing to fix: the test fails on purpose$"
check "fail: stdout before it" has out "^\[rank 1\] about to fail$"

# A rank stopped (SIGSTOP): the waiting rank's watchdog ends the job; a rank killed (SIGKILL):
# mpirun ends the job. Both within seconds, non-zero.
job 2 stop 3
check "stop: non-zero exit" [ $rc -ne 0 ]
check "stop: within seconds ($secs s)" fast 15
check "stop: the watchdog's message ($(grep -m1 error err))" has err \
  "^\[rank 0\] comm_mpi\.c:[0-9]+: rank 0: error: timeout: waited 3 s for tensor 'blocks\.1\.h' microbatch 3 from rank 1 \(F\(v1, m3\)\); rank 1 does not respond$"
job 2 kill 3
check "kill: non-zero exit" [ $rc -ne 0 ]
check "kill: within seconds ($secs s)" fast 15
check "kill: mpirun names the rank" has err "process rank 1 .*signal 9"

# 5. The rank and size are checked against the compiled ones.
job 1 messages # a 1-rank test program is fine alone; a 2-rank one started without mpirun is not
TEST_COMM_MODE=norm TEST_COMM_RANKS=2 timeout 60 "$bin" >out 2>err
rc=$?
check "mismatch: exit 1 (rc $rc)" [ $rc -eq 1 ]
check "mismatch: the message ($(head -n1 err))" has err \
  "^\[rank 0\] comm_mpi\.c:[0-9]+: rank 0: error: this program is rank 0 of a 2-rank job, but mpirun started it as rank 0 of 1$"
check "mismatch: the hint" has err "^\[rank 0\] HINT: run the job with OUT/launch.sh"

# 6. The training loop: 6 steps of a toy model (a tied and a shared parameter, AdamW, clipping)
#    give the same loss log and byte-identical checkpoints at S = 1, 2, 3; progress and eval on
#    the report rank only, the save on rank 0 only.
job 1 train --save s1.st --loss-log l1.txt
check "train S=1: exit 0 ($(head -c 300 err))" [ $rc -eq 0 ]
check "train S=1: no prefixes" has out "^step 6/6 \| loss 0\.2679 "
for s in 2 3; do
  job $s train --save s$s.st --loss-log l$s.txt
  last=$((s - 1))
  check "train S=$s: exit 0 ($(head -c 300 err))" [ $rc -eq 0 ]
  check "train S=$s: every line prefixed" all_prefixed $s
  check "train S=$s: loss log" cmp -s l1.txt l$s.txt
  check "train S=$s: checkpoint" cmp -s s1.st s$s.st
  check "train S=$s: optimizer state" cmp -s s1.st.optim s$s.st.optim
  check "train S=$s: progress on rank $last" has out "^\[rank $last\] step 6/6 \| loss 0\.2679 "
  check "train S=$s: eval on rank $last" has out "^\[rank $last\] eval  step 6 \| val loss 1\.6250$"
  check "train S=$s: one progress line per step logged" [ "$(grep -c '\] step ' out)" -eq 4 ]
  check "train S=$s: one eval line" [ "$(grep -c '\] eval ' out)" -eq 1 ]
  check "train S=$s: saved by rank 0" [ "$(grep -c '^\[rank 0\] saved s' out)" -eq 1 ]
  check "train S=$s: saved once" [ "$(grep -c 'saved s' out)" -eq 1 ]
done

# 7. --resume across S continues bit for bit: 3 steps at S = 1 resumed at S = 3, 3 steps at S = 3
#    resumed at S = 2, both to step 6: the checkpoints of 6 steps at S = 1. --init likewise.
job 1 train --steps 3 --save h1.st
job 3 train --resume h1.st --save r3.st --loss-log lr3.txt
check "resume 1 -> 3: exit 0 ($(head -c 300 err))" [ $rc -eq 0 ]
check "resume 1 -> 3: checkpoint" cmp -s s1.st r3.st
check "resume 1 -> 3: optimizer state" cmp -s s1.st.optim r3.st.optim
check "resume 1 -> 3: loss log" cmp -s <(tail -n 3 l1.txt) lr3.txt
job 3 train --steps 3 --save h3.st
check "save at step 3, S=3: same as S=1" cmp -s h1.st h3.st
job 2 train --resume h3.st --save r2.st
check "resume 3 -> 2: exit 0 ($(head -c 300 err))" [ $rc -eq 0 ]
check "resume 3 -> 2: checkpoint" cmp -s s1.st r2.st
job 1 train --init s1.st --steps 2 --save i1.st
job 3 train --init s1.st --steps 2 --save i3.st
check "init at S=3: exit 0 ($(head -c 300 err))" [ $rc -eq 0 ]
check "init at S=3: the checkpoint of S=1" cmp -s i1.st i3.st

# 8. An interrupted save (killed between its two renames: F.optim new, F still a temporary) is
#    completed by rank 0 before the other ranks read the pair.
cp h1.st.optim k.st.optim
cp h1.st k.st.tmp.999999
job 3 train --resume k.st --save rk.st
check "interrupted save: exit 0 ($(head -c 300 err))" [ $rc -eq 0 ]
check "interrupted save: completed" cmp -s h1.st k.st
check "interrupted save: resumed" cmp -s s1.st rk.st

# 9. A NaN gradient on a rank that is not the report rank: the report rank names the parameter,
#    as one rank does, and every rank exits non-zero.
TEST_COMM_NAN_STEP=3 job 1 train
want=$(grep -m1 'error: ' err | sed 's/.*error: //')
check "nan S=1: exit 1 ($want)" [ $rc -eq 1 ]
check "nan S=1: message" [ "$want" = "step 3: the gradient norm is NaN (first non-finite gradient: 'mid.weight'); stopped before the update" ]
export TEST_COMM_NAN_STEP=3
job 3 train
unset TEST_COMM_NAN_STEP
check "nan S=3: non-zero exit" [ $rc -ne 0 ]
check "nan S=3: within seconds ($secs s)" fast 15
check "nan S=3: the report rank's message ($(grep -m1 error err))" has err \
  "^\[rank 2\] train\.c:[0-9]+: rank 2: error: $(printf '%s' "$want" | sed 's/[][().^$*+?|\\]/\\&/g')$"
check "nan S=3: one message" [ "$(grep -c 'error: ' err)" -eq 1 ]

# 10. Options: --gradcheck refused at S > 1; the default thread count shares the cores.
job 2 train --gradcheck
check "gradcheck: non-zero exit" [ $rc -ne 0 ]
check "gradcheck: the message ($(grep -m1 error err))" has err \
  "^\[rank [01]\] trainloop\.c:[0-9]+: rank [01]: error: --gradcheck works on one stage; this program is rank [01] of a 2-stage pipeline$"
cores=$(nproc)
want=$((cores / 2 > 1 ? cores / 2 : 1))
TEST_COMM_SHOW_THREADS=1 job 2 train --steps 1
check "threads: default $want per rank of 2 on $cores cores" [ "$(grep -c "^\[rank [01]\] threads $want$" out)" -eq 2 ]
TEST_COMM_SHOW_THREADS=1 job 2 train --steps 1 --threads 3
check "threads: --threads 3" [ "$(grep -c "^\[rank [01]\] threads 3$" out)" -eq 2 ]
job 1 train --timeout x
check "--timeout x: exit 2" [ $rc -eq 2 ]
check "--timeout x: message" [ "$(cat err)" = "test_comm: --timeout: expected a non-negative number, got 'x'" ]
finish
