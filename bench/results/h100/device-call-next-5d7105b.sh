#!/usr/bin/env bash
# The next session's first device call (bench/NOTES.md 2026-12-07 sixth, Next 1 and 2), either card:
# HEAD's binaries packed by scripts/pack-binaries.sh, carried as ["build-carry"]; run from the
# repository root with CODA_COMMIT=<HEAD> bash bench/results/h100/device-call-next-5d7105b.sh.
# An H200: the bar rows' decomposition (CODA_DEBUG_EPILOGUE, two rounds), ncu's L2 / DRAM bytes of
# the residual 1B o-proj and RoPE 1B as they are and without an epilogue, then the fused tables.
# An H100: only the ncu part (the decomposition of 9e70d2a stands for it).
set -uo pipefail
export CODA_COMMIT=${CODA_COMMIT:?}
OUT=${OUT:-$PWD/out}
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
scripts/device-run.sh unpack smoke > /dev/null 2>&1
grep -q 'smoke rc=0' "$OUT/run.log" || { cat "$OUT/run.log"; exit 4; }
H200=0; grep -q H200 "$OUT/gpu.txt" && H200=1
head -2 "$OUT/gpu.txt" | tail -1
if [ $H200 = 1 ]; then
  timeout 240 scripts/device-run.sh decompose \
    op.residual_rmsnorm.1b.oproj op.rmsnorm_rope.1b op.swiglu_backward.1b op.rmsnorm_backward.1b.qkv
fi
echo "== $(el) s: ncu"
metrics=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum
for c in "ResidualRmsNorm op.residual_rmsnorm.1b.oproj" "Rope op.rmsnorm_rope.1b"; do
  set -- $c
  for d in 0 1; do
    CODA_DEBUG_EPILOGUE=$d timeout 120 ncu --kernel-name-base demangled --kernel-name "regex:$1" --launch-count 2 \
      --metrics $metrics --section SpeedOfLight build/bin/coda bench "$2" > "$OUT/ncu-$2-debug$d.txt" 2>&1
    grep -E 'dram__|lts__|tensor|gpu__time|L2 Cache Throughput|Memory Throughput' "$OUT/ncu-$2-debug$d.txt" | head -12
  done
done
if [ $H200 = 1 ] && [ $(el) -lt 420 ]; then
  timeout $(( 570 - $(el) )) scripts/device-run.sh bench op. block. lmhead. > /dev/null 2>&1
  grep -iE 'geomean|^block|bar' "$OUT/bench.log" | head -30
fi
echo "== $(el) s: done"
cd "$OUT" && tar czf logs.tgz ./*.log ./*.txt decompose 2>/dev/null; ls
