#!/usr/bin/env bash
# Per-instruction stall sampling of one fused kernel (ncu source view, SASS), for epilogue work.
#   scripts/ncu-source.sh NAME CASE KERNEL_REGEX     e.g. rope op.rmsnorm_rope.1b.qkv 'Rope'
# Profiles the first launch of a kernel whose name matches KERNEL_REGEX while `coda bench CASE`
# runs; writes $OUT/ncu-NAME.csv (one row per SASS instruction: address, source, executed
# instructions, warp stall samples by reason) and $OUT/ncu-NAME.txt (the summary sections).
# Needs a -lineinfo build (the default preset) in build/.
set -uo pipefail
name=$1 case=$2 kregex=$3
OUT=${OUT:-out}
rep=/tmp/ncu-$name
ncu --kernel-name-base demangled --kernel-name "regex:$kregex" --launch-count 1 --import-source yes \
  --section SourceCounters --section WarpStateStats --section ComputeWorkloadAnalysis \
  --section InstructionStats --section LaunchStats \
  -f -o "$rep" build/bin/coda bench "$case" >"$OUT/ncu-$name.run.log" 2>&1
echo "ncu rc=$?"
ncu --import "$rep.ncu-rep" --page details >"$OUT/ncu-$name.txt" 2>&1
ncu --import "$rep.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu-$name.csv" 2>&1 ||
  ncu --import "$rep.ncu-rep" --page source --csv >"$OUT/ncu-$name.csv" 2>&1
wc -c "$OUT/ncu-$name.csv"; head -c 600 "$OUT/ncu-$name.csv"; echo
