#!/usr/bin/env bash
# No heap allocation inside the training step: each sample program runs under count_alloc.so
# (an LD_PRELOAD shim counting malloc, calloc, realloc, aligned_alloc, posix_memalign, ...) with
# --steps 0 (setup only), 1 and 11, evaluation only at the end on the same batches, and every run
# must make exactly as many allocations, ours and libgomp's (counted apart by the shim, compared
# alike), at --threads 1 and 2, and at 16 for 4 microbatches of gpt_char, whose 12 (b,h) pairs
# leave attention's backward fewer threads than the team. --steps 0 against 1 is what catches a
# first step that allocates (the grow-only kernel scratch did, before the program's setup warm-up
# sized it). libgomp allocates a team for every parallel region that runs serialized, which is
# why the kernels never enter one (runtime/parallel.h), and a team and threads whenever a
# region's team differs in size from its pooled one, which is why every region runs on the whole
# team. Skipped (exit 77) in the sanitizer tree, whose runtime must come first and intercepts
# malloc itself.
pipec=$1
root=$2
shim=$3
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
export OMP_WAIT_POLICY=PASSIVE # the program would re-execute itself to set it
# name, thread counts (comma-separated), pipec compile arguments
models=("mlp_digits 1,2 samples/mlp_digits.json"
  "gpt_char 1,2 samples/gpt_char.json"
  "gpt_char_m4 1,2,16 samples/gpt_char.json --microbatches 4")
for m in "${models[@]}"; do
  read -r name threadlist args <<<"$m"
  # shellcheck disable=SC2086 # args are words
  if ! "$pipec" compile $args -o "$tmp/$name" 2>"$tmp/err"; then
    bad "$name: compile: $(tail -3 "$tmp/err")"
    continue
  fi
  if nm "$tmp/$name/bin/train" | grep -q __asan_init; then
    echo "SKIP: the programs are built with AddressSanitizer (its malloc comes first)"
    exit 77
  fi
  IFS=, read -ra threadcounts <<<"$threadlist"
  for threads in "${threadcounts[@]}"; do
    counts=()
    for steps in 0 1 11; do
      if ! ALLOC_COUNT_FILE="$tmp/count" LD_PRELOAD="$shim" "$tmp/$name/bin/train" --steps "$steps" \
        --threads "$threads" --eval-every 0 --eval-batches 2 --log-every 1000 \
        >"$tmp/out" 2>"$tmp/err"; then
        bad "$name --threads $threads --steps $steps: $(head -3 "$tmp/err")"
        continue 2
      fi
      read -r n gomp <"$tmp/count"
      counts+=("$n+$gomp")
      echo "$name --threads $threads --steps $steps: $n allocations + $gomp in libgomp"
    done
    if [ "${counts[0]%+*}" -gt 0 ] && [ "${counts[0]}" = "${counts[1]}" ] &&
      [ "${counts[1]}" = "${counts[2]}" ]; then
      ok
    else
      bad "$name --threads $threads: allocations (ours+libgomp's) with --steps 0, 1, 11:" \
        "${counts[*]} (the step allocates)"
    fi
  done
done
finish
