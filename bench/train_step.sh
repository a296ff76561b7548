#!/usr/bin/env bash
# Training step of gpt_char (nanoGPT's baby config: batch 12 x 64 tokens, 4 layers, C 128): the
# pipec program against the equivalent PyTorch eager loop (bench/torch_gpt_char.py), each peer in
# its best configuration, same machine, same thread count, round robin; plus the sgemm rate of
# OpenBLAS at the model's GEMM shapes. Prints the whole result as markdown (docs/benchmarks.md,
# "Training step"); progress on stderr.
#
#   bench/train_step.sh PIPEC        e.g. bench/train_step.sh build/bin/pipec
#
# Environment: BENCH_STEPS (steps per run, the first 5 are warm-up; default 30), BENCH_ROUNDS
# (default 3), BENCH_THREADS (default "1 2"), BENCH_TORCH2 (the python of a PyTorch 2.x venv;
# default bench/.venv-torch2/bin/python, made by bench/setup-torch2.sh), SGEMM_REPS (default 100).
#
# Peers: pipec; PyTorch 1.13 from Debian (python3-torch, /usr/bin/python3, links Debian's
# OpenBLAS); PyTorch 2.x from PyPI (MKL), where bench/setup-torch2.sh installed it. A peer that is
# not installed is listed as such and left out.
# Configurations, all run at each thread count T with OMP_NUM_THREADS=T:
#   OpenBLAS kernel (pipec, PyTorch 1.13): the default (OPENBLAS_CORETYPE unset: what a user gets),
#     PRESCOTT (what OpenBLAS 0.3.21 falls back to on CPUs it does not know) and SKYLAKEX, or
#     HASWELL on a CPU without AVX-512; a forced kernel equal to the default is not run twice.
#   OpenMP wait policy: each peer's default and the other one (pipec's programs set
#     GOMP_SPINCOUNT=1000 themselves, their other is ACTIVE; PyTorch's GNU OpenMP defaults to
#     spinning, so its other is PASSIVE). The better is kept and named.
# Exit status: 1 if a run fails, 2 on a usage error. Where pipec as installed (default kernel) is
# not at least 2x faster than the best peer at some thread count, the script says so on stderr: a
# benchmark reports, it does not gate.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
bench_init "$@"
bench_text
"$pipec" compile "$root/samples/gpt_char.json" -o "$tmp/gpt" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
"$pipec" compile --march=native "$root/samples/gpt_char.json" -o "$tmp/gptn" >/dev/null 2>"$tmp/err" ||
  { cat "$tmp/err" >&2; exit 1; }
cc -O2 "$root/bench/sgemm_rate.c" -o "$tmp/sgemm" $(pkg-config --cflags --libs openblas)
# Forward FLOPs per sample, from pipec check ("forward      112.17 MFLOP per sample").
fwd=$("$pipec" check "$root/samples/gpt_char.json" |
  awk '/^forward/ { m = ($3 ~ /^G/) ? 1e9 : ($3 ~ /^M/) ? 1e6 : ($3 ~ /^K/) ? 1e3 : 1; print $2 * m }')
commit=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)

"$py" - "$tmp" "$data" "$fwd" "$commit" "$root" <<'EOF'
import os, re, statistics, subprocess, sys, time

tmp, data, fwd, commit, root = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5]
steps = int(os.environ.get("BENCH_STEPS", "30"))
rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
threads = [int(t) for t in os.environ.get("BENCH_THREADS", "1 2").split()]
torch2 = os.environ.get("BENCH_TORCH2", os.path.join(root, "bench/.venv-torch2/bin/python"))
WARMUP = 5
B, T, C, L, V = 12, 64, 128, 4, 65
flops = 3 * fwd * B  # forward + backward (2x forward), whole batch
sgemm, script = os.path.join(tmp, "sgemm"), os.path.join(root, "bench/torch_gpt_char.py")
med = statistics.median
log = lambda s: (sys.stderr.write(s + "\n"), sys.stderr.flush())

def env_for(t, kernel, wait):
    e = dict(os.environ, OMP_NUM_THREADS=str(t))
    e.pop("OPENBLAS_CORETYPE", None)
    e.pop("OMP_WAIT_POLICY", None)
    if kernel: e["OPENBLAS_CORETYPE"] = kernel
    if wait: e["OMP_WAIT_POLICY"] = wait
    return e

# ---- The machine
cpu = open("/proc/cpuinfo").read()
field = lambda k: (re.search(r"^%s\s*:\s*(.*)$" % k, cpu, re.M) or [None, "?"])[1]
flags = set(field("flags").split())
avx512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags
avx2 = {"avx2", "fma"} <= flags
default_core = subprocess.run([sgemm, "1", "8x8x8:NN"], env=env_for(1, None, None), capture_output=True,
                              text=True, check=True).stdout.split()[1]
CORE = {"PRESCOTT": "Prescott", "HASWELL": "Haswell", "SKYLAKEX": "SkylakeX"}
fast = "SKYLAKEX" if avx512 else "HASWELL" if avx2 else None
kernels = [None] + [k for k in ("PRESCOTT", fast) if k and CORE[k] != default_core]
klabel = lambda k: f"default ({default_core})" if k is None else f"OPENBLAS_CORETYPE={k}"

# ---- Peers and their configurations
def importable(python):
    p = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True) \
        if os.path.exists(python) else None
    return p.stdout.strip() if p and p.returncode == 0 else None

# (name, python or None for a pipec program, the program[, extra environment])
peers = [("pipec", None, os.path.join(tmp, "gpt/bin/train")),
         ("pipec PIPEC_ISA=v1 (baseline kernels)", None, os.path.join(tmp, "gpt/bin/train"), {"PIPEC_ISA": "v1"}),
         ("pipec --march=native", None, os.path.join(tmp, "gptn/bin/train"))]
torch_peers = lambda: [i for i, p in enumerate(peers) if p[1] is not None]
missing = []
v = importable("/usr/bin/python3")
peers.append(("PyTorch %s (Debian, OpenBLAS)" % v, "/usr/bin/python3", None)) if v else missing.append(
    "PyTorch 1.13 (Debian's python3-torch: scripts/install-deps.sh --with-torch)")
v = importable(torch2)
peers.append(("PyTorch %s (PyPI, MKL)" % v, torch2, None)) if v else missing.append(
    "PyTorch 2.x from PyPI (bench/setup-torch2.sh)")
mkl = lambda peer: "MKL" in peer[0]
configs = []  # (peer index, kernel, wait policy or None for the peer's default)
for i, peer in enumerate(peers):
    for k in ([None] if mkl(peer) else kernels):
        for w in (None, "ACTIVE" if peer[1] is None else "PASSIVE"):
            configs.append((i, k, w))

def run(cfg, t):
    i, k, w = cfg
    e = env_for(t, k, w)
    e.update(peers[i][3] if len(peers[i]) > 3 else {})
    if peers[i][1] is None:
        p = subprocess.run([peers[i][2], "--steps", str(steps), "--threads", str(t), "--eval-every", str(10**9),
                            "--eval-batches", "1", "--log-every", str(10**9)], env=e, capture_output=True, text=True)
        m = re.search(r"^median step time ([0-9.]+) ms", p.stdout, re.M)
        info = re.search(r"^blas .*, kernel (\S+),", p.stdout, re.M)
        info = info and info.group(1)
    else:
        p = subprocess.run([peers[i][1], script, data, str(t), str(WARMUP), str(steps - WARMUP)], env=e,
                           capture_output=True, text=True)
        m = re.search(r"^([0-9.]+)$", p.stdout, re.M)
        info = re.search(r"\| kernel ([^|]+?) \|", p.stderr)
        info = info and info.group(1)
    if p.returncode != 0 or not m:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-2000:])
        sys.exit(f"bench: run {peers[i][0]} {klabel(k)} wait {w or 'default'} threads {t} failed")
    return float(m.group(1)), info

nruns = rounds * len(threads) * len(configs)
log(f"{len(configs)} configurations x {len(threads)} thread counts x {rounds} rounds = {nruns} runs of {steps} steps")
load0 = os.getloadavg()[0]
if load0 > 0.5:
    log(f"warning: load average {load0:.2f} at start: the machine is not quiet, timings will be off")

# ---- Steps: round robin over every configuration, so that a noisy spell spreads over all
res = {}   # (cfg, t) -> [ms per round]
kern = {}  # (cfg, t) -> kernel the run reported
t0 = time.time()
for r in range(rounds):
    for t in threads:
        for cfg in configs:
            ms, info = run(cfg, t)
            res.setdefault((cfg, t), []).append(ms)
            kern[(cfg, t)] = info
        log(f"  round {r + 1}/{rounds}, {t} thread(s) done, {time.time() - t0:.0f} s")

# ---- sgemm at the model's shapes: row-major C[M,N] = op(A) op(B), rows = B*T tokens.
R = B * T
linears = [("attn.c_attn", C, 3 * C, L), ("attn.c_proj", C, C, L), ("mlp.c_fc", C, 4 * C, L),
           ("mlp.c_proj", 4 * C, C, L), ("lm_head (tied wte)", C, V, 1)]
shapes = []  # (name, shape string, flops, count per step)
for name, fin, fout, count in linears:
    shapes += [(f"{name} forward", f"{R}x{fout}x{fin}:NT", 2 * R * fout * fin, count),
               (f"{name} grad input", f"{R}x{fin}x{fout}:NN", 2 * R * fout * fin, count),
               (f"{name} grad weight", f"{fout}x{fin}x{R}:TN", 2 * R * fout * fin, count)]
gemm = {}  # (kernel, t) -> {shape: GFLOP/s}
for k in kernels:
    for t in threads:
        out = subprocess.run([sgemm, str(t)] + [s[1] for s in shapes], env=env_for(t, k, None),
                             capture_output=True, text=True, check=True).stdout.split("\n")
        gemm[(k, t)] = dict((l.split()[0], float(l.split()[1])) for l in out[1:] if l)
log(f"  sgemm rates done, {time.time() - t0:.0f} s")
gemm_flops = sum(f * n for _, _, f, n in shapes)
def step_rate(k, t):  # the step's GEMMs at these rates: total FLOPs / total time
    return gemm_flops / sum(f * n / (gemm[(k, t)][s] * 1e9) for _, s, f, n in shapes) / 1e9

# ---- Tables
def best(i, k, t):  # (ms, wait policy kept, [per policy (wait, ms, rounds)])
    rows = [(w, med(res[(c, t)]), res[(c, t)]) for c in configs for (ci, ck, w) in [c] if ci == i and ck == k]
    b = min(rows, key=lambda x: x[1])
    return b[1], b[0], rows
wname = lambda i, w: (w if w else "default (GOMP_SPINCOUNT=1000, set by the program)" if peers[i][1] is None else "default")

print(f"gpt_char training step (batch 12 x 64 tokens), median ms per step of {steps - WARMUP} steps after "
      f"{WARMUP} warm-up, median of {rounds} rounds (round robin over all configurations); "
      f"{flops / 1e9:.2f} GFLOP per step (3 x forward).")
print()
print(f"Machine: {os.cpu_count()} CPUs, {field('model name')} (family {field('cpu family')} model {field('model')}), "
      f"{'AVX-512' if avx512 else 'AVX2' if avx2 else 'no AVX2'}{', AMX' if 'amx_tile' in flags else ''}; "
      f"OpenBLAS default kernel {default_core}; load average at start {load0:.2f}; commit {commit}; "
      f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.")
if missing:
    print()
    print("Not installed, left out: " + "; ".join(missing) + ".")
print()
notes = []
for t in threads:
    print(f"### {t} thread{'s' if t > 1 else ''}")
    print()
    print("| peer | BLAS kernel | ms/step, default wait | ms/step, other wait | kept | rounds min–max | GFLOP/s | of T x 1-thread sgemm |")
    print("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |")
    for i, peer in enumerate(peers):
        for k in ([None] if mkl(peer) else kernels):
            ms, w, rows = best(i, k, t)
            got = kern[((i, k, rows[0][0]), t)]
            kl = "MKL" if mkl(peer) else klabel(k) + ("" if got in (None, CORE.get(k, default_core)) else f" (ran {got}!)")
            rr = [x for x in rows if x[0] == w][0][2]
            frac = f"{100 * flops / (ms / 1e3) / 1e9 / (t * step_rate(k, 1)):.0f}%" if not mkl(peer) and 1 in threads else "–"
            print(f"| {peer[0]} | {kl} | {rows[0][1]:.1f} | {rows[1][1]:.1f} ({rows[1][0]}) | {wname(i, w)} "
                  f"| {min(rr):.1f}–{max(rr):.1f} | {flops / (ms / 1e3) / 1e9:.1f} | {frac} |")
            if max(rr) > 1.3 * min(rr):
                notes.append(f"{t} thread(s), {peer[0]}, {kl}: rounds spread {min(rr):.1f}–{max(rr):.1f} ms (> 30%): noisy")
            if max(x[1] for x in rows) > 2 * ms:
                slow = max(rows, key=lambda x: x[1])
                notes.append(f"{t} thread(s), {peer[0]}, {kl}: wait policy {wname(i, slow[0])} is "
                             f"{slow[1] / ms:.1f}x slower ({slow[1]:.1f} ms): spinning threads fighting over the cores")
            if t > 1 and 1 in threads and ms > best(i, k, 1)[0]:
                notes.append(f"{peer[0]}, {kl}: slower at {t} threads ({ms:.1f} ms) than at 1 ({best(i, k, 1)[0]:.1f} ms), "
                             f"in its best wait policy: anomalous")
    print()

print("### pipec against the best peer")
print()
print("Each row sets the OpenBLAS kernel for every peer that links OpenBLAS (PyTorch 2.x runs MKL in every row); "
      "each peer in its better wait policy. Ratio = best peer's ms / pipec's ms (above 1: pipec is faster).")
print()
print("| threads | OpenBLAS kernel | pipec build | pipec ms/step | best peer | its ms/step | ratio |")
print("| ---: | --- | --- | ---: | --- | ---: | ---: |")
target_ok = True
for t in threads:
    for k in kernels:
        for pi in (0, 1, 2):  # the portable default, its baseline kernels, then --march=native
            p_ms = best(pi, k, t)[0]
            build = ("portable (default)", "portable, PIPEC_ISA=v1", "--march=native")[pi]
            cands = [(best(i, None if mkl(peers[i]) else k, t), i) for i in torch_peers()]
            if not cands:
                print(f"| {t} | {klabel(k)} | {build} | {p_ms:.1f} | (none installed) | – | – |")
                continue
            (b_ms, b_w, _), bi = min(cands, key=lambda x: x[0][0])
            print(f"| {t} | {klabel(k)} | {build} | {p_ms:.1f} | {peers[bi][0]}, wait {wname(bi, b_w)} | {b_ms:.1f} "
                  f"| {b_ms / p_ms:.2f}x |")
            if pi == 0 and k is None and b_ms / p_ms < 2:
                target_ok = False
print()
print(f"sgemm GFLOP/s of OpenBLAS at the model's shapes (rows {R} = 12 x 64 tokens; best of "
      f"{os.environ.get('SGEMM_REPS', '100')} after a warm-up; OpenBLAS's own threads):")
print()
cols = [(k, t) for k in kernels for t in threads]
print("| GEMM | M x N x K | per step | " + " | ".join(f"{klabel(k)}, {t} thr" for k, t in cols) + " |")
print("| --- | --- | ---: | " + " | ".join("---:" for _ in cols) + " |")
for name, s, f, n in shapes:
    print(f"| {name} | {s} | {n} | " + " | ".join(f"{gemm[c][s]:.1f}" for c in cols) + " |")
print(f"| **the step's GEMMs** ({gemm_flops / 1e9:.2f} GFLOP) | | | " +
      " | ".join(f"**{step_rate(*c):.1f}**" for c in cols) + " |")
print()
print("*of T x 1-thread sgemm*: the step's GFLOP/s (3 x forward) over T times the 1-thread rate of *the step's GEMMs* "
      "with the same kernel: the cores' GEMM rate at these shapes (pipec runs OpenBLAS single-threaded in each of its "
      "T threads, so OpenBLAS's own T-thread rate is not its ceiling).")
if notes:
    print()
    print("Notes (printed by the script):")
    print()
    for n in notes:
        print(f"- {n}")
log(f"done in {time.time() - t0:.0f} s")
if not target_ok:
    log("note: pipec as installed is not 2x faster than the best peer at every thread count")
EOF
