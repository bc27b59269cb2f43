#!/bin/sh
# anvil launch under failure and stop requests, against one process training the same steps:
#  1. rank 1 SIGKILLs itself after step 7; the launcher names it, restarts from the step-6
#     checkpoint, reports how soon the first step after the restart finished (< 30 s), and
#     the finished run's metrics equal the uninterrupted run's.
#  2. SIGTERM to the launcher mid-run: every rank stops at the same step with a checkpoint and
#     the launcher exits 0; launching again finishes the run, equal to the uninterrupted one.
# usage: fault.sh <anvil> <mpirun> <scratch folder>
. "$(dirname "$0")/common.sh"
RUN="--training.eval_steps=2 --training.eval_every=5 --checkpoint.every=3 --training.steps=12"

"$ANVIL" train $TINY $RUN --training.grad_accum=4 --run-dir "$WORK/straight" \
  > "$WORK/straight.log" 2>&1
ANVIL_TEST_KILL_AT_STEP=7 "$ANVIL" launch --nproc 2 --max-restarts 2 -- train $TINY $RUN \
  --parallel.zero_stage=2 --training.grad_accum=2 --run-dir "$WORK/killed" > "$WORK/killed.log" 2>&1
cat "$WORK/killed.log" | grep "anvil launch"
grep -q "rank 1 failed: killed by signal 9" "$WORK/killed.log"
grep -q "restart 1/2" "$WORK/killed.log"
grep -q "resumed from .*step-0000006" "$WORK/killed.log"
seconds=$(sed -n 's/.*recovered: step [0-9]* finished \([0-9.]*\) s after.*/\1/p' \
  "$WORK/killed.log")
test -n "$seconds"
awk -v s="$seconds" 'BEGIN { exit !(s < 30) }'
deterministic_metrics "$WORK/straight" > "$WORK/straight.metrics"
deterministic_metrics "$WORK/killed" > "$WORK/killed.metrics"
same_metrics straight killed

LONG="--training.eval_steps=0 --checkpoint.every=0 --training.steps=400"
"$ANVIL" train $TINY $LONG --training.grad_accum=2 --run-dir "$WORK/long" > "$WORK/long.log" 2>&1
"$ANVIL" launch --nproc 2 -- train $TINY $LONG --parallel.zero_stage=3 --training.grad_accum=1 \
  --run-dir "$WORK/stopped" > "$WORK/stopped-1.log" 2>&1 &
launcher=$!
steps_done() {
  n=$(grep -c '"type":"train"' "$WORK/stopped/metrics.jsonl" 2>/dev/null || true)
  echo "${n:-0}"
}
while [ "$(steps_done)" -lt 20 ]; do
  kill -0 $launcher 2>/dev/null || { echo "FAIL: the run ended before it was signalled"; exit 1; }
  sleep 0.2
done
kill -TERM $launcher
wait $launcher
grep -q "stopped by signal" "$WORK/stopped-1.log"
grep -q "anvil launch: stopped; every rank wrote its checkpoint" "$WORK/stopped-1.log"
"$ANVIL" launch --nproc 2 -- train $TINY $LONG --parallel.zero_stage=3 --training.grad_accum=1 \
  --run-dir "$WORK/stopped" > "$WORK/stopped-2.log" 2>&1
grep -q "resumed from" "$WORK/stopped-2.log"
deterministic_metrics "$WORK/long" > "$WORK/long.metrics"
deterministic_metrics "$WORK/stopped" > "$WORK/stopped.metrics"
same_metrics long stopped
echo "PASS: a killed rank restarts within ${seconds} s and a stopped launch resumes exactly"
