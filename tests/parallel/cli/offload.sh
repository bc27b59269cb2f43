#!/bin/sh
# Optimizer offload (parallel.offload): AdamW state and f32 masters in host memory.
#  1. two ranks on the simulated device, ZeRO stages 1, 2 and 3 (stage 3 also in bf16), two
#     micro-batches: metrics identical with and without offload bit for bit; with offload the
#     device holds no optimizer state, and its peak is lower by exactly the optimizer state the
#     run without offload held and the gradient norm's 168 bytes of device counters (with
#     offload the norm reads the host's gradient copies); under stage 3 it holds no gradient shard either (each goes to
#     the host through a staging slot) and, in bf16, its weight shard in bf16: the peak is lower
#     by exactly the optimizer state, the gradient shards and the weight bytes saved, less the
#     staging slots;
#  2. one process on cpu and on sim: identical with and without offload; an offloaded run
#     resumed from its step-2 checkpoint equals a straight run, the checkpoint files equal
#     those of a run without offload, and a checkpoint resumes across offload on/off;
#  3. a skipped non-finite step with dynamic loss scaling: identical with and without offload.
# usage: offload.sh <anvil> <mpirun> <scratch folder>
. "$(dirname "$0")/common.sh"
STEPS="--training.steps=4 --training.eval_steps=0"
NORM_COUNTERS=168  # kNormCounterBytes (parallel/rank_buffers.h): workspace only without offload

# last_field <run> <field>: the number after "field": on the last train line of metrics.jsonl.
last_field() {
  grep '"type":"train"' "$WORK/$1/metrics.jsonl" | tail -n 1 |
    sed -E "s/.*\"$2\":([0-9]+).*/\1/"
}

for variant in 1:f32 2:f32 3:f32 3:bf16; do
  stage=${variant%%:*}
  dtype=${variant#*:}
  for offload in false true; do
    run="z$stage-$dtype-$offload"
    run_logged "$WORK/$run.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY $STEPS \
      --backend sim --parallel.zero_stage=$stage --parallel.offload=$offload \
      --training.dtype=$dtype --training.grad_accum=2 --run-dir "$WORK/$run"
    deterministic_metrics "$WORK/$run" > "$WORK/$run.metrics"
  done
  off="z$stage-$dtype-false"
  on="z$stage-$dtype-true"
  expect "$WORK/$on.metrics" '"loss"' "the offloaded stage-$stage $dtype run logged losses"
  same_metrics "$off" "$on"
  if grep '"type":"train"' "$WORK/$on/metrics.jsonl" | grep -qv '"optimizer_state":0[,}]'; then
    fail "stage $stage: the device held optimizer state with offload" "$WORK/$on/metrics.jsonl"
  fi
  expect "$WORK/$on.log" "host memory per rank" "stage $stage: the host memory report"
  state=$(last_field "$off" optimizer_state)
  [ "$state" -gt 0 ] || fail "stage $stage: no optimizer state measured without offload"
  saved=$((state + NORM_COUNTERS))
  if [ "$stage" -eq 3 ]; then
    [ "$(last_field "$on" gradients)" -eq 0 ] ||
      fail "stage 3 $dtype: the device held gradient shards with offload" "$WORK/$on/metrics.jsonl"
    weights_off=$(last_field "$off" trainable_weights)
    weights_on=$(last_field "$on" trainable_weights)
    if [ "$dtype" = bf16 ]; then
      # the layers' shards in bf16 (the planner's exact figure is checked in test_parallel_mpi)
      [ "$weights_on" -lt "$weights_off" ] ||
        fail "stage 3 bf16: the offloaded weight shard holds $weights_on bytes against $weights_off in f32"
    else
      [ "$weights_on" -eq "$weights_off" ] || fail "stage 3 f32: the weight shard changed size"
    fi
    staging=$(($(last_field "$on" communication) - $(last_field "$off" communication)))
    [ "$staging" -gt 0 ] || fail "stage 3 $dtype: no gradient staging slots measured"
    saved=$((state + NORM_COUNTERS + $(last_field "$off" gradients) + weights_off - weights_on -
      staging))
  fi
  drop=$(($(last_field "$off" mem_peak_bytes) - $(last_field "$on" mem_peak_bytes)))
  [ "$drop" -eq "$saved" ] ||
    fail "stage $stage $dtype: the device peak dropped by $drop bytes, not by the $saved the categories predict"
done

# Parameter offload (stage 3 bf16): the bf16 shard moves to the host too, so the device holds
# no weights at all between gathers and its peak drops by exactly that shard; same metrics.
run="z3-bf16-params"
run_logged "$WORK/$run.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY $STEPS \
  --backend sim --parallel.zero_stage=3 --parallel.offload=true --parallel.offload_params=true \
  --training.dtype=bf16 --training.grad_accum=2 --run-dir "$WORK/$run"
deterministic_metrics "$WORK/$run" > "$WORK/$run.metrics"
same_metrics z3-bf16-true "$run"
expect "$WORK/$run.log" "optimizer and parameter offload" "the mesh line names parameter offload"
[ "$(last_field "$run" trainable_weights)" -eq 0 ] ||
  fail "parameter offload: the device still holds weight shards" "$WORK/$run/metrics.jsonl"
drop=$(($(last_field z3-bf16-true mem_peak_bytes) - $(last_field "$run" mem_peak_bytes)))
[ "$drop" -eq "$(last_field z3-bf16-true trainable_weights)" ] ||
  fail "parameter offload: the device peak dropped by $drop bytes, not by the bf16 shard"

# In bf16, stage 3 keeps its masters only on the host, and stage 1 keeps them sharded beside a
# bf16 replica: a run resumed from its step-2 checkpoint with offload (stage 3: its second half
# with parameter offload too) equals a straight run without, and so do the checkpoint files.
for stage in 1 3; do
  Z="--backend sim --parallel.zero_stage=$stage --training.dtype=bf16 --checkpoint.every=2 \
    --training.eval_steps=0"
  straight="z$stage-bf16-straight"
  resumed="z$stage-bf16-resumed"
  run_logged "$WORK/$straight.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY $Z \
    --training.steps=4 --run-dir "$WORK/$straight"
  run_logged "$WORK/$resumed-1.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY $Z \
    --training.steps=2 --parallel.offload=true --run-dir "$WORK/$resumed"
  params=""
  if [ "$stage" -eq 3 ]; then params="--parallel.offload_params=true"; fi
  run_logged "$WORK/$resumed-2.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY $Z \
    --training.steps=4 --parallel.offload=true $params --run-dir "$WORK/$resumed"
  expect "$WORK/$resumed-2.log" "resumed from .*step-0000002" "the offloaded stage-$stage run resumed"
  for run in $straight $resumed; do deterministic_metrics "$WORK/$run" > "$WORK/$run.metrics"; done
  same_metrics $straight $resumed
  for file in "$WORK/$straight/checkpoints/step-0000004"/*.safetensors; do
    cmp -s "$file" "$WORK/$resumed/checkpoints/step-0000004/$(basename "$file")" ||
      fail "stage $stage: $(basename "$file") differs between the straight and the resumed run"
  done
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
echo "offload: ZeRO 1-3 (3 also bf16) on 2 sim ranks identical with/without offload, device" \
  "optimizer state 0, stage 3 gradient shards 0;" \
  "cpu and sim resume across offloaded checkpoints identical to straight runs;" \
  "a skipped step and loss scaling identical with/without offload"
