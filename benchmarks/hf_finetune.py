"""One whole fine-tuning job with Hugging Face transformers' Trainer: the HF side of
finetune_side_by_side.py.

Reads a task's train/dev/test TSV files, tokenizes them with the model directory's tokenizer
(truncation to --max_seq_length, no padding: DataCollatorWithPadding pads each batch to its
longest row, transformers' dynamic padding), fine-tunes BertForSequenceClassification with
Trainer, saves the final model, evaluates on dev and writes predict.txt (one label per test row,
input order), as run_classifier_mgpu.py does. The recipe mirrors google-research/bert's
AdamWeightDecay: weight decay 0.01 on all but LayerNorm and bias (Trainer's default exclusion),
epsilon 1e-6, gradient clipping to global norm 1.0, linear warm-up then linear decay to 0 over
exactly the updates run_classifier_mgpu.py makes (int(examples / batch * epochs)).

Prints one JSON line: dev accuracy, updates, seconds per phase, versions and threads.

  python benchmarks/hf_finetune.py --task=mrpc --data_dir=../shared/data/glue/MRPC \
    --model_dir=path/to/hf_model --output_dir=/tmp/hf_mrpc --max_seq_length=96 --batch_size=32 \
    --epochs=2 --learning_rate=5e-5 --seed=1 --threads=2
"""

import argparse
import collections
import json
import os
import sys
import time

# The layout of each task's files. text_a/text_b/label are 0-based columns; test_* the same for
# test.tsv (None: the task has no test file here). labels: in the order of run_classifier_mgpu.py's
# processor (label id i is labels[i]). ours_flags: how run_classifier_mgpu.py reads the task.
Task = collections.namedtuple(
    "Task", ["header", "text_a", "text_b", "label", "test_header", "test_text_a", "test_text_b",
             "labels", "ours_flags"])
TASKS = {
    # GLUE MRPC: Quality, #1 ID, #2 ID, #1 String, #2 String (test: index, ...), header rows.
    "mrpc": Task(True, 3, 4, 0, True, 3, 4, ["0", "1"], ["--task_name=mrpc"]),
    # GLUE CoLA: source, label, original label, sentence; no header; no test file here.
    "cola": Task(False, 3, None, 1, None, None, None, ["0", "1"], ["--task_name=cola"]),
    # ChnSentiCorp: text<TAB>label, no header; test.tsv: qid<TAB>text_a with a header.
    "chnsenticorp": Task(False, 0, None, 1, True, 1, None, ["negative", "positive"],
                         ["--task_name=tsv"]),
}


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--task", required=True, choices=sorted(TASKS), help="Task (file layout).")
  p.add_argument("--data_dir", required=True, help="Folder with train.tsv, dev.tsv, test.tsv.")
  p.add_argument("--model_dir", required=True,
                 help="Hugging Face BERT directory (config.json, model.safetensors, vocab.txt).")
  p.add_argument("--output_dir", required=True, help="Where the model and predict.txt go.")
  p.add_argument("--max_seq_length", type=int, default=128, help="Truncation length (tokens).")
  p.add_argument("--batch_size", type=int, default=32, help="Training rows per update.")
  p.add_argument("--eval_batch_size", type=int, default=64, help="Rows per eval/predict batch.")
  p.add_argument("--epochs", type=float, default=3.0, help="Epochs (sets the update count).")
  p.add_argument("--learning_rate", type=float, default=5e-5, help="Peak learning rate.")
  p.add_argument("--warmup_proportion", type=float, default=0.1,
                 help="Share of updates of linear warm-up.")
  p.add_argument("--seed", type=int, default=1, help="Seed of initialisation and shuffling.")
  p.add_argument("--group_by_length", action="store_true",
                 help="Trainer's length-grouped sampler (train_sampling_strategy).")
  p.add_argument("--skip_predict", action="store_true", help="No test-set prediction.")
  p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (intra-op).")
  return p.parse_args(argv)


def read_split(task, path, is_test):
  """(texts_a, texts_b or None, label strings or None) of one TSV file."""
  header = task.test_header if is_test else task.header
  col_a = task.test_text_a if is_test else task.text_a
  col_b = task.test_text_b if is_test else task.text_b
  # Split as classifier_data.read_tsv does (a tab always separates, quotes are text).
  with open(path, encoding="utf-8-sig") as f:
    rows = [line.rstrip("\r\n").split("\t") for line in f]
  rows = [r for r in rows[1 if header else 0:] if r != [""]]
  texts_a = [r[col_a] for r in rows]
  texts_b = [r[col_b] for r in rows] if col_b is not None else None
  labels = None if is_test else [r[task.label] for r in rows]
  return texts_a, texts_b, labels


def encode(tokenizer, task, path, max_seq_length, is_test):
  """A list of feature dicts (input_ids, token_type_ids, attention_mask[, labels]), unpadded."""
  texts_a, texts_b, labels = read_split(task, path, is_test)
  enc = tokenizer(texts_a, texts_b, truncation=True, max_length=max_seq_length)
  label_ids = {name: i for i, name in enumerate(task.labels)}
  rows = []
  for i in range(len(texts_a)):
    row = {key: enc[key][i] for key in enc.keys()}
    if labels is not None:
      row["labels"] = label_ids[labels[i]]
    rows.append(row)
  return rows


def main(argv=None):
  args = parse_args(argv)
  start = time.time()
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  torch.set_num_threads(args.threads)
  transformers.logging.set_verbosity_warning()
  task = TASKS[args.task]
  tokenizer = transformers.AutoTokenizer.from_pretrained(args.model_dir)
  split_path = lambda name: os.path.join(args.data_dir, name + ".tsv")
  train = encode(tokenizer, task, split_path("train"), args.max_seq_length, False)
  dev = encode(tokenizer, task, split_path("dev"), args.max_seq_length, False)
  test = (encode(tokenizer, task, split_path("test"), args.max_seq_length, True)
          if task.test_text_a is not None and not args.skip_predict else None)
  # The update count of run_classifier_mgpu.py (common_flags.epoch_schedule), so both sides make
  # the same number of updates with the same warm-up.
  max_steps = max(1, int(len(train) / args.batch_size * args.epochs))
  warmup_steps = int(max_steps * args.warmup_proportion)
  model = transformers.AutoModelForSequenceClassification.from_pretrained(
      args.model_dir, num_labels=len(task.labels))
  training_args = transformers.TrainingArguments(
      output_dir=args.output_dir, per_device_train_batch_size=args.batch_size,
      per_device_eval_batch_size=args.eval_batch_size, learning_rate=args.learning_rate,
      max_steps=max_steps, warmup_steps=warmup_steps, lr_scheduler_type="linear",
      weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-6,
      max_grad_norm=1.0, seed=args.seed, use_cpu=True, save_strategy="no", eval_strategy="no",
      logging_steps=50, report_to="none", disable_tqdm=True, dataloader_num_workers=0,
      train_sampling_strategy="group_by_length" if args.group_by_length else "random")
  trainer = transformers.Trainer(
      model=model, args=training_args, train_dataset=train,
      data_collator=transformers.DataCollatorWithPadding(tokenizer), processing_class=tokenizer)
  prepared = time.time()
  trainer.train()
  trainer.save_model(args.output_dir)
  trained = time.time()
  dev_logits = trainer.predict(dev).predictions
  accuracy = float(np.mean(np.argmax(dev_logits, -1) == np.array([r["labels"] for r in dev])))
  evaluated = time.time()
  if test is not None:
    test_logits = trainer.predict(test).predictions
    with open(os.path.join(args.output_dir, "predict.txt"), "w", encoding="utf-8") as f:
      f.write("".join(task.labels[i] + "\n" for i in np.argmax(test_logits, -1)))
  done = time.time()
  print(json.dumps({
      "eval_accuracy": accuracy, "updates": max_steps, "warmup_updates": warmup_steps,
      "seconds": {"prepare": prepared - start, "train": trained - prepared,
                  "eval": evaluated - trained, "predict": done - evaluated},
      "test_rows": len(test) if test is not None else 0,
      "torch": torch.__version__, "transformers": transformers.__version__,
      "threads": torch.get_num_threads(), "optim": str(training_args.optim),
      "attention": getattr(model.config, "_attn_implementation", "default")}))
  sys.stdout.flush()


if __name__ == "__main__":
  main()
