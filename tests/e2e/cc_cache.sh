#!/usr/bin/env bash
# The C compiler of a test's `pipec compile` runs (CC=.../cc_cache.sh): it builds each distinct
# program once. pipec calls $CC SOURCE.c -o EXE with its flags; the key of a build is the flags
# (all arguments but SOURCE.c and EXE) and the source's text but its "// Command" lines (the
# command line pipec quotes, the only text that differs between the sources of two configurations
# that generate the same program). A key seen before copies the program built for it to EXE; a
# new one runs the real compiler (CC_CACHE_CC, default cc) with the arguments unchanged and keeps
# what it built. The compiler is deterministic, so a copied program is what it would build again
# (its __FILE__ strings, on error paths only, name the first source's directory).
# Environment: CC_CACHE_DIR (required: the test's own directory; one test, no locking),
# CC_CACHE_CC. Appends "hit KEY EXE" or "miss KEY EXE" to CC_CACHE_DIR/log.
set -u
real=${CC_CACHE_CC:-cc}
dir=${CC_CACHE_DIR:?cc_cache.sh: CC_CACHE_DIR is not set}
src='' exe='' flags=()
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  a=${args[i]}
  if [ "$a" = -o ] && [ $((i + 1)) -lt ${#args[@]} ]; then
    i=$((i + 1))
    exe=${args[i]}
  elif [[ "$a" == *.c ]] && [ -z "$src" ]; then
    src=$a
  else
    flags+=("$a")
  fi
done
# Not a build of one source into one program: the real compiler, uncached.
[ -n "$src" ] && [ -n "$exe" ] && [ -r "$src" ] || exec "$real" "$@"
key=$({
  printf '%s\n' "${flags[@]}"
  grep -v '^// Command' "$src"
} | md5sum | cut -c1-32)
if [ -e "$dir/$key" ]; then
  cp "$dir/$key" "$exe" && echo "hit $key $exe" >>"$dir/log" && exit 0
fi
"$real" "$@" || exit
mkdir -p "$dir" && cp "$exe" "$dir/$key.$$" && mv "$dir/$key.$$" "$dir/$key"
echo "miss $key $exe" >>"$dir/log"
