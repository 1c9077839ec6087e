"""Eval and predict: a model over a finite dataset on every tower, outputs back in input order.

`run_inference` restores one checkpoint, runs the towers over the dataset (the last batch padded
to the global batch, the padding dropped again), logs examples/sec and ETA, and returns every
real example's outputs in input order (length-sorted batches are put back).
"""

import collections
import contextlib
import time

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from core import formatting
from core.errors import InputError
from engine import checkpoints
from engine import input_data
from parallel import cluster
import tower_utils


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


# run_inference logs its progress at most this often (seconds), and once at the end.
INFERENCE_LOG_SECONDS = 30.0


def _log_inference(what, done, total, start, final=False):
  """Logs examples done (of total), examples/sec and ETA of an inference pass."""
  elapsed = max(time.time() - start, 1e-9)
  rate = done / elapsed
  if final:
    logging.info("%s: %d examples in %s (%.1f examples/sec)", what, done,
                 formatting.format_seconds(elapsed), rate)
  elif total:
    logging.info("%s: %d/%d examples  %.1f examples/sec  ETA %s", what, done, total, rate,
                 formatting.format_seconds((total - done) / max(rate, 1e-9)))
  else:
    logging.info("%s: %d examples  %.1f examples/sec", what, done, rate)


@contextlib.contextmanager
def _checkpoint_vanishes(checkpoint):
  """A checkpoint deleted while it is read (another run rotating its checkpoints) is an
  InputError naming it, not a NotFoundError traceback."""
  try:
    yield
  except (tf.errors.NotFoundError, ValueError) as e:
    if checkpoints.checkpoint_exists(checkpoint):
      raise
    raise InputError("checkpoint %s disappeared while this run read it (%s): a training run in "
                     "the same --output_dir deletes old checkpoints (--keep_checkpoint_max); "
                     "rerun when it has finished, or point --init_checkpoint at a copy" %
                     (checkpoint, type(e).__name__))


def run_inference(tower_fn, input_fn, checkpoint, parallel, batch_size_per_tower,
                  num_examples=None, what="inference"):
  """Runs the model over a finite dataset and returns every real example's outputs, in order.

  The last batch is padded to the full global batch (so it splits evenly over the towers) and
  the padding rows are dropped from the result: no crash, no lost example. Batches of rows
  sorted by length (input_data.sorted_windows) are put back in input order.

  Args:
    tower_fn: callable(features, GlobalBatch) -> (loss or None, outputs dict of Tensors
      [rows, ...]), built with dropout off.
    input_fn: callable(rows, seed, shard) -> finite tf.data.Dataset of feature dicts, in input
      order, whose last batch may be short (shard is input_data.WHOLE: every example).
    checkpoint: checkpoint prefix to restore.
    parallel: tower_utils.ParallelSpec of this process (towers, pipeline stages).
    batch_size_per_tower: rows per tower per step.
    num_examples: how many examples the dataset holds (for the ETA in the log), if known.
    what: names the pass in the log ("eval", "predict").

  Returns:
    dict name -> numpy array [num_examples, ...], rows in input order.
  """
  spec = parallel
  global_batch_size = batch_size_per_tower * spec.n_towers
  graph = tf.Graph()
  with graph.as_default():
    with tf.device(tower_utils.input_device(spec)):
      dataset = input_fn(global_batch_size, 0, input_data.WHOLE)
      features = tf.data.make_one_shot_iterator(dataset).get_next()
      # Length-sorted batches (input_data.sorted_windows) carry each row's input position.
      index = features.pop(input_data.INDEX_FEATURE, tf.zeros([0], tf.int64))
      features, is_real = _pad_batch(features, global_batch_size)
    towers = tower_utils.build_towers(tower_fn, features, spec, compute_gradients=False)
    saved = towers.strategy.savable_variables()  # stock names; replicas copy them (post_init)
    with _checkpoint_vanishes(checkpoint):
      checkpoints.check_checkpoint_has(checkpoint, saved)
    with tf.device(tower_utils.input_device(spec)):
      saver = tf.train.Saver(saved)
    copy_replicas = towers.strategy.post_init_op()
    tower_utils.mark_step("update", [towers.outputs, is_real, index])
    collected = collections.defaultdict(list)
    with tower_utils.new_session(spec) as sess, cluster.peer_faults(spec):
      with _checkpoint_vanishes(checkpoint):
        saver.restore(sess, checkpoint)
      sess.run(copy_replicas)
      start = last_log = time.time()
      done = 0
      while True:
        try:
          outputs, real, positions = sess.run([towers.outputs, is_real, index])
        except tf.errors.OutOfRangeError:
          break
        keep = real > 0.5
        done += int(np.sum(keep))
        collected[input_data.INDEX_FEATURE].append(positions)
        for name, value in outputs.items():
          collected[name].append(value[keep])
        if time.time() - last_log >= INFERENCE_LOG_SECONDS:
          _log_inference(what, done, num_examples, start)
          last_log = time.time()
      _log_inference(what, done, num_examples, start, final=True)
  positions = np.concatenate(collected.pop(input_data.INDEX_FEATURE, [np.zeros([0])]))
  order = np.argsort(positions, kind="stable") if len(positions) else slice(None)
  return {name: np.concatenate(values, axis=0)[order] for name, values in collected.items()}
