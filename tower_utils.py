"""In-graph replication: one model graph per tower, on one host or several.

This is the public front of the parallel engine and the only module the rest of the project
asks about devices: the engine (run_setup, training, inference) calls `parallel_spec`,
`build_towers`, `session_config` and `new_session`; run scripts never name a device, a process
count or a strategy.

The counts, one word each (flags in brackets):
- devices: what a process brings (--n_gpus, which keeps its stock name): GPUs, or virtual CPU
  devices without one. Device i of a process is GPU (i mod G), G the GPUs it uses: those of
  CUDA_VISIBLE_DEVICES, or its own block of them when several processes share the host
  (`process_gpus`), so --n_gpus may exceed the cards and devices then share one; with no
  GPU, device i is its own virtual CPU device `/device:CPU:i` (`ConfigProto(device_count={"CPU":
  n})`, see `session_config`), so every multi-tower code path runs and is tested on a CPU-only
  machine. See `process_devices` and `devices_per_process`.
- stages (--pipeline_stages, K): the devices one tower is cut over (parallel/pipeline.py).
- towers (`ParallelSpec.n_towers`): the model replicas of one graph, devices / stages; tower i's
  stage s is device i*K+s of its process (`stage_devices`).
- processes (--worker_hosts, TF_CONFIG or Slurm; parallel/cluster.py): each builds its own graph
  of towers on its own devices (`/job:worker/replica:0/task:k/device:...`), except under
  `placement="inter_first"`, where the chief's one graph holds the towers of all processes
  (devices * processes / stages of them) and a tower's stages span the processes; the others
  only serve their devices (`serve_chief_graph`).

What a tower does. Each tower takes an equal slice of the process's micro-batch
(`batch_size_per_tower * n_towers` rows), runs its forward and backward pass on its own device
(gradients are colocated with their forward ops), and returns its loss and gradients. A tower
whose loss is a mean over tokens divides by its share of the token count of the whole global
batch (`GlobalBatch.loss_denominator`), so the mean of the tower losses of all processes is the
loss of the global batch whatever each tower holds. With `use_xla` each tower's forward and
backward pass is compiled by XLA (`jit_scope`; on GPUs `session_config` also turns on
auto-clustering).

Nothing is left for TensorFlow's placer, which would put an op without a device on GPU:0: every
op of a step asks for a device or is colocated with what it reads (benchmarks/placement_audit.py
checks a run's graph as on N GPUs, tests/test_placement_audit.py every mode).

Gradients are reduced in two stages: towers on the same device are summed there (a local sum);
then a strategy (parallel/strategies.py, where each mode's cost and best use are described)
reduces the device sums across devices and processes:

| `--reduction` | one process | several processes |
| --- | --- | --- |
| shared (default) | SharedStrategy: one copy, spread over the devices, sums on the owners | HierarchicalStrategy: shared in each process, all-reduce of the owners' sums across processes |
| allreduce | AllReduceStrategy: a copy per device, packed collective all-reduce | AllReduceStrategy over every device of every process |

Gradient accumulation (`accum_steps` = K > 1, parallel/accumulation.py): the first K-1
micro-batches of an update only accumulate on their devices; the K-th is added and only then
reduced, once per effective batch of `batch_size_per_tower * towers * processes * K` rows
(`global_batch_size`). The
reduced gradient is scaled by 1/(towers of all processes * K), so it is the gradient of the
mean loss over the effective batch.

Activation recomputation (`recompute` "layer", parallel/recompute.py): every encoder layer built in
a tower keeps only its input for the backward pass and is built again there; the update is
unchanged. Inference graphs never recompute.

Loss scaling (`loss_scale`, for float16): each tower differentiates loss * loss_scale, and the
reduced gradients are multiplied by 1/loss_scale together with the averaging factor.
"""

import atexit
import collections
import contextlib
import os

from absl import logging
import tensorflow.compat.v1 as tf

from core.errors import InputError
import modeling
from parallel import accumulation
from parallel import cluster as cluster_lib
from parallel import collective
from parallel import pipeline
from parallel import recompute as recompute_lib
from parallel import strategies

REDUCTIONS = ("shared", "allreduce")
PLACEMENTS = ("intra_first", "inter_first")
DEFAULT_PACK_MB = 32.0
DEFAULT_COLLECTIVE_TIMEOUT_S = 300.0

ParallelSpec = collections.namedtuple("ParallelSpec", [
    "n_towers",  # towers (model replicas) of this process's graph: --n_gpus / pipeline_stages
                 # (inter_first: the chief's graph, --n_gpus * processes / pipeline_stages)
    "reduction",  # "shared" or "allreduce"
    "accum_steps",  # micro-batches per update (--grad_accum_steps)
    "pack_mb",  # collective pack size (--allreduce_pack_mb)
    "cluster",  # parallel.cluster.Cluster; SINGLE_PROCESS for one process
    "collective_timeout_s",  # how long a collective waits for the other processes
    "pipeline_stages",  # devices per tower (its stages, parallel/pipeline.py)
    "num_micro_batches",  # micro-batches that flow through a tower's stages per step
    "placement",  # "intra_first": a process holds whole towers; "inter_first": stages span
                  # processes (the chief's one graph, see stage_devices)
    "recompute",  # "none" or "layer": encoder layers recomputed in the backward pass
    "pipeline_schedule",  # "gpipe" or "1f1b" (parallel/pipeline.SCHEDULES)
], defaults=("none", "gpipe"))

# The one place that chooses a strategy class: by reduction mode and whether there are several
# processes.
_STRATEGIES = {
    ("shared", False): strategies.SharedStrategy,
    ("shared", True): strategies.HierarchicalStrategy,
    ("allreduce", False): strategies.AllReduceStrategy,
    ("allreduce", True): strategies.AllReduceStrategy,
}

TowerResult = collections.namedtuple(
    "TowerResult",
    ["loss", "grads_and_vars", "outputs", "devices", "replica_grads_and_vars",
     "accumulate_ops", "strategy"],
    defaults=(None, None, None))


def parallel_spec(n_towers=1, *, reduction="shared", accum_steps=1, pack_mb=DEFAULT_PACK_MB,
                  cluster=cluster_lib.SINGLE_PROCESS,
                  collective_timeout_s=DEFAULT_COLLECTIVE_TIMEOUT_S, pipeline_stages=1,
                  num_micro_batches=1, placement="intra_first", recompute="none",
                  pipeline_schedule="gpipe"):
  """A checked ParallelSpec; everything downstream trusts it. Every argument but n_towers is
  keyword-only (the fields of ParallelSpec).

  n_towers counts the towers (model replicas) of this process's graph; with pipeline_stages K
  each tower runs on K devices, so a process uses n_towers * K devices (--n_gpus: engine/
  run_setup turns the device count into towers). With placement "inter_first" the cluster is
  an in-graph view (Cluster.in_graph_view) and n_towers counts the towers of all processes,
  whose stages span them.

  Raises:
    InputError: naming the flag of a value out of range.
  """
  if n_towers is None or int(n_towers) < 1:
    raise InputError("n_towers=%s: expected an integer >= 1 (--n_gpus / --pipeline_stages)" %
                     n_towers)
  if reduction not in REDUCTIONS:
    raise InputError("--reduction=%s: expected one of %s" % (reduction, ", ".join(REDUCTIONS)))
  if accum_steps is None or int(accum_steps) < 1:
    raise InputError("--grad_accum_steps=%s: expected an integer >= 1" % accum_steps)
  if not pack_mb > 0:
    raise InputError("--allreduce_pack_mb=%s: expected a positive number" % pack_mb)
  if not collective_timeout_s > 0:
    raise InputError("--collective_timeout_s=%s: expected a positive number of seconds" %
                     collective_timeout_s)
  if pipeline_stages is None or int(pipeline_stages) < 1:
    raise InputError("--pipeline_stages=%s: expected an integer >= 1" % pipeline_stages)
  if num_micro_batches is None or int(num_micro_batches) < 1:
    raise InputError("--num_micro_batches=%s: expected an integer >= 1" % num_micro_batches)
  if placement not in PLACEMENTS:
    raise InputError("--placement=%s: expected one of %s" % (placement, ", ".join(PLACEMENTS)))
  if placement == "inter_first" and not cluster.in_graph:
    raise InputError("--placement=inter_first: expected several processes (--worker_hosts, "
                     "TF_CONFIG or Slurm) and --pipeline_stages > 1")
  return ParallelSpec(int(n_towers), reduction, int(accum_steps), float(pack_mb), cluster,
                      float(collective_timeout_s), int(pipeline_stages), int(num_micro_batches),
                      placement, recompute_lib.check_mode(recompute),
                      pipeline.check_schedule(pipeline_schedule, int(pipeline_stages),
                                              int(num_micro_batches)))


def num_visible_gpus():
  """How many GPUs TensorFlow can use (those listed in CUDA_VISIBLE_DEVICES, when it is set)."""
  return len(tf.config.list_physical_devices("GPU"))


def process_gpus(n_devices, cluster=cluster_lib.SINGLE_PROCESS):
  """Which of the GPUs TensorFlow sees (positions in CUDA_VISIBLE_DEVICES) this process uses.

  One process per host: all of them. Several processes of the run on one host (tasks whose
  addresses name the same host: Slurm's tasks of a node, scripts/launch_local_workers.sh, a
  TF_CONFIG with several tasks per machine) would otherwise all use the same cards, which NCCL
  refuses: when the host's visible GPUs hold n_devices for each of them, the process of local
  rank r takes the r-th block of n_devices. With fewer cards each process uses all it sees: it
  was given its own by CUDA_VISIBLE_DEVICES (or shares, which the handshake refuses).

  Returns:
    list of GPU positions (empty without GPUs).
  """
  visible = num_visible_gpus()
  local = cluster.local_ranks()
  if len(local) > 1 and visible >= len(local) * n_devices:
    first = local.index(cluster.rank) * n_devices
    return list(range(first, first + n_devices))
  return list(range(visible))


def visible_card_names():
  """The entries of CUDA_VISIBLE_DEVICES (indexes or UUIDs), or None when it is unset or empty."""
  visible = os.environ.get("CUDA_VISIBLE_DEVICES")
  return [c.strip() for c in visible.split(",")] if visible else None


def gpu_cards(n_devices, cluster=cluster_lib.SINGLE_PROCESS):
  """The cards of process_gpus as CUDA_VISIBLE_DEVICES names them (its index without it)."""
  names = visible_card_names() or []
  return [names[i] if i < len(names) else str(i) for i in process_gpus(n_devices, cluster)]


def process_devices(n_devices, cluster=cluster_lib.SINGLE_PROCESS):
  """The names of a process's devices 0..n_devices-1: GPU (i mod its GPUs), or virtual CPU i.

  Args:
    n_devices: devices of the process (--n_gpus), >= 1.
    cluster: the run's processes; in a multi-process run the names carry this task, and the
      GPUs are this process's share of its host's (process_gpus).

  Returns:
    list of n_devices device strings, e.g. ["/device:GPU:0", "/device:GPU:1", "/device:GPU:0"]
    with 2 GPUs.
  """
  gpus = len(process_gpus(n_devices, cluster))
  prefix = cluster.device_prefix()
  if gpus:
    return ["%s/device:GPU:%d" % (prefix, i % gpus) for i in range(n_devices)]
  return ["%s/device:CPU:%d" % (prefix, i) for i in range(n_devices)]


def stage_devices(spec):
  """Per tower of this graph, its device of each stage.

  intra_first: tower i's stage s on this process's device i*K+s, so a process holds whole
  towers. inter_first: the devices of all P processes are taken local index first ((task 0,
  device 0), (task 1, device 0), ..., (task 0, device 1), ...) and tower i's stage s is the
  (i*K+s)-th; with K = P, tower i's stages are device i of every process, so only activations
  cross processes, and the replicas of a stage (device i of one process) reduce locally.

  Returns:
    list of spec.n_towers lists of spec.pipeline_stages device names.
  """
  stages = spec.pipeline_stages
  if spec.placement == "inter_first":
    cluster = spec.cluster
    flat = [cluster.device_prefix(r) + collective.device_suffix(device)
            for device in process_devices(devices_per_process(spec), cluster)
            for r in range(len(cluster.tasks))]
  else:
    flat = process_devices(devices_per_process(spec), spec.cluster)
  return [flat[i * stages:(i + 1) * stages] for i in range(spec.n_towers)]


def devices_per_process(spec):
  """The devices each process brings to spec's graph (--n_gpus in training): towers x stages,
  shared out over the processes of an in-graph run."""
  n_devices = spec.n_towers * spec.pipeline_stages
  return -(-n_devices // len(spec.cluster.tasks)) if spec.cluster.in_graph else n_devices


def global_batch_size(spec, batch_size_per_tower):
  """Rows per update: batch_size_per_tower * towers * processes * accumulation steps."""
  return batch_size_per_tower * spec.n_towers * spec.cluster.num_processes * spec.accum_steps


def session_config(n_devices, use_xla=False, intra_op_threads=0, inter_op_threads=0,
                   cluster=cluster_lib.SINGLE_PROCESS):
  """A ConfigProto under which all `process_devices(n_devices, cluster)` exist.

  On CPU-only machines it creates n_devices virtual CPU devices; they share one intra-op thread
  pool, so more towers than cores do not oversubscribe the machine. Soft placement lets the few
  ops that have no GPU kernel (e.g. some int64 ops of the input) fall back to the CPU.

  Args:
    n_devices: devices of this process (devices_per_process of a spec).
    use_xla: also turn on XLA auto-clustering (it acts on GPUs; on CPUs the towers' jit_scope
      of build_towers is what compiles).
    intra_op_threads, inter_op_threads: thread pool sizes, 0 = TensorFlow's choice (the number
      of cores).
    cluster: in a multi-process run, also the collective group leader and device filters.
  """
  config = tf.ConfigProto(allow_soft_placement=True,
                          intra_op_parallelism_threads=intra_op_threads,
                          inter_op_parallelism_threads=inter_op_threads)
  if num_visible_gpus():
    config.gpu_options.allow_growth = True
    config.experimental.collective_nccl = bool(cluster.tasks)
    gpus = process_gpus(n_devices, cluster)
    if len(gpus) < num_visible_gpus():  # This process's share of the host's cards.
      config.gpu_options.visible_device_list = ",".join(str(g) for g in gpus)
  else:
    config.device_count["CPU"] = n_devices
  if use_xla:
    config.graph_options.optimizer_options.global_jit_level = tf.OptimizerOptions.ON_1
  return cluster_lib.session_config(cluster, config)


def new_session(spec, use_xla=False, graph=None, intra_op_threads=0, inter_op_threads=0):
  """A Session for a graph built with `spec`: local, or this process's server in a cluster."""
  if spec.cluster.in_graph:  # A Session waits without end for a task that does not listen.
    cluster_lib.wait_for_tasks(spec.cluster, spec.collective_timeout_s)
  config = pipeline.configure_session(spec.pipeline_schedule, session_config(
      devices_per_process(spec), use_xla, intra_op_threads, inter_op_threads,
      cluster=spec.cluster))
  return tf.Session(cluster_lib.session_target(spec.cluster, config), graph=graph,
                    config=config)


def serves_chief_graph(spec):
  """Whether this process only serves its devices to the chief's one graph: a process other
  than the chief of an in-graph run (placement "inter_first"). It builds nothing itself."""
  return spec.cluster.in_graph and not spec.cluster.is_chief


def serve_chief_graph(spec):
  """Runs the chief's graph on this process's devices until the chief releases them.

  Raises:
    InputError: the chief does not come within spec.collective_timeout_s, or drops out.
  """
  cluster_lib.serve_chief_graph(
      spec.cluster, session_config(devices_per_process(spec), cluster=spec.cluster),
      spec.collective_timeout_s)


def start_chief_graph(spec):
  """The chief of an in-graph run starts its server now (the others wait for it to listen) and
  releases the others when this process exits."""
  config = session_config(devices_per_process(spec), cluster=spec.cluster)
  cluster_lib.session_target(spec.cluster, config)
  atexit.register(cluster_lib.release_tasks, spec.cluster, config)


# What one step of a loop runs, marked in the graph (mark_step) for tools that read the graph
# without running it (benchmarks/placement_audit.py counts the bytes a step moves between
# devices). "update": the run that applies an update (or one inference batch); "accumulate": one
# of the accum_steps - 1 runs before it that only accumulate gradients.
STEP_KINDS = ("update", "accumulate")


def step_collection(kind):
  """The graph collection holding the fetches of a step run of `kind` (one of STEP_KINDS)."""
  return "bert_mgpu_step_" + kind


def mark_step(kind, fetches):
  """Records in the default graph that a run of `kind` fetches `fetches` (Tensors or ops;
  nested dicts and lists are flattened; None is skipped)."""
  for fetch in tf.nest.flatten(fetches):
    if fetch is not None:
      tf.add_to_collection(step_collection(kind), fetch)


def input_device(spec):
  """This process's CPU, where its input pipeline runs."""
  return spec.cluster.device_prefix() + "/device:CPU:0"


def input_shard(spec):
  """The parallel.cluster.Shard of the training data this process reads."""
  return cluster_lib.Shard(spec.cluster.rank, spec.cluster.num_processes)


def join_processes(spec, must_agree, from_chief):
  """Meets the other processes before training (a no-op in one process).

  Args:
    spec: ParallelSpec.
    must_agree: OrderedDict name -> int or str that every process must share.
    from_chief: OrderedDict name -> int where the chief's value wins.

  Returns:
    dict of the chief's `from_chief` values (this process's own in a one-process run).

  Raises:
    InputError: a process disagrees or does not join within spec.collective_timeout_s.
  """
  if not spec.cluster.tasks:
    return dict(from_chief)
  n_devices = devices_per_process(spec)
  if spec.cluster.in_graph:
    _check_devices_exist(spec)
    return dict(from_chief)
  facts = collections.OrderedDict([
      ("--n_gpus", n_devices),
      ("number of devices (visible GPUs)", len(set(process_devices(n_devices, spec.cluster)))),
      ("--pipeline_stages", spec.pipeline_stages),
      ("--num_micro_batches", spec.num_micro_batches),
      ("--reduction", spec.reduction),
      ("--grad_accum_steps", spec.accum_steps),
      ("--allreduce_pack_mb", repr(spec.pack_mb)),
      ("--recompute", spec.recompute),
      ("--pipeline_schedule", spec.pipeline_schedule),
  ])
  facts.update(must_agree)
  return cluster_lib.handshake(spec.cluster, session_config(n_devices, cluster=spec.cluster),
                               facts, from_chief, spec.collective_timeout_s,
                               cards=gpu_cards(n_devices, spec.cluster))


def _check_devices_exist(spec):
  """Raises InputError unless every stage device of the chief's one graph exists: soft placement
  would otherwise move a missing remote device's stage elsewhere without a word."""
  with tf.Graph().as_default(), new_session(spec) as sess:
    present = {tf.DeviceSpec.from_string(d.name).to_string() for d in sess.list_devices()}
  for tower in stage_devices(spec):
    for device in tower:
      if tf.DeviceSpec.from_string(device).to_string() not in present:
        raise InputError("device %s does not exist: start every process with the same "
                         "--n_gpus (and as many visible GPUs)" % device)


def log_device_map(devices, cards=None):
  """Logs which device each tower (and each of its stages) runs on, with the physical card.

  Args:
    devices: per tower, its device, or the list of its stage devices.
    cards: this process's GPUs as CUDA_VISIBLE_DEVICES names them, GPU:k being cards[k]
      (gpu_cards); default: all of CUDA_VISIBLE_DEVICES.
  """
  if cards is None:
    cards = visible_card_names()
  for i, stages in enumerate(devices):
    stages = [stages] if isinstance(stages, str) else stages
    for s, device in enumerate(stages):
      note = ""
      if cards and "/device:GPU:" in device:
        index = int(device.rsplit(":", 1)[1])
        if index < len(cards):
          note = " (CUDA_VISIBLE_DEVICES card %s)" % cards[index]
      logging.info("tower %d%s -> %s%s", i, " stage %d" % s if len(stages) > 1 else "",
                   device, note)


class GlobalBatch(object):
  """What a tower may know of the whole global batch: the towers of every process together."""

  def __init__(self, features, strategy, num_micro_batches=1, input_device=None):
    """features: this process's micro-batch, dict of Tensors [rows, ...], before the split;
    num_micro_batches: pipeline micro-batches per tower (each calls tower_fn); input_device:
    where the features are (a count is taken there, and only the scalar travels)."""
    self._features = features
    self._strategy = strategy
    self._input_device = input_device
    self._shares = strategy.num_towers_total * num_micro_batches
    self._denominators = {}

  def loss_denominator(self, count_fn):
    """This tower's share of a count over the global batch (float32 scalar).

    A loss averaged over tokens (masked LM, rewrite targets) must divide by the tokens of the
    whole global batch: per-tower normalisation would weight the towers' tokens unequally. A
    tower that divides its summed loss by this value makes the mean of all towers' losses
    (what build_towers reports and differentiates) exactly the loss of the global batch.

    Args:
      count_fn: callable(features dict) -> float32 scalar (e.g. the number of target tokens).
        Applied once per micro-batch to this process's features; towers calling it with the
        same function share the result.

    With gradient accumulation each micro-batch is normalised by its own count (the counts of
    later micro-batches are not known yet), and the update averages the K micro-batch losses:
    equal to one pass over the effective batch when the micro-batches hold equal counts.

    Returns:
      count summed over every process's micro-batch / number of tower_fn calls of all
      processes (towers x pipeline micro-batches).
    """
    key = getattr(count_fn, "__code__", count_fn)
    if key not in self._denominators:
      with tf.name_scope("global_batch"), tf.xla.experimental.jit_scope(compile_ops=False):
        with tf.device(self._input_device or self._strategy.devices[0]):
          count = tf.cast(count_fn(self._features), tf.float32)
        with tf.device(self._strategy.devices[0]):
          self._denominators[key] = (self._strategy.sum_over_processes(count) /
                                     float(self._shares))
    return self._denominators[key]


def split_features(features, n_towers):
  """Splits every Tensor of `features` into n_towers equal slices along axis 0.

  Each split runs where its tensor is (the input device for a batch, a stage's device for a
  pipeline micro-batch), so each tower copies only its own slice, straight from there.

  Args:
    features: dict of name -> Tensor [rows, ...]; rows divisible by n_towers.
    n_towers: number of slices.

  Returns:
    list of n_towers dicts of name -> Tensor [rows / n_towers, ...].
  """
  shards = [dict() for _ in range(n_towers)]
  for name, tensor in features.items():
    with tf.colocate_with(tensor):
      pieces = tf.split(tensor, n_towers, axis=0)
    for i, piece in enumerate(pieces):
      shards[i][name] = piece
  return shards


def build_towers(tower_fn, features, spec, compute_gradients=True, loss_scale=None,
                 use_xla=False):
  """Builds this process's towers and the reduction of their gradients.

  Args:
    tower_fn: callable(features dict of Tensors [batch_size_per_tower, ...], GlobalBatch) -> (loss
      scalar Tensor or None, outputs dict of Tensors [batch_size_per_tower, ...]). Called once per
      tower; creates variables with tf.get_variable.
    features: dict of Tensors [rows, ...], this process's micro-batch; rows a multiple of
      spec.n_towers.
    spec: ParallelSpec (see parallel_spec).
    compute_gradients: also build each tower's backward pass and the gradient reduction.
    loss_scale: optional float32 scalar Tensor; towers differentiate loss * loss_scale and the
      reduced gradients are divided by it.
    use_xla: compile each tower's forward and backward pass with XLA.

  Returns:
    TowerResult(loss, grads_and_vars, outputs, devices, replica_grads_and_vars, accumulate_ops,
    strategy): the mean tower loss over every process (None if tower_fn returns no loss); the
    reduced (gradient, variable) list of the stock-named variables (None unless
    compute_gradients); the tower outputs concatenated back into [rows, ...] in input order;
    the tower devices; one reduced (gradient, variable) list per replica (all of them to be
    applied); when spec.accum_steps > 1, the pair (first, add) of ops that put one
    micro-batch's gradients into the accumulators, to be run for micro-batches 1 and 2..K-1 of
    each update (grads_and_vars then covers the accumulators plus the K-th micro-batch); and the
    strategy (post_init_op, savable_variables, is_chief).
  """
  stages = stage_devices(spec)
  log_device_map(stages, gpu_cards(devices_per_process(spec), spec.cluster)
                 if visible_card_names() else None)
  devices = [tower[0] for tower in stages]
  strategy = _STRATEGIES[(spec.reduction, spec.cluster.num_processes > 1)](
      stages, spec.cluster, spec.pack_mb, spec.collective_timeout_s)
  global_batch = GlobalBatch(features, strategy, spec.num_micro_batches, input_device(spec))
  losses, outputs, grads = [], [], []
  for i, shard in enumerate(split_features(features, len(devices))):
    placer = pipeline.StagePlacer(stages[i]) if spec.pipeline_stages > 1 else None
    schedule = pipeline.SCHEDULES[spec.pipeline_schedule](stages[i], spec.num_micro_batches)
    with strategy.tower_scope(i), modeling.part_placement_scope(placer), _jit_scope(use_xla), \
        modeling.fused_gelu_compile_scope(use_xla or not num_visible_gpus()), \
        modeling.tower_copy_scope(), \
        modeling.layer_runner_scope(recompute_lib.layer_runner(
            spec.recompute if compute_gradients else "none")):
      loss, micro_losses, tower_outputs = _micro_batches(tower_fn, shard, global_batch,
                                                         schedule, stages[i][-1])
      variables = strategy.tower_variables(i)
      outputs.append(tower_outputs)
      if loss is not None:
        losses.append(loss)
        if compute_gradients:
          grads.append(schedule.gradients(micro_losses, variables, loss_scale))
  mean_loss = _mean_over_processes(losses, strategy)
  outputs = concat_outputs(outputs, input_device(spec))  # The host fetches them: join them there.
  if not compute_gradients:
    return TowerResult(mean_loss, None, outputs, devices, strategy=strategy)

  replica_grads_and_vars, accumulate_ops = _reduce_gradients(grads, devices, strategy, spec,
                                                             loss_scale)
  return TowerResult(mean_loss, replica_grads_and_vars[0], outputs, devices,
                     replica_grads_and_vars, accumulate_ops, strategy)


def _reduce_gradients(grads, devices, strategy, spec, loss_scale):
  """The towers' gradients summed per device, accumulated over spec.accum_steps micro-batches
  and reduced by the strategy, scaled to the gradient of the mean loss.

  Args:
    grads: per tower, its gradient list (in strategy.tower_variables order).
    devices: per tower, its (first) device.
    strategy, spec, loss_scale: as in build_towers.

  Returns:
    (per replica, its list of (gradient, variable); the accumulation ops (first, add), or None).
  """
  device_variables = [strategy.replica_variables[strategy.replica_of_tower(devices.index(d))]
                      for d in strategy.devices]
  device_sums = [_local_sum([g for g, d in zip(grads, devices) if d == device], device)
                 for device in strategy.devices]
  accumulate_ops = None
  if spec.accum_steps > 1:
    device_sums, accumulate_ops = accumulation.accumulate(
        device_sums, device_variables, strategy.devices, spec.accum_steps)
  scale = 1.0 / (strategy.num_towers_total * spec.accum_steps)
  if loss_scale is not None:
    with tf.colocate_with(loss_scale):
      scale = scale / tf.cast(loss_scale, tf.float32)
  replica_grads = strategy.reduce(device_sums, scale)
  return ([list(zip(g, v)) for g, v in zip(replica_grads, strategy.replica_variables)],
          accumulate_ops)


def _micro_batches(tower_fn, shard, global_batch, schedule, last_device):
  """tower_fn over the schedule's micro-batches of `shard` (variables reused after the first).

  Returns:
    (mean of the micro-batch losses or None, the list of micro-batch losses, outputs
    concatenated in row order).
  """
  num_micro_batches = schedule.num_micro_batches
  if num_micro_batches == 1:
    loss, outputs = schedule.forward(0, lambda: tower_fn(shard, global_batch))
    return loss, [loss], outputs
  losses, outputs = [], []
  for m, piece in enumerate(split_features(shard, num_micro_batches)):
    reuse = True if m else None
    with tf.name_scope("micro_%d" % m), tf.variable_scope(tf.get_variable_scope(), reuse=reuse):
      loss, piece_outputs = schedule.forward(m, lambda piece=piece: tower_fn(piece, global_batch))
    losses.append(loss)
    outputs.append(piece_outputs)
  with tf.device(last_device):
    mean = None if losses[0] is None else tf.add_n(losses) / float(num_micro_batches)
  return mean, losses, concat_outputs(outputs, last_device)


def _mean_over_processes(losses, strategy):
  """The mean of the tower losses of every process (None without losses)."""
  if not losses:
    return None
  with tf.device(strategy.devices[0]):
    local = tf.add_n(losses) / float(len(losses))
    return strategy.sum_over_processes(local) / float(strategy.cluster.num_processes)


def _jit_scope(use_xla):
  """XLA's jit_scope when use_xla, else a scope that does nothing."""
  if use_xla:
    return tf.xla.experimental.jit_scope()
  return contextlib.nullcontext()


def _local_sum(tower_grads, device):
  """Sums the gradient lists of the towers running on `device` (one list per tower), each
  variable's where its gradients are (a pipelined tower's are on its stages' devices)."""
  sums = []
  with tf.name_scope("local_gradient_sum"):
    for grads in zip(*tower_grads):
      first = next((g for g in grads if g is not None), None)
      anchor = first.values if isinstance(first, tf.IndexedSlices) else first
      with tf.colocate_with(anchor) if anchor is not None else tf.device(device):
        sums.append(strategies.sum_gradients(grads))
  return sums


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
  return list(zip(strategies.reduce_on_owners(local, variables, 1.0 / n), variables))


def concat_outputs(tower_outputs, device):
  """Concatenates per-tower output dicts along axis 0 (input order), on `device`."""
  if not tower_outputs or not tower_outputs[0]:
    return {}
  with tf.device(device):
    return {name: tf.concat([outputs[name] for outputs in tower_outputs], axis=0)
            for name in tower_outputs[0]}
