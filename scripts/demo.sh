#!/usr/bin/env bash
# make demo: check and print the sample models with the freshly built compiler.
# (The training issue extends this to train mlp_digits and the first GPT steps.)
set -euo pipefail
pipec=${1:-build/bin/pipec}
cd "$(dirname "$0")/.."
for m in samples/mlp_digits.json samples/gpt_char.json samples/skip_net.json; do
  echo "== pipec check $m"
  "$pipec" check "$m"
  echo
done
echo "== pipec print samples/mlp_digits.json"
"$pipec" print samples/mlp_digits.json
