#!/usr/bin/env bash
# pipec profile and --costs (docs/pipeline.md, "Profiling and the simulator"): a costs file's
# bad input is one error with its JSON path; the simulator at given costs predicts the exact,
# hand-computed span; the partitioner with costs moves the dynamic program's cut when the
# schedule's simulated step (here: the step end's optimizer) says so; pipec profile writes a
# costs file of positive measurements that plan reads. Nothing here asserts a timing.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
mlp=samples/mlp_digits.json
py=/usr/bin/python3
[ -x $py ] || py=python3

# costs FILE F1 W1 F2 B2 W2 FL BL WL FLOSS BLOSS OPT: a costs file for mlp_digits (units fc1,
# relu1, fc2, relu2, logits, loss), in ms per microbatch; links free; OPT s per parameter byte.
ms() { awk "BEGIN { printf \"%.9g\", $1 / 1000 }"; }
costs() {
  cat >"$1" <<EOT
{"pipec_costs": 1, "model": "mlp_digits", "link": {"latency": 0, "bandwidth": 1e30},
 "optimizer": ${12},
 "units": [
  {"name": "fc1", "f": $(ms $2), "b": 0, "w": $(ms $3)},
  {"name": "relu1", "f": 0, "b": 0, "w": 0},
  {"name": "fc2", "f": $(ms $4), "b": $(ms $5), "w": $(ms $6)},
  {"name": "relu2", "f": 0, "b": 0, "w": 0},
  {"name": "logits", "f": $(ms $7), "b": $(ms $8), "w": $(ms $9)},
  {"name": "loss", "f": $(ms ${10}), "b": $(ms ${11}), "w": 0}]}
EOT
}
pred() { grep -o 'predicted step time [0-9.]* ms' <<<"$1" | grep -o '[0-9.]* ms'; }

# ---- The simulator at given costs: gpipe and 1f1b, S = 2, M = 2, F = 1 ms and B = 2 ms on
# both stages (--split fc2): rank 0 F0 [0,1] F1 [1,2], rank 1 F0 [1,2] F1 [2,3] B0 [3,5]
# B1 [5,7], rank 0 B0 [5,7] B1 [7,9] (1f1b: rank 1 F0 B0 F1 B1 ends at 7 too): 9 ms; with the
# optimizer at 1e-8 s per byte, rank 1's 71208 parameter bytes (fc2, fc3) add 0.712 ms.
costs "$tmp/hand.json" 1 2 1 1 1 0 0 0 0 0 0
for s in gpipe 1f1b; do
  out=$("$pipec" plan $mlp --stages 2 --split fc2 --microbatches 2 --schedule $s --costs "$tmp/hand.json" 2>&1)
  check "hand $s: $(pred "$out")" test "$(pred "$out")" = "9.000 ms"
done
# The partition table's time lines are the measured seconds too: F + B + W = 3 ms per stage.
times=$(grep -E '^(cost model|  time)' <<<"$out" | paste -sd'|' -)
check "partition table at the costs: $times" test "$times" = \
  "cost model: measured ($tmp/hand.json), transfers 0.0 us + bytes at 1e+21 GB/s|  time      3.000 ms per microbatch predicted|  time      3.000 ms per microbatch predicted"
costs "$tmp/hand-opt.json" 1 2 1 1 1 0 0 0 0 0 1e-8
out=$("$pipec" plan $mlp --stages 2 --split fc2 --microbatches 2 --schedule gpipe --costs "$tmp/hand-opt.json" 2>&1)
check "hand with the optimizer: $(pred "$out")" test "$(pred "$out")" = "9.712 ms"
[[ "$out" == *"measured costs from $tmp/hand-opt.json: links 0.0 us"*"step end 0.712 ms)"* ]] && ok || bad "prediction line: $out"
# The machine the costs were measured on: with one core for both ranks (cores 1, or 2 cores and
# 2 threads per rank) the ranks take turns, and the step is the sum of the 12 ms of actions; with
# a core per rank it stays 9 ms.
for m in '1 1' '2 2' '2 1'; do
  set -- $m
  python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["machine"] = {"cores": int(sys.argv[2]), "threads": int(sys.argv[3])}; print(json.dumps(c))' \
    "$tmp/hand.json" "$1" "$2" >"$tmp/hand-m$1$2.json"
  want=$([ "$1" -ge $((2 * $2)) ] && echo "9.000 ms" || echo "12.000 ms")
  for s in gpipe 1f1b; do
    out=$("$pipec" plan $mlp --stages 2 --split fc2 --microbatches 2 --schedule $s --costs "$tmp/hand-m$1$2.json" 2>&1)
    check "hand $s on $1 core(s), $2 thread(s) per rank: $(pred "$out"), want $want" test "$(pred "$out")" = "$want"
  done
done
# Ranks bound to CPUs (machine.bound, mpirun --bind-to core): each queues on its own CPU,
# whatever the count of cores: both on CPU 3 of 2 cores take turns (12 ms, where the pooled
# cores would let them run at once: 9), on CPUs 0 and 1 they do not (9 ms).
for b in '3, 3' '0, 1'; do
  python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["machine"] = {"cores": 2, "threads": 1, "bound": json.loads("[" + sys.argv[2] + "]")}; print(json.dumps(c))' \
    "$tmp/hand.json" "$b" >"$tmp/hand-b.json"
  want=$([ "$b" = '3, 3' ] && echo "12.000 ms" || echo "9.000 ms")
  out=$("$pipec" plan $mlp --stages 2 --split fc2 --microbatches 2 --schedule 1f1b --costs "$tmp/hand-b.json" 2>&1)
  check "hand 1f1b bound to CPUs [$b]: $(pred "$out"), want $want" test "$(pred "$out")" = "$want"
done
# The seconds a shared core lost inside its ranks' actions (machine.stolen, per rank per step)
# stretch each rank's compute in proportion: rank 0's 6 ms of actions by its 1 ms, rank 1's by
# 2 ms; on one CPU the two take turns with no idle moment, 7 + 8 = 15 ms; on a CPU each nothing
# is shared and the step stays 9 ms.
for b in '3, 3' '0, 1'; do
  python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["machine"] = {"cores": 2, "threads": 1, "bound": json.loads("[" + sys.argv[2] + "]"), "stolen": [0.001, 0.002]}; print(json.dumps(c))' \
    "$tmp/hand.json" "$b" >"$tmp/hand-s.json"
  want=$([ "$b" = '3, 3' ] && echo "15.000 ms" || echo "9.000 ms")
  out=$("$pipec" plan $mlp --stages 2 --split fc2 --microbatches 2 --schedule 1f1b --costs "$tmp/hand-s.json" 2>&1)
  check "hand 1f1b bound to CPUs [$b], stolen 1 and 2 ms: $(pred "$out"), want $want" test "$(pred "$out")" = "$want"
done
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["machine"] = {"cores": 2, "threads": 1, "stolen": [0, -0.5]}; print(json.dumps(c))' \
  "$tmp/hand.json" >"$tmp/hand-sneg.json"
hint_re=error expect costs-stolen-neg 1 "^$tmp/hand-sneg.json:1:.*: error: machine.stolen\\[1\\]: expected a non-negative number \\(seconds\\), got -0.5$" \
  "$pipec" plan $mlp --stages 2 --costs "$tmp/hand-sneg.json"
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["machine"] = {"cores": 2, "threads": 1, "bound": [0, -1]}; print(json.dumps(c))' \
  "$tmp/hand.json" >"$tmp/hand-bneg.json"
hint_re=error expect costs-bound-neg 1 "^$tmp/hand-bneg.json:1:.*: error: machine.bound\\[1\\]: -1; expected the CPU rank 1 was bound to, 0 or more$" \
  "$pipec" plan $mlp --stages 2 --costs "$tmp/hand-bneg.json"
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["machine"] = {"cores": 0, "threads": 1}; print(json.dumps(c))' \
  "$tmp/hand.json" >"$tmp/hand-m0.json"
hint_re=error expect costs-no-cores 1 "^$tmp/hand-m0.json:1:.*: error: machine.cores: 0; expected a count of cores, 1 or more$" \
  "$pipec" plan $mlp --stages 2 --costs "$tmp/hand-m0.json"

# The step end's messages: gpt_char at --split transformer.h.2, M = 1, free compute, a latency of
# 1 ms on every message: the activation (1), its gradients back (2), then the tied embedding's
# gradient exchange between the ranks (3) and the loss and norm all-gather (4): 4 ms.
"$py" -c '
import json, sys
u = ["transformer.wte", "transformer.emb"] + ["transformer.h.%d" % i for i in range(4)] + ["transformer.ln_f", "logits", "loss"]
json.dump({"pipec_costs": 1, "link": {"latency": 0.001, "bandwidth": 1e30}, "optimizer": 0,
           "units": [{"name": n, "f": 0, "b": 0, "w": 0} for n in u]}, open(sys.argv[1], "w"))' "$tmp/tied.json"
out=$("$pipec" plan samples/gpt_char.json --stages 2 --split transformer.h.2 --schedule gpipe --costs "$tmp/tied.json" 2>&1)
check "step end's messages: $(pred "$out")" test "$(pred "$out")" = "4.000 ms"

# ---- The partitioner: units of 3 ms each (fc1, fc2, logits, loss): the dynamic program's best
# slowest stage is the 6 | 6 cut before relu2, but stage 0 then updates fc1 and fc2 (99328
# parameter bytes; 99 ms at 1e-6 s per byte), while the cut before relu1 leaves it fc1 only:
# the simulated step is shorter there, and the partitioner moves the cut.
costs "$tmp/part.json" 1 2 1 1 1 1 1 1 1 2 1e-6
auto=$("$pipec" plan $mlp --stages 2 --microbatches 2 --schedule gpipe --costs "$tmp/part.json" 2>&1)
dp=$("$pipec" plan $mlp --stages 2 --split relu2 --microbatches 2 --schedule gpipe --costs "$tmp/part.json" 2>&1)
[[ "$auto" == *"(automatic, moved for the simulated step)"* ]] && ok || bad "partitioner did not move: $auto"
stage1=$(grep -A1 '^stage 1' <<<"$auto" | tail -n 1)
check "the moved cut leaves fc2 on stage 1: $stage1" test "$stage1" = "  nodes     fc2, relu2, logits, loss"
a=$(pred "$auto") d=$(pred "$dp")
check "moved cut predicts less ($a < $d)" python3 -c "import sys; sys.exit(not float('${a% ms}') < float('${d% ms}'))"
# Without the optimizer's cost the dynamic program's cut stands.
costs "$tmp/part0.json" 1 2 1 1 1 1 1 1 1 2 0
out=$("$pipec" plan $mlp --stages 2 --microbatches 2 --schedule gpipe --costs "$tmp/part0.json" 2>&1)
[[ "$out" == *"2 stages (automatic), "* ]] && ok || bad "moved without a reason: $(head -n 1 <<<"$out")"

# On shared cores the partitioner simulates them too: fc1, fc2, logits and loss of 1 ms F each
# (the rest free), S = 3, gpipe, M = 4. On a core per rank the dynamic program's cut [fc1, relu1,
# fc2] [relu2, logits] [loss] takes 10 ms like any cut whose slowest stage holds 2 ms. With ranks
# 0 and 2 bound to one CPU (machine.bound [0, 1, 0]) that cut gives that CPU 3 ms per microbatch
# (12 ms), and the walk moves to the cut that gives each CPU 2: fc2 and logits on stage 1, 10 ms.
cat >"$tmp/shared.json" <<'EOT'
{"pipec_costs": 1, "model": "mlp_digits", "link": {"latency": 0, "bandwidth": 1e30}, "optimizer": 0,
 "units": [{"name": "fc1", "f": 0.001, "b": 0, "w": 0}, {"name": "relu1", "f": 0, "b": 0, "w": 0},
  {"name": "fc2", "f": 0.001, "b": 0, "w": 0}, {"name": "relu2", "f": 0, "b": 0, "w": 0},
  {"name": "logits", "f": 0.001, "b": 0, "w": 0}, {"name": "loss", "f": 0.001, "b": 0, "w": 0}]}
EOT
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["machine"] = {"cores": 2, "threads": 1, "bound": [0, 1, 0]}; print(json.dumps(c))' \
  "$tmp/shared.json" >"$tmp/shared-b.json"
o=(--stages 3 --microbatches 4 --schedule gpipe)
out=$("$pipec" plan $mlp "${o[@]}" --costs "$tmp/shared.json" 2>&1)
check "a core per rank: the dynamic program's cut, $(pred "$out")" \
  test "$(grep -A1 '^stage 1' <<<"$out" | tail -n 1) $(pred "$out")" = "  nodes     relu2, logits 10.000 ms"
out=$("$pipec" plan $mlp "${o[@]}" --split relu2,loss --costs "$tmp/shared-b.json" 2>&1)
check "that cut on the shared CPU: $(pred "$out")" test "$(pred "$out")" = "12.000 ms"
out=$("$pipec" plan $mlp "${o[@]}" --costs "$tmp/shared-b.json" 2>&1)
[[ "$out" == *"(automatic, moved for the simulated step)"* ]] && ok || bad "partitioner did not move on shared cores: $out"
check "shared cores: fc2 and logits on stage 1, $(pred "$out")" \
  test "$(grep -A1 '^stage 1' <<<"$out" | tail -n 1) $(pred "$out")" = "  nodes     fc2, relu2, logits 10.000 ms"

# zb-v's partitioner simulation sums each rank's optimizer seconds over its own stages (rank 0
# holds stages 0 and 3): with a costly optimizer the walk then moves the cut off the dynamic
# program's (summed as in the loop placement, it kept that cut: 97.208 ms).
costs "$tmp/zbv.json" 1 1 1 1 1 1 1 1 0.1 0.1 1e-6
out=$("$pipec" plan $mlp --stages 2 --schedule zb-v --microbatches 4 --costs "$tmp/zbv.json" 2>&1)
check "zb-v with a costly optimizer: $(pred "$out"), the cut moved" \
  test "$(pred "$out") $(grep -c 'moved for the simulated step' <<<"$out")" = "87.848 ms 1"

# ---- Bad costs files: one error with the file, line, column and JSON path; exit 1 (a compiler
# error: no HINT line).
hint_re=error
printf '{"pipec_costs": 1, "optimizer": 0, "units": []}\n' >"$tmp/nolink.json"
expect costs-no-link 1 "^$tmp/nolink.json:1:1: error: costs: missing required key 'link'$" \
  "$pipec" plan $mlp --stages 2 --costs "$tmp/nolink.json"
sed 's/"f": 0.001,/"f": -1,/' "$tmp/hand.json" >"$tmp/neg.json"
expect costs-negative 1 "^$tmp/neg.json:4:.*: error: units\[0\]\.f: expected a non-negative number \(seconds\), got -1$" \
  "$pipec" plan $mlp --stages 2 --costs "$tmp/neg.json"
# Numbers no measurement gives (they would overflow the simulator's sums: before, a unit of
# 1e300 s made the partitioner say no cut fits the memory cap, with no cap given).
sed 's/"f": 0.001,/"f": 1e300,/' "$tmp/hand.json" >"$tmp/huge.json"
expect costs-huge 1 "^$tmp/huge.json:4:.*: error: units\[0\]\.f: 1e300 seconds is no measurement \(expected at most 1e\+06\)$" \
  "$pipec" plan $mlp --stages 2 --costs "$tmp/huge.json"
sed 's/"bandwidth": 1e30/"bandwidth": 1e-300/' "$tmp/hand.json" >"$tmp/slow.json"
expect costs-slow-link 1 "^$tmp/slow.json:1:.*: error: link\.bandwidth: 1e-300 bytes per second is no measurement \(expected at least 1\)$" \
  "$pipec" plan $mlp --stages 2 --costs "$tmp/slow.json"
# A unit listed twice (before: one of the two entries won, silently, exit 0; one at 1 s, then at
# 1 ms predicted seconds instead of milliseconds): the second's position and the first's.
sed '/"relu2"/a\  {"name": "fc1", "f": 1, "b": 0, "w": 0},' "$tmp/hand.json" >"$tmp/dup.json"
expect costs-twice 1 "^$tmp/dup.json:8:4: error: units\[4\]\.name: unit 'fc1' is listed twice \(first at line 4, column 4: units\[0\]\)$" \
  "$pipec" plan $mlp --stages 2 --costs "$tmp/dup.json"
printf '{"pipec_costs": 1, "link": {"latency": 0, "bandwith": 1}, "optimizer": 0, "units": []}\n' >"$tmp/typo.json"
expect costs-typo 1 "^$tmp/typo.json:1:.*: error: link: unknown key 'bandwith' \(did you mean 'bandwidth'\?\)$" \
  "$pipec" plan $mlp --stages 2 --costs "$tmp/typo.json"
printf '{"pipec_costs": 2}\n' >"$tmp/v2.json"
expect costs-version 1 "^$tmp/v2.json:1:.*: error: pipec_costs: version 2, this pipec reads version 1$" \
  "$pipec" plan $mlp --stages 2 --costs "$tmp/v2.json"
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["units"].pop(); print(json.dumps(c))' \
  "$tmp/hand.json" >"$tmp/short.json"
expect costs-other-model 1 "^$tmp/short.json: error: has no unit 'loss' of model 'mlp_digits'" \
  "$pipec" plan $mlp --stages 2 --costs "$tmp/short.json"
printf '{"pipec_costs": 1,' >"$tmp/trunc.json"
expect costs-not-json 1 "^$tmp/trunc.json:1:" "$pipec" plan $mlp --stages 2 --costs "$tmp/trunc.json"
expect costs-missing 1 "^$tmp/none.json: error: cannot open the costs file: No such file or directory$" \
  "$pipec" plan $mlp --stages 2 --costs "$tmp/none.json"
# --diagnostics-format json: stderr is the costs file's document, one record with its position.
"$pipec" plan $mlp --stages 2 --costs "$tmp/typo.json" --diagnostics-format json 2>"$tmp/doc.json" >/dev/null
check "costs error as a JSON document" python3 - "$tmp/doc.json" "$tmp/typo.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d) == 1 and d[0]["file"] == sys.argv[2] and d[0]["line"] == 1, d
assert d[0]["message"] == "link: unknown key 'bandwith' (did you mean 'bandwidth'?)", d
PY
# (M = 2: M = 1 < S would add the bubble warning before the error)
expect profile-no-steps 1 "^samples/mlp_digits.json: error: the profiled run timed no action of stage 0: it needs --steps 1 or more after its warm-up step \(PROGRAM-OPTIONS after --\)$" \
  "$pipec" profile $mlp --stages 2 --microbatches 2 -o "$tmp/nosteps.json" -- --steps 0
expect costs-one-stage 2 "^pipec: --costs is for a pipeline's plan, compile or run \(--stages >= 2\)$" \
  "$pipec" plan $mlp --costs "$tmp/hand.json"
expect profile-one-stage 2 "^pipec: profile measures a pipeline: it needs --stages >= 2 \(or --split\)$" \
  "$pipec" profile $mlp
# (mpirun's abort banner may come first on stderr: the error line is looked for anywhere)
"$pipec" run $mlp --stages 2 -o "$tmp/plain" -- --steps 2 --quiet --eval-batches 1 --profile "$tmp/p.json" \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
check "program not profiled: exit $rc" test $rc -ne 0
check "program not profiled: the error" grep -qE 'rank [01]: error: --profile: this program was not compiled for profiling' "$tmp/err"
check "program not profiled: the hint" grep -qE '^\[rank [01]\] HINT: compile the model with .pipec profile.' "$tmp/err"

# ---- pipec profile end to end (S = 2): the file's structure, every measurement positive where
# it must be, and plan reads it.
mkdir "$tmp/t"
if TMPDIR=$tmp/t "$pipec" profile $mlp --stages 2 --microbatches 2 -o "$tmp/mlp-costs.json" -- --steps 6 >"$tmp/prof.out" 2>&1; then
  ok
  check "profile: structure and positive values" python3 - "$tmp/mlp-costs.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["pipec_costs"] == 1 and c["model"] == "mlp_digits", c
assert [u["name"] for u in c["units"]] == ["fc1", "relu1", "fc2", "relu2", "logits", "loss"]
assert all(u[k] >= 0 for u in c["units"] for k in "fbw")
assert all(u["f"] > 0 for u in c["units"])
assert c["link"]["latency"] >= 0 and c["link"]["bandwidth"] > 0 and c["optimizer"] > 0
m = c["measured"]
assert m["stages"] == 2 and m["schedule"] == "1f1b" and len(m["stage"]) == 2
assert all(s["f"] > 0 and s["b"] > 0 for s in m["stage"]) and all(o > 0 for o in m["opt"])
# the profiled partition's units add up to its measured stages (stage 0 = fc1, relu1)
f0 = sum(u["f"] for u in c["units"][:2])
assert abs(f0 - m["stage"][0]["f"]) <= 1e-6 * m["stage"][0]["f"], (f0, m["stage"][0])
# mpirun binds 2 ranks to cores 0 and 1 by default (map and bind by core, np <= 2): recorded
assert c["machine"]["bound"] == [0, 1], c["machine"]
# a core per rank: the units get the clock's seconds; the CPU seconds are kept for the record
assert m["clock"] == "wall" and all(s["f_cpu"] <= s["f"] for s in m["stage"]), m
PY
  out=$("$pipec" plan $mlp --stages 2 --microbatches 2 --costs "$tmp/mlp-costs.json" 2>&1)
  [[ "$out" == *"predicted step time "*" (measured costs from $tmp/mlp-costs.json"* ]] && ok || bad "plan --costs: $out"
else
  bad "pipec profile: $(tail -n 5 "$tmp/prof.out")"
fi
check "profile leaves no temporary directory" test -z "$(ls -A "$tmp/t")"

# ---- Ranks sharing cores (S = 4 on fewer than 4 cores, one thread each): an action's clock
# time then holds its partner's turns on the core, which the shared-cores replay adds itself, so
# the units get the actions' CPU seconds (each no more than its clock time); with a core per
# rank, the clock's.
clock=$([ "$(nproc --all)" -lt 4 ] && echo cpu || echo wall)
if PIPEC_BIND=core "$pipec" profile $mlp --stages 4 --microbatches 4 -o "$tmp/mlp4.json" -- --steps 6 --threads 1 >"$tmp/prof4.out" 2>&1; then
  check "profile at S = 4 on $(nproc --all) cores: the $clock clock" "$py" - "$tmp/mlp4.json" "$clock" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
m = c["measured"]
assert m["clock"] == sys.argv[2], m
key = "f_cpu" if sys.argv[2] == "cpu" else "f"
assert all(0 < s["f_cpu"] <= s["f"] and 0 < s["b_cpu"] <= s["b"] for s in m["stage"]), m
# stage 0 is fc1 and relu1 (the dynamic program's cut of 6 units into 4): its units' F seconds
# add up to the chosen clock's
u = {x["name"]: x for x in c["units"]}
f0 = u["fc1"]["f"] + u["relu1"]["f"]
assert abs(f0 - m["stage"][0][key]) <= 1e-6 * m["stage"][0][key], (f0, m["stage"][0])
# Where the ranks shared cores, launch.sh bound them (PIPEC_BIND=core, rank r on core r mod
# cores) and what each core lost inside its ranks' actions is kept, a non-negative figure per
# rank; with a core per rank nothing is shared and there is none
mach = c["machine"]
if sys.argv[2] == "cpu":
    assert len(mach["bound"]) == 4, mach
    assert len(mach["stolen"]) == 4 and all(x >= 0 for x in mach["stolen"]), mach
else:
    assert "stolen" not in mach, mach
PY
  # bound, no note; unbound on shared cores, the note that says what is missing
  check "bound ranks: no note" bash -c "! grep -q 'pipec: note:' '$tmp/prof4.out'"
  if [ "$clock" = cpu ]; then
    PIPEC_BIND=none "$pipec" profile $mlp --stages 4 --microbatches 4 -o "$tmp/mlp4u.json" -- --steps 6 --threads 1 >"$tmp/prof4u.out" 2>&1 || bad "unbound profile"
    check "unbound on shared cores: the note" grep -qE "^pipec: note: the 4 ranks shared [0-9]+ cores unbound, so the costs cannot say which ranks share a core nor what a core loses to a rank polling beside it: profile and run with PIPEC_BIND=core for a closer prediction" "$tmp/prof4u.out"
  fi
else
  bad "pipec profile at S = 4: $(tail -n 5 "$tmp/prof4.out")"
fi
finish
