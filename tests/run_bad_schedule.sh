#!/usr/bin/env bash
# Negative tests of custom schedules (--schedule FILE.csv, docs/pipeline.md "Custom schedules"):
# every tests/bad_schedule/NAME.csv must be rejected by
#   pipec check ../../samples/mlp_digits.json --microbatches 4 --schedule NAME.csv [NAME.args]
# (run inside that directory, so the messages say `NAME.csv:LINE:COL: error: ...`) with exit
# status 1, nothing on stdout and exactly the text of NAME.err on stderr. NAME.args, when there,
# holds more options (word-split).
#
# usage: tests/run_bad_schedule.sh PIPEC DIR
set -u
if [ $# -ne 2 ]; then
  echo "usage: $0 PIPEC DIR" >&2
  exit 2
fi
pipec=$1
case $pipec in
  */*) pipec="$(cd -- "$(dirname -- "$pipec")" && pwd)/$(basename -- "$pipec")" ;;
esac
cd -- "$2" || exit 2
tmp=$(mktemp -d) || exit 2
trap 'rm -rf -- "$tmp"' EXIT
run=()
if command -v timeout >/dev/null 2>&1; then run=(timeout 60); fi
shopt -s nullglob
passed=0
failed=0
for csv in *.csv; do
  name=${csv%.csv}
  args=()
  # shellcheck disable=SC2207 # the options are words
  [ -f "$name.args" ] && args=($(cat "$name.args"))
  ${run[@]+"${run[@]}"} "$pipec" check ../../samples/mlp_digits.json --microbatches 4 \
    --schedule "$csv" ${args[@]+"${args[@]}"} </dev/null >"$tmp/out" 2>"$tmp/err"
  rc=$?
  why=
  if [ ! -f "$name.err" ]; then
    why="$name.err is missing (the expected stderr)"
  elif [ $rc -ne 1 ]; then
    why="exit status $rc, expected 1"
  elif ! cmp -s "$name.err" "$tmp/err"; then
    why="stderr differs from $name.err"
  elif [ -s "$tmp/out" ]; then
    why="stdout is not empty"
  fi
  if [ -z "$why" ]; then
    passed=$((passed + 1))
    continue
  fi
  echo "FAIL $name: $why"
  failed=$((failed + 1))
  [ -f "$name.err" ] && diff -u --label "$name.err (expected)" --label "stderr (actual)" \
    "$name.err" "$tmp/err" | head -n 40 | sed 's/^/    /'
done
for err in *.err; do
  [ -f "${err%.err}.csv" ] || { echo "FAIL ${err%.err}: $err has no ${err%.err}.csv"; failed=$((failed + 1)); }
done
[ $((passed + failed)) -gt 0 ] || { echo "FAIL: no cases in $PWD"; failed=1; }
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
