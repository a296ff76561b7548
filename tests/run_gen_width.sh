#!/usr/bin/env bash
# Generated sources read like hand-written ones: every line of every rank<r>.c that
# `pipec compile --no-build` writes for each sample (S = 1 and S = 2 at 1f1b), and for gpt_char
# also under zb-v, --replicas 2, --recompute all and --precision bf16, and the cuda target's
# rank0.cu of gpt_char, is at most 100 columns, with no exception. A failure names the file,
# the line number and the line.
set -u
pipec=$1
root=$2
cd "$root" || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() {
  local name=$1 model=$2
  shift 2
  if ! "$pipec" compile "$model" --no-build -o "$tmp/$name" "$@" >/dev/null 2>"$tmp/err"; then
    echo "FAIL $name: compile: $(head -n 3 "$tmp/err")"
    fail=$((fail + 1))
    return
  fi
  local bad=0 f n line
  for f in "$tmp/$name"/rank*.c "$tmp/$name"/rank*.cu; do
    [ -e "$f" ] || continue
    n=0
    while IFS= read -r line || [ -n "$line" ]; do
      n=$((n + 1))
      [ ${#line} -le 100 ] && continue
      [ $bad -lt 5 ] && echo "FAIL $name: $(basename "$f"):$n: ${#line} columns: $line"
      bad=$((bad + 1))
    done <"$f"
  done
  if [ $bad -eq 0 ]; then
    pass=$((pass + 1))
  else
    echo "FAIL $name: $bad line(s) over 100 columns"
    fail=$((fail + 1))
  fi
}
for m in samples/*.json; do
  s=$(basename "$m" .json)
  check "$s" "$m"
  check "${s}_s2" "$m" --stages 2 --microbatches 4 --schedule 1f1b
done
check gpt_char_zbv samples/gpt_char.json --stages 2 --microbatches 4 --schedule zb-v
check gpt_char_replicas samples/gpt_char.json --replicas 2 --microbatches 2
check gpt_char_s2_replicas samples/gpt_char.json --stages 2 --replicas 2 --microbatches 4
check gpt_char_recompute samples/gpt_char.json --stages 2 --microbatches 4 --recompute all
check gpt_char_bf16 samples/gpt_char.json --precision bf16
check gpt_char_s2_bf16 samples/gpt_char.json --stages 2 --microbatches 4 --precision bf16
check gpt_char_cuda samples/gpt_char.json --target cuda
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
