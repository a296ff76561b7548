#!/usr/bin/env bash
# Checkpoints at any S (docs/pipeline.md): one safetensors pair, byte for byte the one-stage
# pair, whatever S saved it; --resume at another S (and at the same one) continues bit for bit
# (the resumed run's losses and final pair are those of the run never stopped); --init from a
# one-stage file at S = 2 trains as the one-stage program does from it; a flipped bit in the file
# is refused by both at S = 2 (the save rank rehashes the pair). The model is the flat
# 2-layer character GPT of the matrix (tied embedding and head on different stages, cuts inside
# its layers) at M = 4 (every S and schedule below can run it).
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
st() { python3 "$root/tests/e2e/st_tool.py" "$@"; }
. "$root/tests/e2e/mpi_env.sh"
file=$tmp/gpt_char_l2.json
gpt_char_l2 "$file"
common=(--batch 24 --microbatches 4)
run_args=(--threads 1 --quiet --eval-every 0 --eval-batches 1)

build s1
build s2 --stages 2 --schedule 1f1b
build s3 --stages 3 --schedule zb-h1
build s4 --stages 4 --schedule interleaved --virtual 2

# pair_is A B: the pairs A, A.optim and B, B.optim are byte for byte equal (else say where).
pair_is() {
  local f ok=0
  for f in "" .optim; do
    if [ ! -e "$1$f" ] || [ ! -e "$2$f" ]; then
      echo "  $1$f or $2$f: missing"
      ok=1
    elif ! cmp -s "$1$f" "$2$f"; then
      echo "  $1$f vs $2$f: $(cmp "$1$f" "$2$f" 2>&1 | head -1); $(st diff "$1$f" "$2$f" 2>&1 | head -3 | tr '\n' ';')"
      ok=1
    fi
  done
  return $ok
}
# tail_of LOG FROM: the lines of LOG for steps >= FROM.
tail_of() { awk -v f="$2" '$1 >= f' "$1"; }

# The run never stopped: 5 steps at S = 1, and its pair after 2 steps.
go s1 full --steps 5 --save "$tmp/full.st"
go s1 two --steps 2 --save "$tmp/two.st"
check "the uninterrupted run logged 5 finite losses" test "$(grep -cE '^[0-4] [0-9.]+$' "$tmp/full.loss")" = 5

# Save at S = 2 after 2 steps: the one-stage pair.
go s2 save2 --steps 2 --save "$tmp/s2.st"
check "S = 2 saves the one-stage pair after 2 steps" pair_is "$tmp/s2.st" "$tmp/two.st"

# Resume that pair at S = 3, 1, 2 and 4: steps 2..4 and the final pair as if never stopped.
for r in s3 s1 s2 s4; do
  if ! cp "$tmp/s2.st" "$tmp/r_$r.st" 2>/dev/null || ! cp "$tmp/s2.st.optim" "$tmp/r_$r.st.optim"; then
    bad "resume at ${r#s} stage(s): no pair saved at S = 2 to resume"
    continue
  fi
  go "$r" "res_$r" --steps 5 --resume "$tmp/r_$r.st" --save "$tmp/r_$r.st"
  check "resume at ${r#s} stage(s) from S = 2: final pair as the uninterrupted run" pair_is "$tmp/r_$r.st" "$tmp/full.st"
  if ! diff <(tail_of "$tmp/full.loss" 2) "$tmp/res_$r.loss" >/dev/null 2>&1; then
    bad "resume at ${r#s} stage(s): losses $(tr '\n' ' ' <"$tmp/res_$r.loss" 2>/dev/null), uninterrupted $(tail_of "$tmp/full.loss" 2 | tr '\n' ' ')"
  else
    ok
  fi
done
# A one-stage save resumed at S = 3.
cp "$tmp/two.st" "$tmp/r13.st" && cp "$tmp/two.st.optim" "$tmp/r13.st.optim"
go s3 res13 --steps 5 --resume "$tmp/r13.st" --save "$tmp/r13.st"
check "resume at S = 3 from S = 1: final pair as the uninterrupted run" pair_is "$tmp/r13.st" "$tmp/full.st"
check "resume at S = 3 from S = 1: the losses of steps 2..4" diff <(tail_of "$tmp/full.loss" 2) "$tmp/res13.loss"

# --init from the one-stage file at S = 2 (and at S = 4) as at S = 1: parameters only, step 0.
go s1 init1 --steps 3 --init "$tmp/two.st" --save "$tmp/init1.st"
go s2 init2 --steps 3 --init "$tmp/two.st" --save "$tmp/init2.st"
go s4 init4 --steps 3 --init "$tmp/two.st" --save "$tmp/init4.st"
check "--init at S = 1: steps 0..2 logged (parameters only: the run starts at step 0)" \
  test "$(cut -d' ' -f1 "$tmp/init1.loss" | tr '\n' ' ')" = "0 1 2 "
check "--init at S = 2: the S = 1 pair" pair_is "$tmp/init2.st" "$tmp/init1.st"
check "--init at S = 2: the S = 1 losses" cmp -s "$tmp/init2.loss" "$tmp/init1.loss"
check "--init at S = 4 (interleaved): the S = 1 pair" pair_is "$tmp/init4.st" "$tmp/init1.st"
check "--init at S = 4 (interleaved): the S = 1 losses" cmp -s "$tmp/init4.loss" "$tmp/init1.loss"

# Bit rot at S = 2: the save rank rehashes the pair; one flipped bit of a value that stays finite
# (a tensor of stage 1) is refused by --init and --resume.
hint_re='^(\[rank [0-9]\] )?HINT: '
cp "$tmp/two.st" "$tmp/rot.st" && cp "$tmp/two.st.optim" "$tmp/rot.st.optim"
st flip "$tmp/rot.st" transformer.h.1.mlp.c_fc.weight 7
for how in init resume; do
  expect_job "bit rot at S = 2: --$how" 1 \
    "^\[rank [01]\] checkpoint.c:[0-9]+: rank [01]: error: $tmp/rot.st or $tmp/rot.st.optim is corrupt: their values do not hash to their save id $(st meta "$tmp/two.st" save_id)$" \
    timeout -k 5 60 "$tmp/s2/launch.sh" "${run_args[@]}" --steps 3 "--$how" "$tmp/rot.st"
done
finish
