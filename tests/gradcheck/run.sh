#!/usr/bin/env bash
# Gradient check of every op of the registry: tests/gradcheck/OP.json is a small model whose loss
# depends, through OP, on parameters for every differentiable input of OP. Each model is compiled
# and its program's --gradcheck mode (every parameter's analytic gradient against central finite
# differences, norm-wise relative error <= 1e-3) must pass for each seed in SEEDS.
# An op without a model, a model that is not an op (or does not use its op), a compiler warning,
# or a parameter the check skips (no gradient) fails the suite. OP.VARIANT.json is another model
# of OP (gelu.exact.json: approximate "none"), checked the same way.
# Usage: run.sh PIPEC ROOT   (environment: SEEDS="1 2", JOBS=2 parallel compiles)
#
# Writing a model: the program sets every parameter to N(0, 0.5) and every float input to N(0, 1),
# and differentiates with h = 1e-2 on a float loss, so keep tensors tiny (sizes 2..6, distinct per
# dim), feed the op's float operands from parameters (or input + parameter where the batch dim is
# needed), take mse_loss against a target input of the op's output, and keep the loss close to
# quadratic in each parameter (long products of parameters make the difference quotient
# inaccurate). Kinks must be far from the parameters' values: relu.json scales its input by 20.
# Check a new model with many seeds: SEEDS="$(seq 1 50)" run.sh ...
set -u
pipec=$1
root=$2
dir=$root/tests/gradcheck
seeds=$(echo ${SEEDS:-1 2}) # one line
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pipec_gradcheck.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

pass=0 fail=0
bad() { # OP MESSAGE...
  printf 'FAIL %-24s %s\n' "$1" "${*:2}"
  fail=$((fail + 1))
}

ops=$("$pipec" --list-ops) && [ -n "$ops" ] || {
  echo "FAIL $pipec --list-ops"
  echo "0 passed, 1 failed"
  exit 1
}

# Every model names an op of the registry.
for f in "$dir"/*.json; do
  [ -e "$f" ] || continue
  op=$(basename "$f" .json)
  op=${op%%.*} # OP.VARIANT.json: another model of OP (an attribute's other value)
  grep -qxF -- "$op" <<<"$ops" || bad "$op" "tests/gradcheck/$(basename "$f") is not of an op of the registry (pipec --list-ops)"
done

# Compile the models two at a time; each leaves OP.rc and OP.log.
compile_one() {
  "$PIPEC" compile "$DIR/$1.json" -o "$TMP/$1" >"$TMP/$1.log" 2>&1
  echo $? >"$TMP/$1.rc"
}
export -f compile_one
for f in "$dir"/*.json; do [ -e "$f" ] && basename "$f" .json; done |
  PIPEC=$pipec DIR=$dir TMP=$tmp xargs -P "${JOBS:-2}" -I{} bash -c 'compile_one "$1"' _ {}

# Each op's model OP.json, then its variants OP.VARIANT.json (m: the model's name).
models=
for op in $ops; do
  models+=" $op"
  for v in "$dir/$op".*.json; do [ -e "$v" ] && models+=" $(basename "$v" .json)"; done
done
for m in $models; do
  op=${m%%.*} model=$dir/$m.json
  if [ ! -f "$model" ]; then
    bad "$op" "no model: add tests/gradcheck/$op.json (a small model whose gradient flows through $op)"
    continue
  fi
  if [ "$(cat "$tmp/$m.rc" 2>/dev/null)" != 0 ]; then
    bad "$m" "pipec compile failed: $(grep -m1 'error' "$tmp/$m.log" || tail -1 "$tmp/$m.log")"
    continue
  fi
  if grep -q 'warning' "$tmp/$m.log"; then
    bad "$m" "pipec compile warns: $(grep -m1 'warning' "$tmp/$m.log")"
    continue
  fi
  ir=$("$pipec" print "$model" 2>/dev/null)
  if ! grep -q "^node .* = $op(" <<<"$ir"; then
    bad "$m" "tests/gradcheck/$m.json has no $op node"
    continue
  fi
  params=$(sed -n 's/^param \([^:]*\): .*/\1/p' <<<"$ir")
  worst=0 msg=
  for seed in $seeds; do
    out=$("$tmp/$m/bin/train" --gradcheck --quiet --seed "$seed" 2>&1)
    rc=$?
    w=$(sed -n 's/^gradcheck worst relative error \([^ ]*\) .*/\1/p' <<<"$out")
    if [ $rc -ne 0 ] || [ -z "$w" ]; then
      # The parameters over the limit, or (a crash) the program's last line.
      over=$(awk '$1 == "gradcheck" && $(NF - 2) == "relative" && $NF + 0 > 1e-3 { printf " %s %s", $2, $NF }' <<<"$out")
      msg="seed $seed: exit $rc,${over:- $(tail -1 <<<"$out")}"
      break
    fi
    while IFS= read -r p; do
      [ -z "$p" ] || grep -qF -- "gradcheck $p " <<<"$out" || { msg="seed $seed: parameter '$p' has no gradient"; break; }
    done <<<"$params"
    [ -z "$msg" ] || break
    worst=$(awk -v a="$worst" -v b="$w" 'BEGIN { print (b + 0 > a + 0) ? b : a }')
  done
  if [ -n "$msg" ]; then
    bad "$m" "$msg"
  else
    printf 'ok   %-24s worst relative error %s (seeds %s)\n' "$m" "$worst" "$seeds"
    pass=$((pass + 1))
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
