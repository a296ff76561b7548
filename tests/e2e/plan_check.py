#!/usr/bin/env python3
"""Checks pipec plan's --json and --svg against its printed schedule (plan_svg.sh).

Usage: plan_check.py PLAN.json PLAN.svg DUMP.txt PLAN.txt
DUMP.txt: `pipec plan ... --dump-after=schedule` (each rank's action list); PLAN.txt: the plan's
printed output (the predicted step time and the per-rank memory lines). Prints the first mismatch
and exits 1; exits 0 when all of them agree."""
import json
import re
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"


def fail(msg):
    print("plan_check: " + msg)
    sys.exit(1)


def main():
    plan = json.load(open(sys.argv[1]))
    svg = ET.parse(sys.argv[2]).getroot()
    dump = open(sys.argv[3]).read()
    text = open(sys.argv[4]).read()
    ranks = plan["rank_programs"]
    # 1. The JSON's per-rank actions are the compiled schedule's, in order.
    printed = {}
    cur = None
    for line in dump.splitlines():
        m = re.match(r"^rank (\d+): (\d+) actions$", line)
        if m:
            cur = int(m.group(1))
            printed[cur] = []
        elif cur is not None and line.startswith("  "):
            printed[cur].append(line.strip())
        else:
            cur = None
    if sorted(printed) != list(range(len(ranks))):
        fail("ranks in the dump %s, in the JSON %d" % (sorted(printed), len(ranks)))
    for rp in ranks:
        r = rp["rank"]
        mine = []
        for a in rp["actions"]:
            k = a["kind"]
            if "message" in a:  # EX_POST, EX_SEND, EX_WAIT: a step-end exchange message
                mine.append("%s(x%d)" % (k, a["message"]))
            elif "channel" in a:  # SEND, RECV, POST_RECV, WAIT_SEND, COPY
                mine.append("%s(c%d, m%d)" % (k, a["channel"], a["m"]))
            elif a["m"] >= 0:
                mine.append("%s(v%d, m%d)" % (k, a["v"], a["m"]))
            elif a["v"] >= 0:
                mine.append("%s(v%d)" % (k, a["v"]))
            else:
                mine.append(k)
            if not (0 <= a["start_s"] <= a["end_s"] <= plan["predicted_step_s"] * (1 + 1e-12)):
                fail("rank %d %s: times %r..%r outside the step" % (r, mine[-1], a["start_s"], a["end_s"]))
        if mine != printed[r]:
            fail("rank %d: JSON actions %s != printed %s" % (r, mine, printed[r]))
    # 2. The predicted step time and the memory are the printed ones.
    m = re.search(r"^predicted step time ([0-9.]+) ms", text, re.M)
    if not m or "%.3f" % (plan["predicted_step_s"] * 1e3) != m.group(1):
        fail("predicted step %r ms, printed %s" % (plan["predicted_step_s"] * 1e3, m and m.group(1)))
    for rp in ranks:
        m = re.search(r"^rank %d: params (\d+) B, grads (\d+) B, optimizer (\d+) B, activations (\d+) B.*total (\d+) B" % rp["rank"], text, re.M)
        mem = rp["memory"]
        got = [mem[k] for k in ("params", "grads", "optimizer", "activations", "total")]
        if not m or got != [int(x) for x in m.groups()]:
            fail("rank %d memory %s, printed %s" % (rp["rank"], got, m and m.groups()))
    # 3. The SVG: per rank exactly the compute actions in order, at the predicted times.
    x0 = float(svg.get("data-x0"))
    scale = float(svg.get("data-px-per-s"))
    for rp in ranks:
        g = svg.find(".//%sg[@id='rank%d']" % (NS, rp["rank"]))
        if g is None:
            fail("no group rank%d" % rp["rank"])
        boxes = [e for e in g.iter(NS + "rect") if e.get("class") in ("F", "B", "W")]
        comp = [a for a in rp["actions"] if a["kind"] in ("F", "B", "W")]
        got = [(e.get("class"), int(e.get("data-v")), int(e.get("data-m"))) for e in boxes]
        want = [(a["kind"], a["v"], a["m"]) for a in comp]
        if got != want:
            fail("rank %d: SVG boxes %s != compute actions %s" % (rp["rank"], got, want))
        for e, a in zip(boxes, comp):
            x, w = float(e.get("x")), float(e.get("width"))
            if abs(x - (x0 + a["start_s"] * scale)) > 0.02 or abs(w - (a["end_s"] - a["start_s"]) * scale) > 0.02:
                fail("rank %d %s: box x %g width %g, predicted %g..%g s" % (rp["rank"], got, x, w, a["start_s"], a["end_s"]))
    # 4. One arrow per SEND, from its time to its RECV's.
    recv = {}
    sends = []
    for rp in ranks:
        for a in rp["actions"]:
            if a["kind"] == "RECV":
                recv[(a["channel"], a["m"])] = a["start_s"]
            if a["kind"] == "SEND":
                sends.append((a["channel"], a["m"], a["start_s"]))
    arrows = [e for e in svg.iter(NS + "line") if e.get("class") == "send"]
    if len(arrows) != len(sends):
        fail("%d arrows for %d sends" % (len(arrows), len(sends)))
    byid = {(int(e.get("data-channel")), int(e.get("data-m"))): e for e in arrows}
    for c, m_, t in sends:
        e = byid.get((c, m_))
        if e is None:
            fail("no arrow for SEND(c%d, m%d)" % (c, m_))
        if abs(float(e.get("x1")) - (x0 + t * scale)) > 0.02 or abs(float(e.get("x2")) - (x0 + recv[(c, m_)] * scale)) > 0.02:
            fail("arrow of SEND(c%d, m%d) not from its send to its receive" % (c, m_))
    print("plan_check: %d ranks, %d actions, %d arrows agree" % (len(ranks), sum(len(r["actions"]) for r in ranks), len(arrows)))


main()
