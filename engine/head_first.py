"""Head-first training: new heads learn on the checkpoint's frozen weights before they teach it.

A checkpoint often lacks the heads of the objective it is trained further with: an encoder
converted from Hugging Face (sentence-transformers models such as all-MiniLM-L6-v2, fine-tuned
classifiers, exported encoders) has no masked-LM head, and ELECTRA's generator and
replaced-token head are new to any BERT. Trained together from the first update, a random head
sends noise through its gradients into good features (feature distortion: Kumar et al. 2022,
"Fine-Tuning can Distort Pretrained Features", whose fix, linear probing then fine-tuning, this
is). So a run with such a checkpoint first trains only what the checkpoint lacks, with
everything it restored held still; then everything trains under the learning-rate schedule
started again (a whole warm-up and decay), as a run from a checkpoint with its heads would
(optimization.Hold, learning_rate_schedule's restart_at).

This module owns that plan: which parts of the model are new (the heads of
checkpoints.FRESH_PARTS that --init_checkpoint and its companion checkpoints hold nothing of;
the chief reads the checkpoint and tells the other processes, which may not have it, as a bit
mask: `new_parts`), how many updates they get alone (`--head_first_steps`; a checkpoint that has
its heads, such as Google's, trains exactly as without this module whatever the flag says), the
log lines that say what is frozen
until which step, and the report of the training metrics the frozen checkpoint reached (e.g. its
masked-LM accuracy: how much of the text's tokens the checkpoint's features already tell, with
only the new head learnt), in the log and in run_info.json.

It is off by default (--head_first_steps=0), from measurements (docs/pretraining.md, "Head
first, or not"): continuing all-MiniLM-L6-v2 for 400 steps on domain text, a frozen first tenth
(the schedule restarted after it) kept the ordinary words' accuracy (0.97, against 0.94 without
it) but cut what the encoder learnt of the domain's new words (term rows 0.51 against 0.64; the
plain start 0.34): the random head's large early gradients are also what moves the encoder
towards the new text. Hold when keeping the checkpoint's features matters more than new words.
"""

import collections

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from engine import checkpoints
from engine import run_info
import optimization

# run_info.json's key for the plan and the metrics at its end.
RUN_INFO_KEY = "head_first"
# The report averages the metrics over the last share of the head-first updates.
_REPORT_SHARE = 0.25


_PART_SCOPES = tuple(scope for scope, _ in checkpoints.FRESH_PARTS)


def new_parts(init_checkpoint, companions=()):
  """Which heads the checkpoints lack: a bit mask over checkpoints.FRESH_PARTS, bit i set when
  init_checkpoint (with each (checkpoint, scope) companion, under its scope) holds no variable
  under part i's scope. Asked by the chief of a run given --head_first_steps.

  0 without init_checkpoint: a run from scratch restores nothing to hold, so --head_first_steps
  is logged as ignored, as for a checkpoint with every head (plan)."""
  if not init_checkpoint:
    logging.warning("--head_first_steps: ignored without --init_checkpoint (from scratch every "
                    "variable is new: nothing is restored to hold)")
    return 0
  names = set(name for name, _ in tf.train.list_variables(init_checkpoint))
  for checkpoint, scope in companions:
    names.update(name for name, _ in tf.train.list_variables(checkpoint)
                 if name.startswith(scope))
  return sum(1 << i for i, scope in enumerate(_PART_SCOPES)
             if not any(name.startswith(scope) for name in names))


def _scopes(names, scopes=()):
  """A short description of variable names by scope, e.g. 'bert/* (100), cls/predictions/* (5)':
  a name counts under the first of `scopes` it starts with, else under its first level."""
  counts = collections.OrderedDict()
  for name in sorted(names):
    scope = next((s for s in scopes if name.startswith(s)), name.split("/")[0] + "/")
    counts[scope + "*"] = counts.get(scope + "*", 0) + 1
  return ", ".join("%s (%d)" % item for item in counts.items())


def plan(spec, variables, parts):
  """The optimization.Hold of a run (None when nothing is held), logged.

  Args:
    spec: training.TrainSpec (head_first_steps, num_train_steps, num_warmup_steps).
    variables: the model's trainable variables (stock names, replica 0).
    parts: the chief's new_parts bit mask (the same in every process).

  Returns:
    optimization.Hold over every variable outside the new parts, or None: nothing new in the
    model, or head_first_steps 0.
  """
  if not parts or spec.head_first_steps == 0:
    return None
  scopes = tuple(s for i, s in enumerate(_PART_SCOPES) if parts & (1 << i))
  names = [v.op.name for v in variables]
  held = [n for n in names if not n.startswith(scopes)]
  new = [n for n in names if n.startswith(scopes)]
  if not new or not held:
    if spec.head_first_steps:
      logging.warning("--head_first_steps=%d: ignored, --init_checkpoint holds every head of "
                      "the model", spec.head_first_steps)
    return None
  steps = spec.head_first_steps
  logging.info("Head first (--head_first_steps=%d): what --init_checkpoint restores, %s, stays frozen for "
               "updates 1-%d while what it lacks, %s, learns. From update %d on everything "
               "trains, the learning-rate schedule started again (%d warm-up updates, then "
               "decay to 0 at step %d)", steps, _scopes(held), steps, _scopes(new, scopes),
               steps + 1, spec.num_warmup_steps or 0, spec.num_train_steps)
  if steps >= spec.num_train_steps:
    logging.warning("head first: %d >= num_train_steps=%d, so the restored weights stay frozen "
                    "for the whole run (only the new variables train)", steps,
                    spec.num_train_steps)
  return optimization.Hold(tuple(held), steps)


class Report(object):
  """Averages the training metrics of the last updates of the head-first phase and reports them
  when the phase ends (the log, and run_info.json when output_dir is given: the chief)."""

  def __init__(self, hold, output_dir=None):
    self._hold = hold
    self._output_dir = output_dir
    self._from_step = hold.until_step - max(1, int(_REPORT_SHARE * hold.until_step)) + 1
    self._sums = collections.OrderedDict()

  def observe(self, step, metrics):
    """Takes the (numerator, denominator) metrics of the update that reached `step`."""
    if not self._from_step <= step <= self._hold.until_step:
      return
    for name, value in metrics.items():
      self._sums[name] = self._sums.get(name, np.zeros(2)) + np.asarray(value, np.float64)
    if step == self._hold.until_step:
      self._report(step)

  def _report(self, step):
    values = collections.OrderedDict(
        (name, float(num / den)) for name, (num, den) in self._sums.items() if den > 0)
    logging.info("Head first done at step %d: with the checkpoint's weights frozen, the new "
                 "variables reached %s (training batches of steps %d-%d); from step %d on "
                 "everything trains", step, ", ".join("%s %.4f" % item for item in values.items())
                 or "no metric", self._from_step, step, step + 1)
    if self._output_dir:
      record = {"steps": step, "metrics_frozen": values}
      run_info.record(self._output_dir, RUN_INFO_KEY, record)
