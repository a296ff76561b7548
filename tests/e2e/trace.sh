#!/usr/bin/env bash
# --trace FILE (runtime/trace.c; docs/pipeline.md, "Traces"): a 3-layer gpt_char at S = 2 and 4
# with 1f1b and zb-h1, at S = 2 interleaved (--virtual 2), and the one-stage program, 2 steps
# traced under mpirun: trace_check.py checks the file against `pipec plan --json` of the same
# options (per rank and step the compute actions in the schedule's order, every message a slice,
# every flow from a send to its receive with the send first, positive durations, no overlapping
# slices on a thread); the loss log is byte for byte the untraced run's; --trace-steps' default
# and range; bad flags are one line. Times are never compared with anything.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
export OMPI_MCA_mpi_yield_when_idle=1 # more ranks than cores here: ranks yield while they wait
py=/usr/bin/python3
opts=(--threads 1 --quiet --eval-every 0 --eval-batches 1)
model=(samples/gpt_char.json -D L=3 --microbatches 4)

# traced NAME STEPS-RUN TRACED PIPEC-OPTIONS... [-- PROGRAM-OPTIONS...]: compiles, runs with and
# without --trace, checks the trace and the loss logs.
traced() {
  local name=$1 nsteps=$2 want=$3 dir="$tmp/$1" popts=() xopts=()
  shift 3
  while [ $# -gt 0 ] && [ "$1" != -- ]; do popts+=("$1") && shift; done
  [ $# -gt 0 ] && shift && xopts=("$@")
  if ! "$pipec" compile "${model[@]}" "${popts[@]}" -o "$dir" >"$tmp/c.out" 2>&1 ||
    ! "$pipec" plan "${model[@]}" "${popts[@]}" --json "$dir/plan.json" >/dev/null 2>>"$tmp/c.out"; then
    bad "$name: compile: $(tail -n 3 "$tmp/c.out")"
    return
  fi
  if ! "$dir/launch.sh" "${opts[@]}" --steps "$nsteps" --loss-log "$dir/plain.loss" >"$dir/plain.out" 2>&1 ||
    ! "$dir/launch.sh" "${opts[@]}" --steps "$nsteps" --loss-log "$dir/traced.loss" \
      --trace "$dir/trace.json" "${xopts[@]}" >"$dir/traced.out" 2>&1; then
    bad "$name: run: $(tail -n 3 "$dir/plain.out" "$dir/traced.out")"
    return
  fi
  check "$name: the loss log with --trace is the one without" cmp -s "$dir/plain.loss" "$dir/traced.loss"
  check "$name: no temporary left" test ! -e "$dir/trace.json.tmp"
  if $py tests/e2e/trace_check.py "$dir/plan.json" "$dir/trace.json" "$want" >"$dir/check.out" 2>&1; then
    ok
  else
    bad "$name: the trace does not match the schedule:"
    head -n 10 "$dir/check.out"
  fi
}

traced s2-1f1b 2 0,1 --stages 2 --schedule 1f1b -- --trace-steps 0:2
traced s4-1f1b 2 0,1 --stages 4 --schedule 1f1b -- --trace-steps 0:2
traced s2-interleaved 2 0,1 --stages 2 --schedule interleaved --virtual 2 -- --trace-steps 0:2
# The sanitizer tree (programs built with AddressSanitizer, slow) stops the matrix here.
if ! sanitized "$tmp/s2-1f1b/bin/rank0"; then
  traced s2-zbh1 2 0,1 --stages 2 --schedule zb-h1 -- --trace-steps 0:2
  traced s4-zbh1 2 0,1 --stages 4 --schedule zb-h1 -- --trace-steps 0:2
  # The default: the steps after the first, at most 3 (here 1 and 2 of 3); a range past the end.
  traced s2-default 3 1,2 --stages 2 --schedule 1f1b
  traced s2-range 4 2,3 --stages 2 --schedule zb-h1 -- --trace-steps 2:9
fi

# ---- pipec plan --svg --trace: the picture of a traced step at its measured times (the picture's
# box of each F, B and W where the trace's slice is, its step's first event at x0); options that
# compiled another schedule, a step not traced and --trace without --svg are one-line errors.
t=$tmp/s4-1f1b/trace.json
s4=("${model[@]}" --stages 4 --schedule 1f1b)
if "$pipec" plan "${s4[@]}" --svg "$tmp/m.svg" --trace "$t" --trace-step 1 >/dev/null 2>"$tmp/m.err"; then
  check "plan --trace: the title says what was measured" \
    grep -q "measured step [0-9.]* ms (step 1 of trace.json)" "$tmp/m.svg"
  if $py - "$tmp/m.svg" "$t" >"$tmp/m.out" 2>&1 <<'PY'; then ok; else bad "plan --trace: boxes are not at the trace's times: $(head -n 3 "$tmp/m.out")"; fi
import json, re, sys
svg = open(sys.argv[1]).read()
x0 = float(re.search(r'data-x0="([0-9.]+)"', svg).group(1))
scale = float(re.search(r'data-px-per-s="([0-9.e+]+)"', svg).group(1))
ev = [e for e in json.load(open(sys.argv[2]))["traceEvents"]
      if e.get("ph") == "X" and e["args"]["step"] == 1]
origin = min(e["ts"] for e in ev)
want = {(e["pid"], e["args"]["v"], e["args"]["m"], e["cat"]): e for e in ev
        if e["tid"] == 0 and e["cat"] in ("F", "B", "W")}
boxes = re.findall(r'<rect class="([FBW])" x="([0-9.]+)" y="[0-9.]+" width="([0-9.]+)"[^>]*'
                   r'data-v="(\d+)" data-m="(\d+)"', svg)
assert len(boxes) == len(want), (len(boxes), len(want))
for k, x, w, v, m in boxes:
    e = want[(int(v) // 1, int(v), int(m), k)]  # v = the rank at V = 1
    for got, exp in ((float(x), x0 + (e["ts"] - origin) * 1e-6 * scale),
                     (float(w), e["dur"] * 1e-6 * scale)):
        assert abs(got - exp) < 0.02, (k, v, m, got, exp)
print(len(boxes), "boxes")
PY
else
  bad "plan --trace: $(head -n 3 "$tmp/m.err")"
fi
hint_re=': error: ' # the compiler's errors about files have no HINT line (as in plan_svg.sh)
expect plan-trace-other-schedule 1 "^samples/gpt_char.json: error: trace '$t', step 0: rank [0-9]+'s action [0-9]+ is [A-Z_]+\(v[0-9].*\), the trace's .* \(compile and plan with the same options\)$" \
  "$pipec" plan "${model[@]}" --stages 4 --schedule zb-h1 --svg "$tmp/z.svg" --trace "$t"
expect plan-trace-no-step 1 "^samples/gpt_char.json: error: trace '$t' has no events of step 7$" \
  "$pipec" plan "${s4[@]}" --svg "$tmp/z.svg" --trace "$t" --trace-step 7
expect plan-trace-not-a-trace 1 "^samples/gpt_char.json: error: trace 'samples/gpt_char.json' is not a --trace file \(no traceEvents array\)$" \
  "$pipec" plan "${s4[@]}" --svg "$tmp/z.svg" --trace samples/gpt_char.json
# Times no run measures (before: a negative dur drew a bubble of 129.9% and boxes of negative
# width, a ts of 1e300 "measured step 0.000 ms", exit 0): one error naming the event and its key.
# bad_time NAME KEY VALUE: $t with the first compute slice of step 1 given KEY: VALUE (JSON text;
# '' removes the key), as $tmp/NAME.json; prints the slice's index in traceEvents.
bad_time() {
  $py - "$t" "$tmp/$1.json" "$2" "$3" <<'PY'
import json, sys
src, dst, key, val = sys.argv[1:]
d = json.load(open(src))
i = next(i for i, e in enumerate(d["traceEvents"])
         if e.get("ph") == "X" and e["args"]["step"] == 1 and e["tid"] == 0)
if val:
    d["traceEvents"][i][key] = "@@"
else:
    del d["traceEvents"][i][key]
open(dst, "w").write(json.dumps(d).replace('"@@"', val))
print(i)
PY
}
# plan_time NAME KEY VALUE WHY: plan --trace of bad_time's trace fails with WHY about the key.
plan_time() {
  local i
  i=$(bad_time "$1" "$2" "$3")
  expect "plan-trace-$1" 1 "^samples/gpt_char.json: error: trace '$tmp/$1.json': traceEvents\[$i\]$4$" \
    "$pipec" plan "${s4[@]}" --svg "$tmp/z.svg" --trace "$tmp/$1.json" --trace-step 1
}
plan_time neg-dur dur -5 '\.dur: expected a non-negative number \(microseconds\), got -5'
plan_time inf-dur dur 1e999 '\.dur: expected a finite number \(microseconds\), got inf'
plan_time huge-ts ts 1e300 '\.ts: 1e\+300 microseconds is no measurement \(expected at most 1e\+15 either way\)'
plan_time neg-huge-ts ts -1e300 '\.ts: -1e\+300 microseconds is no measurement \(expected at most 1e\+15 either way\)'
plan_time big-dur dur 1000000000000001 '\.dur: 1000000000000001 microseconds is no measurement \(expected at most 1e\+15\)'
plan_time no-ts ts '' ": expected a number 'ts' \(microseconds\)"
plan_time text-dur dur '"5"' ": expected a number 'dur' \(microseconds\)"
expect plan-trace-without-svg 2 "^pipec: --trace draws a run's times: it is for 'plan' with --svg FILE" \
  "$pipec" plan "${s4[@]}" --trace "$t"
check "plan --trace: no picture after an error" test ! -e "$tmp/z.svg"
unset hint_re

# ---- The one-stage program (bin/train, no MPI): one process, compute only, in the order of the
# compiled schedule as `pipec print --dump-after=schedule` lists it.
dir="$tmp/one"
"$pipec" compile "${model[@]}" -o "$dir" >/dev/null 2>&1 || bad "S = 1: compile"
"$dir/bin/train" "${opts[@]}" --steps 2 --loss-log "$dir/plain.loss" >/dev/null 2>&1
"$dir/bin/train" "${opts[@]}" --steps 2 --loss-log "$dir/traced.loss" --trace "$dir/trace.json" \
  --trace-steps 0:2 >/dev/null 2>&1 || bad "S = 1: the traced run failed"
check "S = 1: the loss log with --trace is the one without" cmp -s "$dir/plain.loss" "$dir/traced.loss"
want=$("$pipec" print "${model[@]}" --dump-after=schedule | sed -n 's/^  \([A-Z]\)/\1/p' | paste -sd '|')
for s in 0 1; do
  got=$($py -c '
import json, sys
t = json.load(open(sys.argv[1]))["traceEvents"]
x = sorted((e for e in t if e.get("ph") == "X" and e["args"]["step"] == int(sys.argv[2])),
           key=lambda e: e["ts"])
assert all(e["pid"] == 0 and e["tid"] == 0 and e["dur"] > 0 for e in x)
print("|".join(e["name"] for e in x))' "$dir/trace.json" $s 2>&1)
  check "S = 1, step $s: '$got' is '$want'" test -n "$want" -a "$got" = "$want"
done

# ---- Bad flags: one line, exit 2; an unwritable trace stops the run before training.
train="$tmp/one/bin/train"
expect trace-steps-bad 2 "^train: --trace-steps: expected FIRST:END with 0 <= FIRST < END \(steps counted from 0, END not traced\), got '3'$" \
  "$train" --trace "$tmp/x.json" --trace-steps 3
expect trace-steps-empty 2 "^train: --trace-steps: expected FIRST:END .*, got '2:2'$" \
  "$train" --trace "$tmp/x.json" --trace-steps 2:2
expect trace-steps-alone 2 "^train: --trace-steps: give --trace FILE too$" "$train" --trace-steps 0:2
expect trace-no-dir 1 "rank 0: error: .*$tmp/no/dir" "$train" --steps 1 --trace "$tmp/no/dir/t.json"
finish
