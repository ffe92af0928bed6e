#!/usr/bin/env bash
# Set-up: install what is missing, configure and build. Idempotent; called by ./coda.
#
#   scripts/setup.sh            dependencies + configure + build (preset "default", or $CODA_PRESET)
#   scripts/setup.sh deps       dependencies only
#
# Dependencies:
#   - CUDA 13 toolkit (nvcc, cuBLAS): must be installed; not installed here.
#   - CMake >= 3.25 and Ninja: from Debian's packages when missing (needs root).
#   - GoogleTest: the system's (libgtest-dev) or installed from Debian's packages when missing.
#   - CUTLASS/CuTe 4.2 headers: the PyPI wheel nvidia-cutlass==4.2.0.0, pip-installed into
#     .deps/nvidia-cutlass, unless CODA_CUTLASS_DIR names an existing copy (machines without a
#     registry, e.g. a GPU machine: copy .deps/ there or point the variable at it).
#   - PyTorch and pytest for the Python package's tests (tests/python): pip-installed from PyPI
#     into python3's environment when python3 cannot import them (about 2.5 minutes and 5 GB with
#     PyPI's default CUDA build of torch); CODA_NO_TORCH=1 skips this, and those tests then skip.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
preset=${CODA_PRESET:-default}
jobs=${CODA_JOBS:-$(nproc)}

say() { printf 'coda setup: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

apt_install() {
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    die "missing $*; install it (Debian: apt-get install $*)"
  fi
  say "installing $* from Debian's packages"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null; }
}

deps() {
  if ! command -v nvcc >/dev/null; then
    for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH"; done
  fi
  command -v nvcc >/dev/null || die "nvcc not found: install the CUDA 13 toolkit (or put its bin/ on PATH)"
  command -v cmake >/dev/null || apt_install cmake
  command -v ninja >/dev/null || apt_install ninja-build
  if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -f /usr/local/include/gtest/gtest.h ]; then
    apt_install libgtest-dev
  fi
  if [ -n "${CODA_CUTLASS_DIR:-}" ]; then
    [ -d "$CODA_CUTLASS_DIR" ] || die "CODA_CUTLASS_DIR=$CODA_CUTLASS_DIR does not exist"
  elif [ ! -f .deps/nvidia-cutlass/cutlass_library/source/include/cute/tensor.hpp ]; then
    say "installing CUTLASS/CuTe 4.2 headers (pip wheel nvidia-cutlass==4.2.0.0) into .deps/"
    py=$(command -v python3 || command -v python) || die "python3 with pip is needed to fetch the CUTLASS headers"
    rm -rf .deps/nvidia-cutlass
    "$py" -m pip install -q --disable-pip-version-check --no-deps --target .deps/nvidia-cutlass \
      nvidia-cutlass==4.2.0.0 || die "pip could not install nvidia-cutlass==4.2.0.0"
  fi
}

python_deps() {
  [ "${CODA_NO_TORCH:-0}" = 1 ] && return 0
  local py
  py=$(command -v python3) || { say "python3 not found: the Python package's tests will skip"; return 0; }
  "$py" -c 'import torch, pytest' >/dev/null 2>&1 && return 0
  say "installing PyTorch and pytest from PyPI for the Python tests (CODA_NO_TORCH=1 skips this)"
  "$py" -m pip install -q --disable-pip-version-check torch pytest ||
    say "warning: pip could not install torch/pytest; the Python package's tests will skip"
}

build() {
  if [ ! -f build/CMakeCache.txt ] || [ "${CODA_RECONFIGURE:-0}" = 1 ]; then
    cmake --preset "$preset" >/dev/null
  fi
  cmake --build --preset "$preset" -j "$jobs"
}

deps
python_deps
[ "${1:-}" = deps ] && exit 0
build
