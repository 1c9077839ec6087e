#!/usr/bin/env bash
# Pretraining objectives at the same wall-clock budget, judged by fine-tuning:
#   MLM ([MASK]), ELECTRA (replaced-token detection) and MacBERT-style MLM as correction
#   (similar words instead of [MASK]); the same small Chinese BERT from scratch, the same records
#   (n-gram whole-word masking, jieba, MLM-only), then ChnSentiCorp fine-tuning with two
#   recipes (two learning rates) over 3 seeds each, against no pretraining. Figures:
#   docs/results/pretraining.md.
#
#   bash scripts/objective_comparison.sh [work_dir]     # ~70 min on 2 quiet CPU cores
#
# SHARED: the folder with corpus/, classify/ and vocab/ (default ../shared/data).
# PRETRAIN_LR: peak pretraining learning rate (default 5e-4; warm-up over the first 10% of steps).
#   At 1e-3 this model from scratch stayed on the token-prior plateau (masked-LM loss about 6.0)
#   for 1,500 steps; at 5e-4 it was off it (5.87) by step 300.
# FINETUNE_LRS: the fine-tuning recipes' peak learning rates (default "5e-4 1e-4"): 5e-4 suits the
#   random start; from pretrained weights some seeds stay at chance with it, so 1e-4 runs too.
# BUDGET_S: pretraining seconds per objective (default 600). Each objective's steps are set from
# its own measured seconds per step (a 30-step calibration run), so all get the same time.
# LOCK: a file to flock around every timed run (default: none), so timings of concurrent jobs do
# not overlap. Every stage is skipped when its output exists, so a rerun continues.
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"
WORK="${1:-output/objective_comparison}"
SHARED="${SHARED:-../shared/data}"
BUDGET_S="${BUDGET_S:-600}"
PRETRAIN_LR="${PRETRAIN_LR:-5e-4}"
FINETUNE_LRS="${FINETUNE_LRS:-5e-4 1e-4}"
OBJECTIVES="${OBJECTIVES:-mlm electra macbert}"
SEEDS="${SEEDS:-1 2 3}"
source "$(dirname "$0")/measure_helpers.sh"  # fail, is_int, is_positive (checks.sh); machine_line
for value in "$BUDGET_S" "$PRETRAIN_LR" $FINETUNE_LRS; do  # checked before any expensive work
  is_positive "$value" || fail "BUDGET_S, PRETRAIN_LR and FINETUNE_LRS take positive numbers, got '$value'"
done
VOCAB="$SHARED/vocab/vocab_zh.txt"
CONFIG=scripts/small_chinese_bert_config.json
export CUDA_VISIBLE_DEVICES=
mkdir -p "$WORK"
locked() { if [ -n "${LOCK:-}" ]; then flock "$LOCK" "$@"; else "$@"; fi; }

machine_line
if [ ! -f "$WORK/corpus.txt" ]; then
  cat "$SHARED"/corpus/*_zh.txt > "$WORK/corpus.txt.tmp" && mv "$WORK/corpus.txt.tmp" "$WORK/corpus.txt"
fi
if [ ! -f "$WORK/similar_words.tsv" ]; then
  echo "== similar words (word2vec on the corpus, jieba words)"
  python build_similar_words.py --input_file="$WORK/corpus.txt" \
    --output_file="$WORK/similar_words.tsv" --chinese_word_segmenter=jieba \
    --vocab_file="$VOCAB" 2> "$WORK/similar_words.log"
fi
for replacement in mask similar; do
  [ -f "$WORK/$replacement.tfrecord" ] && continue
  echo "== records: n-gram masking, $replacement"
  python create_pretraining_data.py --input_file="$WORK/corpus.txt" \
    --output_file="$WORK/$replacement.tfrecord" --vocab_file="$VOCAB" --max_seq_length=128 \
    --max_predictions_per_seq=20 --masking=ngram --chinese_word_segmenter=jieba --no_nsp \
    --dupe_factor=5 --masking_replacement="$replacement" \
    --similar_words_file="$WORK/similar_words.tsv" 2> "$WORK/records_$replacement.log"
done

pretrain() {  # pretrain NAME STEPS OUTPUT_DIR [LOG_EVERY]: one objective's pretraining run
  local name=$1 steps=$2 out=$3 log_every=${4:-10} records=mask objective=mlm
  [ "$name" = macbert ] && records=similar
  [ "$name" = electra ] && objective=electra
  python run_pretraining_mgpu.py --input_file="$WORK/$records.tfrecord" --output_dir="$out" \
    --vocab_file="$VOCAB" --bert_config_file="$CONFIG" --objective="$objective" --do_train \
    --do_eval --max_eval_steps=10 --eval_batch_size=32 --train_batch_size=32 --n_gpus=2 \
    --learning_rate="$PRETRAIN_LR" --num_train_steps="$steps" --num_warmup_steps=$((steps / 10)) \
    --save_checkpoints_steps=100000 --log_every_n_steps="$log_every" --random_seed=1
}

# Calibrate every objective first, back to back, so their speeds are measured under the same
# load; then train each for the budget.
log_seconds() {  # log_seconds LOG FIRST_RE LAST_RE: seconds between the first line matching
  # FIRST_RE and the last matching LAST_RE, by the absl time stamps (lock waits excluded).
  grep -E "^[IWE][0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6} .*$2" "$1" | sed -n 1p | cut -c7-21 > "$1.t"
  grep -E "^[IWE][0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6} .*$3" "$1" | tail -1 | cut -c7-21 >> "$1.t"
  awk -F: '{s = $1 * 3600 + $2 * 60 + $3} NR == 1 {a = s} END {printf "%.0f", s - a}' "$1.t"
  rm -f "$1.t"
}
calibration() { [ "$1" = macbert ] && echo mlm || echo "$1"; }  # MacBERT runs MLM's graph.
for name in $OBJECTIVES; do
  name=$(calibration "$name")
  [ -f "$WORK/calibrate_$name.log" ] && continue
  echo "== $name: calibration (30 steps); load: $(uptime | sed 's/.*load/load/')"
  locked bash -c "$(declare -f pretrain); WORK=$WORK VOCAB=$VOCAB CONFIG=$CONFIG PRETRAIN_LR=$PRETRAIN_LR \
    pretrain $name 30 $WORK/calibrate_$name 5" 2> "$WORK/calibrate_$name.log.tmp"
  mv "$WORK/calibrate_$name.log.tmp" "$WORK/calibrate_$name.log"
done
for name in $OBJECTIVES; do
  out="$WORK/pretrain_$name"
  [ -f "$out/export/bert_model.ckpt.index" ] && continue
  # Seconds per step from the median examples/sec of the logged intervals after the first.
  sec_per_step=$(grep -o '[0-9.]* examples/sec' "$WORK/calibrate_$(calibration "$name").log" | tail -n +2 |
    awk '{print $1}' | sort -n | awk '{a[NR]=$1} END {print 64 / a[int((NR+1)/2)]}')
  steps=$(python -c "print(int($BUDGET_S / $sec_per_step))")
  echo "== $name: $sec_per_step s/step -> $steps steps for ${BUDGET_S} s; load: $(uptime | sed 's/.*load/load/')"
  locked bash -c "$(declare -f pretrain); WORK=$WORK VOCAB=$VOCAB CONFIG=$CONFIG PRETRAIN_LR=$PRETRAIN_LR \
    pretrain $name $steps $out" 2> "$WORK/pretrain_$name.log"
  echo "$name: $sec_per_step s/step calibrated, $steps steps; training $(log_seconds "$WORK/pretrain_$name.log" 'Training: global batch' 'step [0-9]+/') s, whole run $(log_seconds "$WORK/pretrain_$name.log" '' '') s; load after: $(uptime | sed 's/.*load average: //')" | tee -a "$WORK/pretrain_summary.txt"
done

finetune() {  # finetune LR NAME [INIT_CHECKPOINT]: the same recipe for every starting point
  local lr=$1 name=$2 init=${3:-}
  for seed in $SEEDS; do
    local run="$WORK/finetune/lr$lr/$name/seed$seed"
    [ -f "$run/eval_results.txt" ] && continue
    mkdir -p "$run"
    python run_classifier_mgpu.py --task_name=tsv --data_dir="$SHARED/classify/chnsenticorp" \
      --vocab_file="$VOCAB" --bert_config_file="$CONFIG" --output_dir="$run" \
      ${init:+--init_checkpoint="$init"} --do_train --do_eval --max_seq_length=128 \
      --train_batch_size=32 --eval_batch_size=64 --learning_rate="$lr" --num_train_epochs=2 \
      --n_gpus=2 --log_every_n_steps=50 --save_checkpoints_steps=100000 \
      --random_seed="$seed" 2> "$run.log"
  done
}
for lr in $FINETUNE_LRS; do
  finetune "$lr" none
  for name in $OBJECTIVES; do
    finetune "$lr" "$name" "$WORK/pretrain_$name/export/bert_model.ckpt"
  done
  echo "== ChnSentiCorp dev accuracy (2 epochs, 2 x 32, lr $lr), per seed and mean"
  for name in none $OBJECTIVES; do
    grep -h '^eval_accuracy' "$WORK"/finetune/lr$lr/$name/seed*/eval_results.txt | awk -v n="$name" \
      '{s += $3; v = v sprintf(" %.4f", $3); k += 1} END {printf "%-8s%s  mean %.4f (%d seeds)\n", n, v, s / k, k}'
  done
done
echo "== does each pretrained encoder still depend on its input? (benchmarks/encoder_collapse.py)"
checkpoints=(none)
for name in $OBJECTIVES; do checkpoints+=("$WORK/pretrain_$name/export/bert_model.ckpt"); done
python benchmarks/encoder_collapse.py --bert_config_file="$CONFIG" --vocab_file="$VOCAB" \
  --tsv="$SHARED/classify/chnsenticorp/dev.tsv" "${checkpoints[@]}" 2> /dev/null
