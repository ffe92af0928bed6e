#!/usr/bin/env bash
# Alternating A/B rounds of `coda bench`: every setting once per round, one process each, each round
# starting one setting later (round 1: A B C, round 2: B C A, ...), then the medians
# (scripts/rounds_summary.py). On an H100 one process against another moves by
# 5-7%; a choice made from one sample each was reversed by three rounds (bench/NOTES.md, 2026-12-06).
#
#   scripts/ab-rounds.sh ROUNDS NAME=SETTING [NAME=SETTING ...] -- FILTER [FILTER ...]
#
# SETTING: space-separated words, each VAR=value (the environment of that process) or a path to a
# coda binary (one from scripts/ab-variants.sh; default build/bin/coda). The first setting is the
# baseline the summary compares against. FILTERs select the bench cases (as for `coda bench`).
# e.g. scripts/ab-rounds.sh 3 rule= coop=CODA_FUSED_VARIANT=0 \
#        'rows2=CODA_FUSED_VARIANT=2 CODA_FUSED_RASTER=M CODA_FUSED_SWIZZLE=2' -- lmhead. op.swiglu_backward
# Every bench line goes to stdout prefixed "r<round> <name>: " (and to $OUT/rounds.log when OUT is
# set); the summary follows.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n 2,15p "$0" >&2; exit 2; }
[ $# -ge 3 ] || usage
rounds=$1
shift
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ab-rounds: ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }
settings=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  [[ $1 == *=* && ${1%%=*} =~ ^[A-Za-z0-9_.+-]+$ ]] ||
    { echo "ab-rounds: a setting is NAME=SETTING (NAME: letters, digits, _.+-), got '$1'" >&2; exit 2; }
  settings+=("$1")
  shift
done
[ "${1:-}" = "--" ] && [ $# -ge 2 ] || { echo "ab-rounds: give the bench filters after --" >&2; usage; }
shift
filters=("$@")
log=$(mktemp)
[ -n "${OUT:-}" ] && mkdir -p "$OUT" && log="$OUT/rounds.log"
: >"$log"
export LD_LIBRARY_PATH=$root/build/lib:${LD_LIBRARY_PATH:-}
n=${#settings[@]}
for ((r = 1; r <= rounds; ++r)); do
  # Round r starts at setting (r - 1) mod n: the second of two identical settings ran 0.9% faster
  # in every round on an H100 (an A/A test, bench/NOTES.md 2026-12-06 second), so a fixed order
  # biases the medians.
  for ((i = 0; i < n; ++i)); do
    s=${settings[$(((r - 1 + i) % n))]}
    name=${s%%=*}
    bin=$root/build/bin/coda
    envs=()
    for w in ${s#*=}; do
      if [[ $w == *=* ]]; then envs+=("$w"); else bin=$w; fi
    done
    [ -x "$bin" ] || { echo "ab-rounds: $name: no coda binary at $bin" >&2; exit 2; }
    env "${envs[@]}" "$bin" bench "${filters[@]}" 2>&1 | grep -E '^[a-z0-9_]+\.[^ ]+ +[0-9]+ +[0-9]+ +[0-9]+ ' |
      sed "s/^/r$r $name: /" | tee -a "$log"
  done
done
python3 "$root/scripts/rounds_summary.py" "$log"
