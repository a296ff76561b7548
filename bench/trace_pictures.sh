#!/usr/bin/env bash
# The measured pictures of docs/pipeline.md ("Traces"): gpt_char at S = 4 (global batch 96 in
# M = 8 microbatches, 1 thread per rank) with 1f1b and zb-h1, each trained for 4 steps with
# --trace; then per schedule the predicted picture (`pipec plan --svg`) above the measured one
# (`pipec plan --svg --trace`, step 2 of the run) on one HTML page, screenshotted by headless
# Chromium (scripts/screenshot.sh) into docs/img/gpt_char_s4_SCHEDULE_trace.png; and the 1f1b
# run's step 2 as a timeline viewer shows it (scripts/trace_svg.py: every rank's compute, send and
# receive threads, the flows), docs/img/gpt_char_s4_1f1b_timeline.svg. The times are
# this machine's at the moment: run it on a quiet machine (no test depends on them).
#
#   bench/trace_pictures.sh PIPEC      e.g. bench/trace_pictures.sh build/bin/pipec
#
# Environment: TRACE_OUT (where the PNGs, the SVGs and the traces go; default docs/img for the
# PNGs only), TRACE_STEPS (steps per run, default 4; the drawn step is 2). Without chromium
# (scripts/install-deps.sh --with-chromium) it writes the SVGs and says so.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "$@"
cd "$root"
out=${TRACE_OUT:-docs/img}
steps=${TRACE_STEPS:-4}
mkdir -p "$out"
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
model=(samples/gpt_char.json --stages 4 --batch 96 --microbatches 8)
for sched in 1f1b zb-h1; do
  dir="$tmp/$sched"
  "$pipec" compile "${model[@]}" --schedule "$sched" -o "$dir" >"$tmp/compile.out" 2>&1 ||
    { tail -n 5 "$tmp/compile.out" >&2 && exit 1; }
  echo "$sched: $steps steps with --trace" >&2
  "$dir/launch.sh" --steps "$steps" --threads 1 --quiet --eval-every 0 --eval-batches 1 \
    --trace "$dir/trace.json" --trace-steps 2:3 >"$dir/run.out" 2>&1 ||
    { tail -n 5 "$dir/run.out" >&2 && exit 1; }
  "$pipec" plan "${model[@]}" --schedule "$sched" --svg "$dir/predicted.svg" >/dev/null
  "$pipec" plan "${model[@]}" --schedule "$sched" --svg "$dir/measured.svg" \
    --trace "$dir/trace.json" >/dev/null
  # Both pictures, one above the other, at their own widths (each scaled to its own step).
  h=$(sed -n 's/.*<svg [^>]*height="\([0-9]*\)".*/\1/p' "$dir/predicted.svg" | head -n 1)
  w=$(sed -n 's/.*<svg [^>]*width="\([0-9]*\)".*/\1/p' "$dir/predicted.svg" | head -n 1)
  printf '<!doctype html>\n<html><body style="margin:0;background:#fff">\n<img src="predicted.svg"><br>\n<img src="measured.svg">\n</body></html>\n' >"$dir/page.html"
  png="$out/gpt_char_s4_${sched}_trace.png"
  if scripts/screenshot.sh "$dir/page.html" "$png" "$w" $((2 * h + 8)); then
    echo "wrote $png ($(stat -c %s "$png") bytes)" >&2
  else
    rc=$?
    [ $rc -eq 77 ] || exit $rc
    echo "no chromium: the SVGs only" >&2
  fi
  if [ -n "${TRACE_OUT:-}" ]; then
    cp "$dir/predicted.svg" "$out/gpt_char_s4_${sched}_predicted.svg"
    cp "$dir/measured.svg" "$out/gpt_char_s4_${sched}_measured.svg"
    cp "$dir/trace.json" "$out/gpt_char_s4_${sched}_trace.json"
  fi
done
# The 1f1b trace as a timeline viewer draws it (Perfetto's tracks, offline: scripts/trace_svg.py):
# every thread of every rank, the messages' slices and their flows, step 2 (an SVG: its PNG would
# be some 300 KB).
$py scripts/trace_svg.py "$tmp/1f1b/trace.json" "$out/gpt_char_s4_1f1b_timeline.svg" 2
echo "wrote $out/gpt_char_s4_1f1b_timeline.svg" >&2
