#!/usr/bin/env bash
# make demo: check the samples, then train mlp_digits to the end (about 2 s), the same model as a
# 2-stage pipeline (two ranks under mpirun, the same bits as one stage: the two loss logs are
# compared) and the first steps of the character GPT on tinyshakespeare, with the freshly built
# compiler.
set -euo pipefail
pipec=${1:-build/bin/pipec}
cd "$(dirname "$0")/.."
for m in samples/mlp_digits.json samples/gpt_char.json samples/skip_net.json; do
  echo "== pipec check $m"
  "$pipec" check "$m"
  echo
done
echo "== pipec run samples/mlp_digits.json   (64-128-128-10 MLP on digits, 1500 AdamW steps)"
"$pipec" run samples/mlp_digits.json -o out/mlp_digits -- --loss-log out/mlp_digits/loss.txt
echo
echo "== pipec run samples/mlp_digits.json --stages 2   (2 ranks under mpirun, schedule 1f1b)"
"$pipec" run samples/mlp_digits.json --stages 2 -o out/mlp_digits_s2 -- --loss-log out/mlp_digits_s2/loss.txt
if cmp -s out/mlp_digits/loss.txt out/mlp_digits_s2/loss.txt; then
  echo "the 2-stage run's 1500 losses are bit-identical to the one-stage run's"
else
  echo "demo: the 2-stage losses differ from the one-stage run's" >&2
  exit 1
fi
echo
echo "== pipec run samples/gpt_char.json -- --steps 200   (the first 200 of 2000 steps)"
"$pipec" run samples/gpt_char.json -o out/gpt_char -- --steps 200 --log-every 50 --eval-batches 10
echo
echo "The full GPT run: out/gpt_char/bin/train   (2000 steps; val loss about 1.9)"
