"""Collective ops of the engine: deterministic keys, packed all-reduce, broadcast from the chief.

Keys. A collective op is identified by a group key (which devices take part) and an instance
key (which op of the group). Every member must use the same keys, and in a multi-process run
each process builds its own copy of the graph, so keys come from counters advanced in graph-
building order: the same code builds the same graph, hence the same keys, in every process.
A group key is given once per membership (the same devices always get the same key).

Packing. Many small all-reduces cost more than a few large ones, so gradients are flattened and
concatenated, in variable order, into packs of about `pack_mb` MB; each pack is one collective
op, issued after the previous one on its device, so every member issues the same sequence (as
NCCL requires).

Timeouts. Every op gets `timeout_s`: a member that died or hangs makes the others fail with
DeadlineExceeded (or Unavailable, when its connection drops) instead of waiting forever.
"""

import collections
import itertools

import tensorflow.compat.v1 as tf
from tensorflow.python.ops import collective_ops  # pylint: disable=g-direct-tensorflow-import

_GROUP_KEYS = {}
_NEXT_GROUP_KEY = itertools.count(1)
_NEXT_INSTANCE_KEY = itertools.count(1)


def group_key(members):
  """The group key of a list of member device names (the same list gives the same key)."""
  members = tuple(members)
  if members not in _GROUP_KEYS:
    _GROUP_KEYS[members] = next(_NEXT_GROUP_KEY)
  return _GROUP_KEYS[members]


def instance_key():
  """A new instance key."""
  return next(_NEXT_INSTANCE_KEY)


def communication_hint(device):
  """'nccl' for GPU devices, 'ring' otherwise."""
  return "nccl" if "GPU" in device.upper() else "ring"


def pack_plan(sizes, pack_elements):
  """Groups tensor indices, in order, into packs of about `pack_elements` elements.

  Args:
    sizes: number of elements of each tensor, None for a missing one (skipped).
    pack_elements: a pack is closed once it holds at least this many elements.

  Returns:
    list of lists of indices into `sizes`; a tensor larger than a pack gets a pack of its own.
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


class PackedAllReduce(object):
  """Sums a list of tensors over the members of one group, in packs, one call per member."""

  def __init__(self, shapes, members, pack_mb, timeout_s, merge_op="Add"):
    """
    Args:
      shapes: TensorShape (fully defined) of each tensor, None where a member has no tensor.
      members: the group's device names (one call per member device).
      pack_mb: approximate pack size in MB (of float32 elements).
      timeout_s: seconds each collective may wait for the other members.
      merge_op: "Add", "Max" or "Min".
    """
    self._shapes = shapes
    self._size = len(members)
    self._group = group_key(members)
    self._plan = pack_plan([None if s is None else s.num_elements() for s in shapes],
                           max(int(pack_mb * (1 << 20)) // 4, 1))
    self._instances = [instance_key() for _ in self._plan]
    self._hint = communication_hint(members[0])
    self._timeout_s = timeout_s
    self._merge_op = merge_op

  def __call__(self, tensors, device, scale=None):
    """The group-wide sums of `tensors` (aligned with `shapes`), computed on `device`.

    Args:
      tensors: list of Tensors (or IndexedSlices, made dense) or None, aligned with `shapes`.
      device: this member's device.
      scale: optional float or scalar Tensor the sums are multiplied by.

    Returns:
      list of Tensors of the given shapes (None where `shapes` has None).
    """
    out = [None] * len(tensors)
    previous = []
    with tf.device(device), tf.name_scope("all_reduce"):
      for pack, instance in zip(self._plan, self._instances):
        flat = tf.concat([tf.reshape(tf.convert_to_tensor(tensors[j]), [-1]) for j in pack], 0)
        with tf.control_dependencies(previous):
          summed = collective_ops.all_reduce(flat, self._size, self._group, instance,
                                             self._merge_op, "Id",
                                             communication_hint=self._hint,
                                             timeout=self._timeout_s)
        previous = [summed]
        if scale is not None:
          summed = summed * tf.cast(scale, summed.dtype)
        pieces = tf.split(summed, [self._shapes[j].num_elements() for j in pack])
        for j, piece in zip(pack, pieces):
          out[j] = tf.reshape(piece, self._shapes[j])
    return out


def device_suffix(device):
  """'/device:CPU:1' of a full device name ('' for an unplaced one)."""
  spec = tf.DeviceSpec.from_string(device or "")
  if spec.device_type is None:
    return ""
  return "/device:%s:%d" % (spec.device_type, spec.device_index or 0)


def broadcast_from_chief(variables, is_chief, local_devices, members_of, pack_mb, timeout_s):
  """An op giving every process's `variables` the chief's values.

  Each process passes its own copies of the same variables, in the same order. The chief
  contributes its values and every other process zeros to an all-reduce (x + 0 + ... is exact),
  one group per local device: that device in every process.

  Args:
    variables: list of Variables of this process (same names, shapes, order everywhere).
    is_chief: whether this process is the chief.
    local_devices: OrderedDict local device suffix ('/device:CPU:0') -> this process's full
      device name; a variable without a device goes with the first.
    members_of: callable(suffix) -> the group's member devices (that device of every process).
    pack_mb, timeout_s: as PackedAllReduce.

  Returns:
    an op that assigns the chief's values.
  """
  first = next(iter(local_devices))
  groups = collections.OrderedDict()
  for var in variables:
    suffix = device_suffix(var.device)
    key = (suffix if suffix in local_devices else first, var.dtype.base_dtype)
    groups.setdefault(key, []).append(var)
  assigns = []
  for (suffix, _), group in groups.items():
    device = local_devices[suffix]
    reducer = PackedAllReduce([v.shape for v in group], members_of(suffix), pack_mb, timeout_s)
    with tf.device(device):
      values = [v.read_value() if is_chief else tf.zeros(v.shape, v.dtype.base_dtype)
                for v in group]
    for var, value in zip(group, reducer(values, device)):
      assigns.append(var.assign(value, read_value=False))
  return tf.group(*assigns, name="broadcast_from_chief")
