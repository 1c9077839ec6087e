"""The training and inference loops shared by every run_*_mgpu.py script.

A script supplies a `tower_fn(features, global_batch) -> (loss, outputs)` that builds its model
for one tower, and an `input_fn(rows, seed, shard) -> tf.data.Dataset`. This module builds the
towers (through tower_utils), the optimizer, checkpointing, logging and TensorBoard summaries,
and runs the loop with a plain Session and Saver. Scripts never learn how many towers or
processes there are: `global_batch` gives a tower the normaliser of a token-averaged loss, and
`shard` names the part of the data this process reads (pass it to input_pipeline).

Checkpoints. `tf.train.Saver` writes the data and index files of a checkpoint first and only then
rewrites the `checkpoint` state file, itself through a temporary file and a rename. A run killed
mid-save therefore leaves the previous checkpoint as the latest one, and a re-run restores it and
continues from its global_step. A run stopped with Ctrl-C or SIGTERM saves before exiting. Only
stock-named variables are saved (float32, also under --use_fp16/--use_bf16); allreduce replica
copies, gradient accumulators and the loss scale are not (see tower_utils and optimization).

Speed options (TrainSpec fields, from the shared flags): `precision` fp16 (dynamic loss scaling)
or bf16 mixed precision, `use_xla`, `optimizer` (adamw / lamb), and `parallel`
(tower_utils.ParallelSpec: towers, reduction, accumulation of K micro-batches per update -- K-1
runs that only accumulate, then one that reduces and applies -- and the processes of a
multi-process run). Every batch is stamped with tf.timestamp() as it leaves the input
pipeline; a run that starts before its batch was ready waited for input, and the log reports the
share of step time spent waiting in each logging interval.
"""

import collections
import contextlib
import os
import re
import signal
import sys
import time

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from cli import InputError
import input_pipeline
import modeling
import optimization
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
]


class TrainSpec(collections.namedtuple("TrainSpec", _TRAIN_SPEC_FIELDS,
                                       defaults=("fp32", False, "adamw", ""))):
  """What training.train needs, checked once where it is built."""

  def __new__(cls, *args, **kwargs):
    spec = super(TrainSpec, cls).__new__(cls, *args, **kwargs)
    if spec.precision not in PRECISIONS:
      raise InputError("precision %r: expected one of %s" % (spec.precision,
                                                             ", ".join(PRECISIONS)))
    if spec.optimizer not in optimization.OPTIMIZERS:
      raise InputError("--optimizer=%s: expected one of %s" %
                       (spec.optimizer, ", ".join(optimization.OPTIMIZERS)))
    if not isinstance(spec.parallel, tower_utils.ParallelSpec):
      raise TypeError("TrainSpec.parallel must be a tower_utils.ParallelSpec (parallel_spec())")
    return spec


PRECISIONS = {"fp32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}
# Added to each batch by train(): when the batch left the input pipeline (seconds since epoch).
_READY_TIME = "_batch_ready_time"
# A float16 run that keeps skipping updates at the minimum loss scale is diverging.
_MAX_CONSECUTIVE_SKIPS = 50

TrainGraph = collections.namedtuple("TrainGraph", [
    "train_op",  # applies one update; its value is global_step afterwards
    "accumulate_ops",  # None, or (first, add): micro-batches 1 and 2..K-1 of an update
    "loss",  # mean tower loss of the micro-batch, over every process
    "learning_rate",
    "loss_scale",  # float32 scalar Tensor, or None without loss scaling
    "global_step",
    "sync_op",  # gives every copy of the variables the chief's values (after init/restore)
    "ready_time",  # float64 scalar: when the micro-batch left the input pipeline, or None
    "strategy",  # the parallel strategy: savable_variables(), is_chief, consistency_check()
    "grads_and_vars",  # replica 0's reduced (gradient, variable) pairs of the update
])


def global_batch_size(spec):
  """Rows per update: batch_size_per_tower * n_towers * processes * accumulation steps."""
  parallel = spec.parallel
  return (spec.batch_size_per_tower * parallel.n_towers * parallel.cluster.num_workers *
          parallel.accum_steps)


def build_train_graph(tower_fn, features, spec):
  """Builds the towers, the gradient reduction and the update of `spec` in the default graph.

  Args:
    tower_fn: as in `train`.
    features: dict of Tensors [batch_size_per_tower * n_towers, ...]: this process's
      micro-batch.
    spec: TrainSpec.

  Returns:
    TrainGraph. Build the Saver (over strategy.savable_variables()) after this call.
  """
  features = dict(features)
  ready_time = features.pop(_READY_TIME, None)
  global_step = tf.train.get_or_create_global_step()
  loss_scale = optimization.DynamicLossScale() if spec.precision == "fp16" else None
  towers = tower_utils.build_towers(
      _in_precision(tower_fn, PRECISIONS[spec.precision]), features, spec.parallel,
      loss_scale=loss_scale.scale if loss_scale else None, use_xla=spec.use_xla)
  train_op, learning_rate = optimization.create_replicated_train_op(
      towers.replica_grads_and_vars, spec.learning_rate, spec.num_train_steps,
      spec.num_warmup_steps, global_step=global_step, optimizer=spec.optimizer,
      loss_scale=loss_scale)
  return TrainGraph(train_op, towers.accumulate_ops, towers.loss, learning_rate,
                    loss_scale.scale if loss_scale else None, global_step,
                    towers.strategy.post_init_op(), ready_time, towers.strategy,
                    towers.grads_and_vars)


def _in_precision(tower_fn, dtype):
  """tower_fn building its BertModel(s) in compute dtype `dtype` (variables stay float32)."""

  def tower_fn_in_precision(features, global_batch):
    with modeling.compute_dtype_scope(dtype):
      return tower_fn(features, global_batch)

  return tower_fn_in_precision


def stamp_ready_time(dataset):
  """Adds each batch's ready time (tf.timestamp()) as it leaves `dataset`'s pipeline.

  The stamp is taken by a map followed by a one-batch prefetch, so it is the time the batch was
  produced, ahead of the step that consumes it unless the pipeline is too slow.
  """

  def stamp(features):
    features = dict(features)
    features[_READY_TIME] = tf.timestamp()
    return features

  return dataset.map(stamp).prefetch(1)


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


def checkpoint_exists(prefix):
  """Whether `prefix` names a TF checkpoint (its .index file exists)."""
  return bool(prefix) and tf.io.gfile.exists(prefix + ".index")


def check_init_checkpoint(init_checkpoint):
  """Raises InputError unless `init_checkpoint` is None or an existing checkpoint prefix."""
  if init_checkpoint and not checkpoint_exists(init_checkpoint):
    raise InputError("--init_checkpoint=%s: no checkpoint there (expected %s.index and data "
                     "files, e.g. .../bert_model.ckpt)" % (init_checkpoint, init_checkpoint))


def restore_from_init_checkpoint(init_checkpoint, savable_variables):
  """Overrides the initializers of graph variables found in `init_checkpoint` (by exact name).

  Args:
    init_checkpoint: checkpoint prefix.
    savable_variables: the stock-named variables of the graph (strategy.savable_variables()).

  Raises InputError when a variable's shape differs from the checkpoint's, naming it: that means
  bert_config_file (or the vocab) does not belong to the checkpoint.
  """
  # Model weights only, as in stock BERT: a checkpoint written by a training run also holds
  # global_step and Adam slots, and restoring those would make a new run start at the old step.
  trainable_names = {v.op.name for v in tf.trainable_variables()}
  tvars = [v for v in savable_variables if v.op.name in trainable_names]
  assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(
      tvars, init_checkpoint)
  ckpt_shapes = dict(tf.train.list_variables(init_checkpoint))
  by_name = {v.op.name: v for v in tvars}
  for name in assignment_map:
    graph_shape = by_name[name].shape.as_list()
    if list(ckpt_shapes[name]) != graph_shape:
      raise InputError(
          "--init_checkpoint=%s: variable %s has shape %s there but %s in the model; does "
          "--bert_config_file belong to this checkpoint?" %
          (init_checkpoint, name, list(ckpt_shapes[name]), graph_shape))
  tf.train.init_from_checkpoint(init_checkpoint, assignment_map)
  missing = [v.op.name for v in tvars if v.op.name not in initialized]
  logging.info("Initialized %d of %d trainable variables from %s", len(tvars) - len(missing),
               len(tvars), init_checkpoint)
  for name in missing:
    logging.info("  not in init_checkpoint (trained from scratch): %s", name)


def _latest_step(output_dir):
  """global_step of the latest checkpoint in output_dir, or 0."""
  latest = tf.train.latest_checkpoint(output_dir)
  if not latest:
    return 0
  return int(tf.train.load_variable(latest, "global_step"))


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

  def add_loss(self, loss, waited=0.0):
    """Records an applied update's loss and the seconds it waited for input."""
    self._losses.append(float(loss))
    self.add_input_wait(waited)

  def add_input_wait(self, waited):
    """Records the input wait of an update (skipped ones too: their time counts)."""
    self._waited += waited
    self._updates += 1
    # Under a millisecond is the hand-over from the prefetch buffer, not starvation.
    self._updates_that_waited += int(waited > 1e-3)

  def log(self, step, learning_rate, summary_proto=None):
    """Logs the interval since the last call, ending at `step`."""
    now = time.time()
    steps = max(step - self._last_step, 1)
    elapsed = max(now - self._last_time, 1e-9)
    examples_per_sec = steps * self._global_batch_size / elapsed
    eta_seconds = (self._num_train_steps - step) * elapsed / steps
    mean_loss = float(np.mean(self._losses)) if self._losses else float("nan")
    wait_share = self._waited / elapsed
    logging.info("step %d/%d  loss %.4f  lr %.3e  %.1f examples/sec  ETA %s  input wait %.1f%% "
                 "of step time (%d of %d steps waited)", step, self._num_train_steps, mean_loss,
                 learning_rate, examples_per_sec, _format_seconds(eta_seconds),
                 100.0 * wait_share, self._updates_that_waited, self._updates)
    if self._writer is not None:
      if summary_proto is not None:
        self._writer.add_summary(summary_proto, step)
      self._writer.add_summary(tf.Summary(value=[
          tf.Summary.Value(tag="examples_per_sec", simple_value=examples_per_sec),
          tf.Summary.Value(tag="loss_mean", simple_value=mean_loss),
          tf.Summary.Value(tag="input_wait_share", simple_value=wait_share)]), step)
      self._writer.flush()
    self._last_step, self._last_time, self._losses = step, now, []
    self._waited, self._updates_that_waited, self._updates = 0.0, 0, 0
    return examples_per_sec


def _format_seconds(seconds):
  seconds = int(max(seconds, 0))
  return "%d:%02d:%02d" % (seconds // 3600, (seconds % 3600) // 60, seconds % 60)


class _TerminationGuard(object):
  """Turns SIGTERM into KeyboardInterrupt so the loop saves a checkpoint before exiting."""

  def __enter__(self):
    self._previous = signal.getsignal(signal.SIGTERM)
    try:
      signal.signal(signal.SIGTERM, self._handler)
    except ValueError:  # Not the main thread (e.g. some test runners): nothing to install.
      self._previous = None
    return self

  def _handler(self, signum, frame):
    del signum, frame
    raise KeyboardInterrupt("SIGTERM")

  def __exit__(self, *exc):
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)
    return False


def train(tower_fn, input_fn, spec):
  """Trains until global_step reaches spec.num_train_steps, in this process and its peers.

  In a multi-process run every process calls this with the same spec. They meet first and
  agree on the flags and model (tower_utils.join_processes), take the step of the chief's
  latest checkpoint, and read disjoint shards of the data; only the chief restores, writes
  checkpoints and summaries, and the others receive its weights (strategy.post_init_op). A
  process other than the chief exits (status 0) when training is done: evaluation, prediction
  and export are the chief's.

  Args:
    tower_fn: callable(features dict of Tensors [batch_size_per_tower, ...], GlobalBatch) ->
      (scalar loss Tensor, outputs dict). Builds the training model (dropout on) for one tower.
    input_fn: callable(rows, seed, shard) -> infinite tf.data.Dataset of feature dicts with
      batches of exactly `rows` rows (one micro-batch of this process's towers), reading only
      input_pipeline.Shard `shard` of the data.
    spec: TrainSpec.

  Returns:
    dict with "global_step" and "loss" (of the last applied update).
  """
  tf.io.gfile.makedirs(spec.output_dir)
  check_init_checkpoint(spec.init_checkpoint)
  start_step = tower_utils.join_processes(spec.parallel, _must_agree(spec),
                                          {"start_step": _latest_step(spec.output_dir)})
  start_step = start_step["start_step"]
  if start_step >= spec.num_train_steps:
    logging.info("Checkpoint in %s is already at step %d >= num_train_steps=%d; nothing to train",
                 spec.output_dir, start_step, spec.num_train_steps)
    return _end_of_training(spec, {"global_step": start_step, "loss": float("nan")})
  parallel = spec.parallel
  logging.info("Training %d towers x %d processes x %d examples x %d accumulation steps = global "
               "batch %d, steps %d -> %d; precision %s, XLA %s, reduction %s, optimizer %s",
               parallel.n_towers, parallel.cluster.num_workers, spec.batch_size_per_tower,
               parallel.accum_steps, global_batch_size(spec), start_step, spec.num_train_steps,
               spec.precision, "on" if spec.use_xla else "off", parallel.reduction,
               spec.optimizer)

  graph = tf.Graph()
  with graph.as_default():
    tf.set_random_seed(spec.seed)
    with tf.device(tower_utils.input_device(parallel)):
      # A resumed run gets a new shuffle order rather than replaying the first batches.
      dataset = input_fn(spec.batch_size_per_tower * parallel.n_towers, spec.seed + start_step,
                         tower_utils.input_shard(parallel))
      features = tf.data.make_one_shot_iterator(stamp_ready_time(dataset)).get_next()
    train_graph = build_train_graph(tower_fn, features, spec)
    chief = train_graph.strategy.is_chief
    if start_step == 0 and spec.init_checkpoint and chief:
      restore_from_init_checkpoint(spec.init_checkpoint,
                                   train_graph.strategy.savable_variables())
    tf.summary.scalar("loss", train_graph.loss)
    tf.summary.scalar("learning_rate", train_graph.learning_rate)
    if train_graph.loss_scale is not None:
      tf.summary.scalar("loss_scale", train_graph.loss_scale)
    summary_op = tf.summary.merge_all()
    saver = tf.train.Saver(train_graph.strategy.savable_variables(),
                           max_to_keep=spec.keep_checkpoint_max, save_relative_paths=True)
    init_op = tf.group(tf.global_variables_initializer(), tf.local_variables_initializer())
    consistency = train_graph.strategy.consistency_check()
    graph.finalize()

    writer = tf.summary.FileWriter(spec.output_dir, graph) if chief else None
    checkpoints = _Checkpoints(saver if chief else None, spec.output_dir)
    with tower_utils.new_session(parallel, spec.use_xla) as sess:
      sess.run(init_op)
      checkpoints.restore_latest(sess)
      with _peer_faults(parallel):
        sess.run(train_graph.sync_op)
        _check_consistent(sess, consistency, parallel, "start")
        result = _train_loop(sess, train_graph, spec, summary_op, checkpoints, writer)
        _check_consistent(sess, consistency, parallel, "end")
    if writer:
      writer.close()
  return _end_of_training(spec, result, chief)


def _must_agree(spec):
  """What every process of a run must share, besides the parallel settings (named for errors)."""
  return collections.OrderedDict([
      ("--train_batch_size", spec.batch_size_per_tower),
      ("precision (--use_fp16/--use_bf16)", spec.precision),
      ("--optimizer", spec.optimizer),
      ("--learning_rate", repr(spec.learning_rate)),
      ("number of training steps (from --num_train_steps, or the training data and "
       "--num_train_epochs)", spec.num_train_steps),
      ("number of warm-up steps", spec.num_warmup_steps),
      ("model (--bert_config_file, --max_seq_length, vocabulary)", spec.model_digest),
  ])


def _end_of_training(spec, result, chief=None):
  """Returns `result` in the chief; ends any other process of a multi-process run."""
  if chief is None:
    chief = spec.parallel.cluster.is_chief
  if chief:
    return result
  logging.info("Training done at step %d; the chief (%s) evaluates, predicts and exports",
               result["global_step"], spec.parallel.cluster.describe(0))
  sys.exit(0)


def _check_consistent(sess, consistency, parallel, when):
  """Raises RuntimeError unless every process holds the same weights (a multi-process check)."""
  if not parallel.cluster.tasks:
    return
  low, high = sess.run(consistency)
  if low != high:
    raise RuntimeError("at the %s of training the processes' weights differ (checksums %r to "
                       "%r)" % (when, low, high))
  logging.info("Weights identical in all %d processes at the %s of training (checksum %.17g)",
               parallel.cluster.num_workers, when, low)


class _Checkpoints(object):
  """Restores and saves the run's checkpoints; does nothing in a process that is not the chief."""

  def __init__(self, saver, output_dir):
    self._saver = saver
    self._output_dir = output_dir
    self._prefix = os.path.join(output_dir, "model.ckpt")

  def restore_latest(self, sess):
    latest = tf.train.latest_checkpoint(self._output_dir) if self._saver else None
    if latest:
      logging.info("Resuming from %s", latest)
      self._saver.restore(sess, latest)

  def save(self, sess, step):
    if self._saver:
      self._saver.save(sess, self._prefix, global_step=step)
      logging.info("Saved %s-%d", self._prefix, step)


@contextlib.contextmanager
def _peer_faults(parallel):
  """Turns a lost or silent peer process into a one-line InputError (multi-process runs)."""
  try:
    yield
  except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.AbortedError,
          tf.errors.CancelledError, tf.errors.InternalError) as e:
    if not parallel.cluster.tasks:
      raise
    who = _peer_named_in(str(e), parallel.cluster)
    if isinstance(e, tf.errors.DeadlineExceededError):
      why = "did not answer within --collective_timeout_s=%g s" % parallel.collective_timeout_s
    else:
      why = "dropped out (%s)" % type(e).__name__
    raise InputError("%s %s; %s stops too. Relaunch every process to resume from the chief's "
                     "latest checkpoint" % (who, why, parallel.cluster.describe()))


def _peer_named_in(message, cluster):
  """The other process a TensorFlow error message names ('task 1 (worker:1 at h:p)')."""
  tasks = [(t.job, t.index) for t in cluster.tasks]
  for job, index in re.findall(r"/job:(\w+)/replica:0/task:(\d+)", message):
    if (job, int(index)) in tasks and tasks.index((job, int(index))) != cluster.rank:
      return cluster.describe(tasks.index((job, int(index))))
  return "another process"


def _train_loop(sess, train_graph, spec, summary_op, checkpoints, writer):
  """Runs updates until global_step reaches spec.num_train_steps; saves on the way and at the end.

  Returns:
    dict with "global_step" and "loss" (of the last applied update).
  """
  step = int(sess.run(train_graph.global_step))
  logger = _StepLogger(writer, global_batch_size(spec), spec.num_train_steps, step)
  loss_value = float("nan")
  skips = 0
  with _TerminationGuard():
    try:
      while step < spec.num_train_steps:
        log_now = (step + 1) % spec.log_every_n_steps == 0 or step + 1 == spec.num_train_steps
        fetches = {"step": train_graph.train_op, "lr": train_graph.learning_rate}
        if log_now:
          fetches["summary"] = summary_op
        if train_graph.loss_scale is not None:
          fetches["loss_scale"] = train_graph.loss_scale
        results, loss, waited = run_update(sess, train_graph, spec.parallel.accum_steps, fetches)
        if int(results["step"]) == step:
          skips = _log_skipped_step(step, results["loss_scale"], skips + 1)
          logger.add_input_wait(waited)
          continue
        step, loss_value, skips = int(results["step"]), loss, 0
        if not np.isfinite(loss_value):
          raise RuntimeError("loss became %s at step %d; lower --learning_rate" %
                             (loss_value, step))
        logger.add_loss(loss_value, waited)
        if log_now:
          logger.log(step, results["lr"], results["summary"])
        if step % spec.save_checkpoints_steps == 0 and step < spec.num_train_steps:
          checkpoints.save(sess, step)
    except KeyboardInterrupt:
      logging.warning("Interrupted at step %d: saving a checkpoint before exiting", step)
      checkpoints.save(sess, step)
      raise
  checkpoints.save(sess, step)
  return {"global_step": step, "loss": float(loss_value)}


def _log_skipped_step(step, loss_scale, skips):
  """Logs an update skipped by loss scaling; returns the count of consecutive skips.

  Raises:
    RuntimeError: after _MAX_CONSECUTIVE_SKIPS skips in a row (the loss itself is diverging).
  """
  logging.warning("update %d skipped: non-finite gradients at loss scale %g (float16 dynamic "
                  "loss scaling); global_step stays %d, the scale halves", step + 1, loss_scale,
                  step)
  if skips >= _MAX_CONSECUTIVE_SKIPS:
    raise RuntimeError("%d updates in a row had non-finite gradients at step %d (loss scale "
                       "%g); lower --learning_rate or train without --use_fp16" %
                       (skips, step, loss_scale))
  return skips


def find_checkpoint(output_dir, init_checkpoint):
  """The checkpoint to evaluate or predict with: the latest in output_dir, else init_checkpoint."""
  latest = tf.train.latest_checkpoint(output_dir) if output_dir else None
  if latest:
    return latest
  if init_checkpoint:
    check_init_checkpoint(init_checkpoint)
    return init_checkpoint
  raise InputError("no checkpoint to evaluate or predict with: %s has none and "
                   "--init_checkpoint is not set (train first with --do_train)" % output_dir)


def _check_checkpoint_has(checkpoint, variables):
  """Raises InputError naming the variables of the model that `checkpoint` lacks."""
  saved = dict(tf.train.list_variables(checkpoint))
  missing = [v.op.name for v in variables if v.op.name not in saved]
  if missing:
    raise InputError(
        "checkpoint %s lacks %d variable(s) of the model, e.g. %s: it was not trained for this "
        "task (train with --do_train first, or point --output_dir at a trained model)" %
        (checkpoint, len(missing), ", ".join(missing[:3])))


def _pad_batch(features, global_batch_size):
  """Pads every feature of a (possibly short) batch to global_batch_size rows.

  Returns:
    (padded features dict, is_real float Tensor [global_batch_size]: 1 for real rows).
  """
  first = next(iter(features.values()))
  rows = tf.shape(first)[0]
  padding = global_batch_size - rows
  padded = {}
  for name, t in features.items():
    paddings = [[0, padding]] + [[0, 0]] * (t.shape.ndims - 1)
    p = tf.pad(t, paddings)
    p.set_shape([global_batch_size] + t.shape.as_list()[1:])
    padded[name] = p
  is_real = tf.pad(tf.ones([rows], tf.float32), [[0, padding]])
  is_real.set_shape([global_batch_size])
  return padded, is_real


def run_inference(tower_fn, input_fn, checkpoint, parallel, batch_size_per_tower):
  """Runs the model over a finite dataset and returns every real example's outputs, in order.

  The last batch is padded to the full global batch (so it splits evenly over the towers) and
  the padding rows are dropped from the result: no crash, no lost example.

  Args:
    tower_fn: callable(features, GlobalBatch) -> (loss or None, outputs dict of Tensors
      [rows, ...]), built with dropout off.
    input_fn: callable(rows, seed, shard) -> finite tf.data.Dataset of feature dicts, in input
      order, whose last batch may be short (shard is input_pipeline.WHOLE: every example).
    checkpoint: checkpoint prefix to restore.
    parallel: tower_utils.ParallelSpec of this process (towers, pipeline stages).
    batch_size_per_tower: rows per tower per step.

  Returns:
    dict name -> numpy array [num_examples, ...], rows in input order.
  """
  spec = parallel
  global_batch_size = batch_size_per_tower * spec.n_towers
  graph = tf.Graph()
  with graph.as_default():
    with tf.device("/cpu:0"):
      dataset = input_fn(global_batch_size, 0, input_pipeline.WHOLE)
      features = tf.data.make_one_shot_iterator(dataset).get_next()
      features, is_real = _pad_batch(features, global_batch_size)
    towers = tower_utils.build_towers(tower_fn, features, spec, compute_gradients=False)
    _check_checkpoint_has(checkpoint, tf.global_variables())
    saver = tf.train.Saver(tf.global_variables())
    collected = collections.defaultdict(list)
    with tower_utils.new_session(spec) as sess:
      saver.restore(sess, checkpoint)
      while True:
        try:
          outputs, real = sess.run([towers.outputs, is_real])
        except tf.errors.OutOfRangeError:
          break
        keep = real > 0.5
        for name, value in outputs.items():
          collected[name].append(value[keep])
  return {name: np.concatenate(values, axis=0) for name, values in collected.items()}


EXPORT_DIR = "export"


def export_model(output_dir, bert_config, vocab_file=None, spm_model_file=None):
  """Exports the latest checkpoint of output_dir as output_dir/export/, like Google's releases.

  Writes bert_model.ckpt with the model weights only (`bert/` and `cls/`, no Adam slot, no
  global_step: fine-tuning from it starts at step 0 with fresh optimizer state),
  bert_config.json, and vocab.txt (or the SentencePiece model). Pass the folder as BERT_DIR to
  the fine-tuning scripts, or export/bert_model.ckpt as --init_checkpoint.

  Returns:
    the exported checkpoint prefix.
  """
  checkpoint = tf.train.latest_checkpoint(output_dir)
  export_dir = os.path.join(output_dir, EXPORT_DIR)
  tf.io.gfile.makedirs(export_dir)
  prefix = _write_model_weights(checkpoint, os.path.join(export_dir, "bert_model.ckpt"))
  with tf.io.gfile.GFile(os.path.join(export_dir, "bert_config.json"), "w") as writer:
    writer.write(bert_config.to_json_string())
  if spm_model_file:
    tf.io.gfile.copy(spm_model_file, os.path.join(export_dir, os.path.basename(spm_model_file)),
                     overwrite=True)
  elif vocab_file:
    tf.io.gfile.copy(vocab_file, os.path.join(export_dir, "vocab.txt"), overwrite=True)
  return prefix


def _write_model_weights(checkpoint, prefix):
  """Writes the bert/ and cls/ weights of `checkpoint` to `prefix`; returns `prefix`."""
  reader = tf.train.load_checkpoint(checkpoint)
  dtypes = reader.get_variable_to_dtype_map()
  with tf.Graph().as_default():
    variables = {name: tf.get_variable(name, shape, dtypes[name])
                 for name, shape in tf.train.list_variables(checkpoint)
                 if name.startswith(("bert/", "cls/"))
                 and not name.endswith(("/adam_m", "/adam_v"))}
    saver = tf.train.Saver(variables)
    with tf.Session() as sess:
      for name, variable in variables.items():
        variable.load(reader.get_tensor(name), sess)  # Fed, not baked into the graph as constants.
      saver.save(sess, prefix, write_meta_graph=False)
  logging.info("Exported the %d model weights of %s to %s", len(variables), checkpoint, prefix)
  return prefix
