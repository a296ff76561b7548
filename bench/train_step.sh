#!/usr/bin/env bash
# Training step of gpt_char (nanoGPT's baby config: batch 12 x 64 tokens, 4 layers, C 128): the
# pipec program against the equivalent PyTorch eager loop (bench/torch_gpt_char.py), each peer in
# its best configuration, same machine, same thread count, round robin; plus the sgemm rate of
# OpenBLAS at the model's GEMM shapes. Then the same figures, in fewer configurations, for gpt_wide:
# the same model and recipe at C 768, 12 heads, T 256, 4 layers (written by samples/gen_gpt.py at
# run time), where the GEMMs are a larger share of the step. llama_char (samples/llama_char.json,
# issue 28: Llama-3-style, the same recipe; its PyTorch peer torchtitan's Llama,
# bench/torch_llama.py) runs in gpt_char's configurations and prints the same tables, when
# BENCH_MODELS names it. Prints the whole result as markdown (docs/benchmarks.md, "Training
# step"); progress on stderr.
#
#   bench/train_step.sh PIPEC        e.g. bench/train_step.sh build/bin/pipec
#
# Environment: BENCH_MODELS (default "gpt_char gpt_wide"; any of gpt_char, llama_char, gpt_wide),
# BENCH_STEPS (gpt_char's and llama_char's steps per run, the first 5 are warm-up; default 30),
# BENCH_WIDE_STEPS (gpt_wide's, the same way; default 13), BENCH_WIDE_BATCH (gpt_wide's batch;
# default 2), BENCH_ROUNDS (default 3), BENCH_THREADS (default "1 2"), BENCH_TORCH2 (the python of
# a PyTorch 2.x venv; default bench/.venv-torch2/bin/python, made by bench/setup-torch2.sh),
# BENCH_COMPILE (default 1; 0 leaves out the torch.compile peer), SGEMM_REPS (default 100). The
# programs print their median step only past 10 steps: both step counts must be at least 11.
#
# Peers: pipec; PyTorch 1.13 from Debian (python3-torch, /usr/bin/python3, links Debian's
# OpenBLAS); PyTorch 2.x from PyPI (MKL), where bench/setup-torch2.sh installed it, eager and with
# the model wrapped in torch.compile (inductor's C++ on the CPU; compiled in the warm-up steps,
# cached across runs in inductor's cache directory). A peer that is not installed is listed as
# such and left out.
# Configurations of gpt_char (and llama_char), all run at each thread count T with OMP_NUM_THREADS=T:
#   OpenBLAS kernel (pipec, PyTorch 1.13): the default (OPENBLAS_CORETYPE unset: what a user gets),
#     PRESCOTT (what OpenBLAS 0.3.21 falls back to on CPUs it does not know) and SKYLAKEX, or
#     HASWELL on a CPU without AVX-512; a forced kernel equal to the default is not run twice.
#   OpenMP wait policy: each peer's default and the other one (pipec's programs set
#     GOMP_SPINCOUNT=1000 themselves, their other is ACTIVE; PyTorch's GNU OpenMP defaults to
#     spinning, so its other is PASSIVE). The better is kept and named.
#   pipec's builds: portable (the default), the same with PIPEC_ISA=v1 (baseline kernels) and
#     --march=native.
# gpt_wide runs fewer: the default OpenBLAS kernel and pipec's portable build only; at 1 thread each
#   peer's default wait policy only, at more both, the better kept (which one wins depends on the
#   peer and on how busy the machine is: a fixed choice was 3-4x off in trial runs). Its batch
#   (default 2: 92 GFLOP, about 0.9 s a step at 1 thread here) is in its table's header.
# Exit status: 1 if a run fails, 2 on a usage error. Where pipec as installed (default kernel) is
# not at least 2x faster than the best peer on gpt_char (llama_char: faster, issue 28's target) at
# some thread count, the script says so on stderr: a benchmark reports, it does not gate.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
bench_init "$@"
bench_text
models=${BENCH_MODELS-gpt_char gpt_wide}
[[ -n ${models// /} ]] || { echo "$0: BENCH_MODELS is empty (want gpt_char, llama_char, gpt_wide)" >&2; exit 2; }
for m in $models; do
  [[ $m == gpt_char || $m == llama_char || $m == gpt_wide ]] ||
    { echo "$0: BENCH_MODELS: unknown model '$m' (want gpt_char, llama_char or gpt_wide)" >&2; exit 2; }
done
for v in BENCH_STEPS BENCH_WIDE_STEPS; do
  [[ ${!v-11} =~ ^[0-9]+$ && ${!v-11} -ge 11 ]] || {
    echo "$0: $v=${!v} is not a number >= 11 (the programs print their median step after 5 warm-up steps, only past 10 steps)" >&2
    exit 2
  }
done
wide_batch=${BENCH_WIDE_BATCH-2}
[[ $wide_batch =~ ^[1-9][0-9]*$ ]] || { echo "$0: BENCH_WIDE_BATCH=$wide_batch is not a number >= 1" >&2; exit 2; }
# Forward FLOPs per sample, from pipec check ("forward      112.17 MFLOP per sample").
fwd_of() {
  "$pipec" check "$1" |
    awk '/^forward/ { m = ($3 ~ /^G/) ? 1e9 : ($3 ~ /^M/) ? 1e6 : ($3 ~ /^K/) ? 1e3 : 1; print $2 * m }'
}
compile() { # MODEL OUT [pipec compile options...]
  local model=$1 out=$2
  shift 2
  "$pipec" compile "$@" "$model" -o "$out" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
}
fwd_char=0 fwd_llama=0 fwd_wide=0 wide_params=0 wide_mib=0
for m in gpt_char llama_char; do
  if [[ " $models " == *" $m "* ]]; then
    compile "$root/samples/$m.json" "$tmp/$m"
    compile "$root/samples/$m.json" "$tmp/$m-native" --march=native
    if [[ $m == gpt_char ]]; then fwd_char=$(fwd_of "$root/samples/$m.json"); else fwd_llama=$(fwd_of "$root/samples/$m.json"); fi
  fi
done
if [[ " $models " == *" gpt_wide "* ]]; then
  # gpt_char's recipe (training section, tied head, exact GELU) at the wider shape; the text's path
  # is set absolute, the generated file lying in the temp directory.
  "$py" "$root/samples/gen_gpt.py" --embd 768 --heads 12 --context 256 --layers 4 --name gpt_wide \
    -o "$tmp/gpt_wide.json"
  compile "$tmp/gpt_wide.json" "$tmp/wide" --batch "$wide_batch" --set "data.path=$data"
  fwd_wide=$(fwd_of "$tmp/gpt_wide.json")
  wide_params=$("$pipec" check "$tmp/gpt_wide.json" | awk '/^parameters/ { gsub(",", "", $2); print $2 }')
  wide_mib=$("$pipec" plan "$tmp/gpt_wide.json" --batch "$wide_batch" | awk '$1 == "total" { print $2 }')
fi
cc -O2 "$root/bench/sgemm_rate.c" -o "$tmp/sgemm" $(pkg-config --cflags --libs openblas)

BENCH_MODELS=$models BENCH_WIDE_BATCH=$wide_batch "$py" - "$tmp" "$data" "$fwd_char" "$commit" "$root" \
  "$fwd_wide" "$wide_params" "$wide_mib" "$fwd_llama" <<'EOF'
import os, re, statistics, subprocess, sys, time

tmp, data, commit, root = sys.argv[1], sys.argv[2], sys.argv[4], sys.argv[5]
fwd_sample = {"gpt_char": float(sys.argv[3]), "llama_char": float(sys.argv[9])}  # forward FLOPs per sample
fwd_wide, wide_params, wide_mib = float(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8])
models = os.environ["BENCH_MODELS"].split()
char_models = [m for m in ("gpt_char", "llama_char") if m in models]
steps = int(os.environ.get("BENCH_STEPS", "30"))
wide_steps = int(os.environ.get("BENCH_WIDE_STEPS", "13"))
WB, WT, WC, WNH, WL = int(os.environ["BENCH_WIDE_BATCH"]), 256, 768, 12, 4  # gpt_wide's shape
rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
threads = [int(t) for t in os.environ.get("BENCH_THREADS", "1 2").split()]
torch2 = os.environ.get("BENCH_TORCH2", os.path.join(root, "bench/.venv-torch2/bin/python"))
WARMUP = 5  # the programs time the steps after 5 warm-up steps; the PyTorch peer is told the same
B, T, C, L, V = 12, 64, 128, 4, 65
NKV, HD, FF = 2, 32, 352  # llama_char's kv heads, head dim, SwiGLU width (samples/llama_char.json)
flops_of = {m: 3 * fwd_sample[m] * B for m in char_models}  # forward + backward (2x forward), whole batch
TARGET = {"gpt_char": 2.0, "llama_char": 1.0}  # pipec's wanted lead (issue 10's 2x; issue 28: ahead)
wide_flops = 3 * fwd_wide * WB
wide_args = ["--batch", str(WB), "--context", str(WT), "--embd", str(WC), "--heads", str(WNH), "--layers", str(WL)]
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
# gpt_wide runs one kernel: the fast one (forced where OpenBLAS's default fell back to Prescott, as
# the pipec program forces it for itself), for its sgemm rates and for PyTorch 1.13, not a fallback's
wk = fast if fast in kernels else None
klabel = lambda k: f"default ({default_core})" if k is None else f"OPENBLAS_CORETYPE={k}"

# ---- Peers and their configurations
def importable(python):
    p = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True) \
        if os.path.exists(python) else None
    return p.stdout.strip() if p and p.returncode == 0 else None

# (name, python or None for a pipec program, the program's build ("" or "-native") or the peer
# script's extra arguments[, extra environment])
peers = [("pipec", None, ""),
         ("pipec PIPEC_ISA=v1 (baseline kernels)", None, "", {"PIPEC_ISA": "v1"}),
         ("pipec --march=native", None, "-native")]
torch_peers = lambda: [i for i, p in enumerate(peers) if p[1] is not None]
missing = []
v = importable("/usr/bin/python3")
peers.append(("PyTorch %s (Debian, OpenBLAS)" % v, "/usr/bin/python3", [])) if v else missing.append(
    "PyTorch 1.13 (Debian's python3-torch: scripts/install-deps.sh --with-torch)")
v = importable(torch2)
peers.append(("PyTorch %s (PyPI, MKL)" % v, torch2, [])) if v else missing.append(
    "PyTorch 2.x from PyPI (bench/setup-torch2.sh)")
if v and os.environ.get("BENCH_COMPILE", "1") != "0":
    peers.append(("PyTorch %s (PyPI, MKL) torch.compile" % v, torch2, ["--compile"]))
mkl = lambda peer: "MKL" in peer[0]
configs = []  # (peer index, kernel, wait policy or None for the peer's default)
for i, peer in enumerate(peers):
    for k in ([None] if mkl(peer) else kernels):
        for w in (None, "ACTIVE" if peer[1] is None else "PASSIVE"):
            configs.append((i, k, w))
# gpt_wide: pipec's portable build and the PyTorch peers, default kernel; at 1 thread in the peer's
# default wait policy only (no other thread to wait for), at more in both, the better kept.
wide_peers = [0] + torch_peers()
other_wait = lambda i: "ACTIVE" if peers[i][1] is None else "PASSIVE"
wide_waits = lambda i, t: [None] if t == 1 else [None, other_wait(i)]

def run(cfg, t, model):  # -> (ms per step, the kernel the run reported, its first step's loss)
    i, k, w = cfg
    wide = model == "gpt_wide"
    e = env_for(t, k, w)
    e.update(peers[i][3] if len(peers[i]) > 3 else {})
    n = wide_steps if wide else steps
    if peers[i][1] is None:
        prog = os.path.join(tmp, "wide/bin/train") if wide else os.path.join(tmp, model + peers[i][2], "bin/train")
        p = subprocess.run([prog, "--steps", str(n), "--threads", str(t), "--eval-every", str(10**9),
                            "--eval-batches", "1", "--log-every", str(10**9)], env=e, capture_output=True, text=True)
        m = re.search(r"^median step time ([0-9.]+) ms", p.stdout, re.M)
        info = re.search(r"^blas .*, kernel (\S+),", p.stdout, re.M)
        loss = re.search(r"^step 1/[0-9]+ \| loss ([0-9.]+) ", p.stdout, re.M)
    else:
        p = subprocess.run([peers[i][1], script, data, str(t), str(WARMUP), str(n - WARMUP)] + peers[i][2] +
                           (wide_args if wide else ["--model", model]), env=e, capture_output=True, text=True)
        m = re.search(r"^([0-9.]+)$", p.stdout, re.M)
        info = re.search(r"\| kernel ([^|]+?) \|", p.stderr)
        loss = re.search(r"^loss at step 1 ([0-9.]+)$", p.stderr, re.M)
    if p.returncode != 0 or not m:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-2000:])
        sys.exit(f"bench: run {peers[i][0]} {model} {klabel(k)} wait {w or 'default'} threads {t} failed")
    return float(m.group(1)), info and info.group(1), loss and float(loss.group(1))

load0 = os.getloadavg()[0]
if load0 > 0.5:
    log(f"warning: load average {load0:.2f} at start: the machine is not quiet, timings will be off")

# ---- Steps: round robin over every configuration, so that a noisy spell spreads over all
res = {}   # (model, cfg, t) -> [ms per round]
kern = {}  # (model, cfg, t) -> kernel the run reported
t0 = time.time()
if char_models:
    nruns = rounds * len(threads) * len(configs) * len(char_models)
    log(f"{' and '.join(char_models)}: {len(configs)} configurations x {len(threads)} thread counts x {rounds} "
        f"rounds = {nruns} runs of {steps} steps")
    for r in range(rounds):
        for t in threads:
            for model in char_models:
                for cfg in configs:
                    ms, info, _ = run(cfg, t, model)
                    res.setdefault((model, cfg, t), []).append(ms)
                    kern[(model, cfg, t)] = info
            log(f"  round {r + 1}/{rounds}, {t} thread(s) done, {time.time() - t0:.0f} s")
wres, wkern, wloss = {}, {}, {}  # gpt_wide's: (peer index, wait, t) -> [ms per round], kernel, first losses
if "gpt_wide" in models:
    nw = rounds * sum(len(wide_waits(i, t)) for i in wide_peers for t in threads)
    log(f"gpt_wide: {len(wide_peers)} peers x {len(threads)} thread counts (both wait policies above 1 thread) x "
        f"{rounds} rounds = {nw} runs of {wide_steps} steps")
    for r in range(rounds):
        for t in threads:
            for i in wide_peers:
                for w in wide_waits(i, t):
                    ms, info, loss = run((i, wk, w), t, "gpt_wide")
                    wres.setdefault((i, w, t), []).append(ms)
                    wkern[(i, w, t)] = info
                    wloss.setdefault((i, w, t), []).append(loss)
            log(f"  gpt_wide round {r + 1}/{rounds}, {t} thread(s) done, {time.time() - t0:.0f} s")

# ---- sgemm at a model's shapes: row-major C[M,N] = op(A) op(B), rows = batch x T tokens.
def gemm_shapes(b, t, c, l, v, model="gpt_char"):  # -> [(name, shape string, flops, count per step)]
    r = b * t
    linears = [("attn.c_attn", c, 3 * c, l), ("attn.c_proj", c, c, l), ("mlp.c_fc", c, 4 * c, l),
               ("mlp.c_proj", 4 * c, c, l), ("lm_head (tied wte)", c, v, 1)]
    if model == "llama_char":  # wk and wv, w1 and w3 have one shape each
        linears = [("attention.wq", c, c, l), ("attention.wk, wv", c, NKV * HD, 2 * l), ("attention.wo", c, c, l),
                   ("feed_forward.w1, w3", c, FF, 2 * l), ("feed_forward.w2", FF, c, l), ("output", c, v, 1)]
    out = []
    for name, fin, fout, count in linears:
        out += [(f"{name} forward", f"{r}x{fout}x{fin}:NT", 2 * r * fout * fin, count),
                (f"{name} grad input", f"{r}x{fin}x{fout}:NN", 2 * r * fout * fin, count),
                (f"{name} grad weight", f"{fout}x{fin}x{r}:TN", 2 * r * fout * fin, count)]
    return out

def gemm_rates(shapes, kerns):  # -> {(kernel, t): {shape: GFLOP/s}}
    g = {}
    for k in kerns:
        for t in threads:
            out = subprocess.run([sgemm, str(t)] + [s[1] for s in shapes], env=env_for(t, k, None),
                                 capture_output=True, text=True, check=True).stdout.split("\n")
            g[(k, t)] = dict((l.split()[0], float(l.split()[1])) for l in out[1:] if l)
    return g

def rate_of(shapes, g):  # the step's GEMMs at the rates g: total FLOPs / total time, GFLOP/s
    return sum(f * n for _, _, f, n in shapes) / sum(f * n / (g[s] * 1e9) for _, s, f, n in shapes) / 1e9

def gemm_table(shapes, gemm, cols, rows_note):
    print(f"sgemm GFLOP/s of OpenBLAS at the model's shapes ({rows_note}; best of "
          f"{os.environ.get('SGEMM_REPS', '100')} after a warm-up; OpenBLAS's own threads):")
    print()
    print("| GEMM | M x N x K | per step | " + " | ".join(f"{klabel(k)}, {t} thr" for k, t in cols) + " |")
    print("| --- | --- | ---: | " + " | ".join("---:" for _ in cols) + " |")
    for name, s, f, n in shapes:
        print(f"| {name} | {s} | {n} | " + " | ".join(f"{gemm[c][s]:.1f}" for c in cols) + " |")
    print(f"| **the step's GEMMs** ({sum(f * n for _, _, f, n in shapes) / 1e9:.2f} GFLOP) | | | " +
          " | ".join(f"**{rate_of(shapes, gemm[c]):.1f}**" for c in cols) + " |")
    print()
    print("*of T x 1-thread sgemm*: the step's GFLOP/s (3 x forward) over T times the machine's 1-thread rate of "
          "*the step's GEMMs* (the fastest kernel's column above): the cores' GEMM rate at these shapes (pipec runs its "
          "GEMMs single-threaded in each of its T threads, so a BLAS's own T-thread rate is not its ceiling; pipec's "
          "own GEMM at x86-64-v3/v4 does not depend on OpenBLAS's kernel). *of T-thread sgemm*: the same over the "
          "machine's T-thread rate of *the step's GEMMs* (the fastest kernel's T-thread column), issue 10's measure "
          "(same threads, same shapes): at 1 thread the two columns are one.")

shapes_of, gemm_of, machine_rate_of, machine_rate_t_of = {}, {}, {}, {}
for model in char_models:
    shapes = shapes_of[model] = gemm_shapes(B, T, C, L, V, model)
    gemm = gemm_of[model] = gemm_rates(shapes, kernels)
    log(f"  {model} sgemm rates done, {time.time() - t0:.0f} s")
    step_rate = lambda k, t: rate_of(shapes, gemm[(k, t)])
    machine_rate_of[model] = max(step_rate(k, 1) for k in kernels) if 1 in threads else 0
    # issue 10's measure: the machine's T-thread rate at the same shapes (the fastest kernel's)
    machine_rate_t_of[model] = {t: max(step_rate(k, t) for k in kernels) for t in threads}
if "gpt_wide" in models:
    wshapes = gemm_shapes(WB, WT, WC, WL, V)
    wgemm = gemm_rates(wshapes, [wk])
    log(f"  gpt_wide sgemm rates done, {time.time() - t0:.0f} s")

machine = (f"Machine: {os.cpu_count()} CPUs, {field('model name')} (family {field('cpu family')} model "
           f"{field('model')}), {'AVX-512' if avx512 else 'AVX2' if avx2 else 'no AVX2'}"
           f"{', AMX' if 'amx_tile' in flags else ''}; OpenBLAS default kernel {default_core}; load average at start "
           f"{load0:.2f}; commit {commit}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.")
def print_machine():
    print()
    print(machine)
    if missing:
        print()
        print("Not installed, left out: " + "; ".join(missing) + ".")
    print()

# ---- Tables
def best(i, k, t, model):  # (ms, wait policy kept, [per policy (wait, ms, rounds)])
    rows = [(w, med(res[(model, c, t)]), res[(model, c, t)]) for c in configs for (ci, ck, w) in [c]
            if ci == i and ck == k]
    b = min(rows, key=lambda x: x[1])
    return b[1], b[0], rows
wname = lambda i, w: (w if w else "default (GOMP_SPINCOUNT=1000, set by the program)" if peers[i][1] is None else "default")

notes = []
missed = []  # the char models where pipec as installed misses its target at some thread count
def char_tables(model, h):  # h: the heading level of the model's sections ("###", or "####" under its own)
    flops, shapes, gemm = flops_of[model], shapes_of[model], gemm_of[model]
    machine_rate, machine_rate_t = machine_rate_of[model], machine_rate_t_of[model]
    what = ("" if model == "gpt_char" else "; samples/llama_char.json: 4 layers, C 128, 4 heads, 2 kv heads, SwiGLU "
            "352, RoPE, RMSNorm, untied head, gpt_char's recipe; the PyTorch peers run torchtitan's Llama, "
            "bench/torch_llama.py")
    print(f"{model} training step (batch 12 x 64 tokens{what}), median ms per step of {steps - WARMUP} steps after "
          f"{WARMUP} warm-up, median of {rounds} rounds (round robin over all configurations); "
          f"{flops / 1e9:.2f} GFLOP per step (3 x forward).")
    if model == char_models[0]:
        print_machine()
    else:
        print()
    for t in threads:
        print(f"{h} {t} thread{'s' if t > 1 else ''}")
        print()
        print("| peer | BLAS kernel | ms/step, default wait | ms/step, other wait | kept | rounds min–max | GFLOP/s | of T x 1-thread sgemm | of T-thread sgemm |")
        print("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
        for i, peer in enumerate(peers):
            for k in ([None] if mkl(peer) else kernels):
                ms, w, rows = best(i, k, t, model)
                got = kern[(model, (i, k, rows[0][0]), t)]
                kl = "MKL" if mkl(peer) else klabel(k) + ("" if got in (None, CORE.get(k, default_core)) else f" (ran {got}!)")
                rr = [x for x in rows if x[0] == w][0][2]
                # against the machine's rate: the best kernel's (pipec's own GEMM at v3/v4 does not
                # run OpenBLAS's kernel, so a forced one says nothing of its ceiling)
                frac = f"{100 * flops / (ms / 1e3) / 1e9 / (t * machine_rate):.0f}%" if 1 in threads else "–"
                frac_t = f"{100 * flops / (ms / 1e3) / 1e9 / machine_rate_t[t]:.0f}%"
                print(f"| {peer[0]} | {kl} | {rows[0][1]:.1f} | {rows[1][1]:.1f} ({rows[1][0]}) | {wname(i, w)} "
                      f"| {min(rr):.1f}–{max(rr):.1f} | {flops / (ms / 1e3) / 1e9:.1f} | {frac} | {frac_t} |")
                tag = "" if model == "gpt_char" else f"{model}, "
                if max(rr) > 1.3 * min(rr):
                    notes.append(f"{tag}{t} thread(s), {peer[0]}, {kl}: rounds spread {min(rr):.1f}–{max(rr):.1f} ms (> 30%): noisy")
                if max(x[1] for x in rows) > 2 * ms:
                    slow = max(rows, key=lambda x: x[1])
                    notes.append(f"{tag}{t} thread(s), {peer[0]}, {kl}: wait policy {wname(i, slow[0])} is "
                                 f"{slow[1] / ms:.1f}x slower ({slow[1]:.1f} ms): spinning threads fighting over the cores")
                if t > 1 and 1 in threads and ms > best(i, k, 1, model)[0]:
                    notes.append(f"{tag}{peer[0]}, {kl}: slower at {t} threads ({ms:.1f} ms) than at 1 "
                                 f"({best(i, k, 1, model)[0]:.1f} ms), in its best wait policy: anomalous")
        print()

    print(f"{h} pipec against the best peer")
    print()
    print("Each row sets the OpenBLAS kernel for every peer that links OpenBLAS (PyTorch 2.x runs MKL in every row); "
          "each peer in its better wait policy. Ratio = best peer's ms / pipec's ms (above 1: pipec is faster).")
    print()
    print("| threads | OpenBLAS kernel | pipec build | pipec ms/step | best peer | its ms/step | ratio |")
    print("| ---: | --- | --- | ---: | --- | ---: | ---: |")
    for t in threads:
        for k in kernels:
            for pi in (0, 1, 2):  # the portable default, its baseline kernels, then --march=native
                p_ms = best(pi, k, t, model)[0]
                build = ("portable (default)", "portable, PIPEC_ISA=v1", "--march=native")[pi]
                cands = [(best(i, None if mkl(peers[i]) else k, t, model), i) for i in torch_peers()]
                if not cands:
                    print(f"| {t} | {klabel(k)} | {build} | {p_ms:.1f} | (none installed) | – | – |")
                    continue
                (b_ms, b_w, _), bi = min(cands, key=lambda x: x[0][0])
                print(f"| {t} | {klabel(k)} | {build} | {p_ms:.1f} | {peers[bi][0]}, wait {wname(bi, b_w)} | {b_ms:.1f} "
                      f"| {b_ms / p_ms:.2f}x |")
                if pi == 0 and k is None and b_ms / p_ms < TARGET[model] and model not in missed:
                    missed.append(model)
    print()
    gemm_table(shapes, gemm, [(k, t) for k in kernels for t in threads], f"rows {B * T} = 12 x 64 tokens")

for model in char_models:
    if model != char_models[0]:
        print()
        print(f"### {model}")
        print()
    char_tables(model, "###" if model == char_models[0] else "####")

if "gpt_wide" in models:
    if char_models:
        print()
        print(f"### gpt_wide")
        print()
    print(f"gpt_wide training step (samples/gen_gpt.py --embd {WC} --heads {WNH} --context {WT} --layers {WL}: "
          f"gpt_char's model and recipe at C {WC}, {WNH} heads, T {WT}, {WL} layers, vocab {V}; "
          f"{wide_params / 1e6:.2f} M parameters; **batch {WB} x {WT} tokens**; memory plan {wide_mib:.1f} MiB), "
          f"median ms per step of {wide_steps - WARMUP} steps after {WARMUP} warm-up, median of {rounds} rounds "
          f"(round robin); {wide_flops / 1e9:.2f} GFLOP per step (3 x forward). OpenBLAS's fast kernel and pipec's "
          f"portable build only; each peer's default wait policy, and above 1 thread also its other one, the better "
          f"kept.")
    if not char_models:
        print_machine()
    else:
        print()
    wrate = lambda t: rate_of(wshapes, wgemm[(wk, t)])
    def wbest(i, t):  # (ms, wait policy kept, its rounds)
        return min(((med(wres[(i, w, t)]), w, wres[(i, w, t)]) for w in wide_waits(i, t)), key=lambda x: x[0])
    wms = lambda i, t: wbest(i, t)[0]
    print("| threads | peer | BLAS kernel | ms/step, default wait | ms/step, other wait | kept | rounds min–max "
          "| GFLOP/s | of T x 1-thread sgemm | of T-thread sgemm | loss at step 1 |")
    print("| ---: | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for t in threads:
        for i in wide_peers:
            ms, w, rr = wbest(i, t)
            got = wkern[(i, None, t)]
            kl = "MKL" if mkl(peers[i]) else klabel(wk) + ("" if got in (None, CORE.get(wk, default_core)) else f" (ran {got}!)")
            frac = f"{100 * wide_flops / (ms / 1e3) / 1e9 / (t * wrate(1)):.0f}%" if not mkl(peers[i]) and 1 in threads else "–"
            frac_t = f"{100 * wide_flops / (ms / 1e3) / 1e9 / wrate(t):.0f}%" if not mkl(peers[i]) else "–"
            losses = sorted(set(f"{x:.4f}" if x is not None else "?" for ww in wide_waits(i, t) for x in wloss[(i, ww, t)]))
            other = (f"{med(wres[(i, other_wait(i), t)]):.1f} ({other_wait(i)})" if t > 1 else "– (1 thread)")
            print(f"| {t} | {peers[i][0]} | {kl} | {med(wres[(i, None, t)]):.1f} | {other} | {wname(i, w)} "
                  f"| {min(rr):.1f}–{max(rr):.1f} | {wide_flops / (ms / 1e3) / 1e9:.1f} | {frac} | {frac_t} "
                  f"| {', '.join(losses)} |")
            if max(rr) > 1.3 * min(rr):
                notes.append(f"gpt_wide, {t} thread(s), {peers[i][0]}: rounds spread {min(rr):.1f}–{max(rr):.1f} ms (> 30%): noisy")
            worst, ww = max(((med(wres[(i, ww, t)]), ww) for ww in wide_waits(i, t)), key=lambda x: x[0])
            if worst > 2 * ms:
                notes.append(f"gpt_wide, {t} thread(s), {peers[i][0]}: wait policy {wname(i, ww)} is {worst / ms:.1f}x "
                             f"slower ({worst:.1f} ms): spinning threads fighting over the cores")
            if t > 1 and 1 in threads and ms > wms(i, 1):
                notes.append(f"gpt_wide, {peers[i][0]}: slower at {t} threads ({ms:.1f} ms) than at 1 ({wms(i, 1):.1f} ms): "
                             f"anomalous")
    print()
    print("pipec against the best peer on gpt_wide (ratio = best peer's ms / pipec's ms; above 1: pipec is faster):")
    print()
    print("| threads | pipec ms/step | of T x 1-thread sgemm | of T-thread sgemm | best peer | its ms/step | ratio |")
    print("| ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    for t in threads:
        p_ms = wms(0, t)
        frac = f"{100 * wide_flops / (p_ms / 1e3) / 1e9 / (t * wrate(1)):.0f}%" if 1 in threads else "–"
        frac_t = f"{100 * wide_flops / (p_ms / 1e3) / 1e9 / wrate(t):.0f}%"
        cands = [(wms(i, t), i) for i in torch_peers()]
        if not cands:
            print(f"| {t} | {p_ms:.1f} | {frac} | {frac_t} | (none installed) | – | – |")
            continue
        b_ms, bi = min(cands)
        print(f"| {t} | {p_ms:.1f} | {frac} | {frac_t} | {peers[bi][0]}, wait {wname(bi, wbest(bi, t)[1])} | {b_ms:.1f} "
              f"| {b_ms / p_ms:.2f}x |")
    print()
    gemm_table(wshapes, wgemm, [(wk, t) for t in threads], f"rows {WB * WT} = {WB} x {WT} tokens")

if notes:
    print()
    print("Notes (printed by the script):")
    print()
    for n in notes:
        print(f"- {n}")
log(f"done in {time.time() - t0:.0f} s")
for model in missed:
    log(f"note: {model}: pipec as installed is not {'2x ' if TARGET[model] > 1 else ''}faster than the best peer "
        f"at every thread count")
EOF
