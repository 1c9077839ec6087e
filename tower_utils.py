"""In-graph replication: one model graph per tower, one shared set of variables.

This is the only module that knows about devices and gradient averaging; run scripts call
`build_towers` and `session_config` and never name a device themselves.

Devices. Tower i runs on GPU (i mod G), where G is the number of GPUs TensorFlow sees (those listed
in CUDA_VISIBLE_DEVICES), so `n_gpus` may exceed the number of cards and several towers then share
one. With no GPU, tower i gets its own virtual CPU device `/device:CPU:i`
(`ConfigProto(device_count={"CPU": n})`, see `session_config`), so every multi-tower code path runs
and is tested on a CPU-only machine.

Where variables live, and why. There is exactly one copy of each variable (the checkpoint holds
stock names only, no per-tower copies). The variables are spread over the towers' distinct devices
by a greedy size balancer: each new variable goes to the device that holds the fewest bytes so far.
Each variable's gradient is averaged on the device that owns the variable, and its Adam slots and
update live there too. So the reduction and the optimizer work are split evenly between the cards
instead of one GPU receiving every tower's full gradient and doing every update, and no card holds
more than about 1/G of the parameters' optimizer state.

The one exception is the word-embedding lookup: TensorFlow runs a gather on a variable where the
variable lives, so each tower receives only its batch's rows of the table (a few hundred KB) rather
than the whole table (tens of MB); the lookup's gradient is sparse (IndexedSlices) for the same
reason.

What a tower does. Each tower takes an equal slice of the global batch
(`train_batch_size * n_gpus` rows), runs its forward and backward pass on its own device
(gradients are colocated with their forward ops), and returns its loss and gradients.
`average_gradients` averages dense gradients and sparse IndexedSlices gradients (from the
embedding gather) across towers; the caller clips and applies them once. The reported loss is the
mean of the tower losses, which equals the loss over the whole batch because the slices are equal.
"""

import collections
import os

from absl import logging
import tensorflow.compat.v1 as tf

from cli import InputError

_VARIABLE_OP_TYPES = frozenset(["Variable", "VariableV2", "VarHandleOp", "AutoReloadVariable"])

TowerResult = collections.namedtuple("TowerResult", ["loss", "grads_and_vars", "outputs",
                                                     "devices"])


def num_visible_gpus():
  """How many GPUs TensorFlow can use (those listed in CUDA_VISIBLE_DEVICES, when it is set)."""
  return len(tf.config.list_physical_devices("GPU"))


def tower_devices(n_towers):
  """Device name of each tower: GPU (i mod #GPUs), or virtual CPU i when there is no GPU.

  Args:
    n_towers: number of towers (the `--n_gpus` flag), >= 1.

  Returns:
    list of n_towers device strings, e.g. ["/device:GPU:0", "/device:GPU:1", "/device:GPU:0"].
  """
  n_towers = check_n_towers(n_towers)
  n_gpus = num_visible_gpus()
  if n_gpus:
    return ["/device:GPU:%d" % (i % n_gpus) for i in range(n_towers)]
  return ["/device:CPU:%d" % i for i in range(n_towers)]


def check_n_towers(n_towers):
  """Validates the tower count; returns it as int."""
  if n_towers is None or int(n_towers) < 1:
    raise InputError("--n_gpus=%s: expected an integer >= 1 (the number of towers)" % n_towers)
  return int(n_towers)


def session_config(n_towers):
  """A ConfigProto under which all `tower_devices(n_towers)` exist.

  On CPU-only machines it creates n_towers virtual CPU devices. Soft placement lets the few ops
  that have no GPU kernel (e.g. some int64 ops of the input pipeline) fall back to the CPU.
  """
  n_towers = check_n_towers(n_towers)
  config = tf.ConfigProto(allow_soft_placement=True)
  if num_visible_gpus():
    config.gpu_options.allow_growth = True
  else:
    config.device_count["CPU"] = n_towers
  return config


def log_device_map(devices):
  """Logs which device each tower runs on (and the physical card behind a GPU index)."""
  visible = os.environ.get("CUDA_VISIBLE_DEVICES")
  cards = [c.strip() for c in visible.split(",")] if visible else None
  for i, device in enumerate(devices):
    note = ""
    if cards and device.startswith("/device:GPU:"):
      index = int(device.rsplit(":", 1)[1])
      if index < len(cards):
        note = " (CUDA_VISIBLE_DEVICES card %s)" % cards[index]
    logging.info("tower %d -> %s%s", i, device, note)


class GreedyVariablePlacer(object):
  """Places each new variable on the device currently holding the fewest variable bytes."""

  def __init__(self, devices):
    """devices: list of distinct device strings that may hold variables."""
    self._bytes = collections.OrderedDict((d, 0) for d in devices)

  def place(self, op):
    """Returns the device for variable op `op` and records its size there."""
    device = min(self._bytes, key=self._bytes.get)
    shape = tf.TensorShape(op.get_attr("shape"))
    num_elements = shape.num_elements() or 1
    self._bytes[device] += num_elements * tf.as_dtype(op.get_attr("dtype")).base_dtype.size
    return device

  def device_function(self, compute_device):
    """A device function: variables to the balancer, every other op to `compute_device`."""

    def _device_fn(op):
      if op.type in _VARIABLE_OP_TYPES:
        return self.place(op)
      return compute_device

    return _device_fn


def split_features(features, n_towers):
  """Splits every Tensor of `features` into n_towers equal slices along axis 0.

  Args:
    features: dict of name -> Tensor [global_batch, ...]; global_batch divisible by n_towers.
    n_towers: number of slices.

  Returns:
    list of n_towers dicts of name -> Tensor [global_batch / n_towers, ...].
  """
  shards = [dict() for _ in range(n_towers)]
  for name, tensor in features.items():
    for i, piece in enumerate(tf.split(tensor, n_towers, axis=0)):
      shards[i][name] = piece
  return shards


def build_towers(tower_fn, features, n_towers, compute_gradients=True):
  """Builds `n_towers` copies of the model, sharing one set of variables.

  Args:
    tower_fn: callable(features_dict) -> (loss scalar Tensor or None, outputs dict of Tensors
      [tower_batch, ...]). Called once per tower; creates variables with tf.get_variable.
    features: dict of Tensors [global_batch, ...], global_batch a multiple of n_towers.
    n_towers: number of towers.
    compute_gradients: also build each tower's backward pass and average the gradients.

  Returns:
    TowerResult(loss, grads_and_vars, outputs, devices): the mean of the tower losses (None if
    tower_fn returns no loss), the averaged (gradient, variable) list (None unless
    compute_gradients), the tower outputs concatenated back into [global_batch, ...] in input
    order, and the tower devices.
  """
  devices = tower_devices(n_towers)
  log_device_map(devices)
  placer = GreedyVariablePlacer(list(collections.OrderedDict.fromkeys(devices)))
  shards = split_features(features, n_towers)

  losses, tower_grads, tower_outputs = [], [], []
  tvars = None
  for i, (device, shard) in enumerate(zip(devices, shards)):
    # Towers after the first must find every variable already there: reuse=True makes any
    # attempt to create a new one an error instead of a silent per-tower copy.
    with tf.name_scope("tower_%d" % i), tf.device(placer.device_function(device)), \
        tf.variable_scope(tf.get_variable_scope(), reuse=True if i > 0 else None):
      loss, outputs = tower_fn(shard)
      if i == 0:
        tvars = tf.trainable_variables()
      if loss is not None:
        losses.append(loss)
      tower_outputs.append(outputs)
      if compute_gradients:
        grads = tf.gradients(loss, tvars, colocate_gradients_with_ops=True)
        tower_grads.append(list(zip(grads, tvars)))

  mean_loss = None
  if losses:
    with tf.device(devices[0]):
      mean_loss = tf.add_n(losses) / float(len(losses))
  grads_and_vars = average_gradients(tower_grads) if compute_gradients else None
  return TowerResult(mean_loss, grads_and_vars, concat_outputs(tower_outputs, devices[0]),
                     devices)


def average_gradients(tower_grads):
  """Averages each variable's gradient over the towers, on the variable's own device.

  Args:
    tower_grads: list (one per tower) of lists of (gradient, variable); the variables are in
      the same order in every tower. A gradient may be a Tensor, an IndexedSlices or None.

  Returns:
    list of (averaged gradient, variable). Sparse gradients stay IndexedSlices (indices of all
    towers concatenated, values scaled by 1/n), so only touched embedding rows move.
  """
  n = len(tower_grads)
  if n == 1:
    return tower_grads[0]
  averaged = []
  for grads_and_vars in zip(*tower_grads):
    var = grads_and_vars[0][1]
    grads = [g for (g, _) in grads_and_vars if g is not None]
    if not grads:
      averaged.append((None, var))
      continue
    with tf.device(var.device), tf.name_scope("average_gradients"):
      if any(isinstance(g, tf.IndexedSlices) for g in grads):
        slices = [g if isinstance(g, tf.IndexedSlices) else _dense_to_slices(g) for g in grads]
        grad = tf.IndexedSlices(
            values=tf.concat([s.values for s in slices], axis=0) / float(n),
            indices=tf.concat([s.indices for s in slices], axis=0),
            dense_shape=slices[0].dense_shape)
      else:
        grad = tf.add_n(grads) / float(n)
    averaged.append((grad, var))
  return averaged


def _dense_to_slices(grad):
  """A dense gradient [rows, ...] as IndexedSlices covering every row."""
  rows = tf.shape(grad)[0]
  return tf.IndexedSlices(values=grad, indices=tf.range(rows), dense_shape=tf.shape(grad))


def concat_outputs(tower_outputs, device):
  """Concatenates per-tower output dicts along axis 0 (input order), on `device`."""
  if not tower_outputs or not tower_outputs[0]:
    return {}
  with tf.device(device):
    return {name: tf.concat([outputs[name] for outputs in tower_outputs], axis=0)
            for name in tower_outputs[0]}
