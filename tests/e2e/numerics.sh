#!/usr/bin/env bash
# Numbers that must be right: a non-finite loss or gradient norm stops training at its step
# (exit 1, before the update, nothing saved); validation losses of tables are exact means over
# the validation rows for every loss that is a linear combination of per-row means.
pipec=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # absolute: some cases run in $tmp
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
py=/usr/bin/python3
[ -x "$py" ] || py=python3

hint_re="^HINT: .*(--lr|more memory)" # the HINTs of this file name the fix

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

# Exact validation loss for every loss (tables): mlp_digits has 360 validation rows, 6 batches of
# 64 whose last wraps around (40 real rows). A model whose loss is scale(ce, 1.0) trains bit for
# bit like mlp_digits and must print the same validation loss; one whose loss is ce + mse (an
# auxiliary head regressed onto the logits) must print the mean over the 360 rows computed by an
# independent reference from its saved parameters (float64, the validation rows found by
# replaying the table shuffle of runtime/data.c).
"$py" - "$root" "$tmp" <<'PY' || bad "generate loss models"
import json, os, sys
root, tmp = sys.argv[1], sys.argv[2]
m = json.load(open(root + '/samples/mlp_digits.json'))
m['training']['data']['path'] = os.path.abspath(root + '/../shared/data/digits.csv.gz')
s = json.loads(json.dumps(m))
s['name'] = 'scaled'
s['nodes'][-1]['name'] = 'ce'
s['nodes'].append({'name': 'loss', 'op': 'scale', 'inputs': ['ce'], 'attrs': {'factor': 1.0}})
json.dump(s, open(tmp + '/scaled.json', 'w'))
m['name'] = 'two_losses'
m['params'].append({'name': 'aux.weight', 'shape': ['K', 'H'],
                    'init': {'kind': 'uniform', 'a': -0.08838834765, 'b': 0.08838834765}})
m['nodes'][-1]['name'] = 'ce'
m['nodes'] += [{'name': 'aux', 'op': 'linear', 'inputs': ['relu2', 'aux.weight']},
               {'name': 'mse', 'op': 'mse_loss', 'inputs': ['aux', 'logits']},
               {'name': 'loss', 'op': 'add', 'inputs': ['ce', 'mse']}]
json.dump(m, open(tmp + '/two_losses.json', 'w'))
PY
for model in scaled two_losses; do
  "$pipec" compile "$tmp/$model.json" -o "$tmp/$model" >/dev/null 2>&1 || bad "compile $model"
done
val() { sed -n 's/^eval  step [0-9]* | val loss \([0-9.]*\).*/\1/p' "$1" | tail -n 1; }
"$tmp/mlp/bin/train" --quiet --steps 30 --loss-log "$tmp/ce.loss" >"$tmp/ce.out" 2>&1 || bad "ce run"
"$tmp/scaled/bin/train" --quiet --steps 30 --loss-log "$tmp/scaled.loss" >"$tmp/scaled.out" 2>&1 || bad "scaled run"
check "scale(ce, 1.0) trains bit for bit like ce" cmp -s "$tmp/ce.loss" "$tmp/scaled.loss"
vc=$(val "$tmp/ce.out") vs=$(val "$tmp/scaled.out")
echo "val loss: ce $vc, scale(ce, 1.0) $vs"
check "scale(ce, 1.0) val loss $vs = ce val loss $vc" test -n "$vc" -a "$vc" = "$vs"
"$tmp/two_losses/bin/train" --quiet --steps 30 --save "$tmp/two.safetensors" >"$tmp/two.out" 2>&1 ||
  bad "two_losses run"
vt=$(val "$tmp/two.out")
ref=$("$py" - "$root/../shared/data/digits.csv.gz" "$tmp/two.safetensors" <<'PY'
import gzip, json, math, struct, sys
rows = [l for l in gzip.open(sys.argv[1], 'rt').read().splitlines() if l.strip()]
M = (1 << 64) - 1
def splitmix(s):
    s = (s + 0x9e3779b97f4a7c15) & M
    z = ((s ^ (s >> 30)) * 0xbf58476d1ce4e5b9) & M
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
    return s, z ^ (z >> 31)
perm, s = list(range(len(rows))), 1337 ^ 0x2545F4914F6CDD1D   # data.c shuffle_split, seed 1337
for i in range(len(rows) - 1, 0, -1):
    s, r = splitmix(s)
    j = r % (i + 1)
    perm[i], perm[j] = perm[j], perm[i]
n_train = math.floor(len(rows) * 0.8)
f32 = lambda v: struct.unpack('f', struct.pack('f', v))[0]
blob = open(sys.argv[2], 'rb').read()
hlen = struct.unpack('<Q', blob[:8])[0]
header = json.loads(blob[8:8 + hlen])
P = {}
for name, t in header.items():
    if name == '__metadata__': continue
    a, b = t['data_offsets']
    vals = struct.unpack('<%df' % ((b - a) // 4), blob[8 + hlen + a:8 + hlen + b])
    cols = t['shape'][-1]
    P[name] = [list(vals[i:i + cols]) for i in range(0, len(vals), cols)] if len(t['shape']) == 2 else list(vals)
def linear(x, w, b=None):
    return [sum(xi * wi for xi, wi in zip(x, row)) + (b[o] if b else 0.0) for o, row in enumerate(w)]
relu = lambda v: [max(t, 0.0) for t in v]
ce = mse = 0.0
val = [rows[perm[k]] for k in range(n_train, len(rows))]
for line in val:
    f = line.split(',')
    x, y = [f32(float(t) * 0.0625) for t in f[:-1]], int(f[-1])
    h = relu(linear(relu(linear(x, P['fc1.weight'], P['fc1.bias'])), P['fc2.weight'], P['fc2.bias']))
    z = linear(h, P['fc3.weight'], P['fc3.bias'])
    aux = linear(h, P['aux.weight'])
    mx = max(z)
    ce += mx + math.log(sum(math.exp(t - mx) for t in z)) - z[y]
    mse += sum((a - b) ** 2 for a, b in zip(aux, z)) / len(z)
print('%.6f' % ((ce + mse) / len(val)))
PY
)
echo "val loss: ce + mse $vt, reference $ref"
check "ce + mse val loss $vt = reference $ref (to 1e-4)" \
  "$py" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-4)" "$vt" "$ref"

# Memory-plan sizes are checked sums: 300 (or 512) parameters of 2^53 elements used to print a
# negative plan with exit 0 (or wrap to 64 bytes and fail inside cc); now the parameter that
# pushes the plan past 2^63 bytes is named. In the model whose 90 big tables are trained
# (embeddings: parameter, gradient and AdamW state, 3 x 2^55 bytes each) the 86th crosses it.
"$py" - "$root" "$tmp" <<'PY' || bad "generate big models"
import json, sys
root, tmp = sys.argv[1], sys.argv[2]
for n in (300, 512):
    m = json.load(open(root + '/samples/mlp_digits.json'))
    m['params'] += [{'name': 'big%d' % i, 'shape': [2 ** 53]} for i in range(n)]
    json.dump(m, open('%s/big%d.json' % (tmp, n), 'w'), indent=1)
m['params'] = m['params'][:6] + [{'name': 'huge', 'shape': [2 ** 50]}]  # 4 PiB, unused
json.dump(m, open(tmp + '/huge.json', 'w'), indent=1)
m = {'format': 'pipec-model', 'version': 1, 'name': 'tables',
     'inputs': [{'name': 'ids', 'dtype': 'i32', 'shape': ['B']},
                {'name': 'y', 'dtype': 'i32', 'shape': ['B'], 'target': True}],
     'params': [{'name': 'e%d' % i, 'shape': [2 ** 47, 64]} for i in range(90)] +
               [{'name': 'head', 'shape': [10, 64]}],
     'nodes': [{'name': 'h0', 'op': 'embedding', 'inputs': ['ids', 'e0']}], 'loss': 'loss'}
for i in range(1, 90):
    m['nodes'] += [{'name': 'v%d' % i, 'op': 'embedding', 'inputs': ['ids', 'e%d' % i]},
                   {'name': 'h%d' % i, 'op': 'add', 'inputs': ['h%d' % (i - 1), 'v%d' % i]}]
m['nodes'] += [{'name': 'logits', 'op': 'linear', 'inputs': ['h89', 'head']},
               {'name': 'loss', 'op': 'cross_entropy', 'inputs': ['logits', 'y']}]
json.dump(m, open(tmp + '/tables.json', 'w'), indent=1)
PY
# plan_error NAME MODEL ERROR-LINE: `pipec plan` exits 1 and its one error line is exactly that.
plan_error() {
  (cd "$tmp" && "$pipec" plan "$2") >"$tmp/out" 2>"$tmp/err"
  local rc=$? line
  line=$(grep ': error: ' "$tmp/err")
  if [ $rc -ne 1 ]; then
    bad "$1: exit $rc, want 1 ($line)"
  elif [ "$line" != "$3" ]; then
    bad "$1: error '$line', want '$3'"
  elif [ -s "$tmp/out" ]; then
    bad "$1: printed a plan"
  elif grep -q 'runtime error' "$tmp/err"; then
    bad "$1: sanitizer report"
  else
    ok
  fi
}
over="placing it in the params region, the memory plan would exceed 2^63 bytes"
plan_error plan-300-params big300.json "big300.json:1628:3: error: params[261]: 'big255' (9007199254740992): $over"
plan_error plan-512-params big512.json "big512.json:1628:3: error: params[261]: 'big255' (9007199254740992): $over"
plan_error plan-trained-tables tables.json "tables.json:618:3: error: params[85]: 'e85' (140737488355328,64): $over"

# A plan larger than this machine's physical memory (one 4 PiB parameter, otherwise fine): the
# compiler warns and exits 0; the program refuses to start before allocating, exit 1.
(cd "$tmp" && "$pipec" compile huge.json -o "$tmp/huge") >"$tmp/out" 2>"$tmp/err"
rc=$?
check "huge plan compiles (exit $rc)" test $rc -eq 0
check "huge plan: compile warns" grep -qE "^huge\.json: warning: the memory plan needs 4503599627[0-9]+ bytes \([0-9.]+ GiB\) but this machine has [0-9]+ bytes \([0-9.]+ GiB\) of physical memory: the program will refuse to start here$" "$tmp/err"
expect huge-plan-refused 1 "^sysmem\.c:[0-9]+: rank 0: error: the memory plan needs 4503599627[0-9]+ bytes \([0-9.]+ GiB\) but this machine has [0-9]+ bytes \([0-9.]+ GiB\) of physical memory$" \
  "$tmp/huge/bin/train" --quiet --steps 1

finish
