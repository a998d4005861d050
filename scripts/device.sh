#!/usr/bin/env bash
# One call on any GPU machine: install (no package registry needed), `asynccopy info`, the GPU tests,
# then optionally the bench. Logs go into the folder you name (default: $OUT if set, else ./device-logs).
#
#   bash scripts/device.sh [--logs DIR] [-k PYTEST_EXPR] [--shards N] [--no-tests] [--then "ARGS"]... [-- BENCH ARGS...]
#   bash scripts/device.sh --logs /tmp/run1 -- stream --quick      # tests, then `asynccopy bench stream --quick`
#   bash scripts/device.sh --no-tests --then "calibrate" --then "bench --plan --tile 2048 --threads 128"
#
# Writes DIR/gpu-tests.txt (the whole pytest log), DIR/bench.txt and DIR/bench.json (if a bench ran), and
# DIR/then-N.txt for the N-th --then command (`asynccopy ARGS`, run in order after the tests, each logged
# whatever the others did). Set ASYNCCOPY_CACHE_DIR inside the repo to keep compiles and calibrations.
# --shards N: the GPU tests as N pytest processes side by side, each on a contiguous run of the collected tests
# (neighbours share kernels, so each compile happens in about one process); most of a fresh run's time is NVRTC
# on the CPU, which N processes spread over the cores. The logs are DIR/gpu-tests-I.txt; a test that fails there
# runs again alone (serially) before the run counts it failed, and DIR/gpu-tests.txt holds that rerun. A process that
# ends badly with no failed test (a crash at exit: Python's faulthandler prints where) fails the run too.
set -uo pipefail
export PYTHONUNBUFFERED=1
logs=${OUT:-./device-logs}
select=()
shards=1
tests=1
thens=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --logs) logs=$2; shift 2 ;;
    -k) select=(-k "$2"); shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --no-tests) tests=0; shift ;;
    --then) thens+=("$2"); shift 2 ;;
    *) echo "device.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ "${1:-}" = "--" ] && shift
mkdir -p "$logs"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v "^WARNING\|notice" | tail -3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
python3 -m asynccopy info 2>&1 | tail -25
# The GPU tests in $1 processes side by side (see --shards above); returns pytest's status of the serial rerun
# of what failed (0: nothing failed).
shard_tests() {
  local n=$1 i
  python3 -m pytest tests/gpu -q -p no:cacheprovider --collect-only "${select[@]}" 2>/dev/null \
    | grep "::" > "$logs/gpu-tests-ids.txt"
  local total
  total=$(wc -l < "$logs/gpu-tests-ids.txt")
  echo "$total tests in $n shards"
  local pids=() crashed=0 rc
  for ((i = 0; i < n; i++)); do
    sed -n "$(( i * total / n + 1 )),$(( (i + 1) * total / n ))p" "$logs/gpu-tests-ids.txt" > "$logs/gpu-tests-ids-$i.txt"
    xargs -a "$logs/gpu-tests-ids-$i.txt" -d '\n' python3 -X faulthandler -m pytest -q -p no:cacheprovider -rfE \
      > "$logs/gpu-tests-$i.txt" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < n; i++)); do
    wait "${pids[$i]}"; rc=$?
    echo "shard $i: $(grep -E " in [0-9.]+s" "$logs/gpu-tests-$i.txt" | tail -1) (exit $rc)"
    # a failed test (xargs' 123, FAILED / ERROR lines) is rerun below; a process that ended badly without one (xargs'
    # 125: killed by a signal, e.g. a crash at exit after its summary) is reported as such
    if [ "$rc" -ne 0 ] && ! grep -q "^FAILED\|^ERROR" "$logs/gpu-tests-$i.txt"; then
      crashed=1; tail -5 "$logs/gpu-tests-$i.txt"
    fi
  done
  grep -h "^FAILED\|^ERROR" "$logs"/gpu-tests-[0-9]*.txt | sed 's/^[A-Z]* //; s/ - .*//' | sort -u > "$logs/gpu-tests-failed.txt"
  if [ ! -s "$logs/gpu-tests-failed.txt" ]; then
    [ $crashed = 0 ] && { echo "no failures"; return 0; }
    echo "no test failed, but a process ended badly (above)"; return 1
  fi
  echo "$(wc -l < "$logs/gpu-tests-failed.txt") failed side by side; again, one process:"
  xargs -a "$logs/gpu-tests-failed.txt" -d '\n' python3 -m pytest -q -p no:cacheprovider -rfE 2>&1 \
    | tee "$logs/gpu-tests.txt" | grep -v "^\.\+\s*\[" | tail -30
  return "${PIPESTATUS[0]}"
}

status=0
if [ $tests = 1 ]; then
  t0=$(date +%s)
  if [ "$shards" -gt 1 ]; then
    shard_tests "$shards"
    status=$?
  else
    python3 -m pytest tests/gpu -q -p no:cacheprovider "${select[@]}" 2>&1 | tee "$logs/gpu-tests.txt" \
      | grep -v "^\.\+\s*\[" | tail -30
    status=${PIPESTATUS[0]}
  fi
  echo "gpu tests: $(( $(date +%s) - t0 )) s, exit $status"
fi
n=0
for cmd in "${thens[@]}"; do
  n=$((n + 1))
  t0=$(date +%s)
  # shellcheck disable=SC2086  # the command's words are meant to split
  python3 -m asynccopy $cmd 2>&1 | tee "$logs/then-$n.txt" | tail -40
  echo "then $n (asynccopy $cmd): $(( $(date +%s) - t0 )) s, exit ${PIPESTATUS[0]}"
done
if [ $# -gt 0 ]; then
  python3 -m asynccopy bench "$@" --json "$logs/bench.json" 2>&1 | tee "$logs/bench.txt" | tail -60
fi
exit $status
