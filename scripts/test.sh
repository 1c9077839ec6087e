#!/usr/bin/env bash
# Sets up the venv (as demo.sh does) and runs the whole test suite on CPU.
#   bash scripts/test.sh                      # every test (what .ci/run runs)
#   bash scripts/test.sh --fast               # the fast tier: every module, under 3 minutes
#   bash scripts/test.sh tests/test_towers.py  # only what you name (files, -k, ...)
source "$(dirname "$0")/setup_env.sh"
export CUDA_VISIBLE_DEVICES=""
if [ "${1:-}" = "--fast" ]; then
  shift
  set -- -m fast tests "$@"
elif [ "$#" -eq 0 ]; then
  set -- tests
fi
python -m pytest -q -p no:cacheprovider "$@"
