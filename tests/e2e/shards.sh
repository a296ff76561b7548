#!/usr/bin/env bash
# Sharded checkpoints (--save DIR/, docs/training.md "Sharded checkpoints"): a save at S = 4
# (interleaved, V = 2) writes one model and one optimizer shard per rank and the two indexes,
# holding exactly the one-stage pair's tensors; it resumes at S = 2 and S = 1 (in place, the
# directory rewritten with one shard each, the old shards gone) bit for bit as the run never
# stopped; --init from it equals --init from the one-file pair; an interrupted save is rolled
# forward after its commit (by --init too) and discarded before it; bad directories are refused
# by name (a shard of another save by --init too), and so is a flipped bit in a shard; the
# shards load with the safetensors package's own reader (where it is not importable here, that
# one check says SKIP and the others decide: exit 0 when they passed).
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
. "$root/tests/e2e/mpi_env.sh"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
pkgpy=${PIPEC_TEST_PYTHON:-$root/.venv-test/bin/python}
[ -x "$pkgpy" ] || pkgpy=$py
sc() { "$py" "$root/tests/e2e/shards_check.py" "$@"; }
st() { "$py" "$root/tests/e2e/st_tool.py" "$@"; }
file=$tmp/gpt_char_l2.json
gpt_char_l2 "$file"
common=(--batch 24 --microbatches 4)
run_args=(--threads 1 --quiet --eval-every 0 --eval-batches 1)
build s1
build s2 --stages 2 --schedule zb-h1
build s4 --stages 4 --schedule interleaved --virtual 2
pair_is() { cmp -s "$1" "$2" && cmp -s "$1.optim" "$2.optim"; }
tail_of() { awk -v f="$2" '$1 >= f' "$1"; }
files_of() { (cd "$1" && ls -A | tr '\n' ' '); }

go s1 full --steps 5 --save "$tmp/full.st"
go s1 two --steps 2 --save "$tmp/two.st"

# A save at S = 4 after 2 steps: 4 + 4 shards, 2 indexes, the one-stage pair's tensors.
go s4 save4 --steps 2 --save "$tmp/sh4/"
want="model-00001-of-00004.safetensors model-00002-of-00004.safetensors model-00003-of-00004.safetensors model-00004-of-00004.safetensors model.safetensors.index.json optimizer-00001-of-00004.safetensors optimizer-00002-of-00004.safetensors optimizer-00003-of-00004.safetensors optimizer-00004-of-00004.safetensors optimizer.safetensors.index.json "
check "S = 4 writes 4 shards of each half and the two indexes (got: $(files_of "$tmp/sh4"))" \
  test "$(files_of "$tmp/sh4")" = "$want"
check "S = 4's shards hold the one-stage pair's tensors (ids and steps match the index)" \
  sc same "$tmp/sh4" "$tmp/two.st"

# Resume at S = 2 (zb-h1) from the 4-rank directory: steps 2..4 and the final pair as never stopped.
cp -r "$tmp/sh4" "$tmp/r2"
go s2 res2 --steps 5 --resume "$tmp/r2" --save "$tmp/r2.st"
check "resume at S = 2 from S = 4 shards: the uninterrupted run's final pair" pair_is "$tmp/r2.st" "$tmp/full.st"
check "resume at S = 2 from S = 4 shards: the losses of steps 2..4" diff <(tail_of "$tmp/full.loss" 2) "$tmp/res2.loss"

# Resume at S = 1 in place: the directory now holds one shard per half, the 4-rank ones are gone.
cp -r "$tmp/sh4" "$tmp/r1"
go s1 res1 --steps 5 --resume "$tmp/r1/" --save "$tmp/r1/"
check "resume at S = 1 in place: one shard per half left (got: $(files_of "$tmp/r1"))" test "$(files_of "$tmp/r1")" = \
  "model-00001-of-00001.safetensors model.safetensors.index.json optimizer-00001-of-00001.safetensors optimizer.safetensors.index.json "
check "resume at S = 1 in place: the uninterrupted run's tensors" sc same "$tmp/r1" "$tmp/full.st"
check "resume at S = 1: the losses of steps 2..4" diff <(tail_of "$tmp/full.loss" 2) "$tmp/res1.loss"
# The index itself names a sharded checkpoint too.
go s4 res4 --steps 5 --resume "$tmp/sh4/model.safetensors.index.json" --save "$tmp/r4.st"
check "resume at S = 4 through the index's path: the uninterrupted run's final pair" pair_is "$tmp/r4.st" "$tmp/full.st"

# --init from the shards at S = 2 equals --init from the one-file pair at S = 1.
go s1 init1 --steps 3 --init "$tmp/two.st" --save "$tmp/init1.st"
go s2 init2 --steps 3 --init "$tmp/sh4" --save "$tmp/init2.st"
check "--init from S = 4 shards at S = 2: the one-file --init's pair" pair_is "$tmp/init2.st" "$tmp/init1.st"
check "--init from S = 4 shards at S = 2: its losses" cmp -s "$tmp/init2.loss" "$tmp/init1.loss"

# Interrupted saves. New: a 4-rank save at step 5 (from sh4). Committed: sh4's files, the new
# model index in place and every other new file still a temporary (of a process that has ended).
cp -r "$tmp/sh4" "$tmp/new"
go s4 new --steps 5 --resume "$tmp/new" --save "$tmp/new/"
mkdir -p "$tmp/dead" && (sleep 0 & wait; echo $! >"$tmp/dead/pid")
dead=$(cat "$tmp/dead/pid")
interrupted() { # DIR COMMITTED: sh4 plus new's files as temporaries (the model index in place or not)
  cp -r "$tmp/sh4" "$1"
  local f
  for f in "$tmp/new"/*; do cp "$f" "$1/$(basename "$f").tmp.$dead"; done
  [ "$2" = yes ] && mv "$1/model.safetensors.index.json.tmp.$dead" "$1/model.safetensors.index.json"
}
interrupted "$tmp/after" yes
go s2 after --steps 5 --resume "$tmp/after" --save "$tmp/after.st"
check "a save interrupted after its commit is completed: step 5's state (nothing left to train)" \
  pair_is "$tmp/after.st" "$tmp/full.st"
check "a save interrupted after its commit: no loss logged (it resumed at step 5)" test ! -s "$tmp/after.loss"
check "a save interrupted after its commit: no temporaries left" test -z "$(ls "$tmp/after" | grep '\.tmp\.')"
interrupted "$tmp/before" no
go s2 before --steps 5 --resume "$tmp/before" --save "$tmp/before.st"
check "a save interrupted before its commit is discarded: resumed at step 2, the final pair" \
  pair_is "$tmp/before.st" "$tmp/full.st"
check "a save interrupted before its commit: steps 2..4 trained" diff <(tail_of "$tmp/full.loss" 2) "$tmp/before.loss"
check "a save interrupted before its commit: no temporaries left" test -z "$(ls "$tmp/before" | grep '\.tmp\.')"
# --init completes it as --resume does, at S = 1 and 2: step 5's parameters, no temporaries left.
for s in s1 s2; do
  interrupted "$tmp/init_after_$s" yes
  go "$s" "init_after_$s" --steps 0 --init "$tmp/init_after_$s" --save "$tmp/init_after_$s.st"
  check "--init at ${s#s} stage(s) of a save interrupted after its commit: the parameters --resume loads" \
    st same-tensors "$tmp/init_after_$s.st" "$tmp/after.st"
  check "--init at ${s#s} stage(s) of a save interrupted after its commit: no temporaries left" \
    test -z "$(ls "$tmp/init_after_$s" | grep '\.tmp\.')"
done

# Bad directories, each refused by name.
hint_re='^(\[rank [0-9]\] )?HINT: '
bad_dir() { rm -rf "$tmp/b" && cp -r "$tmp/sh4" "$tmp/b"; }
bad_dir && cp "$tmp/new/model-00002-of-00004.safetensors" "$tmp/b/"
other_save="error: .*/b/model-00002-of-00004.safetensors \(save id [0-9a-f]{16}\) is not from the save of .*/b/model.safetensors.index.json \(save id [0-9a-f]{16}\)$"
expect "a shard of another save" 1 "rank 0: $other_save" \
  "$tmp/s1/bin/train" "${run_args[@]}" --steps 3 --resume "$tmp/b"
# --init refuses it alike (it loaded a mix of the two saves), at S = 1 and 2.
expect "--init: a shard of another save" 1 "^shards.c:[0-9]+: rank 0: $other_save" \
  "$tmp/s1/bin/train" "${run_args[@]}" --steps 3 --init "$tmp/b"
for how in resume init; do
  expect_job "--$how at S = 2: a shard of another save" 1 "^\[rank [01]\] shards.c:[0-9]+: rank [01]: $other_save" \
    timeout -k 5 60 "$tmp/s2/launch.sh" "${run_args[@]}" --steps 3 "--$how" "$tmp/b"
done
# Bit rot: one flipped bit of a value that stays finite, in a model or an optimizer shard, is
# refused by --init and --resume at S = 1 and 2 (the save rank rehashes every shard).
in_shard() { # INDEX SHARD: a tensor that INDEX maps to SHARD (not the tied head)
  "$py" -c 'import json, sys; m = json.load(open(sys.argv[1]))["weight_map"]
print(next(k for k, v in m.items() if v == sys.argv[2] and k != "lm_head.weight"))' "$1" "$2"
}
rot="error: a shard of $tmp/b is corrupt: the shards' values do not hash to their save id $(st meta "$tmp/sh4/model-00001-of-00004.safetensors" save_id)$"
for half in model optimizer; do
  bad_dir && st flip "$tmp/b/$half-00003-of-00004.safetensors" \
    "$(in_shard "$tmp/b/$half.safetensors.index.json" "$half-00003-of-00004.safetensors")" 9
  for how in init resume; do
    expect "bit rot in the $half shard: --$how at S = 1" 1 "^shards.c:[0-9]+: rank 0: $rot" \
      "$tmp/s1/bin/train" "${run_args[@]}" --steps 3 "--$how" "$tmp/b"
    expect_job "bit rot in the $half shard: --$how at S = 2" 1 "^\[rank [01]\] shards.c:[0-9]+: rank [01]: $rot" \
      timeout -k 5 60 "$tmp/s2/launch.sh" "${run_args[@]}" --steps 3 "--$how" "$tmp/b"
  done
done
bad_dir && rm "$tmp/b/optimizer-00003-of-00004.safetensors"
expect "a missing shard" 1 "rank 0: error: .*/b/optimizer.safetensors.index.json: its shard '.*/b/optimizer-00003-of-00004.safetensors' is missing" \
  "$tmp/s1/bin/train" "${run_args[@]}" --steps 3 --resume "$tmp/b"
bad_dir && echo '{"weight_map": ' >"$tmp/b/model.safetensors.index.json"
expect "an index that is not JSON" 1 "rank [0-9]: error: .*/b/model.safetensors.index.json: not valid JSON" \
  "$tmp/s1/bin/train" "${run_args[@]}" --steps 3 --init "$tmp/b"
bad_dir && sed -i 's#"model-00001-of-00004.safetensors"#"../two.st"#' "$tmp/b/model.safetensors.index.json"
expect "an index naming a file outside its directory" 1 "rank 0: error: .*/b/model.safetensors.index.json: weight_map\[\"transformer.wte.weight\"\] is not a file name of the directory" \
  "$tmp/s1/bin/train" "${run_args[@]}" --steps 3 --init "$tmp/b"
bad_dir && sed -i '/"transformer.wpe.weight"/d' "$tmp/b/model.safetensors.index.json"
expect "an index without a parameter" 1 "rank 0: error: .*/b/model.safetensors.index.json: no tensor 'transformer.wpe.weight' in its weight_map" \
  "$tmp/s1/bin/train" "${run_args[@]}" --steps 3 --init "$tmp/b"
bad_dir && rm "$tmp/b/optimizer.safetensors.index.json"
expect "no optimizer index" 1 "rank 0: error: .*/b: its optimizer state '.*/b/optimizer.safetensors.index.json' is missing" \
  "$tmp/s1/bin/train" "${run_args[@]}" --steps 3 --resume "$tmp/b"
: >"$tmp/plainfile"
expect "--save DIR/ over a file" 1 "rank 0: error: --save '.*/plainfile/': not a directory" \
  "$tmp/s1/bin/train" "${run_args[@]}" --steps 1 --save "$tmp/plainfile/"

# The safetensors package reads every shard (last: it may be missing here).
"$pkgpy" "$root/tests/e2e/shards_check.py" package "$tmp/sh4" >"$tmp/pkg.out" 2>&1
rc=$?
if [ $rc -eq 77 ]; then
  echo "SKIP the safetensors package's reader: $(cat "$tmp/pkg.out")"
else
  check "the safetensors package reads the S = 4 shards as pipec wrote them: $(head -2 "$tmp/pkg.out")" test $rc -eq 0
fi
finish
