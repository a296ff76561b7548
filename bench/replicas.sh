#!/usr/bin/env bash
# Stage replication (issue 13's benchmark of S x D layouts): gpt_char (4 layers, T = 64) at one
# fixed global batch of 96 rows in M = 8 microbatches (12 rows each), trained by every layout
# (S stages, D replicas) of pipec's --stages S --replicas D: (1, 1) the one-rank program, (2, 1)
# and (4, 1) pipelines, (1, 2) pure data parallel, (2, 2) both, and (1, 4) (4 replicas of 2
# microbatches). Each run is --threads 1 per rank, round robin over the layouts; its figure is
# the slowest rank's median step time (the first 5 steps are warm-up). Prints a markdown table:
# layout, ranks, ms/step (the median over the rounds), tokens/s (96 x 64 tokens a step), the
# speedup against (1, 1), and every layout's final loss (equal across S at a fixed D, within the
# stated tolerance across D: docs/pipeline.md "Stage replication"). Progress on stderr.
#
#   bench/replicas.sh PIPEC        e.g. bench/replicas.sh build/bin/pipec
#
# Environment: BENCH_STEPS (steps per run, default 30), BENCH_ROUNDS (default 3), BENCH_LAYOUTS
# (default "1x1 2x1 1x2 2x2 4x1 1x4": SxD words), BENCH_SCHEDULE (S > 1; default 1f1b).
# The layouts of 4 ranks need 4 cores to mean anything: on a 2-core machine they oversubscribe the
# cores (the runs then set OMPI_MCA_mpi_yield_when_idle=1, as the tests do, and the table says
# so). Exit status: 0 when every layout ran, 1 when one did not (its row says why), 2 on a usage
# error. A quick check that it runs: BENCH_STEPS=11 BENCH_ROUNDS=1 bench/replicas.sh build/bin/pipec
set -euo pipefail

. "$(dirname "$0")/lib.sh"
bench_init "$@"
bench_text

"$py" - "$pipec" "$tmp" "$data" "$commit" "$root" <<'EOF'
import os, re, statistics, subprocess, sys

pipec, tmp, data, commit, root = sys.argv[1:6]
steps = int(os.environ.get("BENCH_STEPS", "30"))
rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
layouts = os.environ.get("BENCH_LAYOUTS", "1x1 2x1 1x2 2x2 4x1 1x4").split()
sched = os.environ.get("BENCH_SCHEDULE", "1f1b")
WARMUP, M, BATCH, T = 5, 8, 96, 64
if steps < 11:
    sys.exit("bench/replicas.sh: BENCH_STEPS must be at least 11 (the program reports its median step after 10)")
model = os.path.join(root, "samples/gpt_char.json")
log = lambda s: (sys.stderr.write(s + "\n"), sys.stderr.flush())
cores = os.cpu_count() or 1
env = dict(os.environ, OMP_NUM_THREADS="1")
if max(int(a) * int(b) for a, b in (l.split("x") for l in layouts)) > cores:
    env["OMPI_MCA_mpi_yield_when_idle"] = "1"  # more ranks than cores: waiting ranks yield

pending, configs = {}, []  # layout -> why it did not run; (layout, S, D, argv)
for lay in layouts:
    S, D = (int(x) for x in lay.split("x"))
    out = os.path.join(tmp, lay)
    extra = (["--stages", str(S), "--schedule", sched] if S > 1 else []) + (["--replicas", str(D)] if D > 1 else [])
    cmd = [pipec, "compile", model, "--batch", str(BATCH), "--microbatches", str(M), *extra, "-o", out]
    p = subprocess.run(cmd, capture_output=True, text=True)
    prog = os.path.join(out, "launch.sh" if S * D > 1 else "bin/train")
    if p.returncode != 0 or not os.access(prog, os.X_OK):
        err = [l for l in p.stderr.splitlines() if "error" in l] or p.stderr.splitlines() or ["exit %d" % p.returncode]
        pending[lay] = "`pipec compile` failed: " + err[0].strip()
        continue
    configs.append((lay, S, D, [prog], " ".join(["pipec compile samples/gpt_char.json"] + cmd[3:-2])))

def run(cfg, r):
    lay, S, D, argv, _ = cfg
    losslog = os.path.join(tmp, "loss-%s-%d" % (lay, r))
    cmd = argv + ["--threads", "1", "--steps", str(steps), "--eval-every", str(10**9), "--eval-batches", "1",
                  "--log-every", str(10**9), "--loss-log", losslog]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return None, None, "timed out after 900 s"
    m = re.findall(r"^(?:\[rank \d+\] )?median step time ([0-9.]+) ms", p.stdout, re.M)
    if p.returncode != 0 or not m:
        tail = (p.stdout[-1500:] + p.stderr[-1500:]).strip().splitlines()
        return None, None, "exit %d: %s" % (p.returncode, tail[-1] if tail else "no output")
    losses = [float(l.split()[1]) for l in open(losslog)] if os.path.exists(losslog) else []
    return max(float(x) for x in m), losses[-1] if losses else None, None

load0 = os.getloadavg()[0]
log(f"{len(configs)} layouts x {rounds} rounds of {steps} steps on {cores} cores; pending: {', '.join(pending) or 'none'}")
if load0 > 0.5:
    log(f"warning: load average {load0:.2f} at start: the machine is not quiet, timings will be off")
times, last = {c[0]: [] for c in configs}, {}
for r in range(rounds):
    for cfg in configs:
        ms, loss, err = run(cfg, r)
        if err:
            pending[cfg[0]] = err
            log(f"round {r + 1}: {cfg[0]}: {err}")
            continue
        times[cfg[0]].append(ms)
        last[cfg[0]] = loss
        log(f"round {r + 1}: {cfg[0]}: {ms:.1f} ms/step")

med = {k: statistics.median(v) for k, v in times.items() if v and k not in pending}
base = med.get("1x1")
print(f"### S x D layouts: gpt_char, global batch {BATCH} x T {T} in M = {M} microbatches\n")
print(f"pipec {commit}, {steps} steps per run ({WARMUP} warm-up), {rounds} round(s), --threads 1 per rank, "
      f"{cores} cores{' (layouts of more ranks oversubscribe them)' if env.get('OMPI_MCA_mpi_yield_when_idle') else ''}; "
      f"load average {load0:.2f} at the start.\n")
print(f"Each layout: the command below (`-o OUT`), then `OUT/launch.sh` (`OUT/bin/train` at 1 x 1) `--threads 1 "
      f"--steps {steps} --eval-every {10**9} --eval-batches 1 --log-every {10**9}` with OMP_NUM_THREADS=1; "
      f"ms/step is the slowest rank's median step time, tokens/s = {BATCH} x {T} / that.\n")
print("| S | D | ranks | ms/step | tokens/s | speedup vs 1 x 1 | loss at the last step | command |")
print("|---|---|---|---|---|---|---|---|")
for lay in layouts:
    S, D = (int(x) for x in lay.split("x"))
    cmdline = next((c[4] for c in configs if c[0] == lay), "")
    if lay not in med:
        print(f"| {S} | {D} | {S * D} | pending: {pending.get(lay, 'not run')} | | | | `{cmdline}` |")
        continue
    ms = med[lay]
    sp = f"{base / ms:.2f}x" if base else "-"
    loss = f"{last[lay]:.6f}" if last.get(lay) is not None else "-"
    print(f"| {S} | {D} | {S * D} | {ms:.1f} | {BATCH * T / (ms / 1e3):.0f} | {sp} | {loss} | `{cmdline}` |")
sys.exit(1 if pending else 0)
EOF
