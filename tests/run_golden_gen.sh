#!/usr/bin/env bash
# Golden generated sources: rank 0's whole program (rank0.c) and launch.sh of gpt_char at S = 1,
# at S = 2 under 1f1b and at S = 2 under zb-v (M = 4), as `pipec compile --no-build` writes them,
# equal the files in tests/golden/gen/. Any change to what codegen prints is then a reviewed diff
# (regenerate with UPDATE=1 after a deliberate change). Two lines depend on where the checkout
# is, and are masked before the comparison: the "// Command:" stamp (its continuation lines
# dropped) and the data path.
set -u
pipec=$1
root=$2
cd "$root" || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
mask() { sed -E -e 's#^(// Command:|\# Command:).*#\1 (masked)#' -e '/^(\/\/|\#) Command \(continued\):/d' -e 's#\.data = "[^"]*"#.data = "(masked)"#' "$1"; }
gen() {
  local name=$1
  shift
  if ! "$pipec" compile samples/gpt_char.json --no-build -o "$tmp/$name" "$@" >/dev/null 2>"$tmp/err"; then
    echo "FAIL $name: compile: $(head -n 3 "$tmp/err")"
    fail=$((fail + 1))
    return
  fi
  for f in rank0.c launch.sh; do
    local want=tests/golden/gen/$name.$f
    mask "$tmp/$name/$f" >"$tmp/got"
    if [ "${UPDATE:-0}" = 1 ]; then cp "$tmp/got" "$want"; fi
    if diff -u "$want" "$tmp/got" >"$tmp/diff"; then
      pass=$((pass + 1))
    else
      echo "FAIL $name: $f differs from $want:"
      head -n 40 "$tmp/diff"
      fail=$((fail + 1))
    fi
  done
}
gen gpt_char_s1
gen gpt_char_s2_1f1b --stages 2 --microbatches 4 --schedule 1f1b
gen gpt_char_s2_zbv --stages 2 --microbatches 4 --schedule zb-v
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
