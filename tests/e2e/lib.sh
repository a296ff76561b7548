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
finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
