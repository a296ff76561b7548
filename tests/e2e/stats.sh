#!/usr/bin/env bash
# Runtime statistics of a pipeline job (--stats, docs/pipeline.md "Runtime statistics"): mlp_digits
# (no tied parameters: every byte is a channel's) at S = 3 (1f1b, M = 4), 4 steps with
# --log-every 2: one table per interval (steps 1..2, 3..4) and one for the whole run, a row per
# rank, each rank's bytes sent and received per step exactly the compiled plan's (every channel
# it sends or receives, once per microbatch: `pipec plan --json`); the times are positive and
# the waits no more than the wall time; the losses are bit for bit those of the run without
# --stats; --quiet keeps the interval tables and drops the final one.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
. "$root/tests/e2e/mpi_env.sh"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
cfg=(samples/mlp_digits.json --batch 24 --microbatches 4 --stages 3 --schedule 1f1b)
"$pipec" compile "${cfg[@]}" -o "$tmp/s3" >/dev/null 2>"$tmp/err" || bad "compile: $(head -2 "$tmp/err")"
"$pipec" plan "${cfg[@]}" --json "$tmp/plan.json" >/dev/null 2>"$tmp/err" || bad "plan: $(head -2 "$tmp/err")"
args=(--steps 4 --threads 1 --eval-every 0 --eval-batches 1 --log-every 2)
timeout -k 5 120 "$tmp/s3/launch.sh" "${args[@]}" --stats --loss-log "$tmp/a.loss" >"$tmp/a.out" 2>&1 ||
  bad "--stats run: $(tail -3 "$tmp/a.out")"
timeout -k 5 120 "$tmp/s3/launch.sh" "${args[@]}" --loss-log "$tmp/b.loss" >"$tmp/b.out" 2>&1 ||
  bad "plain run: $(tail -3 "$tmp/b.out")"
timeout -k 5 120 "$tmp/s3/launch.sh" "${args[@]}" --stats --quiet >"$tmp/q.out" 2>&1 ||
  bad "--stats --quiet run: $(tail -3 "$tmp/q.out")"
check "--stats changes no loss bit" cmp -s "$tmp/a.loss" "$tmp/b.loss"
check "no statistics table without --stats but the whole run's" \
  test "$(grep -c 'statistics ' "$tmp/b.out")" = 1
"$py" - "$tmp/plan.json" "$tmp/a.out" "$tmp/q.out" >"$tmp/check.out" 2>&1 <<'PY'
import json, re, sys
plan = json.load(open(sys.argv[1]))
M, R = plan["microbatches"], plan["ranks"]
sent, recv = [0] * R, [0] * R
for c in plan["channels"]:
    if c["from_rank"] != c["to_rank"]:
        sent[c["from_rank"]] += c["bytes"] * M
        recv[c["to_rank"]] += c["bytes"] * M
def fmt(b):
    return "%.2f MiB" % (b / 2**20) if b >= 2**20 else "%.1f KiB" % (b / 2**10) if b >= 2**10 else "%.0f B" % b
def tables(path):
    out, cur = [], None
    for line in open(path):
        line = re.sub(r"^\[rank \d+\] ", "", line.rstrip("\n"))
        m = re.match(r"statistics (.*), per step: (\d+) steps?$", line)
        if m:
            cur = {"what": m.group(1), "steps": int(m.group(2)), "rows": []}
            out.append(cur)
        elif cur is not None and re.match(r"\s+\d+ ", line):
            f = line.split()
            cur["rows"].append([int(f[0])] + [float(x) for x in f[1:6]] + [" ".join(f[6:8]), " ".join(f[8:10])])
    return out
errors = []
t = tables(sys.argv[2])
want = [("of steps 1..2", 2), ("of steps 3..4", 2), ("of the run", 4)]
if [(x["what"], x["steps"]) for x in t] != want:
    errors.append("tables %s, want %s" % ([(x["what"], x["steps"]) for x in t], want))
for x in t:
    if [r[0] for r in x["rows"]] != list(range(R)):
        errors.append("%s: rows %s" % (x["what"], [r[0] for r in x["rows"]]))
    for r in x["rows"]:
        rank, wall, comp, rw, sw, sync, s, rv = r
        if not (wall > 0 and comp > 0 and min(rw, sw, sync) >= 0 and rw + sw + sync <= wall + 0.01):
            errors.append("%s rank %d: times %s" % (x["what"], rank, r[1:6]))
        if (s, rv) != (fmt(sent[rank]), fmt(recv[rank])):
            errors.append("%s rank %d: sent %s received %s, the plan's %s and %s" % (x["what"], rank, s, rv, fmt(sent[rank]), fmt(recv[rank])))
q = tables(sys.argv[3])
if [x["what"] for x in q] != ["of steps 1..2", "of steps 3..4"]:
    errors.append("--quiet --stats: tables %s" % [x["what"] for x in q])
if errors:
    print("\n".join(errors))
sys.exit(1 if errors else 0)
PY
rc=$?
check "the statistics tables: $(head -3 "$tmp/check.out" | tr '\n' ';')" test $rc -eq 0
finish
