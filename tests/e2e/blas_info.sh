#!/usr/bin/env bash
# A generated program names its BLAS and kernel before training, and warns on stderr, with the
# fix, when OpenBLAS runs a kernel without AVX2 on a CPU that has AVX2 (Debian's OpenBLAS 0.3.21
# falls back to Prescott on CPUs it does not know). OPENBLAS_CORETYPE is set here for single
# commands only, to force each case; the warning comes after setup, so a failing run's first
# stderr line is still its error, and --quiet silences both lines.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
"$pipec" compile samples/gpt_char.json -o "$tmp/gpt" 2>/dev/null || { bad "compile gpt"; finish; exit 1; }
gpt="$tmp/gpt/bin/train"
run=("$gpt" --steps 1 --eval-batches 1)

"${run[@]}" >"$tmp/out" 2>"$tmp/err" || bad "default run: $(head -1 "$tmp/err")"
check "default run names BLAS and kernel" grep -Eq '^blas OpenBLAS [0-9.]+ .*, kernel [A-Za-z0-9_]+, CPU (avx512|avx2|no avx2)$' "$tmp/out"

flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { [[ " $flags " == *" $1 "* ]]; }
if ! has avx2 || ! has fma; then
  echo "skip: this CPU has no AVX2, the warning cases do not apply"
  finish
  exit
fi
if has avx512f && has avx512bw && has avx512vl && has avx512dq; then
  cpu=avx512 isa=AVX-512 want=SKYLAKEX
else
  cpu=avx2 isa=AVX2 want=HASWELL
fi

OPENBLAS_CORETYPE=PRESCOTT "${run[@]}" >"$tmp/out" 2>"$tmp/err" || bad "Prescott run: $(head -1 "$tmp/err")"
check "Prescott: kernel line" grep -Eqx "blas OpenBLAS .* Prescott .*, kernel Prescott, CPU $cpu" "$tmp/out"
check "Prescott: the warning on stderr" grep -qx "train: warning: OpenBLAS runs its Prescott kernels (no AVX2) on a CPU with $isa: matrix products run several times slower than they can" "$tmp/err"
check "Prescott: the fix on stderr" grep -qx "HINT: OPENBLAS_CORETYPE=PRESCOTT is set: export OPENBLAS_CORETYPE=$want instead" "$tmp/err"
check "Prescott: only those two stderr lines" test "$(wc -l <"$tmp/err")" -eq 2
check "Prescott: warning before the first step" awk '/^blas /{b=NR} /^step 1\//{s=NR} END{exit !(b && s && b < s)}' "$tmp/out"

OPENBLAS_CORETYPE=HASWELL "${run[@]}" >"$tmp/out" 2>"$tmp/err" || bad "Haswell run: $(head -1 "$tmp/err")"
check "Haswell: kernel line says Haswell" grep -Eqx "blas OpenBLAS .*, kernel Haswell, CPU $cpu" "$tmp/out"
check "Haswell: no warning" test ! -s "$tmp/err"

OPENBLAS_CORETYPE=PRESCOTT "${run[@]}" --quiet >"$tmp/out" 2>"$tmp/err" || bad "quiet run"
check "--quiet: no blas line" bash -c "! grep -q '^blas ' '$tmp/out'"
check "--quiet: no warning" test ! -s "$tmp/err"

# A run that fails in setup reports its error first, not the warning.
OPENBLAS_CORETYPE=PRESCOTT "$gpt" --steps 1 --data "$tmp/none.txt" >"$tmp/out" 2>"$tmp/err"
check "failing run exits 1" test $? -eq 1
check "failing run: first stderr line is the error" grep -q "rank 0: error: cannot open '$tmp/none.txt'" <(head -1 "$tmp/err")
check "failing run: no warning" bash -c "! grep -q 'warning' '$tmp/err'"
finish
