#!/usr/bin/env bash
# Runs the table of bad inputs and faults (tests/fault_cases.py) through the real scripts on tiny
# data and prints the outcome class of each case, with totals.
#   bash scripts/fault_table.sh [--keep DIR] [case-name-substring ...]
# Disk-full and read-only cases mount small tmpfs filesystems, so they need root (else skipped).
# Prints one line per case (name, outcome: clear error, handled, traceback, hang, silent,
# damaged; its last line), then the totals; exit status 0 when every case ended as expected.
# About 3 min on 2 cores for all cases; `python scripts/fault_table.py --help` for its options.
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"
export CUDA_VISIBLE_DEVICES=""
python scripts/fault_table.py "$@"
