#!/usr/bin/env bash
# An imported model trains at the speed of the hand-written one: samples/llama_char.json's
# architecture written in PyTorch (tests/import/fixture_models.py's Llama3 at llama_char's dims:
# V 65, T 64, C 128, 4 heads, 2 kv heads, FF 352, 4 layers, interleaved RoPE), exported with
# scripts/export_model.py, and both programs run llama_char's training section (tinyshakespeare,
# batch 12) for STEPS steps at 1 thread, alternating, REPS times each; prints the median step
# time of each (the program's own "step time" line) and their ratio.
#
# usage: bench/import_vs_json.sh PIPEC [STEPS] [REPS]   (needs bench/.venv-torch2 for the export)
set -euo pipefail
pipec=$(cd -- "$(dirname -- "$1")" && pwd)/$(basename -- "$1")
steps=${2:-200}
reps=${3:-5}
root=$(cd -- "$(dirname -- "$0")/.." && pwd)
py=$root/bench/.venv-torch2/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
"$py" - "$root" "$tmp" <<'PY' 2>/dev/null
import json, os, sys, torch
root, tmp = sys.argv[1], sys.argv[2]
sys.path[:0] = [os.path.join(root, "tests", "import"), os.path.join(root, "scripts")]
import export_model, fixture_models as fm
cfg = {"vocab_size": 65, "dim": 128, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 352,
       "norm_eps": 1e-5, "rope_theta": 10000.0, "max_seq_len": 64, "rope_pairing": "interleaved"}
torch.manual_seed(0)
x = torch.randint(0, 65, (2, 64))
ep, _ = export_model.export(fm.Llama3(cfg), (x, x))
export_model.save(ep, os.path.join(tmp, "llama.pt2"))
t = json.load(open(os.path.join(root, "samples", "llama_char.json")))["training"]
t["data"]["path"] = os.path.join(root, "samples", t["data"]["path"])
t["data"]["input"], t["data"]["target"] = "idx", "targets"
json.dump(t, open(os.path.join(tmp, "train.json"), "w"))
PY
"$pipec" compile "$root/samples/llama_char.json" -o "$tmp/json" >/dev/null
"$pipec" compile "$tmp/llama.pt2" --training "$tmp/train.json" -o "$tmp/pt2" >/dev/null
step_ms() { "$1/bin/train" --steps "$steps" --eval-every 0 2>&1 | sed -n "s/^median step time \([0-9.]*\) ms.*/\1/p" | tail -1; }
for _ in $(seq "$reps"); do
  step_ms "$tmp/json" >>"$tmp/json.ms"
  step_ms "$tmp/pt2" >>"$tmp/pt2.ms"
done
median() { sort -n "$1" | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
j=$(median "$tmp/json.ms")
p=$(median "$tmp/pt2.ms")
echo "| program | step (ms, median of $reps x $steps steps, 1 thread) |"
echo "|---|---|"
echo "| samples/llama_char.json | $j |"
echo "| the same model exported from PyTorch (.pt2) | $p |"
echo "ratio pt2/json: $(awk -v a="$p" -v b="$j" 'BEGIN {printf "%.3f", a / b}')"
