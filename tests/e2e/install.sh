#!/usr/bin/env bash
# The installed pipec (docs/build-integration.md): installed under DESTDIR into a staging
# directory, the prefix then moved elsewhere (nothing may point back at the staging directory, the
# source or the build tree):
#   - the layout: bin/pipec, the runtime libraries and headers, the CMake package, pkg-config,
#     docs and samples under share/pipec;
#   - the moved pipec builds against the runtime under its own prefix (the compiler's argv logged
#     through CC: -I and libpipert.a from the prefix), its manifest says so, and the program runs;
#   - pkg-config: the --no-build sources of gpt_char built with `pkg-config pipert` (S = 1) and
#     `pipert-mpi` (S = 2) alone, the bits of the installed pipec's own one-stage build;
#   - the installed samples/cmake project, configured against the moved package in a fresh build
#     tree (Ninja), builds gpt_char at S = 2 with the project's flags, installs it, and its
#     launch.sh runs 2 steps under mpirun: the bits (losses, parameters, optimizer state) of the
#     one-stage programs with the same microbatches;
#   - Ninja's dependencies: after the build no work; touching the model reruns pipec and rebuilds
#     both rank programs; touching another file (another sample, the README) gives no work.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$root" || exit 1
build=$(cd "$(dirname "$pipec")/.." && pwd)
export OMPI_MCA_mpi_yield_when_idle=1 # more ranks than cores here: ranks yield while they wait
data=$(cd "$root/../shared/data" && pwd)/tinyshakespeare.txt
opts=(--steps 2 --threads 1 --quiet --eval-every 0 --eval-batches 1 --data "$data")
if ! command -v ninja >/dev/null; then
  bad "ninja not found (scripts/install-deps.sh installs ninja-build)"
  finish
  exit
fi

# ---- Install under DESTDIR, then move the prefix.
if DESTDIR="$tmp/stage" cmake --install "$build" --prefix /opt/pipec >"$tmp/install.out" 2>&1; then
  ok
else
  bad "cmake --install: $(tail -n 3 "$tmp/install.out")"
fi
mkdir -p "$tmp/elsewhere"
mv "$tmp/stage/opt/pipec" "$tmp/elsewhere/pipec" && rm -rf "$tmp/stage"
p=$(cd "$tmp/elsewhere/pipec" && pwd -P)
for f in bin/pipec lib/libpipert.a lib/libpipert-native.a lib/libpipert_mpi.a \
  include/pipec/pipert.h include/pipec/comm.h include/pipec/trace.h lib/cmake/pipec/pipecConfig.cmake \
  lib/cmake/pipec/pipecConfigVersion.cmake lib/cmake/pipec/pipecTargets.cmake \
  lib/cmake/pipec/pipecModel.cmake lib/pkgconfig/pipert.pc lib/pkgconfig/pipert-mpi.pc \
  share/pipec/README.md share/pipec/docs/build-integration.md share/pipec/samples/gpt_char.json \
  share/pipec/samples/cmake/CMakeLists.txt; do
  check "installed: $f" test -s "$p/$f"
done
check "installed: bin/pipec is executable" test -x "$p/bin/pipec"
# The package and the .pc files name no absolute path of this machine's trees.
check "the package and .pc files name neither the source, the build tree nor /opt/pipec" \
  eval '! grep -rlE "$root|$build|/opt/pipec" "$p/lib/cmake" "$p/lib/pkgconfig"'
ipipec=$p/bin/pipec

# ---- The moved pipec builds with its own prefix's runtime.
cat >"$tmp/cc" <<CC
#!/bin/sh
printf '%s\n' "\$@" >>"$tmp/cc.log"
exec cc "\$@"
CC
chmod +x "$tmp/cc"
if CC="$tmp/cc" "$ipipec" compile samples/gpt_char.json --microbatches 2 -o "$tmp/one" \
  >/dev/null 2>"$tmp/one.err"; then
  ok
else
  bad "installed pipec compile: $(head -n 3 "$tmp/one.err")"
fi
check "installed pipec: -I$p/include/pipec" grep -qx -- "-I$p/include/pipec" "$tmp/cc.log"
check "installed pipec: links $p/lib/libpipert.a" grep -qx -- "$p/lib/libpipert.a" "$tmp/cc.log"
check "installed pipec: nothing of the source or build tree: $(grep -E "^-I|\.a$" "$tmp/cc.log" | tr '\n' ' ')" \
  eval '! grep -qE "$root/runtime|$build/lib" "$tmp/cc.log"'
"$tmp/one/bin/train" "${opts[@]}" --save "$tmp/one.st" --loss-log "$tmp/one.loss" >"$tmp/one.out" 2>&1 ||
  bad "installed pipec's program: $(tail -n 3 "$tmp/one.out")"
"$ipipec" compile samples/gpt_char.json --stages 2 --microbatches 2 --no-build -o "$tmp/man2" 2>/dev/null ||
  bad "installed pipec --no-build"
check "installed pipec's manifest: the prefix's include directory and libraries" python3 - \
  "$tmp/man2/pipec-manifest.json" "$p" <<'PY'
import json, sys
m, p = json.load(open(sys.argv[1])), sys.argv[2]
link = m["programs"][1]["link"]
sys.exit(not (m["include_dirs"] == [p + "/include/pipec"] and
              link[:2] == [p + "/lib/libpipert_mpi.a", p + "/lib/libpipert.a"]))
PY

# ---- pkg-config: pipert.pc alone builds the one-stage source.
"$ipipec" compile samples/gpt_char.json --microbatches 2 --no-build -o "$tmp/pc" 2>/dev/null ||
  bad "installed pipec --no-build (S = 1)"
export PKG_CONFIG_PATH=$p/lib/pkgconfig
check "pkg-config: pipert's include directory is the prefix's" \
  test "$(realpath "$(pkg-config --variable=includedir pipert)")" = "$p/include/pipec"
mkdir -p "$tmp/pc/bin"
# shellcheck disable=SC2046 # pkg-config's flags are words
if cc -std=gnu11 -O2 -ffp-contract=off "$tmp/pc/rank0.c" -o "$tmp/pc/bin/rank0" \
  $(pkg-config --cflags --libs pipert) >"$tmp/pc.out" 2>&1; then
  ok
else
  bad "cc with pkg-config pipert: $(head -n 3 "$tmp/pc.out")"
fi
"$tmp/pc/launch.sh" "${opts[@]}" --save "$tmp/pc.st" --loss-log "$tmp/pc.loss" >"$tmp/pc.run" 2>&1 ||
  bad "the pkg-config build: $(tail -n 3 "$tmp/pc.run")"
same_bits "pkg-config's build = the installed pipec's build" "$tmp/one" "$tmp/pc"
# S = 2: pipert-mpi.pc (the transport before the runtime, Open MPI after).
mkdir -p "$tmp/man2/bin"
for r in 0 1; do
  # shellcheck disable=SC2046 # pkg-config's flags are words
  cc -std=gnu11 -O2 -ffp-contract=off "$tmp/man2/rank$r.c" -o "$tmp/man2/bin/rank$r" \
    $(pkg-config --cflags --libs pipert-mpi) >"$tmp/pc2.out" 2>&1 ||
    bad "cc rank$r with pkg-config pipert-mpi: $(head -n 3 "$tmp/pc2.out")"
done
"$tmp/man2/launch.sh" "${opts[@]}" --save "$tmp/pc2.st" --loss-log "$tmp/pc2.loss" >"$tmp/pc2.run" 2>&1 ||
  bad "the pkg-config build at S = 2: $(tail -n 3 "$tmp/pc2.run")"
same_bits "pkg-config's build at S = 2 (pipert-mpi) = the one-stage program" "$tmp/one" "$tmp/pc2"

# ---- find_package(pipec) leaves the caller's variables alone (pkg-config's results of the
# runtime's dependencies are under pipec's prefixes), and a caller's own pkg-config target of a
# dependency is used as it is.
mkdir -p "$tmp/vars"
cat >"$tmp/vars/CMakeLists.txt" <<'EOT'
cmake_minimum_required(VERSION 3.20)
project(vars C)
set(OPENBLAS_LIBRARIES mine)
set(ZLIB_FOUND mine)
set(OMPI_LIBRARIES mine)
find_package(pipec REQUIRED)
foreach(v OPENBLAS_LIBRARIES ZLIB_FOUND OMPI_LIBRARIES)
  if(NOT "${${v}}" STREQUAL "mine")
    message(FATAL_ERROR "find_package(pipec) changed ${v} to '${${v}}'")
  endif()
endforeach()
foreach(t pipec::pipert PkgConfig::OPENBLAS PkgConfig::ZLIB PkgConfig::CJSON)
  if(NOT TARGET ${t})
    message(FATAL_ERROR "no target ${t}")
  endif()
endforeach()
EOT
check "find_package(pipec): the caller's OPENBLAS_*, ZLIB_*, OMPI_* untouched, the targets there" \
  cmake -S "$tmp/vars" -B "$tmp/vars/b" -Dpipec_DIR="$p/lib/cmake/pipec" -DCMAKE_BUILD_TYPE=Release \
  >"$tmp/vars.out" 2>&1

# ---- The installed example project, against the moved package, with Ninja.
ex=$tmp/example
src=$p/share/pipec/samples/cmake
if cmake -S "$src" -B "$ex" -G Ninja -Dpipec_DIR="$p/lib/cmake/pipec" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS=-DPIPEC_EXAMPLE_FLAG -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$tmp/conf.out" 2>&1; then
  ok
else
  bad "configure the example: $(grep -m 3 -i error -A 3 "$tmp/conf.out")"
fi
if cmake --build "$ex" >"$tmp/build.out" 2>&1; then
  ok
else
  bad "build the example: $(grep -m 5 -iE "error|FAILED" "$tmp/build.out")"
fi
check "the example: the project's flags and -ffp-contract=off compile both ranks" python3 - \
  "$ex/compile_commands.json" "$ex/gpt_char" <<'PY'
import json, sys
cmds, out = json.load(open(sys.argv[1])), sys.argv[2]
srcs = {c["file"]: c["command"] for c in cmds}
sys.exit(not all("-DPIPEC_EXAMPLE_FLAG" in srcs.get(f"{out}/rank{r}.c", "") and
                 "-ffp-contract=off" in srcs[f"{out}/rank{r}.c"] for r in (0, 1)))
PY
if cmake --install "$ex" --prefix "$tmp/ex-inst" >"$tmp/exi.out" 2>&1; then
  ok
else
  bad "install the example: $(tail -n 3 "$tmp/exi.out")"
fi
"$tmp/ex-inst/gpt_char/launch.sh" "${opts[@]}" --save "$tmp/s2.st" --loss-log "$tmp/s2.loss" \
  >"$tmp/s2.out" 2>&1 || bad "the example's programs (S = 2): $(tail -n 3 "$tmp/s2.out")"
check "the example ran 2 steps at S = 2" test "$(wc -l <"$tmp/s2.loss" 2>/dev/null)" = 2
same_bits "the example at S = 2 = the one-stage program" "$tmp/one" "$tmp/s2"

# ---- Ninja's dependencies on the example's build tree.
# no_work: a dry run of ninja has nothing to do (its output read whole: no closed pipe).
no_work() {
  local o
  o=$(ninja -C "$ex" -n 2>&1)
  grep -qx "ninja: no work to do." <<<"$o"
}
# newer FILE REF: touch FILE until its time is after REF's (file systems with coarse times).
newer() {
  touch "$1"
  while ! [ "$1" -nt "$2" ]; do
    sleep 0.1
    touch "$1"
  done
}
check "ninja: no work after the build: $(ninja -C "$ex" -n -d explain 2>&1 | head -n 3 | tr '\n' ' ')" no_work
newer "$src/../gpt_char.json" "$ex/gpt_char/rank0.c"
ninja -C "$ex" >"$tmp/re.out" 2>&1 || bad "ninja after touching the model: $(tail -n 3 "$tmp/re.out")"
check "ninja: the model touched: pipec reruns" grep -q "pipec: gpt_char: compiling gpt_char.json" "$tmp/re.out"
for r in 0 1; do
  check "ninja: the model touched: rank $r rebuilt" grep -q "Linking C executable gpt_char/bin/rank$r" "$tmp/re.out"
done
check "ninja: no work after the rebuild: $(ninja -C "$ex" -n -d explain 2>&1 | head -n 3 | tr '\n' ' ')" no_work
for f in "$src/../mlp_digits.json" "$src/README.md"; do
  newer "$f" "$ex/gpt_char/bin/rank0"
  check "ninja: $(basename "$f") touched: no work: $(ninja -C "$ex" -n -d explain 2>&1 | head -n 3 | tr '\n' ' ')" no_work
done

# ---- The same project with Make, in parallel: pipec runs once (not once per rank target), a
# second make has nothing to build; the model touched reruns it once, another file nothing.
mk=$tmp/make
cmake -S "$src" -B "$mk" -G "Unix Makefiles" -Dpipec_DIR="$p/lib/cmake/pipec" >"$tmp/mconf.out" 2>&1 ||
  bad "configure the example (Make): $(grep -m 3 -i error -A 3 "$tmp/mconf.out")"
runs() { grep -c "pipec: gpt_char: compiling gpt_char.json" "$1"; }
built() { grep -cE "Building C object|Linking C executable" "$1"; }
make -C "$mk" -j2 >"$tmp/mk1" 2>&1 || bad "make -j2: $(grep -m 3 -i error "$tmp/mk1")"
check "make -j2: pipec ran once ($(runs "$tmp/mk1")), both ranks built ($(built "$tmp/mk1") steps)" \
  test "$(runs "$tmp/mk1")" = 1 -a "$(built "$tmp/mk1")" = 4
make -C "$mk" -j2 >"$tmp/mk2" 2>&1
check "make: nothing to do after the build ($(runs "$tmp/mk2") runs, $(built "$tmp/mk2") steps)" \
  test "$(runs "$tmp/mk2")" = 0 -a "$(built "$tmp/mk2")" = 0
newer "$src/../gpt_char.json" "$mk/gpt_char/bin/rank0"
make -C "$mk" -j2 >"$tmp/mk3" 2>&1
check "make: the model touched: pipec once ($(runs "$tmp/mk3")), both ranks rebuilt ($(built "$tmp/mk3"))" \
  test "$(runs "$tmp/mk3")" = 1 -a "$(built "$tmp/mk3")" = 4
newer "$src/README.md" "$mk/gpt_char/bin/rank0"
make -C "$mk" -j2 >"$tmp/mk4" 2>&1
check "make: README.md touched: nothing ($(runs "$tmp/mk4") runs, $(built "$tmp/mk4") steps)" \
  test "$(runs "$tmp/mk4")" = 0 -a "$(built "$tmp/mk4")" = 0
# ---- Where pipec was built with the CUDA toolkit: the moved pipec builds --target cuda against
# the prefix's device runtime and headers (nvcc's argv logged through PIPEC_NVCC), and a project
# with TARGET cuda at S = 2 builds with the package; without a GPU both stop with the runtime's
# no-device error, with one they run a step.
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -e "$p/lib/libpipert_cuda.a" ] && [ -x "$nvcc" ]; then
  gpu=0
  nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && gpu=1
  # runs_on_device NAME CMD...: exit 0 with a GPU; else exit 1 and the no-device error.
  runs_on_device() {
    local name=$1
    shift
    "$@" --steps 1 --quiet >"$tmp/dev.out" 2>&1
    local rc=$?
    if [ $gpu = 1 ]; then
      check "$name: a step on the GPU (exit $rc: $(tail -n 2 "$tmp/dev.out"))" test $rc -eq 0
    else
      check "$name: no GPU: exit 1 and the no-device error (exit $rc: $(grep -m 1 error "$tmp/dev.out"))" \
        eval 'test $rc -eq 1 && grep -q "error: no CUDA device" "$tmp/dev.out"'
    fi
  }
  cat >"$tmp/nvcc" <<NVCC
#!/bin/sh
printf '%s\n' "\$@" >>"$tmp/nvcc.log"
exec "$nvcc" "\$@"
NVCC
  chmod +x "$tmp/nvcc"
  if PIPEC_NVCC="$tmp/nvcc" "$ipipec" compile samples/mlp_digits.json --target cuda -o "$tmp/cu1" \
    >/dev/null 2>"$tmp/cu1.err"; then
    ok
  else
    bad "installed pipec --target cuda: $(grep -m 3 error "$tmp/cu1.err")"
  fi
  for w in "-I$p/include/pipec" "-I$p/include/pipec/cuda" "$p/lib/libpipert_cuda.a" "$p/lib/libpipert.a"; do
    check "installed pipec --target cuda: nvcc gets $w" grep -qx -- "$w" "$tmp/nvcc.log"
  done
  runs_on_device "installed pipec --target cuda" "$tmp/cu1/bin/train"
  mkdir -p "$tmp/cuproj"
  cat >"$tmp/cuproj/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.20)
project(cuproj LANGUAGES C CUDA)
find_package(pipec REQUIRED)
pipec_add_model(mlp ${pipec_SAMPLES_DIR}/mlp_digits.json TARGET cuda STAGES 2 OPTIONS --comm mpi)
CMAKE
  if cmake -S "$tmp/cuproj" -B "$tmp/cub" -G Ninja -Dpipec_DIR="$p/lib/cmake/pipec" \
    -DCMAKE_CUDA_COMPILER="$nvcc" >"$tmp/cuconf.out" 2>&1 && cmake --build "$tmp/cub" >"$tmp/cub.out" 2>&1; then
    ok
  else
    bad "the TARGET cuda project: $(grep -m 5 -iE "error|FAILED" "$tmp/cuconf.out" "$tmp/cub.out")"
  fi
  runs_on_device "TARGET cuda, S = 2, through the package" "$tmp/cub/mlp/launch.sh"
fi
finish
