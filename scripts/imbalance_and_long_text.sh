#!/usr/bin/env bash
# Class weights and sliding windows on real data (ChnSentiCorp), from random initialisation:
#
#   1. imbalance: the training set subsampled to 1 negative : 10 positive (every positive, every
#      10th negative), dev subsampled the same way; plain cross-entropy against
#      --class_weights=balanced, SEEDS seeds each; eval macro-F1, negative F1, accuracy.
#   2. long documents: the longest 20% (in characters) of the training and dev documents;
#      --long_text=truncate (head) against --long_text=sliding (mean pooling, windows side by
#      side: --doc_stride=126), SEEDS seeds. Both train 4 epochs: over documents for truncate,
#      over windows for sliding (so sliding takes more steps: the table gives them), and
#      truncate once more with as many steps as sliding took.
#
# Prints one markdown table per experiment (mean and spread over the seeds) and the machine.
#
#   bash scripts/imbalance_and_long_text.sh                 # DATA, OUT, SEEDS overridable
#   DATA=/path/to/chnsenticorp OUT=/tmp/imb SEEDS="1 2 3" bash scripts/imbalance_and_long_text.sh
#
# The model is scripts/small_chinese_bert_config.json (2 layers, hidden 128) with random
# weights: no pretrained checkpoint, so the figures compare the options, not the best scores.
# 15 trainings with the default 3 seeds, each a few minutes on 2 cores: about an hour.
source "$(dirname "$0")/help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-/work/shared/data/classify/chnsenticorp}
OUT=${OUT:-/tmp/bert-mgpu-imbalance}
SEEDS=${SEEDS:-1 2 3}
PYTHON=${PYTHON:-${BERT_MGPU_VENV:-.venv}/bin/python}
CONFIG=scripts/small_chinese_bert_config.json
VOCAB=vocab/chinese_vocab.txt
mkdir -p "$OUT/runs"

"$PYTHON" - "$DATA" "$OUT" <<'EOF'
import os, sys
data, out = sys.argv[1:3]

def read(name):
  with open(os.path.join(data, name), encoding="utf-8") as f:
    return [line.rstrip("\n").split("\t") for line in f if line.strip()]

def write(folder, name, rows):
  os.makedirs(os.path.join(out, folder), exist_ok=True)
  with open(os.path.join(out, folder, name), "w", encoding="utf-8") as f:
    f.write("".join("%s\t%s\n" % (text, label) for text, label in rows))

for split in ("train", "dev"):
  rows = read(split + ".tsv")
  kept = set(id(r) for r in [r for r in rows if r[1] == "negative"][::10])
  imbalanced = [r for r in rows if r[1] == "positive" or id(r) in kept]  # input order
  write("imbalanced", split + ".tsv", imbalanced)
  cut = sorted(len(r[0]) for r in rows)[int(len(rows) * 0.8)]
  longest = [r for r in rows if len(r[0]) >= cut]
  write("longest", split + ".tsv", longest)
  print("%s: imbalanced %d (%d negative); longest 20%%: %d documents of >= %d characters" % (
      split, len(imbalanced), len(kept), len(longest), cut))
EOF

run() {  # run <name> <data folder> <flags...>
  local name=$1 data=$2
  shift 2
  if [ -f "$OUT/runs/$name/eval_results.txt" ]; then return; fi
  rm -rf "$OUT/runs/$name"
  nice -n 10 "$PYTHON" run_classifier_mgpu.py --task_name=tsv --data_dir="$OUT/$data" \
    --vocab_file=$VOCAB --bert_config_file=$CONFIG --output_dir="$OUT/runs/$name" \
    --max_seq_length=128 --train_batch_size=32 --eval_batch_size=32 --learning_rate=5e-4 \
    --do_train --do_eval --save_checkpoints_steps=100000 --log_every_n_steps=100 "$@" \
    > "$OUT/runs/$name.log" 2>&1 || { tail -5 "$OUT/runs/$name.log"; exit 1; }
  echo "$name: $(grep -E '^(eval_accuracy|macro_f1) ' "$OUT/runs/$name/eval_results.txt" | tr '\n' ' ') ($(grep -o '[0-9.]* examples/sec' "$OUT/runs/$name.log" | tail -1))"
}

start=$(date +%s)
for seed in $SEEDS; do
  run "plain-$seed" imbalanced --random_seed=$seed --num_train_epochs=4
  run "balanced-$seed" imbalanced --random_seed=$seed --num_train_epochs=4 --class_weights=balanced
  run "truncate-$seed" longest --random_seed=$seed --num_train_epochs=4
  run "sliding-$seed" longest --random_seed=$seed --num_train_epochs=4 --long_text=sliding \
    --doc_stride=126
  # Truncation given as many updates as the windows took (4 epochs of 4,783 windows / 32).
  run "truncate_597_steps-$seed" longest --random_seed=$seed --num_train_steps=597
done

"$PYTHON" - "$OUT/runs" "$SEEDS" <<'EOF'
import os, sys
import numpy as np
runs, seeds = sys.argv[1], sys.argv[2].split()

def results(name):
  with open(os.path.join(runs, name, "eval_results.txt")) as f:
    return {k: float(v) for k, v in (line.strip().split(" = ") for line in f)}

for title, names, keys in (
    ("1:10 negative:positive", ("plain", "balanced"),
     ("macro_f1", "f1_negative", "recall_negative", "precision_negative", "eval_accuracy")),
    ("longest 20% of the documents", ("truncate", "truncate_597_steps", "sliding"),
     ("eval_accuracy", "macro_f1", "eval_loss", "global_step"))):
  print("\n%s (%d seeds: mean, min-max)\n" % (title, len(seeds)))
  print("| run | " + " | ".join(keys) + " |")
  print("| --- |" + " --- |" * len(keys))
  for name in names:
    values = {k: [results("%s-%s" % (name, s))[k] for s in seeds] for k in keys}
    print("| %s | " % name + " | ".join("%.3f (%.3f-%.3f)" % (np.mean(v), min(v), max(v))
                                       for v in values.values()) + " |")
EOF
echo
echo "$(date -u +%Y-%m-%d), $(( $(date +%s) - start )) s"
"$PYTHON" benchmarks/machine.py 2>/dev/null || true
