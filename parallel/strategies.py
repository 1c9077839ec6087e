"""One class per parallel mode behind one interface (after tf_cnn_benchmarks' VariableMgr).

tower_utils.build_towers makes one strategy per graph and asks it:
- `tower_scope(i)`: where tower i's ops run and where (and under which name) its variables are
  created; `tower_variables(i)`: the trainable variables tower i differentiates;
- `reduce(device_sums, scale)`: how the per-device gradient sums become the gradients each copy
  of the variables is updated with;
- `post_init_op()`: what runs after initialization, init_checkpoint or a restore, so that every
  copy of every variable starts from the same values;
- `savable_variables()`: what a checkpoint holds (stock names, one copy each);
- `is_chief`, `sum_over_processes(x)`: whether this process writes the run's outputs, and a
  scalar summed over all processes (the global loss normaliser, the reported loss).

The modes, with their cost and when each wins (G devices per host, W hosts):

`SharedStrategy` (`--reduction=shared`, one process): one copy of each variable, spread over the
devices by a greedy size balancer; each gradient is summed on the device that owns the variable,
where its Adam slots and update live. No card holds more than about 1/G of the optimizer state
and the update work is split, but every step each tower reads every variable from its owner
and sends every gradient to it. The word-embedding gather runs where the table lives, so a
tower receives only its batch's rows and that gradient stays sparse (IndexedSlices); a tower
whose output layer is that table (masked LM) reads it whole anyway, gathers from its copy and
sends one dense gradient (modeling.tower_copy). Wins when
device-to-device copies are cheap: one host (virtual CPU devices share memory), few GPUs on
NVLink/P2P, or models whose replicated optimizer state would not fit.

`AllReduceStrategy` (`--reduction=allreduce`, one process or many): one copy of every variable
per device (replica), kept identical by a collective all-reduce of the gradient sums over every
device of every process (NCCL on GPUs, a ring on CPUs); each replica applies the same update.
Gradients are packed, in variable order, into buffers of about `pack_mb` MB (see collective.py).
Sparse embedding gradients are made dense first. Wins on many GPUs and on PCIe without
peer-to-peer: no parameter broadcast, and a ring moves 2(N-1)/N of the gradient bytes per
device however many devices N there are. Costs: a copy of the variables and Adam slots per
device, and the optimizer arithmetic on every device. Replica 0 has the stock names; replica
r > 0 is `replica_r/<stock name>` (and its slots `replica_r/<stock name>/adam_m`...); only
replica 0 is saved.

`HierarchicalStrategy` (`--reduction=shared` with several processes): inside each host as
`shared`, then the owners' sums are all-reduced across hosts, one ring per device index (device
d of every host), in packs. Each host holds one copy of the variables (spread over its devices)
and applies the update itself. Cross-host traffic per update is 2(W-1)/W of the gradient bytes
per host, the same as a flat ring over all devices, but in W-member rings instead of W*G-member
ones (fewer, larger messages on the slow network); the local reduction uses the fast links.
Wins across hosts when the network is the bottleneck and the local links are fast.

In a multi-process run every process holds its own copy of everything; `post_init_op`
broadcasts the chief's values (weights, Adam slots, global_step) to all, so only the chief needs
the checkpoint.
"""

import collections
import contextlib

import tensorflow.compat.v1 as tf

from parallel import collective

VARIABLE_OP_TYPES = frozenset(  # ops that create a variable
    ["Variable", "VariableV2", "VarHandleOp", "AutoReloadVariable"])


def distinct(items):
  """The distinct items, in order of first appearance."""
  return list(collections.OrderedDict.fromkeys(items))


class ParallelStrategy(object):
  """The interface, and what the modes share."""

  def __init__(self, tower_stages, cluster, pack_mb, timeout_s):
    """
    Args:
      tower_stages: per tower of this process, its device of each pipeline stage (one stage
        without pipelining; full names in a multi-process run).
      cluster: parallel.cluster.Cluster.
      pack_mb: collective pack size in MB.
      timeout_s: seconds a collective may wait for the other members.
    """
    self.tower_stages = [[tf.DeviceSpec.from_string(d).to_string() for d in stages]
                         for stages in tower_stages]
    self.num_stages = len(self.tower_stages[0])
    self.tower_devices = [stages[0] for stages in self.tower_stages]
    self.devices = distinct(self.tower_devices)
    self.cluster = cluster
    self.pack_mb = pack_mb
    self.timeout_s = timeout_s
    self.replica_variables = []  # per replica, its trainable variables; replica 0 first
    self._existing = None

  @property
  def is_chief(self):
    """Whether this process writes checkpoints, summaries and results."""
    return self.cluster.is_chief

  @property
  def num_towers_total(self):
    """Towers in all processes together."""
    return len(self.tower_devices) * self.cluster.num_processes

  # Variables.
  def replica_of_tower(self, i):
    """Which copy of the variables tower i uses."""
    raise NotImplementedError

  def _device_function(self, i):
    """Device (string or function) for tower i's ops and the variables it creates."""
    raise NotImplementedError

  def _custom_getter(self, replica):
    """A custom getter naming replica `replica`'s variables, or None."""
    del replica
    return None

  @contextlib.contextmanager
  def tower_scope(self, i):
    """Scope building tower i: its name scope, device, and variable creation or reuse.

    A tower whose replica exists already must find every variable there: reuse=True makes an
    attempt to create a new one an error instead of a silent per-tower copy.
    """
    replica = self.replica_of_tower(i)
    creates = replica == len(self.replica_variables)
    self._existing = {v.op.name for v in tf.trainable_variables()} if creates else None
    with tf.name_scope("tower_%d" % i), tf.device(self._device_function(i)), \
        tf.variable_scope(tf.get_variable_scope(), reuse=None if creates else True,
                          custom_getter=self._custom_getter(replica)):
      yield

  def tower_variables(self, i):
    """The trainable variables tower i differentiates (call after its tower_fn)."""
    replica = self.replica_of_tower(i)
    if replica == len(self.replica_variables):
      created = [v for v in tf.trainable_variables() if v.op.name not in self._existing]
      self.replica_variables.append(self._check_replica(replica, created))
    return self.replica_variables[replica]

  def _check_replica(self, replica, created):
    """The variables replica `replica` just created, checked; replica 0 owns all there are."""
    del replica, created
    return tf.trainable_variables()

  # Gradients.
  def reduce(self, device_sums, scale):
    """The gradients each replica is updated with.

    Args:
      device_sums: per device (self.devices), the gradient sums of the towers there, aligned
        with that device's replica variables (Tensor, IndexedSlices or None).
      scale: float or scalar Tensor (1 / (towers in all processes x accumulation steps),
        divided by the loss scale).

    Returns:
      list (one per replica) of lists of reduced gradients, aligned with replica_variables.
    """
    raise NotImplementedError

  # Start-up and checkpoints.
  def post_init_op(self):
    """Op to run after init, init_checkpoint or restore: every copy gets the chief's values."""
    return tf.no_op(name="post_init")

  def savable_variables(self):
    """The global variables a checkpoint holds: stock names, one copy each."""
    return tf.global_variables()

  # Processes.
  def _group(self, suffix):
    """Device `suffix` (e.g. '/device:CPU:0') of every process, in rank order."""
    return [self.cluster.device_prefix(r) + suffix for r in range(self.cluster.num_processes)]

  @staticmethod
  def _suffix(device):
    return collective.device_suffix(device)

  def _in_process(self, device, rank):
    """The counterpart of this graph's `device` in process `rank` (itself in a one-graph run,
    whose devices may already name other tasks)."""
    if self.cluster.num_processes == 1:
      return device
    return self.cluster.device_prefix(rank) + self._suffix(device)

  def sum_over_processes(self, value):
    """A float32 scalar summed over all processes (itself in a one-process run)."""
    if self.cluster.num_processes == 1:
      return value
    reducer = collective.PackedAllReduce([tf.TensorShape([])],
                                         self._group(self._suffix(self.devices[0])),
                                         self.pack_mb, self.timeout_s)
    return reducer([value], self.devices[0])[0]

  def consistency_check(self):
    """(min, max) over processes of a float64 checksum of the savable variables: equal when
    every process holds the same weights and optimizer state."""
    sums = []
    for v in self._checksummed():  # Each variable's part next to it: only scalars travel.
      with tf.colocate_with(v):
        part = tf.cast(v, tf.float64)
        sums.append(tf.reduce_sum(part) + tf.reduce_sum(part * part))
    with tf.device(self.devices[0]):
      checksum = tf.add_n(sums or [tf.constant(0.0, tf.float64)])
    if self.cluster.num_processes == 1:
      return checksum, checksum
    group = self._group(self._suffix(self.devices[0]))
    low = collective.PackedAllReduce([tf.TensorShape([])], group, self.pack_mb, self.timeout_s,
                                     merge_op="Min")([checksum], self.devices[0])[0]
    high = collective.PackedAllReduce([tf.TensorShape([])], group, self.pack_mb,
                                      self.timeout_s, merge_op="Max")([checksum],
                                                                      self.devices[0])[0]
    return low, high

  def _checksummed(self):
    return [v for v in self.savable_variables() if v.dtype.base_dtype.is_floating]

  def _broadcast_from_chief(self, variables):
    """Op giving `variables` (this process's, the same in every process) the chief's values."""
    if self.cluster.num_processes == 1:
      return tf.no_op()
    local = collections.OrderedDict((self._suffix(d), d)
                                    for d in distinct(sum(self.tower_stages, [])))
    return collective.broadcast_from_chief(variables, self.is_chief, local, self._group,
                                           self.pack_mb, self.timeout_s)


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
      if op.type in VARIABLE_OP_TYPES:
        return self.place(op)
      return compute_device

    return _device_fn


def sum_gradients(grads, scale=None):
  """The sum of one variable's gradients (Tensors or IndexedSlices, None ignored), times scale.

  Sparse gradients stay IndexedSlices (indices and values of all of them concatenated), so only
  touched embedding rows move. Returns None when every gradient is None.
  """
  grads = [g for g in grads if g is not None]
  if not grads:
    return None
  if len(grads) == 1 and scale is None:
    return grads[0]
  if any(isinstance(g, tf.IndexedSlices) for g in grads):
    slices = [g if isinstance(g, tf.IndexedSlices) else _dense_to_slices(g) for g in grads]
    values = tf.concat([s.values for s in slices], axis=0)
    return tf.IndexedSlices(values=values if scale is None else values * scale,
                            indices=tf.concat([s.indices for s in slices], axis=0),
                            dense_shape=slices[0].dense_shape)
  total = grads[0] if len(grads) == 1 else tf.add_n(grads)
  return total if scale is None else total * scale


def _dense_to_slices(grad):
  """A dense gradient [rows, ...] as IndexedSlices covering every row."""
  rows = tf.shape(grad)[0]
  return tf.IndexedSlices(values=grad, indices=tf.range(rows), dense_shape=tf.shape(grad))


def reduce_on_owners(device_sums, variables, scale):
  """Each variable's gradient summed over the devices on the variable's own device, scaled."""
  reduced = []
  for var, grads in zip(variables, zip(*device_sums)):
    with tf.device(var.device), tf.name_scope("average_gradients"):
      reduced.append(sum_gradients(grads, scale))
  return reduced


class SharedStrategy(ParallelStrategy):
  """One copy of each variable, spread over this process's devices; sums on the owners."""

  def __init__(self, *args, **kwargs):
    super(SharedStrategy, self).__init__(*args, **kwargs)
    self._placer = GreedyVariablePlacer(self.devices)

  def replica_of_tower(self, i):
    return 0

  def _device_function(self, i):
    if self.num_stages > 1:  # The model's parts go to their stages; the task head to the last.
      return self.tower_stages[i][-1]
    return self._placer.device_function(self.tower_devices[i])

  def reduce(self, device_sums, scale):
    return [reduce_on_owners(device_sums, self.replica_variables[0], scale)]


class HierarchicalStrategy(SharedStrategy):
  """`shared` inside each process, then an all-reduce of the owners' sums across processes."""

  def reduce(self, device_sums, scale):
    variables = self.replica_variables[0]
    local = reduce_on_owners(device_sums, variables, scale)
    reduced = list(local)
    for device in distinct(v.device for v in variables):
      owned = [j for j, v in enumerate(variables)
               if v.device == device and local[j] is not None]
      if not owned:
        continue
      reducer = collective.PackedAllReduce([variables[j].shape for j in owned],
                                           self._group(self._suffix(device)), self.pack_mb,
                                           self.timeout_s)
      for j, summed in zip(owned, reducer([local[j] for j in owned], device)):
        reduced[j] = summed
    return [reduced]

  def post_init_op(self):
    return self._broadcast_from_chief(self.savable_variables())


class AllReduceStrategy(ParallelStrategy):
  """A copy of the variables per device, kept identical by a packed collective all-reduce."""

  def __init__(self, *args, **kwargs):
    super(AllReduceStrategy, self).__init__(*args, **kwargs)
    self._copies = {}  # replica copy name -> its stock (replica 0) name

  def replica_of_tower(self, i):
    return self.devices.index(self.tower_devices[i])

  def _device_function(self, i):
    return self.tower_stages[i][-1]

  def _custom_getter(self, replica):
    if not replica:
      return None

    def replica_getter(getter, name, *args, **kwargs):
      copy_name = "replica_%d/%s" % (replica, name)
      self._copies[copy_name] = name
      return getter(copy_name, *args, **kwargs)

    return replica_getter

  def _check_replica(self, replica, created):
    if not replica:
      return tf.trainable_variables()
    names = [self._copies.get(v.op.name) for v in created]
    stock = [v.op.name for v in self.replica_variables[0]]
    if names != stock:
      raise ValueError("--reduction=allreduce: the tower on replica %d created variables %s, "
                       "not copies of replica 0's %s (were trainable variables created outside "
                       "tower_fn?)" % (replica, names[:3], stock[:3]))
    return created

  def _stock_name(self, name):
    """The stock name a copy's variable (or one of its slots) stands for; None for masters."""
    parts = name.split("/")
    for end in range(len(parts), 0, -1):
      prefix = "/".join(parts[:end])
      if prefix in self._copies:
        return "/".join([self._copies[prefix]] + parts[end:])
    return None

  def reduce(self, device_sums, scale):
    """One packed all-reduce per pipeline stage, over that stage's device of every replica."""
    variables = self.replica_variables[0]
    replica_stages = [self.tower_stages[self.tower_devices.index(d)] for d in self.devices]
    stage_of = [replica_stages[0].index(v.device) if v.device in replica_stages[0] else
                self.num_stages - 1 for v in variables]
    reduced = [[None] * len(variables) for _ in self.devices]
    for stage in range(self.num_stages):
      members = [self._in_process(stages[stage], p)
                 for p in range(self.cluster.num_processes) for stages in replica_stages]
      shapes = [v.shape if stage_of[j] == stage and device_sums[0][j] is not None else None
                for j, v in enumerate(variables)]
      if len(members) == 1:
        with tf.device(members[0]):
          out = [[sum_gradients([g], scale) if shape is not None else None
                  for g, shape in zip(device_sums[0], shapes)]]
      else:
        reducer = collective.PackedAllReduce(shapes, members, self.pack_mb, self.timeout_s)
        out = [reducer([g if shape is not None else None for g, shape in zip(grads, shapes)],
                       stages[stage], scale)
               for stages, grads in zip(replica_stages, device_sums)]
      for r, grads in enumerate(out):
        for j, grad in enumerate(grads):
          if shapes[j] is not None:
            reduced[r][j] = grad
    return reduced

  def savable_variables(self):
    return [v for v in tf.global_variables() if self._stock_name(v.op.name) is None]

  def post_init_op(self):
    """Broadcast the chief's replica 0 (multi-process), then copy replica 0 into the others."""
    broadcast = self._broadcast_from_chief(self.savable_variables())
    masters = {v.op.name: v for v in self.savable_variables()}
    with tf.control_dependencies([broadcast]):
      copies = [v.assign(masters[self._stock_name(v.op.name)], read_value=False)
                for v in tf.global_variables() if self._stock_name(v.op.name) is not None]
    return tf.group(broadcast, *copies, name="replica_sync")
