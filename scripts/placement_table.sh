#!/usr/bin/env bash
# The placement table of docs/results/placement-and-scaling.md ("Placement on N GPUs, read from
# the graph"): every run script and parallel mode built at BERT-base shape (seq 128, 32 rows per
# GPU) as on a machine with N GPUs (benchmarks/placement_audit.py; nothing runs, no GPU needed),
# one Markdown row per mode: ops left for TensorFlow to place that read another device's tensor,
# ops asked onto a GPU without a GPU kernel, GPU:0's inbound MB per step against the busiest
# other GPU's, and what crosses devices in all. About 1 minute per mode on a 2-core machine.
#   bash scripts/placement_table.sh                 # 8 fake GPUs, in this checkout
#   N_GPUS=4 bash scripts/placement_table.sh
#   ONLY='GPipe|predict' bash scripts/placement_table.sh   # the rows whose name matches
#   REPO=/path/to/other/checkout bash scripts/placement_table.sh   # another commit's graph
#     (that checkout needs tower_utils.mark_step and a copy of benchmarks/placement_audit.py)
source "$(dirname "$0")/help.sh" "$@"
source "$(dirname "$0")/setup_env.sh"
export CUDA_VISIBLE_DEVICES=""
N="${N_GPUS:-8}"
REPO="${REPO:-$REPO_ROOT}"
AUDIT="$REPO/benchmarks/placement_audit.py"
source "$(dirname "$0")/checks.sh"  # fail, is_int, is_positive
is_int "$N" || fail "N_GPUS=$N: expected an integer >= 1"
[ -f "$AUDIT" ] || fail "REPO=$REPO: no benchmarks/placement_audit.py there"
if [ -n "${ONLY:-}" ] && { [[ "" =~ $ONLY ]] || [ $? -ne 2 ]; }; then :
elif [ -n "${ONLY:-}" ]; then fail "ONLY=$ONLY: not a regular expression (bash =~)"; fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

VOCAB="$REPO_ROOT/vocab/chinese_vocab.txt"
COMMON="--bert_config_file=$WORK/bert_base.json --vocab_file=$VOCAB --train_batch_size=32 --n_gpus=$N"
CLF="run_classifier_mgpu.py --task_name=tsv --data_dir=$WORK/clf --max_seq_length=128 $COMMON"
PT="run_pretraining_mgpu.py --input_file=$WORK/pt.tfrecord --do_train $COMMON"
RW="run_rewrite_finetune.py --data_dir=$WORK/rw --max_seq_length=128 --max_target_length=16 $COMMON"
CLUSTER="--worker_hosts=localhost:1,localhost:2 --collective_timeout_s=5"

MATCHED=()
row() {  # row NAME SCRIPT FLAGS...   (OUT=dir: that --output_dir instead of a new one)
  local name="$1"; shift
  if [ -n "${ONLY:-}" ] && ! [[ "$name" =~ $ONLY ]]; then return; fi
  if [ -n "${DRY:-}" ]; then MATCHED+=("$name"); return; fi
  local out="${OUT:-$WORK/out_$RANDOM}"
  (cd "$REPO" && PYTHONPATH="$REPO" python "$AUDIT" --fake_gpus="$N" --row="$name" -- \
    "$@" --output_dir="$out" 2>"$WORK/err") || { echo "| $name | failed: $(tail -1 "$WORK/err") |"; }
}

rows() {
  row "classifier, shared" $CLF --do_train
  row "classifier, allreduce" $CLF --do_train --reduction=allreduce
  row "classifier, shared, 4 accumulation steps" $CLF --do_train --grad_accum_steps=4
  row "classifier, shared, fp16" $CLF --do_train --use_fp16
  row "classifier, allreduce, bf16" $CLF --do_train --reduction=allreduce --use_bf16
  row "classifier, GPipe 2 stages x 4 micro-batches" $CLF --do_train --pipeline_stages=2 --num_micro_batches=4
  row "classifier, 1F1B 2 stages x 4 micro-batches" $CLF --do_train --pipeline_stages=2 --num_micro_batches=4 --pipeline_schedule=1f1b
  mkdir -p "$WORK/trained" && printf 'negative\npositive\n' > "$WORK/trained/labels.txt"
  OUT="$WORK/trained" row "classifier, predict (labels of a trained run)" $CLF --do_predict
  row "pretraining MLM, shared" $PT
  row "pretraining MLM, allreduce" $PT --reduction=allreduce
  row "pretraining ELECTRA, shared" $PT --objective=electra
  row "rewriter, shared" $RW --do_train
  row "classifier, 2 processes, chief (shared: hierarchical)" $CLF --do_train $CLUSTER --task_index=0
  row "classifier, 2 processes, worker" $CLF --do_train $CLUSTER --task_index=1
}
DRY=1 rows
[ "${#MATCHED[@]}" -gt 0 ] || fail "ONLY=$ONLY matches no row name (e.g. 'GPipe|predict')"
python scripts/make_demo_data.py --output_dir "$WORK/clf" --num_train 512 >/dev/null
python - "$WORK" <<'EOF'
import json, os, sys
work = sys.argv[1]
json.dump({"vocab_size": 21128, "hidden_size": 768, "num_hidden_layers": 12,
           "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
           "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
           "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02},
          open(os.path.join(work, "bert_base.json"), "w"))
texts = [line.split("\t")[0] for line in open(os.path.join(work, "clf", "train.tsv"))]
with open(os.path.join(work, "corpus.txt"), "w") as f:
  for i, text in enumerate(texts):
    f.write(text + "\n" + ("\n" if i % 4 == 3 else ""))
os.makedirs(os.path.join(work, "rw"), exist_ok=True)
for split in ("train", "dev", "test"):
  with open(os.path.join(work, "rw", split + ".tsv"), "w") as f:
    f.writelines("%s\t%s\n" % (t, t[:8]) for t in texts[:64])
EOF
python create_pretraining_data.py --input_file="$WORK/corpus.txt" \
  --output_file="$WORK/pt.tfrecord" --vocab_file="$VOCAB" --max_seq_length=128 \
  --max_predictions_per_seq=20 --dupe_factor=1 >/dev/null 2>&1

python "$REPO_ROOT/benchmarks/machine.py" 2>/dev/null | sed -n 1p
echo "graph of $REPO ($(git -C "$REPO" rev-parse --short HEAD)), $N fake GPUs, BERT-base, seq 128, 32 rows per GPU"
python -c "import sys; sys.path.insert(0, '$REPO_ROOT/benchmarks'); import placement_audit; print(placement_audit.TABLE_HEADER)" 2>/dev/null
rows
