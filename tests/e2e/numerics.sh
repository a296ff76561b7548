#!/usr/bin/env bash
# Numbers that must be right: a non-finite loss or gradient norm stops training at its step
# (exit 1, before the update, nothing saved); validation losses of tables are exact means over
# the validation rows for every loss that is a linear combination of per-row means.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
py=/usr/bin/python3
[ -x "$py" ] || py=python3

# expect NAME RC STDERR-REGEX CMD...: exit status, the first stderr line and a HINT line.
expect() {
  local name=$1 want=$2 re=$3
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? first
  first=$(head -n 1 "$tmp/err")
  if [ $rc -ne "$want" ]; then
    bad "$name: exit $rc, want $want ($first)"
  elif ! [[ "$first" =~ $re ]]; then
    bad "$name: stderr '$first' does not match '$re'"
  elif [ "$want" -eq 1 ] && ! grep -q '^HINT: .*--lr' "$tmp/err"; then
    bad "$name: no HINT line naming --lr"
  else
    ok
  fi
}

# Models and data made from the digits sample: a table whose file rows 1000 (a training row,
# first drawn in step 26 with seed 1337) and 712 (the first validation row) have every feature
# 4e39 (2.5e38 after the scale: finite floats), the digits MLP reading it, and a model whose
# features are gated by a zero-initialised parameter s (so its loss stays finite on the bad row
# while its gradient ds = dm * x overflows).
"$py" - "$root" "$tmp" <<'PY' || bad "generate models"
import gzip, json, sys
root, tmp = sys.argv[1], sys.argv[2]
rows = gzip.open(root + '/../shared/data/digits.csv.gz', 'rt').read().splitlines()
for k in (1000, 712):
    f = rows[k].split(',')
    rows[k] = ','.join(['4e39'] * (len(f) - 1) + [f[-1]])
open(tmp + '/bad.csv', 'w').write('\n'.join(rows) + '\n')
m = json.load(open(root + '/samples/mlp_digits.json'))
m['training']['data']['path'] = tmp + '/bad.csv'
json.dump(m, open(tmp + '/mlp_bad.json', 'w'))
m['name'] = 'gate'
m['params'] = [{'name': 's', 'shape': ['IN'], 'init': 'zeros'},
               {'name': 'fc.weight', 'shape': ['K', 'IN'], 'init': {'kind': 'normal', 'std': 1000}},
               {'name': 'fc.bias', 'shape': ['K'], 'init': 'zeros'}]
m['nodes'] = [{'name': 'm', 'op': 'mul', 'inputs': ['x', 's']},
              {'name': 'logits', 'op': 'linear', 'inputs': ['m', 'fc.weight', 'fc.bias']},
              {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['logits', 'y']}]
json.dump(m, open(tmp + '/gate.json', 'w'))
PY
"$pipec" compile samples/mlp_digits.json -o "$tmp/mlp" >/dev/null 2>&1 || bad "compile mlp"
"$pipec" compile "$tmp/mlp_bad.json" -o "$tmp/mlp_bad" >/dev/null 2>&1 || bad "compile mlp_bad"
"$pipec" compile "$tmp/gate.json" -o "$tmp/gate" >/dev/null 2>&1 || bad "compile gate"

# A learning rate of 1e308 makes the parameters infinite in step 1: step 2's loss is NaN.
expect lr-1e308 1 "^train\.c:[0-9]+: rank 0: error: step 2: the loss is NaN; stopped before the update$" \
  "$tmp/mlp/bin/train" --lr 1e308 --quiet --save "$tmp/diverged.safetensors"
check "lr 1e308: nothing saved" test ! -e "$tmp/diverged.safetensors"
# NaN produced mid-way: the loss of step 26 (the first batch holding the bad row), the gradient
# of s in the gated model; the 25 steps before it trained and logged finite losses.
expect nan-loss-midway 1 "^train\.c:[0-9]+: rank 0: error: step 26: the loss is NaN; stopped before the update$" \
  "$tmp/mlp_bad/bin/train" --quiet --loss-log "$tmp/loss1" --save "$tmp/midway.safetensors"
check "nan loss: 25 finite losses logged" test "$(grep -cE '^[0-9]+ [0-9.]+$' "$tmp/loss1")" = 25
check "nan loss: nothing saved" test ! -e "$tmp/midway.safetensors"
expect inf-grad-midway 1 "^train\.c:[0-9]+: rank 0: error: step 26: the gradient norm is inf \(first non-finite gradient: 's'\); stopped before the update$" \
  "$tmp/gate/bin/train" --quiet --lr 1e-30 --loss-log "$tmp/loss2"
check "inf gradient: 25 finite losses logged" test "$(grep -cE '^[0-9]+ [0-9.]+$' "$tmp/loss2")" = 25
# The same norm with clipping on: still stopped (clipping cannot repair an infinite norm).
"$py" -c "import json,sys; m=json.load(open(sys.argv[1])); m['training']['grad_clip']=1.0; json.dump(m,open(sys.argv[2],'w'))" \
  "$tmp/gate.json" "$tmp/gate_clip.json"
"$pipec" compile "$tmp/gate_clip.json" -o "$tmp/gate_clip" >/dev/null 2>&1 || bad "compile gate_clip"
expect inf-grad-clipped 1 "^train\.c:[0-9]+: rank 0: error: step 26: the gradient norm is inf \(first non-finite gradient: 's'\)" \
  "$tmp/gate_clip/bin/train" --quiet --lr 1e-30
# Evaluation: the bad validation row makes the validation loss of step 20 infinite or NaN.
expect nan-val-loss 1 "^train\.c:[0-9]+: rank 0: error: step 20: the validation loss is (NaN|inf)$" \
  "$tmp/mlp_bad/bin/train" --quiet --steps 20

finish
