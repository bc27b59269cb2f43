#!/bin/sh
# One run continued across meshes: 2 ranks with ZeRO stage 3 train steps 1-4, 4 ranks with
# stage 1 continue to step 8, one process finishes at step 12; the global batch stays 8
# sequences (2 x grad_accum x ranks). Its metrics must equal, byte for byte, those of one
# process that trains the 12 steps straight.
# usage: reshard.sh <anvil> <mpirun> <scratch folder>
. "$(dirname "$0")/common.sh"
RUN="--training.eval_steps=0 --checkpoint.every=4"

"$ANVIL" train $TINY $RUN --training.grad_accum=4 --training.steps=12 --run-dir "$WORK/straight" \
  > "$WORK/straight.log" 2>&1
"$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY $RUN --parallel.zero_stage=3 \
  --training.grad_accum=2 --training.steps=4 --run-dir "$WORK/moved" > "$WORK/moved-1.log" 2>&1
"$MPIRUN" -np 4 $MPIFLAGS "$ANVIL" train $TINY $RUN --parallel.zero_stage=1 \
  --training.grad_accum=1 --training.steps=8 --run-dir "$WORK/moved" > "$WORK/moved-2.log" 2>&1
grep -q "resumed from .*step-0000004" "$WORK/moved-2.log"
grep -q "optimizer-00000-of-00002.safetensors" "$WORK/moved/checkpoints/step-0000004/manifest.json"
"$ANVIL" train $TINY $RUN --training.grad_accum=4 --training.steps=12 --run-dir "$WORK/moved" \
  > "$WORK/moved-3.log" 2>&1
grep -q "resumed from .*step-0000008" "$WORK/moved-3.log"

deterministic_metrics "$WORK/straight" > "$WORK/straight.metrics"
deterministic_metrics "$WORK/moved" > "$WORK/moved.metrics"
test "$(wc -l < "$WORK/moved.metrics")" -eq 12
same_metrics straight moved
echo "PASS: 2 ranks (stage 3) -> 4 ranks (stage 1) -> 1 process equals one straight run"
