#!/usr/bin/env bash
# What a change buys, measured in one device call: the same asynccopy command on this working tree and on an
# earlier revision, in the order A B A (a clock drifting over the call shows as A's two runs apart).
#
#   bash scripts/ab.sh prepare REV                  # here: REV's package into .ab/REV (git archive; ignored by git)
#   bash scripts/ab.sh run REV -- bench gemm --kernels wgmma --shapes 8192x8192x8192
#                                                   # on the device (carry ".ab"): A = this tree, B = REV
#
# `run` prints each run's last lines (the benches' one-line summaries) under a header naming the build. Each
# run compiles its own kernels (the compile cache keys on the source, so the two builds never share a binary).
set -uo pipefail
cmd=${1:-}; rev=${2:-}
[ -n "$cmd" ] && [ -n "$rev" ] || { sed -n 2,10p "$0"; exit 2; }
dir=.ab/$rev
case "$cmd" in
  prepare)
    rm -rf "$dir" && mkdir -p "$dir" && git archive "$rev" asynccopy | tar -x -C "$dir" && echo "prepared $dir" ;;
  run)
    shift 2; [ "${1:-}" = "--" ] && shift
    [ -d "$dir/asynccopy" ] || { echo "ab.sh: no $dir: run 'bash scripts/ab.sh prepare $rev' first and carry .ab" >&2; exit 2; }
    export PYTHONUNBUFFERED=1
    for build in A B A; do
      if [ $build = A ]; then path=$PWD; name="this tree"; else path=$PWD/$dir; name="$rev"; fi
      echo "== $build ($name): asynccopy $*"
      PYTHONPATH=$path python3 -m asynccopy "$@" 2>&1 | grep -v "^\[" | tail -${AB_LINES:-14}
    done ;;
  *) echo "ab.sh: unknown command $cmd (prepare or run)" >&2; exit 2 ;;
esac
