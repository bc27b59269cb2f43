#!/bin/sh
# anvil launch under failure and stop requests, against one process training the same steps:
#  1. rank 1 SIGKILLs itself after step 7; the launcher names it, restarts from the step-6
#     checkpoint, reports how soon the first step after the restart finished (< 30 s), and
#     the finished run's metrics equal the uninterrupted run's.
#  2. SIGTERM to the launcher mid-run: every rank stops at the same step with a checkpoint and
#     the launcher exits 0; launching again finishes the run, equal to the uninterrupted one.
#     The run asks for far more steps than it could train before the signal arrives, so it
#     cannot finish first however slow the machine (it used to ask for 400 steps, which a
#     loaded machine sometimes finished between the poll and the signal); the resumed launch
#     and the uninterrupted run then train to a few steps past the step where it stopped
#     (the constant learning rate does not depend on training.steps).
# usage: fault.sh <anvil> <mpirun> <scratch folder>
. "$(dirname "$0")/common.sh"
RUN="--training.eval_steps=2 --training.eval_every=5 --checkpoint.every=3 --training.steps=12"

run_logged "$WORK/straight.log" "$ANVIL" train $TINY $RUN --training.grad_accum=4 \
  --run-dir "$WORK/straight"
run_logged "$WORK/killed.log" env ANVIL_TEST_KILL_AT_STEP=7 "$ANVIL" launch --nproc 2 \
  --max-restarts 2 -- train $TINY $RUN --parallel.zero_stage=2 --training.grad_accum=2 \
  --run-dir "$WORK/killed"
grep "anvil launch" "$WORK/killed.log" || true
expect "$WORK/killed.log" "rank 1 failed: killed by signal 9" "the launcher did not name rank 1"
expect "$WORK/killed.log" "restart 1/2" "the launcher did not restart the job"
expect "$WORK/killed.log" "resumed from .*step-0000006" "the restart did not resume from step 6"
seconds=$(sed -n 's/.*recovered: step [0-9]* finished \([0-9.]*\) s after.*/\1/p' \
  "$WORK/killed.log")
[ -n "$seconds" ] || fail "the launcher did not report the recovery" "$WORK/killed.log"
awk -v s="$seconds" 'BEGIN { exit !(s < 30) }' ||
  fail "the first step after the restart took ${seconds} s (limit 30 s)" "$WORK/killed.log"
deterministic_metrics "$WORK/straight" > "$WORK/straight.metrics"
deterministic_metrics "$WORK/killed" > "$WORK/killed.metrics"
same_metrics straight killed

LONG="--training.eval_steps=0 --checkpoint.every=0"
"$ANVIL" launch --nproc 2 -- train $TINY $LONG --training.steps=100000000 \
  --parallel.zero_stage=3 --training.grad_accum=1 --run-dir "$WORK/stopped" \
  > "$WORK/stopped-1.log" 2>&1 &
launcher=$!
steps_done() {
  n=$(grep -c '"type":"train"' "$WORK/stopped/metrics.jsonl" 2>/dev/null || true)
  echo "${n:-0}"
}
while [ "$(steps_done)" -lt 20 ]; do
  kill -0 $launcher 2>/dev/null || fail "the run ended before it was signalled" \
    "$WORK/stopped-1.log"
  sleep 0.2
done
kill -TERM $launcher || fail "cannot signal the launcher" "$WORK/stopped-1.log"
status=0
wait $launcher || status=$?
[ $status -eq 0 ] || fail "the stopped launch exited with status $status" "$WORK/stopped-1.log"
expect "$WORK/stopped-1.log" "stopped by signal" "rank 0 did not report the stop"
expect "$WORK/stopped-1.log" "anvil launch: stopped; every rank wrote its checkpoint" \
  "the launcher did not report a clean stop"
stop_step=$(sed -n 's/.*stopped by signal [0-9]* after step \([0-9]*\)\/.*/\1/p' \
  "$WORK/stopped-1.log")
[ -n "$stop_step" ] || fail "no stop step in the log" "$WORK/stopped-1.log"
steps=$((stop_step + 10))
run_logged "$WORK/stopped-2.log" "$ANVIL" launch --nproc 2 -- train $TINY $LONG \
  --training.steps=$steps --parallel.zero_stage=3 --training.grad_accum=1 \
  --run-dir "$WORK/stopped"
expect "$WORK/stopped-2.log" "resumed from .*step-$(printf %07d "$stop_step")" \
  "the second launch did not resume from the stop at step $stop_step"
run_logged "$WORK/long.log" "$ANVIL" train $TINY $LONG --training.steps=$steps \
  --training.grad_accum=2 --run-dir "$WORK/long"
deterministic_metrics "$WORK/long" > "$WORK/long.metrics"
deterministic_metrics "$WORK/stopped" > "$WORK/stopped.metrics"
same_metrics long stopped
echo "PASS: a killed rank restarts within ${seconds} s and a launch stopped at step ${stop_step} resumes exactly"
