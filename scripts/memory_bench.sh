#!/usr/bin/env bash
# Measured peak memory per device and step time of one training step: plain, --recompute=layer,
# GPipe and 1F1B (--pipeline_stages=2 --num_micro_batches=8) and 1F1B + recompute, for BERT-base
# at seq 128 and 512 and BERT-large at seq 128 (random weights, 8 rows). The peak is the
# allocator's, replayed from a traced step (on GPUs the same code reads the GPU's allocator).
# See docs/pipeline-and-memory.md; the figures measured so far are in docs/results/memory.md.
#
#   bash scripts/memory_bench.sh                                   # ~25 min on a 2-core CPU
#   bash scripts/memory_bench.sh --cases=base-128 --modes=plain,recompute
#   bash scripts/memory_bench.sh --cases=base-128 --modes=plain,towers-shared,towers-allreduce \
#     --towers=4 --rows=2          # 4 in-graph towers: the peak of each tower's device, max/min
#
# Memory figures do not depend on other load; step times do: run it on a quiet machine.
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"
exec python benchmarks/memory_bench.py "$@"
