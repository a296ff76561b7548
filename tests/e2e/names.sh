#!/usr/bin/env bash
# Model strings never reach generated C raw. Two models, a table (csv) one and a token (text) one,
# put hostile strings everywhere a model string can go: the model name, data and target inputs,
# params, nodes, block names, block inputs/params/nodes/outputs with {i}, repeat outputs, the loss,
# outputs, the data path (relative to the model file, whose directory holds quotes, backslashes,
# comment and trigraph sequences, a newline and UTF-8) and so the command line. The strings are
# quotes, backslashes, "*/", "/*", trigraphs ("??/" at a line end continued the comment; "?\/"
# became "??/"), '%', UTF-8, 1000 characters, and a C injection payload that closes a string
# literal and calls system("touch FILE"). Each program must build with -Wall -Werror, train,
# hold no trigraph and no unescaped payload, never create FILE, keep the exact bytes of each
# string (the saved safetensors names, the baked data path, the features HINT).
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
data=$(cd "$root/../shared/data" && pwd)
# The directory of both models: every kind of hostile byte, including a newline.
dir="$tmp/dir \"q\" \\b ??/ */ /* ü ✓ %s
x"
mkdir -p "$dir" || exit 1
DATA=$data python3 - "$dir" "$tmp" <<'PY'
import json, os, sys
d, tmp = sys.argv[1], sys.argv[2]
def payload(tag):  # closes the literal it is pasted into, runs a command, reopens one
    return 'x", "%s", "pwned"); (void)!system("touch ' + tmp + '/pwned_' + tag + '"); prCheck(1, "'
# The table data sits in directories named by the payload, next to the model file.
rel = payload("path") + "/dig \"its\" \\ ??/ */.csv.gz"
os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
os.symlink(os.path.join(os.environ["DATA"], "digits.csv.gz"), os.path.join(d, rel))
w1 = 'fc1."quoted" \\back\\slash */ /* ??/ ??= %d %s weight'
b1 = "fc1.bïas ünïcode ✓"
w2 = "w" * 1000
blk = 'blk "b" */ ??/'
table = {
    "format": "pipec-model", "version": 1, "name": 'odd "model" */ \\ ??/ ' + payload("model"),
    "inputs": [{"name": payload("input"), "shape": ["B", 64]},
               {"name": payload("target"), "dtype": "i32", "shape": ["B"], "target": True}],
    "params": [{"name": w1, "shape": [32, 64], "init": {"kind": "normal", "std": 0.1}},
               {"name": b1, "shape": [32]},
               {"name": "p??/", "shape": [10, 32], "init": "xavier"},
               {"name": w2, "shape": [10], "init": "zeros"}],
    "blocks": [{"name": blk, "inputs": ['in "x" ??/'], "outputs": ['blk.{i}.out ??/'],
                "params": [{"name": 'blk.{i}.w "??/" */ \\', "shape": [32, 32], "init": "xavier"}],
                "nodes": [{"name": 'blk.{i}.lin ?\\/', "op": "linear", "inputs": ['in "x" ??/', 'blk.{i}.w "??/" */ \\']},
                          {"name": 'blk.{i}.out ??/', "op": "add", "inputs": ['in "x" ??/', 'blk.{i}.lin ?\\/']}]}],
    "nodes": [{"name": payload("node"), "op": "linear", "inputs": [payload("input"), w1, b1]},
              {"name": "a?\\/", "op": "relu", "inputs": [payload("node")]},
              {"repeat": blk, "count": 2, "inputs": ["a?\\/"], "outputs": [payload("repeat")]},
              {"name": "logits ??/", "op": "linear", "inputs": [payload("repeat"), "p??/", w2]},
              {"name": "loss */ ??=", "op": "cross_entropy", "inputs": ["logits ??/", payload("target")]}],
    "loss": "loss */ ??=", "outputs": ["logits ??/"],
    "training": {"batch": 16, "steps": 3,
                 "data": {"kind": "csv", "path": rel, "train_fraction": 0.8, "scale": 0.0625}}}
tok = {
    "format": "pipec-model", "version": 1, "name": "tok ??/ " + payload("tok_model"),
    "dims": {"V": 65, "T": 8, "C": 16},
    "inputs": [{"name": payload("tok_input"), "dtype": "i32", "shape": ["B", "T"]},
               {"name": payload("tok_target"), "dtype": "i32", "shape": ["B", "T"], "target": True}],
    "params": [{"name": 'wte "emb" \\ ??/', "shape": ["V", "C"], "init": {"kind": "normal", "std": 0.02}},
               {"name": "head ??= */", "shape": ["V", "C"], "tied_to": 'wte "emb" \\ ??/'}],
    "blocks": [{"name": payload("tok_block"), "inputs": ["h"], "outputs": ["h.{i}.o ?\\/"],
                "params": [{"name": "h.{i}.w ??/", "shape": ["C", "C"], "init": "xavier"}],
                "nodes": [{"name": "h.{i}.l ??/", "op": "linear", "inputs": ["h", "h.{i}.w ??/"]},
                          {"name": "h.{i}.o ?\\/", "op": "add", "inputs": ["h", "h.{i}.l ??/"]}]}],
    "nodes": [{"name": payload("tok_node"), "op": "embedding", "inputs": [payload("tok_input"), 'wte "emb" \\ ??/']},
              {"repeat": payload("tok_block"), "count": 2, "inputs": [payload("tok_node")], "outputs": ["body ??/"]},
              {"name": "logits ??/", "op": "linear", "inputs": ["body ??/", "head ??= */"]},
              {"name": "loss", "op": "cross_entropy", "inputs": ["logits ??/", payload("tok_target")]}],
    "loss": "loss", "outputs": ["logits ??/"],
    "training": {"batch": 4, "steps": 2, "eval_batches": 2,
                 "data": {"kind": "text", "path": "shake ??/ \"s\" */.txt", "train_fraction": 0.9,
                          "input": payload("tok_input"), "target": payload("tok_target")}}}
shake = os.path.join(d, "shake ??/ \"s\" */.txt")
os.makedirs(os.path.dirname(shake), exist_ok=True)
os.symlink(os.path.join(os.environ["DATA"], "tinyshakespeare.txt"), shake)
# The payload alone (names without trigraphs: an old build compiles it, and runs the payload).
inject = {
    "format": "pipec-model", "version": 1, "name": payload("inject_model"),
    "inputs": [{"name": payload("inject_input"), "shape": ["B", 64]},
               {"name": payload("inject_target"), "dtype": "i32", "shape": ["B"], "target": True}],
    "params": [{"name": payload("inject_param"), "shape": [10, 64], "init": "xavier"}],
    "nodes": [{"name": payload("inject_node"), "op": "linear", "inputs": [payload("inject_input"), payload("inject_param")]},
              {"name": "loss", "op": "cross_entropy", "inputs": [payload("inject_node"), payload("inject_target")]}],
    "loss": "loss", "outputs": [payload("inject_node")],
    "training": {"batch": 16, "steps": 2, "data": {"kind": "csv", "path": rel, "scale": 0.0625}}}
for name, m, params in (("inject", inject, [payload("inject_param")]),
                        ("table", table, [w1, b1, "p??/", w2, 'blk.0.w "??/" */ \\', 'blk.1.w "??/" */ \\']),
                        ("tok", tok, ['wte "emb" \\ ??/', "head ??= */", "h.0.w ??/", "h.1.w ??/"])):
    json.dump(m, open(os.path.join(d, name + ".json"), "w"), ensure_ascii=False, indent=1)
    json.dump(params, open(os.path.join(d, name + ".names"), "w"))
open(os.path.join(tmp, "payload_input"), "w").write(payload("input"))
PY
[ -f "$dir/table.json" ] || { bad "generating the models"; finish; exit 1; }

# The safetensors file holds exactly the model's parameter names (tied ones included).
names_saved() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
got = sorted(k for k in header if k != "__metadata__")
want = sorted(json.load(open(sys.argv[2])))
if got != want:
    print("saved:", got, "\nwant: ", want)
sys.exit(0 if got == want else 1)
PY
}
# A trigraph anywhere in the file (in a string, a comment, or code).
no_trigraph() { ! grep -q '??[=/()!<>'"'"'-]' "$1"; }
# The code outside comments and string literals, mangled tensor identifiers (t<id>_<letters>, and
# a loop's locals l_<letters> and dl_<letters>, segment.c) removed, holds no word of a model
# string: the payload's system() call stays inside a literal.
no_raw_name() {
  cc -fpreprocessed -dD -E -P "$1" >"$tmp/code.i" || return 1
  python3 - "$tmp/code.i" <<'PY'
import re, sys
code = re.sub(r'"(\\.|[^"\\\n])*"', "", open(sys.argv[1]).read())
code = re.sub(r"\b(t[0-9]+|d?l)_\w*", "", code)
bad = re.findall(r".*(?:system|pwned|quoted|touch).*", code)
if bad: print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
}

for m in table tok inject; do
  out="$dir/out $m \"q\" \\ ??= *"
  if "$pipec" compile "$dir/$m.json" -o "$out" --set steps=2 2>"$tmp/err"; then ok; else bad "$m: compile: $(tail -5 "$tmp/err")"; fi
  [ -f "$out/rank0.c" ] || continue
  check "$m: no trigraph in the generated C" no_trigraph "$out/rank0.c"
  check "$m: no model string outside literals and comments" no_raw_name "$out/rank0.c"
  # Trains from the data path baked into the program (exact bytes of a hostile path).
  if "$out/bin/train" --quiet --save "$tmp/$m.safetensors" >/dev/null 2>"$tmp/err"; then ok; else bad "$m: run: $(cat "$tmp/err")"; fi
  [ -f "$tmp/$m.safetensors" ] && check "$m: saved names are the model's names" names_saved "$tmp/$m.safetensors" "$dir/$m.names"
  # The program's --help names the model.
  "$out/bin/train" --help >"$tmp/help" 2>&1
  check "$m: --help names the model" grep -qF "Train model $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["name"])' "$dir/$m.json")" "$tmp/help"
done

# The table program's HINT names the data input exactly (the literal that the payload escaped).
printf '1,2,3,0\n4,5,6,1\n7,8,9,2\n1,1,1,0\n2,2,2,1\n' >"$tmp/three.csv"
out="$dir/out table \"q\" \\ ??= *"
"$out/bin/train" --quiet --data "$tmp/three.csv" >/dev/null 2>"$tmp/err"
rc=$?
check "features mismatch exits 1" [ "$rc" -eq 1 ]
check "features mismatch: the error names the file and line" \
  [ "$(sed -n '1s/^data\.c:[0-9]*: //p' "$tmp/err")" = "rank 0: error: $tmp/three.csv:1: the row has 3 features (then its label) but the model takes 64" ]
check "features mismatch: the HINT holds the input's exact name" \
  [ "$(sed -n 2p "$tmp/err")" = "HINT: the model's input '$(cat "$tmp/payload_input")' has 64 features" ]

pwned=$(ls "$tmp" | grep '^pwned_')
check "no payload ran (${pwned:-none})" [ -z "$pwned" ]
finish
