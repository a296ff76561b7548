#!/usr/bin/env bash
# The numbers a refactoring must not move: SHA-256 of the saved parameters, of the optimizer
# state and of the per-step loss log after 20 steps of each sample (mlp_digits; gpt_char with
# M = 1 and M = 4; skip_net on a synthetic table), against tests/golden/hashes/KERNEL.txt.
#
# OpenBLAS sums each GEMM in the order of its kernel (SkylakeX, Haswell, Prescott, ...), so the
# bits are a function of the kernel the machine runs: the golden file is per kernel, and the test
# skips (exit 77) where no file for this machine's kernel exists. HASHES_UPDATE=1 writes it.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1

# skip_net has no data binding: a synthetic 300-row table, as in the parity test.
python3 "$root/tests/skip_net_table.py" "$root/samples/skip_net.json" "$tmp/skip.json" "$tmp/skip.csv"

# name model compile-flags...
runs=("mlp_digits samples/mlp_digits.json"
  "gpt_char_m1 samples/gpt_char.json --microbatches 1"
  "gpt_char_m4 samples/gpt_char.json --microbatches 4"
  "skip_net $tmp/skip.json")
kernel=
: >"$tmp/got.txt"
for r in "${runs[@]}"; do
  set -- $r
  name=$1 model=$2
  shift 2
  if ! "$pipec" compile "$model" "$@" -o "$tmp/$name" 2>"$tmp/err"; then
    bad "$name: compile: $(tail -3 "$tmp/err")"
    continue
  fi
  if ! "$tmp/$name/bin/train" --steps 20 --threads 2 --eval-every 0 --eval-batches 1 --log-every 1000 \
    --save "$tmp/$name.st" --loss-log "$tmp/$name.loss" >"$tmp/$name.out" 2>"$tmp/err"; then
    bad "$name: run: $(head -3 "$tmp/err")"
    continue
  fi
  k=$(sed -n 's/^blas .*, kernel \([^,]*\),.*/\1/p' "$tmp/$name.out")
  kernel=${kernel:-$k}
  [ "$k" = "$kernel" ] || bad "$name: ran kernel $k, the others $kernel"
  for f in st st.optim loss; do
    echo "$name.$f $(sha256sum <"$tmp/$name.$f" | cut -d' ' -f1)" >>"$tmp/got.txt"
  done
done
[ -n "$kernel" ] || { bad "no run reported its BLAS kernel"; finish; exit 1; }
golden="$root/tests/golden/hashes/$kernel.txt"
if [ "${HASHES_UPDATE:-0}" = 1 ]; then
  cp "$tmp/got.txt" "$golden"
  echo "wrote $golden"
elif [ ! -f "$golden" ]; then
  echo "SKIP: no recorded hashes for OpenBLAS kernel $kernel ($golden); HASHES_UPDATE=1 records them"
  exit 77
else
  while read -r key want; do
    got=$(awk -v k="$key" '$1 == k { print $2 }' "$tmp/got.txt")
    if [ "$got" = "$want" ]; then ok; else bad "$key: sha256 $got, recorded $want"; fi
  done <"$golden"
fi
finish
