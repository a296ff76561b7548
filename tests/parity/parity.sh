#!/usr/bin/env bash
# PyTorch parity: the same model, the same initial weights (a safetensors file written by the
# PyTorch side and loaded with --init), the same batches; 20 AdamW steps of per-step loss must
# agree within 1e-5 relative, for mlp_digits, a small gpt_char, skip_net, llama_char as shipped
# (RMSNorm, interleaved RoPE, grouped-query attention, SwiGLU) and a small Llama with half-pairing
# RoPE and multi-query attention (one kv head); torch_ref.py writes RMSNorm, RoPE and GQA from
# their formulas.
# Skips (exit 77) with a clear message where Debian's python3-torch is not importable.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
py=/usr/bin/python3
if ! $py -c 'import torch' 2>/dev/null; then
  echo "skip: PyTorch parity needs python3-torch (Debian's /usr/bin/python3); scripts/install-deps.sh --with-torch installs it"
  exit 77
fi
steps=20
data=$(cd "$root/../shared/data" 2>/dev/null && pwd)
[ -n "$data" ] || { echo "FAIL: ../shared/data not found"; exit 1; }

# The models: mlp_digits as shipped; gpt_char shrunk to 2 layers, C 64, T 32, batch 4 in 2 microbatches.
python3 - "$root/samples/mlp_digits.json" "$tmp/mlp.json" "$data/digits.csv.gz" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["training"]["data"]["path"] = sys.argv[3]
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY
python3 samples/gen_gpt.py --layers 2 --embd 64 --heads 4 --context 32 --name gpt_small -o "$tmp/gpt0.json"
python3 - "$tmp/gpt0.json" "$tmp/gpt.json" "$data/tinyshakespeare.txt" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
t = m["training"]; t["data"]["path"] = sys.argv[3]; t["batch"] = 4; t["microbatches"] = 2
t["schedule"]["warmup"] = 5
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY

# skip_net (split, concat, a weight used twice, fan-out, skip connection) on a synthetic table.
python3 "$root/tests/skip_net_table.py" "$root/samples/skip_net.json" "$tmp/skip.json" "$tmp/skip.csv"

# llama_char as shipped (its data path made absolute); a 2-layer Llama, C 64, 4 heads sharing one
# kv head, half pairing, T 32, batch 4 in 2 microbatches.
python3 - "$root/samples/llama_char.json" "$tmp/llama.json" "$data/tinyshakespeare.txt" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["training"]["data"]["path"] = sys.argv[3]
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY
python3 samples/gen_llama.py --layers 2 --embd 64 --heads 4 --kv-heads 1 --context 32 --pairing half \
  --name llama_mqa -o "$tmp/mqa0.json"
python3 - "$tmp/mqa0.json" "$tmp/mqa.json" "$data/tinyshakespeare.txt" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
t = m["training"]; t["data"]["path"] = sys.argv[3]; t["batch"] = 4; t["microbatches"] = 2
t["schedule"]["warmup"] = 5
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY

for model in mlp gpt skip llama mqa; do
  "$pipec" print "$tmp/$model.json" >"$tmp/$model.ir" || { bad "$model: pipec print"; continue; }
  if ! $py tests/parity/torch_ref.py "$tmp/$model.ir" "$tmp/$model.json" "$tmp/$model.init.safetensors" $steps \
    >"$tmp/$model.torch" 2>"$tmp/$model.torch.err"; then
    bad "$model: PyTorch reference failed: $(tail -3 "$tmp/$model.torch.err")"
    continue
  fi
  "$pipec" compile "$tmp/$model.json" -o "$tmp/$model.out" 2>"$tmp/$model.cerr" || { bad "$model: compile"; continue; }
  "$tmp/$model.out/bin/train" --steps $steps --threads 1 --quiet --init "$tmp/$model.init.safetensors" \
    --loss-log "$tmp/$model.pipec" >/dev/null 2>"$tmp/$model.err" || { bad "$model: run: $(cat "$tmp/$model.err")"; continue; }
  worst=$(paste "$tmp/$model.pipec" "$tmp/$model.torch" | awk '
    { r = ($2 - $4) / $4; if (r < 0) r = -r; if (r > w) { w = r; s = $1 } }
    END { printf "%.3g (step %d)", w, s }')
  echo "$model: $(wc -l <"$tmp/$model.pipec") steps, loss $(head -1 "$tmp/$model.pipec" | cut -d' ' -f2) -> $(tail -1 "$tmp/$model.pipec" | cut -d' ' -f2), worst relative difference to PyTorch $worst"
  check "$model: $steps steps from both" test "$(wc -l <"$tmp/$model.pipec")" -eq $steps -a "$(wc -l <"$tmp/$model.torch")" -eq $steps
  check "$model: per-step loss within 1e-5 of PyTorch" awk '
    NR == FNR { a[$1] = $2; next }
    { r = (a[$1] - $2) / $2; if (r < 0) r = -r; if (r > 1e-5) bad = 1 }
    END { exit bad }' "$tmp/$model.pipec" "$tmp/$model.torch"
done
finish
