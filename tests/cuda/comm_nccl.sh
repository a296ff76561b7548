#!/usr/bin/env bash
# The NCCL transport (runtime/cuda/comm_nccl.cu) through tests/cuda/test_comm_nccl.c (its top
# paragraph lists the modes). Everywhere: a call before the start is the "not started" error.
# Without a GPU (CI): the start stops with the no-device error. With one or more GPUs: more ranks
# than GPUs and two ranks on one GPU are clear errors before any work, one rank starts. With two
# or more: the 2-rank checks (messages in their own buffers, exchanges without deadlock, an
# out-of-order wait refused, all-gather/broadcast/transfer, the watchdog). Exit 77 (skipped) when
# the 2-rank checks could not run (fewer than 2 GPUs: NCCL does not support two ranks on one GPU)
# and nothing failed. Never run on a GPU yet.
# Usage: comm_nccl.sh TEST_COMM_NCCL_BINARY (empty: no libpipert_nccl at build time)
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../e2e/lib.sh"
bin=${1:+$(realpath "$1")}
if [ -z "$bin" ]; then
  echo "SKIP: libpipert_nccl was not built (needs CUDA, NCCL and Open MPI at build time)"
  exit 77
fi
if ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun not found (apt-get install openmpi-bin)"
  exit 77
fi
export OMPI_MCA_mpi_yield_when_idle=1
mpi=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
cd "$tmp" || exit 1
host=$(hostname | cut -c1-63)
hostre=$(printf '%s' "$host" | sed 's/[][().^$*+?|\\]/\\&/g')
gpus=$("$bin" gpus)
echo "CUDA devices: $gpus"

expect "unstarted" 1 '^comm_nccl\.cu:[0-9]+: rank 0: error: pr_cu_comm_send: the transport is not started$' \
  "$bin" unstarted
check "unstarted: the hint" grep -q '^HINT: call pr_main first' "$tmp/err"

# job S ARGS...: the test program on S ranks under mpirun; stdout/stderr in $tmp/out, $tmp/err.
job() {
  local s=$1
  shift
  TEST_NCCL_RANKS=$s timeout 120 "${mpi[@]}" -np "$s" "$@" >out 2>err
  rc=$?
}
has() { grep -qE "$2" "$1"; }

if [ "$gpus" -eq 0 ]; then
  expect "no GPU" 1 "^comm_nccl\\.cu:[0-9]+: rank 0: error: no CUDA device on $hostre: " "$bin" start
  check "no GPU: the hint" grep -q '^HINT: run on machines with an NVIDIA GPU per rank' "$tmp/err"
else
  expect "one rank" 0 '^$' "$bin" start
  check "one rank: started on device 0" grep -qx 'start ok on device 0' "$tmp/out"
  n=$((gpus + 1))
  s=$([ "$gpus" -eq 1 ] && echo "" || echo s)
  job $n "$bin" start
  check "too few GPUs: non-zero exit" [ $rc -ne 0 ]
  check "too few GPUs: the message ($(grep -m1 error err))" has err \
    "^\[rank $gpus\] comm_nccl\.cu:[0-9]+: rank $gpus: error: $hostre has $gpus GPU$s but runs $n ranks of this job: rank $gpus \(local rank $gpus\) has no GPU of its own$"
  job 2 env OMPI_COMM_WORLD_LOCAL_RANK=0 "$bin" start
  check "shared GPU: non-zero exit" [ $rc -ne 0 ]
  check "shared GPU: the message ($(grep -m1 error err))" has err \
    "^\[rank [01]\] comm_nccl\.cu:[0-9]+: rank [01]: error: ranks 0 and 1 both use GPU 0 of $hostre: NCCL does not support two ranks on one GPU$"
  check "shared GPU: the hint" has err "^\[rank [01]\] HINT: give each rank its own GPU"
fi

if [ "$gpus" -ge 2 ]; then
  for mode in messages exchange collect; do
    job 2 "$bin" $mode
    check "$mode: exit 0 ($(head -c 300 err))" [ $rc -eq 0 ]
    check "$mode: both ranks ok" [ "$(grep -c "\] $mode ok$" out)" -eq 2 ]
  done
  job 2 "$bin" order
  check "order: non-zero exit" [ $rc -ne 0 ]
  check "order: the message ($(grep -m1 error err))" has err \
    "^\[rank 1\] comm_nccl\.cu:[0-9]+: rank 1: error: rank 0 sent tensor 'a' microbatch 0 before tensor 'b' microbatch 0, but this rank waits for the second \(F\(v1, m0\)\) before posting the receive of the first$"
  t0=$(date +%s)
  job 2 "$bin" watchdog 2
  secs=$(($(date +%s) - t0))
  check "watchdog: non-zero exit" [ $rc -ne 0 ]
  check "watchdog: within seconds ($secs s)" [ $secs -lt 30 ]
  check "watchdog: the message ($(grep -m1 error err))" has err \
    "^\[rank 1\] comm_nccl\.cu:[0-9]+: rank 1: error: timeout: waited 2 s for tensor 'blocks\.1\.h' microbatch 3 from rank 0 \(F\(v1, m3\)\)$"
  check "watchdog: the hint" has err "^\[rank 1\] HINT: .*raise --timeout SECONDS"
  finish
else
  echo "the 2-rank message checks need 2 GPUs (NCCL does not support two ranks on one GPU)"
  finish || exit 1
  echo "SKIP: fewer than 2 GPUs"
  exit 77
fi
