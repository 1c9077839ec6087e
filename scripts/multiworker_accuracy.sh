#!/usr/bin/env bash
# Dev accuracy on ChnSentiCorp of 2 processes x 1 tower against 1 process x 2 towers, the same
# global batch (2 x 32) and recipe (small BERT from scratch: hidden 128, 2 layers, seq 128,
# 4 epochs, lr 5e-4), per seed; the 2-process runs also predict test.tsv.
#
#   bash scripts/multiworker_accuracy.sh [data_dir] [output_dir]   # seeds 1-3, ~30 min on 2 cores
# Prints one line per run (eval_accuracy, global_step, wall time) and the mean per setup.
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"
DATA="${1:-/work/shared/data/classify/chnsenticorp}"
OUT="${2:-output/multiworker_accuracy}"
mkdir -p "$OUT"
SEEDS="${SEEDS:-1 2 3}"
for seed in $SEEDS; do
  for setup in 1proc-2towers 2proc-1tower; do
    run="$OUT/$setup-$seed"
    flags=(--task_name=tsv --data_dir="$DATA" --vocab_file=vocab/chinese_vocab.txt
           --bert_config_file=scripts/small_chinese_bert_config.json --output_dir="$run"
           --do_train --do_eval
           --max_seq_length=128 --train_batch_size=32 --eval_batch_size=64
           --predict_batch_size=64 --learning_rate=5e-4 --num_train_epochs=4
           --log_every_n_steps=50 --save_checkpoints_steps=10000 --random_seed="$seed")
    start=$(date +%s)
    if [ "$setup" = 1proc-2towers ]; then
      python run_classifier_mgpu.py "${flags[@]}" --n_gpus=2 2> "$run.log"
    else
      bash scripts/launch_local_workers.sh 2 run_classifier_mgpu.py "${flags[@]}" --do_predict \
        --n_gpus=1 > "$run.log" 2>&1
    fi
    seconds=$(($(date +%s) - start))
    extra=""
    [ -f "$run/predict.txt" ] && extra="predict.txt $(wc -l < "$run/predict.txt") lines"
    printf "%s seed %s  %s  %s  %d s  %s\n" "$setup" "$seed" \
      "$(grep '^eval_accuracy' "$run/eval_results.txt")" \
      "$(grep '^global_step' "$run/eval_results.txt")" "$seconds" "$extra"
  done
done
for setup in 1proc-2towers 2proc-1tower; do
  cat "$OUT"/"$setup"-*/eval_results.txt | awk -v p="$setup" \
    '/^eval_accuracy/ {s += $3; n += 1} END {printf "%s mean eval_accuracy over %d seed(s): %.4f\n", p, n, s / n}'
done
