#!/usr/bin/env bash
# The calibrated simulator (issue 12, docs/pipeline.md "Profiling and the simulator"): for each
# schedule and S, `pipec profile` measures the costs on this machine, `pipec plan --costs`
# predicts the step, and the real program runs (compiled with the same --costs, so the same
# partition) for its median step time; then the automatic partitioner against an even split
# (equal blocks per stage) on a GPT with a large vocabulary, whose embedding and head dominate
# the edge stages. Prints markdown tables (docs/benchmarks.md); progress on stderr.
#
#   bench/predict.sh PIPEC        e.g. bench/predict.sh build/bin/pipec
#
# The last column is the median step of the profiling run itself (the slowest rank's): how much
# of an error is the prediction's and how much the machine's change between the two runs.
#
# Environment: BENCH_STEPS (steps of each measured run; the program's median skips the first 5;
# default 30, at least 11), BENCH_PROFILE_STEPS (steps of each profile, default 20),
# BENCH_STAGES (default "2 4"), BENCH_SCHEDULES (default "gpipe 1f1b interleaved zb-h1 zb-v": a
# schedule this pipec does not know is skipped), BENCH_M (microbatches, default 8), BENCH_THREADS
# (threads per rank, default 1).
#
# Models (written here by samples/gen_gpt.py): gpt_bench, the character GPT at 8 layers (so that
# interleaved has 2 blocks per virtual stage at S = 4) of width 64, context 64, batch 2 rows per
# microbatch, on tinyshakespeare; gpt_vocab, 8 layers of width 64, context 32, vocabulary 8192,
# on tinyshakespeare re-tokenised into 8192 ids (each pair of characters one id: synthetic but
# the shapes and costs are the real ones), tied embedding and head.
#
# Honesty: a machine with fewer cores than S oversubscribes (the ranks share cores). The profile
# then gives the actions' CPU seconds and the simulator replays the sharing. The ranks are bound
# to cores (PIPEC_BIND=core, rank r on core r mod cores; PIPEC_BIND=none to leave them to the
# kernel): unbound, the kernel picks which ranks share a core at each launch, and the same
# program's step moves by 15-30% with its choice (docs/benchmarks.md), which nothing known
# before the run can predict. Run it on a quiet machine. Exit status: 0, or 1 when a run failed,
# 2 on a usage error.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "$@"
bench_text
steps=${BENCH_STEPS:-30}
psteps=${BENCH_PROFILE_STEPS:-20}
stages=${BENCH_STAGES:-2 4}
schedules=${BENCH_SCHEDULES:-gpipe 1f1b interleaved zb-h1 zb-v}
M=${BENCH_M:-8}
threads=${BENCH_THREADS:-1}
(( steps >= 11 )) || { echo "$0: BENCH_STEPS must be at least 11 (the median skips 5)" >&2; exit 2; }
status=0
export OMP_NUM_THREADS=$threads
export PIPEC_BIND=${PIPEC_BIND-core} # used only where the ranks outnumber the cores (launch.sh)

"$py" "$root/samples/gen_gpt.py" --layers 8 --embd 64 --heads 4 --context 64 --name gpt_bench \
  -o "$tmp/gpt_bench.json"
"$py" "$root/samples/gen_gpt.py" --layers 8 --embd 64 --heads 4 --context 32 --vocab 8192 \
  --name gpt_vocab -o "$tmp/gpt_vocab.json"
"$py" - "$data" "$tmp" <<'PY'
import json, struct, sys
data, tmp = sys.argv[1], sys.argv[2]
text = open(data, "rb").read()
chars = sorted(set(text))
idx = {c: i for i, c in enumerate(chars)}
ids = [(idx[text[i]] * len(chars) + idx[text[i + 1]]) % 8192 for i in range(0, len(text) - 1, 2)]
open(tmp + "/vocab.tokens", "wb").write(struct.pack("<%dH" % len(ids), *ids))
for name, tok in (("gpt_bench", False), ("gpt_vocab", True)):
    m = json.load(open("%s/%s.json" % (tmp, name)))
    d = m["training"]["data"]
    d["path"] = tmp + "/vocab.tokens" if tok else data
    if tok:
        d["kind"] = "tokens_u16"
    json.dump(m, open("%s/%s.json" % (tmp, name), "w"))
PY

# run_case MODEL S SCHED EXTRA...: profile, predict, run; sets pred and meas (ms) or returns 1.
run_case() {
  local model=$1 S=$2 sched=$3
  shift 3
  local o=(--stages "$S" --schedule "$sched" --microbatches "$M" --batch $((2 * M)) "$@")
  local c="$tmp/costs-$(basename "$model" .json)-$sched-$S.json"
  echo "== $(basename "$model" .json) $sched S=$S $*" >&2
  "$pipec" profile "$model" "${o[@]}" -o "$c" -- --steps "$psteps" --threads "$threads" \
    >"$tmp/log" 2>&1 || { tail -n 5 "$tmp/log" >&2; return 1; }
  pred=$("$pipec" plan "$model" "${o[@]}" --costs "$c" 2>&1 |
    sed -n 's/^predicted step time \([0-9.]*\) ms.*/\1/p')
  "$pipec" run "$model" "${o[@]}" --costs "$c" -o "$tmp/prog" -- --steps "$steps" \
    --threads "$threads" --eval-batches 1 --log-every 1000000 >"$tmp/log" 2>&1 ||
    { tail -n 5 "$tmp/log" >&2; return 1; }
  meas=$(sed -n 's/.*median step time \([0-9.]*\) ms.*/\1/p' "$tmp/log" | head -n 1)
  prof=$("$py" -c 'import json, sys; print("%.3f" % (1e3 * max(json.load(open(sys.argv[1]))["measured"]["step"])))' "$c")
  [[ -n $pred && -n $meas ]]
}
err() { awk -v p="$1" -v m="$2" 'BEGIN { printf "%+.1f", (p - m) / m * 100 }'; }

echo "### Predicted vs measured step time ($(nproc --all) cores, M = $M, $threads thread(s) per rank)"
echo
echo "| schedule | S | predicted ms | measured ms | error % | step in the profile ms |"
echo "| --- | --- | --- | --- | --- | --- |"
for S in $stages; do
  for sched in $schedules; do
    if ! "$pipec" plan "$tmp/gpt_bench.json" --stages "$S" --schedule "$sched" --microbatches "$M" \
      --batch $((2 * M)) >/dev/null 2>"$tmp/err"; then
      if grep -q "unknown schedule" "$tmp/err"; then echo "skip $sched: this pipec does not know it" >&2; continue; fi
    fi
    extra=()
    [[ $sched == interleaved ]] && extra=(--virtual 2)
    # A V-shaped schedule (zb-v) may want two stages per rank said explicitly.
    if ! "$pipec" plan "$tmp/gpt_bench.json" --stages "$S" --schedule "$sched" --microbatches "$M" \
      --batch $((2 * M)) "${extra[@]}" >/dev/null 2>&1 &&
      "$pipec" plan "$tmp/gpt_bench.json" --stages "$S" --schedule "$sched" --microbatches "$M" \
        --batch $((2 * M)) --virtual 2 >/dev/null 2>&1; then
      extra=(--virtual 2)
    fi
    if run_case "$tmp/gpt_bench.json" "$S" "$sched" "${extra[@]}"; then
      echo "| $sched | $S | $pred | $meas | $(err "$pred" "$meas") | $prof |"
    else
      echo "| $sched | $S | failed | failed | | |"
      status=1
    fi
  done
done

echo
echo "### Automatic partition vs even split (gpt_vocab: vocabulary 8192, width 64, 8 layers; 1f1b)"
echo
echo "One profile at the even split; both plans and both programs use its costs file."
echo
echo "| S | split | stages start at | predicted ms | measured ms |"
echo "| --- | --- | --- | --- | --- |"
for S in $stages; do
  # The even split: 8 / S blocks per stage.
  even=$(awk -v S="$S" 'BEGIN { for (k = 1; k < S; k++) printf "%stransformer.h.%d", (k > 1 ? "," : ""), 8 * k / S }')
  o=(--stages "$S" --schedule 1f1b --microbatches "$M" --batch $((2 * M)))
  c="$tmp/costs-vocab-$S.json"
  echo "== gpt_vocab profile S=$S --split $even" >&2
  if ! "$pipec" profile "$tmp/gpt_vocab.json" "${o[@]}" --split "$even" -o "$c" -- --steps "$psteps" \
    --threads "$threads" >"$tmp/log" 2>&1; then
    tail -n 5 "$tmp/log" >&2
    echo "| $S | | | failed | failed |"
    status=1
    continue
  fi
  for how in even automatic; do
    extra=()
    [[ $how == even ]] && extra=(--split "$even")
    plan=$("$pipec" plan "$tmp/gpt_vocab.json" "${o[@]}" "${extra[@]}" --costs "$c" 2>&1)
    pred=$(sed -n 's/^predicted step time \([0-9.]*\) ms.*/\1/p' <<<"$plan")
    cuts=$(sed -n 's/^  nodes     \(transformer.h.[0-9]*\).*/\1/p' <<<"$plan" | paste -sd, -)
    echo "== gpt_vocab $how S=$S" >&2
    if "$pipec" run "$tmp/gpt_vocab.json" "${o[@]}" "${extra[@]}" --costs "$c" -o "$tmp/prog" -- \
      --steps "$steps" --threads "$threads" --eval-batches 1 --log-every 1000000 >"$tmp/log" 2>&1; then
      meas=$(sed -n 's/.*median step time \([0-9.]*\) ms.*/\1/p' "$tmp/log" | head -n 1)
    else
      tail -n 5 "$tmp/log" >&2
      meas=failed
      status=1
    fi
    echo "| $S | $how | ${cuts:-?} | ${pred:-?} | $meas |"
  done
done
exit $status
