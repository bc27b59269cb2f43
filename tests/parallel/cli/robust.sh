#!/bin/sh
# Failure handling across ranks, with real OS write failures (RLIMIT_FSIZE below the
# checkpoint files' size, SIGXFSZ ignored, so write(2) fails with EFBIG):
#  1. only rank 1 cannot write (its optimizer shard): every rank agrees the save failed, the
#     job exits 1 naming rank 1's file, nothing is committed or left staged, and the step-2
#     checkpoint still resumes;
#  2. no rank can write, with checkpoint.on_error=continue: the ranks agree at every save,
#     warn, keep training in step and finish;
#  3. a diverging job under `anvil launch --max-restarts 2` exits 4 and is not restarted.
# usage: robust.sh <anvil> <mpirun> <scratch folder>
. "$(dirname "$0")/common.sh"
# About 0.5M parameters: every checkpoint file (model, each ZeRO-1 optimizer shard) > 1 MB.
BIG="--threads 1 --data.synthetic=true --model.dim=64 --model.n_layers=2 --model.n_heads=4 \
--model.n_kv_heads=2 --model.ffn_dim=128 --model.vocab_size=6000 --model.max_seq_len=16 \
--training.seq_len=16 --training.batch_size=1 --training.eval_steps=0 \
--optimizer.schedule=constant --optimizer.warmup_steps=0 --checkpoint.every=2 \
--logging.every=1 --parallel.zero_stage=1"
# Runs a rank's anvil with files limited to 512 KiB (1024 blocks of 512 bytes) when the rank
# is named in LIMITED_RANKS ("all" for every rank).
LIMITED="trap '' XFSZ; case \" \$LIMITED_RANKS \" in *\" \$OMPI_COMM_WORLD_RANK \"*|*' all '*) \
ulimit -f 1024;; esac; exec \"\$0\" \"\$@\""
# Open MPI's shared-memory transport sizes its segment files with ftruncate(2), which the limit
# refuses too; the limited jobs talk over TCP instead.
NO_SHM="--mca btl self,tcp"

no_partial() {
  if ls "$1/checkpoints" | grep -q partial; then
    echo "FAIL: a staging folder was left in $1/checkpoints"; exit 1
  fi
}

"$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $BIG --training.steps=2 --run-dir "$WORK/one" \
  > "$WORK/one-1.log" 2>&1
status=0
LIMITED_RANKS=1 "$MPIRUN" -np 2 $MPIFLAGS $NO_SHM -x LIMITED_RANKS sh -c "$LIMITED" "$ANVIL" train $BIG \
  --training.steps=4 --run-dir "$WORK/one" > "$WORK/one-2.log" 2>&1 || status=$?
test "$status" -eq 1 || { echo "FAIL: exit status $status, expected 1"; cat "$WORK/one-2.log"; exit 1; }
grep -q "anvil: error: \[checkpoint\] cannot save step 4: \[io\] cannot write .*optimizer-00001-of-00002.safetensors.tmp: File too large; its partial files were removed and step-0000002 is still the newest checkpoint" "$WORK/one-2.log" \
  || { echo "FAIL: no error naming rank 1's file"; cat "$WORK/one-2.log"; exit 1; }
no_partial "$WORK/one"
test ! -e "$WORK/one/checkpoints/step-0000004" || { echo "FAIL: step 4 was committed"; exit 1; }
"$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $BIG --training.steps=4 --run-dir "$WORK/one" \
  > "$WORK/one-3.log" 2>&1
grep -q "resumed from .*step-0000002" "$WORK/one-3.log"

"$MPIRUN" -np 2 $MPIFLAGS "$ANVIL" train $BIG --training.steps=2 --run-dir "$WORK/all" \
  > "$WORK/all-1.log" 2>&1
LIMITED_RANKS=all "$MPIRUN" -np 2 $MPIFLAGS $NO_SHM -x LIMITED_RANKS sh -c "$LIMITED" "$ANVIL" train \
  $BIG --training.steps=6 --checkpoint.on_error=continue --run-dir "$WORK/all" \
  > "$WORK/all-2.log" 2>&1 || { echo "FAIL: the continue run failed"; cat "$WORK/all-2.log"; exit 1; }
test "$(grep -c 'training continues (checkpoint.on_error' "$WORK/all-2.log")" -eq 2 \
  || { echo "FAIL: expected two warnings"; cat "$WORK/all-2.log"; exit 1; }
grep -q '"type":"train","step":6,' "$WORK/all/metrics.jsonl"
no_partial "$WORK/all"

status=0
"$ANVIL" launch --nproc 2 --max-restarts 2 -- train $TINY --training.steps=8 \
  --optimizer.lr=1e30 --checkpoint.every=1 --run-dir "$WORK/diverged" \
  > "$WORK/diverged.log" 2>&1 || status=$?
test "$status" -eq 4 || { echo "FAIL: launcher exit $status, expected 4"; cat "$WORK/diverged.log"; exit 1; }
grep -q "training diverged at step 2" "$WORK/diverged.log"
grep -q "anvil launch: not restarting: training diverged" "$WORK/diverged.log"
if grep -q "restart 1/2" "$WORK/diverged.log"; then echo "FAIL: the launcher restarted"; exit 1; fi
echo "robust.sh: ok"
