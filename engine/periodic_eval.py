"""Evaluation during training: the metric curve, the best checkpoint and early stopping.

training.train calls a PeriodicEval on the chief every `every_n_steps` updates, right after it
saved the checkpoint of that step, and once more after the final save. Each call:

- evaluates the checkpoint (the script's `evaluate_fn`: a dict of metrics, eval_results.txt's
  keys) and logs the metric with the best so far;
- writes every metric to TensorBoard under output_dir/eval (the eval curves next to the
  training ones) and appends them to output_dir/eval_history.tsv;
- when the watched metric improves (`loss` metrics: lower is better, others higher), records
  it in output_dir/best_results.txt and, with keep_best, copies the checkpoint into
  output_dir/best/, away from the rolling checkpoints that --keep_checkpoint_max deletes;
- returns True (stop training) once `patience` evaluations in a row brought no improvement.

The files are the state: a resumed run reads best_results.txt, so it keeps comparing against
the best of the runs before, and counts patience from the best step (evaluations happen at
multiples of every_n_steps), so a rerun of an early-stopped run does not train again.
"""

import os

from absl import logging
import tensorflow.compat.v1 as tf

from core import atomic_files
from core.errors import InputError
from engine import checkpoints

BEST_DIR = "best"
BEST_RESULTS = "best_results.txt"
EVAL_HISTORY = "eval_history.tsv"
EVAL_SUMMARY_DIR = "eval"


def lower_is_better(metric):
  """Whether a smaller value of `metric` is better (losses), not a larger one."""
  return "loss" in metric


def is_better(metric, new, old):
  """Whether `new` improves on `old` (None: nothing yet) for `metric`."""
  if old is None:
    return True
  return new < old if lower_is_better(metric) else new > old


def read_results(path):
  """A `key = value` file (eval_results.txt's format) as a dict of strings; {} if missing."""
  if not tf.io.gfile.exists(path):
    return {}
  with tf.io.gfile.GFile(path, "r") as f:
    return dict(line.rstrip("\n").split(" = ", 1) for line in f if " = " in line)


def best_checkpoint(output_dir):
  """The checkpoint kept by --keep_best (output_dir/best/model.ckpt-N), or InputError."""
  found = checkpoints.latest_checkpoint(os.path.join(output_dir, BEST_DIR))
  if not found:
    raise InputError("--use_best_checkpoint: %s holds no checkpoint; train with "
                     "--keep_best --eval_every_n_steps=N first" %
                     os.path.join(output_dir, BEST_DIR))
  return found


class PeriodicEval(object):
  """Evaluates a checkpoint every n steps; tracks the best; decides early stopping."""

  def __init__(self, evaluate_fn, every_n_steps, metric, output_dir, keep_best=False,
               patience=0):
    """
    Args:
      evaluate_fn: callable(checkpoint prefix) -> dict metric name -> number (with `metric`).
      every_n_steps: evaluate at the steps that are multiples of this (> 0).
      metric: the metric to watch (a key of evaluate_fn's dict).
      output_dir: the run's output directory.
      keep_best: copy the best checkpoint into output_dir/best/.
      patience: stop after this many evaluations without improvement (0: never).
    """
    self._evaluate_fn = evaluate_fn
    self.every_n_steps = every_n_steps
    self._metric = metric
    self._output_dir = output_dir
    self._keep_best = keep_best
    self._patience = patience
    self._writer = None
    self._last_step = None
    best = read_results(os.path.join(output_dir, BEST_RESULTS))
    if best and best.get("best_metric") != metric:
      raise InputError("%s watches best_metric=%s, not --best_metric=%s: keep the metric of "
                       "the run, or use a new --output_dir" %
                       (os.path.join(output_dir, BEST_RESULTS), best.get("best_metric"), metric))
    self.best_value = float(best[metric]) if best else None
    self.best_step = int(best["global_step"]) if best else None

  @property
  def patience(self):
    """Evaluations without improvement before training stops (0: never)."""
    return self._patience

  def due(self, step):
    """Whether `step` is an evaluation step."""
    return step % self.every_n_steps == 0

  def patience_exhausted(self, step):
    """Whether the evaluations after the best one, up to `step`, used up the patience."""
    if not self._patience or self.best_step is None:
      return False
    return (step - self.best_step) // self.every_n_steps >= self._patience

  def __call__(self, step, checkpoint):
    """Evaluates `checkpoint` (of `step`); returns whether training should stop early."""
    if step == self._last_step:
      return self.patience_exhausted(step)
    self._last_step = step
    results = self._evaluate_fn(checkpoint)
    if self._metric not in results:
      raise InputError("--best_metric=%s: the evaluation gives no such metric (it gives %s)" %
                       (self._metric, ", ".join(sorted(results))))
    value = float(results[self._metric])
    self._record(step, results)
    if is_better(self._metric, value, self.best_value):
      self.best_value, self.best_step = value, step
      if self._keep_best:
        self._keep(checkpoint)
      self._write_best(step, results)
    logging.info("Eval at step %d: %s = %.6g (best %.6g at step %d%s)", step, self._metric,
                 value, self.best_value, self.best_step,
                 ", kept in %s" % os.path.join(self._output_dir, BEST_DIR)
                 if self._keep_best else "")
    if self.patience_exhausted(step):
      logging.info("Early stopping at step %d: %s has not improved on %.6g (step %d) in %d "
                   "evaluations (--early_stopping_patience=%d)", step, self._metric,
                   self.best_value, self.best_step, (step - self.best_step) // self.every_n_steps,
                   self._patience)
      return True
    return False

  def close(self):
    if self._writer:
      self._writer.close()
      self._writer = None

  def _record(self, step, results):
    """Adds the evaluation to TensorBoard (output_dir/eval) and eval_history.tsv."""
    numbers = sorted((k, float(v)) for k, v in results.items()
                     if isinstance(v, (int, float)) and k != "global_step")
    if self._writer is None:
      self._writer = tf.summary.FileWriter(os.path.join(self._output_dir, EVAL_SUMMARY_DIR))
    self._writer.add_summary(tf.Summary(value=[
        tf.Summary.Value(tag=name, simple_value=value) for name, value in numbers]), step)
    self._writer.flush()
    path = os.path.join(self._output_dir, EVAL_HISTORY)
    history = ""
    if os.path.isfile(path):  # Rewritten whole with the new row: a full disk cuts no row.
      with open(path, encoding="utf-8") as f:
        history = f.read()
    if not history:
      history = "\t".join(["global_step"] + [name for name, _ in numbers]) + "\n"
    atomic_files.write_text(path, history + "\t".join(
        [str(step)] + ["%.6g" % value for _, value in numbers]) + "\n")

  def _write_best(self, step, results):
    lines = ["best_metric = %s\n" % self._metric, "global_step = %d\n" % step]
    lines += ["%s = %s\n" % (k, v) for k, v in sorted(results.items())
              if k not in ("global_step", "best_metric")]
    atomic_files.write_text(os.path.join(self._output_dir, BEST_RESULTS), "".join(lines))

  def _keep(self, checkpoint):
    """Copies `checkpoint`'s files into output_dir/best/, then removes the previous best.

    Each file is copied under a temporary name and renamed, and the old best goes only once the
    new one is whole, so an interruption leaves an intact best (the newest step in best/).
    """
    best_dir = os.path.join(self._output_dir, BEST_DIR)
    tf.io.gfile.makedirs(best_dir)
    name = os.path.basename(checkpoint)
    old = [f for f in tf.io.gfile.listdir(best_dir)
           if f.startswith("model.ckpt-") and not f.startswith(name + ".")]
    for path in tf.io.gfile.glob(checkpoint + ".*"):
      if path.endswith(".index") or ".data-" in path:
        atomic_files.write_atomically(os.path.join(best_dir, os.path.basename(path)),
                                      atomic_files.copy_writer(path))
    tf.train.update_checkpoint_state(best_dir, name, all_model_checkpoint_paths=[name])
    for f in old:
      atomic_files.remove_quietly(os.path.join(best_dir, f))
