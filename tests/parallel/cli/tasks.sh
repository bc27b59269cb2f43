# Benchmarks during a two-rank run: every rank reads the [eval] tasks, and a warning about
# them (MMLU subjects outside the 57) is printed once for the job, by rank 0.
. "$(dirname "$0")/common.sh"
TEXT="$(dirname "$0")/../../eval/golden/eval_text.txt"
MMLU="$WORK/mmlu"
mkdir -p "$MMLU/dev" "$MMLU/test"
for split in dev test; do
  printf '%s\n' '"Which is a prime?","4","6","7","9",C' '"Which is even?","3","8","5","7",B' \
    > "$MMLU/$split/tax_law_of_2024_$split.csv"
done
run_logged "$WORK/tok.log" "$ANVIL" tokenizer train --input "$TEXT" --vocab-size 300 \
  --out "$WORK/tok.json"
run_logged "$WORK/prepare.log" "$ANVIL" prepare --threads 1 --input "$TEXT" \
  --tokenizer "$WORK/tok.json" --out "$WORK/data" --split 1,0,0
run_logged "$WORK/train.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train --threads 1 \
  --data.path="$WORK/data" --data.tokenizer="$WORK/tok.json" --model.dim=32 --model.n_layers=2 \
  --model.n_heads=4 --model.n_kv_heads=2 --model.ffn_dim=64 --model.vocab_size=320 \
  --model.max_seq_len=96 --training.batch_size=2 --training.seq_len=16 --training.steps=1 \
  --training.eval_every=0 --training.eval_steps=0 --optimizer.warmup_steps=0 \
  '--eval.tasks=["mmlu"]' "--eval.task_data=[\"$MMLU\"]" --eval.task_shots=1 \
  --run-dir "$WORK/run"
expect "$WORK/run/metrics.jsonl" '"mmlu_acc"' "the run scored MMLU"
WARNINGS=$(grep -c "subjects not among MMLU's 57" "$WORK/train.log" || true)
[ "$WARNINGS" = 1 ] || fail "the MMLU subject warning was printed $WARNINGS times" "$WORK/train.log"
echo "tasks: two ranks, one warning about a subject outside MMLU's 57"
