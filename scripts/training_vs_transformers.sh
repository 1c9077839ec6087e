#!/usr/bin/env bash
# Training speed against transformers, fp32 and bf16, on the chip's matmul units: BERT-base at
# seq 128, batch 8, one tower; ours (run_classifier_mgpu.py's graph; XLA off and on in fp32,
# --use_bf16 in bf16) against transformers eager (autocast bf16 in bf16) and torch.compile,
# interleaved round by round in one run; the matmul peak measured in TensorFlow and in PyTorch;
# the machine line (CPU, ISA level, threads) and the load average. bf16 runs only where the CPU
# has bfloat16 matmul units (AVX512-BF16 or AMX). See docs/speed.md; the figures measured so far
# are in docs/results/speed.md ("bf16 on AMX").
#
#   bash scripts/training_vs_transformers.sh                 # ~25 min on a 2-core CPU
#   bash scripts/training_vs_transformers.sh --hf_configs=base,minilm --rounds=16
#   ISA=AVX2 bash scripts/training_vs_transformers.sh        # the same CPU run as an AVX2 one
#
# Needs the benchmark extra (pip install -r requirements-bench.txt). Run it on a quiet machine:
# other jobs slow every contender of a round alike, but the absolute figures drop.
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"
source "$(dirname "$0")/measure_helpers.sh"  # cap_isa
cap_isa
exec python benchmarks/train_bench.py --plan=custom --configs= --hf_configs=base --hf_batch=8 \
  --hf_compile --rounds=8 "$@"
