#!/usr/bin/env bash
# pipec compile --no-build and --depfile (docs/build-integration.md): --no-build writes the
# sources, launch.sh and the manifest and builds nothing; the manifest's include directory and
# link lines are the ones pipec's own builds use, and the programs built from it alone (cc with its
# flags) compute the bits of pipec's own build; the depfile names exactly what was written and the
# model, escaped for Make; a hand-written Ninja build that knows the model only through the
# depfile reruns pipec when the model changes and only then; usage errors for the options.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
build=$(cd "$(dirname "$pipec")/.." && pwd)
export OMPI_MCA_mpi_yield_when_idle=1 # more ranks than cores here: ranks yield while they wait

# ---- --no-build at S = 2: the sources, launch.sh and the manifest; no bin/.
out=$tmp/s2
"$pipec" compile samples/mlp_digits.json --stages 2 --microbatches 4 --no-build -o "$out" \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
check "--no-build: exit 0 ($(head -n 2 "$tmp/err"))" test $rc -eq 0
check "--no-build: the message names what it wrote: $(cat "$tmp/err")" test "$(cat "$tmp/err")" = \
  "pipec: wrote $out/rank0.c .. rank1.c, $out/launch.sh and $out/pipec-manifest.json (2 ranks, not built)"
check "--no-build: rank0.c, rank1.c and launch.sh written" \
  test -s "$out/rank0.c" -a -s "$out/rank1.c" -a -x "$out/launch.sh"
check "--no-build: nothing built (no $out/bin)" test ! -e "$out/bin"
# The sources are those of a compile that builds (the same command but for --no-build).
"$pipec" compile samples/mlp_digits.json --stages 2 --microbatches 4 -o "$tmp/built" >/dev/null 2>&1 ||
  bad "compile S = 2"
for r in 0 1; do
  check "--no-build: rank$r.c is the built program's source but for its command line" \
    cmp -s <(grep -v '^// Command' "$out/rank$r.c") <(grep -v '^// Command' "$tmp/built/rank$r.c")
done

# ---- The manifest: fields, and the runtime pipec builds with (this tree: runtime/, build/lib).
check_manifest() { # NAME MANIFEST RANKS INCLUDE LIB MPI-LIB
  python3 - "$@" <<'PY'
import json, sys
name, path, ranks, inc, lib, mpi = sys.argv[1:]
m = json.load(open(path))
ranks = int(ranks)
want = {"format": "pipec-manifest", "version": 1, "model": "samples/mlp_digits.json",
        "name": "mlp_digits", "target": "cpu", "precision": "f32", "ranks": ranks, "launch": "launch.sh",
        "include_dirs": [inc], "compile_flags": ["-std=gnu11", "-ffp-contract=off"]}
err = [f"{k}: {m.get(k)!r}, want {v!r}" for k, v in want.items() if m.get(k) != v]
progs = m.get("programs", [])
if len(progs) != ranks:
    err.append(f"{len(progs)} programs, want {ranks}")
for r, p in enumerate(progs):
    head = [mpi, lib] if ranks > 1 else [lib]
    if p.get("rank") != r or p.get("source") != f"rank{r}.c" or p.get("program") != f"bin/rank{r}":
        err.append(f"program {r}: {p}")
    if p.get("link", [])[:len(head)] != head or "-lopenblas" not in p.get("link", []):
        err.append(f"program {r}: link {p.get('link')}, want {head} first, then -lopenblas ...")
    if ranks > 1 and not any(w.startswith("-lmpi") for w in p["link"]):
        err.append(f"program {r}: no MPI library in {p['link']}")
for e in err:
    print(f"FAIL {name}: {e}")
sys.exit(1 if err else 0)
PY
}
check "manifest at S = 2" check_manifest "S = 2" "$out/pipec-manifest.json" 2 "$root/runtime" \
  "$build/lib/libpipert.a" "$build/lib/libpipert_mpi.a"
# The manifest names the precision the programs store their tensors in.
"$pipec" compile samples/mlp_digits.json --precision bf16 --no-build -o "$tmp/bf16" >/dev/null 2>&1 ||
  bad "compile --precision bf16 --no-build"
check "manifest: --precision bf16 says \"precision\": \"bf16\"" python3 -c \
  'import json,sys; sys.exit(json.load(open(sys.argv[1]))["precision"] != "bf16")' \
  "$tmp/bf16/pipec-manifest.json"

# ---- Built from the manifest alone, launch.sh runs them: the bits of pipec's own build.
mkdir -p "$out/bin"
python3 - "$out" >"$tmp/cc.sh" <<'PY'
import json, shlex, sys
out = sys.argv[1]
m = json.load(open(f"{out}/pipec-manifest.json"))
for p in m["programs"]:
    argv = (["cc", "-O2"] + m["compile_flags"] + ["-I" + d for d in m["include_dirs"]] +
            [f"{out}/{p['source']}", "-o", f"{out}/{p['program']}"] + p["link"])
    print(shlex.join(argv))
PY
if sh -e "$tmp/cc.sh" >"$tmp/cc.out" 2>&1; then ok; else bad "build from the manifest: $(head -n 3 "$tmp/cc.out")"; fi
pipe_run "$tmp/own" "$tmp/built" || bad "run pipec's build: $(tail -n 3 "$tmp/own.out")"
pipe_run "$tmp/manifest" "$out" || bad "run the manifest's build: $(tail -n 3 "$tmp/manifest.out")"
same_bits "the manifest's build = pipec's build" "$tmp/own" "$tmp/manifest"

# ---- --depfile: what was written (--no-build: the sources, launch.sh, the manifest), then the
# model as given.
"$pipec" compile samples/mlp_digits.json --no-build -o "$tmp/d1" --depfile "$tmp/d1.d" 2>/dev/null ||
  bad "--no-build --depfile"
check "manifest at S = 1" check_manifest "S = 1" "$tmp/d1/pipec-manifest.json" 1 "$root/runtime" \
  "$build/lib/libpipert.a" ""
printf '%s \\\n %s \\\n %s: \\\n %s\n' "$tmp/d1/rank0.c" "$tmp/d1/launch.sh" \
  "$tmp/d1/pipec-manifest.json" samples/mlp_digits.json >"$tmp/d1.want"
check "--depfile of --no-build: $(tr '\n' ' ' <"$tmp/d1.d")" cmp -s "$tmp/d1.want" "$tmp/d1.d"
# Built (S = 1): the programs first (bin/train, its link bin/rank0), then the source, launch.sh.
"$pipec" compile samples/mlp_digits.json -o "$tmp/d2" --depfile "$tmp/d2.d" 2>/dev/null ||
  bad "compile --depfile"
printf '%s \\\n %s \\\n %s \\\n %s: \\\n %s\n' "$tmp/d2/bin/train" "$tmp/d2/bin/rank0" \
  "$tmp/d2/rank0.c" "$tmp/d2/launch.sh" samples/mlp_digits.json >"$tmp/d2.want"
check "--depfile of a build: $(tr '\n' ' ' <"$tmp/d2.d")" cmp -s "$tmp/d2.want" "$tmp/d2.d"
check "--depfile: no manifest without --no-build" test ! -e "$tmp/d2/pipec-manifest.json"
# Spaces, '#' and '$' in paths, escaped as GCC escapes them.
mkdir -p "$tmp/a b"
cp samples/mlp_digits.json "$tmp/a b/m#1\$.json"
"$pipec" compile "$tmp/a b/m#1\$.json" --stages 2 --no-build -o "$tmp/a b/o" --depfile "$tmp/e.d" \
  2>/dev/null || bad "--depfile with spaces"
e=${tmp//\$/\$\$}
printf '%s \\\n %s \\\n %s \\\n %s: \\\n %s\n' "$e/a\\ b/o/rank0.c" "$e/a\\ b/o/rank1.c" \
  "$e/a\\ b/o/launch.sh" "$e/a\\ b/o/pipec-manifest.json" "$e/a\\ b/m\\#1\$\$.json" >"$tmp/e.want"
check "--depfile escapes ' ', '#', '\$': $(tr '\n' ' ' <"$tmp/e.d")" cmp -s "$tmp/e.want" "$tmp/e.d"
# A model with an error: exit 1 and no depfile (the next build runs pipec again).
printf '{"format": "pipec-model", "version": 1, "name": "x"' >"$tmp/broken.json"
"$pipec" compile "$tmp/broken.json" --no-build -o "$tmp/d3" --depfile "$tmp/d3.d" >/dev/null 2>&1
rc=$?
check "a model error: exit 1 (got $rc)" test $rc -eq 1
check "a model error: no depfile" test ! -e "$tmp/d3.d"

# ---- Usage errors.
expect "--no-build with run" 2 "^pipec: --no-build is for 'compile' \(got 'run', which builds the program\)$" \
  "$pipec" run --no-build samples/mlp_digits.json
expect "--depfile with check" 2 "^pipec: --depfile is for 'compile' and 'run' \(got 'check', which writes no files\)$" \
  "$pipec" check --depfile "$tmp/x.d" samples/mlp_digits.json
expect "--depfile ''" 2 "^pipec: --depfile: the file name is an empty string$" \
  "$pipec" compile --no-build --depfile '' -o "$tmp/d4" samples/mlp_digits.json
expect "--depfile without its file" 2 "^pipec: option '--depfile' needs an argument$" \
  "$pipec" compile samples/mlp_digits.json --depfile
check "--help lists --no-build and --depfile" eval '"$pipec" --help | grep -q -- "--no-build" &&
  "$pipec" --help | grep -q -- "--depfile FILE"'

# ---- Ninja with a rule that knows the model only through the depfile: the first build runs
# pipec, a second has no work; touching the model reruns it, touching the data file (read by the
# programs, not by pipec) does not.
if ! command -v ninja >/dev/null; then
  bad "ninja not found (scripts/install-deps.sh installs ninja-build)"
  finish
  exit
fi
n=$tmp/ninja
mkdir -p "$n"
: >"$n/digits.csv"
python3 - samples/mlp_digits.json "$n/model.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["training"]["data"]["path"] = "digits.csv"
json.dump(m, open(sys.argv[2], "w"))
PY
cat >"$n/build.ninja" <<NINJA
rule pipec
  command = "$pipec" compile model.json --no-build -o out --depfile out.d
  depfile = out.d
  deps = gcc
  description = PIPEC model.json
build out/rank0.c out/launch.sh out/pipec-manifest.json: pipec
NINJA
# newer FILE REF: touch FILE until its time is after REF's (file systems with coarse times).
newer() {
  touch "$1"
  while ! [ "$1" -nt "$2" ]; do
    sleep 0.1
    touch "$1"
  done
}
# no_work: a dry run of ninja has nothing to do (its output read whole: ninja must not die of a
# closed pipe in the middle of a build).
no_work() {
  local o
  o=$(ninja -C "$n" -n 2>&1)
  grep -qx "ninja: no work to do." <<<"$o"
}
ninja -C "$n" >"$tmp/n1" 2>&1
check "ninja: the first build runs pipec ($(tail -n 1 "$tmp/n1"))" grep -q 'PIPEC model.json' "$tmp/n1"
ninja -C "$n" -t deps out/rank0.c >"$tmp/deps" 2>&1
check "ninja: the depfile's model recorded: $(tr '\n' ' ' <"$tmp/deps")" grep -qx "    model.json" "$tmp/deps"
check "ninja: nothing to do after the build" no_work
newer "$n/model.json" "$n/out/rank0.c"
ninja -C "$n" >"$tmp/n2" 2>&1
check "ninja: the model touched: pipec reruns" grep -q "PIPEC model.json" "$tmp/n2"
check "ninja: the outputs are newer than the model" test "$n/out/rank0.c" -nt "$n/model.json"
check "ninja: nothing to do after the rerun" no_work
newer "$n/digits.csv" "$n/out/rank0.c"
check "ninja: the data file touched: no work" no_work
finish
