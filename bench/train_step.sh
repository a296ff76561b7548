#!/usr/bin/env bash
# Training step of gpt_char (nanoGPT's baby config: batch 12 x 64 tokens, 4 layers, C 128): the
# pipec program against the equivalent PyTorch eager loop (bench/torch_gpt_char.py), same machine,
# same thread count, run back to back, median ms per step after warm-up; plus the achieved
# GFLOP/s against the machine's sgemm rate at the model's main GEMM shape.
# usage: bench/train_step.sh PIPEC   (BENCH_STEPS=30 BENCH_ROUNDS=3 BENCH_THREADS="1 2")
set -u
pipec=$1
root=$(cd "$(dirname "$0")/.." && pwd)
data="$root/../shared/data/tinyshakespeare.txt"
steps=${BENCH_STEPS:-30}
rounds=${BENCH_ROUNDS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
$py -c 'import torch' 2>/dev/null || { echo "skip: PyTorch (Debian's python3-torch) is needed for the peer"; exit 0; }
"$pipec" compile "$root/samples/gpt_char.json" -o "$tmp/gpt" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
cc -O2 "$root/bench/sgemm_rate.c" -o "$tmp/sgemm" $(pkg-config --cflags --libs openblas) || exit 1
# FLOPs per step: forward FLOPs of the model (pipec check, per sample) x batch x 3 (forward + backward).
fwd=$("$pipec" check "$root/samples/gpt_char.json" | awk '/^forward/ { v = $2; u = $3; m = (u ~ /^G/) ? 1e9 : (u ~ /^M/) ? 1e6 : (u ~ /^K/) ? 1e3 : 1; print v * m }')
flops=$(awk -v f="$fwd" 'BEGIN { print f * 12 * 3 }')
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
echo "| threads | pipec ms/step | PyTorch ms/step | speedup | pipec GFLOP/s | sgemm GFLOP/s (OpenBLAS, same threads) | of sgemm rate |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for t in ${BENCH_THREADS:-1 2}; do
  : >"$tmp/p"
  : >"$tmp/q"
  for r in $(seq "$rounds"); do
    "$tmp/gpt/bin/train" --steps "$steps" --threads "$t" --eval-batches 1 --log-every 1000000 |
      sed -n 's/^median step time \([0-9.]*\) ms.*/\1/p' >>"$tmp/p"
    $py "$root/bench/torch_gpt_char.py" "$data" "$t" 5 "$((steps - 5))" >>"$tmp/q"
  done
  p=$(median <"$tmp/p")
  q=$(median <"$tmp/q")
  rate=$("$tmp/sgemm" "$t")
  awk -v t="$t" -v p="$p" -v q="$q" -v f="$flops" -v s="$rate" 'BEGIN {
    g = f / (p / 1000) / 1e9
    printf "| %d | %.1f | %.1f | %.2fx | %.1f | %.1f | %.0f%% |\n", t, p, q, q / p, g, s, 100 * g / s }'
done
echo
echo "model FLOPs per step: $(awk -v f="$flops" 'BEGIN { printf "%.2f GFLOP", f / 1e9 }') (3 x forward, batch 12); $steps steps per run, $rounds runs each, medians"
