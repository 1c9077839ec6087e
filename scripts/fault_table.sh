#!/usr/bin/env bash
# Runs the table of bad inputs and faults (tests/fault_cases.py) through the real scripts on tiny
# data and prints the outcome class of each case, with totals.
#   bash scripts/fault_table.sh [--keep DIR] [case-name-substring ...]
# Disk-full and read-only cases mount small tmpfs filesystems, so they need root (else skipped).
source "$(dirname "$0")/setup_env.sh"
export CUDA_VISIBLE_DEVICES=""
python scripts/fault_table.py "$@"
