#!/usr/bin/env bash
# Makes a venv with PyTorch 2.x from PyPI (CPU use only, MKL BLAS), the second PyTorch peer of
# bench/train_step.sh. Plain `pip install torch` pulls several GB of CUDA wheels; this installs
# torch without its dependencies, then its pure-Python dependencies, then only the few NVIDIA
# wheels without which `import torch` fails on a machine without a matching CUDA toolkit
# (docs/benchmarks.md, "Peers"). About 2 GB; done once, idempotent. pip's resolver then
# complains that torch's CUDA requirements are not installed: expected, they are not needed.
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
# The CUDA libraries torch's own libraries are linked against and that no CPU-only path avoids,
# at the versions torch's metadata pins where it pins them (nvidia-cufile comes unpinned, through
# its cuda-toolkit extra).
mapfile -t nv < <("$venv/bin/python" - <<'PY'
import re
from importlib.metadata import requires
want = ["nvidia-cufile", "nvidia-cusparselt-cu13", "nvidia-nvshmem-cu13", "nvidia-nccl-cu13"]
pins = {}
for r in requires("torch") or []:
    m = re.match(r"([A-Za-z0-9_.-]+)\s*(==\s*[^;\s]+)?", r)
    if m and m.group(1) in want:
        pins[m.group(1)] = m.group(1) + (m.group(2) or "").replace(" ", "")
print("\n".join(pins.get(w, w) for w in want))
PY
)
"${pip[@]}" --no-deps "${nv[@]}" || true
if ! out=$("$venv/bin/python" -c 'import torch; print(torch.__version__)' 2>&1); then
  echo "$out" | tail -3 >&2
  echo "$venv: import torch still fails (see above); install the missing nvidia-* wheel named there" >&2
  exit 1
fi
echo "$venv: torch $out" >&2
