#!/usr/bin/env bash
# The fuzz campaign: each fuzz test of tests/test_fuzz.py at RLSIM_FUZZ_EXAMPLES examples (default 20000), one
# test at a time on one core (-n 0), each in its own pytest process, logging to LOG_DIR/<test>.log with
# hypothesis's statistics (what each test reached) and one line per test in LOG_DIR/SUMMARY.txt:
# test, examples, PASS/FAIL, wall seconds, CPU seconds (user+system).
#
#   benchmarks/fuzz_campaign.sh                      # every fuzz test, cheapest first
#   benchmarks/fuzz_campaign.sh test_plan_target_sizes_or_refuses_in_one_line   # some of them
#   RESUME=1 benchmarks/fuzz_campaign.sh             # skip tests SUMMARY.txt already has as PASS at this count
#
# Environment: RLSIM_FUZZ_EXAMPLES (20000), LOG_DIR (/work/notes/fuzz-logs), PYTHON (the project's venv python).
set -u
cd "$(dirname "$0")/.."
EXAMPLES=${RLSIM_FUZZ_EXAMPLES:-20000}
LOG_DIR=${LOG_DIR:-/work/notes/fuzz-logs}
PYTHON=${PYTHON:-/work/main/.venv/bin/python}
mkdir -p "$LOG_DIR"
SUMMARY="$LOG_DIR/SUMMARY.txt"
[ -f "$SUMMARY" ] || printf '%-100s %8s %6s %9s %9s %s\n' test examples result wall_s cpu_s commit > "$SUMMARY"
TESTS=("$@")
if [ ${#TESTS[@]} -eq 0 ]; then  # cheapest first: a failure in a quick one shows before the long ones
  TESTS=(test_every_shrunk_shipped_scenario_runs
         test_mutated_metrics_logs_read_or_refuse_in_one_line
         test_mutated_shipped_scenarios_never_crash_hang_or_lie
         test_mutated_plan_spaces_enumerate_or_refuse_in_one_line
         test_lending_resplit_inflight_affinity_lora_tail_resharding_and_moe_never_crash_hang_or_lie
         test_engine_kinds_length_shapes_traces_drain_and_calibration_never_crash_hang_or_lie
         test_mutated_framework_configs_import_in_one_line_or_run
         test_plan_target_sizes_or_refuses_in_one_line
         test_calibrate_ops_on_damaged_folders_fits_what_is_there_or_refuses_in_one_line)
fi
for test in "${TESTS[@]}"; do
  if [ "${RESUME:-0}" = 1 ] && grep -qE "^$test +$EXAMPLES +PASS" "$SUMMARY"; then
    echo "skip $test (passed at $EXAMPLES)"; continue
  fi
  log="$LOG_DIR/$test.log"
  COMMIT=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- rlsim tests || echo +dirty)
  echo "$(date -u +%FT%TZ) start $test at $EXAMPLES examples ($COMMIT), pid $$" | tee "$log"
  start=$(date +%s.%N)
  RLSIM_FUZZ_EXAMPLES=$EXAMPLES PYTHONPATH=$PWD /usr/bin/time -f "time: wall %e s, cpu %U+%S s" \
    "$PYTHON" -m pytest -q -n 0 -m "slow or not slow" -p no:cacheprovider --hypothesis-show-statistics \
    "tests/test_fuzz.py::$test" >> "$log" 2>&1
  rc=$?
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  cpu=$(sed -nE 's/^time: wall .* cpu ([0-9.]+)\+([0-9.]+) s$/\1 \2/p' "$log" | awk '{print $1 + $2}')
  result=$([ $rc = 0 ] && echo PASS || echo "FAIL")
  printf '%-100s %8s %6s %9.0f %9s %s\n' "$test" "$EXAMPLES" "$result" "$wall" "${cpu:-?}" "$COMMIT" >> "$SUMMARY"
  echo "$(date -u +%FT%TZ) $result $test (rc $rc, wall ${wall%.*} s)" | tee -a "$log"
done
