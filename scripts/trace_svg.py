#!/usr/bin/env python3
"""Draws a --trace file as a timeline viewer does (Perfetto's layout, offline): one group of
tracks per process (rank), one track per thread (compute, send, send 2, ..., recv, ...), each
"X" slice a box with its name where it fits, each flow an arrow from its "s" to its "f" event.

Usage: scripts/trace_svg.py TRACE.json OUT.svg [STEP]
  STEP: draw only the slices and flows of that step (args.step); default: all.

Only the standard library; the output is one SVG (bench/trace_pictures.sh screenshots it).
"""
import collections
import json
import sys
from xml.sax.saxutils import escape

LEFT, WIDTH, TRACK, GAP, TOP = 150, 1100, 18, 10, 30
COLOURS = {"F": "#4e79a7", "B": "#59a14f", "W": "#f28e2b", "LOAD": "#9c755f", "LOSS": "#b07aa1",
           "TIED_SUM": "#76b7b2", "NORM": "#bab0ac", "OPT": "#e15759", "SEND": "#edc948",
           "RECV": "#ff9da7"}


def main():
    trace = json.load(open(sys.argv[1]))["traceEvents"]
    step = int(sys.argv[3]) if len(sys.argv) > 3 else None
    names, threads = {}, collections.defaultdict(dict)
    for e in trace:
        if e.get("ph") == "M" and e["name"] == "process_name":
            names[e["pid"]] = e["args"]["name"]
        if e.get("ph") == "M" and e["name"] == "thread_name":
            threads[e["pid"]][e["tid"]] = e["args"]["name"]
    slices = [e for e in trace if e.get("ph") == "X" and
              (step is None or e["args"].get("step") == step)]
    ids = {e["args"]["flow"] for e in slices if "flow" in e["args"]}
    flows = collections.defaultdict(dict)
    for e in trace:
        if e.get("ph") in ("s", "f") and e["id"] in ids:
            flows[e["id"]][e["ph"]] = e
    t0 = min(e["ts"] for e in slices)
    t1 = max(e["ts"] + e["dur"] for e in slices)
    scale = WIDTH / (t1 - t0)
    # Tracks: per process, its threads that have slices in the range, in tid order.
    used = {(e["pid"], e["tid"]) for e in slices}
    rows, y = {}, TOP
    out = []
    for pid in sorted(threads):
        out.append(f'<text x="4" y="{y + 12}" font-weight="bold">{escape(names.get(pid, str(pid)))}</text>')
        y += TRACK
        for tid in sorted(threads[pid]):
            if (pid, tid) not in used:
                continue
            rows[(pid, tid)] = y
            out.append(f'<rect x="{LEFT}" y="{y}" width="{WIDTH}" height="{TRACK - 2}" fill="#f4f4f4"/>')
            out.append(f'<text x="{LEFT - 6}" y="{y + 12}" text-anchor="end">'
                       f'{escape(threads[pid][tid])}</text>')
            y += TRACK
        y += GAP
    for e in slices:
        x, w, ry = LEFT + (e["ts"] - t0) * scale, max(e["dur"] * scale, 0.5), rows[(e["pid"], e["tid"])]
        out.append(f'<rect x="{x:.2f}" y="{ry}" width="{w:.2f}" height="{TRACK - 2}" '
                   f'fill="{COLOURS.get(e["cat"], "#999")}" stroke="#fff" stroke-width="0.5">'
                   f'<title>{escape(e["name"])} {e["dur"]:.1f} us</title></rect>')
        label = e["name"]
        if w > 6.2 * len(label):
            out.append(f'<text x="{x + w / 2:.2f}" y="{ry + 12}" text-anchor="middle" '
                       f'fill="#fff">{escape(label)}</text>')
    for f in flows.values():
        if set(f) != {"s", "f"}:
            continue
        s, e = f["s"], f["f"]
        x1, y1 = LEFT + (s["ts"] - t0) * scale, rows[(s["pid"], s["tid"])] + TRACK / 2
        x2, y2 = LEFT + (e["ts"] - t0) * scale, rows[(e["pid"], e["tid"])] + TRACK / 2
        out.append(f'<line x1="{x1:.2f}" y1="{y1:.2f}" x2="{x2:.2f}" y2="{y2:.2f}" stroke="#333" '
                   f'stroke-width="0.8" marker-end="url(#a)"/>')
    # Time axis in ms.
    span = (t1 - t0) / 1000
    tick = next(t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
                if span / t <= 10)
    out.append(f'<line x1="{LEFT}" y1="{y}" x2="{LEFT + WIDTH}" y2="{y}" stroke="#000"/>')
    k = 0
    while k * tick <= span * (1 + 1e-9):
        x = LEFT + k * tick * 1000 * scale
        out.append(f'<line x1="{x:.2f}" y1="{y}" x2="{x:.2f}" y2="{y + 4}" stroke="#000"/>')
        out.append(f'<text x="{x:.2f}" y="{y + 16}" text-anchor="middle">{k * tick:g}</text>')
        k += 1
    title = (f"{sys.argv[1].split('/')[-1]}: " + (f"step {step}" if step is not None else "all steps")
             + f", {span:.3f} ms; arrows: messages (send's post to receive's end)")
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + WIDTH + 20}" height="{y + 30}" '
           f'font-family="sans-serif" font-size="10">',
           '<defs><marker id="a" markerWidth="6" markerHeight="6" refX="6" refY="3" orient="auto">'
           '<path d="M0,0 L6,3 L0,6 z" fill="#333"/></marker></defs>',
           f'<rect width="100%" height="100%" fill="#fff"/>',
           f'<text x="4" y="16">{escape(title)}</text>'] + out + ['</svg>']
    open(sys.argv[2], "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
