# Shared by the parallel CLI tests: a tiny model on synthetic data (a step takes milliseconds),
# one thread per rank, and metrics compared without their wall-clock fields.
set -eu
ANVIL=$1
MPIRUN=$2
WORK=$3
rm -rf "$WORK"
mkdir -p "$WORK"
MPIFLAGS="--oversubscribe --allow-run-as-root"
TINY="--threads 1 --data.synthetic=true --model.dim=32 --model.n_layers=2 --model.n_heads=4 \
--model.n_kv_heads=2 --model.ffn_dim=88 --model.vocab_size=64 --model.max_seq_len=16 \
--training.seq_len=16 --training.batch_size=2 --optimizer.schedule=constant \
--optimizer.warmup_steps=0 --optimizer.grad_clip=0.5 --logging.every=1"

# Under `set -e` a failing command would end the script without a word, and CTest counts a
# test as failed only by its exit status or a "FAIL:" line; so every check goes through these.

# Prints "FAIL: <what>" and the log file named (if any), then ends the script.
fail() {
  echo "FAIL: $1"
  if [ -n "${2:-}" ] && [ -f "$2" ]; then
    echo "--- $2:"
    cat "$2"
  fi
  exit 1
}

# expect <log> <basic regex> <what>: fails with the log unless a line of it matches.
expect() {
  grep -q -- "$2" "$1" || fail "$3 (no line matches '$2')" "$1"
}

# run_logged <log> <command...>: runs the command with its output in the log; fails with the
# log when it exits non-zero.
run_logged() {
  log=$1
  shift
  "$@" > "$log" 2>&1 || fail "exit status $? from: $*" "$log"
}

# Prints a run's metrics.jsonl without the wall-clock fields (tokens_per_s, mfu, elapsed_s),
# the host's waits on the device (host_waits, readback_bytes: they depend on the backend and on
# offload, not on what is computed) and the measured memory (mem_bytes, mem_peak_bytes,
# mem_peak), which depends on the mesh and on what the process did before (a resumed run
# differs), and without the records of a world
# size change at a resume ({"type":"world",...}), which runs continued on other meshes write
# and one straight run does not (elastic.sh compares them on their own).
deterministic_metrics() {
  sed -E -e 's/,"(mem_bytes|mem_peak_bytes|mem_planned_bytes|tokens_per_s|mfu|host_waits|readback_bytes|elapsed_s)":[-0-9.eE+]+//g' \
    -e 's/,"mem_peak":\{[^}]*\}//g' -e '/"type":"world"/d' "$1/metrics.jsonl"
}

# Fails unless two runs wrote identical deterministic metrics.
same_metrics() {
  if ! diff "$WORK/$1.metrics" "$WORK/$2.metrics" > "$WORK/diff.txt"; then
    echo "FAIL: $1 and $2 differ:"
    cat "$WORK/diff.txt"
    exit 1
  fi
}
