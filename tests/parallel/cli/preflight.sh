# The pre-flight memory check on the simulated device, ZeRO-3 over 2 ranks, each rank with the
# device capacity (ANVIL_SIM_MEMORY) its own environment gives it:
#  1. rank 1's device below the plan's peak (rank 0's above it): the run is refused before
#     anything is allocated, rank 1 naming the planned peak, its free device memory and a
#     setting that fits, rank 0 naming rank 1; no metrics are written;
#  2. both devices below the peak: each rank refuses the same way;
#  3. the micro-batch the refusal offers trains on both ranks with those small devices, and
#     its first and last metrics records carry the planned peak beside the measured one;
#  4. anvil launch refuses the job before it starts any rank, for each of its ranks.
. "$(dirname "$0")/common.sh"
# The tiny preset (not common.sh's smaller model): the kernel scratch the plan leaves out
# (0.27 MiB, docs/plan.md) must stay inside the 5% margin of the device.
JOB="--threads 1 --data.synthetic=true --logging.every=1 --training.seq_len=64 \
--training.eval_steps=0 --parallel.zero_stage=3 --training.steps=2 --training.batch_size=64"
"$ANVIL" plan --nproc 2 --json $JOB > "$WORK/plan.json" 2>&1 || fail "anvil plan" "$WORK/plan.json"
NEED=$(sed -n 's/.*"peak_bytes_total":\([0-9]*\).*/\1/p' "$WORK/plan.json")
[ -n "$NEED" ] || fail "no peak_bytes_total in the plan" "$WORK/plan.json"
SMALL=$((NEED / 2))
LARGE=$((NEED * 4))

if "$MPIRUN" $MPIFLAGS -np 1 -x ANVIL_SIM_MEMORY=$LARGE "$ANVIL" train $JOB --backend sim \
  --run-dir "$WORK/one-small" : -np 1 -x ANVIL_SIM_MEMORY=$SMALL "$ANVIL" train $JOB \
  --backend sim --run-dir "$WORK/one-small" > "$WORK/one-small.log" 2>&1; then
  fail "a rank with half the planned memory started training" "$WORK/one-small.log"
fi
expect "$WORK/one-small.log" "\[preflight\] rank 1: the run needs .* per device at its peak (.* the largest), .* free on the sim device, .* usable with the 5% margin (preflight.margin): it fits with --training.batch_size=" \
  "rank 1 names the numbers and a setting that fits"
if grep -q "rank 0: the run needs" "$WORK/one-small.log"; then
  fail "rank 0, whose device is large enough, was refused" "$WORK/one-small.log"
fi
[ ! -e "$WORK/one-small/metrics.jsonl" ] || fail "a refused run wrote metrics" "$WORK/one-small.log"

if ANVIL_SIM_MEMORY=$SMALL "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $JOB --backend sim \
  --run-dir "$WORK/both-small" > "$WORK/both-small.log" 2>&1; then
  fail "ranks with half the planned memory started training" "$WORK/both-small.log"
fi
expect "$WORK/both-small.log" "\[preflight\] rank [01]: the run needs .* free on the sim device" \
  "a rank refuses on its own device"
BATCH=$(sed -n 's/.*fits with --training.batch_size=\([0-9]*\) .*/\1/p' "$WORK/one-small.log" |
  head -n 1)
[ -n "$BATCH" ] && [ "$BATCH" -lt 64 ] || fail "no smaller micro-batch offered" "$WORK/one-small.log"

(
  export ANVIL_SIM_MEMORY=$SMALL
  run_logged "$WORK/fitted.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $JOB --backend sim \
    --training.batch_size=$BATCH --run-dir "$WORK/fitted"
)
FIRST=$(grep '"type":"train"' "$WORK/fitted/metrics.jsonl" | head -n 1)
LAST=$(grep '"type":"train"' "$WORK/fitted/metrics.jsonl" | tail -n 1)
for record in "$FIRST" "$LAST"; do
  echo "$record" | grep -q '"mem_peak_bytes":[0-9]*,"mem_planned_bytes":[0-9]*' ||
    fail "a train record without the planned peak beside the measured one: $record"
done

if ANVIL_SIM_MEMORY=$SMALL "$ANVIL" launch --nproc 2 --mpirun "$MPIRUN" -- train $JOB \
  --backend sim --run-dir "$WORK/launched" > "$WORK/launched.log" 2>&1; then
  fail "anvil launch started ranks without the memory" "$WORK/launched.log"
fi
expect "$WORK/launched.log" "\[preflight\] each of the 2 ranks: the run needs .* free on the sim device" \
  "launch refuses before it starts the ranks"
if grep -q "rank 0\|rank 1\|started" "$WORK/launched.log"; then
  fail "anvil launch started ranks" "$WORK/launched.log"
fi
echo "preflight: rank 1 of 2 refused on a sim device of $SMALL bytes (plan $NEED), both ranks" \
  "refused, micro-batch $BATCH fitted and trained, launch refused before starting ranks"
