#!/usr/bin/env bash
# The long form of the chaos test (tests/parallel/cli/chaos.py; its short form runs in
# `make test` as parallel_cli_chaos): 60 seeded faults, at least 20 of them during a
# checkpoint save, on a 2-rank run of 1820 steps with a checkpoint every 2 steps. The run must
# end equal, byte for byte, to an uninterrupted one; the last lines give the figures (faults,
# faults during a save, longest recovery, steps recomputed) that docs/distributed.md quotes.
# Usage: bench/chaos.sh [anvil binary] [work dir] [seed] [faults]
# About 5 minutes on 2 busy cores. Not run by CI.
set -euo pipefail

ANVIL=${1:-build/anvil}
WORK=${2:-runs/chaos-long}
SEED=${3:-7}
FAULTS=${4:-60}
export OMP_NUM_THREADS=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
exec python3 "$(dirname "$0")/../tests/parallel/cli/chaos.py" --anvil "$ANVIL" --work "$WORK" \
  --seed "$SEED" --faults "$FAULTS" --save-faults $((FAULTS / 3)) --steps $((FAULTS * 30 + 20)) \
  --time-limit 1800
