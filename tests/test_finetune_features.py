"""Fine-tuning conveniences: evaluation during training and the best checkpoint
(engine/periodic_eval.py), early stopping, --predict_file (TSV, plain text, stdin), --num_train_steps."""

import io
import os
import re
import shutil

from absl import flags
import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from classifier import data as classifier_data
from core.errors import InputError
from engine import checkpoints
from engine import common_flags
from engine import periodic_eval
from engine import predict_input
from engine import run_helpers
from engine import training
from script_runner import CHINESE_VOCAB, run_script, \
    write_tiny_bert_config
from test_classifier import _make_task

FLAGS = flags.FLAGS


class _Run(object):
  """A fake training run: variable v holds the step; rolling checkpoints, 2 kept."""

  def __init__(self, output_dir):
    self.output_dir = str(output_dir)
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.v = tf.get_variable("v", [], initializer=tf.zeros_initializer())
      self.step = tf.placeholder(tf.float32, [])
      self.assign = tf.assign(self.v, self.step)
      self.saver = tf.train.Saver(max_to_keep=2)
      self.sess = tf.Session()

  def save(self, step):
    self.sess.run(self.assign, {self.step: step})
    return self.saver.save(self.sess, os.path.join(self.output_dir, "model.ckpt"), step)


def _curve_eval(curve):
  """evaluate_fn reading the metrics of a known curve {step: (accuracy, loss)} off v."""

  def evaluate(checkpoint):
    step = int(tf.train.load_variable(checkpoint, "v"))
    accuracy, loss = curve[step]
    return {"eval_accuracy": accuracy, "eval_loss": loss, "global_step": step}

  return evaluate


CURVE = {2: (0.60, 0.90), 4: (0.75, 0.50), 6: (0.85, 0.70), 8: (0.80, 0.40), 10: (0.70, 0.60),
         12: (0.72, 0.65)}


@pytest.mark.parametrize("metric,best_step", [("eval_loss", 8), ("eval_accuracy", 6)])
def test_best_checkpoint_is_the_step_with_the_best_metric_and_survives_rolling_deletion(
    tmp_path, metric, best_step):
  run = _Run(tmp_path)
  evaluator = periodic_eval.PeriodicEval(_curve_eval(CURVE), 2, metric, run.output_dir,
                                         keep_best=True, patience=0)
  for step in sorted(CURVE):
    assert not evaluator(step, run.save(step))
  evaluator.close()
  assert evaluator.best_step == best_step
  best = periodic_eval.best_checkpoint(run.output_dir)
  assert best.endswith(os.path.join("best", "model.ckpt-%d" % best_step))
  assert tf.train.load_variable(best, "v") == best_step  # the weights of that step
  assert not os.path.exists(os.path.join(run.output_dir, "model.ckpt-%d.index" % best_step))
  assert sorted(os.listdir(os.path.join(run.output_dir, "best"))) == [
      "checkpoint", "model.ckpt-%d.data-00000-of-00001" % best_step,
      "model.ckpt-%d.index" % best_step]
  results = periodic_eval.read_results(os.path.join(run.output_dir, "best_results.txt"))
  assert results["best_metric"] == metric and int(results["global_step"]) == best_step
  history = open(os.path.join(run.output_dir, "eval_history.tsv")).read().splitlines()
  assert history[0] == "global_step\teval_accuracy\teval_loss"
  assert [int(line.split("\t")[0]) for line in history[1:]] == sorted(CURVE)
  assert os.listdir(os.path.join(run.output_dir, "eval"))  # TensorBoard eval curves


def test_early_stopping_counts_evaluations_without_improvement_and_resumes(tmp_path):
  run = _Run(tmp_path)
  evaluator = periodic_eval.PeriodicEval(_curve_eval(CURVE), 2, "eval_loss", run.output_dir,
                                         keep_best=True, patience=2)
  stops = [evaluator(step, run.save(step)) for step in sorted(CURVE)[:5]]
  # Best loss at step 8; steps 10 and 12 do not improve it: the second of them stops.
  assert stops == [False] * 5
  assert evaluator(12, run.save(12))
  # A rerun of the stopped run reads the best back and does not train again; another metric
  # in the same output_dir is refused.
  again = periodic_eval.PeriodicEval(_curve_eval(CURVE), 2, "eval_loss", run.output_dir,
                                     patience=2)
  assert again.best_step == 8 and again.patience_exhausted(12)
  assert not again.patience_exhausted(10)
  with pytest.raises(InputError, match="best_metric=eval_loss, not --best_metric=macro_f1"):
    periodic_eval.PeriodicEval(_curve_eval(CURVE), 2, "macro_f1", run.output_dir)
  assert periodic_eval.is_better("eval_loss", 0.3, 0.4)
  assert not periodic_eval.is_better("eval_accuracy", 0.3, 0.4)


class _Tsv(classifier_data.TsvProcessor):
  """The tsv task with a fixed label list (no labels.txt needed)."""

  def get_labels(self):
    return ["neg", "pos"]


def test_predict_file_reads_tsv_plain_text_and_stdin(tmp_path):
  processor = _Tsv(str(tmp_path))
  read = lambda path, **kw: [e.text_a for e in predict_input.read(
      path, kw.pop("fmt", "auto"), processor.read_test_file, classifier_data.text_example, **kw)]
  tsv = tmp_path / "new.tsv"
  tsv.write_text("qid\ttext_a\n0\t第一\n1\t第二\n\n", encoding="utf-8")
  assert read(str(tsv)) == ["第一", "第二"]  # as test.tsv: header and blank line skipped
  text = tmp_path / "new.txt"
  text.write_text("第一\n\n第三\n", encoding="utf-8")
  assert read(str(text)) == ["第一", "", "第三"]  # an empty line is an example
  assert read("-", stdin=io.BytesIO("甲\n乙\t\n".encode("utf-8")), fmt="text") == ["甲", "乙\t"]
  with pytest.raises(InputError, match=r"^<stdin>:2: "):
    read("-", stdin=io.BytesIO(b"ok\n\xff\n"))
  with pytest.raises(InputError, match=r"^<stdin>: empty file"):
    read("-", stdin=io.BytesIO(b""))
  with pytest.raises(InputError, match="--predict_file=.*nope.txt: no such file"):
    read(str(tmp_path / "nope.txt"))


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
  """One run: 2 towers, bucketing, --num_train_steps, eval every 4 steps, the best kept, eval
  and predict (plain text on stdin) with the best checkpoint."""
  root = tmp_path_factory.mktemp("finetune")
  data_dir = _make_task(root / "data")
  config = write_tiny_bert_config(root / "bert_config.json", 21128)
  out = root / "out"
  args = ["--task_name=tsv", "--data_dir=%s" % data_dir, "--vocab_file=%s" % CHINESE_VOCAB,
          "--bert_config_file=%s" % config, "--output_dir=%s" % out, "--max_seq_length=16",
          "--train_batch_size=4", "--eval_batch_size=4", "--predict_batch_size=3",
          "--learning_rate=1e-3", "--log_every_n_steps=4", "--n_gpus=2"]
  proc = run_script(
      "run_classifier_mgpu.py", *args, "--do_train", "--do_eval", "--num_train_steps=12",
      "--eval_every_n_steps=4", "--keep_best", "--best_metric=eval_loss",
      "--keep_checkpoint_max=1", "--use_best_checkpoint", "--bucket_by_length",
      "--bucket_window=2", "--predict_file=-", "--predict_output=-",
      input="酒店好服务喜欢\n\n酒店差服务讨厌\n")
  assert proc.returncode == 0, proc.stderr[-4000:]
  return root, args, out, proc


def test_training_evaluates_keeps_the_best_and_predicts_stdin_with_it(finetuned):
  _, _, out, proc = finetuned
  assert "step 12/12" in proc.stderr  # --num_train_steps
  history = (out / "eval_history.tsv").read_text().splitlines()
  steps = [int(line.split("\t")[0]) for line in history[1:]]
  assert steps == [4, 8, 12]
  column = history[0].split("\t").index("eval_loss")
  losses = [float(line.split("\t")[column]) for line in history[1:]]
  best_step = steps[int(np.argmin(losses))]
  best = periodic_eval.read_results(str(out / "best_results.txt"))
  assert int(best["global_step"]) == best_step
  assert os.path.exists(out / "best" / ("model.ckpt-%d.index" % best_step))
  results = periodic_eval.read_results(str(out / "eval_results.txt"))
  assert int(results["global_step"]) == best_step  # --use_best_checkpoint
  assert "Evaluating and predicting with %s" % (out / "best" / ("model.ckpt-%d" % best_step)) \
      in proc.stderr
  assert proc.stdout.splitlines() and len(proc.stdout.splitlines()) == 3  # the empty line too
  assert set(proc.stdout.splitlines()) <= {"pos", "neg"}
  assert "eval: 10 examples in" in proc.stderr and "examples/sec" in proc.stderr
  assert "predict: 3 examples in" in proc.stderr


def test_export_with_use_best_checkpoint_exports_the_best_not_the_latest(finetuned, tmp_path):
  _, args, out, _ = finetuned
  copy = tmp_path / "out"
  shutil.copytree(out, copy)
  best = copy / "best" / ("model.ckpt-%s" %
                          periodic_eval.read_results(str(out / "best_results.txt"))["global_step"])
  args = [a for a in args if not a.startswith("--output_dir")] + ["--output_dir=%s" % copy]
  proc = run_script("run_classifier_mgpu.py", *args, "--do_train", "--num_train_steps=16")
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert tf.train.latest_checkpoint(str(copy)) == str(copy / "model.ckpt-16")  # not the best
  proc = run_script("run_classifier_mgpu.py", *args, "--do_export", "--use_best_checkpoint")
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert "Exporting %s as a SavedModel" % best in proc.stderr
  assert (copy / "saved_model" / "saved_model.pb").exists()


def test_predict_file_tsv_needs_no_data_dir_and_writes_predict_output(finetuned, tmp_path):
  root, args, out, _ = finetuned
  tsv = tmp_path / "new.tsv"
  tsv.write_text("qid\ttext_a\n" + "".join("%d\t酒店%s服务\n" % (i, w) for i, w in
                                           enumerate(["好", "差", "满意", "失望", "后悔"])),
                 encoding="utf-8")
  args = [a for a in args if not a.startswith("--data_dir")]
  proc = run_script("run_classifier_mgpu.py", *args, "--predict_file=%s" % tsv,
                    "--predict_output=%s" % (tmp_path / "labels.txt"))
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert len((tmp_path / "labels.txt").read_text().splitlines()) == 5
  probabilities = (tmp_path / "labels_probabilities.tsv").read_text().splitlines()
  assert len(probabilities) == 5 and len(probabilities[0].split("\t")) == 2


@pytest.mark.parametrize("args,message", [
    (["--do_train", "--keep_best"], "--keep_best needs evaluation during training: set "
     "--eval_every_n_steps"),
    (["--do_train", "--early_stopping_patience=2"], "--early_stopping_patience needs evaluation"),
    (["--eval_every_n_steps=-1"], "--eval_every_n_steps=-1: expected an integer >= 0"),
    (["--do_train", "--eval_every_n_steps=5", "--use_best_checkpoint"], "needs --keep_best"),
])
def test_evaluation_flags_that_cannot_work_are_refused_before_anything_runs(args, message):
  import run_classifier_mgpu  # pylint: disable=g-import-not-at-top,unused-import
  FLAGS.unparse_flags()
  try:
    FLAGS(["run_classifier_mgpu.py"] + args)
    with pytest.raises(InputError, match=re.escape(message)):
      common_flags.check_periodic_eval_flags()
  finally:
    FLAGS.unparse_flags()


def test_num_train_steps_replaces_the_epochs_when_given():
  import run_classifier_mgpu  # pylint: disable=g-import-not-at-top,unused-import
  FLAGS.unparse_flags()
  try:
    FLAGS(["run_classifier_mgpu.py", "--num_train_steps=7", "--warmup_proportion=0.5"])
    assert run_helpers.epoch_schedule(1000, global_batch_size=10) == (7, 3)
    FLAGS.unparse_flags()
    FLAGS(["run_classifier_mgpu.py", "--num_train_epochs=2"])
    assert run_helpers.epoch_schedule(100, global_batch_size=10) == (20, 2)
    assert run_helpers.epoch_schedule(100, global_batch_size=40) == (5, 0)
  finally:
    FLAGS.unparse_flags()


def test_early_stopping_ends_training_with_the_checkpoint_saved_and_a_rerun_trains_no_more(
    tmp_path, caplog):
  from test_speed_features import _input_fn, _spec, _tower_fn  # pylint: disable=g-import-not-at-top
  curve = {2: 0.5, 4: 0.4, 6: 0.45, 8: 0.3, 10: 0.2}
  evaluated = []

  def evaluate(checkpoint):
    step = checkpoints.checkpoint_step(checkpoint)
    evaluated.append(step)
    return {"eval_loss": curve[step]}

  spec = _spec(output_dir=str(tmp_path), n_towers=1, batch_size_per_tower=3, num_train_steps=10,
               log_every_n_steps=5)
  make = lambda: periodic_eval.PeriodicEval(evaluate, 2, "eval_loss", str(tmp_path),
                                            keep_best=True, patience=1)
  assert training.train(_tower_fn, _input_fn(), spec, make())["global_step"] == 6
  assert evaluated == [2, 4, 6]
  assert checkpoints.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-6")
  assert periodic_eval.best_checkpoint(str(tmp_path)).endswith("model.ckpt-4")
  with caplog.at_level("INFO"):
    assert training.train(_tower_fn, _input_fn(), spec, make())["global_step"] == 6
  assert "Training stopped early at step 6 (no improvement since step 4)" in caplog.text
  assert evaluated == [2, 4, 6]
