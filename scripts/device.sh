#!/usr/bin/env bash
# One call on a GPU machine: install (no registry needed), `asynccopy info`, the GPU tests, the bench.
#   bash scripts/device.sh [pytest -k expression] -- [asynccopy bench arguments]
# $OUT gets the full test log and bench.json (the device tool brings that folder back; at most 8 files).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/asynccopy-out}
mkdir -p "$OUT"
select=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do select+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v "^WARNING\|notice" | tail -3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
python3 -m asynccopy info 2>&1
t0=$(date +%s)
if [ ${#select[@]} -gt 0 ]; then k=(-k "${select[*]}"); else k=(); fi
python3 -m pytest tests/gpu -q -p no:cacheprovider "${k[@]}" 2>&1 | tee "$OUT/gpu-tests.txt" | grep -v "^\.\+\s*\[" | tail -30
echo "gpu tests: $(( $(date +%s) - t0 )) s"
if [ $# -gt 0 ]; then
  python3 -m asynccopy bench "$@" --json "$OUT/bench.json" 2>&1
fi
