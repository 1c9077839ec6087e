#!/usr/bin/env bash
# Text rewriting end to end: rewrite pretraining on a raw-text corpus, fine-tuning on
# source<TAB>target pairs, evaluation on dev.tsv and prediction on test.tsv, 2 towers.
#
#   bash scripts/rewrite.sh DATA_DIR CORPUS [OUT]
#     DATA_DIR  train.tsv (+ dev.tsv, test.tsv if present), rows source<TAB>target
#     CORPUS    plain-text file(s) for rewrite pretraining: comma-separated paths or globs
#     OUT       output directory (default rewrite_output): OUT/pretrain, OUT/finetune
#
# With BERT_DIR set to a Google checkpoint directory (bert_config.json, vocab.txt,
# bert_model.ckpt.*), pretraining starts from it. Without it, a tiny BERT config is written to
# OUT/bert_config.json and everything trains from scratch: minutes on a CPU, no GPU needed.
#
# Knobs (environment): COLUMN_ORDER (source_target | target_source), MAX_SEQ_LENGTH,
# MAX_TARGET_LENGTH, PRETRAIN_STEPS, EPOCHS, BATCH (per tower), LR, BEAM, N_GPUS.
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"

if [ $# -lt 2 ]; then
  sed -n '2,16p' "$0" >&2
  exit 2
fi
DATA_DIR="$1"
CORPUS="$2"
OUT="${3:-rewrite_output}"

# With GPUs, the towers go round-robin over these cards; without, over virtual CPU devices.
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0,1}"
N_GPUS="${N_GPUS:-2}"
COLUMN_ORDER="${COLUMN_ORDER:-source_target}"
MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-128}"
MAX_TARGET_LENGTH="${MAX_TARGET_LENGTH:-48}"
BATCH="${BATCH:-16}"
BEAM="${BEAM:-4}"
mkdir -p "$OUT"

if [ -n "${BERT_DIR:-}" ]; then
  VOCAB="$BERT_DIR/vocab.txt"
  CONFIG="$BERT_DIR/bert_config.json"
  INIT=(--init_checkpoint="$BERT_DIR/bert_model.ckpt")
  PRETRAIN_STEPS="${PRETRAIN_STEPS:-10000}"
  EPOCHS="${EPOCHS:-3}"
  LR="${LR:-5e-5}"
else
  VOCAB="vocab/chinese_vocab.txt"
  CONFIG="$OUT/bert_config.json"
  INIT=()
  PRETRAIN_STEPS="${PRETRAIN_STEPS:-300}"
  EPOCHS="${EPOCHS:-2}"
  LR="${LR:-1e-3}"
  cat > "$CONFIG" <<EOF
{"vocab_size": $(wc -l < "$VOCAB"), "hidden_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 512, "hidden_act": "gelu",
 "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
 "max_position_embeddings": $MAX_SEQ_LENGTH, "type_vocab_size": 2, "initializer_range": 0.02}
EOF
  echo "[rewrite] no BERT_DIR: tiny model from scratch ($CONFIG)"
fi

COMMON=(--vocab_file="$VOCAB" --bert_config_file="$CONFIG" --do_lower_case=true
        --max_seq_length="$MAX_SEQ_LENGTH" --max_target_length="$MAX_TARGET_LENGTH"
        --train_batch_size="$BATCH" --eval_batch_size="$BATCH" --predict_batch_size="$BATCH"
        --learning_rate="$LR" --n_gpus="$N_GPUS" --beam_size="$BEAM")

echo "[rewrite] 1/2 rewrite pretraining on $CORPUS -> $OUT/pretrain"
python run_rewrite_finetune.py "${COMMON[@]}" "${INIT[@]}" \
  --do_pretrain_rewrite --corpus_file="$CORPUS" --num_train_steps="$PRETRAIN_STEPS" \
  --output_dir="$OUT/pretrain"

MODES=(--do_train)
[ -f "$DATA_DIR/dev.tsv" ] && MODES+=(--do_eval)
[ -f "$DATA_DIR/test.tsv" ] && MODES+=(--do_predict)
echo "[rewrite] 2/2 fine-tuning on $DATA_DIR -> $OUT/finetune (${MODES[*]})"
python run_rewrite_finetune.py "${COMMON[@]}" "${MODES[@]}" \
  --init_checkpoint="$OUT/pretrain/export/bert_model.ckpt" \
  --data_dir="$DATA_DIR" --column_order="$COLUMN_ORDER" --num_train_epochs="$EPOCHS" \
  --output_dir="$OUT/finetune"

if [ -f "$OUT/finetune/eval_results.txt" ]; then
  echo "== $OUT/finetune/eval_results.txt"
  cat "$OUT/finetune/eval_results.txt"
fi
if [ -f "$OUT/finetune/predict.txt" ]; then
  echo "== $OUT/finetune/predict.txt: $(wc -l < "$OUT/finetune/predict.txt") lines for" \
       "$(wc -l < "$DATA_DIR/test.tsv") test rows; first 5:"
  head -5 "$OUT/finetune/predict.txt"
fi
