#!/usr/bin/env bash
# pr_main's device path without a GPU (tests/device/fake_device.c): CPU programs of gpt_char (a
# tied embedding) and skip_net (a tied weight, a skip), at S = 1 and, where Open MPI is found,
# S = 2, built with the fake device table (host memory, the CPU's kernels behind PrDevice). Each
# must train exactly as the plain CPU program: the loss log, the saved parameters and optimizer
# state byte for byte; a run of 2 steps saved and resumed for 2 more equals the 4-step run; --init
# from a saved file trains as the plain program's --init. The fake table reports its calls, so a
# program that did not take the device path fails. This is what the CUDA target runs on the GPU
# through pr_device_cuda (the kernels themselves are tests/cuda's).
# Usage: device_table.sh PIPEC ROOT
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
. "$root/tests/e2e/mpi_env.sh"
gpt=$tmp/gpt_char_l2.json
gpt_char_l2 "$gpt"
skip=$tmp/skip_net.json
python3 "$root/tests/skip_net_table.py" samples/skip_net.json "$skip" "$tmp/skip.csv"
# The C compiler pipec runs, with the fake table linked in and pr_main renamed in the program.
cat >"$tmp/cc-fake" <<SH
#!/bin/sh
exec \${REAL_CC:-cc} -Dpr_main=fake_pr_main "$root/tests/device/fake_device.c" "\$@"
SH
chmod +x "$tmp/cc-fake"
run_args=(--steps 4 --threads 1 --quiet --eval-every 2 --eval-batches 1)
stages=(1)
[ -n "$(command -v mpirun)" ] && stages+=(2)
for model in "$gpt" "$skip"; do
  name=$(basename "$model" .json)
  for S in "${stages[@]}"; do
    opts=(--batch 24 --microbatches 2)
    [ "$S" -gt 1 ] && opts+=(--stages "$S")
    ref=$tmp/$name.$S.ref fake=$tmp/$name.$S.fake
    if ! "$pipec" compile "$model" "${opts[@]}" -o "$ref" >/dev/null 2>"$tmp/log" ||
      ! CC="$tmp/cc-fake" "$pipec" compile "$model" "${opts[@]}" -o "$fake" >/dev/null 2>"$tmp/log"; then
      bad "$name S=$S: compile failed: $(head -n 3 "$tmp/log")"
      continue
    fi
    "$ref/launch.sh" "${run_args[@]}" --loss-log "$ref.loss" --save "$ref.st" >/dev/null 2>&1 ||
      bad "$name S=$S: the CPU run failed"
    "$fake/launch.sh" "${run_args[@]}" --loss-log "$fake.loss" --save "$fake.st" >/dev/null \
      2>"$tmp/fake.err" || bad "$name S=$S: the device-table run failed: $(head -n 2 "$tmp/fake.err")"
    check "$name S=$S: the device table was used" grep -qE 'fake device: [0-9]+ regions, [1-9][0-9]* uploads, [1-9][0-9]* downloads, [1-9][0-9]* sums, [1-9]' "$tmp/fake.err"
    same_bits "$name S=$S: device table vs CPU" "$ref" "$fake"
    # Resume through the mirrors: 2 steps saved, 2 more resumed = the 4-step run.
    "$fake/launch.sh" "${run_args[@]}" --steps 2 --save "$fake.half" >/dev/null 2>&1 &&
      "$fake/launch.sh" "${run_args[@]}" --resume "$fake.half" --save "$fake.res.st" >/dev/null 2>&1 ||
      bad "$name S=$S: save and resume failed"
    check "$name S=$S: resumed parameters" cmp -s "$ref.st" "$fake.res.st"
    check "$name S=$S: resumed optimizer state" cmp -s "$ref.st.optim" "$fake.res.st.optim"
    # --init from a file: uploaded from the mirror.
    "$ref/launch.sh" "${run_args[@]}" --init "$ref.st" --loss-log "$ref.init.loss" >/dev/null 2>&1 &&
      "$fake/launch.sh" "${run_args[@]}" --init "$ref.st" --loss-log "$fake.init.loss" >/dev/null 2>&1 ||
      bad "$name S=$S: --init runs failed"
    check "$name S=$S: --init losses" cmp -s "$ref.init.loss" "$fake.init.loss"
  done
done
finish
