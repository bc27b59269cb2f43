#!/bin/sh
# Elastic launch: `anvil launch --nproc 4 --min-nproc 2 --health-check CMD` shrinks to 2 ranks
# and grows back to 4, against a run that used those world sizes by hand. Slots 2 and 3 are
# "lost" while the run's newest checkpoint is at step 6-11 (the health check reads the run
# directory). Rank 3 SIGKILLs itself after step 7; at the restart the health check fails slots
# 2 and 3, so the launcher resumes the step-6 checkpoint on 2 ranks with training.grad_accum 2
# (global batch 4 x 2 x 1 = 2 x 2 x 2 sequences); at the step-12 checkpoint the slots pass
# again, so the launcher stops the job gracefully at some step S and starts it on 4 ranks. By
# hand: 4 ranks to step 6, 2 ranks to S, 4 ranks to the end. The exact reduction makes every
# world compute the same sums, so the metrics (world-change records included) and the final
# weights must be equal byte for byte.
# usage: elastic.sh <anvil> <mpirun> <scratch folder>
. "$(dirname "$0")/common.sh"
# 60 steps: the growth must land before the end however fast the machine trains.
STEPS=60
RUN="--training.eval_steps=0 --checkpoint.every=3 --training.steps=$STEPS --parallel.zero_stage=2"
cat > "$WORK/health.sh" <<HEALTH
#!/bin/sh
[ "\$ANVIL_SLOT" -lt 2 ] && exit 0
newest=\$(ls "$WORK/elastic/checkpoints" 2>/dev/null | sed -n 's/^step-0*\([0-9][0-9]*\)\$/\1/p' | sort -n | tail -1)
[ -z "\$newest" ] && exit 0
[ "\$newest" -lt 6 ] || [ "\$newest" -ge 12 ]
HEALTH

run_logged "$WORK/elastic.log" env ANVIL_TEST_KILL_AT_STEP=7 timeout -s KILL 200 "$ANVIL" launch \
  --nproc 4 --min-nproc 2 --max-restarts 2 --health-check "sh $WORK/health.sh" -- train $TINY \
  $RUN --training.grad_accum=1 --run-dir "$WORK/elastic"
grep "anvil launch\|world changed" "$WORK/elastic.log" || true
expect "$WORK/elastic.log" "rank 3 failed: killed by signal 9" "the launcher did not name rank 3"
expect "$WORK/elastic.log" \
  "anvil launch: world changed 4 -> 2 at step 6: usable slots 0,1; training.grad_accum 1 -> 2" \
  "the launcher did not shrink the world to 2 ranks at step 6"
expect "$WORK/elastic.log" "^world changed 4 -> 2 at step 6" "the trainer did not log the shrink"
grow=$(sed -n 's/^anvil launch: world changed 2 -> 4 at step \([0-9]*\):.*/\1/p' "$WORK/elastic.log")
[ -n "$grow" ] || fail "the launcher did not grow the world back to 4" "$WORK/elastic.log"
[ "$grow" -ge 12 ] && [ "$grow" -lt "$STEPS" ] ||
  fail "the world grew back at step $grow, not between 12 and $((STEPS - 1))" "$WORK/elastic.log"
expect "$WORK/elastic.log" "stopped at step $grow to grow the world back" \
  "the launcher did not stop the job to grow"
expect "$WORK/elastic.log" "^world changed 2 -> 4 at step $grow" "the trainer did not log the growth"

run_logged "$WORK/byhand-1.log" "$MPIRUN" -np 4 $MPIFLAGS "$ANVIL" train $TINY $RUN \
  --training.grad_accum=1 --training.steps=6 --run-dir "$WORK/byhand"
run_logged "$WORK/byhand-2.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY $RUN \
  --training.grad_accum=2 --training.steps="$grow" --run-dir "$WORK/byhand"
run_logged "$WORK/byhand-3.log" "$MPIRUN" -np 4 $MPIFLAGS "$ANVIL" train $TINY $RUN \
  --training.grad_accum=1 --run-dir "$WORK/byhand"

deterministic_metrics "$WORK/byhand" > "$WORK/byhand.metrics"
deterministic_metrics "$WORK/elastic" > "$WORK/elastic.metrics"
test "$(wc -l < "$WORK/elastic.metrics")" -eq "$STEPS" ||
  fail "the elastic run has not $STEPS train records"
same_metrics byhand elastic
grep '"type":"world"' "$WORK/byhand/metrics.jsonl" > "$WORK/byhand.world"
grep '"type":"world"' "$WORK/elastic/metrics.jsonl" > "$WORK/elastic.world"
expect "$WORK/elastic.world" '{"type":"world","step":6,"world":2,"previous":4}' \
  "metrics.jsonl has no record of the shrink"
diff "$WORK/byhand.world" "$WORK/elastic.world" > /dev/null ||
  fail "the world-change records differ from the by-hand run's" "$WORK/elastic.world"
final=$(printf "step-%07d" "$STEPS")
cmp -s "$WORK/byhand/checkpoints/$final/model.safetensors" \
  "$WORK/elastic/checkpoints/$final/model.safetensors" ||
  fail "the final weights differ from the by-hand run's"
echo "PASS: 4 -> 2 ranks at step 6 and back to 4 at step $grow equal the same worlds by hand"
