#!/usr/bin/env bash
# Portable and native builds: by default a program is built for the x86-64 baseline (no AVX
# instruction in it, so it runs on any x86-64 machine and under valgrind); `--march=native` builds
# it for this machine against libpipert-native.a. Both compute the same bits on one machine: the
# loss log, the saved parameters and the optimizer state of a few steps of mlp_digits and gpt_char
# are byte for byte equal.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
# Instructions that use AVX registers (ymm/zmm) or AVX-512 masks, in the program's own code.
avx_insns() { objdump -d --no-show-raw-insn "$1" | grep -cE '%[yz]mm[0-9]|%k[0-7]'; }
for m in mlp_digits:20 gpt_char:3; do
  name=${m%:*} steps=${m#*:}
  for b in portable native; do
    flag=()
    [ $b = native ] && flag=(--march=native)
    if "$pipec" compile "${flag[@]}" "samples/$name.json" -o "$tmp/$name-$b" 2>"$tmp/err"; then ok; else bad "$name $b: compile: $(tail -3 "$tmp/err")"; continue; fi
    "$tmp/$name-$b/bin/train" --steps "$steps" --threads 1 --quiet --loss-log "$tmp/$name-$b.loss" \
      --save "$tmp/$name-$b.safetensors" >/dev/null 2>"$tmp/err" || bad "$name $b: run: $(tail -3 "$tmp/err")"
  done
  check "$name: the portable program has no AVX instruction" [ "$(avx_insns "$tmp/$name-portable/bin/train")" -eq 0 ]
  if grep -qw avx2 /proc/cpuinfo; then
    check "$name: the native program uses AVX" [ "$(avx_insns "$tmp/$name-native/bin/train")" -gt 0 ]
  fi
  check "$name: $steps losses logged" [ "$(wc -l <"$tmp/$name-portable.loss")" -eq "$steps" ]
  check "$name: same losses" cmp "$tmp/$name-portable.loss" "$tmp/$name-native.loss"
  check "$name: same parameters" cmp "$tmp/$name-portable.safetensors" "$tmp/$name-native.safetensors"
  check "$name: same optimizer state" cmp "$tmp/$name-portable.safetensors.optim" "$tmp/$name-native.safetensors.optim"
done
finish
