#!/usr/bin/env bash
# BLAS candidates side by side for the CPU step (issue 10): OpenBLAS as pipec links it (the kernel it
# picks, and HASWELL, its AVX2 set) against BLIS from Debian (libblis4-serial: the single-threaded
# library, as pipec runs its BLAS inside its own threads), on three counts:
#   1. sgemm GFLOP/s at every GEMM shape of a gpt_char step, 1 thread (bench/sgemm_rate.c built for
#      each), and their FLOP-weighted rate over the step;
#   2. the whole gpt_char step (ms, median of the program's own median over BENCH_ROUNDS rounds,
#      round robin), at 1 and 2 threads: the generated program as pipec builds it, and the same
#      program linked with BLIS's cblas_sgemm ahead of OpenBLAS (a CC wrapper puts BLIS first;
#      OpenBLAS stays linked for the runtime's openblas_* calls, which BLIS ignores);
#   3. determinism: each build's loss log (BENCH_STEPS steps) at 1 and at 2 threads byte-identical,
#      and the largest loss difference between the BLAS.
# Prints markdown on stdout (docs/benchmarks.md, "BLAS candidates"), progress on stderr.
#
#   bench/blas_compare.sh PIPEC      e.g. bench/blas_compare.sh build/bin/pipec
#
# Needs BLIS: scripts/install-deps.sh --with-blis. Environment: BENCH_ROUNDS (default 3),
# BENCH_STEPS (default 30, at least 11: the program prints its median after 5 warm-up steps),
# SGEMM_REPS (default 100). Takes about 4 minutes. Exit 2 on a usage error or without BLIS.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
bench_init "$@"
bench_text
blis_dir=/usr/lib/x86_64-linux-gnu/blis-serial
if [[ ! -r $blis_dir/libblis.so.4 ]]; then
  echo "$0: BLIS is not installed ($blis_dir/libblis.so.4): scripts/install-deps.sh --with-blis" >&2
  exit 2
fi
steps=${BENCH_STEPS:-30}
[[ $steps =~ ^[0-9]+$ && $steps -ge 11 ]] || { echo "$0: BENCH_STEPS must be a number >= 11" >&2; exit 2; }

cflags=$(pkg-config --cflags openblas)
cc -O2 "$root/bench/sgemm_rate.c" -o "$tmp/sg_openblas" $cflags $(pkg-config --libs openblas)
cc -O2 -DSGEMM_BLIS "$root/bench/sgemm_rate.c" -o "$tmp/sg_blis" $cflags -L"$blis_dir" \
  -Wl,-rpath,"$blis_dir" -l:libblis.so.4 -lm

# The CC wrapper: the compiler pipec runs, with BLIS's library (and its directory as the run path)
# inserted before OpenBLAS, so that the program's cblas_sgemm is BLIS's.
cat >"$tmp/cc-blis" <<EOF
#!/usr/bin/env bash
args=()
for a in "\$@"; do
  case \$a in
  -lopenblas | */libopenblas.so*) args+=(-L$blis_dir -Wl,-rpath,$blis_dir -l:libblis.so.4 "\$a") ;;
  *) args+=("\$a") ;;
  esac
done
exec cc "\${args[@]}"
EOF
chmod +x "$tmp/cc-blis"
"$pipec" compile "$root/samples/gpt_char.json" -o "$tmp/ob" >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
CC="$tmp/cc-blis" "$pipec" compile "$root/samples/gpt_char.json" -o "$tmp/blis" >/dev/null 2>"$tmp/err" ||
  { cat "$tmp/err" >&2; exit 1; }
ldd "$tmp/blis/bin/train" | grep -q "blis-serial/libblis.so.4" || { echo "$0: the BLIS build does not load BLIS" >&2; exit 1; }

"$py" - "$tmp" "$data" "$commit" "$steps" <<'EOF'
import os, re, statistics, subprocess, sys, time

tmp, data, commit, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
R, C, L, V = 12 * 64, 128, 4, 65
# (name, shape, count per step): row-major C[M,N] = op(A) op(B), as bench/train_step.sh's table
lin = [("attn.c_attn", 3 * C, C), ("attn.c_proj", C, C), ("mlp.c_fc", 4 * C, C), ("mlp.c_proj", C, 4 * C)]
shapes = []
for name, out, inp in lin:
    shapes += [(name + " forward", f"{R}x{out}x{inp}:NT", L), (name + " grad input", f"{R}x{inp}x{out}:NN", L),
               (name + " grad weight", f"{out}x{inp}x{R}:TN", L)]
shapes += [("lm_head forward", f"{R}x{V}x{C}:NT", 1), ("lm_head grad input", f"{R}x{C}x{V}:NN", 1),
           ("lm_head grad weight", f"{V}x{C}x{R}:TN", 1)]

def flops(s):
    m, n, k = map(int, s.split(":")[0].split("x"))
    return 2 * m * n * k

def rates(exe, env_extra):
    env = dict(os.environ, **env_extra)
    out = subprocess.run([exe, "1"] + [s for _, s, _ in shapes], env=env, capture_output=True, text=True,
                         check=True).stdout.split("\n")
    kernel = out[0].split(" ", 1)[1]
    return kernel, {l.split()[0]: float(l.split()[1]) for l in out[1:] if l}

cands = [("OpenBLAS 0.3.21, default kernel", f"{tmp}/sg_openblas", {}),
         ("OpenBLAS 0.3.21, OPENBLAS_CORETYPE=HASWELL", f"{tmp}/sg_openblas", {"OPENBLAS_CORETYPE": "HASWELL"}),
         ("BLIS 0.9.0 (Debian, serial)", f"{tmp}/sg_blis", {})]
print("progress: sgemm rates", file=sys.stderr)
got = [(name,) + rates(exe, env) for name, exe, env in cands]

def step_rate(g):
    return sum(flops(s) * n for _, s, n in shapes) / sum(flops(s) * n / (g[s] * 1e9) for _, s, n in shapes) / 1e9

load = os.getloadavg()[0]
print(f"BLAS candidates for the gpt_char step; commit {commit}; load average at start {load:.2f}; "
      f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n")
print("sgemm GFLOP/s at the step's shapes, 1 thread, best of "
      f"{os.environ.get('SGEMM_REPS', '100')} after a warm-up:\n")
print("| GEMM | M x N x K | per step | " + " | ".join(f"{n} ({k})" for n, k, _ in got) + " |")
print("| --- | --- | ---: | " + " | ".join("---:" for _ in got) + " |")
for name, s, n in shapes:
    print(f"| {name} | {s} | {n} | " + " | ".join(f"{g[s]:.1f}" for _, _, g in got) + " |")
print("| **the step's GEMMs** | | | " + " | ".join(f"**{step_rate(g):.1f}**" for _, _, g in got) + " |\n")

def run(build, t, log=None):
    env = dict(os.environ, OMP_NUM_THREADS=str(t))
    if t > 1:
        env["OMP_WAIT_POLICY"] = "ACTIVE"
    args = [f"{tmp}/{build}/bin/train", "--steps", str(steps), "--threads", str(t), "--eval-every", "0",
            "--eval-batches", "1", "--data", data]
    if log:
        args += ["--loss-log", log]
    out = subprocess.run(args, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"blas_compare: {build} at {t} threads failed: {out.stderr[-500:]}")
    m = re.search(r"median step time ([0-9.]+) ms", out.stdout + out.stderr)
    return float(m.group(1))

builds = [("ob", "OpenBLAS (as pipec links it)"), ("blis", "BLIS's cblas_sgemm")]
ms = {(b, t): [] for b, _ in builds for t in (1, 2)}
for r in range(rounds):
    print(f"progress: whole step, round {r + 1}/{rounds}", file=sys.stderr)
    for t in (1, 2):
        for b, _ in builds:
            ms[(b, t)].append(run(b, t))
print(f"Whole gpt_char step (ms, median of {rounds} rounds of the program's median over {steps - 5} steps; "
      f"2 threads with OMP_WAIT_POLICY=ACTIVE), and determinism over {steps} steps:\n")
print("| build | 1 thread | 2 threads | loss log at 1 thread = at 2 |")
print("| --- | ---: | ---: | --- |")
logs = {}
for b, name in builds:
    for t in (1, 2):
        logs[(b, t)] = f"{tmp}/{b}-{t}.loss"
        run(b, t, logs[(b, t)])
    same = open(logs[(b, 1)], "rb").read() == open(logs[(b, 2)], "rb").read()
    print(f"| {name} | {statistics.median(ms[(b, 1)]):.1f} | {statistics.median(ms[(b, 2)]):.1f} | "
          f"{'yes, byte-identical' if same else 'NO'} |")

def losses(p):
    return [float(l.split()[1]) for l in open(p) if l.strip()]

a, b = losses(logs[("ob", 1)]), losses(logs[("blis", 1)])
print(f"\nLargest loss difference between the two BLAS over {len(a)} steps: "
      f"{max(abs(x - y) for x, y in zip(a, b)):.2e} (last step {a[-1]:.6f} against {b[-1]:.6f}).")
EOF
