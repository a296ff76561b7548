#!/usr/bin/env bash
# The numbers a refactoring must not move: SHA-256 of the saved parameters, of the optimizer
# state and of the per-step loss log after 20 steps of each sample (mlp_digits; gpt_char with
# M = 1 and M = 4; skip_net on a synthetic table; digits_autoencoder), against
# tests/golden/hashes/KERNEL.txt (a run with no lines in the file is not checked there).
#
# The golden file is per GEMM: where the kernels run pipec's own GEMM (x86-64-v3 and -v4 CPUs:
# each product the FMA chain over k in order, runtime/gemm.c) the bits depend on no BLAS and
# the file is tests/golden/hashes/pipec-gemm.txt; where they run OpenBLAS (PIPEC_GEMM=openblas,
# or a CPU without FMA) OpenBLAS sums each GEMM in the order of its kernel (SkylakeX, Haswell,
# Prescott, ...) and the file is per kernel, KERNEL.txt. Both are checked (the default and
# PIPEC_GEMM=openblas); the test skips (exit 77) where neither has a file for this machine.
# HASHES_UPDATE=1 writes them.
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
  "skip_net $tmp/skip.json"
  "digits_autoencoder samples/digits_autoencoder.json")
# record GEMM: the runs with PIPEC_GEMM=GEMM ("" the default), checked against (or, with
# HASHES_UPDATE=1, written to) the golden file of the GEMM they report.
record() {
  local gemm=$1 kernel= r name model k
  : >"$tmp/got.txt"
  for r in "${runs[@]}"; do
    set -- $r
    name=$1 model=$2
    shift 2
    if [ ! -x "$tmp/$name/bin/train" ] && ! "$pipec" compile "$model" "$@" -o "$tmp/$name" 2>"$tmp/err"; then
      bad "$name: compile: $(tail -3 "$tmp/err")"
      continue
    fi
    if ! PIPEC_GEMM=$gemm "$tmp/$name/bin/train" --steps 20 --threads 2 --eval-every 0 --eval-batches 1 --log-every 1000 \
      --save "$tmp/$name.st" --loss-log "$tmp/$name.loss" >"$tmp/$name.out" 2>"$tmp/err"; then
      bad "$name: run: $(head -3 "$tmp/err")"
      continue
    fi
    k=$(sed -n 's/^blas .*, kernel \([^,]*\),.*/\1/p' "$tmp/$name.out")
    grep -qx "gemm pipec (FMA chain in k order)" "$tmp/$name.out" && k=pipec-gemm
    kernel=${kernel:-$k}
    [ "$k" = "$kernel" ] || bad "$name: ran GEMM $k, the others $kernel"
    for f in st st.optim loss; do
      echo "$name.$f $(sha256sum <"$tmp/$name.$f" | cut -d' ' -f1)" >>"$tmp/got.txt"
    done
  done
  [ -n "$kernel" ] || { bad "no run reported its GEMM"; return; }
  golden="$root/tests/golden/hashes/$kernel.txt"
  if [ "${HASHES_UPDATE:-0}" = 1 ]; then
    cp "$tmp/got.txt" "$golden"
    echo "wrote $golden"
  elif [ ! -f "$golden" ]; then
    echo "no recorded hashes for the GEMM $kernel ($golden); HASHES_UPDATE=1 records them"
    skipped=$((skipped + 1))
  else
    while read -r key want; do
      got=$(awk -v k="$key" '$1 == k { print $2 }' "$tmp/got.txt")
      if [ "$got" = "$want" ]; then ok; else bad "$key: sha256 $got, recorded $want ($kernel)"; fi
    done <"$golden"
  fi
}
skipped=0
record ""       # pipec's GEMM where the CPU has FMA
record openblas # OpenBLAS's, per its kernel
if [ $skipped = 2 ]; then
  echo "SKIP: no recorded hashes for this machine's GEMMs"
  exit 77
fi
finish
