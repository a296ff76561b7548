#!/usr/bin/env bash
# Inference (--predict DATA --out FILE.npy, docs/training.md "Inference"): the model's first
# output over all of DATA, in data order. gpt_char (flat, 2 layers) after 3 training steps: the
# logits of every window of a text, shape (windows, T, V), byte for byte the same at S = 1, 2
# (zb-h1) and 4 (interleaved), from the one-file checkpoint and from a sharded one; their
# cross-entropy against the text's next characters (ids in the checkpoint's vocabulary) equals
# the mean loss the program reports. mlp_digits: the logits of a CSV's rows in file order (no
# shuffle), equal at S = 1 and 3, with the same loss check against the labels. Bad uses are
# refused with their message; a failed run leaves no --out file.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
. "$root/tests/e2e/mpi_env.sh"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
file=$tmp/gpt_char_l2.json
gpt_char_l2 "$file"
build() {
  local name=$1 model=$2
  shift 2
  "$pipec" compile "$model" --batch 24 --microbatches 4 "$@" -o "$tmp/$name" >/dev/null 2>"$tmp/err" ||
    bad "compile $name: $(head -3 "$tmp/err")"
}
build g1 "$file"
build g2 "$file" --stages 2 --schedule zb-h1
build g4 "$file" --stages 4 --schedule interleaved --virtual 2
build m1 samples/mlp_digits.json
build m3 samples/mlp_digits.json --stages 3
run=(--threads 1 --eval-every 0 --eval-batches 1)
"$tmp/g1/bin/train" "${run[@]}" --quiet --steps 3 --save "$tmp/g.st" >/dev/null 2>&1 || bad "train gpt_char"
"$tmp/g4/launch.sh" "${run[@]}" --quiet --steps 3 --save "$tmp/gdir/" >/dev/null 2>&1 || bad "train gpt_char at S = 4 (sharded)"
"$tmp/m1/bin/train" "${run[@]}" --quiet --steps 300 --save "$tmp/m.st" >/dev/null 2>&1 || bad "train mlp_digits"
head -c 5000 "$root/../shared/data/tinyshakespeare.txt" | tail -c 4000 >"$tmp/text.txt"
zcat "$root/../shared/data/digits.csv.gz" | sed -n '101,157p' >"$tmp/rows.csv" # 57 rows: a partial last batch

p() { # NAME PROGRAM ARGS...: a --predict run, its output in $tmp/NAME.out
  local name=$1
  shift
  timeout -k 5 120 "$@" --threads 1 >"$tmp/$name.out" 2>&1 || bad "$name: $(grep -v '^-*$' "$tmp/$name.out" | tail -2 | tr '\n' ' ')"
}
p g1 "$tmp/g1/bin/train" --predict "$tmp/text.txt" --out "$tmp/g1.npy" --init "$tmp/g.st"
p g2 "$tmp/g2/launch.sh" --quiet --predict "$tmp/text.txt" --out "$tmp/g2.npy" --init "$tmp/g.st"
p g4 "$tmp/g4/launch.sh" --quiet --predict "$tmp/text.txt" --out "$tmp/g4.npy" --init "$tmp/g.st"
p g1d "$tmp/g1/bin/train" --quiet --predict "$tmp/text.txt" --out "$tmp/g1d.npy" --init "$tmp/gdir"
check "gpt_char: S = 2 (zb-h1) predicts S = 1's logits byte for byte" cmp -s "$tmp/g2.npy" "$tmp/g1.npy"
check "gpt_char: S = 4 (interleaved) predicts S = 1's logits byte for byte" cmp -s "$tmp/g4.npy" "$tmp/g1.npy"
check "gpt_char: from the S = 4 sharded checkpoint (same parameters) the same logits" cmp -s "$tmp/g1d.npy" "$tmp/g1.npy"
p m1 "$tmp/m1/bin/train" --predict "$tmp/rows.csv" --out "$tmp/m1.npy" --init "$tmp/m.st"
p m3 "$tmp/m3/launch.sh" --quiet --predict "$tmp/rows.csv" --out "$tmp/m3.npy" --init "$tmp/m.st"
check "mlp_digits: S = 3 predicts S = 1's logits byte for byte" cmp -s "$tmp/m3.npy" "$tmp/m1.npy"

"$py" - "$tmp" <<'PY' >"$tmp/check.out" 2>&1
import json, re, struct, sys
import numpy as np
tmp = sys.argv[1]
errors = []
def reported(name):
    m = re.search(r"predicted logits of (\d+) samples \((\d+) rows\) of .* into .*; their mean loss ([0-9.]+)", open(f"{tmp}/{name}.out").read())
    return (int(m.group(1)), int(m.group(2)), float(m.group(3))) if m else None
def ce(logits, y):
    z = logits - logits.max(axis=-1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return float(-np.take_along_axis(lp, y[..., None], axis=-1).mean())
# gpt_char: windows of T = 16 from token 0, ids in the checkpoint's vocabulary.
with open(f"{tmp}/g.st", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    vocab = bytes.fromhex(json.loads(f.read(n))["__metadata__"]["vocab"])
text = open(f"{tmp}/text.txt", "rb").read()
ids = np.array([vocab.index(c) for c in text])
T, W = 16, (len(text) - 1) // 16
a = np.load(f"{tmp}/g1.npy")
if a.shape != (W, T, len(vocab)) or a.dtype != np.float32:
    errors.append(f"gpt_char: shape {a.shape} {a.dtype}, want {(W, T, len(vocab))} float32")
else:
    y = np.stack([ids[w * T + 1:w * T + T + 1] for w in range(W)])
    r = reported("g1")
    if r is None or r[:2] != (W, W) or abs(ce(a.astype(np.float64), y) - r[2]) > 6e-5:
        errors.append(f"gpt_char: reported {r}, cross-entropy of the logits {ce(a.astype(np.float64), y):.6f} over {W} windows")
# mlp_digits: rows in file order; features scaled by 0.0625 in the model (checked via the loss).
rows = np.loadtxt(f"{tmp}/rows.csv", delimiter=",")
b = np.load(f"{tmp}/m1.npy")
if b.shape != (len(rows), 10):
    errors.append(f"mlp_digits: shape {b.shape}, want {(len(rows), 10)}")
else:
    r = reported("m1")
    lab = rows[:, -1].astype(int)
    if r is None or r[:2] != (len(rows), len(rows)) or abs(ce(b.astype(np.float64), lab) - r[2]) > 6e-5:
        errors.append(f"mlp_digits: reported {r}, cross-entropy {ce(b.astype(np.float64), lab):.6f}")
    acc = float((b.argmax(axis=1) == lab).mean())
    if acc < 0.5:
        errors.append(f"mlp_digits: accuracy {acc:.2f} of the predicted rows (rows out of order?)")
if errors:
    print("\n".join(errors))
sys.exit(1 if errors else 0)
PY
rc=$?
check "the outputs are the logits: $(head -3 "$tmp/check.out" | tr '\n' ';')" test $rc -eq 0

# Bad uses.
g=$tmp/g1/bin/train
expect "--predict without --out" 2 "--predict: give --out FILE.npy \(where the outputs go\)" "$g" --predict "$tmp/text.txt" --init "$tmp/g.st"
expect "--out without --predict" 2 "--out: only --predict DATA writes outputs" "$g" --out "$tmp/x.npy"
expect "--predict without parameters" 2 "--predict: give the trained parameters with --init F \(or --resume F\)" "$g" --predict "$tmp/text.txt" --out "$tmp/x.npy"
expect "--predict with --save" 2 "--predict trains nothing: drop --save" "$g" --predict "$tmp/text.txt" --out "$tmp/x.npy" --init "$tmp/g.st" --save "$tmp/y.st"
printf 'hello \001 world, this text is long enough for one window\n' >"$tmp/odd.txt"
expect "a character the checkpoint does not know" 1 "rank 0: error: $tmp/odd.txt: byte offset 6: byte 0x01 is not in the checkpoint's vocabulary \(65 characters\)$" \
  "$g" --quiet --predict "$tmp/odd.txt" --out "$tmp/odd.npy" --init "$tmp/g.st"
check "a failed --predict leaves no --out file (nor a temporary)" test -z "$(ls "$tmp" | grep '^odd\.npy')"
expect "text --predict from a checkpoint without a vocabulary" 1 "rank 0: error: --predict: $tmp/m.st records no character vocabulary: the text's character ids are unknown$" \
  "$g" --quiet --predict "$tmp/text.txt" --out "$tmp/v.npy" --init "$tmp/m.st"
finish
