# bench/lib.sh: the prologue of the bench scripts, sourced after `set -euo pipefail`.
#
#   bench_init "$@"   the one argument PIPEC (usage or why on stderr and exit 2 otherwise); sets
#                     pipec (its absolute path), root (the repository), py (Debian's python3 where
#                     it exists: python3-torch imports only there), tmp (a fresh directory,
#                     removed on exit) and commit (the repository's `git describe`, or unknown)
#   bench_text        sets data, the tinyshakespeare text beside the repository (exit 2 unreadable)
bench_init() {
  if [[ $# -ne 1 ]]; then
    echo "usage: $0 PIPEC" >&2
    exit 2
  fi
  pipec=$1
  if [[ ! -x $pipec ]]; then
    echo "$0: '$pipec' is not an executable (build it first: make build)" >&2
    exit 2
  fi
  pipec=$(cd "$(dirname "$pipec")" && pwd)/$(basename "$pipec")
  root=$(cd "$(dirname "$0")/.." && pwd)
  py=/usr/bin/python3
  [[ -x $py ]] || py=python3
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/pipec-bench-$(basename "$0" .sh).XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  commit=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
}

bench_text() {
  data="$root/../shared/data/tinyshakespeare.txt"
  [[ -r $data ]] || { echo "$0: cannot read $data" >&2; exit 2; }
}
