#!/usr/bin/env bash
# The equality matrix of pipeline parallelism (docs/pipeline.md): for one MODEL (mlp_digits,
# gpt_char: a 2-layer flat character GPT, skip_net, or llama_char), every schedule (gpipe, 1f1b,
# interleaved with --virtual 2, zb-h1; zb-v, V = 2 implied, at S = 2 and 4) x S in {1, 2, 3, 4} x
# M in {1, 2, 3, 4, 8} where legal is compiled once, launched through OUT/launch.sh (mpirun, one
# process per rank) for 3 steps with --save and --loss-log, and its per-step losses, saved
# parameters (F) and optimizer state (F.optim) must be byte for byte those of the one-stage
# program (bin/train) with the same M; so must the final evaluation line, printed once, by the
# rank with the loss (the last; zb-v: rank 0, which holds the first and the last stage). Illegal
# combinations must fail to compile with their message (interleaved at S = 1; M not a multiple of
# S; more stages than the model has places to cut). skip_net is cut by --split lists chosen so
# that every cut crosses the skip span (a0 -> skip) and separates the two uses of shared.weight;
# gpt_char is flat, so the automatic partition can cut inside a layer (its residual adds then
# cross stages too) and at S > 1 always separates the tied embedding (first stage) from the head
# (last stage). The test asserts these properties of each cut from the comm pass's dump, so an
# easy cut cannot pass silently.
# A configuration that generates the programs (and launch.sh) of one run before is that job, and
# is not run twice; each distinct rank program is built once (tests/e2e/cc_cache.sh).
# In the sanitizer tree (the programs are built with AddressSanitizer) a reduced matrix runs:
# each schedule once per S. PIPELINE_MATRIX=full|reduced overrides the choice.
# llama_char (samples/llama_char.json as shipped: RMSNorm, RoPE, grouped-query attention, SwiGLU;
# 4 layers, each a place to cut, so V = 2 at S = 2 only) runs the reduced matrix by default, and
# then the features against the one-stage program of the same options: --recompute (all or a list
# of stages; the plain reference), --replicas 2 (the reference: S = 1 at D = 2), --precision bf16
# (the reference: S = 1 in bf16), combinations, and two CSV schedules no built-in makes; in the
# sanitizer tree (PIPELINE_MATRIX=short, llama_char only) 7 configurations with every schedule,
# S = 1, 2, 4 and each feature once.
#
# Usage: pipeline_matrix.sh PIPEC ROOT MODEL
pipec=$1
root=$2
model=$3
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
st() { python3 "$root/tests/e2e/st_tool.py" "$@"; }
. "$root/tests/e2e/mpi_env.sh"
# Every global batch is a multiple of every M of the matrix.
case $model in
mlp_digits)
  file=samples/mlp_digits.json
  ;;
gpt_char)
  file=$tmp/gpt_char_l2.json
  gpt_char_l2 "$file"
  ;;
skip_net)
  file=$tmp/skip_net.json
  python3 "$root/tests/skip_net_table.py" samples/skip_net.json "$file" "$tmp/skip.csv"
  ;;
llama_char)
  file=$tmp/llama_char.json
  sed "s#\"../../shared/data/#\"$root/../shared/data/#" samples/llama_char.json >"$file"
  ;;
*)
  echo "usage: pipeline_matrix.sh PIPEC ROOT mlp_digits|gpt_char|skip_net|llama_char" >&2
  exit 2
  ;;
esac
common=(--batch 24)
run_args=(--steps 3 --threads 1 --quiet --eval-every 0 --eval-batches 1)

# skip_net's cuts, per S and V (stage v on rank v mod S). Each cut puts a0 and skip on different
# stages and body1 and body2 (the two uses of shared.weight) on different stages; at S = 2, V = 2
# stages 0 and 2 (rank 0) hold both uses and both ends of the skip: a channel and an exchange
# between two stages of one rank.
skip_split() {
  case "$1.$2" in
  2.1) echo gate ;;                                    # stem..t1 | gate..loss
  3.1) echo gate,skip ;;                               # a0 to two stages; shared on v0 and v2
  4.1) echo t1,parts,skip ;;                           # body1 on v0, body2 on v3
  2.2) echo t1,skip,t2 ;;                              # a0 v0 -> skip v2, both on rank 0
  3.2) echo body1,gate,parts,wide,skip ;;              # 6 stages
  4.2) echo a0,body1,gate,gated,p0,wide.relu,skip ;;   # 8 stages
  esac
}

# stage_of DUMP NODE: the stage whose node list names NODE (the partition table of the dump).
stage_of() {
  awk -v n="$2" '/^stage [0-9]+ \(rank/ { s = $2 }
    /^  nodes / { sub(/^  nodes +/, ""); k = split($0, a, ", "); for (i = 1; i <= k; i++) if (a[i] == n) print s }' "$1"
}

# cut_ok NAME ARGS...: the comm pass's dump for these arguments (of one(), whose S and V it reads)
# shows S x V stages and the cut this model must test (skip_net: a0 sent to skip's stage, shared.weight exchanged between the stages of body1
# and body2; gpt_char: the tied pair exchanged between the first and the last stage).
cut_ok() {
  local name=$1
  shift
  local d=$tmp/dump.txt
  if ! "$pipec" print "$@" --dump-after=partition,comm "$file" >"$d" 2>"$tmp/err"; then
    bad "$name: --dump-after=comm: $(head -1 "$tmp/err")"
    return
  fi
  local nst want=$((S * V))
  nst=$(grep -c '^stage [0-9]* (rank' "$d")
  check "$name: the partition has S x V = $want stages ($nst)" test "$nst" = "$want"
  case $model in
  skip_net)
    local a s b1 b2
    a=$(stage_of "$d" a0) s=$(stage_of "$d" skip) b1=$(stage_of "$d" body1) b2=$(stage_of "$d" body2)
    check "$name: the cut is inside the skip span (a0 on v$a, skip on v$s)" \
      test -n "$a" -a -n "$s" -a "$a" != "$s"
    check "$name: a0 is sent from v$a to skip's stage v$s" grep -qE "^c[0-9]+ 'a0' v$a -> v$s .* fwd$" "$d"
    check "$name: the uses of shared.weight are apart (body1 on v$b1, body2 on v$b2) and exchanged" \
      grep -qE "^exchange 'shared.weight' stages (v[0-9]+ )*v$b1 (v[0-9]+ )*v$b2 " "$d"
    check "$name: body1 and body2 on different stages" test -n "$b1" -a "$b1" != "$b2"
    # S = 2, V = 2: both ends of the skip and both uses of shared.weight on rank 0 (v0, v2).
    if [[ " $* " == *" --stages 2 "*" --virtual 2 "* ]]; then
      check "$name: a0 (v$a), skip (v$s), body1 (v$b1), body2 (v$b2) all on rank 0" \
        test $((a % 2)) = 0 -a $((s % 2)) = 0 -a $((b1 % 2)) = 0 -a $((b2 % 2)) = 0
    fi
    ;;
  gpt_char)
    check "$name: the tied embedding (v0) and head (v$((nst - 1))) are apart and exchanged" \
      grep -qE "^exchange 'transformer.wte.weight' stages v0 v$((nst - 1)) " "$d"
    check "$name: the head is on the last stage" test "$(stage_of "$d" logits)" = $((nst - 1))
    ;;
  esac
}

# The reference of each M: the one-stage program, bin/train, run directly. With options that
# change the bits (ref_dir: --replicas D, --precision P), the one-stage program compiled with them
# (--replicas: its launch.sh, D ranks; the eval line is then replica 0's, world rank 0).
declare -A ref_ok
# ref_dir M OPTS...: the reference's directory (one per M and options).
ref_dir() {
  local M=$1
  shift
  echo "$tmp/ref$M$(echo "$*" | tr -c 'A-Za-z0-9\n' _)"
}
ref() {
  local M=$1 o
  o=$(ref_dir "$@")
  shift
  local name="reference M=$M${*:+ $*}"
  if ! "$pipec" compile "$file" "${common[@]}" --microbatches "$M" "$@" -o "$o" >/dev/null 2>"$tmp/err"; then
    bad "$name: compile: $(head -3 "$tmp/err")"
    return
  fi
  local prog=$o/bin/train
  [ -x "$prog" ] || prog=$o/launch.sh
  if ! timeout -k 5 120 "$prog" "${run_args[@]}" --save "$o/p.st" --loss-log "$o/loss.txt" </dev/null >"$o/out" 2>"$o/err"; then
    bad "$name: run: $(head -3 "$o/err")"
    return
  fi
  sed -n 's/^\(\[rank 0\] \)\{0,1\}\(eval .*\)/\2/p' "$o/out" >"$o/eval"
  if [ "$(wc -l <"$o/loss.txt")" -ne 3 ] || [ "$(wc -l <"$o/eval")" -ne 1 ] || grep -qiE 'nan|inf' "$o/loss.txt"; then
    bad "$name: not 3 finite losses and one eval line: $(tr '\n' ' ' <"$o/loss.txt") / $(cat "$o/eval")"
    return
  fi
  ref_ok[$o]=1
}

# same NAME DIR REF: DIR's run (in DIR/run) equals the reference in REF; mismatches say which bytes.
same() {
  local name=$1 d=$2 r=$3 e=0
  if ! cmp -s "$d/loss.txt" "$r/loss.txt"; then
    bad "$name: loss log differs from S = 1: $(diff "$r/loss.txt" "$d/loss.txt" | grep '^[<>]' | tr '\n' ' ')"
    e=1
  fi
  local f
  for f in p.st p.st.optim; do
    if ! cmp -s "$d/$f" "$r/$f"; then
      bad "$name: $f differs from S = 1: $(cmp "$r/$f" "$d/$f" 2>&1 | head -1); $(st diff "$r/$f" "$d/$f" 2>&1 | head -5 | tr '\n' ';')"
      e=1
    fi
  done
  if ! cmp -s "$d/eval" "$r/eval"; then
    bad "$name: eval line '$(cat "$d/eval")', S = 1: '$(cat "$r/eval")'"
    e=1
  fi
  [ $e -eq 0 ] && ok
}

# The jobs already run: a configuration whose programs and launch.sh are byte for byte those of
# one run before (but for the "Command" lines that quote pipec's command line: mlp_digits' zb-h1
# programs are 1f1b's, gpipe's at M = 1 are 1f1b's) is that job; it is not run again. job_of[KEY]
# names the configuration that ran it, job_ok[KEY] is 1 when its run passed. Each compile runs
# the C compiler through cc_cache.sh, which builds each distinct rank program once.
declare -A job_of job_ok
export CC_CACHE_DIR=$tmp/cc-cache CC_CACHE_CC=${CC:-cc} CC=$root/tests/e2e/cc_cache.sh
# job_key DIR LR: the key of DIR's job (its launch.sh and rank programs' sources, LR the rank that
# reports the loss).
job_key() {
  {
    echo "loss rank $2"
    grep -v '^# Command' "$1/launch.sh"
    for f in "$1"/rank*.c; do
      echo "== ${f##*/}"
      grep -v '^// Command' "$f"
    done
  } | md5sum | cut -c1-32
}

# one SCHEDULE S M [OPTS...]: compile the configuration once, launch it (unless the same job ran),
# compare with the reference of M and OPTS but --recompute (recomputing changes no bits; --replicas
# and --precision do: their one-stage program is the reference). SCHEDULE csv:NAME is the
# schedule $tmp/NAME.csv (its rows give S and V; S is the number of rows).
declare -A cfg_time
one() {
  local sch=$1 S=$2 M=$3 V=1 lr=$(($2 - 1)) # lr: the loss's rank
  shift 3
  local opts=("$@") refopts=() D=1 i
  for ((i = 0; i < ${#opts[@]}; i++)); do
    case ${opts[i]} in
    --recompute) i=$((i + 1)) ;;
    --replicas) D=${opts[i + 1]} refopts+=("${opts[i]}") ;;
    *) refopts+=("${opts[i]}") ;;
    esac
  done
  [ "$sch" = interleaved ] && V=2
  [ "$sch" = zb-v ] && [ "$S" -gt 1 ] && V=2 lr=0 # V = 2 implied (no --virtual)
  local csv='' n
  if [[ $sch == csv:* ]]; then # V: the stages over the rows; lr: the row with the last stage
    csv=$tmp/${sch#csv:}.csv
    n=$(grep -o '[0-9]*F' "$csv" | tr -d F | sort -n | tail -1)
    V=$(((n + 1) / S)) lr=$(grep -n "\b${n}F" "$csv" | head -1 | cut -d: -f1)
    lr=$((lr - 1))
  fi
  local name="$model $sch S=$S M=$M${opts[*]:+ ${opts[*]}}" o rd
  o=$tmp/$sch.$S.$M$(echo "${opts[*]}" | tr -c 'A-Za-z0-9\n' _)
  rd=$(ref_dir "$M" "${refopts[@]}")
  [ -n "${ref_ok[$rd]:-}" ] || { bad "$name: no reference for M=$M ${refopts[*]}"; return; }
  local args=("${common[@]}" --microbatches "$M" --stages "$S" --schedule "$sch")
  [ -n "$csv" ] && args=("${common[@]}" --microbatches "$M" --schedule "$csv")
  [ "$V" -gt 1 ] && [ "$sch" = interleaved ] && args+=(--virtual "$V")
  args+=("${opts[@]}")
  if [ "$model" = skip_net ] && [ "$S" -gt 1 ]; then args+=(--split "$(skip_split "$S" "$V")"); fi
  [ "$S" -gt 1 ] && cut_ok "$name" "${args[@]}"
  local t0
  t0=$(date +%s.%N)
  if ! "$pipec" compile "$file" "${args[@]}" -o "$o" >/dev/null 2>"$tmp/err"; then
    bad "$name: compile: $(head -3 "$tmp/err")"
    return
  fi
  local r
  for r in $(seq 0 $((S - 1))); do
    [ -x "$o/bin/rank$r" ] || { bad "$name: no $o/bin/rank$r"; return; }
  done
  [ -x "$o/launch.sh" ] || { bad "$name: no launch.sh"; return; }
  local key
  key=$(job_key "$o" "$lr")
  if [ -n "${job_of[$key]:-}" ]; then
    check "$name: the programs and launch.sh of ${job_of[$key]}, byte for byte: its job (run and compared$([ "${job_ok[$key]}" = 1 ] || echo ': FAILED'))" \
      test "${job_ok[$key]}" = 1
    echo "same job as ${job_of[$key]}: $name"
    return
  fi
  local fail0=$fail
  job_of[$key]=$name job_ok[$key]=0
  mkdir -p "$o/run"
  timeout -k 5 120 "$o/launch.sh" "${run_args[@]}" --save "$o/run/p.st" --loss-log "$o/run/loss.txt" \
    </dev/null >"$o/run/out" 2>"$o/run/err"
  local rc=$?
  cfg_time[$name]=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ $rc -ne 0 ]; then
    bad "$name: launch.sh exit $rc: stderr: $(grep -v '^$' "$o/run/err" | head -3 | tr '\n' ' ') stdout: $(grep -v '^$' "$o/run/out" | tail -3 | tr '\n' ' ')"
    return
  fi
  # The evaluation: one line, by the loss's rank (prefixed when S > 1 or D > 1; replica 0's), equal
  # to S = 1's.
  if [ "$S" -gt 1 ] || [ "$D" -gt 1 ]; then
    check "$name: one eval line, by rank $lr" \
      test "$(grep -c '^\[rank [0-9]*\] eval ' "$o/run/out")" = 1 -a "$(grep -c "^\[rank $lr\] eval " "$o/run/out")" = 1
    sed -n "s/^\[rank $lr\] \(eval .*\)/\1/p" "$o/run/out" >"$o/run/eval"
  else
    grep '^eval ' "$o/run/out" >"$o/run/eval"
  fi
  local recomputes=0
  for ((i = 0; i < ${#opts[@]}; i++)); do [ "${opts[i]}" = --recompute ] && recomputes=1; done
  [ $recomputes = 1 ] && check "$name: B reruns the forward" grep -q "Recompute: the forward" "$o"/rank*.c
  same "$name" "$o/run" "$rd"
  [ "$fail" -eq "$fail0" ] && job_ok[$key]=1
  echo "ran $name: ${cfg_time[$name]} s"
}

# err_is NAME RC REGEX ARGS...: compiling with ARGS fails with exit RC (1: the model, 2: usage)
# and REGEX matches its first line.
err_is() {
  local name=$1 want=$2 re=$3
  shift 3
  "$pipec" compile "$file" "${common[@]}" "$@" -o "$tmp/illegal" >/dev/null 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne "$want" ]; then
    bad "$name: exit $rc, want $want ($(head -1 "$tmp/err"))"
  elif ! head -1 "$tmp/err" | grep -qE -- "$re"; then
    bad "$name: '$(head -1 "$tmp/err")' does not match '$re'"
  else
    ok
  fi
}

# The configurations: SCHEDULE S M. Full: every legal one. Reduced: each schedule once per S.
mode=${PIPELINE_MATRIX:-}
Ms=(1 2 3 4 8)
ref 4
if [ -z "$mode" ]; then
  mode=full
  # llama_char: each schedule once per S where legal (its full matrix takes 90 s on 2 cores); in
  # the sanitizer tree a short list (the reduced matrix and features take 6 minutes there)
  if sanitized "$tmp/ref4/bin/train"; then
    mode=reduced
    [ "$model" = llama_char ] && mode=short
  elif [ "$model" = llama_char ]; then
    mode=reduced
  fi
fi
[ "$mode" = short ] && Ms=(2 4)
for M in "${Ms[@]}"; do [ "$M" = 4 ] || ref "$M"; done
vmax_s=4
[ "$model" = mlp_digits ] && vmax_s=3 # 6 forward nodes: S x 2 <= 6
[ "$model" = llama_char ] && vmax_s=2 # 5 places to start a stage (the first node, each layer)
configs=()
if [ "$mode" = full ]; then
  for S in 1 2 3 4; do
    for M in "${Ms[@]}"; do
      for sch in gpipe 1f1b interleaved zb-h1; do
        if [ "$sch" = interleaved ] && { [ "$S" -lt 2 ] || [ $((M % S)) -ne 0 ] || [ "$S" -gt "$vmax_s" ]; }; then
          continue
        fi
        configs+=("$sch $S $M")
      done
      # zb-v at S = 2 and 4 (its 2S stages where the model has them)
      if { [ "$S" = 2 ] || [ "$S" = 4 ]; } && [ "$S" -le "$vmax_s" ]; then configs+=("zb-v $S $M"); fi
    done
  done
else
  # Every schedule once per S > 1 (M < S, M = S, M > S, M not a multiple of S among them).
  configs=("zb-h1 1 4" "gpipe 2 3" "1f1b 2 1" "zb-h1 2 4" "interleaved 2 4"
    "gpipe 3 8" "1f1b 3 4" "zb-h1 3 2" "interleaved 3 3"
    "gpipe 4 2" "1f1b 4 8" "zb-h1 4 3" "interleaved 4 4")
  [ "$vmax_s" -lt 4 ] && unset 'configs[12]' # no 8 stages
  [ "$vmax_s" -lt 3 ] && unset 'configs[8]'  # no 6 stages
  # zb-v at S = 2 (M < 2S - 1: the warm-up cut short) and at S = 4 (mlp_digits: S = 3)
  configs+=("zb-v 2 2")
  if [ "$vmax_s" = 4 ]; then configs+=("zb-v 4 8"); elif [ "$vmax_s" = 3 ]; then configs+=("zb-v 3 8"); fi
fi
if [ "$model" = llama_char ]; then
  # The features against the one-stage program: --recompute (the plain reference), --replicas 2
  # (S = 1, D = 2: its 2 ranks), --precision bf16 (S = 1 in bf16), two of them at once, and
  # schedules from CSV files that no built-in makes (sched_csv.sh's gpipe/1f1b hybrid with B and
  # W split on stage 1 only, and looped BFS over two stages per rank), each at some S and schedule.
  printf '%s\n' 0F0,0F1,0F2,0B0,0F3,0B1,0B2,0B3 1F0,1I0,1F1,1I1,1W0,1F2,1I2,1W1,1F3,1I3,1W2,1W3 \
    >"$tmp/hybrid.csv"
  printf '%s\n' 0F0,0F1,0F2,0F3,2F0,2F1,2F2,2F3,2B0,2B1,2B2,2B3,0B0,0B1,0B2,0B3 \
    1F0,1F1,1F2,1F3,3F0,3F1,3F2,3F3,3B0,3B1,3B2,3B3,1B0,1B1,1B2,1B3 >"$tmp/bfs.csv"
  ref 4 --replicas 2
  ref 4 --precision bf16
  if [ "$mode" = short ]; then # every schedule, S = 1, 2, 4, each feature once
    configs=("zb-h1 1 4" "gpipe 4 2" "zb-v 2 2" "1f1b 2 4 --recompute all"
      "interleaved 2 4 --replicas 2" "zb-h1 4 4 --precision bf16" "csv:hybrid 2 4")
  else
    ref 4 --precision bf16 --replicas 2
    configs+=("1f1b 1 4 --recompute all" "1f1b 2 4 --recompute all" "interleaved 2 4 --recompute 0,3"
      "zb-h1 4 4 --recompute all" "zb-v 2 4 --recompute all" "csv:hybrid 2 4 --recompute 1"
      "1f1b 2 4 --replicas 2" "zb-h1 2 4 --replicas 2" "interleaved 2 4 --replicas 2"
      "zb-v 2 4 --replicas 2" "gpipe 4 4 --replicas 2"
      "gpipe 2 4 --precision bf16" "interleaved 2 4 --precision bf16" "zb-v 2 4 --precision bf16"
      "1f1b 4 4 --precision bf16" "zb-h1 4 4 --precision bf16 --recompute all"
      "csv:bfs 2 4 --precision bf16" "zb-h1 2 4 --precision bf16 --replicas 2"
      "csv:hybrid 2 4" "csv:bfs 2 4")
  fi
fi
echo "$model: ${#configs[@]} configurations ($mode matrix)"
t_all=$(date +%s)
for c in "${configs[@]}"; do
  # shellcheck disable=SC2086 # three words
  one $c
done

# Illegal combinations: the compile error names what is needed.
err_is "interleaved at S = 1" 2 '^pipec: --virtual 2 needs --stages >= 2: interleaving runs the stages of several ranks$' \
  --stages 1 --schedule interleaved --virtual 2 --microbatches 2
split=()
[ "$model" = skip_net ] && split=(--split "$(skip_split 3 2)")
[ "$model" = llama_char ] || err_is "interleaved S=3 M=4" 1 ': error: schedule interleaved: needs the microbatches M a multiple of the stages S \(M = 4, S = 3\)$' \
  --stages 3 --schedule interleaved --virtual 2 --microbatches 4 "${split[@]}"
if [ "$model" = llama_char ]; then
  err_is "interleaved S=3 (6 stages)" 1 ': error: --stages 6: the model has only 5 places to start a stage \(the first node and the split_before marks\)$' \
    --stages 3 --schedule interleaved --virtual 2 --microbatches 3
  err_is "zb-v S=4 (8 stages)" 1 ': error: --stages 8: the model has only 5 places to start a stage \(the first node and the split_before marks\)$' \
    --stages 4 --schedule zb-v --microbatches 4
fi
if [ "$model" = mlp_digits ]; then
  err_is "interleaved S=4 (8 stages)" 1 ': error: --stages 8: the model has only 6 forward nodes$' \
    --stages 4 --schedule interleaved --virtual 2 --microbatches 4
  err_is "zb-v S=4 (8 stages)" 1 ': error: --stages 8: the model has only 6 forward nodes$' \
    --stages 4 --schedule zb-v --microbatches 4
fi
err_is "zb-v --virtual 3" 2 '^pipec: --virtual 3: --schedule zb-v runs two stages per rank in a V \(--virtual 2, or none\)$' \
  --stages 2 --schedule zb-v --virtual 3 --microbatches 4
echo "$model: ${#configs[@]} configurations ${#job_of[@]} jobs run, rank programs built $(grep -c '^miss' "$CC_CACHE_DIR/log" 2>/dev/null) (and copied $(grep -c '^hit' "$CC_CACHE_DIR/log" 2>/dev/null)) in $(($(date +%s) - t_all)) s"
finish
