# The simulated device trains exactly like the CPU backend it takes its kernels from:
#  1. one process, --backend sim against --backend cpu: identical metrics.jsonl (losses, grad
#     norms, eval) bit for bit;
#  2. two ranks on ZeRO-3 (collectives staged through the backend's copies): identical to the
#     same two-rank run on cpu;
#  3. a device memory smaller than the model is an out-of-memory error naming the sizes.
. "$(dirname "$0")/common.sh"
STEPS="--training.steps=4"
for backend in cpu sim; do
  run_logged "$WORK/one-$backend.log" "$ANVIL" train $TINY $STEPS --backend $backend \
    --run-dir "$WORK/one-$backend"
  deterministic_metrics "$WORK/one-$backend" | sed -E 's/,"peak_[a-z_]+":[-0-9.eE+]+//g' \
    > "$WORK/one-$backend.metrics"
  run_logged "$WORK/z3-$backend.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY $STEPS \
    --backend $backend --parallel.zero_stage=3 --run-dir "$WORK/z3-$backend"
  deterministic_metrics "$WORK/z3-$backend" | sed -E 's/,"peak_[a-z_]+":[-0-9.eE+]+//g' \
    > "$WORK/z3-$backend.metrics"
done
expect "$WORK/one-sim.metrics" '"loss"' "the sim run logged losses"
same_metrics one-cpu one-sim
same_metrics z3-cpu z3-sim
if ANVIL_SIM_MEMORY=64KiB "$ANVIL" train $TINY $STEPS --backend sim --run-dir "$WORK/oom" \
  > "$WORK/oom.log" 2>&1; then
  fail "a 64 KiB device trained the model" "$WORK/oom.log"
fi
expect "$WORK/oom.log" "\[sim\] out of device memory allocating [0-9]* bytes ([0-9]* of 65536 in use)" \
  "out-of-memory message"
echo "sim: metrics identical to cpu (1 process and 2 ranks ZeRO-3); 64KiB device: out of memory"
