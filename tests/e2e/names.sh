#!/usr/bin/env bash
# Names from the model never reach C source raw: a model whose parameter and node names hold
# quotes, backslashes, comment and trigraph sequences, '%', spaces, non-ASCII letters and 1000
# characters compiles with -Wall -Werror, trains, and saves a safetensors file with exactly those
# names (read back with Python's json).
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
python3 - "$tmp/names.json" "$(cd "$root/../shared/data" && pwd)/digits.csv.gz" <<'PY'
import json, sys
w1 = 'fc1."quoted" \\back\\slash */ /* ??/ ??= %d %s weight'
b1 = "fc1.bïas ünïcode ✓"
w2 = "w" * 1000
node = 'h1 */ "node" \\'
m = {"format": "pipec-model", "version": 1, "name": 'odd "model" */ \\',
     "inputs": [{"name": "x", "shape": ["B", 64]}, {"name": "y", "dtype": "i32", "shape": ["B"], "target": True}],
     "params": [{"name": w1, "shape": [32, 64], "init": {"kind": "normal", "std": 0.1}},
                {"name": b1, "shape": [32]},
                {"name": w2, "shape": [10, 32], "init": "xavier"}],
     "nodes": [{"name": node, "op": "linear", "inputs": ["x", w1, b1]},
               {"name": "a", "op": "relu", "inputs": [node]},
               {"name": "logits", "op": "linear", "inputs": ["a", w2]},
               {"name": "loss", "op": "cross_entropy", "inputs": ["logits", "y"]}],
     "loss": "loss", "outputs": ["logits"],
     "training": {"batch": 16, "steps": 3, "data": {"kind": "csv", "path": sys.argv[2], "train_fraction": 0.8, "scale": 0.0625}}}
json.dump(m, open(sys.argv[1], "w"), ensure_ascii=False, indent=1)
json.dump([w1, b1, w2], open(sys.argv[1] + ".names", "w"))
PY
if "$pipec" compile "$tmp/names.json" -o "$tmp/out" 2>"$tmp/err"; then ok; else bad "compile: $(tail -5 "$tmp/err")"; fi
check "no raw name in an identifier" bash -c "! grep -q 'quoted' <(grep -v '^ *//\|\"' '$tmp/out/rank0.c' | sed 's|//.*||')"
"$tmp/out/bin/train" --quiet --save "$tmp/p.safetensors" >/dev/null 2>"$tmp/err" || bad "run: $(cat "$tmp/err")"
check "saved names are the model's names" python3 - "$tmp/p.safetensors" "$tmp/names.json.names" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
want = json.load(open(sys.argv[2]))
got = sorted(k for k in header if k != "__metadata__")
sys.exit(0 if got == sorted(want) else 1)
PY
finish
