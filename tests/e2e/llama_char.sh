#!/usr/bin/env bash
# samples/llama_char.json as shipped (its data path relative to the model file): gen_llama.py
# writes it byte for byte; it compiles and learns over its first steps; the losses do not depend
# on the thread count; a run stopped and resumed from its checkpoint continues bit for bit; the
# checkpoint holds torchtitan's parameter names. The pipeline matrix (pipeline_matrix.sh
# llama_char) and the PyTorch parity test (tests/parity) cover the rest.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
check "gen_llama.py writes samples/llama_char.json" cmp -s <(python3 samples/gen_llama.py) samples/llama_char.json
"$pipec" compile samples/llama_char.json -o "$tmp/llama" 2>"$tmp/err" || { cat "$tmp/err"; bad compile; finish; exit 1; }
train="$tmp/llama/bin/train"
steps=24 learns=1
if sanitized "$train"; then
  steps=8 learns=0
  echo "sanitizer tree: $steps steps (the release tree checks that the loss falls over 24)"
fi
"$train" --steps "$steps" --threads 1 --eval-batches 2 --loss-log "$tmp/a" >"$tmp/out" 2>&1 || bad "run: $(tail -3 "$tmp/out")"
first=$(head -1 "$tmp/a" | cut -d' ' -f2)
last=$(tail -1 "$tmp/a" | cut -d' ' -f2)
echo "loss: step 0 $first, step $((steps - 1)) $last"
check "$steps losses" test "$(wc -l <"$tmp/a")" -eq "$steps"
check "initial loss $first near ln(65) = 4.17" awk -v l="$first" 'BEGIN { exit !(l > 4.0 && l < 4.4) }'
[ $learns = 1 ] && check "loss falls by 0.5 ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }'
check "an eval line" grep -q "^eval  step $steps | val loss " "$tmp/out"
"$train" --steps 8 --threads 2 --quiet --eval-batches 1 --loss-log "$tmp/b" >/dev/null 2>&1 || bad "run (threads 2)"
check "losses identical with 1 and 2 threads (8 steps)" cmp -s <(head -n 8 "$tmp/a") "$tmp/b"
"$train" --steps 4 --quiet --eval-batches 1 --save "$tmp/ck.st" >/dev/null 2>&1 || bad "run to step 4"
"$train" --steps 8 --quiet --eval-batches 1 --resume "$tmp/ck.st" --loss-log "$tmp/c" >/dev/null 2>&1 || bad "resume"
check "resumed at step 4, the run continues bit for bit" cmp -s <(sed -n 5,8p "$tmp/a") "$tmp/c"
check "the checkpoint's names are torchtitan's" python3 - "$tmp/ck.st" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb")
names = set(json.loads(f.read(struct.unpack("<Q", f.read(8))[0])))
names.discard("__metadata__")
want = {"tok_embeddings.weight", "norm.weight", "output.weight"}
for i in range(4):
    want |= {"layers.%d.%s.weight" % (i, n) for n in (
        "attention_norm", "attention.wq", "attention.wk", "attention.wv", "attention.wo",
        "ffn_norm", "feed_forward.w1", "feed_forward.w2", "feed_forward.w3")}
sys.exit(0 if names == want else "names: %s" % sorted(names ^ want))
PY
finish
