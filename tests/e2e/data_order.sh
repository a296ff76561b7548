#!/usr/bin/env bash
# Table data in file order (training.data.shuffle false): no seeded shuffle, the training split is
# the file's first floor(rows * train_fraction) rows and step k's microbatch m reads training rows
# (k*batch + m*B + i) % n_train, i < B. The model, two bias-free linears from zero parameters,
# predicts 0 and its gradients are exactly 0, so every step's mse loss is mean(y^2) over exactly
# the rows the step read: the loss log is checked against numpy's for those rows, at M = 1, at
# M = 2, at two stages (bit for bit M = 2's at one), on two replicas and from CSV as from .npy;
# train_fraction 1 trains on every row and skips the evaluation (no validation split); with 0.8
# the evaluation is the last 20% of the file; the default (shuffle true) draws other rows; --set
# data.shuffle=false is the key, and the training dump shows it.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  echo "skip: needs numpy in /usr/bin/python3"
  exit 77
fi
/usr/bin/python3 - "$tmp" <<'PY' || bad "setup"
import copy, json, sys
import numpy as np
tmp = sys.argv[1]
rng = np.random.default_rng(7)
N = 10
x = rng.standard_normal((N, 3)).astype(np.float32)
y = rng.permutation(np.arange(1, N + 1)).astype(np.float32).reshape(N, 1)  # distinct per row
np.save(tmp + "/x.npy", x)
np.save(tmp + "/y.npy", y)
with open(tmp + "/xy.csv", "w") as f:
    for r in range(N):
        f.write(",".join("%.9g" % v for v in list(x[r]) + [y[r, 0]]) + "\n")
m = {
    "format": "pipec-model", "version": 1, "name": "order",
    "dims": {"F": 3, "H": 4},
    "inputs": [{"name": "x", "dtype": "f32", "shape": ["B", "F"]},
               {"name": "y", "dtype": "f32", "shape": ["B", 1], "target": True}],
    "params": [{"name": "w1", "shape": ["H", "F"], "init": "zeros"},
               {"name": "w2", "shape": [1, "H"], "init": "zeros"}],
    "nodes": [{"name": "h", "op": "linear", "inputs": ["x", "w1"]},
              {"name": "pred", "op": "linear", "inputs": ["h", "w2"]},
              {"name": "loss", "op": "mse_loss", "inputs": ["pred", "y"]}],
    "training": {"batch": 4, "steps": 7, "log_every": 1, "eval_batches": 0,
                 "optimizer": {"kind": "sgd", "lr": 0.1},
                 "data": {"kind": "npy", "files": {"x": tmp + "/x.npy", "y": tmp + "/y.npy"},
                          "train_fraction": 1, "shuffle": False}},
    "loss": "loss", "outputs": ["pred"]}
json.dump(m, open(tmp + "/seq.json", "w"))
c = copy.deepcopy(m)
c["training"]["data"] = {"kind": "csv", "path": tmp + "/xy.csv", "train_fraction": 1,
                         "shuffle": False}
json.dump(c, open(tmp + "/seq_csv.json", "w"))
v = copy.deepcopy(m)
v["training"]["data"]["train_fraction"] = 0.8
json.dump(v, open(tmp + "/seq80.json", "w"))
d = copy.deepcopy(v)
del d["training"]["data"]["shuffle"]
json.dump(d, open(tmp + "/shuf80.json", "w"))
a = copy.deepcopy(m)
del a["training"]["data"]["shuffle"]
json.dump(a, open(tmp + "/shuf100.json", "w"))
PY
# expected STEPS NTRAIN: numpy's loss of each step, mean(y[rows]^2) over the step's rows.
expected() {
  /usr/bin/python3 -c "
import numpy as np, sys
y = np.load('$tmp/y.npy')[:, 0].astype(np.float64)
steps, n, batch = $1, $2, 4
for k in range(steps):
    rows = [(k * batch + i) % n for i in range(batch)]
    print(k, repr(float(np.mean(y[rows] ** 2))))"
}
# same_losses LOG STEPS NTRAIN: the log's losses are numpy's (to float32 precision).
same_losses() {
  /usr/bin/python3 - "$1" <(expected "$2" "$3") <<'PY'
import sys
got = [l.split() for l in open(sys.argv[1])]
want = [l.split() for l in open(sys.argv[2])]
ok = len(got) == len(want) and all(
    g[0] == w[0] and abs(float(g[1]) - float(w[1])) <= 1e-6 * float(w[1]) for g, w in zip(got, want))
if not ok:
    print("got ", [g[1] for g in got], "\nwant", [w[1] for w in want])
sys.exit(not ok)
PY
}
compile() { # NAME MODEL FLAGS...
  local name=$1 model=$2
  shift 2
  "$pipec" compile "$model" "$@" -o "$tmp/$name" >/dev/null 2>"$tmp/err" || bad "compile $name: $(tail -2 "$tmp/err")"
}
compile m1 "$tmp/seq.json"
compile m2 "$tmp/seq.json" --microbatches 2
compile s2 "$tmp/seq.json" --microbatches 2 --stages 2
compile r2 "$tmp/seq.json" --microbatches 2 --replicas 2
compile csv "$tmp/seq_csv.json"
compile v80 "$tmp/seq80.json"
compile shuf80 "$tmp/shuf80.json"
compile shuf100 "$tmp/shuf100.json"
run=(--threads 1 --eval-every 2)

# 1. Every row trains (train_fraction 1): step k reads rows 4k .. 4k+3 mod 10, at M = 1 and 2.
"$tmp/m1/bin/train" "${run[@]}" --loss-log "$tmp/m1.loss" >"$tmp/m1.out" 2>&1 || bad "M=1: $(tail -2 "$tmp/m1.out")"
check "M=1: step k's loss is mean(y^2) of rows 4k..4k+3 (mod 10)" same_losses "$tmp/m1.loss" 7 10
check "train_fraction 1: no evaluation ($(grep -m1 '^eval' "$tmp/m1.out"))" \
  bash -c "grep -q '^step 7/7 ' '$tmp/m1.out' && ! grep -q '^eval' '$tmp/m1.out'"
"$tmp/m2/bin/train" "${run[@]}" --loss-log "$tmp/m2.loss" >"$tmp/m2.out" 2>&1 || bad "M=2: $(tail -2 "$tmp/m2.out")"
check "M=2: the same rows per step" same_losses "$tmp/m2.loss" 7 10
# 2. Two stages: each loads its inputs of the same rows; M = 2's bits.
"$tmp/s2/launch.sh" "${run[@]}" --loss-log "$tmp/s2.loss" >"$tmp/s2.out" 2>&1 || bad "S=2: $(tail -2 "$tmp/s2.out")"
check "S=2: losses bitwise S=1's" cmp -s "$tmp/m2.loss" "$tmp/s2.loss"
check "S=2: the same rows per step" same_losses "$tmp/s2.loss" 7 10
# Two replicas (one microbatch each): replica d's microbatch is the step's global microbatch d.
"$tmp/r2/launch.sh" "${run[@]}" --loss-log "$tmp/r2.loss" >"$tmp/r2.out" 2>&1 || bad "D=2: $(tail -2 "$tmp/r2.out")"
check "--replicas 2: the same rows per step" same_losses "$tmp/r2.loss" 7 10
# 3. CSV: the same rows in the same order.
"$tmp/csv/bin/train" "${run[@]}" --loss-log "$tmp/csv.loss" >"$tmp/csv.out" 2>&1 || bad "CSV: $(tail -2 "$tmp/csv.out")"
check "CSV: the same rows per step" same_losses "$tmp/csv.loss" 7 10
# 4. train_fraction 0.8: training rows 0..7 of the file, validation rows 8 and 9.
"$tmp/v80/bin/train" "${run[@]}" --steps 4 --loss-log "$tmp/v80.loss" >"$tmp/v80.out" 2>&1 || bad "0.8: $(tail -2 "$tmp/v80.out")"
check "0.8: step k reads rows 4k..4k+3 (mod 8)" same_losses "$tmp/v80.loss" 4 8
val=$(/usr/bin/python3 -c "import numpy as np; y = np.load('$tmp/y.npy')[8:, 0]; print('%.4f' % np.mean(y.astype(np.float64) ** 2))")
check "0.8: the evaluation is the file's rows 8, 9 (val loss $val: $(grep -m1 '^eval' "$tmp/v80.out"))" \
  grep -qx "eval  step 2 | val loss $val" "$tmp/v80.out"
# 5. The default shuffles and draws: other rows (and train_fraction 1 runs without evaluation).
"$tmp/shuf80/bin/train" "${run[@]}" --steps 4 --loss-log "$tmp/shuf80.loss" >/dev/null 2>&1 || bad "shuffled 0.8"
check "shuffle true: other rows than file order" \
  bash -c "[ \$(wc -l <'$tmp/shuf80.loss') -eq 4 ] && ! cmp -s '$tmp/v80.loss' '$tmp/shuf80.loss'"
# --set data.shuffle=false is the key in the file; the training dump shows it.
compile set80 "$tmp/shuf80.json" --set data.shuffle=false
"$tmp/set80/bin/train" "${run[@]}" --steps 4 --loss-log "$tmp/set80.loss" >/dev/null 2>&1 || bad "--set data.shuffle=false"
check "--set data.shuffle=false: file order" cmp -s "$tmp/v80.loss" "$tmp/set80.loss"
check "--dump-after=training: data.shuffle false" \
  bash -c "'$pipec' print --dump-after=training '$tmp/seq80.json' | grep -qx '  data.shuffle             false'"
check "--dump-after=training: data.shuffle true by default" \
  bash -c "'$pipec' print --dump-after=training '$tmp/shuf80.json' | grep -qx '  data.shuffle             true'"
"$tmp/shuf100/bin/train" "${run[@]}" --loss-log "$tmp/shuf100.loss" >"$tmp/shuf100.out" 2>&1 ||
  bad "shuffled, train_fraction 1: $(tail -2 "$tmp/shuf100.out")"
check "shuffled, train_fraction 1: 7 steps, no evaluation" \
  bash -c "[ \$(wc -l <'$tmp/shuf100.loss') -eq 7 ] && ! grep -q '^eval' '$tmp/shuf100.out'"
finish
