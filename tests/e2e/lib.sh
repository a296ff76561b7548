# Shared helpers of the end-to-end tests: counters, expectations, a temp dir removed at exit.
# Usage: source lib.sh; each test script ends with `finish`.
set -u
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
bad() {
  echo "FAIL $*"
  fail=$((fail + 1))
}
# check NAME CONDITION-COMMAND...: counts a pass when the command succeeds.
check() {
  local name=$1
  shift
  if "$@"; then ok; else bad "$name"; fi
}
# expect NAME RC STDERR-REGEX CMD...: the command's exit status, its first stderr line, a HINT line
# when it fails with 1 (matching $hint_re, default '^HINT: '), and no sanitizer report (a leak
# report on an error path does not change the exit status).
expect() {
  local name=$1 want=$2 re=$3
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? first
  first=$(head -n 1 "$tmp/err")
  if [ $rc -ne "$want" ]; then
    bad "$name: exit $rc, want $want ($first)"
  elif grep -q 'Sanitizer' "$tmp/err"; then
    bad "$name: sanitizer report: $(grep -m1 'Sanitizer' "$tmp/err")"
  elif ! [[ "$first" =~ $re ]]; then
    bad "$name: stderr '$first' does not match '$re'"
  elif [ "$want" -eq 1 ] && ! grep -qE "${hint_re:-^HINT: }" "$tmp/err"; then
    bad "$name: no HINT line"
  else
    ok
  fi
}
finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
# same_bits NAME REF RUN: the loss log, the parameters and the optimizer state of a run
# (RUN.loss, RUN.st, RUN.st.optim) are byte for byte the reference run's (REF.*).
same_bits() {
  local name=$1 ref=$2 run=$3 f
  for f in loss st st.optim; do
    if ! cmp -s "$ref.$f" "$run.$f"; then
      bad "$name: $f differs from the reference: $(cmp "$ref.$f" "$run.$f" 2>&1 | head -n 1)"
      return 1
    fi
  done
  ok
}
