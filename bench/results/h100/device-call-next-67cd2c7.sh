#!/usr/bin/env bash
# The next session's first device call (bench/NOTES.md 2026-12-07 seventh, Next 1 and 2), either card:
# HEAD's binaries packed by scripts/pack-binaries.sh, carried as ["build-carry"]; run from the
# repository root with CODA_COMMIT=<HEAD> bash bench/results/h100/device-call-next-67cd2c7.sh.
# GpuOps on every variant (the multi-tile shape {2000, 2056, 72} has run only on the split
# experiment's binaries), ncu of the residual 1B o-proj (shared-memory, LSU and stall counters, as
# is and without the epilogue); on an H200 the bar rows' decomposition and the full bench (FULL=0:
# neither).
set -uo pipefail
export CODA_COMMIT=${CODA_COMMIT:?}
OUT=${OUT:-$PWD/out}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
scripts/device-run.sh unpack smoke > /dev/null 2>&1 || { cat "$OUT/run.log"; exit 4; }
H200=0; grep -q H200 "$OUT/gpu.txt" && H200=1
head -2 "$OUT/gpu.txt" | tail -1
for v in default 2 0; do
  echo "== $(el) s: GpuOps, variant $v"
  if [ $v = default ]; then timeout 100 build/tests/coda_gpu_tests --gtest_filter='GpuOps.*' > $OUT/gpu-tests-gpuops-$v.log 2>&1
  else CODA_FUSED_VARIANT=$v timeout 100 build/tests/coda_gpu_tests --gtest_filter='GpuOps.*' > $OUT/gpu-tests-gpuops-$v.log 2>&1; fi
  echo "rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED|tests ran' $OUT/gpu-tests-gpuops-$v.log | tail -4
done
echo "== $(el) s: ncu tables"
for d in 0 1; do
  CODA_DEBUG_EPILOGUE=$d timeout 60 ncu --kernel-name-base demangled --kernel-name "regex:ResidualRmsNorm" --launch-count 1 \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section InstructionStats --print-details all \
    --metrics smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed_pipe_lsu.sum \
    build/bin/coda bench op.residual_rmsnorm.1b.oproj > "$OUT/ncu-tables-residual-debug$d.txt" 2>&1
  grep -E "stalled|wavefronts|bank_conflicts|pipe_lsu|Shared" "$OUT/ncu-tables-residual-debug$d.txt" | head -20
done
if [ $H200 = 1 ] && [ "${FULL:-1}" = 1 ]; then
  echo "== $(el) s: decompose"
  timeout 200 scripts/device-run.sh decompose \
    op.residual_rmsnorm.1b.oproj op.rmsnorm_rope.1b op.swiglu_backward.1b op.rmsnorm_backward.1b.qkv > /dev/null 2>&1
  tail -30 "$OUT/decompose.log"
  echo "== $(el) s: bench"
  timeout $(( 580 - $(el) )) scripts/device-run.sh bench > /dev/null 2>&1
  grep -iE 'geomean|^block|bar' "$OUT/bench.log" | head -30
fi
echo "== $(el) s: done"
cd "$OUT" && tar czf logs.tgz ./*.log ./*.txt decompose 2>/dev/null; ls
