#!/usr/bin/env bash
# No heap allocation inside the training step: each sample program runs under count_alloc.so
# (an LD_PRELOAD shim counting malloc, calloc, realloc, aligned_alloc, posix_memalign, ...) with
# --steps 0 (setup only), 1 and 11, evaluation only at the end on the same batches, and every run
# must make exactly as many allocations, ours and libgomp's (counted apart by the shim, compared
# alike), at --threads 1 and 2, and at 16 for 4 microbatches of gpt_char, whose 12 (b,h) pairs
# leave attention's backward fewer threads than the team, and for an fp16 gpt_char (its
# conversions and loss scaler) at 1. --steps 0 against 1 is what catches a first step that
# allocates (the grow-only kernel scratch did, before the program's setup warm-up sized it). libgomp allocates a team for every parallel region that runs serialized, which is
# why the kernels never enter one (runtime/parallel.h), and a team and threads whenever a
# region's team differs in size from its pooled one, which is why every region runs on the whole
# team. Skipped (exit 77) in the sanitizer tree, whose runtime must come first and intercepts
# malloc itself.
#
# Pipelines (S > 1) likewise: every rank under the shim through launch.sh and mpirun (LD_PRELOAD
# reaches every rank through Open MPI's mca_base_env_list: mpirun's -x before an MPMD line sets
# it for the first program only), each rank's count the same at --steps 0, 1 and 11. Open MPI's
# setup calls and the growth of its free lists are counted apart by the shim (count_alloc.c says
# why) and printed. Before the runtime's all-gather became persistent requests, every step end's
# MPI_Iallgather allocated 7 blocks on every rank (and the shared memory's fast box one at the
# 16th message to a peer). To find what allocates: gdb each rank (mpirun -np 1 gdb -batch -x CMDS
# --args bin/rank0 ... : ...) with breakpoints on malloc, calloc and realloc enabled from the
# second call of train_step on, each printing `bt`.
pipec=$1
root=$2
shim=$3
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
export OMP_WAIT_POLICY=PASSIVE # the program would re-execute itself to set it
# name, thread counts (comma-separated), pipec compile arguments
models=("mlp_digits 1,2 samples/mlp_digits.json"
  "gpt_char 1,2 samples/gpt_char.json"
  "gpt_char_m4 1,2,16 samples/gpt_char.json --microbatches 4"
  "gpt_char_fp16 1 samples/gpt_char.json --microbatches 4 --precision fp16")
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
      read -r n gomp _ <"$tmp/count"
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

# name, pipec compile arguments (--threads 1: the ranks share the machine's cores)
pipes=("gpt_char_s2 samples/gpt_char.json --stages 2"
  "gpt_char_s2_1f1b_m4 samples/gpt_char.json --stages 2 --microbatches 4 --schedule 1f1b"
  "mlp_digits_s3_zbh1_m4 samples/mlp_digits.json --stages 3 --microbatches 4 --schedule zb-h1")
for m in "${pipes[@]}"; do
  read -r name args <<<"$m"
  # shellcheck disable=SC2086 # args are words
  if ! "$pipec" compile $args -o "$tmp/$name" >/dev/null 2>"$tmp/err"; then
    bad "$name: compile: $(tail -3 "$tmp/err")"
    continue
  fi
  S=$(sed -n 's/^ranks=//p' "$tmp/$name/launch.sh")
  counts=()
  for steps in 0 1 11; do
    rm -f "$tmp"/count.*
    if ! OMPI_MCA_mca_base_env_list="LD_PRELOAD=$shim;ALLOC_COUNT_FILE=$tmp/count.%r" \
      "$tmp/$name/launch.sh" --steps "$steps" --threads 1 --eval-every 0 --eval-batches 2 \
      --log-every 1000 >"$tmp/out" 2>"$tmp/err"; then
      bad "$name --steps $steps: $(grep -m3 . "$tmp/err")"
      continue 2
    fi
    line=
    for ((r = 0; r < S; r++)); do
      if ! read -r n gomp pool <"$tmp/count.$r"; then
        bad "$name --steps $steps: rank $r wrote no count (is the shim preloaded?)"
        continue 3
      fi
      line+=" $n+$gomp"
      echo "$name --steps $steps: rank $r: $n allocations + $gomp in libgomp (+ $pool free-list blocks of Open MPI)"
    done
    counts+=("$line")
  done
  if [ "${counts[0]}" = "${counts[1]}" ] && [ "${counts[1]}" = "${counts[2]}" ]; then
    ok
  else
    bad "$name: allocations per rank (ours+libgomp's) with --steps 0, 1, 11:" \
      "${counts[0]} /${counts[1]} /${counts[2]} (the step allocates)"
  fi
done

# --trace (runtime/trace.c) as well: its buffer is allocated before the first step and its file
# written after the last, each with a count of allocations that does not depend on the steps
# traced, so every traced step too must allocate nothing: 0, 1 and 11 steps, all traced.
for name in gpt_char_m4 gpt_char_s2_1f1b_m4; do
  counts=()
  for steps in 0 1 11; do
    rm -f "$tmp"/count.*
    run=("$tmp/$name/launch.sh" --steps "$steps" --threads 1 --eval-every 0 --eval-batches 2
      --log-every 1000 --trace "$tmp/trace.json" --trace-steps 0:11)
    # (One rank: launch.sh execs the program; else the ranks get the shim through mpirun.)
    env=(OMPI_MCA_mca_base_env_list="LD_PRELOAD=$shim;ALLOC_COUNT_FILE=$tmp/count.%r")
    [ "$name" = gpt_char_m4 ] && env=(ALLOC_COUNT_FILE="$tmp/count.0" LD_PRELOAD="$shim")
    if ! env "${env[@]}" "${run[@]}" >"$tmp/out" 2>"$tmp/err"; then
      bad "$name --trace --steps $steps: $(grep -m3 . "$tmp/err")"
      continue 2
    fi
    line=
    for f in "$tmp"/count.*; do
      read -r n gomp _ <"$f"
      line+=" $n+$gomp"
    done
    echo "$name --trace --steps $steps: allocations per rank (+ libgomp's):$line"
    counts+=("$line")
  done
  if [ "${counts[0]}" = "${counts[1]}" ] && [ "${counts[1]}" = "${counts[2]}" ]; then
    ok
  else
    bad "$name --trace: allocations per rank with --steps 0, 1, 11:" \
      "${counts[0]} /${counts[1]} /${counts[2]} (a traced step allocates)"
  fi
done
finish
