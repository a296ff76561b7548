#!/usr/bin/env bash
# Two training steps of mlp_digits and of a tiny character GPT (plus --save) under valgrind's
# memcheck, portable builds, one thread: no memory error and a clean leak summary, every leak
# kind counted (definitely, indirectly, possibly lost and still reachable). The only suppressed
# blocks are libgomp's own state (libgomp.supp explains the entry). Skipped (exit 77) where
# valgrind is not installed or the programs are built with the sanitizers (valgrind cannot run
# those).
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
if ! command -v valgrind >/dev/null 2>&1; then
  echo "SKIP: valgrind is not installed (scripts/install-deps.sh installs it)"
  exit 77
fi
# The generated program re-executes itself to set OMP_WAIT_POLICY unless it is set.
export OMP_WAIT_POLICY=PASSIVE
vg=(valgrind --error-exitcode=99 --leak-check=full --show-leak-kinds=all --errors-for-leak-kinds=all
  --suppressions="$root/tests/valgrind/libgomp.supp" --log-file="$tmp/vg.%p")
models=("mlp samples/mlp_digits.json" "gpt -D L=1 -D C=32 -D T=16 --batch 4 samples/gpt_char.json")
for m in "${models[@]}"; do
  read -r name args <<<"$m"
  # shellcheck disable=SC2086 # args are words
  if ! "$pipec" compile $args -o "$tmp/$name" 2>"$tmp/err"; then
    bad "$name: compile: $(tail -3 "$tmp/err")"
    continue
  fi
  if nm "$tmp/$name/bin/train" | grep -q __asan_init; then
    echo "SKIP: the programs are built with AddressSanitizer; valgrind cannot run them"
    exit 77
  fi
  rm -f "$tmp"/vg.*
  "${vg[@]}" "$tmp/$name/bin/train" --steps 2 --threads 1 --quiet --eval-batches 2 \
    --loss-log "$tmp/$name.loss" --save "$tmp/$name.safetensors" >"$tmp/out" 2>&1
  rc=$?
  log=$(cat "$tmp"/vg.* 2>/dev/null)
  check "$name: valgrind exit 0 (got $rc)" [ "$rc" -eq 0 ]
  check "$name: no memory error" grep -q "ERROR SUMMARY: 0 errors" <<<"$log"
  for kind in "definitely lost" "indirectly lost" "possibly lost" "still reachable"; do
    check "$name: leak summary: $kind 0" grep -q "$kind: 0 bytes in 0 blocks" <<<"$log"
  done
  check "$name: 2 steps trained" [ "$(wc -l <"$tmp/$name.loss" 2>/dev/null)" = 2 ]
  check "$name: saved" [ -s "$tmp/$name.safetensors" ]
  [ "$rc" -eq 0 ] || { tail -40 <<<"$log"; cat "$tmp/out"; }
done
finish
