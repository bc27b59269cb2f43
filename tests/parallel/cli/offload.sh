#!/bin/sh
# Optimizer offload (parallel.offload): AdamW state and f32 masters in host memory.
#  1. two ranks on the simulated device, ZeRO stages 1, 2 and 3, two micro-batches: metrics identical with and
#     without offload bit for bit; with offload the device holds no optimizer state, and its
#     peak is lower by exactly the optimizer state the run without offload held;
#  2. one process on cpu and on sim: identical with and without offload; an offloaded run
#     resumed from its step-2 checkpoint equals a straight run, the checkpoint files equal
#     those of a run without offload, and a checkpoint resumes across offload on/off;
#  3. a skipped non-finite step with dynamic loss scaling: identical with and without offload.
# usage: offload.sh <anvil> <mpirun> <scratch folder>
. "$(dirname "$0")/common.sh"
STEPS="--training.steps=4 --training.eval_steps=0"

# last_field <run> <field>: the number after "field": on the last train line of metrics.jsonl.
last_field() {
  grep '"type":"train"' "$WORK/$1/metrics.jsonl" | tail -n 1 |
    sed -E "s/.*\"$2\":([0-9]+).*/\1/"
}

for stage in 1 2 3; do
  for offload in false true; do
    run="z$stage-$offload"
    run_logged "$WORK/$run.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY $STEPS \
      --backend sim --parallel.zero_stage=$stage --parallel.offload=$offload \
      --training.grad_accum=2 --run-dir "$WORK/$run"
    deterministic_metrics "$WORK/$run" > "$WORK/$run.metrics"
  done
  expect "$WORK/z$stage-true.metrics" '"loss"' "the offloaded stage-$stage run logged losses"
  same_metrics "z$stage-false" "z$stage-true"
  if grep '"type":"train"' "$WORK/z$stage-true/metrics.jsonl" | grep -qv '"optimizer_state":0[,}]'; then
    fail "stage $stage: the device held optimizer state with offload" "$WORK/z$stage-true/metrics.jsonl"
  fi
  expect "$WORK/z$stage-true.log" "host memory per rank" "stage $stage: the host memory report"
  state=$(last_field "z$stage-false" optimizer_state)
  [ "$state" -gt 0 ] || fail "stage $stage: no optimizer state measured without offload"
  drop=$(($(last_field "z$stage-false" mem_peak_bytes) - $(last_field "z$stage-true" mem_peak_bytes)))
  [ "$drop" -eq "$state" ] ||
    fail "stage $stage: the device peak dropped by $drop bytes, not by the $state of optimizer state"
done

RUN="--checkpoint.every=2 --training.eval_steps=0"
for backend in cpu sim; do
  b="--backend $backend"
  run_logged "$WORK/$backend-off.log" "$ANVIL" train $TINY $RUN $b --training.steps=4 \
    --run-dir "$WORK/$backend-off"
  run_logged "$WORK/$backend-on.log" "$ANVIL" train $TINY $RUN $b --training.steps=4 \
    --parallel.offload=true --run-dir "$WORK/$backend-on"
  # Two steps offloaded, then resumed offloaded, and resumed across offload either way.
  for pair in on-on:true:true on-off:true:false off-on:false:true; do
    name=${pair%%:*}
    first=$(echo "$pair" | cut -d: -f2)
    second=$(echo "$pair" | cut -d: -f3)
    run="$backend-resumed-$name"
    run_logged "$WORK/$run-1.log" "$ANVIL" train $TINY $RUN $b --training.steps=2 \
      --parallel.offload=$first --run-dir "$WORK/$run"
    run_logged "$WORK/$run-2.log" "$ANVIL" train $TINY $RUN $b --training.steps=4 \
      --parallel.offload=$second --run-dir "$WORK/$run"
    expect "$WORK/$run-2.log" "resumed from .*step-0000002" "$run resumed"
    deterministic_metrics "$WORK/$run" > "$WORK/$run.metrics"
  done
  for run in $backend-off $backend-on; do deterministic_metrics "$WORK/$run" > "$WORK/$run.metrics"; done
  same_metrics "$backend-off" "$backend-on"
  for name in on-on on-off off-on; do same_metrics "$backend-off" "$backend-resumed-$name"; done
  for file in "$WORK/$backend-off/checkpoints/step-0000002"/*.safetensors; do
    cmp -s "$file" "$WORK/$backend-on/checkpoints/step-0000002/$(basename "$file")" ||
      fail "$backend: $(basename "$file") differs between runs with and without offload"
  done
done
# A skipped non-finite step (a poisoned batch at step 2) and dynamic loss scaling go through
# the host optimizer as through the device's: the same records with and without offload.
SKIP="--training.steps=4 --training.eval_steps=0 --training.skip_nonfinite=true \
  --training.loss_scale=dynamic --training.loss_scale_growth_interval=1 --backend sim"
for offload in false true; do
  ANVIL_TEST_NAN_AT_STEP=2 run_logged "$WORK/skip-$offload.log" "$ANVIL" train $TINY $SKIP \
    --parallel.offload=$offload --run-dir "$WORK/skip-$offload"
  deterministic_metrics "$WORK/skip-$offload" > "$WORK/skip-$offload.metrics"
done
expect "$WORK/skip-true.metrics" '"skipped_steps":1' "the offloaded run skipped the poisoned step"
same_metrics "skip-false" "skip-true"
echo "offload: ZeRO 1-3 on 2 sim ranks identical with/without offload, device optimizer state 0;" \
  "cpu and sim resume across offloaded checkpoints identical to straight runs;" \
  "a skipped step and loss scaling identical with/without offload"
