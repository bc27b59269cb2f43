#!/bin/sh
# `anvil finetune` on several ranks with the frozen base sharded (ZeRO-3), from chat JSONL:
#   1. --dry-run under mpirun builds everything, prints the sharding report and writes
#      sharding.json, and trains nothing;
#   2. mpirun -np 2 trains LoRA on ZeRO-3 (bf16 base) and writes the PEFT adapter; anvil
#      generate loads it onto the base, and anvil export --merge writes the merged model;
#   3. anvil launch --nproc 2 runs a full fine-tune on ZeRO-3 and writes the Hugging Face model;
#   4. bad LoRA settings (an unknown target, r larger than a wrapped matrix, an adapter whose
#      shapes do not fit the base) stop with one error line and leave no run directory.
# usage: finetune.sh <anvil> <mpirun> <scratch folder>
. "$(dirname "$0")/common.sh"

# A byte-level tokenizer and a random base of its vocabulary, as a Hugging Face folder.
printf 'User: Next: abc\nAssistant: bcd\n' > "$WORK/corpus.txt"
run_logged "$WORK/tokenizer.log" "$ANVIL" tokenizer train --input "$WORK/corpus.txt" \
  --vocab-size 257 --out "$WORK/tokenizer.json"
# make_base <folder> <dim>: one step of a random model, exported with the tokenizer.
make_base() {
  run_logged "$WORK/$1-init.log" "$ANVIL" train --run-dir "$WORK/$1-init" --threads 1 \
    --data.synthetic=true --model.dim="$2" --model.n_layers=2 --model.n_heads=4 \
    --model.n_kv_heads=2 --model.ffn_dim=64 --model.vocab_size=257 --model.max_seq_len=64 \
    --training.steps=1 --training.seq_len=16 --training.batch_size=1 --training.eval_steps=0
  run_logged "$WORK/$1-export.log" "$ANVIL" export --run "$WORK/$1-init" --out "$WORK/$1"
  cp "$WORK/tokenizer.json" "$WORK/$1/tokenizer.json"
}
make_base base 32
: > "$WORK/chat.jsonl"
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
  echo "{\"messages\": [{\"role\": \"user\", \"content\": \"Next: a$i\"}, {\"role\": \"assistant\", \"content\": \"b$i\"}]}" >> "$WORK/chat.jsonl"
done
FT="--model $WORK/base --data $WORK/chat.jsonl --threads 1 --chat-template plain \
--training.steps=4 --training.batch_size=2 --training.seq_len=32 --parallel.zero_stage=3"

run_logged "$WORK/dry.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" finetune $FT --run-dir "$WORK/dry" \
  --dry-run
expect "$WORK/dry.log" "frozen *w:fsdp" "the dry run prints the base split over fsdp"
expect "$WORK/dry.log" "dry run: nothing trained" "the dry run says it trained nothing"
# r 8 on q/k/v/o of 2 layers of dim 32 (q_dim 32, kv_dim 16): 2 x 8 x (64 + 48 + 48 + 64).
expect "$WORK/dry.log" "trainable parameters: 3584 of " "the dry run counts the adapters"
[ -f "$WORK/dry/sharding.json" ] || fail "the dry run wrote no sharding.json" "$WORK/dry.log"
[ ! -e "$WORK/dry/metrics.jsonl" ] && [ ! -e "$WORK/dry/adapter" ] ||
  fail "the dry run trained" "$WORK/dry.log"

run_logged "$WORK/lora.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" finetune $FT \
  --training.dtype=bf16 --run-dir "$WORK/lora"
expect "$WORK/lora.log" "bf16 frozen *w:fsdp" "the run holds a bf16 base split over fsdp"
[ -f "$WORK/lora/adapter/adapter_model.safetensors" ] || fail "no adapter" "$WORK/lora.log"
run_logged "$WORK/generate.log" "$ANVIL" generate --model "$WORK/base" \
  --adapter "$WORK/lora/adapter" --prompt "User: Next: a1" --max-new-tokens 4 --greedy --threads 1
run_logged "$WORK/merge.log" "$ANVIL" export --run "$WORK/lora" --merge --out "$WORK/merged"
[ -f "$WORK/merged/model.safetensors" ] || fail "no merged model" "$WORK/merge.log"

run_logged "$WORK/full.log" "$ANVIL" launch --nproc 2 -- finetune $FT --full \
  --run-dir "$WORK/full"
[ -f "$WORK/full/hf/model.safetensors" ] || fail "no full fine-tuned model" "$WORK/full.log"
# Bad settings: one error line naming the problem, a non-zero exit, no run directory left.
# bad_setting <name> <expected error> <flags...>
bad_setting() {
  name=$1 message=$2
  shift 2
  if "$ANVIL" finetune --model "$WORK/base" --data "$WORK/chat.jsonl" --threads 1 \
    --run-dir "$WORK/$name" "$@" > "$WORK/$name.log" 2>&1; then
    fail "$name: finetune accepted $*" "$WORK/$name.log"
  fi
  expect "$WORK/$name.log" "$message" "$name: the error names the problem"
  [ "$(grep -c "error" "$WORK/$name.log")" -eq 1 ] || fail "$name: not one error line" "$WORK/$name.log"
  [ ! -e "$WORK/$name" ] || fail "$name: left $WORK/$name behind" "$WORK/$name.log"
}
bad_setting bad_target "unknown target 'qkv' (valid: q_proj, k_proj, v_proj, o_proj, gate_proj, \
up_proj, down_proj)" --lora.targets=q_proj,qkv
bad_setting bad_rank "lora.r = 20 exceeds the rank of k_proj (16 x 32 in this model)" --lora.r=20
# The adapter trained above (dim 32) continued on a base of dim 48.
make_base wide 48
if "$ANVIL" finetune --model "$WORK/wide" --data "$WORK/chat.jsonl" --threads 1 \
  --adapter "$WORK/lora/adapter" --run-dir "$WORK/bad_adapter" > "$WORK/bad_adapter.log" 2>&1; then
  fail "an adapter of another base was accepted" "$WORK/bad_adapter.log"
fi
expect "$WORK/bad_adapter.log" "q_proj.lora_A.weight' has shape \[8, 32\], expected \[8, 48\]" \
  "the error names the tensor and both shapes"
[ ! -e "$WORK/bad_adapter" ] || fail "the bad adapter left a run directory" "$WORK/bad_adapter.log"
echo "PASS: anvil finetune on ZeRO-3 over 2 ranks (dry run, LoRA with a bf16 base, full)"
