#!/usr/bin/env bash
# The quick start: set up the venv, then train a small BERT with 2 towers on generated Chinese
# sentiment data, evaluate it and write predict.txt. A few minutes on a 2-core CPU.
#   bash scripts/demo.sh            # output in demo_output/
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"

# With GPUs, the towers go round-robin over these cards; without, over virtual CPU devices.
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0,1}"
OUT="${1:-demo_output}"
if [ -e "$OUT" ] && [ ! -d "$OUT" ]; then
  echo "error: $OUT: is a file; expected a directory (or a path to create one) for the demo's output" >&2
  exit 2
fi
N_GPUS="${N_GPUS:-2}"

python scripts/make_demo_data.py --output_dir "$OUT/data"
python run_classifier_mgpu.py \
  --task_name=tsv \
  --data_dir="$OUT/data" \
  --vocab_file=vocab/chinese_vocab.txt \
  --bert_config_file="$OUT/data/bert_config.json" \
  --output_dir="$OUT/classifier" \
  --do_train --do_eval --do_predict \
  --max_seq_length=64 \
  --train_batch_size=16 \
  --learning_rate=1e-3 \
  --num_train_epochs=3 \
  --save_checkpoints_steps=100 \
  --n_gpus="$N_GPUS"

echo
echo "== $OUT/classifier/eval_results.txt"
cat "$OUT/classifier/eval_results.txt"
echo "== $OUT/classifier/predict.txt: $(wc -l < "$OUT/classifier/predict.txt") lines for $(($(wc -l < "$OUT/data/test.tsv") - 1)) test rows; first 5:"
head -5 "$OUT/classifier/predict.txt"
