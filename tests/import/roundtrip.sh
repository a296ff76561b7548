#!/usr/bin/env bash
# tests/import/roundtrip.py with the PyTorch 2.x venv of bench/setup-torch2.sh, where it exists
# (skipped, exit 77, elsewhere: CI does not install torch).
# usage: tests/import/roundtrip.sh PIPEC REPO_ROOT
py=$2/bench/.venv-torch2/bin/python
if [ ! -x "$py" ]; then
  echo "skip: no PyTorch 2.x venv (bench/setup-torch2.sh makes bench/.venv-torch2)"
  exit 77
fi
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
exec "$py" "$2/tests/import/roundtrip.py" "$1"
