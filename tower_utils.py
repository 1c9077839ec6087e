"""In-graph replication: one model graph per tower, and how tower gradients are reduced.

This is the only module that knows about devices and gradient reduction; run scripts call
`build_towers` and `session_config` and never name a device themselves.

Devices. Tower i runs on GPU (i mod G), where G is the number of GPUs TensorFlow sees (those listed
in CUDA_VISIBLE_DEVICES), so `n_gpus` may exceed the number of cards and several towers then share
one. With no GPU, tower i gets its own virtual CPU device `/device:CPU:i`
(`ConfigProto(device_count={"CPU": n})`, see `session_config`), so every multi-tower code path runs
and is tested on a CPU-only machine.

What a tower does. Each tower takes an equal slice of the global batch
(`train_batch_size * n_gpus` rows), runs its forward and backward pass on its own device
(gradients are colocated with their forward ops), and returns its loss and gradients. The
reported loss is the mean of the tower losses, which equals the loss over the whole batch because
the slices are equal. With `use_xla` each tower's forward and backward pass is compiled by XLA
(`jit_scope`; on GPUs `session_config` also turns on auto-clustering).

Gradients are reduced in two stages: towers on the same device are summed there (a local sum);
then the device sums are reduced across devices, in one of two modes (`--reduction`):

`shared` (default): one copy of each variable. The variables are spread over the distinct devices
by a greedy size balancer (each new variable goes to the device holding the fewest bytes), and
each variable's gradient is summed on the device that owns it, where its Adam slots and update
live too. So no card holds more than about 1/G of the optimizer state and the update work is
split, but every step each tower reads every variable from its owner (a broadcast of the
parameters) and sends every gradient to it. The word-embedding gather runs where the table lives,
so a tower receives only its batch's rows, and that gradient stays sparse (IndexedSlices).
Wins when device-to-device copies are cheap or free: one host (virtual CPU devices share memory,
so a "copy" is a pointer), few GPUs on NVLink/P2P, or large models whose replicated optimizer
state would not fit.

`allreduce`: one copy of every variable per distinct device (replica), kept identical by an
all-reduce of the gradient sums: every replica applies the same update to its own copy (the update
is computed G times, on G devices, at the same time). Gradients are flattened and packed, in
variable order, into buffers of about `pack_mb` MB, and the packs are all-reduced in that fixed
order (each waits for the previous one on its device, so every device issues the same sequence,
as NCCL requires). The all-reduce is TensorFlow's collective all-reduce
(`collective_ops.all_reduce`), NCCL on GPUs and a ring on CPUs; it runs across the virtual CPU
devices of one local Session, which is how it is tested here. Sparse embedding gradients are made
dense before packing. Wins on many GPUs and on PCIe without peer-to-peer: no parameter broadcast,
and a ring moves 2(G-1)/G of the gradient bytes per device however many devices there are.
Costs: G copies of the variables and of the Adam slots, and G times the optimizer arithmetic
(on a CPU, where devices share the cores, that is why `shared` is faster).
Replica 0 has the stock variable names (and slots); replica r > 0 is named `replica_r/<stock
name>`. Only replica 0 is saved (`saveable_variables`); after initialization, `init_checkpoint` or a
restore, `replica_sync_op` copies replica 0 into the other replicas, so all copies start
identical.

Gradient accumulation (`accum_steps` = K > 1). Each device keeps float32 accumulators (local
variables, never saved): one of the variable's shape per dense gradient, and for a sparse
(embedding) gradient the rows of K-1 micro-batches, so an update never touches the whole table.
The first K-1 micro-batches of an update only run `accumulate_ops` (the first overwrites, the
others add: no device-to-device traffic); the K-th micro-batch's gradients are added to the
accumulators and only then reduced across devices, once per effective batch of
`train_batch_size * n_gpus * K` rows. The reduced gradient is scaled by
1/(n_towers * K), so it equals the gradient of the mean loss over the effective batch.

Loss scaling (`loss_scale`, for float16): each tower differentiates loss * loss_scale, and the
reduced gradients are multiplied by 1/loss_scale together with the averaging factor.
"""

import collections
import contextlib
import itertools
import os
import re

from absl import logging
import tensorflow.compat.v1 as tf
from tensorflow.python.ops import collective_ops  # pylint: disable=g-direct-tensorflow-import

from cli import InputError

_VARIABLE_OP_TYPES = frozenset(["Variable", "VariableV2", "VarHandleOp", "AutoReloadVariable"])

REDUCTIONS = ("shared", "allreduce")
DEFAULT_PACK_MB = 32.0
_REPLICA_NAME = re.compile(r"^replica_(\d+)/(.*)$")
# Collective group and instance keys must be unique among the collectives of a Session.
_COLLECTIVE_KEYS = itertools.count(1)

TowerResult = collections.namedtuple(
    "TowerResult",
    ["loss", "grads_and_vars", "outputs", "devices", "replica_grads_and_vars",
     "accumulate_ops"],
    defaults=(None, None))


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


def check_reduction(reduction):
  """Validates the --reduction mode; returns it."""
  if reduction not in REDUCTIONS:
    raise InputError("--reduction=%s: expected one of %s" % (reduction, ", ".join(REDUCTIONS)))
  return reduction


def check_accum_steps(accum_steps):
  """Validates --grad_accum_steps; returns it as int."""
  if accum_steps is None or int(accum_steps) < 1:
    raise InputError("--grad_accum_steps=%s: expected an integer >= 1" % accum_steps)
  return int(accum_steps)


def session_config(n_towers, use_xla=False, intra_op_threads=0, inter_op_threads=0):
  """A ConfigProto under which all `tower_devices(n_towers)` exist.

  On CPU-only machines it creates n_towers virtual CPU devices; they share one intra-op thread
  pool, so more towers than cores do not oversubscribe the machine. Soft placement lets the few
  ops that have no GPU kernel (e.g. some int64 ops of the input pipeline) fall back to the CPU.

  Args:
    n_towers: number of towers.
    use_xla: also turn on XLA auto-clustering (it acts on GPUs; on CPUs the towers' jit_scope
      of build_towers is what compiles).
    intra_op_threads, inter_op_threads: thread pool sizes, 0 = TensorFlow's choice (the number
      of cores).
  """
  n_towers = check_n_towers(n_towers)
  config = tf.ConfigProto(allow_soft_placement=True,
                          intra_op_parallelism_threads=intra_op_threads,
                          inter_op_parallelism_threads=inter_op_threads)
  if num_visible_gpus():
    config.gpu_options.allow_growth = True
  else:
    config.device_count["CPU"] = n_towers
  if use_xla:
    config.graph_options.optimizer_options.global_jit_level = tf.OptimizerOptions.ON_1
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


def build_towers(tower_fn, features, n_towers, compute_gradients=True, reduction="shared",
                 accum_steps=1, loss_scale=None, use_xla=False, pack_mb=DEFAULT_PACK_MB):
  """Builds `n_towers` copies of the model and the reduction of their gradients.

  Args:
    tower_fn: callable(features_dict) -> (loss scalar Tensor or None, outputs dict of Tensors
      [tower_batch, ...]). Called once per tower; creates variables with tf.get_variable.
    features: dict of Tensors [global_batch, ...], global_batch a multiple of n_towers.
    n_towers: number of towers.
    compute_gradients: also build each tower's backward pass and the gradient reduction.
    reduction: "shared" or "allreduce" (see the module docstring).
    accum_steps: micro-batches per update (gradient accumulation), >= 1.
    loss_scale: optional float32 scalar Tensor; towers differentiate loss * loss_scale and the
      reduced gradients are divided by it.
    use_xla: compile each tower's forward and backward pass with XLA.
    pack_mb: allreduce: size of the gradient packs in MB.

  Returns:
    TowerResult(loss, grads_and_vars, outputs, devices, replica_grads_and_vars, accumulate_ops):
    the mean of the tower losses (None if tower_fn returns no loss); the reduced (gradient,
    variable) list of the stock-named variables (None unless compute_gradients); the tower
    outputs concatenated back into [global_batch, ...] in input order; the tower devices; one
    reduced (gradient, variable) list per replica (all of them to be applied; just
    [grads_and_vars] when reduction is "shared"); and, when accum_steps > 1, the pair (first,
    add) of ops that put one micro-batch's gradients into the accumulators (assign / add), to be
    run for micro-batches 1 and 2..K-1 of each update, while grads_and_vars then covers the
    accumulators plus the current (K-th) micro-batch.
  """
  check_reduction(reduction)
  accum_steps = check_accum_steps(accum_steps)
  devices = tower_devices(n_towers)
  log_device_map(devices)
  towers = _build_tower_graphs(tower_fn, features, devices, reduction, compute_gradients,
                               loss_scale, use_xla)
  mean_loss = None
  if towers.losses:
    with tf.device(devices[0]):
      mean_loss = tf.add_n(towers.losses) / float(len(towers.losses))
  outputs = concat_outputs(towers.outputs, devices[0])
  if not compute_gradients:
    return TowerResult(mean_loss, None, outputs, devices)

  replica_devices = _distinct(devices)
  local = [_local_sum([towers.grads[i] for i in range(n_towers) if devices[i] == device],
                      device) for device in replica_devices]
  accumulate_ops = None
  if accum_steps > 1:
    local, accumulate_ops = _accumulate(local, towers.variables, replica_devices, accum_steps)
  scale = 1.0 / (n_towers * accum_steps)
  if loss_scale is not None:
    scale = scale / tf.cast(loss_scale, tf.float32)
  if reduction == "shared":
    replica_grads = [_reduce_on_owners(local, towers.variables[0], scale)]
  else:
    replica_grads = _all_reduce(local, towers.variables[0], replica_devices, scale, pack_mb)
  replica_grads_and_vars = [list(zip(g, v)) for g, v in zip(replica_grads, towers.variables)]
  return TowerResult(mean_loss, replica_grads_and_vars[0], outputs, devices,
                     replica_grads_and_vars, accumulate_ops)


_Towers = collections.namedtuple("_Towers", ["losses", "outputs", "grads", "variables"])


def _distinct(devices):
  """The distinct devices of `devices`, in order of first appearance."""
  return list(collections.OrderedDict.fromkeys(devices))


def _build_tower_graphs(tower_fn, features, devices, reduction, compute_gradients, loss_scale,
                        use_xla):
  """Builds every tower's forward (and backward) pass.

  Returns:
    _Towers(losses, outputs, grads, variables): per tower its loss (only non-None ones), its
    outputs dict and its gradient list (aligned with the variables of its replica), and per
    replica its trainable variables (one list in shared mode; replica 0's first).
  """
  replica_devices = _distinct(devices)
  placer = GreedyVariablePlacer(replica_devices)
  shards = split_features(features, len(devices))
  losses, outputs, grads = [], [], []
  variables = collections.OrderedDict()  # replica index -> its trainable variables
  for i, (device, shard) in enumerate(zip(devices, shards)):
    replica = replica_devices.index(device) if reduction == "allreduce" else 0
    creates = replica not in variables
    device_fn = placer.device_function(device) if reduction == "shared" else device
    getter = _replica_getter(replica) if replica else None
    existing = {v.op.name for v in tf.trainable_variables()}
    # Towers that do not create their variables must find every one already there: reuse=True
    # makes any attempt to create a new one an error instead of a silent per-tower copy.
    with tf.name_scope("tower_%d" % i), tf.device(device_fn), tf.variable_scope(
        tf.get_variable_scope(), reuse=None if creates else True, custom_getter=getter), \
        _jit_scope(use_xla):
      loss, tower_outputs = tower_fn(shard)
      if creates:
        variables[replica] = _replica_variables(replica, existing, variables.get(0))
      if loss is not None:
        losses.append(loss)
      outputs.append(tower_outputs)
      if compute_gradients:
        if loss_scale is not None:
          loss = loss * tf.cast(loss_scale, loss.dtype)
        grads.append(tf.gradients(loss, variables[replica], colocate_gradients_with_ops=True))
  return _Towers(losses, outputs, grads, list(variables.values()))


def _jit_scope(use_xla):
  """XLA's jit_scope when use_xla, else a scope that does nothing."""
  if use_xla:
    return tf.xla.experimental.jit_scope()
  return contextlib.nullcontext()


def _replica_getter(replica):
  """A custom getter naming replica r's copy of every variable replica_r/<stock name>."""

  def replica_getter(getter, name, *args, **kwargs):
    return getter("replica_%d/%s" % (replica, name), *args, **kwargs)

  return replica_getter


def _replica_variables(replica, existing, replica_0_variables):
  """The trainable variables of `replica` just built (`existing`: names from before), checked.

  Replica 0 owns every trainable variable of the graph (as one shared tower always did); a later
  replica owns those its tower just created, which must be copies of replica 0's, in order.
  """
  if not replica:
    return tf.trainable_variables()
  created = [v for v in tf.trainable_variables() if v.op.name not in existing]
  names = [_REPLICA_NAME.match(v.op.name).group(2) if _REPLICA_NAME.match(v.op.name) else None
           for v in created]
  if names != [v.op.name for v in replica_0_variables]:
    raise ValueError("--reduction=allreduce: tower on replica %d created variables %s, not "
                     "copies of replica 0's %s (were trainable variables created outside "
                     "tower_fn?)" % (replica, names[:3], [v.op.name for v in
                                                          replica_0_variables][:3]))
  return created


def _sum(grads, scale=None):
  """The sum of one variable's gradients (Tensors or IndexedSlices, None ignored), times scale.

  Sparse gradients stay IndexedSlices (indices and values of all of them concatenated), so only
  touched embedding rows move. Returns None when every gradient is None.
  """
  grads = [g for g in grads if g is not None]
  if not grads:
    return None
  if any(isinstance(g, tf.IndexedSlices) for g in grads):
    slices = [g if isinstance(g, tf.IndexedSlices) else _dense_to_slices(g) for g in grads]
    values = tf.concat([s.values for s in slices], axis=0)
    return tf.IndexedSlices(values=values if scale is None else values * scale,
                            indices=tf.concat([s.indices for s in slices], axis=0),
                            dense_shape=slices[0].dense_shape)
  total = grads[0] if len(grads) == 1 else tf.add_n(grads)
  return total if scale is None else total * scale


def _local_sum(tower_grads, device):
  """Sums, on `device`, the gradient lists of the towers running there (one list per tower)."""
  with tf.device(device), tf.name_scope("local_gradient_sum"):
    return [_sum(grads) for grads in zip(*tower_grads)]


def _accumulate(local, variables, replica_devices, accum_steps):
  """Gradient accumulators on each device (float32 local variables, never saved).

  A dense gradient gets an accumulator of its variable's shape. A sparse one (the embedding
  gather's IndexedSlices) keeps the rows of the first K-1 micro-batches, so the last one's
  gradient is their IndexedSlices and its own, concatenated: exactly what one pass over the
  effective batch would produce, at the cost of those rows rather than of the whole table.

  Args:
    local: per device, the list of local gradient sums (Tensor, IndexedSlices or None).
    variables: per replica, its variables (one list in shared mode, used for every device).
    replica_devices: the distinct devices, aligned with `local`.
    accum_steps: K, micro-batches per update.

  Returns:
    (totals, (first_op, add_op)): per device the accumulated plus current gradients; the ops
    storing the current gradients as micro-batch 1 (first) or as the next one (add).
  """
  totals, firsts, adds = [], [], []
  for d, (device, grads) in enumerate(zip(replica_devices, local)):
    device_vars = variables[d] if len(variables) > 1 else variables[0]
    with tf.device(device), tf.name_scope("grad_accum"):
      # Which micro-batch slot the next "add" fills in the sparse accumulators.
      slot = _local_variable(0, "device_%d/slot" % d)
      device_totals, device_firsts, device_adds = [], [], []
      for grad, var in zip(grads, device_vars):
        name = "device_%d/%s" % (d, var.op.name)
        if grad is None:
          device_totals.append(None)
          continue
        if isinstance(grad, tf.IndexedSlices) and grad.values.shape.is_fully_defined():
          total, first, add = _sparse_accumulator(grad, slot, accum_steps, name)
        else:
          total, first, add = _dense_accumulator(grad, var, name)
        device_totals.append(total)
        device_firsts.append(first)
        device_adds.append(add)
      firsts.extend(device_firsts)
      firsts.append(_after(device_firsts, lambda: slot.assign(1, read_value=False)))
      adds.extend(device_adds)
      adds.append(_after(device_adds, lambda: slot.assign_add(1, read_value=False)))
    totals.append(device_totals)
  return totals, (tf.group(*firsts, name="accumulate_first"),
                  tf.group(*adds, name="accumulate_add"))


def _after(ops, make_op):
  """make_op() built under control dependencies on `ops`."""
  with tf.control_dependencies(ops):
    return make_op()


def _local_variable(initial_value, name):
  """A resource variable in LOCAL_VARIABLES: initialized by the training loop, never saved."""
  return tf.Variable(initial_value, trainable=False, use_resource=True,
                     collections=[tf.GraphKeys.LOCAL_VARIABLES], name=name)


def _dense_accumulator(grad, var, name):
  """(accumulated + current gradient, op storing the first, op adding the next) of a variable."""
  acc = _local_variable(tf.zeros(var.shape, tf.float32), name)
  if isinstance(grad, tf.IndexedSlices):
    add = acc.scatter_add(grad)
    total = tf.tensor_scatter_nd_add(acc.read_value(), tf.expand_dims(grad.indices, 1),
                                     grad.values)
  else:
    add = acc.assign_add(grad, read_value=False)
    total = acc.read_value() + grad
  return total, acc.assign(tf.convert_to_tensor(grad), read_value=False), add


def _sparse_accumulator(grad, slot, accum_steps, name):
  """The same for an IndexedSlices gradient with N rows: K-1 slots of N rows each.

  Returns:
    (IndexedSlices of the stored rows and the current ones, first op, add op); the add op
    writes slot `slot`, which the caller advances after it.
  """
  rows = grad.values.shape[0]
  values = _local_variable(tf.zeros([(accum_steps - 1) * rows] + grad.values.shape[1:].as_list(),
                                    grad.values.dtype), name + "/values")
  indices = _local_variable(tf.zeros([(accum_steps - 1) * rows], grad.indices.dtype),
                            name + "/indices")

  def store(first_row):
    positions = first_row + tf.range(rows)
    return tf.group(values.scatter_update(tf.IndexedSlices(grad.values, positions)),
                    indices.scatter_update(tf.IndexedSlices(grad.indices, positions)))

  total = tf.IndexedSlices(tf.concat([values.read_value(), grad.values], axis=0),
                           tf.concat([indices.read_value(), grad.indices], axis=0),
                           grad.dense_shape)
  return total, store(0), store(slot.read_value() * rows)


def _reduce_on_owners(local, variables, scale):
  """shared: each variable's gradient summed over devices on the variable's device, scaled."""
  reduced = []
  for var, grads in zip(variables, zip(*local)):
    with tf.device(var.device), tf.name_scope("average_gradients"):
      reduced.append(_sum(grads, scale))
  return reduced


def _all_reduce(local, variables, replica_devices, scale, pack_mb):
  """allreduce: every device's gradients summed across devices by packed collective all-reduces.

  Args:
    local: per device, the list of its gradient sums (same shapes on every device).
    variables: replica 0's variables, aligned with each device's gradient list (for shapes).
    replica_devices: the distinct devices, aligned with `local`.
    scale: float or scalar Tensor the sums are multiplied by.
    pack_mb: approximate pack size in MB.

  Returns:
    per device, the list of reduced gradients (dense; None where the gradient is None).
  """
  if len(replica_devices) == 1:
    with tf.device(replica_devices[0]):
      return [[_sum([g], scale) for g in local[0]]]
  shapes = [None if g is None else v.shape for g, v in zip(local[0], variables)]
  plan = pack_plan([None if s is None else s.num_elements() for s in shapes],
                   int(pack_mb * (1 << 20)) // 4)
  group_key = next(_COLLECTIVE_KEYS)
  instance_keys = [next(_COLLECTIVE_KEYS) for _ in plan]
  hint = "nccl" if "GPU" in replica_devices[0].upper() else "ring"
  reduced = []
  for device, grads in zip(replica_devices, local):
    out = [None] * len(grads)
    previous = []
    with tf.device(device), tf.name_scope("all_reduce"):
      for pack, instance_key in zip(plan, instance_keys):
        flat = tf.concat([tf.reshape(tf.convert_to_tensor(grads[j]), [-1]) for j in pack], 0)
        # Issued in plan order on every device: each pack waits for the previous one.
        with tf.control_dependencies(previous):
          summed = collective_ops.all_reduce(flat, len(replica_devices), group_key,
                                             instance_key, "Add", "Id", communication_hint=hint)
        previous = [summed]
        pieces = tf.split(summed * scale, [shapes[j].num_elements() for j in pack])
        for j, piece in zip(pack, pieces):
          out[j] = tf.reshape(piece, shapes[j])
    reduced.append(out)
  return reduced


def pack_plan(sizes, pack_elements):
  """Groups gradient indices, in order, into packs of about `pack_elements` elements.

  Args:
    sizes: number of elements of each gradient, None for a missing gradient (skipped).
    pack_elements: a pack is closed once it holds at least this many elements.

  Returns:
    list of lists of indices into `sizes`; a gradient larger than a pack gets a pack of its own.
  """
  plan, pack, filled = [], [], 0
  for j, size in enumerate(sizes):
    if size is None:
      continue
    pack.append(j)
    filled += size
    if filled >= pack_elements:
      plan.append(pack)
      pack, filled = [], 0
  if pack:
    plan.append(pack)
  return plan


def saveable_variables():
  """The global variables a checkpoint holds: all but the replica copies (stock names only)."""
  return [v for v in tf.global_variables() if not _REPLICA_NAME.match(v.op.name)]


def replica_sync_op():
  """An op copying every stock-named variable into its replica copies replica_r/<name>.

  Run it after initialization, init_checkpoint or a restore: only replica 0 is initialized from
  or restored out of a checkpoint, and the copies must start identical. A no-op in shared mode.
  """
  masters = {v.op.name: v for v in saveable_variables()}
  assigns = []
  for var in tf.global_variables():
    match = _REPLICA_NAME.match(var.op.name)
    if match:
      assigns.append(var.assign(masters[match.group(2)]))
  return tf.group(*assigns, name="replica_sync")


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
  variables = [v for _, v in tower_grads[0]]
  local = [[g for g, _ in grads_and_vars] for grads_and_vars in tower_grads]
  return list(zip(_reduce_on_owners(local, variables, 1.0 / n), variables))


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
