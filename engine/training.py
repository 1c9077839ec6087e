"""The training loop shared by every run_*_mgpu.py script.

A script supplies a `tower_fn(features, global_batch) -> (loss, outputs)` that builds its model
for one tower, and an `input_fn(rows, seed, shard) -> tf.data.Dataset`. This module builds the
towers (through tower_utils), the optimizer, checkpointing, logging and TensorBoard summaries,
and runs the loop with a plain Session and Saver. Scripts never learn how many towers or
processes there are: `global_batch` gives a tower the normaliser of a token-averaged loss, and
`shard` names the part of the data this process reads (pass it to input_data).

Checkpoints (engine/checkpoints.py). A run resumes from the newest intact checkpoint of its
output_dir and continues from its global_step. A save happens only when every saved variable is
finite; a non-finite loss stops the run (InputError) and leaves the last finite checkpoint as
the latest, so a rerun with a lower learning rate resumes from good weights. A run stopped with
Ctrl-C or SIGTERM (core.errors.Interrupted, or another exception that TensorFlow's C code made
of it: engine.cli.interrupt_behind) saves the step it reached before exiting. Only
stock-named variables are saved (float32, also under --use_fp16/--use_bf16); allreduce replica
copies, gradient accumulators and the loss scale are not (see tower_utils and optimization).
Eval and predict run in engine/inference.py.

Speed options (TrainSpec fields, from the shared flags): `precision` fp16 (dynamic loss scaling)
or bf16 mixed precision, `use_xla`, `optimizer` (adamw / lamb), and `parallel`
(tower_utils.ParallelSpec: towers, reduction, accumulation of K micro-batches per update -- K-1
runs that only accumulate, then one that reduces and applies -- and the processes of a
multi-process run). Every batch is stamped with tf.timestamp() as it leaves the input; a run
that starts before its batch was ready waited for input, and the log reports the share of step
time spent waiting in each logging interval.
"""

import collections
import os
import signal
import time

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from core.errors import InputError
from core import formatting
from engine import checkpoints as checkpoint_lib
from engine import cli
from engine import divergence
from engine import head_first
from engine import input_data
from engine import run_info
import modeling
import optimization
from parallel import cluster
import tower_utils

_TRAIN_SPEC_FIELDS = [
    "output_dir",  # checkpoints and summaries
    "parallel",  # tower_utils.ParallelSpec: towers, reduction, accumulation, processes
    "batch_size_per_tower",  # --train_batch_size
    "num_train_steps",
    "num_warmup_steps",
    "learning_rate",
    "init_checkpoint",  # may be None
    "save_checkpoints_steps",
    "log_every_n_steps",
    "keep_checkpoint_max",
    "seed",
    "precision",  # "fp32", "fp16" (with dynamic loss scaling) or "bf16"
    "use_xla",  # compile the towers with XLA
    "optimizer",  # "adamw" or "lamb"
    "model_digest",  # names the model config; every process of a run must have the same
    "layerwise_lr_decay",  # D < 1: layer k of L learns at lr * D^(L-k) (optimization.py)
    "agreed_flags",  # ((flag, value), ...): the MODEL and UPDATE flags (common_flags), which
                     # every process of a run must share
    "head_first_steps",  # updates during which what init_checkpoint restores stays still
                         # while the heads it lacks learn; (--head_first_steps, 0: none)
    "init_companions",  # ((checkpoint, scope), ...): more checkpoints to restore the
                        # variables under scope from (e.g. ELECTRA's generator)
    "num_examples",  # the training examples, for the plan's log line (None: not counted)
]


class TrainSpec(collections.namedtuple("TrainSpec", _TRAIN_SPEC_FIELDS,
                                       defaults=("fp32", False, "adamw", "", 1.0, (), 0,
                                                 (), None))):
  """What training.train needs, checked once where it is built."""

  def __new__(cls, *args, **kwargs):
    spec = super(TrainSpec, cls).__new__(cls, *args, **kwargs)
    if spec.precision not in PRECISIONS:
      raise InputError("precision %r: expected one of %s" % (spec.precision,
                                                             ", ".join(PRECISIONS)))
    if spec.optimizer not in optimization.OPTIMIZERS:
      raise InputError("--optimizer=%s: expected one of %s" %
                       (spec.optimizer, ", ".join(optimization.OPTIMIZERS)))
    if not 0.0 < spec.layerwise_lr_decay <= 1.0:
      raise InputError("--layerwise_lr_decay=%s: expected a number > 0 and <= 1" %
                       spec.layerwise_lr_decay)
    if spec.head_first_steps < 0:
      raise InputError("--head_first_steps=%s: expected an integer >= 0" % spec.head_first_steps)
    if not isinstance(spec.parallel, tower_utils.ParallelSpec):
      raise TypeError("TrainSpec.parallel must be a tower_utils.ParallelSpec (parallel_spec())")
    return spec


PRECISIONS = {"fp32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}
# Added to each batch by train(): when the batch left the input (seconds since epoch).
_READY_TIME = "_batch_ready_time"
# A float16 run that keeps skipping updates at the minimum loss scale is diverging.
_MAX_CONSECUTIVE_SKIPS = 50

TrainGraph = collections.namedtuple("TrainGraph", [
    "train_op",  # applies one update; its value is global_step afterwards
    "accumulate_ops",  # None, or (first, add): micro-batches 1 and 2..K-1 of an update
    "loss",  # mean tower loss of the micro-batch, over every process
    "scheduled_learning_rate",  # float32 scalar: the warm-up and decay schedule at this step
    "loss_scale",  # float32 scalar Tensor, or None without loss scaling
    "global_step",
    "sync_op",  # gives every copy of the variables the chief's values (after init/restore)
    "ready_time",  # float64 scalar: when the micro-batch left the input, or None
    "strategy",  # the parallel strategy: savable_variables(), is_chief, consistency_check()
    "grads_and_vars",  # replica 0's reduced (gradient, variable) pairs of the update
    "grad_norm",  # float32 scalar: the global norm of those gradients (before clipping)
    "metrics",  # dict name -> float32 [2] (numerator, denominator) over this process's towers
    "hold",  # optimization.Hold of the head-first phase, or None
])

# A training tower's outputs named METRIC_PREFIX + name are metrics to log: float32 [2] Tensors
# (numerator, denominator), e.g. (correct masked-LM predictions, predictions); see `metric`.
METRIC_PREFIX = "metric/"


def metric(numerator, denominator):
  """A training metric of a tower (float32 [2]): the loop logs sum(numerators) /
  sum(denominators) over towers and steps. Return it as outputs[METRIC_PREFIX + name]."""
  return tf.stack([tf.cast(numerator, tf.float32), tf.cast(denominator, tf.float32)])


def global_batch_size(spec):
  """Rows per update of TrainSpec `spec`: batch_size_per_tower * towers * processes *
  accumulation steps."""
  return tower_utils.global_batch_size(spec.parallel, spec.batch_size_per_tower)


def build_train_graph(tower_fn, features, spec, new_parts=0):
  """Builds the towers, the gradient reduction and the update of `spec` in the default graph.

  Args:
    tower_fn: as in `train`.
    features: dict of Tensors [batch_size_per_tower * n_towers, ...]: this process's
      micro-batch.
    spec: TrainSpec.
    new_parts: the heads that spec.init_checkpoint lacks (head_first.new_parts): they learn
      first, the rest held still (head_first.plan).

  Returns:
    TrainGraph. Build the Saver (over strategy.savable_variables()) after this call.
  """
  features = dict(features)
  ready_time = features.pop(_READY_TIME, None)
  host = tower_utils.input_device(spec.parallel)
  with tf.device(host):  # Bookkeeping scalars on the host, as tf_cnn_benchmarks has them.
    global_step = tf.train.get_or_create_global_step()
    loss_scale = optimization.DynamicLossScale() if spec.precision == "fp16" else None
  towers = tower_utils.build_towers(
      _in_precision(tower_fn, PRECISIONS[spec.precision]), features, spec.parallel,
      loss_scale=loss_scale.scale if loss_scale else None, use_xla=spec.use_xla)
  hold = head_first.plan(spec, [v for _, v in towers.replica_grads_and_vars[0]], new_parts)
  train_op, scheduled_learning_rate = optimization.create_replicated_train_op(
      towers.replica_grads_and_vars, spec.learning_rate, spec.num_train_steps,
      spec.num_warmup_steps, global_step=global_step, optimizer=spec.optimizer,
      loss_scale=loss_scale, layerwise_lr_decay=spec.layerwise_lr_decay, hold=hold)
  grad_norm = optimization.global_norm([g for g, _ in towers.grads_and_vars if g is not None])
  with tf.device(host):  # The outputs are joined there.
    metrics = {name[len(METRIC_PREFIX):]: tf.reduce_sum(tf.reshape(value, [-1, 2]), axis=0)
               for name, value in towers.outputs.items() if name.startswith(METRIC_PREFIX)}
  return TrainGraph(train_op, towers.accumulate_ops, towers.loss, scheduled_learning_rate,
                    loss_scale.scale if loss_scale else None, global_step,
                    towers.strategy.post_init_op(), ready_time, towers.strategy,
                    towers.grads_and_vars, grad_norm, metrics, hold)


def _in_precision(tower_fn, dtype):
  """tower_fn building its BertModel(s) in compute dtype `dtype` (variables stay float32)."""

  def tower_fn_in_precision(features, global_batch):
    with modeling.compute_dtype_scope(dtype):
      return tower_fn(features, global_batch)

  return tower_fn_in_precision


def stamp_ready_time(dataset):
  """Adds each batch's ready time (tf.timestamp()) as it leaves `dataset`.

  The stamp is taken by a map followed by a one-batch prefetch, so it is the time the batch was
  produced, ahead of the step that consumes it unless the input is too slow.
  """

  def stamp(features):
    features = dict(features)
    features[_READY_TIME] = tf.timestamp()
    return features

  return input_data.plain_map(dataset, stamp).prefetch(1)


def run_update(sess, train_graph, accum_steps, final_fetches):
  """Runs one update: accum_steps - 1 accumulating micro-batches, then the applying one.

  Args:
    sess: Session.
    train_graph: TrainGraph.
    accum_steps: micro-batches per update.
    final_fetches: dict of fetches for the applying run (train_graph.train_op among them);
      every run also fetches "loss" and "ready" (the batch's ready time, when the graph has it).

  Returns:
    (results of the applying run, mean loss over the micro-batches, seconds spent waiting for
    input over the micro-batches).
  """
  losses, waited = [], 0.0
  for k in range(accum_steps):
    if k + 1 < accum_steps:
      fetches = {"op": train_graph.accumulate_ops[0 if k == 0 else 1]}
    else:
      fetches = dict(final_fetches)
    fetches["loss"] = train_graph.loss
    if train_graph.ready_time is not None:
      fetches["ready"] = train_graph.ready_time
    start = time.time()
    results = sess.run(fetches)
    losses.append(results["loss"])
    if train_graph.ready_time is not None:
      waited += max(0.0, results["ready"] - start)
  return results, float(np.mean(losses)), waited


class _StepLogger(object):
  """Logs step, loss, learning rate, examples/sec, ETA and input wait; writes them as summaries."""

  def __init__(self, writer, global_batch_size, num_train_steps, start_step):
    self._writer = writer
    self._global_batch_size = global_batch_size
    self._num_train_steps = num_train_steps
    self._last_step = start_step
    self._last_time = time.time()
    self._losses = []
    self._waited = 0.0
    self._updates_that_waited = 0
    self._updates = 0
    self._metrics = collections.OrderedDict()

  def add_loss(self, loss, waited=0.0, metrics=None):
    """Records an applied update's loss, the seconds it waited for input and its metrics
    (dict name -> (numerator, denominator))."""
    self._losses.append(float(loss))
    self.add_input_wait(waited)
    for name, value in (metrics or {}).items():
      self._metrics[name] = self._metrics.get(name, np.zeros(2)) + np.asarray(value, np.float64)

  def add_input_wait(self, waited):
    """Records the input wait of an update (skipped ones too: their time counts)."""
    self._waited += waited
    self._updates += 1
    # Under a millisecond is the hand-over from the prefetch buffer, not starvation.
    self._updates_that_waited += int(waited > 1e-3)

  def log(self, step, scheduled_learning_rate, summary_proto=None):
    """Logs the interval since the last call, ending at `step`."""
    now = time.time()
    steps = max(step - self._last_step, 1)
    elapsed = max(now - self._last_time, 1e-9)
    examples_per_sec = steps * self._global_batch_size / elapsed
    eta_seconds = (self._num_train_steps - step) * elapsed / steps
    mean_loss = float(np.mean(self._losses)) if self._losses else float("nan")
    wait_share = self._waited / elapsed
    metrics = collections.OrderedDict(
        (name, num / den) for name, (num, den) in self._metrics.items() if den > 0)
    logging.info("step %d/%d  loss %.4f  %slr %.3e  %.1f examples/sec  ETA %s  input wait %.1f%% "
                 "of step time (%d of %d steps waited)", step, self._num_train_steps, mean_loss,
                 "".join("%s %.4f  " % item for item in metrics.items()), scheduled_learning_rate,
                 examples_per_sec, formatting.format_seconds(eta_seconds), 100.0 * wait_share,
                 self._updates_that_waited, self._updates)
    if self._writer is not None:
      if summary_proto is not None:
        self._writer.add_summary(summary_proto, step)
      self._writer.add_summary(tf.Summary(value=[
          tf.Summary.Value(tag="examples_per_sec", simple_value=examples_per_sec),
          tf.Summary.Value(tag="loss_mean", simple_value=mean_loss),
          tf.Summary.Value(tag="input_wait_share", simple_value=wait_share)] + [
              tf.Summary.Value(tag=name, simple_value=value)
              for name, value in metrics.items()]), step)
      self._writer.flush()
    self._last_step, self._last_time, self._losses = step, now, []
    self._metrics = collections.OrderedDict()
    self._waited, self._updates_that_waited, self._updates = 0.0, 0, 0
    return examples_per_sec


def train(tower_fn, input_fn, spec, periodic_eval=None):
  """Trains until global_step reaches spec.num_train_steps, in this process and its peers.

  In a multi-process run every process calls this with the same spec. They meet first and
  agree on the flags and model (tower_utils.join_processes), take the step of the chief's
  latest checkpoint, and read disjoint shards of the data; only the chief restores, writes
  checkpoints and summaries, and the others receive its weights (strategy.post_init_op). Every
  process returns when training is done; evaluation, prediction and export are the chief's
  (the run script's main returns in the others).

  Args:
    tower_fn: callable(features dict of Tensors [batch_size_per_tower, ...], GlobalBatch) ->
      (scalar loss Tensor, outputs dict). Builds the training model (dropout on) for one tower.
    input_fn: callable(rows, seed, shard) -> infinite tf.data.Dataset of feature dicts with
      batches of exactly `rows` rows (one micro-batch of this process's towers), reading only
      input_data.Shard `shard` of the data.
    spec: TrainSpec.
    periodic_eval: optional periodic_eval.PeriodicEval: the chief evaluates the checkpoint it
      saves every periodic_eval.every_n_steps steps and at the end; when it says stop, every
      process stops at that step (see _EarlyStop).

  Returns:
    dict with "global_step" and "loss" (of the last applied update).
  """
  tf.io.gfile.makedirs(spec.output_dir)
  checkpoint_lib.check_init_checkpoint(spec.init_checkpoint)
  checkpoint_lib.remove_partial_checkpoints(spec.output_dir)
  resume_from = checkpoint_lib.latest_checkpoint(spec.output_dir)
  chiefs = _join(spec, periodic_eval, checkpoint_lib.checkpoint_step(resume_from))
  start_step = chiefs["start_step"]
  if _nothing_to_train(spec, chiefs):
    return _end_of_training(spec, {"global_step": start_step, "loss": float("nan")})
  _log_plan(spec, start_step)
  parallel = spec.parallel
  graph = tf.Graph()
  with graph.as_default():
    run = _build_run(tower_fn, input_fn, spec, start_step, chiefs["new_parts"], periodic_eval)
    graph.finalize()
    chief = run.train_graph.strategy.is_chief
    writer = tf.summary.FileWriter(spec.output_dir, graph) if chief else None
    checkpoints = checkpoint_lib.Checkpoints(run.saver if chief else None, spec.output_dir,
                                             run.finite, resume_from)
    with tower_utils.new_session(parallel, spec.use_xla) as sess:
      sess.run(run.init_op)
      checkpoints.restore(sess)
      with cluster.peer_faults(parallel):
        sess.run(run.train_graph.sync_op)
        _check_consistent(sess, run.consistency, parallel, "start")
        result = _train_loop(sess, run.train_graph, spec, run.summary_op, checkpoints, writer,
                             run.early_stop)
        _check_consistent(sess, run.consistency, parallel, "end")
      cluster.leave_together(sess, run.parting, parallel.cluster,
                             parallel.collective_timeout_s)
    if writer:
      writer.close()
    if periodic_eval:
      periodic_eval.close()
  return _end_of_training(spec, result)


def _nothing_to_train(spec, chiefs):
  """Whether the chief's checkpoint is already at the last step or stopped early (logged)."""
  start_step = chiefs["start_step"]
  if start_step >= spec.num_train_steps:
    logging.info("Checkpoint in %s is already at step %d >= num_train_steps=%d; nothing to train",
                 spec.output_dir, start_step, spec.num_train_steps)
    return True
  if chiefs["stopped_early"]:
    logging.info("Training stopped early at step %d (no improvement since step %d); nothing "
                 "to train", start_step, chiefs["best_step"])
    return True
  return False


def _log_plan(spec, start_step):
  """The one log line of the training plan: the examples, the global batch and its factors,
  the steps (all, and this run's), the speed options."""
  parallel = spec.parallel
  logging.info("***** Training: %sglobal batch %d (%d x %d towers x %d processes x %d "
               "accumulation steps), %d steps; this run: steps %d -> %d, precision %s, XLA %s, "
               "reduction %s, optimizer %s *****",
               "" if spec.num_examples is None else "%d examples, " % spec.num_examples,
               global_batch_size(spec), spec.batch_size_per_tower, parallel.n_towers,
               parallel.cluster.num_processes, parallel.accum_steps, spec.num_train_steps,
               start_step, spec.num_train_steps, spec.precision,
               "on" if spec.use_xla else "off", parallel.reduction, spec.optimizer)


def _join(spec, periodic_eval, resume_step):
  """Meets the other processes (tower_utils.join_processes); returns the chief's facts:
  start_step, stopped_early, best_step and new_parts (the chief's win: only it has the
  checkpoints and best_results.txt)."""
  stopped = periodic_eval is not None and periodic_eval.patience_exhausted(resume_step)
  new_parts = 0
  if spec.head_first_steps != 0 and spec.parallel.cluster.is_chief:
    new_parts = head_first.new_parts(spec.init_checkpoint, spec.init_companions)
  return tower_utils.join_processes(spec.parallel, _must_agree(spec, periodic_eval), {
      "start_step": resume_step, "stopped_early": int(stopped),
      "best_step": periodic_eval.best_step if stopped else 0, "new_parts": new_parts})


# What _build_run puts in the default graph for the loop: the TrainGraph, the merged summaries,
# the Saver, the init op, the processes' weight checksums, the all-finite check of the saved
# variables, the _EarlyStop (or None) and the barrier all processes pass before they part.
_Run = collections.namedtuple("_Run", ["train_graph", "summary_op", "saver", "init_op",
                                       "consistency", "finite", "early_stop", "parting"])


def _build_run(tower_fn, input_fn, spec, start_step, new_parts, periodic_eval):
  """Builds the input, the TrainGraph and what the loop runs with it (a _Run) in the
  default graph; the chief records the schedule and, at step 0, restores init_checkpoint."""
  parallel = spec.parallel
  tf.set_random_seed(spec.seed)
  with tf.device(tower_utils.input_device(parallel)):
    # A resumed run gets a new shuffle order rather than replaying the first batches.
    dataset = input_fn(spec.batch_size_per_tower * parallel.n_towers, spec.seed + start_step,
                       tower_utils.input_shard(parallel))
    features = tf.data.make_one_shot_iterator(stamp_ready_time(dataset)).get_next()
  train_graph = build_train_graph(tower_fn, features, spec, new_parts)
  strategy = train_graph.strategy
  if strategy.is_chief:
    _note_schedule(spec, start_step, train_graph.hold)
  if start_step == 0 and spec.init_checkpoint and strategy.is_chief:
    checkpoint_lib.restore_from_init_checkpoint(
        spec.init_checkpoint, strategy.savable_variables(), spec.init_companions)
  with tf.device(tower_utils.input_device(parallel)):  # Summaries are the host's.
    tf.summary.scalar("loss", train_graph.loss)
    tf.summary.scalar("learning_rate", train_graph.scheduled_learning_rate)
    if train_graph.loss_scale is not None:
      tf.summary.scalar("loss_scale", train_graph.loss_scale)
    summary_op = tf.summary.merge_all()
  tower_utils.mark_step("update", [_update_fetches(train_graph, summary_op, True),
                                   train_graph.loss, train_graph.ready_time])
  if train_graph.accumulate_ops:
    tower_utils.mark_step("accumulate", [train_graph.accumulate_ops[0], train_graph.loss,
                                         train_graph.ready_time])
  with tf.device(tower_utils.input_device(parallel)):  # Files are the chief's.
    saver = tf.train.Saver(strategy.savable_variables(),
                           max_to_keep=spec.keep_checkpoint_max, save_relative_paths=True)
  return _Run(train_graph, summary_op, saver,
              tf.group(tf.global_variables_initializer(), tf.local_variables_initializer()),
              strategy.consistency_check(),
              checkpoint_lib.all_finite(strategy.savable_variables()),
              _EarlyStop(periodic_eval, strategy) if periodic_eval else None,
              strategy.sum_over_processes(tf.constant(1.0)))


def _note_schedule(spec, start_step, hold):
  """Records the learning-rate schedule in run_info.json; a resumed run whose schedule differs
  from the one its checkpoint was trained under (e.g. more epochs) is told how the rate jumps,
  and one whose head-first phase changed is told that too."""
  schedule = {"num_train_steps": spec.num_train_steps,
              "num_warmup_steps": spec.num_warmup_steps, "learning_rate": spec.learning_rate}
  head_steps = hold.until_step if hold else 0
  old = (run_info.read(spec.output_dir) or {}).get(run_info.SCHEDULE)
  old_head_steps = (old or {}).pop("head_first_steps", 0)
  if start_step and old and old_head_steps != head_steps:
    logging.warning("Resuming at step %d with a head-first phase of %d steps, but the run "
                    "began with %d: the checkpoint's weights %s", start_step, head_steps,
                    old_head_steps, "are frozen until step %d" % head_steps
                    if start_step < head_steps else "train from here on")
  if start_step and old and old != schedule:
    before = optimization.learning_rate_at(start_step, restart_at=old_head_steps, **old)
    now = optimization.learning_rate_at(start_step, restart_at=head_steps, **schedule)
    logging.warning(
        "Resuming at step %d under another learning-rate schedule: %d steps (%d warm-up) at "
        "peak %g before, %d steps (%d warm-up) at peak %g now, so the rate at step %d jumps "
        "from %.3g to %.3g. Keep --num_train_epochs/--num_train_steps and --learning_rate to "
        "continue the same schedule", start_step, old["num_train_steps"],
        old["num_warmup_steps"], old["learning_rate"], spec.num_train_steps,
        spec.num_warmup_steps, spec.learning_rate, start_step, before, now)
  if head_steps:
    schedule["head_first_steps"] = head_steps
  run_info.record(spec.output_dir, run_info.SCHEDULE, schedule)


def _must_agree(spec, periodic_eval=None):
  """What every process of a run must share, besides the parallel settings (named for errors):
  every MODEL and UPDATE flag (spec.agreed_flags), the model's identity and what the run
  derives from them."""
  agreed = collections.OrderedDict(("--%s" % name, repr(value) if isinstance(value, float)
                                    else value) for name, value in spec.agreed_flags)
  return collections.OrderedDict(list(agreed.items()) + [
      ("--eval_every_n_steps", periodic_eval.every_n_steps if periodic_eval else 0),
      ("--early_stopping_patience", periodic_eval.patience if periodic_eval else 0),
      ("--train_batch_size", spec.batch_size_per_tower),
      ("precision (--use_fp16/--use_bf16)", spec.precision),
      ("--optimizer", spec.optimizer),
      ("--learning_rate", repr(spec.learning_rate)),
      ("--layerwise_lr_decay", repr(spec.layerwise_lr_decay)),
      ("number of training steps (from --num_train_steps, or the training data and "
       "--num_train_epochs)", spec.num_train_steps),
      ("number of warm-up steps", spec.num_warmup_steps),
      ("model (--bert_config_file, --max_seq_length, vocabulary, task, labels, input layout)",
       spec.model_digest),
  ])


def _end_of_training(spec, result):
  """Returns `result`; a process other than the chief says that its part is done."""
  if not spec.parallel.cluster.is_chief:
    logging.info("Training done at step %d; the chief (%s) evaluates, predicts and exports",
                 result["global_step"], spec.parallel.cluster.describe(0))
  return result


def _check_consistent(sess, consistency, parallel, when):
  """Raises RuntimeError unless every process holds the same weights (a multi-process check)."""
  if parallel.cluster.num_processes == 1:
    return
  low, high = sess.run(consistency)
  if low != high:
    raise RuntimeError("at the %s of training the processes' weights differ (checksums %r to "
                       "%r)" % (when, low, high))
  logging.info("Weights identical in all %d processes at the %s of training (checksum %.17g)",
               parallel.cluster.num_processes, when, low)


class _EarlyStop(object):
  """Evaluation during training in a run of one or several processes.

  The chief evaluates (periodic_eval.PeriodicEval) and decides whether to stop; at each
  evaluation step every process then learns the decision from one scalar all-reduce of the
  chief's vote, so all of them stop at the same step. The others wait in that all-reduce while
  the chief evaluates, so one evaluation must end within --collective_timeout_s.
  """

  def __init__(self, periodic_eval, strategy):
    """Builds the vote's all-reduce (a no-op in one process); call before graph.finalize()."""
    self._periodic_eval = periodic_eval
    self._strategy = strategy
    self._vote = tf.placeholder(tf.float32, [], name="early_stop_vote")
    self._votes = strategy.sum_over_processes(self._vote)

  def due(self, step):
    return self._periodic_eval.due(step)

  def __call__(self, sess, step, checkpoint):
    """Evaluates `checkpoint` of `step` (the chief); returns whether every process stops."""
    stop = self._strategy.is_chief and self._periodic_eval(step, checkpoint)
    if self._strategy.cluster.num_processes == 1:
      return stop
    return sess.run(self._votes, {self._vote: float(stop)}) > 0

  def final(self, step, checkpoint):
    """The evaluation at the end of training (the chief; no vote: everyone stops anyway)."""
    if self._strategy.is_chief:
      self._periodic_eval(step, checkpoint)


def _train_loop(sess, train_graph, spec, summary_op, checkpoints, writer, early_stop=None):
  """Runs updates until global_step reaches spec.num_train_steps; saves on the way and at the end.

  With early_stop (_EarlyStop), also saves and evaluates at its steps and at the end, and stops
  when it says so, after the save.

  Returns:
    dict with "global_step" and "loss" (of the last applied update).
  """
  step = int(sess.run(train_graph.global_step))
  logger = _StepLogger(writer, global_batch_size(spec), spec.num_train_steps, step)
  report = None
  if train_graph.hold and step < train_graph.hold.until_step:
    report = head_first.Report(train_graph.hold, spec.output_dir if writer else None)
  loss_value = float("nan")
  skips = 0
  watch = divergence.Watch()
  try:
    while step < spec.num_train_steps:
      log_now = (step + 1) % spec.log_every_n_steps == 0 or step + 1 == spec.num_train_steps
      results, loss, waited = run_update(sess, train_graph, spec.parallel.accum_steps,
                                         _update_fetches(train_graph, summary_op, log_now))
      if int(results["step"]) == step:
        skips = _log_skipped_step(step, results["loss_scale"], skips + 1, checkpoints, watch)
        logger.add_input_wait(waited)
        continue
      step, loss_value, skips = int(results["step"]), loss, 0
      if watch.observe(step, loss_value, float(results["grad_norm"])):
        if not np.isfinite(loss_value):
          raise _diverged("the loss became %s at step %d" % (loss_value, step), step,
                          checkpoints, watch)
        if watch.onset == step:
          logging.warning("step %d: the loss (%g) or gradient norm (%g) left its normal range; "
                          "checkpoints from here on are not resume points if the run diverges",
                          step, loss_value, results["grad_norm"])
      logger.add_loss(loss_value, waited, results.get("metrics"))
      if report:
        report.observe(step, results.get("metrics", {}))
      if log_now:
        logger.log(step, results["lr"], results["summary"])
      evaluate = early_stop is not None and early_stop.due(step)
      if (step % spec.save_checkpoints_steps == 0 or evaluate) and step < spec.num_train_steps:
        _save_finite(sess, step, checkpoints, watch)
        if evaluate and early_stop(sess, step, checkpoints.latest):
          break
  except (KeyboardInterrupt, Exception) as e:  # pylint: disable=broad-except
    interrupt = cli.interrupt_behind(e)
    if interrupt is None:
      raise
    raise _interrupted(interrupt, sess, train_graph, checkpoints)
  if step < spec.num_train_steps:
    logging.info("Stopped early at step %d; %s", step, checkpoints.where())
  else:
    _save_finite(sess, step, checkpoints, watch)
  if watch.onset is not None:
    _warn_out_of_range(step, loss_value, watch)
  if early_stop is not None:
    early_stop.final(step, checkpoints.latest)
  return {"global_step": step, "loss": float(loss_value)}


def _update_fetches(train_graph, summary_op, log_now):
  """What the applying run of an update fetches: the step, learning rate and gradient norm, the
  loss scale and metrics when the graph has them, the summaries when the step is logged."""
  fetches = {"step": train_graph.train_op, "lr": train_graph.scheduled_learning_rate,
             "grad_norm": train_graph.grad_norm}
  if log_now:
    fetches["summary"] = summary_op
  if train_graph.loss_scale is not None:
    fetches["loss_scale"] = train_graph.loss_scale
  if train_graph.metrics:
    fetches["metrics"] = train_graph.metrics
  return fetches


def _warn_out_of_range(step, loss_value, watch):
  """The end of a run whose loss left its normal range (divergence.Watch) and stayed finite."""
  logging.warning(
      "training ended at step %d with the loss (%g) outside its normal range since step %d "
      "(the lowest smoothed loss was %g): the weights are finite but may be far from useful; "
      "the checkpoints before step %d were saved in the normal range. If the results are "
      "poor, rerun with a lower --learning_rate in a new --output_dir", step, loss_value,
      watch.onset, watch.lowest_loss, watch.onset - 1)


def _save_finite(sess, step, checkpoints, watch):
  """Saves at `step`; a non-finite weight stops the run instead (InputError)."""
  if not checkpoints.save(sess, step):
    raise _diverged("the weights became non-finite by step %d" % step, step, checkpoints, watch)


def _diverged(what, step, checkpoints, watch):
  """The InputError of a run whose loss or weights stopped being finite at `step`.

  The checkpoints saved since the loss left its normal range (divergence.Watch) are set aside
  and the divergence is recorded in run_info.json, so the advised rerun resumes from a safe
  checkpoint (or from --init_checkpoint when there is none).
  """
  first_unsafe = watch.first_unsafe_step(step)
  onset = watch.onset if watch.onset is not None else step
  safe, folder, moved = checkpoints.set_aside(first_unsafe, step)
  if not checkpoints.is_chief:
    return InputError("%s: training diverged; the chief sets its checkpoints aside. Rerun every "
                      "process with a lower --learning_rate" % what)
  run_info.record_divergence(checkpoints.output_dir, {
      "step": step, "onset_step": onset, "moved_steps": moved,
      "moved_to": os.path.basename(folder) if folder else None,
      "resume_from": os.path.basename(safe) if safe else None})
  set_aside = ""
  if moved:
    set_aside = (" The checkpoints of steps %s hold weights from after that (a checkpoint's "
                 "weights give the next step's loss) and were moved to %s." %
                 (", ".join(str(s) for s in moved), folder))
  if safe:
    rerun = ("it resumes from %s (step %d), the last checkpoint whose weights come from "
             "before" % (safe, checkpoint_lib.checkpoint_step(safe)))
  else:
    rerun = ("it starts again from --init_checkpoint (or from scratch without one): no "
             "checkpoint holds weights from before")
  return InputError("%s: training diverged (the loss left its normal range at step %d) and "
                    "stopped without saving the broken weights.%s Rerun with a lower "
                    "--learning_rate: %s step %d" % (what, onset, set_aside, rerun, onset))


def _interrupted(exc, sess, train_graph, checkpoints):
  """Saves the step the run reached (if its weights are finite); returns a cli.Interrupted."""
  # The signal may have come after an update ran and before the loop saw its step: ask the
  # session, so the checkpoint's name is its global_step.
  step = int(sess.run(train_graph.global_step))
  logging.warning("Interrupted at step %d: saving a checkpoint before exiting", step)
  saved = checkpoints.save(sess, step)
  detail = "stopped at step %d; %s%s; rerun the same command to resume" % (
      step, "" if saved else "the weights were not finite, so they were not saved; ",
      checkpoints.where())
  return cli.Interrupted(getattr(exc, "signum", signal.SIGINT), detail)


def _log_skipped_step(step, loss_scale, skips, checkpoints, watch):
  """Logs an update skipped by loss scaling; returns the count of consecutive skips.

  Raises:
    InputError: after _MAX_CONSECUTIVE_SKIPS skips in a row (the loss itself is diverging).
  """
  logging.warning("update %d skipped: non-finite gradients at loss scale %g (float16 dynamic "
                  "loss scaling); global_step stays %d, the scale halves", step + 1, loss_scale,
                  step)
  if skips >= _MAX_CONSECUTIVE_SKIPS:
    raise _diverged("%d updates in a row had non-finite gradients at step %d (loss scale %g; "
                    "or train without --use_fp16)" % (skips, step, loss_scale), step + 1,
                    checkpoints, watch)
  return skips


