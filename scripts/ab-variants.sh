#!/usr/bin/env bash
# A/B binaries: `coda` relinked with some translation units compiled under extra flags.
#   scripts/ab-variants.sh UNIT[,UNIT...] NAME=FLAGS [NAME=FLAGS ...]
#   e.g. scripts/ab-variants.sh SwigluBackward_2_bfloat16_t 'c4=-DCODA_VISIT_CHUNKS=4' 'c1=-DCODA_VISIT_CHUNKS=1'
#   (CODA_VISIT_CHUNKS: the unit's programs on N chunks per visit-loop iteration, sm90_gemm.cuh)
#   scripts/ab-variants.sh Rope_2_bfloat16_t,ResidualRmsNormPartial_2_bfloat16_t 'head=-DCODA_EXP_HEAD_STORES'
# UNIT names a generated fused unit (build/generated/fused/UNIT.cu) or any object path that
# `ninja -t targets` knows. Writes /tmp/coda_NAME for each variant (every listed unit compiled with
# its FLAGS), plus /tmp/coda_base (build/bin/coda as it is), then the caller alternates them (one
# process each, the same filter; scripts/ab-rounds.sh takes the binary paths).
#
# Why by hand: `ninja bin/coda` after compiling an object outside ninja rebuilt that object with its
# own command, so every "variant" was the default build again (bench/NOTES.md, 2026-12-02). Here
# each variant's units are compiled to their own objects and linked with bin/coda's link command,
# the default objects swapped for them; build/ is left untouched. Needs a finished build in build/
# (cmake --build build). All compiles run in parallel (up to `nproc` at once).
# AB_TARGETS (environment, default bin/coda): the binaries to relink, space-separated, from
# bin/coda, tests/coda_gpu_tests and lib/libcoda.so; each variant's goes to /tmp/<name>_NAME
# (coda_NAME, coda_gpu_tests_NAME, libcoda.so_NAME), so the same units can be tested and timed.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -ge 2 ] || { sed -n 2,16p "$0" >&2; exit 2; }
IFS=, read -r -a units <<<"$1"
shift
cd "$root/build" || exit 2
read -r -a targets <<<"${AB_TARGETS:-bin/coda}"
links=()
for t in "${targets[@]}"; do
  l=$(ninja -t commands "$t" | tail -1)
  [[ $l == *" -o $t "* ]] || { echo "ab-variants: cannot find $t's link command in build/" >&2; exit 2; }
  links+=("$l")
done
objs=() cmds=()
for u in "${units[@]}"; do
  obj=$u
  [[ $obj == *.o ]] || obj=CMakeFiles/coda_kernels.dir/generated/fused/$u.cu.o
  cmd=$(ninja -t commands "$obj" | tail -1 | sed -e 's/ -MD -MT [^ ]* -MF [^ ]*//')
  [[ $cmd == *" -o $obj"* ]] && for l in "${links[@]}"; do [[ $l == *" $obj "* ]] || cmd=; done
  [ -n "$cmd" ] ||
    { echo "ab-variants: cannot find $obj in build/'s compile and link commands" >&2; exit 2; }
  objs+=("$obj") cmds+=("$cmd")
done
cp bin/coda /tmp/coda_base
jobs_max=$(nproc)
rc=0
for v in "$@"; do
  name=${v%%=*} flags=${v#*=}
  pids=()
  for i in "${!objs[@]}"; do
    o=/tmp/ab_${name}_$i.o
    c=${cmds[$i]/ -c / $flags -c }
    c=${c/ -o ${objs[$i]}/ -o $o}
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    (eval "$c") >"/tmp/ab_${name}_$i.log" 2>&1 &
    pids+=("$!")
  done
  ok=1
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { ok=0; echo "ab-variants: $name: ${objs[$i]} failed (/tmp/ab_${name}_$i.log):" >&2; tail -5 "/tmp/ab_${name}_$i.log" >&2; }
  done
  [ $ok = 1 ] || { echo "ab-variants: $name failed" >&2; rc=1; continue; }
  for k in "${!targets[@]}"; do
    t=${targets[$k]} l=${links[$k]}
    for i in "${!objs[@]}"; do o=/tmp/ab_${name}_$i.o; l=${l/ ${objs[$i]} / $o }; done
    dst=/tmp/$(basename "$t")_$name
    l=${l/ -o ${t} / -o $dst }
    if (eval "$l") >"/tmp/ab_${name}_link$k.log" 2>&1; then
      echo "ab-variants: $dst (${#objs[@]} units: $(cat /tmp/ab_${name}_*.o | md5sum | cut -c1-8))"
    else
      echo "ab-variants: $name: linking $t failed (/tmp/ab_${name}_link$k.log)" >&2
      rc=1
    fi
  done
done
exit $rc
