#!/usr/bin/env bash
# The .pt2 front end end to end, with no torch (docs/import.md): every committed fixture of
# tests/import/fixtures compiles from its archive and trains 10 AdamW steps on torch's fixed
# batches (data.shuffle false) from the archive's weights, each step's loss within 1e-5 relative
# of torch's recorded one; the Llama fixture at S = 2 (--split by module) and S = 4 is bit for bit
# S = 1 (loss log and saved parameters); `pipec import` -> JSON (+ --weights) -> compile gives the
# bits of compiling the archive; pipec's saved checkpoint names every parameter by its FQN.
#
# usage: tests/e2e/import.sh PIPEC REPO_ROOT
set -u
pipec=$(cd -- "$(dirname -- "$1")" && pwd)/$(basename -- "$1")
root=$2
fx=$root/tests/import/fixtures
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  echo "skip: needs numpy in /usr/bin/python3"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails + 1)); }

# NAME's data (torch's batches 1..10, in order) and training section into $tmp/NAME.
setup() {
  /usr/bin/python3 - "$fx/$1.json" "$tmp/$1" "$2" "$3" <<'PY'
import json, os, sys
import numpy as np
ref, out, xin, yin = sys.argv[1:5]
d = json.load(open(ref))
os.makedirs(out, exist_ok=True)
files = {}
for key, name in (("inputs", xin), ("targets", yin)):
    rows = []
    for b in d["batches"][1:]:
        t = b[key]
        dt = np.float32 if t["dtype"] == "float32" else np.int32
        rows.append(np.array(t["data"], dtype=dt).reshape(t["shape"]))
    files[name] = os.path.join(out, name + ".npy")
    np.save(files[name], np.concatenate(rows))
aw = d["adamw"]
json.dump({"batch": d["batches"][0]["targets"]["shape"][0],
           "steps": aw["steps"], "log_every": 1,
           "optimizer": {"kind": "adamw", "lr": aw["lr"], "betas": aw["betas"], "eps": aw["eps"],
                         "weight_decay": aw["weight_decay"]},
           "data": {"kind": "npy", "files": files, "shuffle": False, "train_fraction": 1}},
          open(os.path.join(out, "train.json"), "w"))
PY
}

# Compares the loss log with torch's losses (relative 1e-5).
losses_match() {
  /usr/bin/python3 - "$fx/$1.json" "$2" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))["adamw"]["losses"]
got = [float(l.split()[1]) for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")]
worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
print("    %d steps, worst relative difference %.2e" % (len(got), worst))
sys.exit(0 if len(got) == len(ref) and worst <= 1e-5 else 1)
PY
}

for spec in mlp_regression:x:y nanogpt:idx:targets llama3_interleaved:idx:targets \
  llama3_halves:idx:targets llama3_complex:idx:targets hf_llama:idx:targets; do
  IFS=: read -r name x y <<<"$spec"
  setup "$name" "$x" "$y" || { bad "$name: setup"; continue; }
  d=$tmp/$name
  if "$pipec" run "$fx/$name.pt2" --training "$d/train.json" -o "$d/s1" -- \
    --loss-log "$d/s1.log" --save "$d/s1.safetensors" >"$d/run.out" 2>&1 &&
    losses_match "$name" "$d/s1.log"; then
    ok "$name: 10 AdamW steps from the archive's weights match torch's losses"
  else
    bad "$name: training against torch's losses"
    tail -5 "$d/run.out"
  fi
done

# What the patterns make: one rope per q and k, one attention per layer with n_kv_head, the
# written-out RMSNorm as rms_norm, and no permute left (the transposes around the attention and
# the rotations cancel).
for name in nanogpt llama3_interleaved llama3_halves llama3_complex hf_llama mlp_regression; do
  "$pipec" import "$fx/$name.pt2" -o "$tmp/$name.json" || { bad "$name: import"; continue; }
done
if /usr/bin/python3 - "$tmp" "$root/docs/model.schema.json" <<'PY'; then
import collections, json, sys
want_llama = {"embedding": 1, "rms_norm": 5, "linear": 15, "reshape": 8, "rope": 4, "attention": 2,
              "add": 4, "silu": 2, "mul": 2, "cross_entropy": 1}
want = {"nanogpt": {"embedding": 1, "slice": 1, "add": 5, "layernorm": 5, "linear": 9, "split": 2,
                    "attention": 2, "gelu": 2, "cross_entropy": 1},
        "llama3_interleaved": want_llama, "llama3_halves": want_llama,
        "llama3_complex": want_llama, "hf_llama": want_llama,
        "mlp_regression": {"linear": 3, "relu": 2, "mse_loss": 1}}
bad = 0
try:  # the imported JSON is a valid model document (docs/model.schema.json)
    import jsonschema
    schema = json.load(open(sys.argv[2]))
except ImportError:
    schema = None
for name, w in want.items():
    d = json.load(open("%s/%s.json" % (sys.argv[1], name)))
    if schema:
        jsonschema.validate(d, schema)
    got = dict(collections.Counter(n["op"] for n in d["nodes"]))
    kv = {n["attrs"].get("n_kv_head") for n in d["nodes"] if n["op"] == "attention"}
    if got != w or (name != "nanogpt" and name != "mlp_regression" and kv != {2}):
        print("    %s: %s (n_kv_head %s)" % (name, got, kv))
        bad = 1
sys.exit(bad)
PY
  ok "the patterns: rope, attention with n_kv_head, rms_norm, mse_loss; no permute left"
else
  bad "the imported graphs' ops"
fi

# Every command reads the archive: check, print, plan, profile (compile and run above).
d=$tmp/llama3_interleaved
if "$pipec" check "$fx/llama3_interleaved.pt2" >/dev/null && "$pipec" print "$fx/llama3_interleaved.pt2" |
  grep -q "^param layers.0.attention.wq.weight: f32(64,64)" &&
  "$pipec" plan --stages 2 --training "$d/train.json" "$fx/llama3_interleaved.pt2" >/dev/null &&
  "$pipec" profile --stages 2 --training "$d/train.json" "$fx/llama3_interleaved.pt2" \
    -o "$d/costs.json" -- --steps 3 >/dev/null 2>&1 && [ -s "$d/costs.json" ]; then
  ok "check, print, plan and profile read MODEL.pt2"
else
  bad "check, print, plan or profile of MODEL.pt2"
fi

# The flags instead of a training file: --data-file and --set (the first step's loss is torch's).
d=$tmp/mlp_regression
if (cd "$d" && "$pipec" run "$fx/mlp_regression.pt2" --data-file x=x.npy --data-file y=y.npy \
  --set batch=4 --set steps=1 --set data.shuffle=false --set data.train_fraction=1 -o "$d/flags" \
  -- --loss-log "$d/flags.log" >"$d/flags.out" 2>&1) &&
  /usr/bin/python3 - "$fx/mlp_regression.json" "$d/flags.log" <<'PY'; then
import json, sys
ref = json.load(open(sys.argv[1]))["adamw"]["losses"][0]
got = [float(l.split()[1]) for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")]
sys.exit(0 if len(got) == 1 and abs(got[0] - ref) <= 1e-5 * ref else 1)
PY
  ok "mlp_regression with --data-file and --set: the first step's loss is torch's"
else
  bad "mlp_regression with --data-file and --set"
  tail -5 "$d/flags.out"
fi

# Bitwise across stage counts: the Llama fixture cut by the partitioner between its layers at
# S = 2, and by module names at S = 4.
d=$tmp/llama3_interleaved
for cut in "--stages 2" "--split layers.0,layers.1,norm"; do
  tag=$(echo "$cut" | tr -dc 'a-z0-9')
  # shellcheck disable=SC2086
  if "$pipec" run "$fx/llama3_interleaved.pt2" --training "$d/train.json" $cut -o "$d/$tag" -- \
    --loss-log "$d/$tag.log" --save "$d/$tag.safetensors" >"$d/$tag.out" 2>&1 &&
    cmp -s "$d/s1.log" "$d/$tag.log" && cmp -s "$d/s1.safetensors" "$d/$tag.safetensors"; then
    ok "llama3_interleaved $cut: loss log and parameters bit for bit S = 1's"
  else
    bad "llama3_interleaved $cut: not S = 1's bits"
    tail -5 "$d/$tag.out"
  fi
done

# import -> JSON -> compile: the bits of compiling the archive.
if "$pipec" import "$fx/llama3_interleaved.pt2" -o "$d/model.json" --weights "$d/model.safetensors" \
  --training "$d/train.json" && [ -s "$d/model.safetensors" ] &&
  "$pipec" run "$d/model.json" -o "$d/js" -- --loss-log "$d/js.log" --save "$d/js.safetensors" \
    >"$d/js.out" 2>&1 &&
  cmp -s "$d/s1.log" "$d/js.log" && cmp -s "$d/s1.safetensors" "$d/js.safetensors"; then
  ok "pipec import -> JSON -> run: the bits of running the archive"
else
  bad "pipec import -> JSON -> run differs from the archive's run"
  tail -5 "$d/js.out" 2>/dev/null
fi

# The saved checkpoint holds every parameter under its FQN (load_state_dict's names).
if /usr/bin/python3 - "$tmp/nanogpt/s1.safetensors" <<'PY'; then
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
names = set(json.loads(raw[8:8 + n])) - {"__metadata__"}
want = {"transformer.wte.weight", "lm_head.weight", "transformer.h.0.attn.c_attn.weight",
        "transformer.ln_f.bias"}
sys.exit(0 if want <= names and len(names) == 29 else 1)
PY
  ok "nanogpt: the checkpoint names its 29 parameters by FQN (the tied head included)"
else
  bad "nanogpt: checkpoint names"
fi

[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
