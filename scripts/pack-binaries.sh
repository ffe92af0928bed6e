#!/usr/bin/env bash
# Pack the finished build's binaries for the GPU machine: build/bin/coda, build/tests/coda_gpu_tests
# and build/lib/libcoda.so, xz-compressed into build-carry/ (ignored by git; ~6 MB each, where the
# three uncompressed are ~230 MB). Then `run` with carry ["build-carry"] and
# `scripts/device-run.sh unpack tests ...` there: no 3-minute build on the device's clock.
#   scripts/pack-binaries.sh     (builds those three targets first)
# Carry build-carry alone: with .deps/ the tree is over the device's 64 MiB limit (bench/NOTES.md,
# 2026-12-06 fourth).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# The binaries must be those of the sources as they are: build first (quick when up to date; it
# also records the commit the binary reports).
cmake --build build --target coda_cli coda_gpu_tests coda_gpu >/dev/null ||
  { echo "pack-binaries: cmake --build build failed (configure first: cmake --preset default)" >&2; exit 2; }
mkdir -p build-carry
for f in build/bin/coda build/tests/coda_gpu_tests build/lib/libcoda.so; do
  xz -T0 -3 -c "$f" >"build-carry/$(basename "$f").xz"
done
git rev-parse HEAD >build-carry/COMMIT 2>/dev/null || echo unknown >build-carry/COMMIT
git status --porcelain --untracked-files=no | grep -q . && echo "dirty" >>build-carry/COMMIT || true
ls -la build-carry
