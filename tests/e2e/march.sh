#!/usr/bin/env bash
# Portable and native builds: by default a program is built for the x86-64 baseline (no AVX
# instruction outside the v3 and v4 builds of its kernels, which it runs only where the CPU has
# them: it runs on any x86-64 machine and under valgrind); `--march=native` builds it for this
# machine against libpipert-native.a. The builds with FMA compute the same bits on one machine: the
# loss log, the saved parameters and the optimizer state of a few steps of mlp_digits and gpt_char
# are byte for byte equal, native against the portable program's default and v3 kernels. The v1
# kernels (the x86-64 baseline, no FMA) run the GEMMs through OpenBLAS instead of pipec's own
# FMA-chain GEMM (runtime/gemm.c: an exact chain without hardware FMA would need a software fma,
# far too slow), so they round the products differently: v1 trains, and its bits are its own but
# deterministic (the same with 1 and 2 threads). Each run names the GEMM it runs. The final
# evaluation (mlp_digits' whole validation split, gpt_char's first 2 batches: its default 50 took
# most of this test's time in the sanitizer tree) prints the same line in the runs that compare.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
# Functions of the program's own code with AVX instructions (ymm/zmm registers or AVX-512
# masks) in every copy: the v3 and v4 builds of the kernels (f__v3, f__v4 and their OpenMP
# bodies) left out, and a static helper of theirs counted by its copy with the fewest (its v1
# build's: the three builds share its name).
avx_funcs() {
  objdump -d --no-show-raw-insn "$1" | awk '
    /^[0-9a-f]+ <.*>:$/ { if (f != "") seen(f, n); f = $2; n = 0; next }
    /%[yz]mm[0-9]|%k[0-7]/ { n++ }
    function seen(f, n) { if (f ~ /__v[34]([.>]|$)/) return; if (!(f in min) || n < min[f]) min[f] = n }
    END { if (f != "") seen(f, n); c = 0; for (g in min) if (min[g] > 0) c++; print c }'
}
# same_eval OUT1 OUT2: both runs printed one evaluation line, the same.
same_eval() { [ "$(grep -c '^eval ' "$1")" = 1 ] && [ "$(grep '^eval ' "$1")" = "$(grep '^eval ' "$2")" ]; }
# The portable program in each build of its kernels (PIPEC_ISA lowers the level the CPU allows;
# the default takes the highest), and the native one.
for m in mlp_digits:20:0 gpt_char:3:2; do
  IFS=: read -r name steps evb <<<"$m"
  for b in portable native; do
    flag=()
    [ $b = native ] && flag=(--march=native)
    if "$pipec" compile "${flag[@]}" "samples/$name.json" -o "$tmp/$name-$b" 2>"$tmp/err"; then ok; else bad "$name $b: compile: $(tail -3 "$tmp/err")"; continue; fi
  done
  runs=(native portable v1 v1t2 v3)
  for r in "${runs[@]}"; do
    exe=$tmp/$name-portable/bin/train isa= threads=1
    [ $r = native ] && exe=$tmp/$name-native/bin/train
    [ $r = v1 ] || [ $r = v3 ] && isa=$r
    [ $r = v1t2 ] && isa=v1 threads=2
    PIPEC_ISA=$isa "$exe" --steps "$steps" --eval-batches "$evb" --threads $threads --loss-log "$tmp/$name-$r.loss" \
      --save "$tmp/$name-$r.safetensors" >"$tmp/$name-$r.out" 2>"$tmp/err" || bad "$name $r: run: $(tail -3 "$tmp/err")"
  done
  check "$name: the portable program's baseline code has no AVX instruction" [ "$(avx_funcs "$tmp/$name-portable/bin/train")" -eq 0 ]
  if grep -qw avx2 /proc/cpuinfo; then
    check "$name: the native program uses AVX" [ "$(avx_funcs "$tmp/$name-native/bin/train")" -gt 0 ]
  fi
  want="x86-64-v1 (SSE2)"
  grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && want="x86-64-v3 (AVX2)"
  grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo && want="x86-64-v4 (AVX-512)"
  check "$name: the portable program runs its $want kernels" grep -qx "kernels pipert $want" "$tmp/$name-portable.out"
  check "$name: PIPEC_ISA=v1 runs the baseline kernels" grep -qx "kernels pipert x86-64-v1 (SSE2)" "$tmp/$name-v1.out"
  check "$name: the native program says so" grep -qx "kernels pipert native (--march=native)" "$tmp/$name-native.out"
  if [ "$want" != "x86-64-v1 (SSE2)" ]; then
    check "$name: the portable program runs pipec's GEMM" grep -qx "gemm pipec (FMA chain in k order)" "$tmp/$name-portable.out"
    check "$name: the native program runs pipec's GEMM" grep -qx "gemm pipec (FMA chain in k order)" "$tmp/$name-native.out"
  fi
  check "$name: PIPEC_ISA=v1 runs OpenBLAS's GEMM" grep -qx "gemm OpenBLAS (no FMA at x86-64-v1)" "$tmp/$name-v1.out"
  check "$name: $steps losses logged" [ "$(wc -l <"$tmp/$name-portable.loss")" -eq "$steps" ]
  check "$name v1: $steps losses logged" [ "$(wc -l <"$tmp/$name-v1.loss")" -eq "$steps" ]
  for r in portable v3 v1t2; do
    ref=native
    [ $r = v1t2 ] && ref=v1 # v1 against itself at 2 threads
    check "$name $r: same losses as $ref" cmp "$tmp/$name-$ref.loss" "$tmp/$name-$r.loss"
    check "$name $r: same parameters" cmp "$tmp/$name-$ref.safetensors" "$tmp/$name-$r.safetensors"
    check "$name $r: same optimizer state" cmp "$tmp/$name-$ref.safetensors.optim" "$tmp/$name-$r.safetensors.optim"
    check "$name $r: the same evaluation line" same_eval "$tmp/$name-$ref.out" "$tmp/$name-$r.out"
  done
done
finish
