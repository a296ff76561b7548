#!/usr/bin/env bash
# Time to validation loss on tiny shakespeare: gpt_char's full training run (samples/gpt_char.json,
# 2000 steps of its recipe), or llama_char's (BENCH_MODEL=llama_char: samples/llama_char.json, the
# same recipe), by the pipec program against the same run in PyTorch (bench/torch_train_gpt.py
# --model M: the same model, recipe and validation batches), one run per seed and peer, round
# robin. Measures the wall time from each process's start to its first evaluation at or below
# TARGET, and prints the final validation losses side by side. Prints the result as markdown
# (docs/benchmarks.md, "Time to validation loss"); progress on stderr.
#
#   bench/time_to_loss.sh PIPEC        e.g. bench/time_to_loss.sh build/bin/pipec
#
# Environment: BENCH_MODEL (gpt_char, the default, or llama_char), BENCH_SEEDS (default
# "1337 1 2"), BENCH_THREADS (default 1; a list runs each), TARGET (default 1.89), BENCH_STEPS
# (default 2000, the recipe's; fewer for a smoke run), EVAL_EVERY (default 250: 8 evaluations,
# each about 8% of the training time between them), EVAL_BATCHES (default 50, pipec's; the same
# batches for every peer), BENCH_TORCH2 (the python of a PyTorch 2.x venv; default
# bench/.venv-torch2/bin/python, made by bench/setup-torch2.sh).
#
# Peers, each in its best configuration of bench/train_step.sh (docs/benchmarks.md, "Training
# step"), OMP_NUM_THREADS=T for all: pipec (OMP_WAIT_POLICY=ACTIVE at T > 1, the program's own
# GOMP_SPINCOUNT=1000 at 1); PyTorch 1.13 from Debian (/usr/bin/python3; OMP_WAIT_POLICY=PASSIVE at
# T > 1; OPENBLAS_CORETYPE as the pipec program chose it where it overrode OpenBLAS's choice);
# PyTorch 2.x from PyPI (MKL; defaults). A peer that is not installed is named and left out.
# Exit status: 1 if a run fails, 2 on a usage error. A target missed is reported, not an error.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
bench_init "$@"
bench_text
model=${BENCH_MODEL-gpt_char}
[[ $model == gpt_char || $model == llama_char ]] ||
  { echo "$0: BENCH_MODEL: unknown model '$model' (want gpt_char or llama_char)" >&2; exit 2; }
"$pipec" compile "$root/samples/$model.json" -o "$tmp/gpt" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }

"$py" - "$tmp" "$data" "$commit" "$root" "$model" <<'EOF'
import math, os, re, statistics, subprocess, sys, time

tmp, data, commit, root, model = sys.argv[1:6]
seeds = [int(s) for s in os.environ.get("BENCH_SEEDS", "1337 1 2").split()]
threads = [int(t) for t in os.environ.get("BENCH_THREADS", "1").split()]
target = float(os.environ.get("TARGET", "1.89"))
steps = int(os.environ.get("BENCH_STEPS", "2000"))
every = int(os.environ.get("EVAL_EVERY", "250"))
nbatch = int(os.environ.get("EVAL_BATCHES", "50"))
torch2 = os.environ.get("BENCH_TORCH2", os.path.join(root, "bench/.venv-torch2/bin/python"))
script = os.path.join(root, "bench/torch_train_gpt.py")
train = os.path.join(tmp, "gpt/bin/train")
log = lambda s: (sys.stderr.write(s + "\n"), sys.stderr.flush())
EVAL = re.compile(r"^(?:eval\s+)?step (\d+) \| val loss ([0-9.]+)")
MEDIAN = re.compile(r"^median step time ([0-9.]+) ms")

def importable(python):
    p = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True) \
        if os.path.exists(python) else None
    return p.stdout.strip() if p and p.returncode == 0 else None

peers, missing = [("pipec", None)], []  # (name, python or None for the pipec program)
v = importable("/usr/bin/python3")
peers.append(("PyTorch %s (Debian, OpenBLAS)" % v, "/usr/bin/python3")) if v else missing.append(
    "PyTorch 1.13 (Debian's python3-torch: scripts/install-deps.sh --with-torch)")
v = importable(torch2)
peers.append(("PyTorch %s (PyPI, MKL)" % v, torch2)) if v else missing.append(
    "PyTorch 2.x from PyPI (bench/setup-torch2.sh)")
coretype = None  # OPENBLAS_CORETYPE the pipec program set for itself, for the other OpenBLAS user

def env_for(peer, t):
    e = dict(os.environ, OMP_NUM_THREADS=str(t))
    for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_CORETYPE"):
        e.pop(k, None)
    if peer[1] is None:
        if t > 1: e["OMP_WAIT_POLICY"] = "ACTIVE"
    elif "MKL" not in peer[0]:
        if t > 1: e["OMP_WAIT_POLICY"] = "PASSIVE"
        if coretype: e["OPENBLAS_CORETYPE"] = coretype
    return e

def env_note(peer, t):
    e = env_for(peer, t)
    return " ".join("%s=%s" % (k, e[k]) for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_CORETYPE") if k in e)

def run(peer, seed, t):
    """[(step, loss, seconds since the process started)], median ms per step, stdout."""
    global coretype
    common = ["--seed", str(seed), "--threads", str(t), "--steps", str(steps), "--eval-every", str(every),
              "--eval-batches", str(nbatch)]
    cmd = [train] + common + ["--log-every", str(10**9)] if peer[1] is None else \
          [peer[1], script, "--model", model, "--data", data] + common
    err = open(os.path.join(tmp, "stderr"), "w+")
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1, env=env_for(peer, t))
    evals, out, ms = [], [], None
    for line in p.stdout:  # each line as it arrives: both flush their evaluation lines
        now = time.perf_counter() - t0
        out.append(line)
        m = EVAL.match(line)
        if m: evals.append((int(m.group(1)), float(m.group(2)), now))
        m = MEDIAN.match(line)
        if m: ms = float(m.group(1))
    rc = p.wait()
    if rc != 0 or not evals:
        err.seek(0)
        sys.stderr.write("".join(out[-20:]) + err.read()[-3000:])
        sys.exit("bench: %s seed %d threads %d failed (exit %d)" % (peer[0], seed, t, rc))
    if peer[1] is None:
        m = re.search(r"^blas kernel (\S+) chosen by the program", "".join(out), re.M)
        if m: coretype = m.group(1).upper()
    return evals, ms

load0 = os.getloadavg()[0]
if load0 > 0.5:
    log(f"warning: load average {load0:.2f} at start: the machine is not quiet, timings will be off")
res = {}  # (peer index, t, seed) -> (evals, ms)
t_start = time.time()
for t in threads:
    for seed in seeds:
        for i, peer in enumerate(peers):
            res[(i, t, seed)] = run(peer, seed, t)
            ev = res[(i, t, seed)][0]
            log(f"  {peer[0]}, {t} thread(s), seed {seed}: final val loss {ev[-1][1]:.4f} at {ev[-1][2]:.1f} s "
                f"({time.time() - t_start:.0f} s so far)")

def first_at(evals, x):  # (seconds, step) of the first evaluation <= x, or None
    return next(((s, st) for st, l, s in evals if l <= x), None)

def med(xs):  # the median, with None (not reached) counting as +inf
    v = statistics.median([math.inf if x is None else x for x in xs])
    return None if math.isinf(v) else v

fmt_t = lambda x: "not reached" if x is None else f"{x:.1f} s"
print(f"{model} trained {steps} steps (samples/{model}.json's recipe), seeds {', '.join(map(str, seeds))}; "
      f"evaluation every {every} steps and at the end on the same {nbatch} validation batches for every peer "
      f"({'the whole split' if nbatch == 0 else 'pipec’s, drawn with seed 0x5eed'}); time = wall seconds from the "
      f"process's start to its first evaluation line at or below the target (start-up, data loading and "
      f"evaluations included).")
print()
print(f"Machine: {os.cpu_count()} CPUs, load average at start {load0:.2f}; commit {commit}; "
      f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; OpenBLAS kernel: "
      f"{'OPENBLAS_CORETYPE=' + coretype + ' for PyTorch 1.13, as the pipec program chose over OpenBLAS' if coretype else 'OpenBLAS’s own choice (the pipec program kept it)'}. "
      f"*pipec / peer*: pipec's median time over the peer's (issue 10's target: at most 0.50); "
      f"*median ms/step*: the program's median step time, evaluations excluded.")
if missing:
    print()
    print("Not installed, left out: " + "; ".join(missing) + ".")
for t in threads:
    runs = {(i, s): res[(i, t, s)] for i in range(len(peers)) for s in seeds}
    # A loss every run reached: the highest of the runs' best losses.
    common = max(min(l for _, l, _ in ev) for ev, _ in runs.values())
    for title, x in ((f"validation loss <= {target}", target),
                     (f"the loss every run reached, {common:.4f} (the highest of the runs' best)", common)):
        print()
        print(f"### {t} thread{'s' if t > 1 else ''}: time to {title}")
        print()
        print("| peer | environment | " + " | ".join(f"seed {s}" for s in seeds) + " | median | final val loss per seed "
              "| median ms/step | pipec / peer |")
        print("| --- | --- | " + " | ".join("---:" for _ in seeds) + " | ---: | --- | ---: | ---: |")
        p_med = med([(first_at(runs[(0, s)][0], x) or (None,))[0] for s in seeds])
        for i, peer in enumerate(peers):
            cells, times = [], []
            for s in seeds:
                ev = runs[(i, s)][0]
                hit = first_at(ev, x)
                times.append(hit and hit[0])
                if hit:
                    cells.append(f"{hit[0]:.1f} s (step {hit[1]})")
                else:
                    best = min(ev, key=lambda e: e[1])
                    cells.append(f"not reached (best {best[1]:.4f} at step {best[0]})")
            m = med(times)
            finals = ", ".join(f"{runs[(i, s)][0][-1][1]:.4f}" for s in seeds)
            mss = [runs[(i, s)][1] for s in seeds if runs[(i, s)][1] is not None]
            ms = f"{statistics.median(mss):.1f}" if mss else "–"
            ratio = "–" if i == 0 or m is None or p_med is None else f"{p_med / m:.2f}"
            print(f"| {peer[0]} | {env_note(peer, t)} | " + " | ".join(cells) + f" | {fmt_t(m)} | {finals} | {ms} | {ratio} |")
    print()
    print(f"Validation loss by step ({t} thread{'s' if t > 1 else ''}; wall seconds since the process started at the "
          f"last evaluation):")
    print()
    st = [e[0] for e in runs[(0, seeds[0])][0]]
    print("| peer | seed | " + " | ".join(str(x) for x in st) + " | wall s |")
    print("| --- | ---: | " + " | ".join("---:" for _ in st) + " | ---: |")
    for i, peer in enumerate(peers):
        for s in seeds:
            ev = dict((e[0], e) for e in runs[(i, s)][0])
            print(f"| {peer[0]} | {s} | " + " | ".join(f"{ev[x][1]:.4f}" if x in ev else "–" for x in st) +
                  f" | {runs[(i, s)][0][-1][2]:.1f} |")
    print()
    print(f"Validation loss after {steps} steps ({t} thread{'s' if t > 1 else ''}; the same {nbatch or 'whole-split'} "
          f"batches for every peer; *pipec − peer*: the difference of the means):")
    print()
    print("| peer | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | min–max | pipec − peer |")
    print("| --- | " + " | ".join("---:" for _ in seeds) + " | ---: | ---: | ---: |")
    finals = lambda i: [runs[(i, s)][0][-1][1] for s in seeds]
    for i, peer in enumerate(peers):
        f = finals(i)
        d = "–" if i == 0 else f"{statistics.mean(finals(0)) - statistics.mean(f):+.4f}"
        print(f"| {peer[0]} | " + " | ".join(f"{x:.4f}" for x in f) + f" | {statistics.mean(f):.4f} | "
              f"{min(f):.4f}–{max(f):.4f} | {d} |")
    p_final = med([runs[(0, s)][0][-1][1] for s in seeds])
    if all(first_at(runs[(0, s)][0], target) is None for s in seeds):
        print()
        print(f"pipec's runs never reached {target} in {steps} steps (median final val loss {p_final:.4f}).")
    for i, peer in enumerate(peers[1:], 1):
        if all(first_at(runs[(i, s)][0], target) is None for s in seeds):
            print()
            print(f"{peer[0]}'s runs never reached {target} in {steps} steps "
                  f"(median final val loss {med([runs[(i, s)][0][-1][1] for s in seeds]):.4f}).")
log(f"done in {time.time() - t_start:.0f} s")
EOF
