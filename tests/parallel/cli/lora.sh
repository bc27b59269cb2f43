#!/bin/sh
# LoRA on a ZeRO-sharded base. A tiny base model is trained and exported as a Hugging Face
# folder; LoRA adapters then train on it with one global batch of 8 sequences per step:
#   - one process (the reference), and ZeRO-3 on fsdp 2, fsdp 4 and dp 2 x fsdp 2, ZeRO-1 and
#     ZeRO-2 on 2 ranks: every metrics line is byte for byte the reference's (the engine's
#     ordered reduction makes the sum exact at any world size), and the adapter the 4-rank run
#     exports equals the one-process adapter byte for byte;
#   - a 4-rank ZeRO-3 run stopped at step 4, continued on 2 ranks (ZeRO-2) to step 8 and on one
#     process to step 12: the same metrics as 12 straight steps;
#   - the bf16 base: 4 ranks (ZeRO-3) equal one process, and the memory reports say each rank
#     holds 1/fsdp of the frozen base (up to the padding of each group to a multiple of
#     16 x world elements), and that a bf16 base holds half the bytes of an f32 one.
# usage: lora.sh <anvil> <mpirun> <scratch folder>
. "$(dirname "$0")/common.sh"

run_logged "$WORK/base.log" "$ANVIL" train $TINY --training.steps=3 --training.eval_steps=0 \
  --run-dir "$WORK/base"
run_logged "$WORK/export.log" "$ANVIL" export --run "$WORK/base" --out "$WORK/hf"
LORA="--lora.r=4 --lora.alpha=8 --lora.dropout=0.1 --lora.targets=q_proj,v_proj,down_proj \
--model.init_from=$WORK/hf --training.eval_steps=0 --checkpoint.every=4"

# lora_run <name> <ranks> <grad_accum> <steps> [flags...]: trains into $WORK/<name>.
lora_run() {
  name=$1 ranks=$2 accum=$3 steps=$4
  shift 4
  if [ "$ranks" = 1 ]; then
    run_logged "$WORK/$name.log" "$ANVIL" train $TINY $LORA --training.grad_accum="$accum" \
      --training.steps="$steps" --run-dir "$WORK/$name" "$@"
  else
    run_logged "$WORK/$name.log" "$MPIRUN" -np "$ranks" $MPIFLAGS "$ANVIL" train $TINY $LORA \
      --training.grad_accum="$accum" --training.steps="$steps" --run-dir "$WORK/$name" "$@"
  fi
  deterministic_metrics "$WORK/$name" > "$WORK/$name.metrics"
}

lora_run one 1 4 12
test "$(wc -l < "$WORK/one.metrics")" -eq 12 || fail "the reference run wrote no 12 metrics lines"
lora_run fsdp2 2 2 12 --parallel.zero_stage=3
same_metrics one fsdp2
lora_run fsdp4 4 1 12 --parallel.zero_stage=3
same_metrics one fsdp4
expect "$WORK/fsdp4.log" "frozen *w:fsdp" "the 4-rank report shows the base split over fsdp"
lora_run dp2fsdp2 4 1 12 --parallel.zero_stage=3 --parallel.dp=2 --parallel.fsdp=2
same_metrics one dp2fsdp2
lora_run stage1 2 2 12 --parallel.zero_stage=1
same_metrics one stage1
lora_run stage2 2 2 12 --parallel.zero_stage=2
same_metrics one stage2
for file in adapter_model.safetensors adapter_config.json; do
  cmp "$WORK/one/checkpoints/step-0000012/$file" "$WORK/fsdp4/checkpoints/step-0000012/$file" \
    || fail "the 4-rank ZeRO-3 run's $file differs from the one-process run's"
done

# 4 ranks (ZeRO-3) -> 2 ranks (ZeRO-2) -> 1 process, one global batch of 8 throughout.
lora_run moved 4 1 4 --parallel.zero_stage=3
lora_run moved 2 2 8 --parallel.zero_stage=2
expect "$WORK/moved.log" "resumed from .*step-0000004" "2 ranks resume the 4-rank checkpoint"
lora_run moved 1 4 12
expect "$WORK/moved.log" "resumed from .*step-0000008" "one process resumes the 2-rank checkpoint"
same_metrics one moved

# The bf16 base: sharded runs still equal one process.
BF16="--training.dtype=bf16"
lora_run one_bf16 1 4 4 $BF16
lora_run fsdp4_bf16 4 1 4 $BF16 --parallel.zero_stage=3
same_metrics one_bf16 fsdp4_bf16
expect "$WORK/fsdp4_bf16.log" "frozen *w:fsdp" "the bf16 report shows the base split over fsdp"

# frozen_bytes <run>: rank 0's frozen bytes in the run's sharding.json (its current bytes come
# before its "peak" object, which repeats the key).
frozen_bytes() {
  sed -n 's/^ *"frozen_weights": \([0-9]*\),*$/\1/p' "$WORK/$1/sharding.json" | head -n 1
}
full=$(frozen_bytes one)
part=$(frozen_bytes fsdp4)
part_bf16=$(frozen_bytes fsdp4_bf16)
[ -n "$full" ] && [ -n "$part" ] && [ -n "$part_bf16" ] || fail "no frozen bytes in sharding.json"
# Padding: each of the 4 groups (embedding, 2 layers, head) grows by < 16 x 4 elements.
padding=$((4 * 16 * 4 * 4))
[ "$part" -ge $((full / 4)) ] && [ "$part" -le $((full / 4 + padding)) ] ||
  fail "rank 0 holds $part frozen bytes under fsdp 4; the base is $full"
# The bf16 store keeps f32 copies of the norm weights ((2 x 2 layers + 1) x 32 floats).
norms=$(((2 * 2 + 1) * 32 * 4))
[ "$((part_bf16 - norms))" -eq $((part / 2)) ] ||
  fail "a bf16 base shard holds $part_bf16 bytes, an f32 one $part (expected half, + $norms)"
echo "PASS: LoRA on ZeRO 1-3 over 2 and 4 ranks equals one process (metrics and adapter), a"
echo "4 -> 2 -> 1 rank resume continues the curve; frozen bytes per rank: $full (1 process),"
echo "$part (fsdp 4, f32), $part_bf16 (fsdp 4, bf16)"
