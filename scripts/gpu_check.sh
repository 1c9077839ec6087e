#!/usr/bin/env bash
# For a machine with GPUs: a few training updates of each parallel mode (shared, allreduce,
# accumulation, GPipe, 1F1B) on every GPU of CUDA_VISIBLE_DEVICES and on one, BERT-base at seq
# 128, 16 rows per GPU; prints one Markdown table to paste into an issue: examples/sec and the
# speed-up over one GPU, peak GB per GPU, ops that ran on another device than the graph asked
# for, and GPU:0's share of the ops. About 2 minutes per mode. Options go to
# benchmarks/gpu_check.py (--config, --modes, --seq, --rows, --steps, --n_devices).
#   bash scripts/gpu_check.sh
#   CUDA_VISIBLE_DEVICES=0,1,2,3 bash scripts/gpu_check.sh --modes=shared,allreduce
# Without a GPU it runs the same on 2 virtual CPU devices (its figures then say nothing about
# GPUs); use --config=tiny there.
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"
python benchmarks/gpu_check.py "$@"
