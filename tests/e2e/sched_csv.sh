#!/usr/bin/env bash
# Custom schedules in torch.distributed.pipelining's CSV form (docs/pipeline.md, "Custom
# schedules"): `pipec plan --export-csv` writes a built-in's compute orders, and `--schedule
# FILE.csv` lowers them to the same plan (the schedule dump, the whole --json plan and every
# rank's generated program) for gpipe, 1f1b, zb-h1 at S = 2 and 4 and interleaved (V = 2) at S =
# 2 and 4; the exported file read back exports the same file. Under mpirun a CSV schedule's
# program trains bit for bit as the built-in's, and three hand-written schedules that no built-in
# makes (a gpipe/1f1b hybrid that splits B and W on one stage only; looped BFS over two stages
# per rank; one with idle cells, quoted cells, spaces, CRLF line ends and an OVERLAP_F_B pair)
# train bit for bit as the one-stage program. The bad CSVs are tests/bad_schedule (tests/run_bad_schedule.sh).
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
export OMPI_MCA_mpi_yield_when_idle=1 # more ranks than cores here: ranks yield while they wait

# The schedule's name out of plan's stdout and JSON (the built-in's name, or the CSV's path).
norm_out() { sed 's/^schedule [^ ]*: /schedule X: /' "$1"; }
norm_json() {
  /usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); d.pop("schedule", None); print(json.dumps(d, sort_keys=True))' "$1"
}
# The generated sources without their "Command:" line (it names the schedule as typed).
norm_src() { cat "$1"/rank*.c | grep -v '^// Command'; }

# roundtrip NAME S M 'SCHEDULE-OPTIONS' MODEL [PIPEC-OPTIONS...]: the built-in exported, read
# back without --stages or --virtual (the rows give them): the same plan, the same programs.
roundtrip() {
  local name=$1 S=$2 M=$3 sched=$4 model=$5 b c
  shift 5
  b="$tmp/$name.builtin" c="$tmp/$name.csvrun"
  # shellcheck disable=SC2086 # the schedule options are words
  if ! "$pipec" plan "$model" "$@" --stages "$S" --microbatches "$M" --schedule $sched \
    --dump-after=schedule --json "$b.json" --export-csv "$tmp/$name.csv" >"$b.out" 2>"$b.err"; then
    bad "$name: plan --export-csv: $(head -n 3 "$b.err")"
    return
  fi
  if ! "$pipec" plan "$model" "$@" --microbatches "$M" --schedule "$tmp/$name.csv" \
    --dump-after=schedule --json "$c.json" --export-csv "$tmp/$name.again.csv" >"$c.out" 2>"$c.err"; then
    bad "$name: plan --schedule $name.csv: $(head -n 3 "$c.err")"
    return
  fi
  check "$name: the CSV has S = $S rows" test "$(wc -l <"$tmp/$name.csv")" -eq "$S"
  check "$name: the same schedule dump and plan" cmp -s <(norm_out "$b.out") <(norm_out "$c.out")
  check "$name: the same --json plan" cmp -s <(norm_json "$b.json") <(norm_json "$c.json")
  check "$name: exported again, the same CSV" cmp -s "$tmp/$name.csv" "$tmp/$name.again.csv"
  # shellcheck disable=SC2086
  "$pipec" compile "$model" "$@" --stages "$S" --microbatches "$M" --schedule $sched --no-build \
    -o "$b.d" >/dev/null 2>&1 &&
    "$pipec" compile "$model" "$@" --microbatches "$M" --schedule "$tmp/$name.csv" --no-build \
      -o "$c.d" >/dev/null 2>&1 || { bad "$name: compile --no-build"; return; }
  check "$name: the same generated programs" cmp -s <(norm_src "$b.d") <(norm_src "$c.d")
}
mlp=samples/mlp_digits.json
gpt=samples/gpt_char.json
roundtrip gpipe-s2 2 4 gpipe $mlp
roundtrip 1f1b-s2 2 4 1f1b $mlp
roundtrip zbh1-s2 2 4 zb-h1 $gpt -D L=2
roundtrip interleaved-s2 2 4 'interleaved --virtual 2' $mlp
roundtrip gpipe-s4 4 6 gpipe $gpt -D L=3
roundtrip 1f1b-s4 4 6 1f1b $gpt -D L=3
roundtrip zbh1-s4 4 6 zb-h1 $gpt -D L=3
roundtrip interleaved-s4 4 8 'interleaved --virtual 2' $gpt -D L=7 --batch 16
roundtrip zbv-s2 2 4 zb-v $mlp
roundtrip zbv-s4 4 8 zb-v $gpt -D L=7 --batch 16
# The form itself: 1f1b at S = 2, M = 4 as torch's Schedule1F1B orders it (without its idle cells).
check "1f1b at S = 2, M = 4: the rows" test "$(cat "$tmp/1f1b-s2.csv")" = "0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3
1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3"
check "zb-h1: the backward as I and W" grep -qx '1F0,1I0,1W0,1F1,1I1,1W1,1F2,1I2,1W2,1F3,1I3,1W3' "$tmp/zbh1-s2.csv"
check "interleaved S = 2: stages 0 and 2 on rank 0" grep -q '^0F0,0F1,2F0,' "$tmp/interleaved-s2.csv"
check "zb-v S = 2: stages 0 and 3 on rank 0, 1 and 2 on rank 1 (the V)" test "$(tr -d '0-9' <"$tmp/zbv-s2.csv" | head -c0; cut -d, -f1 "$tmp/zbv-s2.csv" | tr '\n' ' ')" = "0F0 1F0 "

# ---- Training: a CSV schedule's program against the built-in's run, and against S = 1.
g2=($gpt -D L=2)
"$pipec" compile "${g2[@]}" --stages 2 --microbatches 4 --schedule zb-h1 -o "$tmp/zb" >/dev/null 2>&1 &&
  "$pipec" compile "${g2[@]}" --microbatches 4 --schedule "$tmp/zbh1-s2.csv" -o "$tmp/zbcsv" \
    >/dev/null 2>&1 || bad "compile zb-h1 and its CSV"
pipe_run "$tmp/zb-run" "$tmp/zb" || bad "zb-h1: run: $(tail -n 3 "$tmp/zb-run.out")"
pipe_run "$tmp/zbcsv-run" "$tmp/zbcsv" || bad "zb-h1 CSV: run: $(tail -n 3 "$tmp/zbcsv-run.out")"
same_bits "zb-h1 from its CSV = zb-h1" "$tmp/zb-run" "$tmp/zbcsv-run"
pipe_same interleaved-csv $mlp 2 4 "$tmp/interleaved-s2.csv"

# A gpipe/1f1b hybrid: rank 0 runs gpipe's warm-up (3 forwards), rank 1 1f1b with its backward
# split into I and W and the W deferred; stage 0 keeps B whole. No built-in makes it.
printf '%s\n' 0F0,0F1,0F2,0B0,0F3,0B1,0B2,0B3 1F0,1I0,1F1,1I1,1W0,1F2,1I2,1W1,1F3,1I3,1W2,1W3 \
  >"$tmp/hybrid.csv"
"$pipec" plan "${g2[@]}" --microbatches 4 --schedule "$tmp/hybrid.csv" >"$tmp/hybrid.plan" 2>&1 ||
  bad "hybrid: plan: $(head -n 3 "$tmp/hybrid.plan")"
check "hybrid: B and W split on stage 1 only, stage 0 as written" grep -qx 'B and W split on v1 (written with B: v0)' "$tmp/hybrid.plan"
"$pipec" print "${g2[@]}" --microbatches 4 --schedule "$tmp/hybrid.csv" --dump-after=schedule \
  >"$tmp/hybrid.dump" 2>&1 || bad "hybrid: --dump-after=schedule"
check "hybrid: the dump says stage 0's B is whole as written" \
  grep -q '^stage v0: rank 0, .*, B whole (as the schedule writes it)$' "$tmp/hybrid.dump"
check "hybrid: the plan names the CSV" grep -q "^schedule $tmp/hybrid.csv: 2 ranks, 1 stage per rank, 4 microbatches" "$tmp/hybrid.plan"
pipe_same hybrid "${g2[0]}" 2 4 "$tmp/hybrid.csv" "${g2[@]:1}"
# Looped BFS (torch's ScheduleLoopedBFS): every forward of a rank's first stage, then of its
# second, the backwards in reverse.
printf '%s\n' 0F0,0F1,0F2,0F3,2F0,2F1,2F2,2F3,2B0,2B1,2B2,2B3,0B0,0B1,0B2,0B3 \
  1F0,1F1,1F2,1F3,3F0,3F1,3F2,3F3,3B0,3B1,3B2,3B3,1B0,1B1,1B2,1B3 >"$tmp/bfs.csv"
pipe_same looped-bfs $mlp 2 4 "$tmp/bfs.csv"
# Three ranks written as a person might: idle cells, a quoted cell, spaces, CRLF line ends and
# rank 1's F3 and B2 as an overlapped pair (run in that order).
printf '0F0,0F1,0F2,0B0,0F3,0B1,0B2,0B3\r\n,1F0,1F1,1B0,"1F2", 1B1 ,(1F3;1B2)OVERLAP_F_B,1B3\r\n,,2F0,2B0,2F1,2B1,2F2,2B2,2F3,2B3\r\n' \
  >"$tmp/written.csv"
pipe_same written $mlp 3 4 "$tmp/written.csv"
"$pipec" plan $mlp --microbatches 4 --schedule "$tmp/written.csv" --export-csv "$tmp/written.out.csv" \
  >/dev/null 2>&1 || bad "written: plan --export-csv"
check "written: exported in the plain form" test "$(sed -n 2p "$tmp/written.out.csv")" = "1F0,1F1,1B0,1F2,1B1,1F3,1B2,1B3"

# ---- Usage: --export-csv is plan's, at S > 1; a missing CSV file is an error naming it.
expect_usage() { # NAME STDERR-REGEX CMD...
  local name=$1 re=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne 2 ]; then bad "$name: exit $rc, want 2"; elif ! [[ "$(head -n 1 "$tmp/err")" =~ $re ]]; then
    bad "$name: stderr '$(head -n 1 "$tmp/err")' does not match '$re'"
  else ok; fi
}
expect_usage export-not-plan "^pipec: --export-csv is for 'plan' \(got 'check'\)$" \
  "$pipec" check $mlp --stages 2 --export-csv "$tmp/x.csv"
expect_usage export-one-stage "^pipec: --export-csv writes a pipeline schedule: it needs --stages >= 2" \
  "$pipec" plan $mlp --export-csv "$tmp/x.csv"
expect_usage export-no-file "^pipec: --export-csv: expected a file name, got the option '--json'$" \
  "$pipec" plan $mlp --stages 2 --export-csv --json "$tmp/x.json"
expect_usage schedule-unknown "^pipec: --schedule: unknown schedule 'zb-h2' \(gpipe, 1f1b, interleaved, zb-h1, zb-v, or a FILE.csv\)$" \
  "$pipec" plan $mlp --stages 2 --schedule zb-h2
"$pipec" plan $mlp --schedule "$tmp/none.csv" >"$tmp/out" 2>"$tmp/err"
check "a missing CSV: exit 1" test $? -eq 1
check "a missing CSV: one line naming it" test "$(cat "$tmp/err")" = "$tmp/none.csv: error: cannot read the schedule: No such file or directory"
# In the machine-readable formats a CSV error's record names the CSV file, its line and column
# (SARIF: its URI, region and snippet).
printf '0F0,0X0\n1F0\n' >"$tmp/bad.csv"
"$pipec" check $mlp --schedule "$tmp/bad.csv" --diagnostics-format=json >/dev/null 2>"$tmp/err"
check "json: the record names the CSV's cell" /usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert len(r) == 1 and r[0]["pass"] == "schedule", r
assert (r[0]["file"], r[0]["line"], r[0]["column"]) == (sys.argv[2], 1, 5), r
assert r[0]["message"].startswith("'"'"'0X0'"'"': unknown action type"), r
' "$tmp/err" "$tmp/bad.csv"
"$pipec" check $mlp --schedule "$tmp/bad.csv" --diagnostics-format=sarif >/dev/null 2>"$tmp/err"
check "sarif: the result is at the CSV's cell, its line as the snippet" /usr/bin/python3 -c '
import json, sys
res = json.load(open(sys.argv[1]))["runs"][0]["results"]
phys = res[0]["locations"][0]["physicalLocation"]
assert len(res) == 1 and phys["artifactLocation"]["uri"] == "file://" + sys.argv[2], phys
assert phys["region"]["startLine"] == 1 and phys["region"]["startColumn"] == 5, phys
assert phys["region"]["snippet"]["text"] == "0F0,0X0", phys
' "$tmp/err" "$tmp/bad.csv"
printf '{"name": \n' >"$tmp/broken.json" # the model's own errors stay the parse's
"$pipec" check "$tmp/broken.json" --schedule "$tmp/1f1b-s2.csv" --diagnostics-format=json \
  >/dev/null 2>"$tmp/err"
check "json: a model error after the CSV was read is the parse's" /usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert len(r) == 1 and r[0]["pass"] == "parse", r
' "$tmp/err"
mkdir -p "$tmp/ro" && chmod a-w "$tmp/ro"
"$pipec" plan $mlp --stages 2 --export-csv "$tmp/ro/x.csv" >/dev/null 2>"$tmp/err"
rc=$?
chmod u+w "$tmp/ro"
if [ "$(id -u)" -ne 0 ]; then # root writes anywhere
  check "export into a read-only directory: exit 1, one line" \
    test $rc -eq 1 -a "$(cat "$tmp/err")" = "$mlp: error: cannot write '$tmp/ro/x.csv': Permission denied"
  check "export into a read-only directory: no file" test ! -e "$tmp/ro/x.csv" -a ! -e "$tmp/ro/x.csv.tmp"
fi
finish
