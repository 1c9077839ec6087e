#!/usr/bin/env bash
# Fine-tune a Google BERT checkpoint on your own TSV data with several GPUs.
#
#   BERT_DIR=/data/chinese_L-12_H-768_A-12 DATA_DIR=/data/my_task \
#   CUDA_VISIBLE_DEVICES=0,1,2,3 N_GPUS=4 bash scripts/finetune_classifier.sh
#
# DATA_DIR holds train.tsv and dev.tsv (text<TAB>label, or text_a<TAB>text_b<TAB>label; a header
# row is detected) and optionally test.tsv (the same, with or without the label column). Results:
# $OUTPUT_DIR/eval_results.txt and $OUTPUT_DIR/predict.txt (one predicted label per test row).
# OUTPUT_DIR (default output/<task folder>), N_GPUS (2), CUDA_VISIBLE_DEVICES (0,1). How long
# depends on the data and the GPUs: minutes for a few thousand rows, hours for BERT-base on
# hundreds of thousands (docs/speed.md has the expected GPU speeds).
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"

BERT_DIR="${BERT_DIR:?set BERT_DIR to an unpacked Google checkpoint, e.g. chinese_L-12_H-768_A-12}"
DATA_DIR="${DATA_DIR:?set DATA_DIR to a folder with train.tsv, dev.tsv and optionally test.tsv}"
OUTPUT_DIR="${OUTPUT_DIR:-output/$(basename "$DATA_DIR")}"
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0,1}"
N_GPUS="${N_GPUS:-2}"

DO_PREDICT="--do_predict=false"
[ -f "$DATA_DIR/test.tsv" ] && DO_PREDICT="--do_predict"

python run_classifier_mgpu.py \
  --task_name=tsv \
  --data_dir="$DATA_DIR" \
  --vocab_file="$BERT_DIR/vocab.txt" \
  --bert_config_file="$BERT_DIR/bert_config.json" \
  --init_checkpoint="$BERT_DIR/bert_model.ckpt" \
  --output_dir="$OUTPUT_DIR" \
  --do_train --do_eval $DO_PREDICT \
  --max_seq_length="${MAX_SEQ_LENGTH:-128}" \
  --truncation="${TRUNCATION:-head}" \
  --train_batch_size="${TRAIN_BATCH_SIZE:-32}" \
  --learning_rate="${LEARNING_RATE:-2e-5}" \
  --num_train_epochs="${EPOCHS:-3}" \
  --n_gpus="$N_GPUS"
