#!/usr/bin/env bash
# The fused epilogues (codegen/segment.c, the registry's OpDef.epilogue and FuseDef): a program
# compiled with them (the default) trains byte for byte like the one compiled with --no-fuse (one
# kernel call per node): the loss log, the parameters and the optimizer state, at 1 and 2
# threads, on gpt_char (its exact gelu fused into c_fc's product, gelu's backward into
# mlp.c_proj's input gradient, the residual add into the layernorm after it) and on a small GPT
# with biases, the tanh gelu, odd widths, every layer straight-line (no repeat loop) and
# --recompute all (the forward rerun inside the backward).
# The sources show the fusion: the fused kernels in place of the gelu's calls, and none of them
# with --no-fuse.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
steps=${FUSE_STEPS:-6}
python3 samples/gen_gpt.py --layers 2 --heads 2 --embd 36 --context 16 --bias --gelu tanh --flat \
  --name gpt_small | sed "s#\"../../shared/data/#\"$PWD/../shared/data/#" >"$tmp/small.json"
# count FILE PATTERN: the lines of FILE that call PATTERN
count() { grep -c "^ *$2(" "$1"; }
for m in gpt_char small; do
  model=samples/gpt_char.json
  [ $m = small ] && model=$tmp/small.json
  for v in fused nofuse; do
    flags=()
    [ $v = nofuse ] && flags=(--no-fuse)
    "$pipec" compile "$model" "${flags[@]}" -o "$tmp/$m.$v" 2>"$tmp/err" || {
      bad "compile $m $v: $(tail -2 "$tmp/err")"
      continue
    }
  done
  src=$tmp/$m.fused/rank0.c ref=$tmp/$m.nofuse/rank0.c
  check "$m: fused source calls pr_linear_gelu_fwd" test "$(count "$src" pr_linear_gelu_fwd)" -ge 1
  check "$m: fused source calls pr_linear_bwd_x_gelu" test "$(count "$src" pr_linear_bwd_x_gelu)" -ge 1
  check "$m: fused source has no separate gelu call" test "$(count "$src" 'pr_gelu_[fb]w[d]')" -eq 0
  check "$m: fused source calls pr_add_layernorm_fwd" test "$(count "$src" pr_add_layernorm_fwd)" -ge 1
  check "$m: --no-fuse source has no fused call" \
    test "$(count "$ref" 'pr_\(linear_gelu_fwd\|linear_bwd_x_gelu\|add_layernorm_fwd\)')" -eq 0
  check "$m: --no-fuse source calls pr_gelu_fwd" test "$(count "$ref" pr_gelu_fwd)" -ge 1
  for t in 1 2; do
    for v in nofuse fused; do
      "$tmp/$m.$v/bin/train" --steps "$steps" --threads $t --quiet --eval-every 3 --eval-batches 2 \
        --loss-log "$tmp/$m.$v.t$t.loss" --save "$tmp/$m.$v.t$t.st" >"$tmp/out" 2>&1 ||
        bad "run $m $v threads $t: $(tail -3 "$tmp/out")"
    done
    same_bits "$m: fused, $t threads" "$tmp/$m.nofuse.t$t" "$tmp/$m.fused.t$t"
  done
done
# --recompute all: the forward's fused call runs again inside the backward.
"$pipec" compile "$tmp/small.json" --recompute all -o "$tmp/rec" 2>"$tmp/err" || bad "compile recompute"
check "recompute: the fused forward call" test "$(count "$tmp/rec/rank0.c" pr_linear_gelu_fwd)" -ge 2
"$tmp/rec/bin/train" --steps "$steps" --threads 1 --quiet --eval-every 3 --eval-batches 2 \
  --loss-log "$tmp/rec.loss" --save "$tmp/rec.st" >"$tmp/out" 2>&1 || bad "run recompute"
same_bits "recompute all, fused" "$tmp/small.nofuse.t1" "$tmp/rec"
finish
