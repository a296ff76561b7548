#!/usr/bin/env python3
"""Checks a --trace file against the compiled schedule (tests/e2e/trace.sh).

Usage: trace_check.py PLAN.json TRACE.json STEPS

PLAN.json: `pipec plan ... --json` of the same model and options; STEPS: the traced steps, comma
separated. Checks: the file is JSON of the trace-event format with one process per rank; per rank
and traced step, the compute thread's actions in time order are the plan's actions of that rank
(LOAD F LOSS B W TIED_SUM NORM OPT, with stage and microbatch); every message of the plan between
two ranks (SEND, RECV) is one slice on the rank's send or receive threads, named for its channel,
microbatch and peer; every slice lasts
longer than 0, the slices of one thread do not overlap (they must nest to be drawn); every flow
has one start ("s", inside its send's slice) and one end ("f", inside its receive's slice), and
the send starts before the receive ends. Prints one line per failure; exits 1 on any.
"""
import collections
import json
import sys

COMPUTE = {"LOAD", "F", "LOSS", "B", "W", "TIED_SUM", "NORM", "OPT"}


def main():
    plan = json.load(open(sys.argv[1]))
    trace = json.load(open(sys.argv[2]))
    steps = [int(s) for s in sys.argv[3].split(",")]
    bad = []
    events = trace["traceEvents"]
    slices = [e for e in events if e.get("ph") == "X"]
    ranks = plan["ranks"]
    pids = sorted({e["pid"] for e in events})
    if pids != list(range(ranks)):
        bad.append(f"processes {pids}, want ranks 0..{ranks - 1}")
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    for r in range(ranks):
        if names.get(r) != f"rank {r}":
            bad.append(f"process {r} is named {names.get(r)!r}, want 'rank {r}'")
    local = {c["id"] for c in plan["channels"] if c["from_rank"] == c["to_rank"]}
    nch = len(plan["channels"])
    for e in slices:
        a = e["args"]
        if e["cat"] in ("SEND", "RECV") and e["name"] != "%s(c%d, m%d) %s rank %d" % (
                e["cat"], a["tag"], a["m"], "to" if e["cat"] == "SEND" else "from", a["peer"]):
            bad.append(f"rank {e['pid']}: message slice named {e['name']!r}")
        if not e["dur"] > 0:
            bad.append(f"rank {e['pid']}: {e['name']} (step {e['args']['step']}) lasts {e['dur']} us")
    # Per rank and step: the compute actions, the messages.
    for rp in plan["rank_programs"]:
        r = rp["rank"]
        want = [(a["kind"], a["v"], a["m"]) for a in rp["actions"] if a["kind"] in COMPUTE]
        for kind in ("SEND", "RECV"):
            msgs = sorted((a["channel"], a["m"]) for a in rp["actions"]
                          if a["kind"] == kind and a["channel"] not in local)
            for s in steps:
                got = sorted((e["args"]["tag"], e["args"]["m"]) for e in slices
                             if e["pid"] == r and e["cat"] == kind and e["args"]["step"] == s
                             and e["args"]["tag"] < nch)
                if got != msgs:
                    bad.append(f"rank {r} step {s}: {kind} messages (channel, m) {got}, want {msgs}")
        comp = [e for e in slices if e["pid"] == r and e["tid"] == 0]
        seen = sorted({e["args"]["step"] for e in comp})
        if seen != steps:
            bad.append(f"rank {r}: traced steps {seen}, want {steps}")
        for s in steps:
            got = [(e["cat"], e["args"]["v"], e["args"]["m"])
                   for e in sorted((e for e in comp if e["args"]["step"] == s),
                                   key=lambda e: e["ts"])]
            if got != want:
                i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]),
                         min(len(got), len(want)))
                bad.append(f"rank {r} step {s}: compute action {i} is "
                           f"{got[i] if i < len(got) else 'missing'}, the schedule's "
                           f"{want[i] if i < len(want) else 'nothing'} ({len(got)} vs "
                           f"{len(want)} actions)")
            if any(e["name"].split("(")[0] != e["cat"] for e in comp):
                bad.append(f"rank {r}: a compute slice's name does not start with its kind")
    # Slices of one thread do not overlap.
    by_thread = collections.defaultdict(list)
    for e in slices:
        by_thread[(e["pid"], e["tid"])].append(e)
    for (pid, tid), es in sorted(by_thread.items()):
        es.sort(key=lambda e: e["ts"])
        for a, b in zip(es, es[1:]):
            if b["ts"] < a["ts"] + a["dur"]:
                bad.append(f"rank {pid} thread {tid}: {a['name']} and {b['name']} overlap")
                break
    # Flows: one start inside its send, one end inside its receive, the send before the receive.
    flows = collections.defaultdict(dict)
    for e in events:
        if e.get("ph") in ("s", "f"):
            if e["ph"] in flows[e["id"]]:
                bad.append(f"flow {e['id']}: two '{e['ph']}' events")
            flows[e["id"]][e["ph"]] = e
    msg = {(e["cat"], e["args"]["flow"]): e for e in slices if e["cat"] in ("SEND", "RECV")}
    for fid, f in sorted(flows.items()):
        if set(f) != {"s", "f"}:
            bad.append(f"flow {fid}: only {sorted(f)}")
            continue
        snd, rcv = msg.get(("SEND", fid)), msg.get(("RECV", fid))
        if not snd or not rcv:
            bad.append(f"flow {fid}: no send or receive slice")
            continue
        for ev, sl in ((f["s"], snd), (f["f"], rcv)):
            if (ev["pid"], ev["tid"]) != (sl["pid"], sl["tid"]) or not (
                    sl["ts"] <= ev["ts"] <= sl["ts"] + sl["dur"]):
                bad.append(f"flow {fid}: its '{ev['ph']}' is outside {sl['name']}")
        if f["s"]["ts"] > f["f"]["ts"]:
            bad.append(f"flow {fid}: starts at {f['s']['ts']} us, after its end at "
                       f"{f['f']['ts']} us")
        if snd["ts"] >= rcv["ts"] + rcv["dur"]:
            bad.append(f"flow {fid}: the send (rank {snd['pid']}, {snd['ts']} us) does not "
                       f"precede the receive's end (rank {rcv['pid']}, "
                       f"{rcv['ts'] + rcv['dur']} us)")
        if (snd["args"]["peer"], rcv["args"]["peer"]) != (rcv["pid"], snd["pid"]):
            bad.append(f"flow {fid}: joins rank {snd['pid']} to {rcv['pid']}, not its peers")
    sends = sum(1 for (k, _) in msg if k == "SEND")
    if len(flows) != sends:
        bad.append(f"{len(flows)} flows for {sends} sends")
    for b in bad[:20]:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
