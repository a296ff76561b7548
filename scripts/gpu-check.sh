#!/usr/bin/env bash
# gpu-check.sh: the proof of the CUDA target on a GPU (issue 9, "Proof on a GPU"), one command,
# meant for a machine with an NVIDIA GPU and the CUDA toolkit (a single H200 is the usual one).
# What exists today: it builds everything (Release, CUDA on) and runs the CUDA tests (every
# kernel of libpipert_cuda.a against its CPU twin; the device checks before any work). The
# end-to-end steps need `pipec compile --target cuda`, which is not written yet: they print
# "not yet" and do not count as passed. Exit status: 0 when every step that exists passed.
# Usage: scripts/gpu-check.sh [BUILD_DIR]   (default build-gpu)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu}
jobs=$(nproc 2>/dev/null || echo 2)
fail=0
step() { printf '\n== %s\n' "$*"; }

step "GPU"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || fail=1
else
  echo "nvidia-smi not found: is there a GPU and its driver?"
  fail=1
fi

step "build ($build)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >"$build.cmake.log" 2>&1 ||
  { cat "$build.cmake.log"; exit 1; }
grep 'pipec: ' "$build.cmake.log"
grep -q 'pipec: CUDA [0-9]' "$build.cmake.log" || { echo "CMake found no CUDA toolkit"; exit 1; }
cmake --build "$build" -j"$jobs" >"$build.build.log" 2>&1 || { tail -n 40 "$build.build.log"; exit 1; }
echo "built"

step "CUDA unit tests (each kernel against the CPU kernel; the device checks)"
# A skip (exit 77: no usable device) is a failure here: this script is for a machine with a GPU.
"$build/bin/test_cuda_kernels"
rc=$?
[ $rc -eq 0 ] || { echo "test_cuda_kernels: exit $rc"; fail=1; }
"$root/tests/cuda/init.sh" "$build/bin/cuda_init" || fail=1

step "1. gpt_char, 20 steps fp32, S = 1: per-step loss within 1e-4 relative of the CPU target"
echo "not yet: needs pipec compile --target cuda"
step "2. gpt_char S = 2 with --comm mpi on one GPU: bitwise equal to its S = 1 run"
echo "not yet: needs pipec compile --target cuda"
step "3. GPT-2 124M shape, bf16, S = 1: tokens/s and MFU (target >= 40%)"
echo "not yet: needs pipec compile --target cuda and --precision bf16"

step "summary"
if [ $fail -eq 0 ]; then
  echo "the CUDA unit tests passed on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1) ($(date -u +%F)); the end-to-end steps do not exist yet"
else
  echo "FAILED"
fi
exit $fail
