#!/usr/bin/env bash
# mlp_digits trains to >= 95% validation accuracy on the digits data (80/20 split), and the run
# is bitwise the same with 1 and 2 threads.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
"$pipec" compile samples/mlp_digits.json -o "$tmp/mlp" 2>"$tmp/err" || { cat "$tmp/err"; bad compile; finish; exit 1; }
"$tmp/mlp/bin/train" --threads 1 --loss-log "$tmp/l1" >"$tmp/out1" 2>&1 || bad "run (threads 1): $(tail -3 "$tmp/out1")"
acc=$(grep '^eval' "$tmp/out1" | tail -1 | sed -n 's/.*val accuracy \([0-9.]*\)%.*/\1/p')
echo "final validation accuracy: ${acc:-none}%"
check "val accuracy ${acc:-none}% >= 95%" awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 95) }'
"$tmp/mlp/bin/train" --threads 2 --quiet --loss-log "$tmp/l2" >/dev/null 2>&1 || bad "run (threads 2)"
check "losses identical with 1 and 2 threads" cmp -s "$tmp/l1" "$tmp/l2"
check "1500 steps logged" test "$(wc -l <"$tmp/l1")" -eq 1500
finish
