#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in their own build folder (sanitizers: address,
# undefined) and runs each for N seconds (FUZZ_PARALLEL at a time), on a working corpus seeded
# from fuzz/corpus/<target>/ and fuzz/regressions/<target>/, with fuzz/<target>.dict when
# present.
# Usage: fuzz/run.sh [seconds per target, default 60] [target...; default: every target]
# FUZZ_PARALLEL=N runs N targets at once (default 1), FUZZ_JOBS the build's jobs (default 2).
# Needs clang++ and libclang-rt-dev (Debian: apt-get install clang libclang-rt-14-dev); they
# are not project dependencies. Per target, libFuzzer's output goes to
# build-fuzz/logs/<target>.log and crashing inputs to build-fuzz/findings/<target>/; a crash
# stops that target, and the script exits 1 after running the rest. Copy a crashing input to
# fuzz/regressions/<target>/ once it is fixed, so `make test` replays it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-60}"
shift || true
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"

if ! command -v clang++ >/dev/null; then
  echo "fuzz/run.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for source in "$root"/fuzz/*_fuzz.cpp; do targets+=("$(basename "$source" .cpp)"); done
fi
mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" --target "${targets[@]}" -j "${FUZZ_JOBS:-2}"

# One target: its working corpus, a run of `seconds`, and a line saying how it went.
run_target() {
  local target="$1"
  local corpus="$build/corpus/$target"
  local findings="$build/findings/$target"
  mkdir -p "$corpus" "$findings" "$build/logs"
  cp -n "$root/fuzz/corpus/$target"/* "$corpus"/
  if [ -d "$root/fuzz/regressions/$target" ]; then
    find "$root/fuzz/regressions/$target" -type f ! -name '.*' -exec cp -n {} "$corpus"/ \;
  fi
  local options=(-max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048
                 -max_len="${FUZZ_MAX_LEN:-16384}" -artifact_prefix="$findings/")
  if [ -f "$root/fuzz/$target.dict" ]; then options+=(-dict="$root/fuzz/$target.dict"); fi
  local log="$build/logs/$target.log"
  local status=0
  "$build/fuzz/$target" "$corpus" "${options[@]}" > "$log" 2>&1 || status=$?
  local executions
  executions="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)"
  if [ "$status" -eq 0 ]; then
    echo "$target: ${seconds}s, ${executions:-?} executions, no crash"
  else
    echo "$target: CRASH after ${executions:-?} executions (exit $status); see $log and $findings"
    return 1
  fi
}

# FUZZ_PARALLEL targets run at once (default 1: one after another).
lanes="${FUZZ_PARALLEL:-1}"
failed=0
running=0
wait_for_one() {
  wait -n || failed=1
  running=$((running - 1))
}
for target in "${targets[@]}"; do
  if [ "$running" -ge "$lanes" ]; then wait_for_one; fi
  run_target "$target" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do wait_for_one; done
exit "$failed"
