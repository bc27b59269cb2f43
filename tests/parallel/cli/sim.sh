# The simulated device trains exactly like the CPU backend it takes its kernels from:
#  1. one process, --backend sim against --backend cpu: identical metrics.jsonl (losses, grad
#     norms, eval) bit for bit;
#  2. two ranks on ZeRO-1, 2 and 3 (collectives through the device communicator, on the device
#     memory, on the communication stream): identical to the same two-rank runs on cpu;
#  3. parallel.overlap = false (every collective completes where it starts) is identical to
#     the overlapped run, on sim and on cpu;
#  3b. two ranks on ZeRO-3 in bf16 (each rank casts its shard into a slot on the device and the
#     group is gathered in bf16): identical on sim and on cpu;
#  4. a device memory smaller than the model is an out-of-memory error naming the sizes (with
#     the pre-flight check off: it would refuse the run first);
#  5. parallel.reduce = fast (the library's own sums) runs on two ranks: on cpu under ZeRO-3
#     twice with the same metrics (repeatable on one mesh), on sim under ZeRO-1 with a bf16
#     reduce and grad_accum 2.
. "$(dirname "$0")/common.sh"
STEPS="--training.steps=4"
for backend in cpu sim; do
  run_logged "$WORK/one-$backend.log" "$ANVIL" train $TINY $STEPS --backend $backend \
    --run-dir "$WORK/one-$backend"
  deterministic_metrics "$WORK/one-$backend" | sed -E 's/,"peak_[a-z_]+":[-0-9.eE+]+//g' \
    > "$WORK/one-$backend.metrics"
  for stage in 1 2 3; do
    run_logged "$WORK/z$stage-$backend.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY \
      $STEPS --backend $backend --parallel.zero_stage=$stage --run-dir "$WORK/z$stage-$backend"
    deterministic_metrics "$WORK/z$stage-$backend" |
      sed -E 's/,"peak_[a-z_]+":[-0-9.eE+]+//g' > "$WORK/z$stage-$backend.metrics"
  done
  run_logged "$WORK/z3-serial-$backend.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY \
    $STEPS --backend $backend --parallel.zero_stage=3 --parallel.overlap=false \
    --run-dir "$WORK/z3-serial-$backend"
  deterministic_metrics "$WORK/z3-serial-$backend" |
    sed -E 's/,"peak_[a-z_]+":[-0-9.eE+]+//g' > "$WORK/z3-serial-$backend.metrics"
  run_logged "$WORK/z3-bf16-$backend.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY \
    $STEPS --backend $backend --parallel.zero_stage=3 --training.dtype=bf16 \
    --run-dir "$WORK/z3-bf16-$backend"
  deterministic_metrics "$WORK/z3-bf16-$backend" |
    sed -E 's/,"peak_[a-z_]+":[-0-9.eE+]+//g' > "$WORK/z3-bf16-$backend.metrics"
done
expect "$WORK/one-sim.metrics" '"loss"' "the sim run logged losses"
same_metrics one-cpu one-sim
for stage in 1 2 3; do same_metrics z$stage-cpu z$stage-sim; done
same_metrics z3-sim z3-serial-sim
same_metrics z3-cpu z3-serial-cpu
expect "$WORK/z3-bf16-sim.metrics" '"loss"' "the bf16 ZeRO-3 sim run logged losses"
same_metrics z3-bf16-cpu z3-bf16-sim
# The allocator's own error, past the pre-flight check (preflight.sh covers that one).
if ANVIL_SIM_MEMORY=64KiB "$ANVIL" train $TINY $STEPS --backend sim --preflight=off \
  --run-dir "$WORK/oom" > "$WORK/oom.log" 2>&1; then
  fail "a 64 KiB device trained the model" "$WORK/oom.log"
fi
expect "$WORK/oom.log" "\[sim\] out of device memory allocating [0-9]* bytes ([0-9]* of 65536 in use)" \
  "out-of-memory message"
for run in 1 2; do
  run_logged "$WORK/fast-$run.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY $STEPS \
    --parallel.zero_stage=3 --parallel.reduce=fast --run-dir "$WORK/fast-$run"
  deterministic_metrics "$WORK/fast-$run" > "$WORK/fast-$run.metrics"
done
expect "$WORK/fast-1.log" "ZeRO stage 3, fast f32 reduce" "the mesh line names the fast reduce"
expect "$WORK/fast-1.metrics" '"loss"' "the fast-reduce run logged losses"
same_metrics fast-1 fast-2
run_logged "$WORK/fast-bf16.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY $STEPS \
  --backend sim --training.grad_accum=2 --parallel.zero_stage=1 --parallel.reduce=fast \
  --parallel.reduce_dtype=bf16 --run-dir "$WORK/fast-bf16"
expect "$WORK/fast-bf16/metrics.jsonl" '"loss"' "the sim bf16-reduce run logged losses"
echo "sim: metrics identical to cpu (1 process; 2 ranks ZeRO-1/2/3, ZeRO-3 bf16; overlap on and off);" \
  "64KiB device: out of memory; fast reduce repeatable on cpu, bf16 reduce on sim"
