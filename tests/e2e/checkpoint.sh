#!/usr/bin/env bash
# Checkpoints (runtime/checkpoint.c): --save writes the pair F, F.optim so that a process killed
# at any moment, or a disk that fills up, leaves the old pair or the new one, never a torn or a
# lost one; --resume refuses a pair of two saves and a bad step; --resume and --init refuse a
# pair whose values no longer hash to its save id (bit rot), a different text vocabulary, a tied
# pair of tensors with different values, values that are not finite and files the reference
# safetensors reader refuses; --save fails before training when the path cannot be written.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
st() { python3 "$root/tests/e2e/st_tool.py" "$@"; }
# In the ASan tree: memory reachable only from the stack when pr_fail exits counts as leaked (an
# error path must free what it holds; with stack roots, LeakSanitizer saw such leaks by chance).
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}use_stacks=0:use_registers=0"
"$pipec" compile samples/mlp_digits.json -o "$tmp/mlp" 2>/dev/null || { bad "compile mlp"; finish; exit 1; }
"$pipec" compile samples/gpt_char.json -o "$tmp/gpt" 2>/dev/null || { bad "compile gpt"; finish; exit 1; }
# A wide MLP (17 MiB of parameters, 35 MiB of AdamW state): saves slow enough to be hit.
"$pipec" compile -D H=2048 samples/mlp_digits.json -o "$tmp/wide" 2>/dev/null || { bad "compile wide"; finish; exit 1; }
mlp="$tmp/mlp/bin/train"
gpt="$tmp/gpt/bin/train"
wide="$tmp/wide/bin/train"

# pair_is F REF: F and F.optim are byte for byte REF and REF.optim.
pair_is() { cmp -s "$1" "$2" && cmp -s "$1.optim" "$2.optim"; }
cp_pair() { cp "$1" "$2" && cp "$1.optim" "$2.optim"; }
no_temps() { [ -z "$(find "$tmp/k" -name '*.tmp.*')" ]; }
dead_pid() { sh -c 'echo $$'; }

# ---- The pair: save id and step in both headers, the vocabulary of text data in F.
"$gpt" --steps 2 --quiet --eval-batches 1 --save "$tmp/g.st" >/dev/null 2>&1 || bad "gpt save"
id=$(st meta "$tmp/g.st" save_id)
check "save id '$id': 16 hex digits, the same in both files" \
  test "${#id}" -eq 16 -a "$id" = "$(st meta "$tmp/g.st.optim" save_id)"
check "step 2 in both files" test "$(st meta "$tmp/g.st" step)" = 2 -a "$(st meta "$tmp/g.st.optim" step)" = 2
check "the vocabulary (65 characters, hex) in F" test "$(st meta "$tmp/g.st" vocab | wc -c)" -eq 131

# ---- Kills during saves. A = the pair after step 1, B = after step 2 (saves are reproducible:
# the same state writes the same bytes). Each round starts from A and runs the save of B, killed
# at a random moment; a resume must then find exactly A's pair or B's, never a torn or lost one.
mkdir -p "$tmp/k"
"$wide" --steps 1 --quiet --save "$tmp/A.st" >/dev/null 2>&1 || bad "wide save A"
"$wide" --steps 2 --quiet --resume "$tmp/A.st" --save "$tmp/B.st" >/dev/null 2>&1 || bad "wide save B"
F="$tmp/k/ck.st"
cp_pair "$tmp/A.st" "$F"
t0=$(date +%s.%N)
"$wide" --steps 2 --quiet --resume "$F" >/dev/null 2>&1
t1=$(date +%s.%N)
"$wide" --steps 2 --quiet --resume "$F" --save "$F" >/dev/null 2>&1
t2=$(date +%s.%N)
check "a completed save writes B's pair" pair_is "$F" "$tmp/B.st"
# Kill times: odd rounds anywhere from before the save to after it, even rounds once the save's
# first temporary has bytes, within the save's duration.
lo=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%d", (b - a) * 0.8 * 1e6 }')
hi=$(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%d", (b - a) * 1.3 * 1e6 }')
save=$(awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { s = (c - b) - (b - a); printf "%d", (s > 0.05 ? s : 0.05) * 1.2 * 1e6 }')
echo "kill window: ${lo}..${hi} us; after the first temporary: 0..${save} us"
# 50 rounds; 10 in the sanitizer tree (5 of each kind), where the kills are the release tree's and
# what AddressSanitizer adds is in the resumes after them, the paths that the torn states below
# take again one by one.
kills=50
sanitized "$wide" && kills=10
na=0 nb=0 nbad=0 nmid=0 nbetween=0
for round in $(seq "${CKPT_KILLS:-$kills}"); do
  cp_pair "$tmp/A.st" "$F"
  "$wide" --steps 2 --quiet --resume "$F" --save "$F" >/dev/null 2>&1 &
  pid=$!
  r=$(((RANDOM * 32768 + RANDOM)))
  if [ $((round % 2)) -eq 1 ]; then
    us=$((lo + r % (hi - lo + 1)))
  else
    # (the temporary of parameters gets bytes: the writability probe at start stays empty)
    while ! [ -s "$F.tmp.$pid" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.002; done
    us=$((r % (save + 1) * (RANDOM % 1001) / 1000)) # a product of uniforms: more kills early on
  fi
  sleep "$(awk -v u="$us" 'BEGIN { printf "%.6f", u / 1e6 }')"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  no_temps || nmid=$((nmid + 1)) # killed while writing the temporaries
  if cmp -s "$F" "$tmp/A.st" && cmp -s "$F.optim" "$tmp/B.st.optim"; then nbetween=$((nbetween + 1)); fi
  if ! "$wide" --steps 0 --quiet --resume "$F" >"$tmp/out" 2>&1; then
    nbad=$((nbad + 1))
    echo "round $round (kill at $us us): resume failed: $(head -1 "$tmp/out")"
  elif pair_is "$F" "$tmp/A.st"; then
    na=$((na + 1))
  elif pair_is "$F" "$tmp/B.st"; then
    nb=$((nb + 1))
  else
    nbad=$((nbad + 1))
    echo "round $round (kill at $us us): the pair is neither A's nor B's"
  fi
  no_temps || { nbad=$((nbad + 1)) && echo "round $round: temporaries left after the resume"; }
done
echo "kills: $na resumed A's pair, $nb B's pair, $nbad torn or lost; $nmid in the middle of a save, $nbetween between its renames"
check "every kill left A's or B's pair ($nbad torn or lost)" test "$nbad" -eq 0
check "kills hit during saves ($nmid) and left the old pair ($na)" test "$na" -gt 0 -a "$nmid" -gt 0

# Killed between the two renames: the new F.optim beside the old F and the complete new F.tmp.PID.
cp "$tmp/A.st" "$F" && cp "$tmp/B.st.optim" "$F.optim" && cp "$tmp/B.st" "$F.tmp.$(dead_pid)"
printf 'partial' >"$F.optim.tmp.$(dead_pid)"
"$wide" --steps 0 --quiet --resume "$F" >/dev/null 2>&1 || bad "resume between the renames"
check "resume between the renames rolls forward to B" pair_is "$F" "$tmp/B.st"
check "orphaned temporaries removed" no_temps
# The same, then a --save that fails (file size limit): it completes B first, and B survives.
cp "$tmp/A.st" "$F" && cp "$tmp/B.st.optim" "$F.optim" && cp "$tmp/B.st" "$F.tmp.$(dead_pid)"
(
  ulimit -f 20000
  "$wide" --steps 1 --quiet --save "$F" >/dev/null 2>"$tmp/err"
)
check "a failing save after the torn state leaves B's pair" pair_is "$F" "$tmp/B.st"
# A first save killed before its renames: complete temporaries and no pair yet become the pair.
rm -f "$F" "$F.optim"
p=$(dead_pid)
cp "$tmp/B.st" "$F.tmp.$p" && cp "$tmp/B.st.optim" "$F.optim.tmp.$p"
"$wide" --steps 0 --quiet --resume "$F" >/dev/null 2>&1 || bad "resume from temporaries only"
check "complete temporaries of a first save become the pair" pair_is "$F" "$tmp/B.st"
# A temporary of a process still running (a concurrent save) is left alone.
printf 'in progress' >"$F.tmp.$$"
"$wide" --steps 0 --quiet --resume "$F" >/dev/null 2>&1 || bad "resume beside a live temporary"
check "a live process's temporary is kept" test -e "$F.tmp.$$"
rm -f "$F.tmp.$$"

# ---- Disk full while F.optim is written (a 20 MB file size limit: F fits, F.optim does not).
cp_pair "$tmp/A.st" "$F"
if (
  ulimit -f 20000
  fail=0 # (this subshell's own count)
  expect save-file-too-large 1 \
    "rank 0: error: cannot write '$F.optim.tmp.[0-9]+': File too large \(the previous checkpoint '$F' is unchanged\)$" \
    "$wide" --steps 2 --quiet --resume "$F" --save "$F"
  [ "$fail" -eq 0 ]
); then ok; else bad "save under a file size limit"; fi
check "the old pair survives a failed save" pair_is "$F" "$tmp/A.st"
check "a failed save leaves no temporaries" no_temps

# ---- A torn pair without temporaries is refused, naming both files and ids.
cp "$tmp/A.st" "$F" && cp "$tmp/B.st.optim" "$F.optim"
ia=$(st meta "$tmp/A.st" save_id)
ib=$(st meta "$tmp/B.st" save_id)
expect torn-pair 1 "rank 0: error: $F \(save id $ia\) and $F.optim \(save id $ib\) are not from the same save$" \
  "$wide" --steps 3 --quiet --resume "$F"
cp "$tmp/A.st" "$F" && rm "$F.optim"
expect resume-without-optimizer-state 1 "rank 0: error: $F: its optimizer state '$F.optim' is missing$" \
  "$wide" --steps 3 --quiet --resume "$F"

# ---- The step is parsed strictly (the pair otherwise consistent).
"$mlp" --steps 1 --quiet --save "$tmp/m.st" >/dev/null 2>&1 || bad "mlp save"
for v in abc 99999999999999999999 -9223372036854775808 ""; do
  cp_pair "$tmp/m.st" "$tmp/s.st"
  st setmeta "$tmp/s.st.optim" step "$v"
  expect "step '$v'" 1 \
    "rank 0: error: $tmp/s.st.optim: metadata 'step' is '$v'; expected a step count, decimal digits from 0 to 9007199254740992$" \
    "$mlp" --steps 5 --quiet --resume "$tmp/s.st"
done
cp_pair "$tmp/m.st" "$tmp/s.st"
st setmeta "$tmp/s.st.optim" step 9007199254740992
st setmeta "$tmp/s.st" step 9007199254740992
id=$(st saveid "$tmp/s.st") # the step is hashed: the id of the pair at that step
st setmeta "$tmp/s.st.optim" save_id "$id"
st setmeta "$tmp/s.st" save_id "$id"
expect "step 2^53 (a valid step beyond --steps: nothing to train)" 0 "^$" "$mlp" --steps 5 --quiet --resume "$tmp/s.st"

# ---- Bit rot: a load rehashes the pair and compares with its save id (the test tool's own
# implementation of the hash gives the saved id); one flipped bit of a finite value is refused by
# --init and --resume, in either file; the untouched pair loads.
check "the save id hashes the step and the pair's values (st_tool.py saveid)" \
  test "$(st saveid "$tmp/m.st")" = "$(st meta "$tmp/m.st" save_id)"
for f in "" .optim; do
  cp_pair "$tmp/m.st" "$tmp/r.st"
  st flip "$tmp/r.st$f" "$([ -z "$f" ] && echo fc1.weight || echo m.fc1.weight)" 100
  for how in init resume; do
    expect "bit rot in F$f: --$how" 1 \
      "^checkpoint.c:[0-9]+: rank 0: error: $tmp/r.st or $tmp/r.st.optim is corrupt: their values do not hash to their save id $(st meta "$tmp/m.st" save_id)$" \
      "$mlp" --steps 2 --quiet "--$how" "$tmp/r.st"
  done
done
cp_pair "$tmp/m.st" "$tmp/r.st"
expect "the untouched pair: --resume" 0 "^$" "$mlp" --steps 2 --quiet --resume "$tmp/r.st"
expect "the untouched pair: --init" 0 "^$" "$mlp" --steps 1 --quiet --init "$tmp/r.st"

# ---- The vocabulary: a text that lacks one character would shift every id.
tr -d 'z' <"$root/../shared/data/tinyshakespeare.txt" >"$tmp/noz.txt"
expect vocab-resume 1 \
  "rank 0: error: $tmp/g.st: the checkpoint's vocabulary \(65 characters\) differs from the data's \(64\): only in the checkpoint: 'z'; only in the data: none$" \
  "$gpt" --steps 3 --quiet --resume "$tmp/g.st" --data "$tmp/noz.txt"
expect vocab-init 1 "rank 0: error: $tmp/g.st: the checkpoint's vocabulary \(65 characters\) differs" \
  "$gpt" --steps 1 --quiet --init "$tmp/g.st" --data "$tmp/noz.txt"
cp "$tmp/g.st" "$tmp/novocab.st"
python3 - "$tmp/novocab.st" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
del h["__metadata__"]; hb = json.dumps(h).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PY
expect "init from a file without metadata (PyTorch's)" 0 "^$" "$gpt" --steps 1 --quiet --eval-batches 1 --init "$tmp/novocab.st" --data "$tmp/noz.txt"

# ---- Tied tensors: equal values load (gpt_char.sh), different ones are refused, an absent alias is fine.
cp "$tmp/g.st" "$tmp/tied.st"
st poke "$tmp/tied.st" lm_head.weight 3 0.5
expect tied-different 1 \
  "rank 0: error: $tmp/tied.st: tensors 'transformer.wte.weight' and 'lm_head.weight' are tied in the model but hold different values \(element 3: " \
  "$gpt" --steps 1 --quiet --init "$tmp/tied.st"
st drop "$tmp/tied.st" lm_head.weight
expect tied-alias-absent 0 "^$" "$gpt" --steps 1 --quiet --eval-batches 1 --init "$tmp/tied.st"

# ---- Values that are not finite, in the parameters or the optimizer state.
cp_pair "$tmp/m.st" "$tmp/n.st"
st poke "$tmp/n.st" fc2.weight 7 nan
expect init-nan 1 "rank 0: error: $tmp/n.st: tensor 'fc2.weight' holds NaN at element 7$" "$mlp" --steps 1 --quiet --init "$tmp/n.st"
cp_pair "$tmp/m.st" "$tmp/n.st"
st poke "$tmp/n.st.optim" v.fc1.bias 5 inf
expect resume-inf 1 "rank 0: error: $tmp/n.st.optim: tensor 'v.fc1.bias' holds inf at element 5$" "$mlp" --steps 2 --quiet --resume "$tmp/n.st"

# ---- Files the reference reader refuses; a shape mismatch (its error path leaked the loader's
# table of found tensors and header: `expect` catches a LeakSanitizer report in the ASan tree).
cp "$tmp/m.st" "$tmp/t.st" && printf 'xxxx' >>"$tmp/t.st"
expect init-trailing-bytes 1 "rank 0: error: $tmp/t.st: 4 trailing bytes after the last tensor" "$mlp" --steps 1 --quiet --init "$tmp/t.st"
expect init-shape-mismatch 1 "rank 0: error: $tmp/m.st: tensor 'fc1.weight' has shape \[128, 64\]; the model expects \[2048, 64\]$" \
  "$wide" --steps 1 --quiet --init "$tmp/m.st"

# ---- --save to a path that cannot be written fails before training (a run of 10^9 steps).
expect save-unwritable 1 "rank 0: error: --save '$tmp/no/dir/x.st': cannot use directory '$tmp/no/dir': No such file or directory$" \
  timeout 20 "$mlp" --steps 1000000000 --quiet --save "$tmp/no/dir/x.st"
mkdir "$tmp/d.st"
expect save-to-directory 1 "rank 0: error: --save '$tmp/d.st': the path is a directory, not a regular file$" \
  timeout 20 "$mlp" --steps 1000000000 --quiet --save "$tmp/d.st"
finish
