#!/usr/bin/env bash
# Continued pretraining on your own domain text, then fine-tuning from the result:
#   raw text -> create_pretraining_data.py (2 worker processes) -> run_pretraining_mgpu.py
#   (towers, from a Google checkpoint) -> run_classifier_mgpu.py --init_checkpoint=<that output>
#
#   BERT_DIR=/data/chinese_L-12_H-768_A-12 CORPUS=/data/legal.txt DATA_DIR=/data/legal_cls \
#   CUDA_VISIBLE_DEVICES=0,1 bash scripts/pretrain_domain.sh [WORK_DIR]
#
# CORPUS: utf-8 text, one sentence (or passage) per line, a blank line between documents; every
# 10th document is held out to measure masked-LM accuracy before and after. DATA_DIR: train.tsv
# and dev.tsv (text<TAB>label), optionally test.tsv. Without BERT_DIR a tiny BERT config is
# written to WORK_DIR/demo_data and pretrained from scratch; without CORPUS/DATA_DIR generated
# reviews are used, so `bash scripts/pretrain_domain.sh` alone runs on a CPU in a few minutes.
# From BERT_DIR the steps and rate are README's (400 steps at 2e-4 on a small text, 10 passes at
# 1e-4 on a larger one; PRETRAIN_STEPS and PRETRAIN_LR override), at 16 per GPU, and so is the
# first step: the corpus's words that WordPiece splits get BERT_DIR's [unusedN] slots
# (scripts/build_domain_vocab.py into WORK_DIR/domain_start; DOMAIN_VOCAB=0 skips it). Mostly
# Chinese text skips it too: BERT reads Chinese as characters, so only its English words could
# be added, and that was not measured.
# The domain model ends up in WORK_DIR/pretrained/export/ (bert_model.ckpt, bert_config.json,
# vocab.txt: the layout of a Google release, usable as BERT_DIR by the other scripts).
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"

WORK_DIR="${1:-domain_output}"
BERT_DIR="${BERT_DIR:-}"          # bert_config.json, vocab.txt, bert_model.ckpt.*
CORPUS="${CORPUS:-}"              # raw domain text
DATA_DIR="${DATA_DIR:-}"          # the classification task to fine-tune on afterwards
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0,1}"
N_GPUS="${N_GPUS:-2}"
# token | whole_word | ngram | domain (create_pretraining_data.py). From a checkpoint: domain,
# README's masking (the words general text lacks first); a tiny BERT from scratch: whole_word.
MASKING="${MASKING:-$([ -n "$BERT_DIR" ] && echo domain || echo whole_word)}"
SEGMENTER="${SEGMENTER:-jieba}"   # Chinese words for whole_word/ngram: jieba | none | presegmented
NUM_WORKERS="${NUM_WORKERS:-2}"
DUPE_FACTOR="${DUPE_FACTOR:-5}"
DOMAIN_VOCAB="${DOMAIN_VOCAB:-$([ -n "$BERT_DIR" ] && echo 1 || echo 0)}"  # 1: README's step 0
if [ -n "$BERT_DIR" ]; then
  # A released checkpoint: README's recipe (docs/pretraining.md). PRETRAIN_STEPS and PRETRAIN_LR
  # are chosen from the records after step 2 unless set: a small text (400 steps make 5 passes
  # or more over its records, 2,560 records at most at the batch of 32) gets 400 steps at 2e-4,
  # as measured on the rare-term tasks (1,038-2,556 records); a larger text 10 passes at 1e-4.
  MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-128}"
  TRAIN_BATCH_SIZE="${TRAIN_BATCH_SIZE:-16}"  # per GPU
  PRETRAIN_STEPS="${PRETRAIN_STEPS:-}"
  PRETRAIN_LR="${PRETRAIN_LR:-}"
  FINETUNE_LR="${FINETUNE_LR:-2e-5}"
  EPOCHS="${EPOCHS:-3}"
else
  # The tiny from-scratch model of the CPU run.
  MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-64}"
  TRAIN_BATCH_SIZE="${TRAIN_BATCH_SIZE:-16}"
  PRETRAIN_STEPS="${PRETRAIN_STEPS:-150}"
  PRETRAIN_LR="${PRETRAIN_LR:-1e-3}"
  FINETUNE_LR="${FINETUNE_LR:-1e-3}"
  # The tiny model sits on a loss plateau for a while after MLM-only pretraining; 3 epochs of
  # the generated reviews are sometimes not enough to leave it.
  EPOCHS="${EPOCHS:-8}"
fi

# Every input checked before anything is written.
source "$(dirname "$0")/checks.sh"  # fail, is_int, is_positive
for knob in N_GPUS NUM_WORKERS DUPE_FACTOR TRAIN_BATCH_SIZE MAX_SEQ_LENGTH EPOCHS \
            ${PRETRAIN_STEPS:+PRETRAIN_STEPS}; do
  is_int "${!knob}" || fail "$knob takes a positive integer, got '${!knob}'"
done
MAX_PREDICTIONS="${MAX_PREDICTIONS:-$((MAX_SEQ_LENGTH * 15 / 100 + 1))}"
is_int "$MAX_PREDICTIONS" || fail "MAX_PREDICTIONS takes a positive integer, got '$MAX_PREDICTIONS'"
for knob in ${PRETRAIN_LR:+PRETRAIN_LR} FINETUNE_LR; do
  is_positive "${!knob}" || fail "$knob takes a number > 0, got '${!knob}'"
done
[[ "$DOMAIN_VOCAB" =~ ^[01]$ ]] || fail "DOMAIN_VOCAB takes 0 or 1, got '$DOMAIN_VOCAB'"
[ "$DOMAIN_VOCAB" = 0 ] || [ -n "$BERT_DIR" ] ||
  fail "DOMAIN_VOCAB=1 needs BERT_DIR (a checkpoint whose [unusedN] slots take the words)"
case $MASKING in token|whole_word|ngram|domain) ;;
  *) fail "MASKING takes token, whole_word, ngram or domain, got '$MASKING'" ;; esac
if [ -n "$BERT_DIR" ]; then
  for f in bert_config.json vocab.txt bert_model.ckpt.index; do
    [ -f "$BERT_DIR/$f" ] || fail "BERT_DIR=$BERT_DIR: no $f (expected a Google release's layout: bert_config.json, vocab.txt, bert_model.ckpt.*)"
  done
fi
if [ -n "$CORPUS" ]; then
  [ -f "$CORPUS" ] && [ -s "$CORPUS" ] || fail "CORPUS=$CORPUS: expected a non-empty utf-8 text file"
  DOCUMENTS=$(awk -v RS= 'END { print NR }' "$CORPUS")
  [ "$DOCUMENTS" -ge 10 ] || fail "CORPUS=$CORPUS: $DOCUMENTS documents (blank-line separated); every 10th is held out, so 10 or more are needed"
fi
if [ -n "$DATA_DIR" ]; then
  for f in train.tsv dev.tsv; do
    [ -f "$DATA_DIR/$f" ] || fail "DATA_DIR=$DATA_DIR: no $f (expected train.tsv and dev.tsv, text<TAB>label)"
  done
fi
mkdir -p "$WORK_DIR"

if [ -z "$BERT_DIR" ] || [ -z "$CORPUS" ] || [ -z "$DATA_DIR" ]; then
  # Generated reviews, and the tiny bert_config.json used when there is no checkpoint.
  python scripts/make_demo_data.py --output_dir "$WORK_DIR/demo_data"
fi
if [ -n "$BERT_DIR" ]; then
  VOCAB="$BERT_DIR/vocab.txt"
  CONFIG="$BERT_DIR/bert_config.json"
  INIT=(--init_checkpoint="$BERT_DIR/bert_model.ckpt")
else
  VOCAB=vocab/chinese_vocab.txt
  CONFIG="$WORK_DIR/demo_data/bert_config.json"
  INIT=()
fi
DATA_DIR="${DATA_DIR:-$WORK_DIR/demo_data}"
if [ -z "$CORPUS" ]; then
  # The generated reviews as documents of 5 lines each.
  CORPUS="$WORK_DIR/demo_corpus.txt"
  cut -f1 "$WORK_DIR/demo_data/train.tsv" | awk '{ print } NR % 5 == 0 { print "" }' > "$CORPUS"
fi

echo "== 1. hold out every 10th document of $CORPUS"
awk -v RS= -v train="$WORK_DIR/corpus_train.txt" -v heldout="$WORK_DIR/corpus_heldout.txt" \
  '{ print $0 "\n" > (NR % 10 == 0 ? heldout : train) }' "$CORPUS"

if [ "$DOMAIN_VOCAB" = 1 ]; then
  echo "== 1b. the words WordPiece splits get tokens of their own (scripts/build_domain_vocab.py)"
  python scripts/build_domain_vocab.py --bert_dir="$BERT_DIR" \
    --input_file="$WORK_DIR/corpus_train.txt" --output_dir="$WORK_DIR/domain_start" \
    --do_lower_case=true --allow_none --skip_chinese
  # Written by this run (step 1 has just rewritten corpus_train.txt), not left by an earlier one.
  if [ "$WORK_DIR/domain_start/added_words.tsv" -nt "$WORK_DIR/corpus_train.txt" ]; then
    VOCAB="$WORK_DIR/domain_start/vocab.txt"
    INIT=(--init_checkpoint="$WORK_DIR/domain_start/bert_model.ckpt")
  fi
fi

echo "== 2. pretraining records ($NUM_WORKERS workers, $MASKING masking)"
for SPLIT in train heldout; do
  python create_pretraining_data.py \
    --input_file="$WORK_DIR/corpus_$SPLIT.txt" \
    --output_file="$WORK_DIR/$SPLIT.tfrecord" \
    --vocab_file="$VOCAB" \
    --do_lower_case=true \
    --max_seq_length="$MAX_SEQ_LENGTH" \
    --max_predictions_per_seq="$MAX_PREDICTIONS" \
    --masking="$MASKING" \
    --chinese_word_segmenter="$SEGMENTER" \
    --dupe_factor="$([ "$SPLIT" = train ] && echo "$DUPE_FACTOR" || echo 1)" \
    --num_workers="$NUM_WORKERS" 2>&1 | tee "$WORK_DIR/$SPLIT.records.log" >&2
done
# The records step 2 wrote, counted in the file.
RECORDS=$(python -c "import sys, tensorflow as tf; print(sum(1 for _ in tf.data.TFRecordDataset(sys.argv[1])))" \
  "$WORK_DIR/train.tfrecord" 2> /dev/null) || RECORDS=0
[ "$RECORDS" -gt 0 ] || fail "$CORPUS made no training records (too little text for --max_seq_length=$MAX_SEQ_LENGTH?)"
GLOBAL_BATCH=$((TRAIN_BATCH_SIZE * N_GPUS))
SMALL_TEXT=$([ $((5 * RECORDS)) -le $((400 * GLOBAL_BATCH)) ] && echo 1 || echo 0)
if [ -z "$PRETRAIN_STEPS" ]; then
  PRETRAIN_STEPS=$([ "$SMALL_TEXT" = 1 ] && echo 400 || echo $(( (10 * RECORDS + GLOBAL_BATCH - 1) / GLOBAL_BATCH )))
fi
[ -n "$PRETRAIN_LR" ] || PRETRAIN_LR=$([ "$SMALL_TEXT" = 1 ] && echo 2e-4 || echo 1e-4)
WARMUP_STEPS="${WARMUP_STEPS:-$((PRETRAIN_STEPS / 10))}"
echo "== $RECORDS training records: $PRETRAIN_STEPS steps at a batch of $GLOBAL_BATCH, lr $PRETRAIN_LR"

PRETRAIN_FLAGS=(
  --eval_input_file="$WORK_DIR/heldout.tfrecord"
  --vocab_file="$VOCAB"
  --bert_config_file="$CONFIG"
  --max_seq_length="$MAX_SEQ_LENGTH"
  --max_predictions_per_seq="$MAX_PREDICTIONS"
  --eval_batch_size=32
  --max_eval_steps=100
  --n_gpus="$N_GPUS"
)
HAS_MLM_HEAD=0  # an encoder converted from Hugging Face has no masked-LM head to evaluate
[ -n "$BERT_DIR" ] && python -c "import sys, tensorflow as tf; sys.exit(0 if any(n.startswith('cls/predictions/') for n, _ in tf.train.list_variables(sys.argv[1])) else 1)" \
  "$BERT_DIR/bert_model.ckpt" 2> /dev/null && HAS_MLM_HEAD=1
if [ -n "$BERT_DIR" ] && [ "$HAS_MLM_HEAD" = 0 ]; then
  echo "== 3a. skipped: $BERT_DIR/bert_model.ckpt has no masked-LM head (an encoder only; it gets a new one)"
elif [ -n "$BERT_DIR" ]; then
  echo "== 3a. the released checkpoint on held-out domain text (before)"
  python run_pretraining_mgpu.py "${PRETRAIN_FLAGS[@]}" "${INIT[@]}" \
    --output_dir="$WORK_DIR/before" --do_eval
fi

echo "== 3. continued pretraining, $N_GPUS towers x $TRAIN_BATCH_SIZE, $PRETRAIN_STEPS steps"
python run_pretraining_mgpu.py "${PRETRAIN_FLAGS[@]}" "${INIT[@]}" \
  --input_file="$WORK_DIR/train.tfrecord" \
  --output_dir="$WORK_DIR/pretrained" \
  --do_train --do_eval \
  --train_batch_size="$TRAIN_BATCH_SIZE" \
  --num_train_steps="$PRETRAIN_STEPS" \
  --num_warmup_steps="$WARMUP_STEPS" \
  --learning_rate="$PRETRAIN_LR" \
  --save_checkpoints_steps=1000

echo "== 4. fine-tuning the classifier from the domain checkpoint"
DO_PREDICT="--do_predict=false"
[ -f "$DATA_DIR/test.tsv" ] && DO_PREDICT="--do_predict"
python run_classifier_mgpu.py \
  --task_name=tsv \
  --data_dir="$DATA_DIR" \
  --vocab_file="$VOCAB" \
  --bert_config_file="$CONFIG" \
  --init_checkpoint="$WORK_DIR/pretrained/export/bert_model.ckpt" \
  --output_dir="$WORK_DIR/classifier" \
  --do_train --do_eval $DO_PREDICT \
  --max_seq_length="$MAX_SEQ_LENGTH" \
  --train_batch_size="$TRAIN_BATCH_SIZE" \
  --learning_rate="$FINETUNE_LR" \
  --num_train_epochs="$EPOCHS" \
  --n_gpus="$N_GPUS"

echo
[ "$HAS_MLM_HEAD" = 1 ] && { echo "== before: $WORK_DIR/before/eval_results.txt"; cat "$WORK_DIR/before/eval_results.txt"; }
echo "== after: $WORK_DIR/pretrained/eval_results.txt"
cat "$WORK_DIR/pretrained/eval_results.txt"
echo "== classifier: $WORK_DIR/classifier/eval_results.txt"
cat "$WORK_DIR/classifier/eval_results.txt"
