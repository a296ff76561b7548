#!/usr/bin/env bash
# Installs the Debian packages pipec needs to build and test, and only those that are missing.
#
# Usage: scripts/install-deps.sh [--with-torch] [--with-blis] [--with-chromium]
#   --with-torch  also install python3-torch, python3-numpy (PyTorch parity tests, benchmarks) and
#                 python3-venv (scripts/setup-test-venv.sh).
#   --with-blis   also install BLIS (libblis-dev, libblis4-serial: bench/blas_compare.sh's candidate;
#                 pipec itself links OpenBLAS).
#   --with-chromium  also install Chromium (headless screenshots of the schedule pictures:
#                 scripts/screenshot.sh, bench/trace_pictures.sh).
#
# Each package is checked with dpkg-query first; apt-get runs only when something is missing. When
# something is missing and we are not root (and sudo is not available without a password), the
# script prints the exact command to run and exits 1.
set -euo pipefail

pkgs=(cmake make gcc pkg-config libcjson-dev libxml2-dev libzip-dev zlib1g-dev check libopenblas-dev libopenmpi-dev openmpi-bin valgrind)
optional=()
for arg in "$@"; do
  case $arg in
  --with-torch) optional+=(python3-torch python3-numpy python3-venv) ;;
  --with-blis) optional+=(libblis-dev libblis4-serial) ;;
  --with-chromium) optional+=(chromium fonts-dejavu-core) ;;
  *) echo "usage: $0 [--with-torch] [--with-blis] [--with-chromium]" >&2 && exit 2 ;;
  esac
done

# python3-jsonschema: the JSON Schema tests (the samples against docs/model.schema.json, pipec's
# SARIF logs against the SARIF 2.1.0 schema); they are skipped without it.
pkgs+=(python3-jsonschema)
# Ninja: the depfile and install tests build with it (tests/e2e/no_build.sh, install.sh).
pkgs+=(ninja-build)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
opt_missing=()
for p in "${optional[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    opt_missing+=("$p")
  fi
done

[ ${#missing[@]} -eq 0 ] && [ ${#opt_missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO="sudo -n"
else
  if [ ${#missing[@]} -gt 0 ]; then
    echo "pipec: missing system packages: ${missing[*]}" >&2
    echo "pipec: run as root: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "pipec: note: optional packages missing (PyTorch parity tests or a benchmark's candidate will be skipped): ${opt_missing[*]}" >&2
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
echo "pipec: installing missing packages: ${missing[*]} ${opt_missing[*]}" >&2
$SUDO apt-get update -qq >/dev/null || true
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ${#opt_missing[@]} -gt 0 ]; then
  # Optional: PyTorch parity tests print a skip, the benchmarks leave a candidate out, when these
  # cannot be installed.
  $SUDO apt-get install -y -qq --no-install-recommends "${opt_missing[@]}" >/dev/null ||
    echo "pipec: note: could not install ${opt_missing[*]}; PyTorch parity tests (or the benchmark's candidate) will be skipped" >&2
fi
