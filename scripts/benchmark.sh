#!/usr/bin/env bash
# Training throughput table: towers, sequence length, fp32/bf16/fp16, XLA, reduction mode and
# gradient accumulation, model TFLOP/s and share of the measured matmul peak, and Hugging Face
# transformers (PyTorch) on the same configs when torch is installed (requirements-bench.txt;
# or point HF_PYTHON at a Python that has it). See docs/speed.md;
# the figures measured so far are in docs/results/speed.md ("Training speed").
#
#   bash scripts/benchmark.sh                          # default plan, ~10 min on a 2-core CPU
#   bash scripts/benchmark.sh --plan=full --steps=5    # every combination
#   bash scripts/benchmark.sh --hf_configs= --configs=minilm   # no HF, another model
#   ISA=AVX2 bash scripts/benchmark.sh ...             # an AVX-512 CPU run as an AVX2-only one
#                                                      # (oneDNN, XLA, torch and MKL capped)
#
# Run it on a quiet machine: other processes on the cores skew every figure.
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"
source "$(dirname "$0")/measure_helpers.sh"  # cap_isa
cap_isa
exec python benchmarks/train_bench.py "$@"
