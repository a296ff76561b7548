#!/usr/bin/env bash
# The Python packages the tests need that Debian does not package: a venv at .venv-test (ignored
# by git) over /usr/bin/python3 with its system packages visible (numpy, torch, jsonschema from
# apt), plus the `safetensors` package from PyPI (tests/e2e/shards.sh reads pipec's sharded
# checkpoints with its reader). Idempotent; without network the test that needs it is skipped
# (exit 77), never failed. Run by `make test` (the Makefile's deps-test).
#
#   scripts/setup-test-venv.sh [VENV]      default VENV: .venv-test
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$root/.venv-test}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
"$venv/bin/python" -c 'import safetensors' 2>/dev/null && exit 0
if [ ! -x "$venv/bin/python" ] && ! "$py" -m venv --system-site-packages "$venv" >/dev/null 2>&1; then
  echo "setup-test-venv: cannot create $venv (is python3-venv installed?); tests that need the safetensors package will be skipped" >&2
  exit 0
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check safetensors 2>/dev/null ||
  echo "setup-test-venv: pip could not install safetensors (no network?); tests that need it will be skipped" >&2
exit 0
