#!/usr/bin/env bash
# Every kernel the package ships, on small inputs, under each compute-sanitizer tool:
#   bash scripts/sanitize.sh [--logs DIR] [TOOL ...]      (default tools: memcheck racecheck synccheck initcheck)
# Runs `pytest tests/gpu -m sanitize` under each tool and fails if the tool reports anything or a test
# fails. Host-side API errors are not reported (--report-api-errors no): cuda-bindings probes the driver
# with cuGetProcAddress calls that fail by design; our own API calls are checked by the package and fail
# their test instead. Each tool's whole log: DIR/sanitize-TOOL.txt.
set -uo pipefail
export PYTHONUNBUFFERED=1
logs=${OUT:-./device-logs}
if [ "${1:-}" = "--logs" ]; then logs=$2; shift 2; fi
tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(memcheck racecheck synccheck initcheck)
mkdir -p "$logs"
export ASYNCCOPY_TEST_CACHE_DIR=${ASYNCCOPY_TEST_CACHE_DIR:-$(mktemp -d)}  # compile once, for every tool
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -z "$sanitizer" ]; then echo "sanitize.sh: compute-sanitizer not found" >&2; exit 2; fi
failed=0
for tool in "${tools[@]}"; do
  extra=()
  [ "$tool" = racecheck ] && extra=(--racecheck-report all)
  # synccheck misreads libcu++'s completion of cp.async on an mbarrier (cp.async.mbarrier.arrive with
  # increment, then a plain arrive: cuda::pipeline's commit and cuda::memcpy_async on a cuda::barrier) as
  # "Missing wait" and kills the launch, so no single report can be set aside: those three kernels run
  # unchecked by synccheck alone, and the minimal kernel of the pattern shows the tool's verdict on it
  # (scripts/sanitizer_patterns.py; docs/design.md, "compute-sanitizer").
  [ "$tool" = synccheck ] && extra=(--kernel-name-exclude kns=stream_pipeline --kernel-name-exclude kns=stream_ws_pipeline
                                    --kernel-name-exclude kns=stream_barrier)
  t0=$(date +%s)
  "$sanitizer" --tool "$tool" --report-api-errors no --error-exitcode 99 "${extra[@]}" \
    python3 -m pytest tests/gpu -m sanitize -q -p no:cacheprovider -x >"$logs/sanitize-$tool.txt" 2>&1
  rc=$?
  # report lines (not the tool's closing summary, which names its hazard count too)
  reports=$(grep "^========= \(Invalid\|Race\|Barrier\|Uninitialized\|Error\|.*[Hh]azard\)" "$logs/sanitize-$tool.txt" \
    | grep -vc "SUMMARY")
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" "$logs/sanitize-$tool.txt" | tail -2 | tr '\n' ' ')
  echo "$tool: exit $rc, $reports report line(s), $(( $(date +%s) - t0 )) s: $summary"
  if [ $rc -ne 0 ] || [ "$reports" -ne 0 ]; then
    failed=1
    grep -A12 "^========= \(Invalid\|Race\|Barrier\|Uninitialized\|Error\|.*[Hh]azard\)" "$logs/sanitize-$tool.txt" | head -60
  fi
done
if [[ " ${tools[*]} " == *" synccheck "* ]]; then
  echo "synccheck on the libcu++ pipeline pattern, alone (expected: flagged with the increment, clean without):"
  for p in arrive_inc arrive_noinc; do
    "$sanitizer" --tool synccheck python3 scripts/sanitizer_patterns.py $p 2>&1 | grep -E "ran,|Missing wait|ERROR SUMMARY" \
      | sort | uniq -c
  done
fi
exit $failed
