#!/usr/bin/env bash
# mlp_digits trains to >= 95% validation accuracy on the digits data (80/20 split), and the run
# is bitwise the same with 1 and 2 threads.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
"$pipec" compile samples/mlp_digits.json -o "$tmp/mlp" 2>"$tmp/err" || { cat "$tmp/err"; bad compile; finish; exit 1; }
"$tmp/mlp/bin/train" --threads 1 --loss-log "$tmp/l1" >"$tmp/out1" 2>&1 || bad "run (threads 1): $(tail -3 "$tmp/out1")"
acc=$(grep '^eval' "$tmp/out1" | tail -1 | sed -n 's/.*val accuracy \([0-9.]*\)%.*/\1/p')
echo "final validation accuracy: ${acc:-none}%"
check "val accuracy ${acc:-none}% >= 95%" awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 95) }'
"$tmp/mlp/bin/train" --threads 2 --quiet --loss-log "$tmp/l2" >/dev/null 2>&1 || bad "run (threads 2)"
check "losses identical with 1 and 2 threads" cmp -s "$tmp/l1" "$tmp/l2"
check "1500 steps logged" test "$(wc -l <"$tmp/l1")" -eq 1500
# The same table as .npy files (features float32, labels int64) trains bit for bit the same.
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  /usr/bin/python3 - "$root/../shared/data/digits.csv.gz" "$tmp" <<'PY'
import gzip, json, sys
import numpy as np
rows = [list(map(float, l.split(","))) for l in gzip.open(sys.argv[1], "rt") if l.strip()]
a = np.array(rows)
np.save(sys.argv[2] + "/x.npy", a[:, :-1].astype(np.float32))
np.save(sys.argv[2] + "/y.npy", a[:, -1].astype(np.int64))
m = json.load(open("samples/mlp_digits.json"))
m["training"]["data"] = {"kind": "npy", "path": sys.argv[2] + "/x.npy", "labels": sys.argv[2] + "/y.npy",
                         "train_fraction": 0.8, "scale": 0.0625}
json.dump(m, open(sys.argv[2] + "/npy.json", "w"))
PY
  "$pipec" compile "$tmp/npy.json" -o "$tmp/npy" 2>/dev/null || bad "compile npy"
  "$tmp/npy/bin/train" --quiet --steps 300 --loss-log "$tmp/l3" >/dev/null 2>&1 || bad "run npy"
  check "npy data trains like the CSV" cmp -s "$tmp/l3" <(head -300 "$tmp/l1")
else
  echo "skip: .npy check needs numpy in /usr/bin/python3"
fi
finish
