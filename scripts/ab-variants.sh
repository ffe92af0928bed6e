#!/usr/bin/env bash
# A/B binaries of one translation unit: `coda` relinked with that unit compiled under extra flags.
#   scripts/ab-variants.sh UNIT NAME=FLAGS [NAME=FLAGS ...]
#   e.g. scripts/ab-variants.sh SwigluBackward_2_bfloat16_t 'c4=-DCODA_VISIT_CHUNKS=4' 'c1=-DCODA_VISIT_CHUNKS=1'
#   (CODA_VISIT_CHUNKS: the unit's programs on N chunks per visit-loop iteration, sm90_gemm.cuh)
# UNIT names a generated fused unit (build/generated/fused/UNIT.cu) or any object path that
# `ninja -t targets` knows. Writes /tmp/coda_NAME for each variant, plus /tmp/coda_base (build/bin/coda
# as it is), then the caller alternates them (one process each, the same filter).
#
# Why by hand: `ninja bin/coda` after compiling an object outside ninja rebuilt that object with its
# own command, so every "variant" was the default build again (bench/NOTES.md, 2026-12-02). Here
# each variant is compiled to its own object and linked with bin/coda's link command, the default
# object swapped for it; build/ is left untouched. Needs a finished build in build/ (cmake --build
# build). Variants compile in parallel.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -ge 2 ] || { sed -n 2,14p "$0" >&2; exit 2; }
unit=$1
shift
cd "$root/build" || exit 2
obj=$unit
[[ $obj == *.o ]] || obj=CMakeFiles/coda_kernels.dir/generated/fused/$unit.cu.o
cmd=$(ninja -t commands "$obj" | tail -1 | sed -e 's/ -MD -MT [^ ]* -MF [^ ]*//')
link=$(ninja -t commands bin/coda | tail -1)
[[ $cmd == *" -o $obj"* && $link == *" $obj "* && $link == *" -o bin/coda "* ]] ||
  { echo "ab-variants: cannot find $obj in build/'s compile and link commands" >&2; exit 2; }
cp bin/coda /tmp/coda_base
pids=()
for v in "$@"; do
  name=${v%%=*} flags=${v#*=}
  o=/tmp/ab_$name.o
  c=${cmd/ -c / $flags -c }
  c=${c/ -o $obj/ -o $o}
  l=${link/ $obj / $o }
  l=${l/ -o bin\/coda / -o \/tmp\/coda_$name }
  ( eval "$c" && eval "$l" ) >"/tmp/ab_$name.log" 2>&1 &
  pids+=("$!:$name")
done
rc=0
for p in "${pids[@]}"; do
  if wait "${p%%:*}"; then
    echo "ab-variants: /tmp/coda_${p#*:} ($(md5sum </tmp/ab_${p#*:}.o | cut -c1-8))"
  else
    echo "ab-variants: ${p#*:} failed (/tmp/ab_${p#*:}.log):" >&2
    tail -5 "/tmp/ab_${p#*:}.log" >&2
    rc=1
  fi
done
exit $rc
