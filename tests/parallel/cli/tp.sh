#!/bin/sh
# Tensor parallelism through `anvil train`: one process trains 8 steps straight; the same run
# at tp 2 (2 ranks) trains steps 1-4 and tp 4 (4 ranks, ZeRO-1) continues to step 8 from its
# checkpoint. The losses must match the straight run within 1e-5 relative (tensor parallelism
# reorders sums inside the split matmuls, so not bit for bit), the sharding report must show
# each tensor's tp cut, and a tp that does not divide the heads is one clear error.
# usage: tp.sh <anvil> <mpirun> <scratch folder>
. "$(dirname "$0")/common.sh"
# 8 heads and 4 kv heads so that tp 2 and tp 4 divide them.
HEADS="--model.n_heads=8 --model.n_kv_heads=4"
RUN="$HEADS --training.eval_steps=0 --checkpoint.every=4 --training.grad_accum=2"

run_logged "$WORK/straight.log" "$ANVIL" train $TINY $RUN --training.steps=8 \
  --run-dir "$WORK/straight"
run_logged "$WORK/tp2.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY $RUN \
  --parallel.tp=2 --training.steps=4 --run-dir "$WORK/moved"
expect "$WORK/tp2.log" "dp 1 x fsdp 1 x tp 2" "the tp 2 run describes its mesh"
expect "$WORK/tp2.log" "layers.\*.self_attn.q_proj .* rows$" "the report shows q_proj cut by rows"
expect "$WORK/tp2.log" "layers.\*.self_attn.o_proj .* cols$" "the report shows o_proj cut by columns"
expect "$WORK/tp2.log" "layers.\*.input_layernorm .* -$" "the report shows norms replicated"
expect "$WORK/moved/sharding.json" '"split_over_tp": 0' "sharding.json records the tp split"
run_logged "$WORK/tp4.log" "$MPIRUN" -np 4 $MPIFLAGS "$ANVIL" train $TINY $RUN \
  --parallel.tp=4 --parallel.zero_stage=1 --training.steps=8 --run-dir "$WORK/moved"
expect "$WORK/tp4.log" "resumed from .*step-0000004" "tp 4 resumes the tp 2 checkpoint"
expect "$WORK/moved/checkpoints/step-0000004/manifest.json" "optimizer-tp00001-of-00002" \
  "each tp rank writes its optimizer shard"

# Loss of each step: the straight run's and the moved run's, side by side.
losses() { sed -n 's/.*"step":\([0-9]*\),.*"loss":\([-0-9.eE+]*\).*/\1 \2/p' "$1/metrics.jsonl"; }
losses "$WORK/straight" > "$WORK/straight.losses"
losses "$WORK/moved" > "$WORK/moved.losses"
test "$(wc -l < "$WORK/moved.losses")" -eq 8 || fail "the moved run logged $(wc -l < "$WORK/moved.losses") of 8 steps" "$WORK/moved/metrics.jsonl"
worst=$(join "$WORK/straight.losses" "$WORK/moved.losses" |
  awk '{ d = ($2 - $3) / $2; if (d < 0) d = -d; if (d > w) w = d } END { printf "%.3g", w }')
awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }' ||
  fail "tp 2 -> tp 4 losses differ from one process by $worst (relative), more than 1e-5"

# tp 3 cannot split 8 heads: one line naming the sizes, a non-zero exit, no run folder.
if "$MPIRUN" -np 3 $MPIFLAGS "$ANVIL" train $TINY $HEADS --parallel.tp=3 --training.steps=1 \
  --run-dir "$WORK/bad" > "$WORK/bad.log" 2>&1; then
  fail "tp 3 with 8 heads was accepted" "$WORK/bad.log"
fi
test ! -e "$WORK/bad" || fail "the refused run left a run folder behind"
expect "$WORK/bad.log" "tp 3 does not divide the attention heads (n_heads) (8)" \
  "the error names tp and the head count"
echo "PASS: tp 2 -> tp 4 resume matches one process (max relative loss difference $worst)"
