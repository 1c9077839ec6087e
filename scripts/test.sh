#!/usr/bin/env bash
# Sets up the venv (as demo.sh does) and runs the whole test suite on CPU.
#   bash scripts/test.sh [pytest args]
source "$(dirname "$0")/setup_env.sh"
export CUDA_VISIBLE_DEVICES=""
python -m pytest -q -p no:cacheprovider tests "$@"
