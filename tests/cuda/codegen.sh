#!/usr/bin/env bash
# The CUDA target's code generation (codegen/emit_cuda.c and the shared printer), without a GPU:
# every sample (samples/*.json) compiles with `pipec compile --target cuda` into rank<r>.cu
# programs that nvcc builds and links with warnings as errors (pipec runs nvcc: a failure is its
# exit status), at S = 1 (bin/train) and at S = 2 over the host-staged MPI transport
# (--comm mpi, bin/rank0 and bin/rank1); every call of a generated program into the runtime is a
# pr_cu_ kernel or one of the host-side functions it needs (data loaders, the fresh
# initialisation into the host mirror, the message transport, pr_main); and, where no GPU is
# usable (CI), the programs stop before any work with the runtime's no-device error, exit 1, and
# its HINT (a rank of the pipeline too); every schedule at M = 4 builds too; and every op no
# sample uses builds from its gradient check's model. Registered only where CMake found the
# toolkit.
# Usage: codegen.sh PIPEC ROOT
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../e2e/lib.sh"
pipec=$1
root=$2
cd "$root" || exit 1
data=$root/../shared/data
# The runtime functions a generated .cu program may call besides the pr_cu_ ones.
host_re='^pr_(cu_[a-z0-9_]+|main|comm_(post_recv|wait_recv|send|wait_send|wait_sends|progress)|init_(zeros|ones|normal|uniform|xavier)|tokens_(open_text|open_u16|check_windows|check_ids|batch|val_batches|val_seq_batch|close)|table_(open_csv|open_npy|batch|val_batch|val_batches|close))\($'
no_gpu=1
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  no_gpu=0
fi
for model in samples/*.json; do
  name=$(basename "$model" .json)
  for S in 1 2; do
    out=$tmp/$name.$S
    opts=(--target cuda -o "$out")
    [ "$S" -gt 1 ] && opts+=(--stages "$S" --comm mpi)
    if ! "$pipec" compile "$model" "${opts[@]}" >"$tmp/log" 2>&1; then
      bad "$name S=$S: pipec compile --target cuda failed: $(grep -m3 -E 'error' "$tmp/log")"
      continue
    fi
    ok
    for r in $(seq 0 $((S - 1))); do
      check "$name S=$S: rank$r.cu written" test -s "$out/rank$r.cu"
      check "$name S=$S: bin/rank$r built" test -x "$out/bin/rank$r"
      # Every pr_ call: a pr_cu_ kernel or an allowed host function; no CPU kernel, no memcpy.
      others=$(grep -o '\bpr_[a-z0-9_]*(' "$out/rank$r.cu" | sort -u | grep -Ev "$host_re")
      check "$name S=$S rank$r: only pr_cu_ kernels (found: ${others:-none})" test -z "$others"
      check "$name S=$S rank$r: no host memcpy" bash -c "! grep -q 'memcpy(' '$out/rank$r.cu'"
      check "$name S=$S rank$r: kernels run on the device" grep -q 'pr_cu_linear_fwd(' "$out/rank$r.cu"
    done
    [ "$S" -eq 1 ] && check "$name: bin/train built" test -x "$out/bin/train"
    check "$name S=$S: the program's table names the device" grep -q '\.device = &pr_device_cuda' "$out/rank0.cu"
  done
done
# The ops no sample uses, through their gradient check's model (tests/gradcheck/OP.json, one per
# op): built for the device at S = 1, every call of the program a pr_cu_ kernel or a host
# function, so that every op of the registry has device kernels that nvcc compiles and links.
used=$(for model in samples/*.json; do "$pipec" print "$model" 2>/dev/null; done |
  sed -n 's/^node .* = \([a-z_]*\)(.*/\1/p' | sort -u)
for op in $("$pipec" --list-ops); do
  grep -qxF -- "$op" <<<"$used" && continue
  out=$tmp/op.$op
  if ! "$pipec" compile "tests/gradcheck/$op.json" --target cuda -o "$out" >"$tmp/log" 2>&1; then
    bad "op $op: pipec compile --target cuda of tests/gradcheck/$op.json failed: $(grep -m3 -E 'error' "$tmp/log")"
    continue
  fi
  check "op $op: bin/train built" test -x "$out/bin/train"
  others=$(grep -o '\bpr_[a-z0-9_]*(' "$out/rank0.cu" | sort -u | grep -Ev "$host_re")
  check "op $op: only pr_cu_ kernels (found: ${others:-none})" test -z "$others"
done
# Every schedule at M >= 2 (several microbatches in flight: slotted buffers, posted receives),
# built by nvcc with warnings as errors: gpipe, 1f1b, interleaved, zb-h1, zb-v and a CSV one.
"$pipec" plan samples/mlp_digits.json --stages 2 --microbatches 4 --schedule 1f1b \
  --export-csv "$tmp/csv-1f1b.csv" >/dev/null 2>&1 || bad "plan --export-csv failed"
for sched in gpipe 1f1b interleaved zb-h1 zb-v "$tmp/csv-1f1b.csv"; do
  opts=(--target cuda --stages 2 --microbatches 4 --comm mpi --schedule "$sched")
  [ "$sched" = interleaved ] && opts+=(--virtual 2)
  name=$(basename "$sched" .csv)
  if "$pipec" compile samples/mlp_digits.json "${opts[@]}" -o "$tmp/m4.$name" >"$tmp/log" 2>&1; then
    check "$name M=4: bin/rank1 built" test -x "$tmp/m4.$name/bin/rank1"
  else
    bad "$name M=4: pipec compile --target cuda failed: $(grep -m3 -E 'error' "$tmp/log")"
  fi
done
# --cuda-arch: one of the runtime's architectures builds; another is refused (the kernels are the
# library's, built for PIPEC_CUDA_ARCHS, default 80;90).
expect "--cuda-arch 90" 0 '' "$pipec" compile samples/mlp_digits.json --target cuda --cuda-arch 90 \
  -o "$tmp/arch90"
check "--cuda-arch 90: built" test -x "$tmp/arch90/bin/train"
"$pipec" compile samples/mlp_digits.json --target cuda --cuda-arch 80,75 -o "$tmp/arch75" \
  >/dev/null 2>"$tmp/err"
check "--cuda-arch 80,75: exit 1 (got $?)" test $? -eq 1
check "--cuda-arch 80,75: the error names 75 and the runtime's list" grep -qE \
  '^samples/mlp_digits.json: error: --cuda-arch 75: the CUDA runtime \(libpipert_cuda.a\) was built for [0-9,]+ only; rebuild pipec with -DPIPEC_CUDA_ARCHS=' \
  "$tmp/err"
# --no-build (the manifest's flags) refuses such an architecture the same way.
"$pipec" compile samples/mlp_digits.json --target cuda --cuda-arch 80,75 --no-build \
  -o "$tmp/arch75nb" >/dev/null 2>"$tmp/err"
check "--cuda-arch 80,75 --no-build: exit 1 (got $?)" test $? -eq 1
check "--cuda-arch 80,75 --no-build: the same error" grep -qE \
  '^samples/mlp_digits.json: error: --cuda-arch 75: the CUDA runtime \(libpipert_cuda.a\) was built for [0-9,]+ only; rebuild pipec with -DPIPEC_CUDA_ARCHS=' \
  "$tmp/err"
check "--cuda-arch 80,75 --no-build: no manifest written" test ! -e "$tmp/arch75nb/pipec-manifest.json"
# Without a GPU the programs stop before any work with the runtime's no-device error (rank 0 of
# a one-rank program; each rank of a pipeline run directly, as mpirun would start them).
if [ "$no_gpu" -eq 1 ]; then
  args=(--steps 2 --quiet --data "$data/tinyshakespeare.txt")
  no_dev='^cuda_device\.cu:[0-9]+: rank 0: error: no CUDA device: '
  expect "gpt_char S=1: no device" 1 "$no_dev" "$tmp/gpt_char.1/bin/train" "${args[@]}"
  check "gpt_char S=1: the hint" grep -q '^HINT: run on a machine with an NVIDIA GPU' "$tmp/err"
  expect "mlp_digits S=1: no device" 1 "$no_dev" "$tmp/mlp_digits.1/bin/train" --steps 2 --quiet \
    --data "$data/digits.csv.gz"
  if command -v mpirun >/dev/null 2>&1; then
    launch=$tmp/gpt_char.2/launch.sh
    "$launch" "${args[@]}" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    check "gpt_char S=2: the job fails (exit $rc)" test "$rc" -ne 0
    check "gpt_char S=2: a rank names the missing device" \
      grep -qE '^\[rank [01]\] cuda_device\.cu:[0-9]+: rank [01]: error: no CUDA device: ' "$tmp/err"
  fi
else
  echo "a GPU is present: the no-device checks are scripts/gpu-check.sh's end-to-end runs"
fi
finish
