#!/bin/sh
# Runs a test command again under one kernel table of the optimized CPU backend
# (ANVIL_CPU_ISA), so a machine tests the tables its CPU does not pick by default as well: an
# AVX-512 machine then also proves the AVX2 and generic paths (their GEMM library included).
# Exits 77, which CTest reports as skipped, when the CPU cannot run the table or when the
# table is the CPU's default, which the plain run of the same test covers.
# usage: run_under_isa.sh <table> <anvil binary> <command> [args...]
set -eu
isa=$1
anvil=$2
shift 2
tables=$(env -u ANVIL_CPU_ISA "$anvil" info |
  sed -n 's/.*kernel tables this CPU runs: \([a-z0-9 ]*\) (.*/\1/p')
if [ -z "$tables" ]; then
  echo "FAIL: anvil info did not list the kernel tables this CPU runs"
  exit 1
fi
case " $tables " in
  *" $isa "*) ;;
  *) echo "SKIPPED: this CPU cannot run the $isa kernel table (it runs: $tables)"; exit 77 ;;
esac
if [ "$isa" = "${tables%% *}" ]; then
  echo "SKIPPED: $isa is this CPU's default kernel table, which the plain run covers"
  exit 77
fi
ANVIL_CPU_ISA=$isa
export ANVIL_CPU_ISA
exec "$@"
