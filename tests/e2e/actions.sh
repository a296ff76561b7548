#!/usr/bin/env bash
# Codegen prints the action list: the generated train_step() of each sample (gpt_char with M = 1
# and M = 4, mlp_digits, skip_net) is, line for line, the schedule pass's actions of rank 0
# (`pipec print --dump-after=schedule`) but for NORM and OPT, which the runtime runs after it:
# LOAD -> load_v(..., m, slot), F -> F_v(slot), LOSS -> loss += ..., B -> B_v(slot, acc) with acc
# 0 on the stage's first microbatch and 1 after, TIED_SUM -> step_end_v(), each between its
# --trace hooks (pr_trace_begin(PR_TR_F, v, m); ... pr_trace_end();) and commented with its
# microbatch (// m3), the same printer as every rank's at S > 1. The per-(stage, phase) functions
# exist. (That these programs compute the old numbers is the hashes test.)
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
runs=("gpt_m1 samples/gpt_char.json --microbatches 1" "gpt_m4 samples/gpt_char.json --microbatches 4"
  "mlp samples/mlp_digits.json" "skip samples/skip_net.json")
for r in "${runs[@]}"; do
  set -- $r
  name=$1 model=$2
  shift 2
  if ! "$pipec" print --dump-after=schedule "$model" "$@" >"$tmp/$name.sched" 2>"$tmp/err"; then
    bad "$name: schedule dump: $(tail -3 "$tmp/err")"
    continue
  fi
  if ! CC=true "$pipec" compile "$model" "$@" -o "$tmp/$name" 2>"$tmp/err"; then
    bad "$name: compile: $(tail -3 "$tmp/err")"
    continue
  fi
  c=$tmp/$name/rank0.c
  if python3 - "$tmp/$name.sched" "$c" >"$tmp/diff" <<'PY'; then ok; else bad "$name: train_step is not the action list: $(head -5 "$tmp/diff")"; fi
import re, sys
acts = [l.strip() for l in open(sys.argv[1]) if l.startswith("  ")]
want, seen = [], set()
for a in acts:
    k, args = re.match(r"(\w+)\((.*)\)$", a).groups() if "(" in a else (a, "")
    v = re.search(r"v(\d+)", args)
    m = re.search(r"m(\d+)", args)
    v, m = (v.group(1) if v else None), (m.group(1) if m else None)
    # Each line: the call between its --trace hooks, the action as a comment.
    hook = "pr_trace_begin(PR_TR_%s, %s, %s); " % (k, v, m if m is not None else -1)
    note = "" if m is None else " // m" + m
    line = lambda call: hook + call + " pr_trace_end();" + note
    if k == "LOAD": want.append(line("load_%s(PR_TRAIN, seed, step, %s, 0);" % (v, m)))
    elif k == "F": want.append(line("F_%s(0);" % v))
    elif k == "LOSS": want.append(re.compile(re.escape(hook) + r"loss \+= t\d+_\w+\[0\]; "
                                             r"pr_trace_end\(\);" + re.escape(note) + "$"))
    elif k in ("B", "W"):
        want.append(line("%s_%s(0, %d);" % (k, v, 1 if (k, v) in seen else 0)))
        seen.add((k, v))
    elif k == "TIED_SUM": want.append(line("step_end_%s();" % v))
    elif k in ("NORM", "OPT"): pass
    else: sys.exit("unexpected action " + a)
src = open(sys.argv[2]).read()
body = re.search(r"static double train_step\(int64_t step, uint64_t seed\) \{\n  double loss = 0;\n"
                 r"  \(void\)step, \(void\)seed;\n(.*?)  return loss / NMICRO;\n\}", src, re.S)
if not body: sys.exit("no train_step")
got = [l.strip() for l in body.group(1).splitlines()]
if len(got) != len(want): sys.exit("%d lines, %d actions" % (len(got), len(want)))
for g, w in zip(got, want):
    if not (bool(w.match(g)) if hasattr(w, "match") else g == w):
        sys.exit("got %r, want %r" % (g, w if isinstance(w, str) else w.pattern))
PY
  for f in "static void F_0(int slot)" "static void B_0(int slot, int acc)" "static void step_end_0(void)"; do
    check "$name: $f" grep -qF "$f {" "$c"
  done
  check "$name: no forward()/backward() left" bash -c "! grep -qE '^static void (forward|backward)\(' '$c'"
  check "$name: main() is pr_main" grep -q "return pr_main(&program, argc, argv);" "$c"
done
finish
