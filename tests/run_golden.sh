#!/usr/bin/env bash
# Golden tests: every sample checks with exit 0 and no diagnostics, and its `check` summary,
# `print` IR, memory `plan` and the dumps of the passes listed below (`print --dump-after=PASS`:
# the IR after autodiff, the schedule's per-rank action lists; at two stages the partition table
# and the channels, `print --stages 2 --dump-after=partition` and `--dump-after=comm`) equal the files in tests/golden/ (regenerate with
# UPDATE=1 after a deliberate change).
set -u
pipec=$1
root=$2
cd "$root" || exit 1
pass=0 fail=0
for m in samples/*.json; do
  base=$(basename "$m" .json)
  for cmd in check print plan autodiff schedule partition comm; do
    want=tests/golden/$base.$cmd
    case $cmd in
      check | print | plan) got=$("$pipec" "$cmd" "$m" 2>/tmp/pipec_golden_err.$$) ;;
      partition | comm) got=$("$pipec" print --stages 2 --dump-after="$cmd" "$m" 2>/tmp/pipec_golden_err.$$) ;;
      *) got=$("$pipec" print --dump-after="$cmd" "$m" 2>/tmp/pipec_golden_err.$$) ;; # a pass's dump
    esac
    rc=$?
    err=$(cat /tmp/pipec_golden_err.$$)
    if [ "${UPDATE:-0}" = 1 ]; then printf '%s\n' "$got" >"$want"; fi
    if [ $rc -ne 0 ] || [ -n "$err" ]; then
      echo "FAIL $cmd $m: exit $rc, stderr: $err"
      fail=$((fail + 1))
    elif ! diff -u "$want" <(printf '%s\n' "$got"); then
      echo "FAIL $cmd $m: output differs from $want"
      fail=$((fail + 1))
    else
      pass=$((pass + 1))
    fi
  done
done
# The generators reproduce the committed GPT and Llama samples byte for byte.
for pair in "gen_gpt gpt_char" "gen_llama llama_char"; do
  set -- $pair
  if /usr/bin/env python3 samples/$1.py | cmp -s - samples/$2.json; then
    pass=$((pass + 1))
  else
    echo "FAIL samples/$1.py output differs from samples/$2.json"
    fail=$((fail + 1))
  fi
done
# A 96-layer generated GPT, a 32-layer Llama and a 1000-layer MLP check cleanly, as blocks and flat, with equal IR.
tmp=$(mktemp -d)
python3 samples/gen_gpt.py --layers 96 -o "$tmp/g.json" && python3 samples/gen_gpt.py --layers 96 --flat -o "$tmp/gf.json"
python3 samples/gen_mlp.py --layers 1000 -o "$tmp/m.json" && python3 samples/gen_mlp.py --layers 1000 --flat -o "$tmp/mf.json"
python3 samples/gen_llama.py --layers 32 -o "$tmp/l.json" && python3 samples/gen_llama.py --layers 32 --flat -o "$tmp/lf.json"
for pair in "g gf" "m mf" "l lf"; do
  set -- $pair
  if "$pipec" check "$tmp/$1.json" >/dev/null && "$pipec" check "$tmp/$2.json" >/dev/null &&
     [ "$("$pipec" print "$tmp/$1.json" | grep '^node' | sed 's/  ;.*//')" = "$("$pipec" print "$tmp/$2.json" | grep '^node' | sed 's/  ;.*//')" ]; then
    pass=$((pass + 1))
  else
    echo "FAIL generated $1.json and $2.json (blocks vs flat) do not give the same nodes"
    fail=$((fail + 1))
  fi
done
rm -rf "$tmp" /tmp/pipec_golden_err.$$
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
