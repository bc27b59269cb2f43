#!/bin/sh
# A hung rank under anvil launch, against one process training the same steps: rank 1 of a
# 2-rank run stops itself with SIGSTOP after step 7 (so it neither dies nor answers) under
# parallel.collective_timeout_s = 5. Rank 0's watchdog must name rank 0, the all_reduce it is
# blocked in and step 7, and end the process; mpirun must end the stopped rank too; the launcher
# restarts from the step-6 checkpoint, the first step after the restart finishes within the
# timeout + 30 s of the last step before the hang, the finished run's metrics equal the
# uninterrupted run's, and no process of the job is left behind.
# usage: hang.sh <anvil> <mpirun> <scratch folder>
. "$(dirname "$0")/common.sh"
TIMEOUT=5
RUN="--training.eval_steps=2 --training.eval_every=5 --checkpoint.every=3 --training.steps=12"

# Prints "pid state" of every live process of this test's job (zombies hold nothing).
job_processes() {
  ps -eo pid=,stat=,args= | awk -v dir="$WORK/hung" \
    'index($0, dir) && $2 !~ /^Z/ && !/awk/ { print $1, $2 }'
}
# A failed check must not leave a stopped rank behind: SIGKILL works on stopped processes.
end_leftovers() {
  job_processes | while read -r pid state; do kill -KILL "$pid" 2>/dev/null || true; done
}
trap end_leftovers EXIT

run_logged "$WORK/straight.log" "$ANVIL" train $TINY $RUN --training.grad_accum=4 \
  --run-dir "$WORK/straight"
# The bound only matters if the watchdog fails: then the job would hang forever.
run_logged "$WORK/hung.log" env ANVIL_TEST_STOP_AT_STEP=7 timeout -s KILL 150 "$ANVIL" launch \
  --nproc 2 --max-restarts 2 -- train $TINY $RUN --training.grad_accum=2 \
  --parallel.collective_timeout_s=$TIMEOUT --run-dir "$WORK/hung"
grep "anvil launch\|watchdog" "$WORK/hung.log" || true
expect "$WORK/hung.log" "rank 1 stops itself with SIGSTOP after step 7" "rank 1 did not stop"
expect "$WORK/hung.log" \
  "^anvil: error: \[watchdog\] rank 0: all_reduce (step 7) has not completed after [0-9.]* s" \
  "rank 0's watchdog did not report the all_reduce of step 7"
expect "$WORK/hung.log" "rank 0 failed: exited with code 124: anvil: error: \[watchdog\]" \
  "the launcher did not name rank 0's watchdog exit"
expect "$WORK/hung.log" "restart 1/2" "the launcher did not restart the job"
expect "$WORK/hung.log" "resumed from .*step-0000006" "the restart did not resume from step 6"
if grep -q "restart 2/2" "$WORK/hung.log"; then
  fail "the job needed a second restart (the stop hook must act on the first attempt only)" \
    "$WORK/hung.log"
fi
seconds=$(sed -n 's/.*recovered: step [0-9]* finished .* s after the failure was detected, \([0-9.]*\) s after the last step before it.*/\1/p' \
  "$WORK/hung.log")
[ -n "$seconds" ] || fail "the launcher did not report the recovery" "$WORK/hung.log"
awk -v s="$seconds" -v limit=$((TIMEOUT + 30)) 'BEGIN { exit !(s < limit) }' ||
  fail "recovery took ${seconds} s after the last step, limit $((TIMEOUT + 30)) s" "$WORK/hung.log"
deterministic_metrics "$WORK/straight" > "$WORK/straight.metrics"
deterministic_metrics "$WORK/hung" > "$WORK/hung.metrics"
same_metrics straight hung
leftovers=$(job_processes)
[ -z "$leftovers" ] || fail "processes of the job outlived it: $leftovers"
echo "PASS: a stopped rank is detected after ${TIMEOUT} s and the job resumes ${seconds} s after its last step"
