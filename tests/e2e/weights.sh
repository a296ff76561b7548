#!/usr/bin/env bash
# The model's "weights" key (docs/model-format.md; compiler/weights.c, the program's PrOptions
# .weights) and the compiler's safetensors writer (compiler/st_write.c): a copy of mlp_digits
# with "weights": "ck.safetensors" (relative to the model file) compiled and run gives byte for
# byte the losses of the original model run with --init ck.safetensors, from any working
# directory; --init and --resume override it; --predict needs no --init; a sharded directory works
# as --init's does; the depfile lists the file. pipec check refuses a missing file, a directory
# without an index, a tensor of another shape, dtype, a missing and an extra tensor, each in one
# line at the key; the program refuses a file gone since the compile. A file st_write wrote
# (st_copy: the compiler's reader and writer) holds the same tensors and loads as the original,
# tied parameters (gpt_char's head) written twice included.
pipec=$1
root=$2
st_copy=$3
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
st() { python3 "$root/tests/e2e/st_tool.py" "$@"; }
run=(--threads 1 --quiet --eval-every 0 --eval-batches 1)
w=$tmp/w
mkdir -p "$w"
wreal=$(cd "$w" && pwd -P) # as the program resolves its paths (symbolic links resolved)
# model FILE WEIGHTS: mlp_digits with "weights": WEIGHTS (a JSON value) and its data path absolute.
model() {
  sed "s#\"../../shared/data/#\"$root/../shared/data/#; s#\"name\": \"mlp_digits\",#&\n  \"weights\": $2,#" \
    samples/mlp_digits.json >"$1"
}
# err_is NAME RC WANT CMD...: exit status RC and the first stderr line exactly WANT.
err_is() {
  local name=$1 want_rc=$2 want=$3 rc got
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  got=$(head -n 1 "$tmp/err")
  if [ $rc -ne "$want_rc" ]; then
    bad "$name: exit $rc, want $want_rc ($got)"
  elif [ "$got" != "$want" ]; then
    bad "$name: stderr '$got', want '$want'"
  else
    ok
  fi
}
# same NAME A B: the loss logs A and B are the same bytes (and not empty).
same() { check "$1" test -s "$2" -a -s "$3" && check "$1 (cmp)" cmp "$2" "$3"; }
differ() { ! cmp -s "$1" "$2"; }

"$pipec" compile samples/mlp_digits.json -o "$tmp/mlp" >/dev/null 2>&1 || bad "compile mlp_digits"
mlp=$tmp/mlp/bin/train
"$mlp" "${run[@]}" --steps 3 --save "$w/ck.safetensors" >/dev/null 2>&1 || bad "train 3 steps"
"$mlp" "${run[@]}" --steps 6 --save "$w/ck6.safetensors" >/dev/null 2>&1 || bad "train 6 steps"
"$mlp" "${run[@]}" --steps 3 --save "$w/shd/" >/dev/null 2>&1 || bad "train 3 steps (sharded)"

# ---- The weights are the initial parameters, exactly as --init loads them.
model "$w/m.json" '"ck.safetensors"'
"$pipec" check "$w/m.json" >/dev/null 2>"$tmp/check.err" || bad "check: $(head -n 1 "$tmp/check.err")"
"$pipec" compile "$w/m.json" -o "$tmp/wm" --depfile "$tmp/wm.d" >/dev/null 2>"$tmp/c.err" ||
  bad "compile with weights: $(head -n 3 "$tmp/c.err")"
wm=$tmp/wm/bin/train
(cd / && "$wm" "${run[@]}" --steps 5 --loss-log "$tmp/a.loss" >/dev/null 2>&1) || bad "run with weights"
"$mlp" "${run[@]}" --steps 5 --init "$w/ck.safetensors" --loss-log "$tmp/b.loss" >/dev/null 2>&1
"$mlp" "${run[@]}" --steps 5 --loss-log "$tmp/seeded.loss" >/dev/null 2>&1
same "weights = --init (from /, the path relative to the program)" "$tmp/a.loss" "$tmp/b.loss"
check "weights differ from the seeded initialisation" test -s "$tmp/seeded.loss"
check "(the seeded run's losses are others)" differ "$tmp/a.loss" "$tmp/seeded.loss"
# shellcheck disable=SC2016 # $ORIGIN is the generated source's text
check "the source names the file relative to the program" \
  grep -q '\.weights = "$ORIGIN/../../w/ck.safetensors",' "$tmp/wm/rank0.c"
check "--help shows the default" grep -q "\[the model's weights: $wreal/ck.safetensors\]" \
  <("$wm" --help)
check "the depfile lists the weights" grep -qx " $w/ck.safetensors" "$tmp/wm.d"
"$pipec" compile samples/mlp_digits.json -o "$tmp/mlp2" --depfile "$tmp/mlp.d" >/dev/null 2>&1
check "(a model without weights: only itself)" test "$(grep -c safetensors "$tmp/mlp.d")" -eq 0
cp "$w/ck.safetensors" "$w/w;x.st"
model "$w/ms.json" '"w;x.st"'
err_is "a weights path the depfile cannot hold" 1 \
  "$w/ms.json: error: --depfile: the weights path '$w/w;x.st' has ';', which make and ninja cannot both read back: rename it or leave out --depfile" \
  "$pipec" compile "$w/ms.json" --no-build -o "$tmp/ms" --depfile "$tmp/ms.d"
check "(and no depfile)" test ! -e "$tmp/ms.d"
# The JSON Schema knows the key (exit 77: no jsonschema module here).
python3 scripts/check_schema.py "$w/m.json" >"$tmp/schema.out" 2>&1
rc=$?
check "the schema accepts the key: $(tail -n 1 "$tmp/schema.out")" test $rc -eq 0 -o $rc -eq 77

# ---- --init and --resume override them; --predict needs no --init.
"$wm" "${run[@]}" --steps 5 --init "$w/ck6.safetensors" --loss-log "$tmp/c.loss" >/dev/null 2>&1
"$mlp" "${run[@]}" --steps 5 --init "$w/ck6.safetensors" --loss-log "$tmp/d.loss" >/dev/null 2>&1
same "--init overrides the weights" "$tmp/c.loss" "$tmp/d.loss"
check "(--init's run is another)" differ "$tmp/a.loss" "$tmp/c.loss"
"$wm" "${run[@]}" --steps 8 --resume "$w/ck6.safetensors" --loss-log "$tmp/e.loss" >/dev/null 2>&1
"$mlp" "${run[@]}" --steps 8 --resume "$w/ck6.safetensors" --loss-log "$tmp/f.loss" >/dev/null 2>&1
same "--resume overrides the weights" "$tmp/e.loss" "$tmp/f.loss"
zcat "$root/../shared/data/digits.csv.gz" | sed -n '101,140p' >"$tmp/rows.csv"
"$wm" --threads 1 --quiet --predict "$tmp/rows.csv" --out "$tmp/p1.npy" >/dev/null 2>&1 ||
  bad "--predict with the weights"
"$mlp" --threads 1 --quiet --predict "$tmp/rows.csv" --out "$tmp/p2.npy" --init "$w/ck.safetensors" \
  >/dev/null 2>&1 || bad "--predict --init"
check "--predict: the weights' outputs are --init's" cmp -s "$tmp/p1.npy" "$tmp/p2.npy"
err_is "--predict without weights still needs --init" 2 \
  "train: --predict: give the trained parameters with --init F (or --resume F)" \
  "$mlp" --predict "$tmp/rows.csv" --out "$tmp/p3.npy"

# ---- A sharded directory, as --init DIR.
model "$w/md.json" '"shd"'
"$pipec" compile "$w/md.json" -o "$tmp/wd" >/dev/null 2>"$tmp/c.err" ||
  bad "compile with a sharded directory: $(head -n 3 "$tmp/c.err")"
"$tmp/wd/bin/train" "${run[@]}" --steps 5 --loss-log "$tmp/g.loss" >/dev/null 2>&1
"$mlp" "${run[@]}" --steps 5 --init "$w/shd" --loss-log "$tmp/h.loss" >/dev/null 2>&1
same "weights = a sharded directory, as --init DIR" "$tmp/g.loss" "$tmp/h.loss"
same "(the same parameters as the one file)" "$tmp/g.loss" "$tmp/a.loss"

# ---- A pipeline: every rank loads the weights' tensors it holds.
. "$root/tests/e2e/mpi_env.sh"
"$pipec" compile "$w/m.json" --stages 2 -o "$tmp/w2" >/dev/null 2>"$tmp/c.err" ||
  bad "compile with weights at S = 2: $(head -n 3 "$tmp/c.err")"
timeout -k 5 120 "$tmp/w2/launch.sh" "${run[@]}" --steps 5 --loss-log "$tmp/s2.loss" >"$tmp/s2.out" 2>&1 ||
  bad "run at S = 2: $(tail -n 2 "$tmp/s2.out" | tr '\n' ' ')"
same "S = 2: weights = --init at S = 1" "$tmp/s2.loss" "$tmp/b.loss"

# ---- Refused at compile time, one line at the key (line 5, column 3 of every copy).
at="$w/m.json:5:3: error: weights:"
# refuse NAME WEIGHTS-VALUE WANT: pipec check of the model with that value fails with WANT.
refuse() {
  model "$w/m.json" "$2"
  err_is "check: $1" 1 "$at $3" "$pipec" check "$w/m.json"
}
refuse "a missing file" '"nope.safetensors"' \
  "cannot open '$w/nope.safetensors': No such file or directory"
refuse "a directory without an index" '"."' \
  "'$w/.' is a directory without model.safetensors.index.json (a sharded checkpoint's index)"
refuse "a device" '"/dev/null"' "'/dev/null' is a character device, not a regular file"
mkfifo "$w/fifo"
refuse "a FIFO (no hang)" '"fifo"' "'$w/fifo' is a FIFO, not a regular file"
refuse "the optimizer's file" '"ck.safetensors.optim"' \
  "$w/ck.safetensors.optim: tensor 'fc1.weight' is missing"
# edit FILE PYTHON: the header h of a copy of ck.safetensors edited by PYTHON (d: the data).
edit() {
  python3 - "$root/tests/e2e" "$w/ck.safetensors" "$w/$1" "$2" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import st_tool
h, d = st_tool.read(sys.argv[2])
exec(sys.argv[4])
st_tool.write(sys.argv[3], h, d)
PY
}
edit shape.st 'h["fc1.weight"]["shape"] = [64, 128]'
refuse "a tensor of another shape" '"shape.st"' \
  "$w/shape.st: tensor 'fc1.weight' has shape [64, 128]; the model expects [128, 64]"
expect "(the program's --init says the same)" 1 \
  "error: $w/shape.st: tensor 'fc1.weight' has shape \\[64, 128\\]; the model expects \\[128, 64\\]$" \
  "$mlp" --steps 1 --quiet --init "$w/shape.st"
edit dtype.st 'h["fc1.bias"]["dtype"] = "I32"'
refuse "a tensor of another dtype" '"dtype.st"' \
  "$w/dtype.st: tensor 'fc1.bias' has dtype I32; expected F32 (or BF16/F16)"
cp "$w/ck.safetensors" "$w/drop.st"
st drop "$w/drop.st" fc2.bias
refuse "a missing tensor" '"drop.st"' "$w/drop.st: tensor 'fc2.bias' is missing"
edit extra.st 'h["extra"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(d), len(d) + 4]}; d += bytes(4)'
refuse "an extra tensor" '"extra.st"' "$w/extra.st: tensor 'extra' is in the file but not in the model"
# index DIR PYTHON: a copy of the sharded directory shd as DIR, its index's j edited by PYTHON.
index() {
  cp -r "$w/shd" "$w/$1"
  python3 - "$w/$1/model.safetensors.index.json" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(j, open(sys.argv[1], "w"))
PY
}
index shd_extra 'j["weight_map"]["extra"] = "model-00001-of-00001.safetensors"'
refuse "a sharded directory with an extra tensor" '"shd_extra"' \
  "$w/shd_extra: tensor 'extra' is in the file but not in the model"
index shd_drop 'del j["weight_map"]["fc2.bias"]'
refuse "a sharded directory without a tensor" '"shd_drop"' "$w/shd_drop: tensor 'fc2.bias' is missing"
index shd_gone 'j["weight_map"]["fc2.bias"] = "gone.safetensors"'
refuse "a sharded directory without a shard" '"shd_gone"' \
  "$w/shd_gone/gone.safetensors: No such file or directory"
head -c 100 "$w/ck.safetensors" >"$w/cut.st"
n=$(python3 -c 'import struct, sys; print(struct.unpack("<Q", open(sys.argv[1], "rb").read(8))[0])' "$w/cut.st")
refuse "a file cut short (its header checked as the program checks it)" '"cut.st"' \
  "$w/cut.st: the header length $n (bytes 0..7) is larger than the rest of the file (92 bytes)"

# ---- The program refuses a file gone since the compile (the runtime's --init message).
cp "$w/ck.safetensors" "$w/gone.st"
model "$w/mg.json" '"gone.st"'
"$pipec" compile "$w/mg.json" -o "$tmp/wg" >/dev/null 2>&1 || bad "compile gone.st"
rm "$w/gone.st"
expect "a weights file gone since the compile" 1 "error: cannot open '$wreal/gone.st': No such file" \
  "$tmp/wg/bin/train" --steps 1 --quiet

# ---- st_write: its copy of a checkpoint holds the same tensors and loads as the original.
"$st_copy" "$w/ck.safetensors" "$w/copy.st" || bad "st_copy"
check "st_write's copy holds the same tensors" st same-tensors "$w/ck.safetensors" "$w/copy.st"
check "(and no metadata)" test -z "$(st meta "$w/copy.st" save_id)"
"$mlp" "${run[@]}" --steps 5 --init "$w/copy.st" --loss-log "$tmp/i.loss" >/dev/null 2>&1
same "--init of st_write's file = --init of the original" "$tmp/i.loss" "$tmp/b.loss"
model "$w/mc.json" '"copy.st"'
"$pipec" compile "$w/mc.json" -o "$tmp/wc" >/dev/null 2>&1 || bad "compile with st_write's file"
"$tmp/wc/bin/train" "${run[@]}" --steps 5 --loss-log "$tmp/j.loss" >/dev/null 2>&1
same "weights = st_write's file" "$tmp/j.loss" "$tmp/a.loss"
# Tied parameters (gpt_char's lm_head.weight is transformer.wte.weight): both names, two copies.
"$pipec" compile samples/gpt_char.json -o "$tmp/gpt" >/dev/null 2>&1 || bad "compile gpt_char"
"$tmp/gpt/bin/train" "${run[@]}" --steps 2 --save "$w/g.st" >/dev/null 2>&1 || bad "train gpt_char"
"$st_copy" "$w/g.st" "$w/gcopy.st" || bad "st_copy gpt_char"
check "gpt_char: the same tensors, the tied pair included" st same-tensors "$w/g.st" "$w/gcopy.st"
"$tmp/gpt/bin/train" "${run[@]}" --steps 4 --init "$w/g.st" --loss-log "$tmp/k.loss" >/dev/null 2>&1
"$tmp/gpt/bin/train" "${run[@]}" --steps 4 --init "$w/gcopy.st" --loss-log "$tmp/l.loss" >/dev/null 2>&1
same "gpt_char: --init of st_write's file = --init of the original" "$tmp/k.loss" "$tmp/l.loss"
finish
