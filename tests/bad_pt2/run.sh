#!/usr/bin/env bash
# The bad-archive catalogue (tests/bad_pt2/make_bad.py): every case must make `pipec check
# NAME.pt2` exit 1 with exactly NAME.err on stderr (all of it) and nothing on stdout.
# usage: tests/bad_pt2/run.sh PIPEC
set -u
pipec=$(cd -- "$(dirname -- "$1")" && pwd)/$(basename -- "$1")
root=$(cd -- "$(dirname -- "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$root/tests/bad_pt2/make_bad.py" "$root/tests/import/fixtures" "$tmp" || exit 1
cd "$tmp" || exit 1
pass=0 fail=0
for f in *.pt2; do
  n=${f%.pt2}
  "$pipec" check "$f" >"$n.out" 2>"$n.got"
  rc=$?
  if [ $rc -eq 1 ] && [ ! -s "$n.out" ] && cmp -s "$n.got" "$n.err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $n (exit $rc)"
    diff "$n.err" "$n.got" | sed 's/^/    /'
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
