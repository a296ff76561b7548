#!/usr/bin/env bash
# pipec plan --svg and --json (docs/pipeline.md, "Pictures and plan data"): for gpt_char at S = 2
# with 1f1b and zb-h1 and at S = 4 with gpipe, the JSON's per-rank actions are the compiled
# schedule's (--dump-after=schedule) with the printed predicted step and memory, the SVG parses
# and draws exactly each rank's F / B / W in order at the JSON's predicted times with one arrow
# per send (plan_check.py); the same input writes the same bytes; bad usage and an unwritable
# file are one-line errors (exit 2 and 1) that leave no FILE.tmp behind; docs/img's pictures are
# what this pipec draws.
# Usage: plan_svg.sh PIPEC SOURCE_DIR
source "$(dirname "$0")/lib.sh"
pipec=$1
cd "$2" || exit 1
model=samples/gpt_char.json

run() { # NAME ARGS...: plan with --svg and --json, the dump, the checker
  local name=$1
  shift
  if ! "$pipec" plan $model "$@" --svg "$tmp/$name.svg" --json "$tmp/$name.json" >"$tmp/$name.txt" 2>"$tmp/$name.err"; then
    bad "$name: plan failed: $(head -n 1 "$tmp/$name.err")"
    return
  fi
  "$pipec" plan $model "$@" --dump-after=schedule >"$tmp/$name.dump" 2>/dev/null || bad "$name: dump"
  check "$name: json and svg agree with the schedule" python3 tests/e2e/plan_check.py \
    "$tmp/$name.json" "$tmp/$name.svg" "$tmp/$name.dump" "$tmp/$name.txt"
}
run s2_1f1b --stages 2 --schedule 1f1b --microbatches 4
run s2_zbh1 --stages 2 --schedule zb-h1 --microbatches 4
run s4_gpipe --stages 4 --schedule gpipe --microbatches 4
run s2_interleaved --stages 2 --schedule interleaved --virtual 2 --microbatches 4
run s2_zbv --stages 2 --schedule zb-v --microbatches 4 # rank 0: stages 0 and 3

# Deterministic: the same command writes the same bytes.
"$pipec" plan $model --stages 2 --schedule zb-h1 --microbatches 4 --svg "$tmp/again.svg" \
  --json "$tmp/again.json" >/dev/null 2>&1 || bad "again: plan failed"
check "svg deterministic" cmp -s "$tmp/s2_zbh1.svg" "$tmp/again.svg"
check "json deterministic" cmp -s "$tmp/s2_zbh1.json" "$tmp/again.json"

# The pictures in docs/img are this pipec's output (regenerate them with the command in
# docs/pipeline.md, "Pictures and plan data", when the schedules or the cost model change).
for s in 1f1b zb-h1 zb-v; do
  "$pipec" plan $model --stages 2 --batch 96 --microbatches 8 --schedule $s --svg "$tmp/doc_$s.svg" \
    >/dev/null 2>&1 || bad "docs $s: plan failed"
  check "docs/img/gpt_char_$s.svg is current" cmp -s docs/img/gpt_char_$s.svg "$tmp/doc_$s.svg"
done
check "--help names --svg and --json" bash -c "'$pipec' --help | grep -q -- '--svg FILE' && '$pipec' --help | grep -q -- '--json FILE'"

# Bad usage (exit 2) and write failures (exit 1): one line, no FILE.tmp left.
hint_re=': error: ' # the compiler's write errors have no HINT line (like codegen's)
expect "--svg without a file" 2 "^pipec: option '--svg' needs an argument$" \
  "$pipec" plan $model --stages 2 --svg
expect "--svg followed by an option" 2 "^pipec: --svg: expected a file name, got the option '--json'$" \
  "$pipec" plan $model --stages 2 --svg --json "$tmp/j.json"
check "--svg followed by an option: nothing written" test ! -e "$tmp/j.json"
expect "--json empty" 2 "^pipec: --json: the file name is an empty string$" \
  "$pipec" plan $model --stages 2 --json ""
expect "--svg at S = 1" 2 "^pipec: --svg draws a pipeline plan: it needs --stages >= 2 \(or --split\)$" \
  "$pipec" plan $model --svg "$tmp/one.svg"
expect "--json on check" 2 "^pipec: --json is for 'plan' \(got 'check'\)$" \
  "$pipec" check $model --stages 2 --json "$tmp/c.json"
# (M = 2: M = 1 < S would add the bubble warning before the error)
expect "--svg unwritable" 1 "^$model: error: cannot write '$tmp/no/such/dir/p.svg': No such file or directory$" \
  "$pipec" plan $model --stages 2 --microbatches 2 --svg "$tmp/no/such/dir/p.svg"
check "unwritable: one stderr line" test "$(wc -l <"$tmp/err")" -eq 1
mkdir -p "$tmp/isdir.json"
expect "--json onto a directory" 1 "^$model: error: cannot write '$tmp/isdir.json': Is a directory$" \
  "$pipec" plan $model --stages 2 --microbatches 2 --json "$tmp/isdir.json"
check "directory: no .tmp left" test ! -e "$tmp/isdir.json.tmp"
check "directory: still a directory" test -d "$tmp/isdir.json"
finish
