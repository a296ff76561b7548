#!/usr/bin/env bash
# The fused epilogues (codegen/segment.c, the registry's OpDef.epilogue and FuseDef): a program
# compiled with them (the default) trains byte for byte like the one compiled with --no-fuse (one
# kernel call per node): the loss log, the parameters and the optimizer state, at 1 and 2
# threads, on gpt_char (its exact gelu fused into c_fc's product, gelu's backward into
# mlp.c_proj's input gradient, the residual add into the layernorm after it) and on a small GPT
# with biases, the tanh gelu, odd widths, every layer straight-line (no repeat loop) and
# --recompute all (the forward rerun inside the backward); and on llama_char, whose SwiGLU gate
# mul(silu(w1), w3) the fuse pass (compiler/fuse.c) makes one silu_mul, forward and backward, at 1
# and 2 threads and with --recompute all, and not at --precision bf16 (the unfused ops round
# silu(g) to 16 bits).
# The sources show the fusion: the fused kernels in place of the gelu's (silu's and mul's) calls,
# and none of them with --no-fuse.
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
# llama_char: SwiGLU's silu * mul as silu_mul (the fuse pass), fewer steps.
lsteps=${FUSE_STEPS:-3}
for v in fused nofuse; do
  flags=()
  [ $v = nofuse ] && flags=(--no-fuse)
  "$pipec" compile samples/llama_char.json "${flags[@]}" -o "$tmp/llama.$v" 2>"$tmp/err" ||
    bad "compile llama_char $v: $(tail -2 "$tmp/err")"
done
"$pipec" compile samples/llama_char.json --recompute all -o "$tmp/llama.rec" 2>"$tmp/err" ||
  bad "compile llama_char --recompute all: $(tail -2 "$tmp/err")"
src=$tmp/llama.fused/rank0.c ref=$tmp/llama.nofuse/rank0.c
check "llama_char: fused source calls pr_silu_mul_fwd" test "$(count "$src" pr_silu_mul_fwd)" -ge 1
check "llama_char: fused source calls pr_silu_mul_bwd" test "$(count "$src" pr_silu_mul_bwd)" -ge 1
check "llama_char: fused source has no silu call" test "$(count "$src" 'pr_silu_[fb]wd')" -eq 0
# muls FILE: the binary calls of op 2 (mul: only SwiGLU's gate in llama_char), a statement a line
muls() { tr '\n' ' ' <"$1" | sed 's/;/;\n/g' | grep -c 'pr_binary_[fb]wd(.*/\*op\*/ 2,'; }
check "llama_char: fused source has no gate mul" test "$(muls "$src")" -eq 0
check "llama_char: --no-fuse source has the gate mul" test "$(muls "$ref")" -ge 2
check "llama_char: --no-fuse source has no silu_mul call" test "$(count "$ref" 'pr_silu_mul_[fb]wd')" -eq 0
check "llama_char: --no-fuse source calls pr_silu_fwd" test "$(count "$ref" pr_silu_fwd)" -ge 1
check "llama_char: recompute reruns silu_mul" test "$(count "$tmp/llama.rec/rank0.c" pr_silu_mul_fwd)" -ge 2
"$pipec" print --dump-after=fuse samples/llama_char.json >"$tmp/llama.ir" 2>"$tmp/err" || bad "dump fuse"
check "llama_char: --dump-after=fuse shows silu_mul and no silu" \
  bash -c "grep -q ' = silu_mul(layers.0.feed_forward.w1, layers.0.feed_forward.w3)' '$tmp/llama.ir' &&
           ! grep -q ' = silu(' '$tmp/llama.ir'"
"$pipec" compile samples/llama_char.json --precision bf16 --no-build -o "$tmp/llama.bf16" 2>"$tmp/err" ||
  bad "compile llama_char bf16: $(tail -2 "$tmp/err")"
check "llama_char bf16: not fused" test "$(count "$tmp/llama.bf16/rank0.c" 'pr_silu_mul_[fb]wd')" -eq 0
runl() { # NAME DIR THREADS
  "$2/bin/train" --steps "$lsteps" --threads "$3" --quiet --eval-every 2 --eval-batches 1 \
    --loss-log "$tmp/$1.loss" --save "$tmp/$1.st" >"$tmp/out" 2>&1 || bad "run $1: $(tail -3 "$tmp/out")"
}
for t in 1 2; do
  runl llama.nofuse.t$t "$tmp/llama.nofuse" $t
  runl llama.fused.t$t "$tmp/llama.fused" $t
  same_bits "llama_char: silu_mul, $t threads" "$tmp/llama.nofuse.t$t" "$tmp/llama.fused.t$t"
done
runl llama.rec "$tmp/llama.rec" 1
same_bits "llama_char: recompute all, silu_mul" "$tmp/llama.nofuse.t1" "$tmp/llama.rec"
finish
