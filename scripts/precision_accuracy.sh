#!/usr/bin/env bash
# fp32 vs fp16 vs bf16 dev accuracy on ChnSentiCorp with the same recipe and number of updates:
# a small BERT trained from scratch (hidden 128, 2 layers, seq 128, 4 epochs, lr 5e-4, 2 towers).
#
#   bash scripts/precision_accuracy.sh [data_dir] [output_dir]   # seeds 1-5, ~35 min on 2 cores
#   SEEDS="7" bash scripts/precision_accuracy.sh                  # one seed (about +-1 point noise)
#   PRECISIONS="bf16" bash scripts/precision_accuracy.sh          # some precisions only
# Prints one line per run with eval_accuracy and the updates skipped by fp16 loss scaling, then
# the mean per precision; each run is written under output_dir/<precision>-<seed>.
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"
DATA="${1:-/work/shared/data/classify/chnsenticorp}"
OUT="${2:-output/precision_accuracy}"
mkdir -p "$OUT"
SEEDS="${SEEDS:-1 2 3 4 5}"
PRECISIONS="${PRECISIONS:-fp32 fp16 bf16}"
for precision in $PRECISIONS; do
  [[ " fp32 fp16 bf16 " == *" $precision "* ]] ||
    { echo "error: PRECISIONS takes fp32, fp16, bf16, got '$precision'" >&2; exit 2; }
done
for seed in $SEEDS; do
  for precision in $PRECISIONS; do
    case "$precision" in
      fp16) flag=--use_fp16 ;;
      bf16) flag=--use_bf16 ;;
      *) flag= ;;
    esac
    run="$OUT/$precision-$seed"
    python run_classifier_mgpu.py --task_name=tsv --data_dir="$DATA" \
      --vocab_file=vocab/chinese_vocab.txt --bert_config_file=scripts/small_chinese_bert_config.json \
      --output_dir="$run" --do_train --do_eval --max_seq_length=128 \
      --train_batch_size=32 --eval_batch_size=64 --learning_rate=5e-4 --num_train_epochs=4 \
      --n_gpus=2 --log_every_n_steps=50 --save_checkpoints_steps=10000 \
      --random_seed="$seed" $flag 2> "$run.log"
    printf "%s seed %s  %s  %s  skipped updates: %s\n" "$precision" "$seed" \
      "$(grep '^eval_accuracy' "$run/eval_results.txt")" \
      "$(grep '^global_step' "$run/eval_results.txt")" \
      "$(grep -c 'skipped: non-finite' "$run.log" || true)"
  done
done
for precision in $PRECISIONS; do
  cat "$OUT"/"$precision"-*/eval_results.txt | awk -v p="$precision" \
    '/^eval_accuracy/ {s += $3; n += 1} END {printf "%s mean eval_accuracy over %d seed(s): %.4f\n", p, n, s / n}'
done
