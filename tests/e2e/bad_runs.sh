#!/usr/bin/env bash
# Bad input to a generated program (flags, data, checkpoints) gets one clear error line with its
# location and a non-zero exit, never a crash or a silently wrong run; peak RSS stays within the
# stated bound of the memory plan.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
"$pipec" compile samples/gpt_char.json -o "$tmp/gpt" 2>/dev/null || { bad "compile gpt"; finish; exit 1; }
"$pipec" compile samples/mlp_digits.json -o "$tmp/mlp" 2>/dev/null || { bad "compile mlp"; finish; exit 1; }
gpt="$tmp/gpt/bin/train"
mlp="$tmp/mlp/bin/train"

# expect NAME RC STDERR-REGEX CMD...: exit status and the first stderr line.
expect() {
  local name=$1 want=$2 re=$3
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? first
  first=$(head -n 1 "$tmp/err")
  if [ $rc -ne "$want" ]; then
    bad "$name: exit $rc, want $want ($first)"
  elif ! [[ "$first" =~ $re ]]; then
    bad "$name: stderr '$first' does not match '$re'"
  elif [ "$want" -eq 1 ] && ! grep -q '^HINT: ' "$tmp/err"; then
    bad "$name: no HINT line"
  else
    ok
  fi
}

expect steps-not-a-number 2 "^train: --steps: expected a non-negative integer, got 'abc'$" "$gpt" --steps abc
expect unknown-flag 2 "^train: --frob: unknown option" "$gpt" --frob
expect lr-negative 2 "^train: --lr: " "$gpt" --lr -1
expect missing-data 1 "rank 0: error: cannot open '$tmp/none.txt'" "$gpt" --steps 1 --data "$tmp/none.txt"
head -c 3000 /bin/sh >"$tmp/binary.txt"
expect vocab-too-large 1 "rank 0: error: $tmp/binary.txt has [0-9]+ distinct tokens but the model's vocabulary holds 65$" \
  "$gpt" --steps 1 --data "$tmp/binary.txt"
printf '1,2,3\n4,x,6\n' >"$tmp/bad.csv"
expect csv-not-a-number 1 "rank 0: error: $tmp/bad.csv:2:3: " "$mlp" --steps 1 --data "$tmp/bad.csv"
expect init-missing 1 "rank 0: error: .*$tmp/none.safetensors" "$gpt" --steps 1 --init "$tmp/none.safetensors"
printf 'not a safetensors file at all' >"$tmp/junk.safetensors"
expect init-junk 1 "rank 0: error: .*$tmp/junk.safetensors" "$gpt" --steps 1 --init "$tmp/junk.safetensors"
"$mlp" --steps 1 --quiet --save "$tmp/mlp.safetensors" >/dev/null 2>&1 || bad "mlp save"
expect init-other-model 1 "rank 0: error: .*$tmp/mlp.safetensors" "$gpt" --steps 1 --init "$tmp/mlp.safetensors"
head -c 200 "$tmp/mlp.safetensors" >"$tmp/trunc.safetensors"
expect init-truncated 1 "rank 0: error: .*$tmp/trunc.safetensors" "$mlp" --steps 1 --init "$tmp/trunc.safetensors"
cp "$tmp/mlp.safetensors" "$tmp/noopt.safetensors"
expect resume-without-optimizer-state 1 "rank 0: error: .*noopt.safetensors.optim" "$mlp" --steps 2 --resume "$tmp/noopt.safetensors"
expect save-missing-dir 1 "rank 0: error: .*$tmp/no/such/dir" "$mlp" --steps 1 --quiet --save "$tmp/no/such/dir/x.safetensors"
check "failed save leaves no file" test ! -e "$tmp/no/such/dir/x.safetensors"

# Peak RSS within 5% of the plan plus the stated runtime overhead: the token stream (4 bytes per
# character) and a fixed 16 MiB for code, libraries, OpenMP stacks and kernel scratch.
"$gpt" --steps 10 --eval-batches 2 >"$tmp/run" 2>&1 || bad "gpt run"
plan=$(sed -n 's/^  total .*(\([0-9]*\) bytes)$/\1/p' "$tmp/run")
rss=$(sed -n 's/^peak RSS \([0-9.]*\) MiB$/\1/p' "$tmp/run")
chars=$(wc -c <"$root/../shared/data/tinyshakespeare.txt")
echo "gpt_char: plan $plan bytes, peak RSS $rss MiB, data $((chars * 4)) bytes"
check "gpt_char peak RSS $rss MiB <= 1.05 x plan + data + 16 MiB" \
  awk -v p="$plan" -v r="$rss" -v d="$((chars * 4))" 'BEGIN { exit !(r * 1048576 <= 1.05 * p + d + 16 * 1048576) }'
check "gpt_char peak RSS $rss MiB >= the plan (the plan is really allocated and touched)" \
  awk -v p="$plan" -v r="$rss" 'BEGIN { exit !(r * 1048576 >= p) }'
finish
