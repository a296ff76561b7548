#!/usr/bin/env bash
# Negative tests: every tests/bad/NAME.json must be rejected by `pipec check NAME.json` with exit
# status 1, nothing on stdout, and exactly the text of NAME.err on stderr (all of it: a second
# diagnostic, a warning or a sanitizer report is a failure too).
#
# usage: tests/run_bad.sh PIPEC BADDIR
#
# The compiler runs inside BADDIR with a relative path, so the messages (and the .err files) say
# `NAME.json:LINE:COL: error: ...`. Prints one FAIL line per failing case (with the diff indented
# under it) and a final line `N passed, M failed`; exits 1 if anything failed.
set -u

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: $0 PIPEC BADDIR [COMMAND]" >&2
  exit 2
fi
pipec=$1
baddir=$2
cmd=${3:-check} # tests/bad_training runs `pipec plan`: the training section is read there

# The compiler path must survive the cd into BADDIR.
case $pipec in
  */*) if dir=$(cd -- "$(dirname -- "$pipec")" 2>/dev/null && pwd); then pipec="$dir/$(basename -- "$pipec")"; fi ;;
esac
if ! command -v -- "$pipec" >/dev/null 2>&1; then
  echo "run_bad.sh: compiler not found or not executable: $pipec" >&2
  exit 2
fi
cd -- "$baddir" || { echo "run_bad.sh: cannot enter $baddir" >&2; exit 2; }

tmp=$(mktemp -d) || exit 2
trap 'rm -rf -- "$tmp"' EXIT

# A hung compiler must not hang the suite.
run=()
if command -v timeout >/dev/null 2>&1; then run=(timeout 120); fi

shopt -s nullglob
passed=0
failed=0
fail() { # NAME REASON
  echo "FAIL $1: $2"
  failed=$((failed + 1))
}

models=(*.json)
if [ ${#models[@]} -eq 0 ]; then
  echo "FAIL: no *.json models in $baddir"
  echo "0 passed, 1 failed"
  exit 1
fi

for model in "${models[@]}"; do
  name=${model%.json}
  if [ ! -f "$name.err" ]; then
    fail "$name" "$name.err is missing (the expected stderr)"
    continue
  fi
  ${run[@]+"${run[@]}"} "$pipec" "$cmd" "$model" </dev/null >"$tmp/out" 2>"$tmp/err"
  rc=$?
  ok=1
  if [ $rc -ne 1 ]; then
    fail "$name" "exit status $rc, expected 1"
    ok=0
  elif ! cmp -s "$name.err" "$tmp/err"; then
    fail "$name" "stderr differs from $name.err"
    ok=0
  elif [ -s "$tmp/out" ]; then
    fail "$name" "stdout is not empty"
    ok=0
  fi
  if [ $ok -eq 0 ]; then
    # Show what happened: the stderr diff (expected vs actual) and any stdout, indented.
    if ! cmp -s "$name.err" "$tmp/err"; then
      diff -u --label "$name.err (expected)" --label "stderr (actual)" "$name.err" "$tmp/err" | head -n 60 | sed 's/^/    /'
    fi
    if [ -s "$tmp/out" ]; then
      echo "    stdout:"
      head -n 20 "$tmp/out" | sed 's/^/    | /'
    fi
  else
    passed=$((passed + 1))
  fi
done

# An expectation without its model is a stale file: report it too.
for err in *.err; do
  name=${err%.err}
  [ -f "$name.json" ] || fail "$name" "$name.err has no $name.json"
done

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
