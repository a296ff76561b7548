#!/usr/bin/env bash
# Pipeline parallelism end to end (docs/pipeline.md): `pipec compile --stages S` builds one program
# per rank and launch.sh runs them under mpirun; 3 training steps must give a loss log, parameters
# and optimizer state byte for byte those of the one-stage program with the same microbatches M,
# for every schedule (gpipe, 1f1b, zb-h1, interleaved with --virtual 2), on mlp_digits, a 2-layer
# gpt_char (tied embedding and head on different ranks) and skip_net (a skip across stages, a
# shared weight). The comparison is lib.sh's pipe_same (the full matrix reuses it).
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
export OMPI_MCA_mpi_yield_when_idle=1 # more ranks than cores here: ranks yield while they wait

# ---- launch.sh at S = 1 runs the one program (bin/rank0 is bin/train): the same bits.
"$pipec" compile samples/mlp_digits.json -o "$tmp/one" >/dev/null 2>&1 || bad "compile S = 1"
check "S = 1: bin/rank0 is bin/train" test "$tmp/one/bin/rank0" -ef "$tmp/one/bin/train"
check "S = 1: no MPI in the program" eval '! ldd "$tmp/one/bin/train" | grep -q libmpi'
pipe_run "$tmp/one-launch" "$tmp/one" || bad "S = 1: launch.sh: $(tail -n 3 "$tmp/one-launch.out")"
"$tmp/one/bin/train" "${pipe_opts[@]}" --save "$tmp/one-train.st" --loss-log "$tmp/one-train.loss" \
  >/dev/null 2>&1 || bad "S = 1: bin/train"
same_bits "S = 1: launch.sh = bin/train" "$tmp/one-train" "$tmp/one-launch"

# ---- Rank 0's train_step as printed, against golden files: receives posted at step start for
# m < K and right after the last action of m - K, a send waited for before the next action of its
# stage and microbatch (1f1b's F sends before its B; else before the action that rewrites the
# buffer for m + K), all sends waited for before the step end, then the exchange (skip_net: its
# shared weight) and, under --virtual, the copies of the channels between two stages of one rank.
golden_step() {
  local name=$1 dir="$tmp/golden-$1"
  shift
  if ! "$pipec" compile "$@" -o "$dir" >/dev/null 2>"$tmp/golden.err"; then
    bad "$name: compile: $(head -n 3 "$tmp/golden.err")"
    return
  fi
  sed -n '/^static double train_step/,/^}/p' "$dir/rank0.c" >"$tmp/$name.train_step"
  if diff -u "tests/golden/$name.train_step" "$tmp/$name.train_step" >"$tmp/golden.diff"; then
    ok
  else
    bad "$name: rank 0's train_step differs from tests/golden/$name.train_step:"
    head -n 20 "$tmp/golden.diff"
  fi
}
golden_step mlp_digits_s2_m4_1f1b samples/mlp_digits.json --stages 2 --microbatches 4
# MPI's progress inside compute (segment.c): on a rank with messages each GEMM and attention call
# of F, B and W is followed by pr_comm_progress(); rank 0's B_0 of that program pinned, and none
# in the one-rank program (no MPI there).
sed -n '/^static void B_0/,/^}/p' "$tmp/golden-mlp_digits_s2_m4_1f1b/rank0.c" >"$tmp/b0.c"
check "progress: rank 0's B_0 calls pr_comm_progress after its GEMM only" diff -u - "$tmp/b0.c" <<'C'
static void B_0(int slot, int acc) {
  (void)slot, (void)acc;
  pr_relu_bwd(t23_d_fc1_relu1_0, t27_d_relu1_fc2_0_v0, t9_relu1, /*n*/ 2048, /*acc*/ 0); // relu1:d0
  pr_linear_bwd_w(t24_d_fc1_weight_fc1_1, t23_d_fc1_relu1_0, t0_x, /*rows*/ 16, /*in*/ 64,
                  /*out*/ 128, /*acc*/ acc); // fc1:d1
  pr_comm_progress();
  // fc1:d2
  pr_sum_rows(t25_d_fc1_bias_fc1_2, t23_d_fc1_relu1_0, /*rows*/ 16, /*cols*/ 128, /*acc*/ acc);
}
C
check "progress: rank 1 has it in F, B, W (6 calls)" \
  [ "$(grep -c '^  pr_comm_progress();$' "$tmp/golden-mlp_digits_s2_m4_1f1b/rank1.c")" -eq 6 ]
check "progress: none at S = 1" eval 'grep -q "pr_linear" "$tmp/one/rank0.c" && ! grep -q pr_comm_progress "$tmp/one/rank0.c"'
# (The cut pinned: stages 0 and 2 on rank 0 exchange the skip, a copy on one rank.)
golden_step skip_net_s2_m2_interleaved samples/skip_net.json --stages 2 --microbatches 2 \
  --schedule interleaved --virtual 2 --split wide,wide.relu,body2

# ---- The equality matrix (a small one: the full matrix reuses pipe_same). In the sanitizer tree
# the entries whose model, schedule, S and M its reduced matrix runs too (pipeline_matrix.sh:
# the same comparison, there at batch 24 and skip_net's --split cuts) are left to it and to this
# tree's release twin (left_to_matrix: true there, where they do not run).
left_to_matrix() { sanitized "$tmp/one/bin/train"; }
pipe_same mlp-s2-m4-gpipe samples/mlp_digits.json 2 4 gpipe
pipe_same mlp-s2-m4-1f1b samples/mlp_digits.json 2 4 1f1b
left_to_matrix || pipe_same mlp-s2-m4-zbh1 samples/mlp_digits.json 2 4 zb-h1
left_to_matrix || pipe_same mlp-s2-m4-interleaved samples/mlp_digits.json 2 4 'interleaved --virtual 2'
left_to_matrix || pipe_same mlp-s2-m1-1f1b samples/mlp_digits.json 2 1 1f1b
pipe_same mlp-s3-m2-1f1b samples/mlp_digits.json 3 2 1f1b
# PIPEC_BIND=core: more ranks than cores are bound, rank r to core r mod cores (mpirun's report),
# with the same bits.
cores=$(nproc)
if [ "$cores" -lt 3 ]; then
  PIPEC_BIND=core PIPEC_MPIRUN_OPTS=--report-bindings pipe_run "$tmp/bound" "$tmp/mlp-s3-m2-1f1b.d" ||
    bad "PIPEC_BIND=core: $(tail -n 3 "$tmp/bound.out")"
  same_bits "PIPEC_BIND=core: the bits of the one-stage run" "$(pipe_ref samples/mlp_digits.json 2)" "$tmp/bound"
  want=$(for r in 0 1 2; do printf 'rank %d core %d\n' $r $((r % cores)); done)
  got=$(sed -n 's/.*MCW rank \([0-9]*\) bound to socket [0-9]*\[core \([0-9]*\)\[.*/rank \1 core \2/p' "$tmp/bound.out" | sort)
  check "PIPEC_BIND=core: bindings $(echo $got)" test "$got" = "$want"
fi
pipe_same gpt2-s2-m2-1f1b samples/gpt_char.json 2 2 1f1b -D L=2
# skip_net has no data binding: the synthetic table of the parity and hashes tests (batch 16).
python3 "$root/tests/skip_net_table.py" samples/skip_net.json "$tmp/skip.json" "$tmp/skip.csv"
pipe_same skip-s2-m2-zbh1 "$tmp/skip.json" 2 2 zb-h1
pipe_same skip-s3-m4-gpipe "$tmp/skip.json" 3 4 gpipe
left_to_matrix || pipe_same skip-s2-m4-interleaved "$tmp/skip.json" 2 4 'interleaved --virtual 2'
left_to_matrix || pipe_same skip-s4-m8-1f1b "$tmp/skip.json" 4 8 1f1b
# Cuts by name: inside the skip span (3 stages), and between the tied embedding and the head.
pipe_same skip-split-zbh1 "$tmp/skip.json" 3 4 'zb-h1 --split gated,skip'
pipe_same gpt2-split-1f1b samples/gpt_char.json 2 4 '1f1b --split transformer.ln_f' -D L=2

# ---- Evaluation across the stages reports what the one-stage program does: the validation loss
# and, with the loss cut from the logits (--split loss), the accuracy from the received logits.
eval_line() { "$@" "${pipe_opts[@]}" --quiet --eval-batches 2 2>&1 | sed -n 's/^\(\[rank [0-9]*\] \)\{0,1\}\(eval .*\)/\2/p'; }
want=$(eval_line "$tmp/one/bin/train")
"$pipec" compile samples/mlp_digits.json --split loss -o "$tmp/eval" >/dev/null 2>&1 || bad "compile --split loss"
check "eval at S = 2, the loss cut from the logits: '$want'" \
  test -n "$want" -a "$(eval_line "$tmp/eval/launch.sh")" = "$want"
# Issue 27: whether the line has an accuracy, and from which logits, is decided once at compile
# time: the cross_entropy's (not the first output), counted on its stage at every S. A cut between
# cross_entropy and the loss (here scale(ce, 1): mlp_digits' bits) keeps it; an mse_loss
# autoencoder has none at any S.
python3 - "$tmp" "$root/../shared/data/digits.csv.gz" <<'PY' || bad "issue 27: the models"
import json, sys
m = json.load(open("samples/mlp_digits.json"))
m["training"]["data"]["path"] = sys.argv[2]
m["nodes"][-1] = {"name": "ce", "op": "cross_entropy", "inputs": ["logits", "y"]}
m["nodes"].append({"name": "loss", "op": "scale", "inputs": ["ce"], "attrs": {"factor": 1.0}})
m["outputs"] = ["relu2"]
json.dump(m, open(sys.argv[1] + "/ce_scale.json", "w"))
m["dims"] = {"IN": 64, "H": 16}
m["params"] = [{"name": "enc.weight", "shape": ["H", "IN"], "init": {"kind": "uniform", "a": -0.125, "b": 0.125}},
               {"name": "dec.weight", "shape": ["IN", "H"], "init": {"kind": "uniform", "a": -0.25, "b": 0.25}}]
m["nodes"] = [{"name": "enc", "op": "linear", "inputs": ["x", "enc.weight"]},
              {"name": "h", "op": "relu", "inputs": ["enc"]},
              {"name": "rec", "op": "linear", "inputs": ["h", "dec.weight"]},
              {"name": "loss", "op": "mse_loss", "inputs": ["rec", "x"]}]
m["outputs"] = ["rec"]
json.dump(m, open(sys.argv[1] + "/autoencoder.json", "w"))
PY
for mdl in ce_scale autoencoder; do
  "$pipec" compile "$tmp/$mdl.json" -o "$tmp/$mdl-1" >/dev/null 2>"$tmp/err" &&
    "$pipec" compile "$tmp/$mdl.json" --split loss -o "$tmp/$mdl-2" >/dev/null 2>>"$tmp/err" ||
    bad "issue 27: compile $mdl: $(tail -n 2 "$tmp/err")"
done
"$pipec" print "$tmp/ce_scale.json" --split loss --dump-after=partition >"$tmp/ce_scale.part" 2>&1
check "cross_entropy | loss cut: ce on stage 0, loss on stage 1" \
  grep -qx "send 'ce' () stage 0 -> 1" "$tmp/ce_scale.part"
e1=$(eval_line "$tmp/ce_scale-1/bin/train") e2=$(eval_line "$tmp/ce_scale-2/launch.sh")
check "cross_entropy | loss cut: S = 1 is mlp_digits' line, with accuracy ('$e1')" \
  test "$e1" = "$want" -a "${e1/val accuracy/}" != "$e1"
check "cross_entropy | loss cut: S = 2 = S = 1 ('$e2')" test "$e2" = "$e1"
e1=$(eval_line "$tmp/autoencoder-1/bin/train") e2=$(eval_line "$tmp/autoencoder-2/launch.sh")
check "mse_loss: no accuracy at S = 1 ('$e1')" grep -qE '^eval  step 3 \| val loss [0-9.]+$' <<<"$e1"
check "mse_loss: S = 2 = S = 1 ('$e2')" test "$e2" = "$e1"

# ---- A checkpoint of S = 2 resumed at S = 3 (zb-h1) continues bit for bit: 3 + 2 steps equal the
# one-stage program's 5.
g2=(samples/gpt_char.json -D L=2 --microbatches 2)
"$pipec" compile "${g2[@]}" -o "$tmp/r1" >/dev/null 2>&1 &&
  "$pipec" compile "${g2[@]}" --stages 2 -o "$tmp/r2" >/dev/null 2>&1 &&
  "$pipec" compile "${g2[@]}" --stages 3 --schedule zb-h1 -o "$tmp/r3" >/dev/null 2>&1 ||
  bad "compile the resume programs"
"$tmp/r1/launch.sh" "${pipe_opts[@]}" --steps 5 --save "$tmp/five.st" --loss-log "$tmp/five.loss" \
  >/dev/null 2>&1 || bad "resume: 5 steps at S = 1"
"$tmp/r2/launch.sh" "${pipe_opts[@]}" --save "$tmp/three.st" --loss-log "$tmp/three.loss" \
  >/dev/null 2>&1 || bad "resume: 3 steps at S = 2"
"$tmp/r3/launch.sh" "${pipe_opts[@]}" --steps 5 --resume "$tmp/three.st" --save "$tmp/more.st" \
  --loss-log "$tmp/more.loss" >"$tmp/more.out" 2>&1 || bad "resume at S = 3: $(tail -n 3 "$tmp/more.out")"
cat "$tmp/three.loss" "$tmp/more.loss" >"$tmp/resumed.loss" 2>/dev/null
cp "$tmp/more.st" "$tmp/resumed.st" 2>/dev/null && cp "$tmp/more.st.optim" "$tmp/resumed.st.optim" 2>/dev/null
same_bits "S = 2 saved, S = 3 resumed" "$tmp/five" "$tmp/resumed"

# ---- pipec run --stages S: compiles and replaces itself with launch.sh; the job's exit status.
"$pipec" run samples/mlp_digits.json --stages 2 --microbatches 2 -o "$tmp/run" -- \
  "${pipe_opts[@]}" --steps 2 --loss-log "$tmp/run.loss" >"$tmp/run.out" 2>&1
check "run --stages 2: exit 0" test $? -eq 0
check "run --stages 2: 2 loss lines" test "$(wc -l <"$tmp/run.loss" 2>/dev/null)" = 2
"$pipec" run samples/mlp_digits.json --stages 2 --microbatches 2 -o "$tmp/run" -- --steps x \
  >"$tmp/run.out" 2>&1
check "run --stages 2 with a bad program option: the program's exit status 2" test $? -eq 2
check "run --stages 2 with a bad program option: its message, rank-prefixed" \
  grep -q "^\[rank [01]\] .*--steps: expected a non-negative integer, got 'x'" "$tmp/run.out"

# ---- launch.sh: nothing of the model reaches it raw (a name with quotes, $(...) and a line
# break); it runs the job all the same.
python3 - "$tmp/evil.json" <<'PY'
import json, os, sys
m = json.load(open("samples/mlp_digits.json"))
m["name"] = "x'\"; touch PWNED; $(touch PWNED2)\n`touch PWNED3`"
d = m["training"]["data"]
d["path"] = os.path.abspath(os.path.join("samples", d["path"]))
json.dump(m, open(sys.argv[1], "w"))
PY
"$pipec" compile "$tmp/evil.json" --stages 2 --microbatches 2 -o "$tmp/evil" >/dev/null 2>&1 || bad "compile the odd name"
check "launch.sh is executable" test -x "$tmp/evil/launch.sh"
check "S = 2: the rank programs link MPI" eval 'ldd "$tmp/evil/bin/rank1" | grep -q libmpi'
check "launch.sh holds the name only in a comment, defused" \
  grep -qxF "# Runs the training job of model x'\"; touch PWNED; \$(touch PWNED2)_\`touch PWNED3\`: 2 ranks, one program per rank (bin/rank<r>) under mpirun." "$tmp/evil/launch.sh"
check "launch.sh: the name in no other line" test "$(grep -c PWNED "$tmp/evil/launch.sh")" -eq 1
(cd "$tmp" && "$tmp/evil/launch.sh" "${pipe_opts[@]}" --loss-log "$tmp/evil.loss" >"$tmp/evil.out" 2>&1) ||
  bad "run the odd name: $(tail -n 3 "$tmp/evil.out")"
check "the odd name ran nothing" test ! -e "$tmp/PWNED" -a ! -e "$tmp/PWNED2" -a ! -e "$tmp/PWNED3"
check "the odd name trains: 3 loss lines" test "$(wc -l <"$tmp/evil.loss" 2>/dev/null)" = 3
finish
