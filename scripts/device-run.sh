#!/usr/bin/env bash
# One call on the GPU machine: (build if needed), GPU tests, compute-sanitizer subset, benchmarks.
# Logs and JSON go to $OUT (or ./out). Steps run in order; pick some with arguments:
#   scripts/device-run.sh [require-h200] [unpack] [build] [smoke] [abi] [tests] [sanitizer] [bench] [peers] [decompose] [train] [bench-args...]
# Default: smoke abi tests sanitizer bench.
# smoke: a failure (or a hang past its timeout) stops the call with exit 4, nothing after it run.
# require-h200: stop at once (exit 3) unless the card is an H200, where the issues' speed bars are
# set: a call that lands on an H100 then costs only the machine's start (bench/NOTES.md, 2026-12-07
# fourth). Name it first. GTEST_FILTER (environment) narrows the tests step.
# abi: tests/abi through ctest (libcoda.so's exports; every C entry point from a python3 that has
# imported torch, with one GEMM on torch's CUDA tensors).
# peers (not a default step): bench/peers.py times the same cases in PyTorch eager and torch.compile
# (docs/peers.md) into $OUT/peers.json, then bench/compare.py prints coda's ratio next to
# torch.compile's (compare.txt) when $OUT/bench.json is there too. Bench args (name filters) are
# passed to both, wherever they stand on the command line.
# decompose (not a default step): where the fused kernels' time goes, by scripts/ab-rounds.sh
# (DECOMPOSE_ROUNDS, default 2) over CODA_DEBUG_EPILOGUE = 1 (no epilogue), 2 (no program), 8 (no
# tile loads) and 16 (no stores) against the kernel as it is, on the bench args' cases (give some:
# every case would take too long), into $OUT/decompose/ and decompose.log (bench/NOTES.md,
# 2026-12-07 fourth, for the table it gives).
# train (not a default step): examples/train_llama.py on one GPU (coda, eager, compile; about 3
# minutes on an H200), its records and plot copied to $OUT (docs/training.md).
# Binaries come from build/ (carry them, or run `build` here with CODA_CUTLASS_DIR pointing at the
# CUTLASS headers). unpack: the binaries scripts/pack-binaries.sh left in build-carry/ (carried)
# into build/: coda, coda_gpu_tests and libcoda.so only, so name the steps (abi needs the whole
# build tree's ctest files), e.g. `unpack smoke tests sanitizer bench`.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
OUT=${OUT:-$root/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(smoke abi tests sanitizer bench)
bench_args=()
for s in "${steps[@]}"; do  # the words that are not steps: filters for bench and peers
  case "$s" in require-h200 | unpack | build | smoke | abi | tests | sanitizer | bench | peers | decompose | train) ;; *) bench_args+=("$s") ;; esac
done
log() { printf '== %s: %s\n' "$(date +%T)" "$*" | tee -a "$OUT/run.log"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu \
  --format=csv >"$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"

for s in "${steps[@]}"; do
  case "$s" in
    require-h200)
      if ! grep -q H200 "$OUT/gpu.txt"; then
        log "require-h200: this card is not an H200 ($(sed -n 2p "$OUT/gpu.txt" | cut -d, -f1)): stopping"
        exit 3
      fi
      ;;
    unpack)
      log "unpack: build-carry/ ($(tr '\n' ' ' <build-carry/COMMIT 2>/dev/null || echo 'no COMMIT file'))"
      mkdir -p build/bin build/tests build/lib
      for f in bin/coda tests/coda_gpu_tests lib/libcoda.so; do
        xz -dc "build-carry/$(basename "$f").xz" >"build/$f" && chmod +x "build/$f" || log "unpack: build-carry/$(basename "$f").xz failed"
      done
      ;;
    build)
      log "build"
      start=$(date +%s)
      cmake --preset default >"$OUT/build.log" 2>&1 && cmake --build build -j "$(nproc)" >>"$OUT/build.log" 2>&1
      log "build rc=$? in $(( $(date +%s) - start )) s"
      ;;
    smoke)
      log "smoke: small shapes first (a hang shows here, under a short timeout)"
      timeout 90 build/tests/coda_gpu_tests --gtest_filter='*SanitizerSubset*:*ZeroK*:*BadInput*' 2>&1 |
        tail -n 30 | tee "$OUT/smoke.log"
      rc=${PIPESTATUS[0]}
      log "smoke rc=$rc"
      if [ "$rc" -ne 0 ]; then log "smoke failed: skipping the remaining steps"; exit 4; fi
      ;;
    abi)
      log "abi: libcoda.so in a host process (tests/abi)"
      timeout 300 ctest --test-dir build -L abi --output-on-failure 2>&1 | tee "$OUT/abi.log" | tail -n 40
      log "abi rc=${PIPESTATUS[0]}"
      ;;
    tests)
      log "GPU tests"
      timeout 540 build/tests/coda_gpu_tests 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "^\[  (FAILED|PASSED|SKIPPED)|Failure|error|OK \]" | tail -n 60
      log "tests rc=${PIPESTATUS[0]}"
      for v in 0 2; do  # every fused operator test again on each compiled fused variant
        log "fused operator tests with CODA_FUSED_VARIANT=$v"
        CODA_FUSED_VARIANT=$v timeout 300 build/tests/coda_gpu_tests --gtest_filter='GpuOps.*' 2>&1 |
          tee "$OUT/gpu_tests_variant$v.log" | grep -E "^\[  (FAILED|PASSED)|Failure" | tail -n 20
        log "variant $v rc=${PIPESTATUS[0]}"
      done
      ;;
    sanitizer)
      for tool in memcheck racecheck; do
        log "compute-sanitizer $tool"
        timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 build/tests/coda_gpu_tests \
          --gtest_filter='*SanitizerSubset*' >"$OUT/sanitizer_$tool.log" 2>&1
        log "$tool rc=$?"
        tail -n 5 "$OUT/sanitizer_$tool.log"
      done
      ;;
    bench)
      log "bench"
      timeout 570 build/bin/coda bench --json "$OUT/bench.json" "${bench_args[@]}" 2>&1 | tee "$OUT/bench.log"
      log "bench rc=${PIPESTATUS[0]}"
      ;;
    peers)
      log "peers: PyTorch eager and torch.compile on the same cases"
      timeout 580 python3 bench/peers.py --json "$OUT/peers.json" "${bench_args[@]}" 2>&1 | tee "$OUT/peers.log"
      log "peers rc=${PIPESTATUS[0]}"
      if [ -f "$OUT/bench.json" ] && [ -f "$OUT/peers.json" ]; then
        python3 bench/compare.py "$OUT/bench.json" "$OUT/peers.json" | tee "$OUT/compare.txt"
      fi
      ;;
    decompose)
      if [ ${#bench_args[@]} -eq 0 ]; then
        log "decompose: give the cases as bench args (e.g. op.residual_rmsnorm.1b.oproj): skipped"
      else
        log "decompose: ${bench_args[*]}"
        OUT="$OUT/decompose" scripts/ab-rounds.sh "${DECOMPOSE_ROUNDS:-2}" base= noepi=CODA_DEBUG_EPILOGUE=1 \
          noprog=CODA_DEBUG_EPILOGUE=2 noload=CODA_DEBUG_EPILOGUE=8 nostore=CODA_DEBUG_EPILOGUE=16 -- "${bench_args[@]}" \
          >"$OUT/decompose.log" 2>&1
        log "decompose rc=$?"
        sed -n '/^[a-z]*\./,$p' "$OUT/decompose.log" | grep -v '^r[0-9]'
      fi
      ;;
    train)
      log "train: examples/train_llama.py on one GPU"
      CODA_LIBRARY="$root/build/lib/libcoda.so" PYTHONPATH="$root/python" timeout 480 \
        python3 examples/train_llama.py --out "$root/out/train" >"$OUT/train.log" 2>&1
      log "train rc=$?"
      grep -v "it/s\]" "$OUT/train.log" | tail -n 12
      cp "$root"/out/train/train.* "$OUT/" 2>/dev/null
      ;;
    *) ;;  # a bench arg (collected above)
  esac
done
log "done"
