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
# The machine-readable formats carry the Python file and line (no column).
"$pipec" check --diagnostics-format json unsupported_op.pt2 2>json.out >/dev/null
"$pipec" check --diagnostics-format sarif unsupported_op.pt2 2>sarif.out >/dev/null
if /usr/bin/python3 - "$root/tests/sarif/sarif-schema-2.1.0.json" <<'PY'; then
import json, sys
recs = json.load(open("json.out"))
want = [("aten.foo.default is not supported (node relu)", 227),
        ("aten.bar.Tensor is not supported (node relu_1)", 227)]
assert [(r["message"], r["line"]) for r in recs] == want, recs
assert all(r["file"] == "tests/import/fixture_models.py" and r["column"] is None for r in recs)
log = json.load(open("sarif.out"))
res = log["runs"][0]["results"]
assert [r["message"]["text"] for r in res] == [w[0] for w in want]
for r in res:
    reg = r["locations"][0]["physicalLocation"]["region"]
    assert reg == {"startLine": 227}, reg
try:
    import jsonschema
    jsonschema.Draft4Validator(json.load(open(sys.argv[1]))).validate(log)
except ImportError:
    pass
PY
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL unsupported_op in --diagnostics-format json and sarif"
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
