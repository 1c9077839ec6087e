"""One whole fine-tuning job with Hugging Face transformers' Trainer: the HF side of
finetune_side_by_side.py.

Reads a task's train/dev/test TSV files, tokenizes them with the model directory's tokenizer
(truncation to --max_seq_length, no padding: DataCollatorWithPadding pads each batch to its
longest row, transformers' dynamic padding), fine-tunes BertForSequenceClassification with
Trainer, saves the final model, evaluates on dev and writes predict.txt (one label per test row,
input order), as run_classifier_mgpu.py does. Trainer makes exactly the updates of
run_classifier_mgpu.py (int(examples / batch * epochs)), clipped to global norm 1.0.

--optimizer=bert (default) gives Trainer the update of google-research/bert and of this
project: AdamWeightDecay (Adam *without bias correction*, beta 0.9/0.999, epsilon 1e-6, decoupled
weight decay 0.01 on all but LayerNorm and bias) under BERT's schedule (linear warm-up to the
peak, and outside warm-up lr x (1 - step / total)). --optimizer=adamw keeps Trainer's own
choice with the same hyper-parameters set in TrainingArguments: torch AdamW *with* bias
correction, and a linear decay from the end of warm-up. The two differ most early in training:
without bias correction the first hundreds of updates are several times larger (at update t
about (1 - 0.9^t) / sqrt(1 - 0.999^t) times: 3.2x at t = 100, 1.5x at t = 600).

Prints one JSON line: dev accuracy and Matthews correlation (mcc), updates, seconds per phase, versions and threads.

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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from classifier import metrics as classifier_metrics  # pylint: disable=g-import-not-at-top,wrong-import-position

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
  p.add_argument("--optimizer", choices=["bert", "adamw"], default="bert",
                 help="bert: BERT's AdamWeightDecay and schedule, as this project trains; adamw: "
                 "Trainer's default torch AdamW and linear schedule (see above).")
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


def bert_optimizer(model, learning_rate, num_train_steps, num_warmup_steps):
  """(optimizer, scheduler) of google-research/bert's optimization.py for `model`, in torch."""
  import torch  # pylint: disable=g-import-not-at-top

  class AdamWeightDecay(torch.optim.Optimizer):
    """Adam without bias correction; weight decay is added to the update (decoupled)."""

    def __init__(self, params, lr):
      super().__init__(params, dict(lr=lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0))

    @torch.no_grad()
    def step(self, closure=None):  # pylint: disable=unused-argument
      for group in self.param_groups:
        beta1, beta2 = group["betas"]
        for param in group["params"]:
          if param.grad is None:
            continue
          state = self.state[param]
          if not state:
            state["m"], state["v"] = torch.zeros_like(param), torch.zeros_like(param)
          state["m"].mul_(beta1).add_(param.grad, alpha=1 - beta1)
          state["v"].mul_(beta2).addcmul_(param.grad, param.grad, value=1 - beta2)
          update = state["m"] / (state["v"].sqrt() + group["eps"])
          if group["weight_decay"]:
            update.add_(param, alpha=group["weight_decay"])
          param.add_(update, alpha=-group["lr"])

  excluded = ("LayerNorm", "layer_norm", "bias")  # optimization.make_optimizer's exclusions
  named = list(model.named_parameters())
  groups = [{"params": [p for n, p in named if not any(x in n for x in excluded)],
             "weight_decay": 0.01},
            {"params": [p for n, p in named if any(x in n for x in excluded)],
             "weight_decay": 0.0}]
  optimizer = AdamWeightDecay(groups, learning_rate)

  def schedule(step):
    """optimization.learning_rate_schedule as a factor of the peak rate."""
    if step < num_warmup_steps:
      return step / num_warmup_steps
    return max(0.0, 1.0 - step / num_train_steps)

  return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


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
  # The update count of run_classifier_mgpu.py (run_helpers.epoch_schedule), so both sides make
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
  optimizers = (bert_optimizer(model, args.learning_rate, max_steps, warmup_steps)
                if args.optimizer == "bert" else (None, None))
  trainer = transformers.Trainer(
      model=model, args=training_args, train_dataset=train, optimizers=optimizers,
      data_collator=transformers.DataCollatorWithPadding(tokenizer), processing_class=tokenizer)
  prepared = time.time()
  trainer.train()
  trainer.save_model(args.output_dir)
  trained = time.time()
  dev_predictions = np.argmax(trainer.predict(dev).predictions, -1)
  dev_labels = np.array([r["labels"] for r in dev])
  accuracy = float(np.mean(dev_predictions == dev_labels))
  mcc = classifier_metrics.matthews_corrcoef(dev_predictions, dev_labels, len(task.labels))
  evaluated = time.time()
  if test is not None:
    test_logits = trainer.predict(test).predictions
    with open(os.path.join(args.output_dir, "predict.txt"), "w", encoding="utf-8") as f:
      f.write("".join(task.labels[i] + "\n" for i in np.argmax(test_logits, -1)))
  done = time.time()
  print(json.dumps({
      "eval_accuracy": accuracy, "mcc": mcc, "updates": max_steps, "warmup_updates": warmup_steps,
      "seconds": {"prepare": prepared - start, "train": trained - prepared,
                  "eval": evaluated - trained, "predict": done - evaluated},
      "test_rows": len(test) if test is not None else 0,
      "torch": torch.__version__, "transformers": transformers.__version__,
      "threads": torch.get_num_threads(),
      "optimizer": args.optimizer if args.optimizer == "bert" else str(training_args.optim),
      "attention": getattr(model.config, "_attn_implementation", "default")}))
  sys.stdout.flush()


if __name__ == "__main__":
  main()
