#!/usr/bin/env bash
# Runs every benchmark in bench/ against PIPEC (`make bench` calls `bench/run.sh build/bin/pipec`).
# Results are markdown on stdout; see docs/benchmarks.md. Exit status: non-zero if any benchmark
# failed its target.
set -uo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 PIPEC" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
benches=(frontend train_step pipeline) # add new benchmarks here: bench/NAME.sh PIPEC
status=0
for b in "${benches[@]}"; do
  echo "## $b"
  echo
  "$here/$b.sh" "$1" || { echo "bench/$b.sh: FAILED" >&2; status=1; }
  echo
done
exit $status
