#!/bin/sh
# Context parallelism through `anvil train`: one process trains 6 steps; the same run at cp 2
# (2 ranks, each holding two of the four chunks of every sequence, attention as a ring) must
# match its losses within 1e-5 relative (the ring merges softmax sums in another order, so not
# bit for bit), with document masks on, and report the ring's bytes per step. A seq_len that
# does not split into 2 x cp chunks is one clear error before anything is written.
# usage: cp.sh <anvil> <mpirun> <scratch folder>
. "$(dirname "$0")/common.sh"
RUN="--training.eval_steps=0 --checkpoint.every=0 --training.doc_mask=true --logging.json=true"

run_logged "$WORK/one.log" "$ANVIL" train $TINY $RUN --training.steps=6 --run-dir "$WORK/one"
run_logged "$WORK/cp2.log" "$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $TINY $RUN \
  --parallel.cp=2 --training.steps=6 --run-dir "$WORK/cp2"
expect "$WORK/cp2.log" "dp 1 x fsdp 1 x tp 1 x cp 2" "the cp 2 run describes its mesh"
expect "$WORK/cp2.log" '"cp":[1-9][0-9]*' "the summary reports the ring's bytes per step"
cp_bytes=$(tail -n 1 "$WORK/cp2.log" | sed -n 's/.*"cp":\([0-9]*\).*/\1/p')

losses() { sed -n 's/.*"step":\([0-9]*\),.*"loss":\([-0-9.eE+]*\).*/\1 \2/p' "$1/metrics.jsonl"; }
losses "$WORK/one" > "$WORK/one.losses"
losses "$WORK/cp2" > "$WORK/cp2.losses"
test "$(wc -l < "$WORK/cp2.losses")" -eq 6 ||
  fail "the cp 2 run logged $(wc -l < "$WORK/cp2.losses") of 6 steps" "$WORK/cp2/metrics.jsonl"
worst=$(join "$WORK/one.losses" "$WORK/cp2.losses" |
  awk '{ d = ($2 - $3) / $2; if (d < 0) d = -d; if (d > w) w = d } END { printf "%.3g", w }')
awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }' ||
  fail "cp 2 losses differ from one process by $worst (relative), more than 1e-5"

# 12 positions do not split into 8 chunks: one line, a non-zero exit, no run folder.
if "$MPIRUN" -np 4 $MPIFLAGS "$ANVIL" train $TINY --parallel.cp=4 --training.seq_len=12 \
  --training.steps=1 --run-dir "$WORK/bad" > "$WORK/bad.log" 2>&1; then
  fail "seq_len 12 at cp 4 was accepted" "$WORK/bad.log"
fi
test ! -e "$WORK/bad" || fail "the refused run left a run folder behind"
expect "$WORK/bad.log" "seq_len 12 is not divisible by 2 x cp = 8" "the error names seq_len and cp"
echo "PASS: cp 2 matches one process (max relative loss difference $worst;" \
  "ring bytes per step $cp_bytes)"
