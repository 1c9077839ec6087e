"""Gradient accumulation: K micro-batches per update, one reduction per update.

Each device keeps float32 accumulators (local variables, never saved): one of the variable's
shape per dense gradient, and for a sparse (embedding) gradient the rows of K-1 micro-batches,
so an update never touches the whole table, and the reduction sends rows, not the table, to the
device that owns it (batches padded to their own length, whose row count is known only at run
time, keep their rows in accumulators that grow). The first K-1 micro-batches of an update only run
the accumulate ops (the first overwrites, the others add: no device-to-device traffic); the K-th
micro-batch's gradients are added to the accumulators and only then reduced across devices and
processes, once per effective batch.
"""

import tensorflow.compat.v1 as tf


def accumulate(local, device_variables, devices, accum_steps):
  """Gradient accumulators on each device (float32 local variables, never saved).

  A dense gradient gets an accumulator of its variable's shape. A sparse one (the embedding
  gather's IndexedSlices) keeps the rows of the first K-1 micro-batches, so the last one's
  gradient is their IndexedSlices and its own, concatenated: exactly what one pass over the
  effective batch would produce, at the cost of those rows rather than of the whole table.

  Args:
    local: per device, the list of local gradient sums (Tensor, IndexedSlices or None).
    device_variables: per device, the variables its sums are aligned with.
    devices: the distinct devices, aligned with `local`.
    accum_steps: K, micro-batches per update.

  Returns:
    (totals, (first_op, add_op)): per device the accumulated plus current gradients; the ops
    storing the current gradients as micro-batch 1 (first) or as the next one (add).
  """
  totals, firsts, adds = [], [], []
  for d, (device, grads, device_vars) in enumerate(zip(devices, local, device_variables)):
    with tf.device(device), tf.name_scope("grad_accum"):
      # Which micro-batch slot the next "add" fills in the sparse accumulators.
      slot = _local_variable(tf.constant(0, tf.int64), "device_%d/slot" % d)  # GPU kernels
      slot_value = slot.read_value()
      device_totals, device_firsts, device_adds = [], [], []
      for grad, var in zip(grads, device_vars):
        name = "device_%d/%s" % (d, var.op.name)
        if grad is None:
          device_totals.append(None)
          continue
        if isinstance(grad, tf.IndexedSlices) and grad.values.shape.is_fully_defined():
          with tf.colocate_with(grad.values):  # Where the rows are: the table's device.
            total, first, add = _sparse_accumulator(grad, slot_value, accum_steps, name)
        elif isinstance(grad, tf.IndexedSlices) and grad.values.shape[1:].is_fully_defined():
          with tf.colocate_with(grad.values):
            total, first, add = _growing_accumulator(grad, name)
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


def _sparse_accumulator(grad, slot_value, accum_steps, name):
  """The same for an IndexedSlices gradient with N rows: K-1 slots of N rows each.

  Returns:
    (IndexedSlices of the stored rows and the current ones, first op, add op); the add op
    writes slot `slot_value` (the slot variable's value), which the caller advances after it.
  """
  rows = grad.values.shape[0]
  values = _local_variable(tf.zeros([(accum_steps - 1) * rows] + grad.values.shape[1:].as_list(),
                                    grad.values.dtype), name + "/values")
  # int64: a GPU holds no int32 resource variable (TensorFlow keeps int32 on the host).
  indices = _local_variable(tf.zeros([(accum_steps - 1) * rows], tf.int64), name + "/indices")
  current = tf.cast(grad.indices, tf.int64)

  def store(first_row):
    positions = first_row + tf.range(rows, dtype=tf.int64)
    return tf.group(values.scatter_update(tf.IndexedSlices(grad.values, positions)),
                    indices.scatter_update(tf.IndexedSlices(current, positions)))

  total = tf.IndexedSlices(tf.concat([values.read_value(), grad.values], axis=0),
                           tf.concat([indices.read_value(), current], axis=0),
                           grad.dense_shape)
  return total, store(0), store(slot_value * rows)


def _growing_accumulator(grad, name):
  """The same for an IndexedSlices gradient whose row count is known only at run time.

  Its values [rows, ...] and indices [rows] are kept in variables of unknown length: the first
  micro-batch stores its rows, each next one appends its own.

  Returns:
    (IndexedSlices of the stored rows and the current ones, first op, add op).
  """
  current = tf.cast(grad.indices, tf.int64)  # int64: see _sparse_accumulator
  values = _growing_variable(grad.values, name + "/values")
  indices = _growing_variable(current, name + "/indices")

  def stored_and(tensor, variable):
    return tf.concat([variable.read_value(), tensor], axis=0)

  first = tf.group(values.assign(grad.values, read_value=False),
                   indices.assign(current, read_value=False))
  add = tf.group(values.assign(stored_and(grad.values, values), read_value=False),
                 indices.assign(stored_and(current, indices), read_value=False))
  total = tf.IndexedSlices(stored_and(grad.values, values), stored_and(current, indices),
                           grad.dense_shape)
  return total, first, add


def _growing_variable(like, name):
  """A local resource variable [None, like's other dims] of like's dtype, starting empty."""
  shape = tf.TensorShape([None]).concatenate(like.shape[1:])
  return tf.Variable(tf.zeros([0] + like.shape[1:].as_list(), like.dtype), shape=shape,
                     trainable=False, use_resource=True,
                     collections=[tf.GraphKeys.LOCAL_VARIABLES], name=name)
