#!/usr/bin/env bash
# Reproducible output: the same model and flags give byte-identical generated sources (rank<r>.c,
# launch.sh) in any directory. Two copies of a project tree (samples/gpt_char.json and
# samples/skip_net.json, the text data where gpt_char's relative data path finds it, ../shared)
# at different depths under different names; the same command line in each, from inside it:
# gpt_char at S = 1, skip_net at --stages 2. The generated files must be the same bytes and name
# neither tree; the command line stamped in them must be the one given (quoted where a shell
# needs it); the program must still find its data (relative to its own directory) when run from
# elsewhere, without --data (its --help names the file it reads).
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
data=$(cd "$root/../shared/data" && pwd)

one="$tmp/one/proj"
two="$tmp/elsewhere/deeper/two/proj"
for t in "$one" "$two"; do
  mkdir -p "$t/samples" "$t/../shared/data" || exit 1
  cp "$root/samples/gpt_char.json" "$root/samples/skip_net.json" "$t/samples/"
  cp "$data/tinyshakespeare.txt" "$t/../shared/data/"
  # The same command line in each tree (it is stamped into the sources), pipec found on the PATH.
  (cd "$t" && PATH="$(dirname "$pipec"):$PATH" &&
    pipec compile samples/gpt_char.json -o out/gpt >/dev/null 2>"$t/err1" &&
    pipec compile samples/skip_net.json --stages 2 -o 'out/skip net' >/dev/null 2>"$t/err2") ||
    bad "compile in $t: $(cat "$t/err1" "$t/err2" 2>/dev/null | tail -n 3)"
done

for f in out/gpt/rank0.c out/gpt/launch.sh "out/skip net/rank0.c" "out/skip net/rank1.c" "out/skip net/launch.sh"; do
  if [ ! -f "$one/$f" ] || [ ! -f "$two/$f" ]; then
    bad "$f was not written"
  elif cmp -s "$one/$f" "$two/$f"; then
    ok
  else
    bad "$f differs between the trees: $(diff "$one/$f" "$two/$f" | head -n 5)"
  fi
  # No absolute path of either tree, or of the source tree, in the generated file.
  if grep -qF -e "$tmp" -e "$root" "$one/$f" 2>/dev/null; then
    bad "$f names a directory: $(grep -F -e "$tmp" -e "$root" "$one/$f" | head -n 2)"
  else
    ok
  fi
done

# The command line as given, with the quoting a shell needs.
check "the command line is stamped as given" \
  grep -qxF "// Command: pipec compile samples/skip_net.json --stages 2 -o 'out/skip net'" "$one/out/skip net/rank0.c"
# A long command line is stamped in full, 160 characters per comment line (C and launch.sh).
long=out/$(printf 'd%.0s' $(seq 1 250))
(cd "$one" && PATH="$(dirname "$pipec"):$PATH" && pipec compile samples/skip_net.json --stages 2 --no-build -o "$long" >/dev/null 2>&1) ||
  bad "compile into a 250-character directory"
want="pipec compile samples/skip_net.json --stages 2 --no-build -o $long"
got=$(sed -n 's|^// Command\( (continued)\)\{0,1\}: ||p' "$one/$long/rank0.c" | tr -d '\n')
check "a command of ${#want} characters stamped in full in rank0.c" test "$got" = "$want"
got=$(sed -n 's|^# Command\( (continued)\)\{0,1\}: ||p' "$one/$long/launch.sh" | tr -d '\n')
check "a command of ${#want} characters stamped in full in launch.sh" test "$got" = "$want"
check "the data path is relative to the program" \
  grep -qF '"$ORIGIN/../../../../shared/data/tinyshakespeare.txt"' "$one/out/gpt/rank0.c"

# The program finds its data from another working directory (and in the tree it was built in).
for t in "$one" "$two"; do
  (cd / && "$t/out/gpt/bin/train" --steps 1 --eval-every 0 --eval-batches 1 --threads 1 >"$t/run.out" 2>&1)
  rc=$?
  check "$t: trains from / without --data (exit $rc: $(tail -n 2 "$t/run.out"))" [ "$rc" -eq 0 ]
  (cd / && "$t/out/gpt/bin/train" --help >"$t/help" 2>&1)
  real=$(cd "$t/../shared/data" && pwd -P)/tinyshakespeare.txt
  check "$t: --help shows the data file it reads" grep -qF "[$real]" "$t/help"
done
finish
