#!/usr/bin/env bash
# gpu-check.sh: the proof of the CUDA target on a GPU (issue 9, "Proof on a GPU"), one command,
# meant for a machine with an NVIDIA GPU and the CUDA toolkit (a single H200 is the usual one).
# It builds everything (Release, CUDA on), runs the CUDA tests (every kernel of libpipert_cuda.a
# against its CPU twin; the device checks before any work), then the end-to-end proofs that exist:
# gpt_char 20 steps fp32 on the GPU against the CPU target's losses (1e-4 relative), a save and
# resume on the GPU bitwise a straight run, and gpt_char at S = 2 over --comm mpi on the one GPU
# bitwise its S = 1 run (losses, parameters, optimizer state). The bf16 MFU proof needs
# --precision, not written yet: it prints "not yet". Exit status: 0 when every step that exists
# passed.
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

pipec=$build/bin/pipec
text=$root/../shared/data/tinyshakespeare.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run_opts=(--steps 20 --quiet --eval-every 0 --eval-batches 1 --data "$text")

step "1. gpt_char, 20 steps fp32, S = 1: per-step loss within 1e-4 relative of the CPU target"
if "$pipec" compile "$root/samples/gpt_char.json" -o "$work/cpu" >"$work/log" 2>&1 &&
  "$pipec" compile "$root/samples/gpt_char.json" --target cuda -o "$work/cu1" >>"$work/log" 2>&1 &&
  "$work/cpu/bin/train" "${run_opts[@]}" --loss-log "$work/cpu.loss" &&
  "$work/cu1/bin/train" "${run_opts[@]}" --loss-log "$work/cu1.loss" --save "$work/cu1.st"; then
  /usr/bin/python3 - "$work/cpu.loss" "$work/cu1.loss" <<'PY' || fail=1
import sys
cpu = [float(l.split()[1]) for l in open(sys.argv[1])]
gpu = [float(l.split()[1]) for l in open(sys.argv[2])]
assert len(cpu) == len(gpu) == 20, (len(cpu), len(gpu))
worst = max(abs(g - c) / abs(c) for c, g in zip(cpu, gpu))
for k, (c, g) in enumerate(zip(cpu, gpu)):
    print(f"step {k:2d}  cpu {c:.9g}  cuda {g:.9g}  rel {abs(g - c) / abs(c):.2e}")
print(f"worst relative difference {worst:.3e} (bar 1e-4): {'ok' if worst <= 1e-4 else 'FAILED'}")
sys.exit(0 if worst <= 1e-4 else 1)
PY
else
  cat "$work/log"
  echo "FAILED to build or run"
  fail=1
fi

step "1b. gpt_char on the GPU: 10 steps, --save, --resume 10 more: bitwise the 20-step run"
if "$work/cu1/bin/train" "${run_opts[@]}" --steps 10 --save "$work/half.st" &&
  "$work/cu1/bin/train" "${run_opts[@]}" --resume "$work/half.st" --save "$work/resumed.st"; then
  cmp "$work/cu1.st" "$work/resumed.st" && cmp "$work/cu1.st.optim" "$work/resumed.st.optim" &&
    echo "ok: parameters and optimizer state identical" || fail=1
else
  echo "FAILED to run"
  fail=1
fi

step "2. gpt_char S = 2 with --comm mpi on one GPU: bitwise equal to its S = 1 run"
if "$pipec" compile "$root/samples/gpt_char.json" --target cuda --stages 2 --comm mpi \
  -o "$work/cu2" >"$work/log" 2>&1 &&
  "$work/cu2/launch.sh" "${run_opts[@]}" --loss-log "$work/cu2.loss" --save "$work/cu2.st"; then
  cmp "$work/cu1.loss" "$work/cu2.loss" && cmp "$work/cu1.st" "$work/cu2.st" &&
    cmp "$work/cu1.st.optim" "$work/cu2.st.optim" &&
    echo "ok: losses, parameters and optimizer state identical at S = 1 and S = 2" || fail=1
else
  cat "$work/log"
  echo "FAILED to build or run"
  fail=1
fi

step "3. GPT-2 124M shape, bf16, S = 1: tokens/s and MFU (target >= 40%)"
echo "not yet: needs --precision bf16 (and speed: docs/cuda.md)"

step "summary"
if [ $fail -eq 0 ]; then
  echo "the CUDA unit tests and end-to-end proofs 1, 1b and 2 passed on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1) ($(date -u +%F)); 3 (bf16 MFU) does not exist yet"
else
  echo "FAILED"
fi
exit $fail
