#!/usr/bin/env bash
# Gradient reduction modes side by side (docs/distributed.md section 5): the tiny preset on
# the cpu backend, synthetic data, grad_accum 2, on 2 and 4 ranks (mpirun --oversubscribe),
# ZeRO 1 and 3, with parallel.reduce = exact, fast with an f32 reduce and fast with a bf16
# reduce. Prints one row per run: the median step time of the steps after the first two
# (consecutive elapsed_s of metrics.jsonl), rank 0's peak memory (mem_peak_bytes, and its
# communication category), the data-axis bytes per step and the last loss.
# Usage: bench/reduce_modes.sh [anvil binary] [work dir] [steps] [modes] [dtype]
#   modes: default "exact fast:f32 fast:bf16"; "exact" alone passes no reduce flag, so a
#   binary older than parallel.reduce runs too (the before side of a before/after table);
#   dtype: training.dtype, default f32 (bf16 shows the compute-dtype gathers and replicas).
# A few minutes on 2 cores; 4 ranks on 2 cores are oversubscribed, so step times there are
# indications only. Not a test: nothing in CI runs it.
set -euo pipefail

ANVIL=${1:-build/anvil}
WORK=${2:-runs/reduce-modes}
STEPS=${3:-10}
MODES=${4:-exact fast:f32 fast:bf16}
DTYPE=${5:-f32}
rm -rf "$WORK"
mkdir -p "$WORK"
MPIFLAGS="--oversubscribe"
if [ "$(id -u)" = 0 ]; then MPIFLAGS="$MPIFLAGS --allow-run-as-root"; fi

echo "| ranks | ZeRO | reduce | step ms (median) | peak MiB | comm peak MiB | data MB/step | last loss |"
echo "|---|---|---|---|---|---|---|---|"
for ranks in 2 4; do
  for stage in 1 3; do
    for mode in $MODES; do
      reduce=${mode%%:*}
      dtype=f32
      [ "$mode" = "${mode#*:}" ] || dtype=${mode#*:}
      reduce_flags=()
      if [ "$reduce" != exact ]; then
        reduce_flags=(--parallel.reduce="$reduce" --parallel.reduce_dtype="$dtype")
      fi
      run="$WORK/np$ranks-z$stage-$reduce-$dtype"
      OMP_NUM_THREADS=1 mpirun -np "$ranks" $MPIFLAGS "$ANVIL" train --config configs/tiny.toml \
        --threads 1 --data.synthetic=true --training.batch_size=4 --training.grad_accum=2 \
        --training.steps="$STEPS" --training.eval_steps=0 --checkpoint.every=0 \
        --logging.every=1 --logging.json=true --parallel.zero_stage="$stage" \
        --training.dtype="$DTYPE" "${reduce_flags[@]}" --run-dir "$run" > "$run.log" 2>&1
      python3 - "$run" "$ranks" "$stage" "$reduce" "$dtype" <<'PY'
import json, statistics, sys
run, ranks, stage, reduce, dtype = sys.argv[1:]
records = [json.loads(line) for line in open(f"{run}/metrics.jsonl")]
train = [r for r in records if r.get("type") == "train"]
elapsed = [r["elapsed_s"] for r in train]
steps = [b - a for a, b in zip(elapsed, elapsed[1:])][1:]  # after the first two steps
summary = json.loads(open(f"{run}.log").read().strip().splitlines()[-1])
last = train[-1]
label = "exact" if reduce == "exact" else f"fast {dtype}"
print(f"| {ranks} | {stage} | {label} | {1000 * statistics.median(steps):.0f} | "
      f"{last['mem_peak_bytes'] / 2**20:.2f} | {last['mem_peak']['communication'] / 2**20:.2f} | "
      f"{summary['comm_bytes_per_step']['data'] / 1e6:.2f} | {last['loss']:.6f} |")
PY
    done
  done
done
