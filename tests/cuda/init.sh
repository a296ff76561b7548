#!/usr/bin/env bash
# The CUDA runtime's checks before any work (runtime/cuda/cuda_device.cu), through the cuda_init
# program. Without a GPU (CI): pr_cu_init stops with the no-device error, its HINT and exit 1.
# With one: a job needing more GPUs than the machine has, a plan larger than the free memory and
# an embedding id outside the vocabulary and a scratch pool smaller than a kernel needs each stop
# with their error.
# Usage: init.sh CUDA_INIT
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../e2e/lib.sh"
prog=$1
"$prog" 0 1 >"$tmp/probe.out" 2>"$tmp/probe.err"
if [ "$(cat "$tmp/probe.out")" != ok ]; then
  echo "no usable CUDA device: checking the no-device error"
  expect "no GPU" 1 '^cuda_device\.cu:[0-9]+: rank 0: error: no CUDA device: ' "$prog" 0 1
  check "no GPU: the hint names nvidia-smi" grep -q '^HINT: run on a machine with an NVIDIA GPU' "$tmp/err"
else
  expect "too few GPUs" 1 '^cuda_device\.cu:[0-9]+: rank 0: error: this job needs 4096 GPUs on this machine \(rank 0 uses device 0\) but it has [0-9]+$' "$prog" 0 4096
  expect "plan larger than free memory" 1 '^cuda_device\.cu:[0-9]+: rank 0: error: the memory plan needs [0-9.]+ MiB on device 0 but only [0-9.]+ MiB of its [0-9.]+ MiB are free$' "$prog" mem 1000000000000000
  expect "small plan fits" 0 '^$' "$prog" mem 1000
  expect "scratch pool too small" 1 '^cuda_device\.cu:[0-9]+: rank 0: error: embedding backward needs 152 bytes of device scratch, the pool holds 151$' "$prog" scratch
  expect "bad embedding id" 1 '^cuda_device\.cu:[0-9]+: rank 0: error: an embedding id outside \[0, V\) on the GPU this step$' "$prog" ids
fi
finish
