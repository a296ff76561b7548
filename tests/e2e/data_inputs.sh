#!/usr/bin/env bash
# Data of any shape (training.data.input/target lists, columns, files): the autoencoder (a loss
# that reads its input, no target) trains bit for bit the same at S = 1 and S = 2 and from .npy
# as from CSV; a regression with an f32 target reports its loss and no accuracy; a model of two
# data inputs (default columns 0..31, 32..63, then the label) trains the same from CSV and from
# three .npy files (--data-file overrides them one by one); the runtime's data errors name the
# file and the line or row: an .npy file of the wrong dtype, shape or row count, a CSV row with
# too few columns, a non-integer in an i32 column; --data-file misuse is a usage error.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  echo "skip: needs numpy in /usr/bin/python3"
  exit 77
fi
/usr/bin/python3 - "$root/../shared/data/digits.csv.gz" "$tmp" <<'PY' || bad "setup"
import copy, gzip, json, sys
import numpy as np
src, tmp = sys.argv[1], sys.argv[2]
a = np.array([list(map(float, l.split(","))) for l in gzip.open(src, "rt") if l.strip()])
np.save(tmp + "/x.npy", a[:, :64].astype(np.float32))
np.save(tmp + "/x3d.npy", a[:, :64].reshape(-1, 8, 8).astype(np.float32))
np.save(tmp + "/x1.npy", a[:, :32].astype(np.float32))
np.save(tmp + "/x2.npy", a[:, 32:64].astype(np.float32))
np.save(tmp + "/x2_short.npy", a[:-1, 32:64].astype(np.float32))
np.save(tmp + "/y.npy", a[:, 64].astype(np.int64))
np.save(tmp + "/y_float.npy", a[:, 64].astype(np.float64))
lines = gzip.open(src, "rt").read().splitlines()
open(tmp + "/cols64.csv", "w").write("\n".join(l.rsplit(",", 1)[0] for l in lines[:5]) + "\n")
open(tmp + "/cols40.csv", "w").write("\n".join(",".join(l.split(",")[:40]) for l in lines[:5]) + "\n")
frac = lines[:2] + [lines[2].rsplit(",", 1)[0] + ",1.5"] + lines[3:]
open(tmp + "/frac.csv", "w").write("\n".join(frac) + "\n")
# The autoencoder from .npy: one file, no target.
m = json.load(open("samples/digits_autoencoder.json"))
m["training"]["data"] = {"kind": "npy", "files": {"x": tmp + "/x.npy"}, "train_fraction": 0.8,
                         "scale": 0.0625}
json.dump(m, open(tmp + "/ae_npy.json", "w"))
# Two data inputs: x1 (columns 0..31) and x2 (32..63) through their own linears, added; the label.
two = {
    "format": "pipec-model", "version": 1, "name": "two_inputs",
    "dims": {"HALF": 32, "H": 64, "K": 10},
    "inputs": [{"name": "x1", "dtype": "f32", "shape": ["B", "HALF"]},
               {"name": "x2", "dtype": "f32", "shape": ["B", "HALF"]},
               {"name": "y", "dtype": "i32", "shape": ["B"], "target": True}],
    "params": [{"name": n, "shape": s, "init": {"kind": "uniform", "a": -0.15, "b": 0.15}}
               for n, s in [("a.weight", ["H", "HALF"]), ("b.weight", ["H", "HALF"]), ("b.bias", ["H"]),
                            ("out.weight", ["K", "H"]), ("out.bias", ["K"])]],
    "nodes": [{"name": "a", "op": "linear", "inputs": ["x1", "a.weight"]},
              {"name": "b", "op": "linear", "inputs": ["x2", "b.weight", "b.bias"]},
              {"name": "s", "op": "add", "inputs": ["a", "b"]},
              {"name": "h", "op": "relu", "inputs": ["s"]},
              {"name": "logits", "op": "linear", "inputs": ["h", "out.weight", "out.bias"]},
              {"name": "loss", "op": "cross_entropy", "inputs": ["logits", "y"]}],
    "training": {"batch": 32, "steps": 40, "eval_batches": 0, "log_every": 10,
                 "data": {"kind": "csv", "path": src, "train_fraction": 0.8, "scale": 0.0625,
                          "input": ["x1", "x2"], "target": "y"}},
    "loss": "loss", "outputs": ["logits"]}
json.dump(two, open(tmp + "/two.json", "w"))
t = copy.deepcopy(two)
t["training"]["data"] = {"kind": "npy", "train_fraction": 0.8, "scale": 0.0625,
                         "files": {"x1": tmp + "/x1.npy", "x2": tmp + "/x2.npy", "y": tmp + "/y.npy"}}
json.dump(t, open(tmp + "/two_npy.json", "w"))
PY
for m in samples/digits_autoencoder.json samples/digits_halves.json "$tmp/ae_npy.json" "$tmp/two.json" "$tmp/two_npy.json"; do
  name=$(basename "$m" .json)
  "$pipec" compile "$m" -o "$tmp/$name" >/dev/null 2>"$tmp/err" || bad "compile $name: $(tail -2 "$tmp/err")"
done
"$pipec" compile samples/digits_autoencoder.json --stages 2 --microbatches 2 -o "$tmp/ae2" >/dev/null 2>"$tmp/err" ||
  bad "compile autoencoder S=2: $(tail -2 "$tmp/err")"
"$pipec" compile samples/digits_autoencoder.json --microbatches 2 -o "$tmp/ae1m2" >/dev/null 2>"$tmp/err" ||
  bad "compile autoencoder M=2: $(tail -2 "$tmp/err")"
run=(--steps 30 --log-every 10 --eval-every 15 --eval-batches 0 --threads 1)

# 1. The autoencoder: the last stage loads x for its loss; S = 2 is S = 1's bits.
"$tmp/ae1m2/bin/train" "${run[@]}" --loss-log "$tmp/ae1.loss" >"$tmp/ae1.out" 2>&1 || bad "autoencoder S=1: $(tail -2 "$tmp/ae1.out")"
"$tmp/ae2/launch.sh" "${run[@]}" --loss-log "$tmp/ae2.loss" >"$tmp/ae2.out" 2>&1 || bad "autoencoder S=2: $(tail -2 "$tmp/ae2.out")"
check "autoencoder: 30 losses at S=1" test "$(wc -l <"$tmp/ae1.loss")" -eq 30
check "autoencoder: S=2 losses bitwise S=1's" cmp -s "$tmp/ae1.loss" "$tmp/ae2.loss"
check "autoencoder: S=2 evaluation lines = S=1's" \
  cmp -s <(grep '^eval' "$tmp/ae1.out") <(grep 'eval  step' "$tmp/ae2.out" | sed 's/^.rank [0-9]*. //')
check "autoencoder: the evaluation reports the loss, no accuracy ($(grep -m1 '^eval' "$tmp/ae1.out"))" \
  grep -qx 'eval  step 15 | val loss [0-9.]*' "$tmp/ae1.out"
check "autoencoder: the loss falls" awk 'NR == 1 { a = $2 } END { exit !($2 < a) }' "$tmp/ae1.loss"
"$tmp/digits_autoencoder/bin/train" --steps 30 --quiet --loss-log "$tmp/ae_csv.loss" >/dev/null 2>&1 || bad "autoencoder CSV"
"$tmp/ae_npy/bin/train" --steps 30 --quiet --loss-log "$tmp/ae_npy.loss" >/dev/null 2>&1 || bad "autoencoder npy"
check "autoencoder: .npy (one file, no target) trains as the CSV's columns 0..63" cmp -s "$tmp/ae_csv.loss" "$tmp/ae_npy.loss"
# --predict over a table: the reconstructions, one row of 64 per data row.
"$tmp/digits_autoencoder/bin/train" --steps 30 --quiet --save "$tmp/ae.st" >/dev/null 2>&1 || bad "autoencoder save"
"$tmp/digits_autoencoder/bin/train" --predict "$root/../shared/data/digits.csv.gz" --out "$tmp/recon.npy" --init "$tmp/ae.st" --quiet >/dev/null 2>&1 ||
  bad "autoencoder --predict"
check "autoencoder --predict: (1797, 64) reconstructions in [0, 1]" /usr/bin/python3 -c "
import numpy as np, sys; r = np.load('$tmp/recon.npy'); sys.exit(not (r.shape == (1797, 64) and r.min() >= 0 and r.max() <= 1))"

# 2. Regression with an f32 target: the loss only.
"$tmp/digits_halves/bin/train" "${run[@]}" --loss-log "$tmp/halves.loss" >"$tmp/halves.out" 2>&1 || bad "regression: $(tail -2 "$tmp/halves.out")"
check "regression: the evaluation reports the loss, no accuracy ($(grep -m1 '^eval' "$tmp/halves.out"))" \
  grep -qx 'eval  step 30 | val loss [0-9.]*' "$tmp/halves.out"
check "regression: the loss falls" awk 'NR == 1 { a = $2 } END { exit !($2 < a) }' "$tmp/halves.loss"

# 3. Two data inputs, from CSV and from three .npy files; --data-file replaces a file.
"$tmp/two/bin/train" --quiet --loss-log "$tmp/two.loss" >"$tmp/two.out" 2>&1 || bad "two inputs CSV: $(tail -2 "$tmp/two.out")"
"$tmp/two_npy/bin/train" --quiet --loss-log "$tmp/two_npy.loss" >/dev/null 2>&1 || bad "two inputs npy"
check "two inputs: .npy trains as CSV" cmp -s "$tmp/two.loss" "$tmp/two_npy.loss"
check "two inputs: a classification's accuracy ($(grep '^eval' "$tmp/two.out"))" \
  grep -qx 'eval  step 40 | val loss [0-9.]* | val accuracy [0-9.]*% ([0-9]*/360)' "$tmp/two.out"
"$tmp/two_npy/bin/train" --quiet --data "$tmp/x2.npy" --data-file "x2=$tmp/x1.npy" --data-file "y=$tmp/y.npy" \
  --loss-log "$tmp/swap.loss" >/dev/null 2>&1 || bad "two inputs npy, files swapped"
check "two inputs: --data and --data-file replace the files (swapped: other losses)" bash -c "! cmp -s '$tmp/two.loss' '$tmp/swap.loss'"
"$tmp/two_npy/bin/train" --help >"$tmp/help" 2>&1
check "--help lists --data-file with each input's file" grep -qF "[x1=$tmp/x1.npy, x2=$tmp/x2.npy, y=$tmp/y.npy]" "$tmp/help"
expect data-file-unknown 2 "^train: --data-file: 'z' is not an input of this model's .npy data \(x1, x2, y\)$" \
  "$tmp/two_npy/bin/train" --data-file "z=$tmp/y.npy"
expect data-file-others 2 "^train: --data: give --data-file x2=PATH too \(the model's file '$tmp/x2.npy' belongs to its own rows\)$" \
  "$tmp/two_npy/bin/train" --data "$tmp/x1.npy"
expect data-file-on-csv 2 "^train: --data-file: this model's data is not .npy files" \
  "$tmp/two/bin/train" --data-file "x1=$tmp/x1.npy"

# 4. Runtime data errors, before training, naming the file and the row or line.
expect npy-dtype 1 "rank 0: error: $tmp/y_float.npy: input 'y' is i32 but the file holds floating-point numbers$" \
  "$tmp/two_npy/bin/train" --steps 1 --data-file "y=$tmp/y_float.npy"
expect npy-shape 1 "rank 0: error: $tmp/x3d.npy: the array has shape \(1797, 8, 8\) but input 'x' takes \(1797, 64\)$" \
  "$tmp/ae_npy/bin/train" --steps 1 --data "$tmp/x3d.npy"
expect npy-rows 1 "rank 0: error: $tmp/x1.npy has 1797 rows but $tmp/x2_short.npy has 1796$" \
  "$tmp/two_npy/bin/train" --steps 1 --data-file "x2=$tmp/x2_short.npy"
expect csv-too-few 1 "rank 0: error: $tmp/cols64.csv:1: the row has 64 fields but the model reads 65 \(columns 0..31 into 'x1', 32..63 into 'x2', 64..64 into 'y'\)$" \
  "$tmp/two/bin/train" --steps 1 --data "$tmp/cols64.csv"
expect csv-column-range 1 "rank 0: error: $tmp/cols40.csv:1: the row has 40 fields but input 'bottom' reads columns 32..63 \(0-based\)$" \
  "$tmp/digits_halves/bin/train" --steps 1 --data "$tmp/cols40.csv"
expect csv-not-integer 1 "rank 0: error: $tmp/frac.csv:3:[0-9]+: value '1.5' of i32 input 'y' is not an integer$" \
  "$tmp/two/bin/train" --steps 1 --data "$tmp/frac.csv"
finish
