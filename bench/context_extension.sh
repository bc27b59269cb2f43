#!/usr/bin/env bash
# The worked context-extension example of docs/long-context.md section 3, end to end: train a
# small model at 256 tokens on the fortunes corpus, then continue it at 1024 tokens with a 4x
# larger rope_theta and (the control) with the positions unchanged, and evaluate the models on
# the whole validation split at 256 and 1024 tokens with `anvil eval`.
# Prints one "RESULT <model> seq <T> loss <L>" line per evaluation (and a table at the end).
# Usage: bench/context_extension.sh [anvil binary] [work dir] [threads]
# About 20 minutes on 2 otherwise idle cores. The corpus (data/fortunes) is prepared on first use in the
# current directory, as `anvil train` does for the demo. Not a test: nothing in CI runs it.
set -euo pipefail

ANVIL=${1:-build/anvil}
WORK=${2:-runs/ctx-ext}
THREADS=${3:-2}
mkdir -p "$WORK"

# The model of the memory benchmark (dim 256, 4 layers, 8/4 heads, FFN 704, tied 4096 vocab).
MODEL="--model.n_layers=4 --threads $THREADS --logging.json=true --checkpoint.every=0"

# 1. The base: 200 steps of 4 x 256 tokens (205K tokens, a third of the training split).
"$ANVIL" train --run-dir "$WORK/base" --resume never $MODEL --model.max_seq_len=256 \
  --training.seq_len=256 --training.batch_size=4 --training.steps=200 --training.eval_steps=0
BASE=$(ls -d "$WORK"/base/checkpoints/step-* | tail -1)

# 2. The base outside its context: anvil eval refuses --seq-len beyond max_position_embeddings,
#    so a copy of the weights declares 1024 positions (and, in the second copy, the new
#    rope_theta, to see what the larger theta does before any training at it).
for variant in base-1024:10000 base-1024-theta40k:40000; do
  name=${variant%%:*} theta=${variant##*:}
  rm -rf "$WORK/$name"
  "$ANVIL" convert --from "$BASE" --to "$WORK/$name" --format hf
  python3 - "$WORK/$name/config.json" "$theta" <<'EOF'
import json, sys
path, theta = sys.argv[1], float(sys.argv[2])
config = json.load(open(path))
config["max_position_embeddings"] = 1024
config["rope_theta"] = theta
json.dump(config, open(path, "w"), indent=2)
EOF
done

# 3. Continued pretraining at 1024 tokens from the base checkpoint: 60 steps of 2 x 1024
#    tokens (123K tokens) at a lower peak rate than the base's 2e-3: with a 4x rope_theta, and
#    the control with the positions unchanged.
continue_run() {  # name, extra keys
  local name=$1
  shift
  "$ANVIL" train --run-dir "$WORK/$name" --resume never $MODEL --model.init_from="$BASE" \
    --model.max_seq_len=1024 --training.seq_len=1024 --training.batch_size=2 \
    --training.steps=60 --optimizer.lr=5e-4 --optimizer.min_lr=5e-5 \
    --optimizer.warmup_steps=6 --training.eval_steps=0 "$@"
}
continue_run long-theta40k --model.rope_theta=40000
continue_run long-same-rope

# 4. Validation loss of every model on the whole validation split, at 256 and 1024 tokens.
evaluate() {  # label, model, seq_len
  local loss
  loss=$("$ANVIL" eval --model "$2" --data data/fortunes --split val --seq-len "$3" \
         --batch-size 4 --threads "$THREADS" --json | tail -1 |
         python3 -c 'import json, sys; print(json.load(sys.stdin)["loss"])')
  echo "RESULT $1 seq $3 loss $loss" | tee -a "$WORK/results.txt"
}
rm -f "$WORK/results.txt"
evaluate base "$BASE" 256
evaluate base "$WORK/base-1024" 1024
evaluate base+theta40k "$WORK/base-1024-theta40k" 1024
for run in long-theta40k long-same-rope; do
  evaluate "$run" "$WORK/$run" 256
  evaluate "$run" "$WORK/$run" 1024
done
cat "$WORK/results.txt"
