#!/usr/bin/env bash
# One device call, either card (2026-12-07 fifth; prepared, never started: no machine came).
# The cp.async A/B with its tests; H200: the bench; then what time allows (H100: the 2 x 2 cluster).
# Inputs, made here first (bench/NOTES.md, 2026-12-07 fifth):
#   build-carry/          scripts/pack-binaries.sh (HEAD's coda, coda_gpu_tests, libcoda.so)
#   .gl/coda{,_gpu_tests}_cpa.xz   cpasync-tiles-experiment-3659195.patch applied, then
#       AB_TARGETS="bin/coda tests/coda_gpu_tests" scripts/ab-variants.sh \
#         ResidualRmsNormPartial{,Direct,LongK}_{0,2}_bfloat16_t,RmsNormBackward_{0,2}_bfloat16_t,SwigluBackward_{0,2}_bfloat16_t \
#         'cpa=-DCODA_EXP_CPASYNC_TILES'   (units comma-separated, written out), xz of /tmp/coda{,_gpu_tests}_cpa
#   .gl/coda{,_gpu_tests}_pp22.xz  pp-cluster2x2-experiment-3659195.patch applied in a worktree,
#       cmake --preset default -DCMAKE_CUDA_FLAGS=-DCODA_EXP_PP_CLUSTER_N=2, the two targets built
# run: carry [".gl", "build-carry"], `CODA_COMMIT=<HEAD> bash <this script>`
set -uo pipefail
export CODA_COMMIT=${CODA_COMMIT:?}
OUT=${OUT:-$PWD/out}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
scripts/device-run.sh unpack smoke || exit $?
grep -q 'smoke rc=0' $OUT/run.log || { echo "smoke failed: stopping"; exit 1; }  # device-run.sh exits 0 after it
for b in cpa pp22; do
  xz -dc .gl/coda_$b.xz > build/bin/coda_$b && chmod +x build/bin/coda_$b
  xz -dc .gl/coda_gpu_tests_$b.xz > build/tests/coda_gpu_tests_$b && chmod +x build/tests/coda_gpu_tests_$b
done
(cuobjdump -sass build/bin/coda_cpa | grep -c LDGSTS; cuobjdump -sass build/bin/coda | grep -c LDGSTS) > $OUT/ldgsts-count.txt 2>&1
H200=0; grep -q H200 $OUT/gpu.txt && H200=1
echo "== $(el) s: GpuOps on the cp.async tiles"
timeout 120 build/tests/coda_gpu_tests_cpa --gtest_filter='GpuOps.*' > $OUT/gpu-tests-cpa.log 2>&1
echo "cpa tests rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED' $OUT/gpu-tests-cpa.log | tail -8
echo "== $(el) s: cp.async rounds"
OUT=$OUT/r scripts/ab-rounds.sh 3 base= cpa=build/bin/coda_cpa -- \
  op.residual_rmsnorm op.swiglu_backward.1b op.rmsnorm_backward.1b block.1b.fwdbwd > $OUT/rounds-cpa.log 2>&1
tail -16 $OUT/rounds-cpa.log
[ $H200 = 1 ] && [ $(el) -lt 200 ] && scripts/device-run.sh bench
if [ $(el) -lt 220 ]; then
  for tool in memcheck racecheck; do
    timeout 40 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/coda_gpu_tests_cpa \
      --gtest_filter='*SanitizerSubset*' > $OUT/$tool-cpa.log 2>&1; echo "$tool cpa rc=$?"; tail -2 $OUT/$tool-cpa.log
  done
fi
if [ $H200 = 1 ] && [ $(el) -lt 150 ]; then scripts/device-run.sh peers; fi
if [ $H200 = 0 ] && [ $(el) -lt 200 ]; then  # H100: the 2 x 2 pingpong cluster
  echo "== $(el) s: 2x2"
  OUT=$OUT/r22 scripts/ab-rounds.sh 2 base=CODA_FUSED_VARIANT=2 'pp22=CODA_FUSED_VARIANT=2 build/bin/coda_pp22' -- \
    op.rmsnorm_rope.1b op.qkv_sqsum.1b op.residual_rmsnorm.1b.oproj > $OUT/rounds-pp22.log 2>&1
  tail -10 $OUT/rounds-pp22.log
fi
echo "== $(el) s: done"
cd $OUT && tar czf logs.tgz *.log *.txt r r22 2>/dev/null; ls
