#!/usr/bin/env bash
# --depfile with hostile paths (docs/build-integration.md, "--depfile"): what no depfile can hold
# for both make and ninja (';', '\', a line break, ...) is refused before any work, in one line
# naming the path and the character, exit 1, nothing written, and a Makefile that includes the
# depfile runs nothing of the path (';touch${IFS}PWNED' once became a recipe); what it can hold
# (' ', '#', '$', ':', '%', UTF-8, ...) is escaped so that make, ninja (with and without
# `deps = gcc`) and CMake (add_custom_command DEPFILE, Ninja and Makefile generators) read back
# the very paths: the first build runs pipec, the next has no work, touching the model reruns it.
# pipec_add_model passes --depfile only for paths CMake itself reads back.
pipec=$1
root=$2
. "$root/tests/e2e/lib.sh"
cd "$tmp" || exit 1
sample=$root/samples/mlp_digits.json
for tool in make ninja cmake; do
  if ! command -v $tool >/dev/null; then
    bad "$tool not found (scripts/install-deps.sh installs it)"
    finish
    exit
  fi
done
# newer FILE REF: touch FILE until its time is after REF's (file systems with coarse times).
newer() {
  touch "$1"
  while ! [ "$1" -nt "$2" ]; do
    sleep 0.1
    touch "$1"
  done
}

# ---- Refused: exit 1, exactly one line, no depfile and no output.
# refused NAME MODEL OUT SHOWN-MODEL WHAT-PATH REST: MODEL (a copy of the sample) compiled into
# OUT; SHOWN-MODEL is MODEL as the message shows it, WHAT-PATH the path at fault ("model 'x'").
refused() {
  local name=$1 m=$2 o=$3 shown=$4 what=$5 rest=$6 rc
  cp "$sample" "$m"
  rm -f r.d
  "$pipec" compile "$m" --no-build -o "$o" --depfile r.d >out 2>err
  rc=$?
  check "$name: exit 1 (got $rc)" test $rc -eq 1
  check "$name: the message: $(cat err)" test "$(cat err)" = \
    "$shown: error: --depfile: the $what path $rest: rename it or leave out --depfile"
  check "$name: no depfile, no output" test ! -e r.d -a ! -e "$o"
}
both="which make and ninja cannot both read back"
refused "';'" 'm;x.json' o 'm;x.json' model "'m;x.json' has ';', $both"
refused "'\\'" 'm\x.json' o 'm\x.json' model "'m\\x.json' has '\\', $both"
refused "a line break" $'m\nx.json' o 'm\nx.json' model "'m\\nx.json' has '\\n', which ends a rule of the depfile"
refused "a tab" $'m\tx.json' o 'm\tx.json' model "'m\\tx.json' has '\\t', which no depfile can hold"
for c in '|' '=' '[' '(' ')' '*' '?' "'" '"' '`' '&' '<' '>' '^'; do
  refused "'$c'" "m${c}x.json" o "m${c}x.json" model "'m${c}x.json' has '$c', $both"
done
refused "a leading '~'" '~m.json' o '~m.json' model \
  "'~m.json' starts with '~', which make expands to a home directory"
refused "a trailing ':'" 'm.json:' o 'm.json:' model \
  "'m.json:' ends with ':', which ninja cannot read back"
refused "'%' in the output" m.json 'o%' m.json output \
  "'o%/launch.sh' has '%', which make reads as a pattern"
refused "';' in the output" m.json 'o;x' m.json output "'o;x/launch.sh' has ';', $both"

# Nothing of a path runs: a Makefile that includes the depfile, the model touched since. (A ';'
# once ended the prerequisites there and the rest became the targets' recipe, in place of the
# Makefile's own: here `touch PWNED`, ${IFS} standing for the space the escaping would have kept.)
mkdir -p pwn
cd pwn || exit 1
evil='m.json;touch${IFS}PWNED'
cp "$sample" m.json
cp "$sample" "$evil"
cat >Makefile <<'MAKE'
o/launch.sh:
	"$$PIPEC" compile "$$MODEL" --no-build -o o --depfile o.d
-include o.d
MAKE
PIPEC=$pipec MODEL=$evil make >make1.out 2>&1
check "';touch PWNED': refused when make runs it" \
  grep -qF "error: --depfile: the model path '$evil' has ';'" make1.out
"$pipec" compile m.json --no-build -o o >/dev/null 2>&1 # the outputs, older than the model
"$pipec" compile "$evil" --no-build -o o --depfile o.d >/dev/null 2>&1
newer m.json o/launch.sh
PIPEC=$pipec MODEL=$evil make >make2.out 2>&1
check "';touch PWNED': make ran nothing of the path" test ! -e PWNED
check "';touch PWNED': no recipe overridden: $(grep -m1 overriding make2.out)" \
  eval '! grep -q "overriding recipe" make2.out'
cd "$tmp" || exit 1

# ---- Escaped: make and ninja read back each path. The model's directory and name and the output
# directory hold every character a depfile escapes and many it writes as they are.
mkdir -p mk && cd mk || exit 1
mdir='d i#r$:x%!@{}],+~ü'
mname='m o#d$e:l%!@{}],+~ü.json'
out='o u#t$:z!@{}],+~ü'
model=$mdir/$mname
mkdir -p "$mdir"
cp "$sample" "$model"
"$pipec" compile "$model" --no-build -o "$out" --depfile o.d >/dev/null 2>err ||
  bad "accepted characters: $(head -n 2 err)"
# make_esc PATH: PATH as the depfile (and a Makefile) writes it: ' ', '#', ':' after '\', '$$'.
make_esc() { sed -e 's/\$/$$/g' -e 's/[ #:]/\\&/g' <<<"$1"; }
o=$(make_esc "$out")
printf '%s \\\n %s \\\n %s: \\\n %s\n' "$o/rank0.c" "$o/launch.sh" "$o/pipec-manifest.json" \
  "$(make_esc "$model")" >o.want
check "the depfile: $(tr '\n' ' ' <o.d)" cmp -s o.want o.d

# Every target the depfile names is a file the build wrote: at S = 1 with --replicas the program
# links MPI and is bin/rank0 alone (no bin/train).
"$pipec" compile "$root/samples/mlp_digits.json" --replicas 2 --microbatches 2 -o rep \
  --depfile rep.d >/dev/null 2>err || bad "--replicas 2: $(head -n 2 err)"
missing=$(sed -n 's/^ *\([^ :]*\)\( \\\|:\).*/\1/p' rep.d | while read -r t; do
  [ -e "$t" ] || printf '%s ' "$t"; done)
check "--replicas 2: every target the depfile names exists${missing:+ (missing: $missing)}" \
  test -z "$missing"

# make: a Makefile whose rule reruns pipec, and knows the model only through the depfile.
printf '%s/launch.sh:\n\t"$$PIPEC" compile "$$MODEL" --no-build -o "$$OUT" --depfile o.d\n-include o.d\n' \
  "$o" >Makefile
export PIPEC=$pipec MODEL=$model OUT=$out
mq() { make -q >/dev/null 2>&1; }
make >make.out 2>&1 || bad "make: $(tail -n 2 make.out)"
check "make: the first build is up to date (make -q)" mq
newer "$model" "$out/launch.sh"
check "make: the model touched: out of date" eval '! mq'
make >make.out 2>&1 || bad "make after the touch: $(tail -n 2 make.out)"
check "make: pipec reran: $(tail -n 1 make.out)" grep -q 'compile' make.out
check "make: up to date after the rerun" mq
newer "$mdir/other" "$out/launch.sh"
check "make: another file touched: up to date" mq

# ninja, `deps = gcc` (the depfile read once, after the build) and without (read at each load,
# its first target checked against the edge's).
nin_esc() { sed -e 's/\$/$$/g' -e 's/[ :]/$&/g' <<<"$1"; }
no_work() {
  local o
  o=$(ninja -C "$1" -n 2>&1)
  grep -qx "ninja: no work to do." <<<"$o"
}
for deps in gcc none; do
  n=$tmp/ninja-$deps
  mkdir -p "$n"
  cp -r "$mdir" "$n/"
  {
    printf 'rule pipec\n  command = "$$PIPEC" compile "$$MODEL" --no-build -o "$$OUT" --depfile o.d\n'
    printf '  depfile = o.d\n  description = PIPEC\n'
    [ $deps = gcc ] && printf '  deps = gcc\n'
    printf 'build %s/rank0.c %s/launch.sh %s/pipec-manifest.json: pipec\n' "$(nin_esc "$out")" \
      "$(nin_esc "$out")" "$(nin_esc "$out")"
  } >"$n/build.ninja"
  ninja -C "$n" >"$n.1" 2>&1
  check "ninja ($deps): the first build runs pipec ($(tail -n 1 "$n.1"))" grep -q PIPEC "$n.1"
  if [ $deps = gcc ]; then
    ninja -C "$n" -t deps "$out/rank0.c" >"$n.deps" 2>&1
    check "ninja ($deps): the model recorded: $(tr '\n' ' ' <"$n.deps")" grep -qxF "    $model" "$n.deps"
  fi
  check "ninja ($deps): no work after the build" no_work "$n"
  newer "$n/$model" "$n/$out/rank0.c"
  check "ninja ($deps): the model touched: work" eval '! no_work "$n"'
  ninja -C "$n" >"$n.2" 2>&1
  check "ninja ($deps): pipec reran" grep -q PIPEC "$n.2"
  check "ninja ($deps): no work after the rerun" no_work "$n"
done
unset PIPEC MODEL OUT
cd "$tmp" || exit 1

# ---- CMake: add_custom_command(... DEPFILE), not depending on the model otherwise, with the
# generators that read depfiles, for a path of the characters CMake 3.25 reads back (it rewrites
# '#', '$' and ':' wrongly: pipec_add_model leaves the depfile out for them, below).
mkdir -p cm
cat >cm/CMakeLists.txt <<'CMAKE'
cmake_minimum_required(VERSION 3.20)
project(depfile_consumer NONE)
cmake_policy(SET CMP0116 NEW)
set(out ${CMAKE_CURRENT_BINARY_DIR}/out)
add_custom_command(OUTPUT ${out}/rank0.c ${out}/launch.sh ${out}/pipec-manifest.json
  COMMAND ${PIPEC} compile ${MODEL} --no-build -o ${out} --depfile ${out}/pipec.d
  DEPFILE ${out}/pipec.d COMMENT "PIPEC" VERBATIM)
add_custom_target(sources ALL DEPENDS ${out}/rank0.c ${out}/launch.sh ${out}/pipec-manifest.json)
CMAKE
cmodel="$tmp/cm/d i%r!@{}],+~ü/m o%d!@{}],+~ü.json"
mkdir -p "$(dirname "$cmodel")"
cp "$sample" "$cmodel"
# runs DIR: how many times the build of DIR ran pipec (0 or 1).
runs() { cmake --build "$1" 2>&1 | grep -c PIPEC; }
for gen in Ninja 'Unix Makefiles'; do
  b=$tmp/cm-${gen// /}
  if ! cmake -S cm -B "$b" -G "$gen" -DPIPEC="$pipec" -DMODEL="$cmodel" >"$b.cfg" 2>&1; then
    bad "cmake ($gen): configure: $(tail -n 3 "$b.cfg")"
    continue
  fi
  check "cmake ($gen): the first build runs pipec" test "$(runs "$b")" = 1
  check "cmake ($gen): the next has no work" test "$(runs "$b")" = 0
  newer "$cmodel" "$b/out/rank0.c"
  check "cmake ($gen): the model touched: pipec reruns" test "$(runs "$b")" = 1
  check "cmake ($gen): then no work" test "$(runs "$b")" = 0
done

# pipec_add_model (cmake/pipecModel.cmake, with stand-ins for the package's targets): --depfile
# where the paths are plain; without it where they are not ('#', '(' ...), pipec neither refuses
# nor reruns at every build, and the model (in DEPENDS) still reruns it.
mkdir -p pam
cat >pam/CMakeLists.txt <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(pam C)
add_executable(pipec::pipec IMPORTED)
set_target_properties(pipec::pipec PROPERTIES IMPORTED_LOCATION "$pipec")
add_library(pipec::pipert INTERFACE IMPORTED)
include("$root/cmake/pipecModel.cmake")
pipec_add_model(m "\${MODEL}")
CMAKE
i=0
for m in plain/m.json 'odd #(1)/m.json'; do
  mkdir -p "pam/$(dirname "$m")"
  cp "$sample" "pam/$m"
  i=$((i + 1))
  b=$tmp/pam-$i
  if ! cmake -S pam -B "$b" -G Ninja -DMODEL="$tmp/pam/$m" >"$b.cfg" 2>&1; then
    bad "pipec_add_model ($m): configure: $(tail -n 3 "$b.cfg")"
    continue
  fi
  ninja -C "$b" m_sources >"$b.1" 2>&1
  check "pipec_add_model ($m): pipec ran: $(tail -n 1 "$b.1")" test -s "$b/m/rank0.c"
  if [ "$m" = plain/m.json ]; then
    check "pipec_add_model ($m): with --depfile" grep -q -- "--depfile" "$b/build.ninja"
  else
    check "pipec_add_model ($m): without --depfile" eval '! grep -q -- "--depfile" "$b/build.ninja"'
  fi
  check "pipec_add_model ($m): then no work" \
    eval '[ "$(ninja -C "$b" -n m_sources 2>&1 | tail -n 1)" = "ninja: no work to do." ]'
  newer "$tmp/pam/$m" "$b/m/rank0.c"
  ninja -C "$b" m_sources >"$b.2" 2>&1
  check "pipec_add_model ($m): the model touched: pipec reruns" grep -q "compiling m.json" "$b.2"
  check "pipec_add_model ($m): then no work" \
    eval '[ "$(ninja -C "$b" -n m_sources 2>&1 | tail -n 1)" = "ninja: no work to do." ]'
done
finish
