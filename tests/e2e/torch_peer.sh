#!/usr/bin/env bash
# The PyTorch peer of bench/time_to_loss.sh (bench/torch_train_gpt.py) runs pipec's gpt_char with
# pipec's recipe and evaluates on pipec's validation batches, so that the benchmark's two val
# losses compare:
#   - its model and recipe constants are samples/gpt_char.json's;
#   - its own initialisation has pipec's distributions (per parameter: mean, std);
#   - from pipec's initial parameters (train --steps 0 --save, read with --init), with pipec's
#     training batches (--sampling pipec) and a shortened schedule (warmup 5, cosine to step 15,
#     then min lr: every branch of the learning rate), each step's training loss is pipec's to
#     1e-5 relative and the val losses at steps 10 and 20 to 1e-4;
#   - the step-0 val loss of the same parameters is pipec's to 1e-4: pipec's initial ones on the 50
#     random validation batches, those it trained for 20 steps on the 50 batches and on the whole
#     split (pipec evaluates them after one step of lr 1e-300, which leaves every parameter bit
#     for bit unchanged). At 4 printed decimals, a window more or less of the whole split's 1742
#     cannot show; another window start or another batch can.
# The same for llama_char (bench/torch_train_gpt.py --model llama_char, bench/torch_llama.py):
#   - its dims, recipe constants and attention, RoPE and RMSNorm attributes are
#     samples/llama_char.json's; its own initialisation has pipec's distributions per parameter;
#   - from pipec's initial parameters and on pipec's batches, the short schedule's 20 training
#     losses are pipec's to 1e-5 relative and the val losses at steps 10 and 20 to 1e-4 (the
#     validation code is gpt_char's, checked above on the whole split too).
# Skips (exit 77) with a clear message where Debian's python3-torch is not importable.
# In the sanitizer tree (pipec's programs built with AddressSanitizer) pipec's side runs (the
# --steps 0 save, the 20 steps, the evaluations of the trained parameters on the 50 random batches
# and on the whole split: the initial ones' on the 50 batches are the same code) and its outputs
# are checked for form; PyTorch's side, which AddressSanitizer does not instrument, is left to
# the release tree, which runs the same commands and compares the numbers. In the sanitizer tree
# the evaluations are shorter, the same code on fewer batches (their numbers are not compared):
# 2 batches at steps 10 and 20, 5 random ones, and the whole validation split of the same text at
# train_fraction 0.99 (a tenth of the 0.9 split's; the whole split took most of this test's 113 s
# there).
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
py=/usr/bin/python3
if ! $py -c 'import torch' 2>/dev/null; then
  echo "skip: the PyTorch peer needs python3-torch (Debian's /usr/bin/python3); scripts/install-deps.sh --with-torch installs it"
  exit 77
fi
data=$(cd "$root/../shared/data" 2>/dev/null && pwd)/tinyshakespeare.txt
[ -r "$data" ] || { echo "FAIL: ../shared/data/tinyshakespeare.txt not found"; exit 1; }
peer=(env OMP_NUM_THREADS=1 "$py" "$root/bench/torch_train_gpt.py" --data "$data" --threads 1)
train=$tmp/gpt/bin/train
"$pipec" compile samples/gpt_char.json -o "$tmp/gpt" >/dev/null 2>"$tmp/cerr" || { bad "compile: $(cat "$tmp/cerr")"; finish; exit; }
"$pipec" compile samples/gpt_char.json --set schedule.warmup=5 --set schedule.decay_steps=15 -o "$tmp/short" \
  >/dev/null 2>"$tmp/cerr" || { bad "compile (short schedule): $(cat "$tmp/cerr")"; finish; exit; }
"$train" --steps 0 --save "$tmp/init.st" --quiet || bad "train --steps 0 --save"
peer_runs=1 # 0: the sanitizer tree, where PyTorch's side is not run
evb=10 nb50=50 whole=$train # the evaluations' batches; the program that evaluates the whole split
if sanitized "$train"; then
  peer_runs=0 evb=2 nb50=5 whole=$tmp/tail/bin/train
  echo "sanitizer tree: pipec's side only (the release tree compares it with the PyTorch peer)"
  "$pipec" compile samples/gpt_char.json --set data.train_fraction=0.99 -o "$tmp/tail" >/dev/null \
    2>"$tmp/cerr" || bad "compile (train_fraction 0.99): $(cat "$tmp/cerr")"
fi

# val LOSS-LINE: the loss of the program's or the peer's line for step N
val() { sed -nE "s/^(eval +)?step $1 \| val loss ([0-9.]+).*/\2/p" "$2"; }
near() { # near NAME A B TOL: |A - B| <= TOL, both present
  if [ -n "$2" ] && [ -n "$3" ] && awk -v a="$2" -v b="$3" -v t="$4" 'BEGIN { d = a - b; exit !((d < 0 ? -d : d) <= t + 1e-9) }'; then
    ok
  else
    bad "$1: pipec '$2', PyTorch peer '$3' (tolerance $4)"
  fi
}

# Constants and initial distributions
[ $peer_runs = 1 ] && check "model and recipe constants are samples/gpt_char.json's" $py - "$root" "$tmp/init.st" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1] + "/bench")
import torch, torch_train_gpt as m
j = json.load(open(sys.argv[1] + "/samples/gpt_char.json"))
t, o, s = j["training"], j["training"]["optimizer"], j["training"]["schedule"]
want = {"batch": t["batch"], "steps": t["steps"], "seed": t["seed"], "lr": o["lr"], "betas": tuple(o["betas"]),
        "eps": o["eps"], "weight_decay": o["weight_decay"], "warmup": s["warmup"], "decay_steps": s["decay_steps"],
        "min_lr": s["min_lr"], "grad_clip": t["grad_clip"], "eval_every": t["eval_every"],
        "eval_batches": t["eval_batches"], "train_fraction": t["data"]["train_fraction"]}
bad = [k for k in want if m.RECIPE[k] != want[k]] + [k for k in j["dims"] if m.MODEL[k] != j["dims"][k]]
bad += [] if t["microbatches"] == 1 else ["microbatches"]
heads = {n["attrs"]["n_head"] for b in j["blocks"] for n in b["nodes"] if n["op"] == "causal_self_attention"}
bad += [] if heads == {m.MODEL["n_head"]} else ["n_head"]
gelu = {n["attrs"].get("approximate") for b in j["blocks"] for n in b["nodes"] if n["op"] == "gelu"}
bad += [] if gelu == {"none"} else ["gelu"]
# Initial distributions: the peer's own init against pipec's, parameter by parameter.
torch.manual_seed(1337)
mine = dict(m.GPT(**m.MODEL).named_parameters())
theirs = m.load_safetensors(sys.argv[2])
for name, p in mine.items():
    q = theirs[name]
    if p.shape != q.shape or abs(p.mean().item() - q.mean().item()) > 0.01 or \
       abs(p.std().item() - q.std().item()) > 0.05 * max(q.std().item(), 1e-3):
        bad.append("%s (mean %.4g std %.4g; pipec mean %.4g std %.4g)" % (name, p.mean(), p.std(), q.mean(), q.std()))
if bad:
    print("differs from samples/gpt_char.json / pipec's init:", ", ".join(bad))
sys.exit(1 if bad else 0)
PY

# 20 steps on pipec's batches, every branch of the schedule
"$tmp/short/bin/train" --init "$tmp/init.st" --steps 20 --seed 7 --eval-every 10 --eval-batches "$evb" --threads 1 \
  --quiet --loss-log "$tmp/p.loss" --save "$tmp/trained.st" >"$tmp/p20" 2>&1 || bad "pipec 20 steps: $(tail -2 "$tmp/p20")"
if [ $peer_runs = 1 ]; then
  "${peer[@]}" --init "$tmp/init.st" --steps 20 --seed 7 --eval-every 10 --eval-batches 10 --sampling pipec \
    --warmup 5 --decay-steps 15 --loss-log "$tmp/t.loss" >"$tmp/t20" 2>"$tmp/t20.err" ||
    bad "peer 20 steps: $(tail -2 "$tmp/t20.err")"
  check "20 training losses from both" test "$(wc -l <"$tmp/p.loss")" -eq 20 -a "$(wc -l <"$tmp/t.loss" 2>/dev/null)" -eq 20
  worst=$(paste "$tmp/p.loss" "$tmp/t.loss" | awk '{ r = ($2 - $4) / $4; if (r < 0) r = -r; if (r > w) { w = r; s = $1 } }
    END { printf "%.3g (step %d)", w, s }')
  echo "20 steps on pipec's batches: worst relative training-loss difference $worst"
  check "per-step training loss within 1e-5 of pipec's" awk '
    NR == FNR { a[$1] = $2; next }
    { r = (a[$1] - $2) / $2; if (r < 0) r = -r; if (r > 1e-5) bad = 1 }
    END { exit bad }' "$tmp/p.loss" "$tmp/t.loss"
  for s in 10 20; do near "val loss at step $s" "$(val $s "$tmp/p20")" "$(val $s "$tmp/t20")" 1e-4; done
else
  check "pipec: 20 training losses" test "$(wc -l <"$tmp/p.loss")" -eq 20
  for s in 10 20; do check "pipec: a val loss at step $s" test -n "$(val $s "$tmp/p20")"; done
fi

# The val loss of the same parameters on the same batches: pipec's initial ones on the 50 random
# batches; those pipec trained for 20 steps (further from uniform, so that another batch shows) on
# the 50 random batches and on the whole split.
for run in init:50 trained:50 trained:0; do
  # (the sanitizer tree: the random batches once, of the trained parameters; the whole split)
  [ $peer_runs = 0 ] && [ $run = init:50 ] && continue
  st=$tmp/${run%:*}.st nb=${run#*:} exe=$train
  [ $peer_runs = 0 ] && { [ "$nb" = 0 ] && exe=$whole || nb=$nb50; }
  "$exe" --init "$st" --steps 1 --lr 1e-300 --min-lr 1e-300 --eval-batches "$nb" --threads 1 --quiet \
    >"$tmp/p$run" 2>&1 || bad "pipec $run: $(tail -2 "$tmp/p$run")"
  if [ $peer_runs = 0 ]; then
    check "pipec: a val loss of the ${run%:*} parameters, --eval-batches $nb" test -n "$(val 1 "$tmp/p$run")"
    continue
  fi
  "${peer[@]}" --init "$st" --steps 0 --eval-batches "$nb" >"$tmp/t$run" 2>"$tmp/t$run.err" ||
    bad "peer $run: $(tail -2 "$tmp/t$run.err")"
  near "val loss of the ${run%:*} parameters, --eval-batches $nb" "$(val 1 "$tmp/p$run")" "$(val 0 "$tmp/t$run")" 1e-4
done
[ $peer_runs = 1 ] && check "the peer's lines: 'step S | val loss X | elapsed_s Y', then its median step time" \
  grep -qzE '^step 10 \| val loss [0-9.]+ \| elapsed_s [0-9.]+
step 20 \| val loss [0-9.]+ \| elapsed_s [0-9.]+
median step time [0-9.]+ ms over 20 steps
$' "$tmp/t20"
# ---- llama_char: the same peer with --model llama_char (bench/torch_llama.py)
"$pipec" compile samples/llama_char.json -o "$tmp/ll" >/dev/null 2>"$tmp/cerr" || bad "compile llama_char: $(cat "$tmp/cerr")"
"$pipec" compile samples/llama_char.json --set schedule.warmup=5 --set schedule.decay_steps=15 -o "$tmp/llshort" \
  >/dev/null 2>"$tmp/cerr" || bad "compile llama_char (short schedule): $(cat "$tmp/cerr")"
"$tmp/ll/bin/train" --steps 0 --save "$tmp/llinit.st" --quiet || bad "llama_char: train --steps 0 --save"
[ $peer_runs = 1 ] && check "llama_char: model and recipe constants are samples/llama_char.json's" $py - "$root" \
  "$tmp/llinit.st" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1] + "/bench")
import torch, torch_train_gpt as m, torch_llama as ll
j = json.load(open(sys.argv[1] + "/samples/llama_char.json"))
t, o, s = j["training"], j["training"]["optimizer"], j["training"]["schedule"]
want = {"batch": t["batch"], "steps": t["steps"], "seed": t["seed"], "lr": o["lr"], "betas": tuple(o["betas"]),
        "eps": o["eps"], "weight_decay": o["weight_decay"], "warmup": s["warmup"], "decay_steps": s["decay_steps"],
        "min_lr": s["min_lr"], "grad_clip": t["grad_clip"], "eval_every": t["eval_every"],
        "eval_batches": t["eval_batches"], "train_fraction": t["data"]["train_fraction"]}
bad = [k for k in want if m.RECIPE[k] != want[k]]
d = j["dims"]
bad += [k for k in ("V", "T", "C", "L", "NH", "NKV", "F") if ll.LLAMA[k] != d[k]]
bad += [] if d["HD"] * d["NH"] == d["C"] and t["microbatches"] == 1 else ["HD or microbatches"]
nodes = [n for b in j["blocks"] for n in b["nodes"]] + [n for n in j["nodes"] if "op" in n]
attrs = lambda op: [n.get("attrs", {}) for n in nodes if n["op"] == op]
bad += [] if all(a == {"n_head": d["NH"], "n_kv_head": d["NKV"]} for a in attrs("attention")) else ["attention"]
bad += [] if all(a == {"theta": ll.LLAMA["theta"], "pairing": "interleaved"} for a in attrs("rope")) else ["rope"]
bad += [] if all(a == {"eps": ll.LLAMA["eps"]} for a in attrs("rms_norm")) and attrs("rms_norm") else ["rms_norm"]
bad += [] if {n["op"] for n in nodes} == {"embedding", "rms_norm", "linear", "reshape", "rope", "attention", "add",
                                          "silu", "mul", "cross_entropy"} else ["ops"]
torch.manual_seed(1337)
mine = dict(m.make_model("llama_char").named_parameters())
theirs = m.load_safetensors(sys.argv[2])
bad += ["extra or missing names"] if set(mine) != set(theirs) else []
for name, p in mine.items():
    q = theirs.get(name)
    if q is None or p.shape != q.shape or abs(p.mean().item() - q.mean().item()) > 0.01 or \
       abs(p.std().item() - q.std().item()) > 0.05 * max(q.std().item(), 1e-3):
        bad.append(name)
if bad:
    print("differs from samples/llama_char.json / pipec's init:", ", ".join(bad))
sys.exit(1 if bad else 0)
PY
"$tmp/llshort/bin/train" --init "$tmp/llinit.st" --steps 20 --seed 7 --eval-every 10 --eval-batches "$evb" --threads 1 \
  --quiet --loss-log "$tmp/llp.loss" >"$tmp/llp20" 2>&1 || bad "llama_char: pipec 20 steps: $(tail -2 "$tmp/llp20")"
if [ $peer_runs = 1 ]; then
  "${peer[@]}" --model llama_char --init "$tmp/llinit.st" --steps 20 --seed 7 --eval-every 10 --eval-batches 10 \
    --sampling pipec --warmup 5 --decay-steps 15 --loss-log "$tmp/llt.loss" >"$tmp/llt20" 2>"$tmp/llt20.err" ||
    bad "llama_char: peer 20 steps: $(tail -2 "$tmp/llt20.err")"
  check "llama_char: 20 training losses from both" test "$(wc -l <"$tmp/llp.loss")" -eq 20 -a \
    "$(wc -l <"$tmp/llt.loss" 2>/dev/null)" -eq 20
  worst=$(paste "$tmp/llp.loss" "$tmp/llt.loss" | awk '{ r = ($2 - $4) / $4; if (r < 0) r = -r; if (r > w) { w = r; s = $1 } }
    END { printf "%.3g (step %d)", w, s }')
  echo "llama_char, 20 steps on pipec's batches: worst relative training-loss difference $worst"
  check "llama_char: per-step training loss within 1e-5 of pipec's" awk '
    NR == FNR { a[$1] = $2; next }
    { r = (a[$1] - $2) / $2; if (r < 0) r = -r; if (r > 1e-5) bad = 1 }
    END { exit bad }' "$tmp/llp.loss" "$tmp/llt.loss"
  for s in 10 20; do near "llama_char: val loss at step $s" "$(val $s "$tmp/llp20")" "$(val $s "$tmp/llt20")" 1e-4; done
else
  check "llama_char, pipec: 20 training losses" test "$(wc -l <"$tmp/llp.loss")" -eq 20
fi
finish
