#!/usr/bin/env bash
# Pipeline parallelism on the CPU (issue 8's benchmark): gpt_char (or llama_char, BENCH_MODEL;
# issue 28) at global batch 96 in M = 8 microbatches of 12 rows, 2 ranks x 1 thread against 1
# rank x 1 thread, pipec's 1f1b and zb-h1 against PyTorch's own pipelines training the same model
# (bench/torch_pipeline.py), back to back on the same machine, round robin; and pipec's predicted
# step time (`pipec plan --stages 2`) against the measured one. Prints the whole result as markdown (docs/benchmarks.md, "Pipeline
# parallelism"); progress on stderr.
#
#   bench/pipeline.sh PIPEC        e.g. bench/pipeline.sh build/bin/pipec
#
# Environment: BENCH_MODEL (gpt_char, the default, or llama_char: samples/llama_char.json, cut
# before layers.2, and zb-v before layers.1, layers.2, layers.3; the PyTorch peer gets --model),
# BENCH_STEPS (steps per run; the first 5 are warm-up, the median of the others is
# the run's figure; default 30), BENCH_ROUNDS (default 3), BENCH_TORCH2 (the python of a PyTorch
# 2.x venv; default bench/.venv-torch2/bin/python, made by bench/setup-torch2.sh).
#
# Runs (every one with OMP_NUM_THREADS=1):
#   pipec S = 1    `pipec compile --batch 96 --microbatches 8`, `bin/train --threads 1`
#   pipec S = 2    the same with `--stages 2 --split transformer.h.2 --schedule 1f1b | zb-h1`, and
#                  `--stages 2 --split transformer.h.1,transformer.h.2,transformer.h.3 --schedule
#                  zb-v` (4 stages in a V, as the PyTorch ZBV peer)
#                  (the automatic partitioner's cut, pinned so that the prediction, the program
#                  and the PyTorch peer cut the same place), `launch.sh --threads 1`: 2 ranks
#   PyTorch        torch.distributed.pipelining Schedule1F1B, ScheduleGPipe and
#                  ScheduleZBVZeroBubble (its zero-bubble schedule: 2 stages per rank in a V), 2
#                  processes over gloo (PyTorch 2.x), torch.distributed.pipeline.sync.Pipe (Debian's 1.13), and
#                  each torch's one-process run of the same 8 microbatches (its own speedup)
# The prediction: --flops-rate calibrated on the measured one-rank step (the FLOPs per step that
# `pipec plan` counts / pipec S = 1's median step time), --bandwidth left at its default; then
# `pipec plan --stages 2 --flops-rate R` for each schedule, against the measured S = 2 step.
# Targets (issue 8): 1f1b's speedup >= 90% of the ideal M*S/(M+S-1); zb-h1 faster than 1f1b;
# predicted step time within 10% of measured. Exit status: 0 when every target is met, 1 when
# one is missed or a pipec run could not run (its rows then say "pending" and why), 2 on a usage
# error. A PyTorch peer that is not installed is named and left out.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
bench_init "$@"
bench_text
model=${BENCH_MODEL-gpt_char}
[[ $model == gpt_char || $model == llama_char ]] ||
  { echo "$0: BENCH_MODEL: unknown model '$model' (want gpt_char or llama_char)" >&2; exit 2; }

"$py" - "$pipec" "$tmp" "$data" "$commit" "$root" "$model" <<'EOF'
import os, re, statistics, subprocess, sys, time

pipec, tmp, data, commit, root, model_name = sys.argv[1:7]
steps = int(os.environ.get("BENCH_STEPS", "30"))
rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
torch2 = os.environ.get("BENCH_TORCH2", os.path.join(root, "bench/.venv-torch2/bin/python"))
WARMUP, S, M, BATCH = 5, 2, 8, 96
# the blocks' names: gpt_char's transformer.h.N, llama_char's layers.N
blk = "transformer.h." if model_name == "gpt_char" else "layers."
CUT = blk + "2"
model = os.path.join(root, "samples/%s.json" % model_name)
script = os.path.join(root, "bench/torch_pipeline.py")
med = statistics.median
log = lambda s: (sys.stderr.write(s + "\n"), sys.stderr.flush())
env = dict(os.environ, OMP_NUM_THREADS="1")
common = ["--batch", str(BATCH), "--microbatches", str(M)]
# zb-v: 4 stages of one layer each in a V (rank 0 stages 0 and 3), the automatic cut and the
# PyTorch zbv peer's, pinned like the others
ZBV_CUT = ",".join(blk + str(i) for i in (1, 2, 3))
staged = lambda sched: ["--stages", str(S), "--split", ZBV_CUT if sched == "zb-v" else CUT, "--schedule", sched]
SCHEDS = ("1f1b", "zb-h1", "zb-v")

# ---- pipec's programs: compile each; one that does not compile is pending, with its reason
pending = {}  # configuration name -> why it did not run
def compile_prog(name, extra, out):
    p = subprocess.run([pipec, "compile", model, *common, *extra, "-o", out], capture_output=True, text=True)
    if p.returncode != 0:
        err = [l for l in p.stderr.splitlines() if "error" in l] or p.stderr.splitlines() or ["exit %d" % p.returncode]
        pending[name] = "`pipec compile` failed: " + err[0].strip()
    return p.returncode == 0

configs = []  # (name, kind, argv, processes): kind "pipec1", "pipec2" or "torch"
s1 = os.path.join(tmp, "s1")
if compile_prog("pipec S = 1", [], s1):
    configs.append(("pipec S = 1", "pipec1", [os.path.join(s1, "bin/train")], 1))
for sched in SCHEDS:
    name, out = "pipec S = 2 %s" % sched, os.path.join(tmp, "s2-" + sched)
    if compile_prog(name, staged(sched), out):
        if os.access(os.path.join(out, "launch.sh"), os.X_OK):
            configs.append((name, "pipec2", [os.path.join(out, "launch.sh")], S))
        else:
            pending[name] = "`pipec compile --stages 2` wrote no launch.sh"

def torch_version(python):
    if not os.path.exists(python):
        return None
    p = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else None

def has_module(python, mod):
    return subprocess.run([python, "-c", "import " + mod], capture_output=True).returncode == 0

missing = []
v1, v2 = torch_version("/usr/bin/python3"), torch_version(torch2)
if v2 and has_module(torch2, "torch.distributed.pipelining"):
    configs += [("PyTorch %s pipelining Schedule1F1B" % v2, "torch", [torch2, script, data, "1f1b"], S),
                ("PyTorch %s pipelining ScheduleGPipe" % v2, "torch", [torch2, script, data, "gpipe"], S),
                ("PyTorch %s pipelining ScheduleZBVZeroBubble (4 stages in a V)" % v2, "torch",
                 [torch2, script, data, "zbv"], S),
                ("PyTorch %s one process" % v2, "torch", [torch2, script, data, "one"], 1)]
else:
    missing.append("PyTorch 2.x with torch.distributed.pipelining (bench/setup-torch2.sh)")
if v1 and has_module("/usr/bin/python3", "torch.distributed.pipeline.sync"):
    configs += [("PyTorch %s Pipe" % v1, "torch", ["/usr/bin/python3", script, data, "pipe"], 1),
                ("PyTorch %s one process" % v1, "torch", ["/usr/bin/python3", script, data, "one"], 1)]
else:
    missing.append("PyTorch 1.13 with torch.distributed.pipeline.sync (scripts/install-deps.sh --with-torch)")

# ---- One run: its median step time (ms) and its per-step losses
def run(cfg, r):
    name, kind, argv, _ = cfg
    if kind == "torch":
        cmd = argv + [str(WARMUP), str(steps - WARMUP), "--model", model_name]
    else:
        losslog = os.path.join(tmp, "loss-%s-%d" % (re.sub(r"\W+", "_", name), r))
        cmd = argv + ["--threads", "1", "--steps", str(steps), "--eval-every", str(10**9), "--eval-batches", "1",
                      "--log-every", str(10**9), "--loss-log", losslog]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return None, None, "timed out after 900 s"
    if kind == "torch":
        m = re.findall(r"^([0-9.]+)$", p.stdout, re.M)
        losses = [float(x) for x in re.findall(r"^loss \d+ (\S+)$", p.stderr, re.M)]
    else:  # S = 2: every rank may print its own median ("[rank r] median step time ..."): the slowest
        m = re.findall(r"^(?:\[rank \d+\] )?median step time ([0-9.]+) ms", p.stdout, re.M)
        losses = [float(l.split()[1]) for l in open(losslog)] if os.path.exists(losslog) else []
    if p.returncode != 0 or not m:
        tail = (p.stdout[-1500:] + p.stderr[-1500:]).strip().splitlines()
        return None, None, "exit %d: %s" % (p.returncode, tail[-1] if tail else "no output")
    return max(float(x) for x in m), losses, None

load0 = os.getloadavg()[0]
log(f"{len(configs)} configurations x {rounds} rounds of {steps} steps; pending: {', '.join(pending) or 'none'}")
if load0 > 0.5:
    log(f"warning: load average {load0:.2f} at start: the machine is not quiet, timings will be off")
times = {c[0]: [] for c in configs}
byround = [dict() for _ in range(rounds)]  # per round: configuration -> ms
rload = []  # load average at each round's start
losses = {}
for r in range(rounds):
    rload.append(os.getloadavg()[0])
    for cfg in configs:
        if cfg[0] in pending:
            continue
        t, l, err = run(cfg, r)
        if err:
            if cfg[1] == "torch":
                sys.exit(f"bench: {cfg[0]} failed: {err}")
            pending[cfg[0]] = "the run failed: " + err
            log(f"round {r + 1}: {cfg[0]}: FAILED ({err})")
            continue
        times[cfg[0]].append(t)
        byround[r][cfg[0]] = t
        losses.setdefault(cfg[0], l)
        log(f"round {r + 1}: {cfg[0]}: {t:.1f} ms/step")
load1 = os.getloadavg()[0]

# ---- The prediction, calibrated on pipec S = 1
ms = {n: med(v) for n, v in times.items() if v and n not in pending}
def plan(sched, rate=None):
    cmd = [pipec, "plan", model, *common, *staged(sched)] + (["--flops-rate", "%.6g" % rate] if rate else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"^predicted step time ([0-9.]+) ms, bubble ([0-9.]+)% \(stage costs: ([0-9.e+-]+) GFLOP per step", out, re.M)
    if not m:
        sys.exit("bench: `pipec plan --stages 2` printed no predicted step time")
    return float(m.group(1)), float(m.group(2)), float(m.group(3))
gflop = plan(SCHEDS[0])[2]
t1 = ms.get("pipec S = 1")
rate = gflop / (t1 / 1e3) if t1 else None  # GFLOP/s
pred = {s: plan(s, rate) for s in SCHEDS} if rate else {}

# ---- The machine
cpu = open("/proc/cpuinfo").read()
field = lambda k: (re.search(r"^%s\s*:\s*(.*)$" % k, cpu, re.M) or [None, "?"])[1]
ncpu = os.cpu_count()
print(f"{model_name}, global batch {BATCH} = M {M} microbatches of {BATCH // M} rows x 64 tokens, 1 thread per rank "
      f"(OMP_NUM_THREADS=1, --threads 1); median ms per step of {steps - WARMUP} steps after {WARMUP} warm-up, "
      f"median of {rounds} rounds (round robin over the configurations); S = 2 cut before {CUT}.")
print()
print(f"Machine: {ncpu} CPUs, {field('model name')} (family {field('cpu family')} model {field('model')}); "
      f"load average {load0:.2f} at start, {load1:.2f} at end; commit {commit}; "
      f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.")
print()
ideal = M * S / (M + S - 1)
print("| configuration | processes | ms/step | rounds min–max | speedup over its one-rank run | loss step 0 → last |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
def base_of(name):
    if name.startswith("pipec"):
        return "pipec S = 1"
    v = name.split()[1]
    return f"PyTorch {v} one process"
for name, kind, _, ranks in configs + [(n, "pipec2", None, S) for n in pending if n not in times]:
    if name in pending:
        print(f"| {name} | {ranks} | pending | – | – | – |")
        continue
    v, l = times[name], losses.get(name) or []
    b = ms.get(base_of(name))
    sp = f"{b / ms[name]:.2f}x" if b and base_of(name) != name else "–"
    lo = f"{l[0]:.3f} → {l[-1]:.3f}" if l else "–"
    print(f"| {name} | {ranks} | {ms[name]:.1f} | {min(v):.1f}–{max(v):.1f} | {sp} | {lo} |")
print()
status = 0
notes = []
print(f"Ideal speedup M·S/(M+S−1) = {M}·{S}/{M + S - 1} = {ideal:.3f}; target 90% of it = {0.9 * ideal:.3f}.")
print()
print("| check | measured | target | |")
print("| --- | ---: | ---: | --- |")
def row(what, got, want, ok):
    global status
    if ok is None:
        status = 1
    elif not ok:
        status = 1
        notes.append(f"target missed: {what}")
    print(f"| {what} | {got} | {want} | {'pending' if ok is None else 'met' if ok else 'MISSED'} |")
one = ms.get("pipec S = 1")
for s in SCHEDS:
    n = f"pipec S = 2 {s}"
    t = ms.get(n)
    if s == "1f1b":
        row("1f1b speedup (S = 1 / S = 2)", f"{one / t:.3f}x" if t and one else "pending", f"≥ {0.9 * ideal:.3f}x",
            (one / t >= 0.9 * ideal) if t and one else None)
t_1, t_z = ms.get("pipec S = 2 1f1b"), ms.get("pipec S = 2 zb-h1")
row("zb-h1 faster than 1f1b", f"{t_z:.1f} vs {t_1:.1f} ms" if t_1 and t_z else "pending", "zb-h1 < 1f1b",
    (t_z < t_1) if t_1 and t_z else None)
for s in SCHEDS:
    t = ms.get(f"pipec S = 2 {s}")
    if t and s in pred:
        e = (pred[s][0] - t) / t
        row(f"{s}: predicted {pred[s][0]:.1f} ms (bubble {pred[s][1]:.1f}%) vs measured", f"{100 * e:+.1f}%", "within ±10%",
            abs(e) <= 0.10)
    else:
        row(f"{s}: predicted vs measured", "pending", "within ±10%", None)
print()
if rate:
    print(f"Calibration: `pipec plan` counts {gflop:.4g} GFLOP per step (the registry's FLOPs of every F, B and W "
          f"node at 12 rows, x {M}); pipec S = 1 took {one:.1f} ms: --flops-rate {rate:.2f} (GFLOP/s), "
          f"--bandwidth left at 10 GB/s.")
    print()
# Each round on its own: the same-round ratios (the configurations of a round ran back to back, so
# a load that comes and goes shows here as one bad round rather than as a spread in every row).
pp = lambda d: {n: t for n, t in d.items() if "pipelining" in n or n.endswith(" Pipe")}
print("Per round (load average at the round's start; speedups and errors within the round):")
print()
print("| round | load | pipec S = 1 | 1f1b | zb-h1 | 1f1b speedup | zb-h1 / 1f1b | best PyTorch pipeline | "
      "pipec 1f1b vs it | predicted 1f1b, zb-h1 vs measured |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r, d in enumerate(byround):
    a1, b1, z1 = d.get("pipec S = 1"), d.get("pipec S = 2 1f1b"), d.get("pipec S = 2 zb-h1")
    f = lambda x: f"{x:.1f}" if x else "–"
    tpr = pp(d)
    bp = min(tpr, key=tpr.get) if tpr else None
    rr = gflop / (a1 / 1e3) if a1 else None
    # The prediction calibrated on this round's S = 1 step.
    pe = [f"{100 * (plan(s, rr)[0] - t) / t:+.1f}%" if rr and t else "–" for s, t in (("1f1b", b1), ("zb-h1", z1))]
    print(f"| {r + 1} | {rload[r]:.2f} | {f(a1)} | {f(b1)} | {f(z1)} | " +
          (f"{a1 / b1:.2f}x" if a1 and b1 else "–") + " | " + (f"{z1 / b1:.2f}" if z1 and b1 else "–") + " | " +
          (f"{tpr[bp]:.1f} ({bp.split(' ', 2)[2]})" if bp else "–") + " | " +
          (f"{tpr[bp] / b1:.2f}x" if bp and b1 else "–") + " | " + ", ".join(pe) + " |")
print()
# PyTorch's best pipeline against pipec's.
tp = {n: t for n, t in ms.items() if "pipelining" in n or n.endswith("Pipe")}
if tp:
    best = min(tp, key=tp.get)
    for s in SCHEDS:
        t = ms.get(f"pipec S = 2 {s}")
        print(f"- pipec S = 2 {s} against the best PyTorch pipeline ({best}, {tp[best]:.1f} ms): " +
              (f"**{tp[best] / t:.2f}x** (above 1: pipec is faster)" if t else "pending"))
    t = ms.get("pipec S = 1")
    b1 = {n: v for n, v in ms.items() if n.endswith("one process")}
    if t and b1:
        bb = min(b1, key=b1.get)
        print(f"- one rank: pipec S = 1 {t:.1f} ms against {bb} {b1[bb]:.1f} ms: **{b1[bb] / t:.2f}x**")
    print()
# Losses: pipec's S = 2 runs against its S = 1 run, step by step (the same M: the same bits).
l1 = losses.get("pipec S = 1")
for s in SCHEDS:
    l2 = losses.get(f"pipec S = 2 {s}")
    if l1 and l2:
        same = l1 == l2
        notes.append(f"pipec S = 2 {s}: per-step losses " + ("identical to S = 1's" if same else
                     f"DIFFER from S = 1's (first at step {next(i for i, (a, b) in enumerate(zip(l1, l2)) if a != b)})"))
        if not same:
            status = 1
if any(c[0].endswith(" Pipe") for c in configs):
    notes.append("PyTorch's Pipe runs on the CPU (RPC initialised with world size 1) but is no pipeline "
                 "there: both partitions are on device cpu and Pipe starts one worker thread per device "
                 "(torch/distributed/pipeline/sync/worker.py, create_workers), so the stages run one "
                 "after the other in one thread, and the backward in autograd's one CPU thread")
for n, why in pending.items():
    notes.append(f"{n}: pending ({why})")
for m_ in missing:
    notes.append(f"not installed, left out: {m_}")
if load0 > 0.5 or load1 > 0.5:
    notes.append(f"load average {load0:.2f} at start and {load1:.2f} at end: other processes shared the "
                 f"{ncpu} cores, so the timings (the 2-rank ones most) are off")
for n, v in times.items():
    if v and max(v) > 1.3 * min(v):
        notes.append(f"{n}: rounds spread over 30% ({min(v):.1f}–{max(v):.1f} ms)")
if notes:
    print("Notes (printed by the script):")
    print()
    for n in notes:
        print(f"- {n}")
        if n.startswith("target missed"):
            log("bench: " + n)
sys.exit(status)
EOF
