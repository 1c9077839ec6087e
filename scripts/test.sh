#!/usr/bin/env bash
# Sets up the venv (as demo.sh does) and runs the whole test suite on CPU.
#   bash scripts/test.sh                      # every test (what .ci/run runs)
#   bash scripts/test.sh --fast               # the fast tier: every module, under 90 s
#   bash scripts/test.sh tests/test_towers.py  # only what you name (files, -k, ...)
# The whole suite and the fast tier run in BERT_MGPU_TEST_WORKERS worker processes (default 2,
# pytest-xdist, at most 8: one per port slice of tests/script_runner.py), each test file whole
# in one worker, the longest files first (tests/conftest.py); what you name runs in this
# process, unless you add -n 2 yourself. Two on 2 cores: a third saved no wall time on a quiet
# day and cost 7% more CPU, which is what a shared CI machine pays (docs/development.md).
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/checks.sh"  # fail, is_int
n_workers="${BERT_MGPU_TEST_WORKERS:-2}"
{ is_int "$n_workers" && [ "$n_workers" -le 8 ]; } ||
  fail "BERT_MGPU_TEST_WORKERS=$n_workers: expected a whole number from 1 to 8"
source "$(dirname "$0")/setup_env.sh"
export CUDA_VISIBLE_DEVICES=""
workers=(-n "$n_workers" --dist loadfile --no-loadscope-reorder)
if [ "${1:-}" = "--fast" ]; then
  shift
  set -- "${workers[@]}" -m fast tests "$@"
elif [ "$#" -eq 0 ] || [ "${1:0:1}" = "-" ]; then
  set -- "${workers[@]}" tests "$@"
fi
python -m pytest -q -p no:cacheprovider "$@"
