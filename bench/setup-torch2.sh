#!/usr/bin/env bash
# Makes a venv with PyTorch 2.x from PyPI (CPU use only, MKL BLAS), the second PyTorch peer of
# bench/train_step.sh. Plain `pip install torch` pulls several GB of CUDA wheels; this installs
# torch without its dependencies, then its pure-Python dependencies, then only the few NVIDIA
# wheels without which `import torch` fails on a machine without a matching CUDA toolkit
# (docs/benchmarks.md, "PyTorch 2.x"). About 1 GB; done once, idempotent.
#
#   bench/setup-torch2.sh [VENV]      default VENV: bench/.venv-torch2 (ignored by git)
#
# Exit status 0 when `VENV/bin/python -c 'import torch'` works at the end, 1 otherwise (the
# benchmark then reports this peer as not installed).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$root/bench/.venv-torch2}
py=/usr/bin/python3
[[ -x $py ]] || py=python3

if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c 'import torch' 2>/dev/null; then
  echo "$venv: torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)') already importable" >&2
  exit 0
fi
[[ -x $venv/bin/python ]] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" --no-deps torch
"${pip[@]}" --upgrade sympy networkx jinja2 filelock fsspec typing-extensions setuptools numpy
# The CUDA libraries torch's own libraries are linked against and that no CPU-only path avoids.
"${pip[@]}" --no-deps nvidia-cufile nvidia-cusparselt-cu13 nvidia-nvshmem-cu13 nvidia-nccl-cu13 ||
  true
if ! out=$("$venv/bin/python" -c 'import torch; print(torch.__version__)' 2>&1); then
  echo "$out" | tail -3 >&2
  echo "$venv: import torch still fails (see above); install the missing nvidia-* wheel named there" >&2
  exit 1
fi
echo "$venv: torch $out" >&2
