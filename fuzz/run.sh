#!/usr/bin/env bash
# Builds a libFuzzer target with clang in its own build folder and runs it for N seconds on a
# seed corpus (the safetensors test fixture) with a dictionary of header tokens.
# Usage: fuzz/run.sh [seconds, default 60] [target, default safetensors_fuzz]
# Needs clang++ and libclang-rt-dev (Debian: apt-get install clang libclang-rt-14-dev); they
# are not project dependencies. Findings (crash-*, leak-*) land in the build folder's corpus dir.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-60}"
target="${2:-safetensors_fuzz}"
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"

if ! command -v clang++ >/dev/null; then
  echo "fuzz/run.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi
mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" --target "$target" -j 2

corpus="$build/corpus/$target"
mkdir -p "$corpus"
cp "$root/tests/io/fixtures/reference.safetensors" "$corpus/seed-reference"
cd "$build/corpus"
"$build/fuzz/$target" "$corpus" -dict="$root/fuzz/safetensors.dict" -max_len=4096 \
  -max_total_time="$seconds" -print_final_stats=1
