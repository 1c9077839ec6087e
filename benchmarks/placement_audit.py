"""Where each op of a run script's graph would run on a machine with N GPUs, and what crosses.

Virtual CPU devices hide the two costs that matter on GPUs: an op that asks for no device runs
on GPU:0 there (TensorFlow's placer puts it on the first device that has a kernel for it), and a
tensor that crosses from one device to another is a real copy over NVLink or PCIe. This tool
shows both without a GPU: it runs a run script with its flags as far as the graph of its first
Session, with `tower_utils` told that N GPUs are visible, and stops there (no Session is made,
nothing runs, no checkpoint is read; a multi-process run does not meet its peers). Then, for the
ops that one step runs (what the engine marks with tower_utils.mark_step), it prints per device:

- unplaced: ops with no requested device and no colocation that read a tensor of another
  device (TensorFlow would put them on GPU:0 and copy their inputs there), and how many;
- no GPU kernel: ops asked onto a GPU that TF 2.21 has no GPU kernel for at their dtypes
  (soft placement moves them to the CPU, with copies both ways);
- bytes in / out per step: every tensor that crosses between devices, counted once per
  destination, from its static shape and dtype (so at the run's precision), plus what each
  member of an all-reduce sends and receives (a ring: 2 (N-1)/N of the reduced bytes). With
  gradient accumulation an update is one applying run plus K-1 accumulating runs; both are
  counted. A crossing tensor whose shape is known only at run time (batches padded to their
  own length) is counted apart, as "unknown".

The device of an op is resolved as TensorFlow's placer would: its requested device (filled in
with the process's job and task), else that of the op it is colocated with, else GPU:0 of its
process; then the CPU of its task if it has no GPU kernel for its dtypes.

  python benchmarks/placement_audit.py --fake_gpus=8 -- run_classifier_mgpu.py \
      --task_name=chnsenti --data_dir=... --vocab_file=... --bert_config_file=... \
      --output_dir=/tmp/audit --do_train --n_gpus=8 --train_batch_size=32

--graph_out=FILE also writes the GraphDef (each op with its requested device and
`_output_shapes`) for TensorBoard or your own checks. Bad input: one `error:` line, exit 2.
"""

import argparse
import collections
import contextlib
import os
import runpy
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
sys.path.insert(0, _REPO)

from engine import tf_env  # pylint: disable=g-import-not-at-top,wrong-import-position,unused-import
import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top,wrong-import-position
from tensorflow.python.framework import kernels  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top,wrong-import-position

from core import arguments
from core.errors import InputError  # pylint: disable=g-import-not-at-top,wrong-import-position
from engine import checkpoints  # pylint: disable=g-import-not-at-top,wrong-import-position
from parallel import strategies  # pylint: disable=g-import-not-at-top,wrong-import-position
import tower_utils  # pylint: disable=g-import-not-at-top,wrong-import-position

# Ops that read only their input's shape: grappler folds them into constants when the shape is
# static, so the input does not travel.
_SHAPE_OPS = frozenset(["Shape", "ShapeN", "Size", "Rank"])
SCRIPTS = ("run_classifier_mgpu.py", "run_pretraining_mgpu.py", "run_rewrite_finetune.py")
CPU = "CPU"
GPU = "GPU"


class _GraphBuilt(BaseException):
  """Raised where the script would open its first Session: carries the graph and its spec.

  A BaseException, so that the scripts' own error handling (which catches Exception) lets it
  through like an interrupt it does not know."""

  def __init__(self, graph, spec):
    super().__init__("graph built")
    self.graph = graph
    self.spec = spec


@contextlib.contextmanager
def _fake_gpus(n_gpus):
  """tower_utils sees n_gpus GPUs; the first Session request raises _GraphBuilt instead; peers
  are not met and checkpoints are not opened (nothing is run)."""
  saved = {}

  def patch(owner, name, value):
    saved[(owner, name)] = getattr(owner, name)
    setattr(owner, name, value)

  def no_session(spec, *unused_args, **unused_kwargs):
    raise _GraphBuilt(tf.get_default_graph(), spec)

  patch(tower_utils, "num_visible_gpus", lambda: n_gpus)
  patch(tower_utils, "new_session", no_session)
  patch(tower_utils, "join_processes", lambda spec, must_agree, from_chief: dict(from_chief))
  patch(tower_utils, "start_chief_graph", lambda spec: None)
  patch(checkpoints, "check_checkpoint_has", lambda *args, **kwargs: None)
  find_checkpoint = checkpoints.find_checkpoint

  def any_checkpoint(output_dir, init_checkpoint):
    """Eval and predict graphs are built without a trained checkpoint: none is read."""
    try:
      return find_checkpoint(output_dir, init_checkpoint)
    except InputError:
      return os.path.join(output_dir, "model.ckpt-0")

  patch(checkpoints, "find_checkpoint", any_checkpoint)
  try:
    yield
  finally:
    for (owner, name), value in saved.items():
      setattr(owner, name, value)


def capture(build_fn, n_gpus):
  """Calls build_fn() as on a machine with n_gpus GPUs until it asks for its first Session.

  Returns:
    (tf.Graph, tower_utils.ParallelSpec of the Session it asked for), or None if build_fn
    returned without asking for one.
  """
  try:
    with _fake_gpus(n_gpus):
      build_fn()
  except _GraphBuilt as built:
    return built.graph, built.spec
  return None


def build_graph(script, script_args, n_gpus):
  """Runs `script` with `script_args` up to its first Session as on a machine with n_gpus GPUs.

  Returns:
    (tf.Graph, tower_utils.ParallelSpec of the Session it asked for).

  Raises:
    SystemExit: the script ended with an error (its own one line is printed).
    InputError: the script ended without one before a Session (exit 0, or nothing that needs
      a Session).
  """
  argv = sys.argv
  sys.argv = [script] + list(script_args)
  try:
    built = capture(lambda: runpy.run_path(script, run_name="__main__"), n_gpus)
  except SystemExit as e:
    if e.code in (130, 143):  # the script's own interrupt line is above
      raise KeyboardInterrupt()
    if e.code not in (0, None):  # Its own `error:` line is above: the one the user needs.
      raise
    raise InputError("%s ended (exit code %s) before it built a graph to run: see its lines "
                     "above" % (os.path.basename(script), e.code))
  finally:
    sys.argv = argv
  if built is None:
    raise InputError("%s ended without asking for a Session (no training, eval or predict in "
                     "its flags, or a process that only serves the chief's graph)" %
                     os.path.basename(script))
  return built


# Devices.

def home_device(spec):
  """The process's own task prefix, where an op without a job or task is placed."""
  return tf.DeviceSpec.from_string(spec.cluster.device_prefix() or "/job:localhost/task:0")


def full_device(requested, home, device_type=GPU):
  """`requested` (possibly partial) completed with home's job/replica/task, as a short string
  like "/job:worker/task:1/GPU:3"; device_type/0 where no device is named."""
  spec = tf.DeviceSpec.from_string(requested or "")
  job = spec.job or home.job
  task = spec.task if spec.task is not None else (home.task or 0)
  kind = (spec.device_type or device_type).upper()
  index = spec.device_index if spec.device_index is not None else 0
  prefix = "" if job == "localhost" else "/job:%s/task:%d" % (job, task)
  return "%s/%s:%d" % (prefix, kind, index)


def on_cpu(device):
  """The CPU of `device`'s task."""
  return device.rsplit("/", 1)[0] + "/CPU:0" if "/" in device[1:] else "/CPU:0"


_KERNEL_CACHE = {}


def has_gpu_kernel(op):
  """Whether TF's kernel registry has a GPU kernel for `op`'s type at its type attributes
  (kernels registered for the DEFAULT device type serve every device, GPUs included)."""
  if op.type not in _KERNEL_CACHE:
    _KERNEL_CACHE[op.type] = [k for k in kernels.get_registered_kernels_for_op(op.type).kernel
                              if k.device_type in (GPU, "DEFAULT")]
  for kernel in _KERNEL_CACHE[op.type]:
    if all(_allows(op, c) for c in kernel.constraint):
      return True
  return False


def _allows(op, constraint):
  """Whether `op`'s type attribute named by `constraint` is among its allowed types."""
  allowed = set(constraint.allowed_values.list.type)
  try:
    value = op.get_attr(constraint.name)
  except ValueError:
    return True
  values = value if isinstance(value, (list, tuple)) else [value]
  return all(getattr(v, "as_datatype_enum", v) in allowed for v in values)


class Placement(object):
  """Each op's device as the placer would choose it (see the module docstring)."""

  def __init__(self, graph, home, default_type=GPU):
    """default_type: where an op without a device goes ("GPU": GPU:0; "CPU" on a machine
    without GPUs)."""
    self._graph = graph
    self._home = home
    self._default_type = default_type
    self._device = {}
    self.unplaced = set()  # names of ops with no device and no colocation
    self.no_gpu_kernel = set()  # names of ops asked onto a GPU without a GPU kernel

  def device(self, op):
    """The resolved device of `op` (a short string, see full_device)."""
    if op.name not in self._device:
      self._device[op.name] = self._resolve(op)
    return self._device[op.name]

  def _resolve(self, op):
    # An op reading a variable through a reference or a resource handle runs where the
    # variable is, whatever it asked for (the placer colocates such edges).
    for tensor in op.inputs:
      if tensor.dtype._is_ref_dtype or tensor.dtype.base_dtype == tf.resource:  # pylint: disable=protected-access
        if tensor.op.type in strategies.VARIABLE_OP_TYPES:
          return self.device(tensor.op)
    if op.device:
      device = full_device(op.device, self._home)
    else:
      groups = [g[len(b"loc:@"):].decode() for g in op.colocation_groups()]
      others = [g for g in groups if g != op.name]
      if others:
        return self.device(self._graph.get_operation_by_name(others[0]))
      device = full_device("", self._home, self._default_type)
      self.unplaced.add(op.name)
    if "/GPU:" in device and not has_gpu_kernel(op):
      if op.device:
        self.no_gpu_kernel.add(op.name)
      device = on_cpu(device)
    return device


# What a step runs and what crosses.

def step_ops(graph, fetches):
  """Every op a Session.run of `fetches` executes (their inputs and control inputs, closed)."""
  seen, stack = set(), [f if isinstance(f, tf.Operation) else f.op for f in fetches]
  while stack:
    op = stack.pop()
    if op.name in seen:
      continue
    seen.add(op.name)
    stack.extend(t.op for t in op.inputs)
    stack.extend(op.control_inputs)
  return [graph.get_operation_by_name(name) for name in seen]


def tensor_bytes(tensor):
  """Bytes of `tensor` from its static shape, or None when a dimension is unknown. Handles
  (resource, variant) count 0: what they stand for moves through the ops that read them."""
  if tensor.dtype.base_dtype in (tf.resource, tf.variant):
    return 0
  if tensor.dtype.base_dtype == tf.string:
    return None
  dims = tensor.shape.as_list() if tensor.shape.dims is not None else None
  if dims is None or any(d is None for d in dims):
    return None
  count = 1
  for d in dims:
    count *= d
  return count * tensor.dtype.base_dtype.size


Crossing = collections.namedtuple("Crossing", ["tensor", "source", "dest", "bytes"])


def crossings(ops, placement):
  """The tensors that cross devices in `ops`, each once per destination device."""
  found = {}
  for op in ops:
    dest = placement.device(op)
    for tensor in op.inputs:
      source = placement.device(tensor.op)
      if op.type in _SHAPE_OPS and tensor.shape.is_fully_defined():
        continue
      if source != dest and (tensor.name, dest) not in found:
        found[(tensor.name, dest)] = Crossing(tensor, source, dest, tensor_bytes(tensor))
  return list(found.values())


def collective_bytes(ops, placement):
  """Per device, the bytes its all-reduces send (and receive) per run: a ring all-reduce of B
  bytes over N members moves 2 (N-1)/N B through each member's links each way (NCCL's ring on
  GPUs and TensorFlow's ring on CPUs alike)."""
  moved = collections.Counter()
  for op in ops:
    if not op.type.startswith("CollectiveReduce"):
      continue
    try:
      size = op.get_attr("group_size")
    except ValueError:
      size = int(tf.get_static_value(op.inputs[1]))
    data = tensor_bytes(op.inputs[0])
    if size > 1 and data:
      moved[placement.device(op)] += int(2 * (size - 1) * data / size)
  return moved


def partition_bytes(partition_graphs, graph, home):
  """Per destination device, the bytes TensorFlow's own partitioning sends there in a run: the
  inputs of its _Send nodes (RunOptions.output_partition_graphs), sized as crossings() sizes
  them, to check the audit against the runtime on virtual devices."""
  sent = collections.Counter()
  for partition in partition_graphs:
    for node in partition.node:
      if node.op != "_Send":
        continue
      name = node.input[0] if ":" in node.input[0] else node.input[0] + ":0"
      try:
        size = tensor_bytes(graph.get_tensor_by_name(name))
      except (KeyError, ValueError):
        continue  # a control edge the partitioner made into a tensor
      sent[full_device(node.attr["recv_device"].s.decode(), home)] += size or 0
  return sent


class DeviceReport(collections.namedtuple("DeviceReport", [
    "ops", "unplaced_readers", "no_gpu_kernel", "bytes_in", "bytes_out", "unknown_in",
    "flops"])):
  """Per device: ops placed there, unplaced ops there that read another device's tensor, ops
  without a GPU kernel asked onto it, bytes received and sent per step, crossing tensors of
  unknown size received, and the FLOPs of its matmuls per step (static shapes only)."""


_MATMULS = frozenset(["MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"])


def matmul_flops(op):
  """2 m n k of a matmul op (batched: times the batch) from static shapes; 0 for other ops or
  unknown shapes. Matmuls are nearly all of a BERT step's FLOPs."""
  if op.type not in _MATMULS or not op.outputs[0].shape.is_fully_defined():
    return 0
  if op.inputs[0].shape.dims is None:
    return 0
  dims = op.inputs[0].shape.as_list()
  k = dims[-2] if op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x") else dims[-1]
  if k is None:
    return 0
  return 2 * op.outputs[0].shape.num_elements() * int(k)


Audit = collections.namedtuple("Audit", ["devices", "runs", "unplaced_examples",
                                         "no_gpu_kernel_examples"])


def audit(graph, spec, runs=None):
  """The placement report of `graph` built for `spec`.

  Args:
    graph: tf.Graph with the engine's step marks (tower_utils.mark_step).
    spec: tower_utils.ParallelSpec it was built with.
    runs: optional {kind: (times per step, fetches)}; default: the graph's marks, the
      accumulating run counted accum_steps - 1 times.

  Returns:
    Audit: devices {device: DeviceReport} (sorted), runs {kind: times}, and a few example op
    names of each problem.
  """
  if runs is None:
    runs = {}
    for kind in tower_utils.STEP_KINDS:
      fetches = graph.get_collection(tower_utils.step_collection(kind))
      times = spec.accum_steps - 1 if kind == "accumulate" else 1
      if fetches and times:
        runs[kind] = (times, fetches)
  if not runs:
    raise InputError("the graph marks no step (tower_utils.mark_step): nothing to audit")
  placement = Placement(graph, home_device(spec))
  stats = collections.defaultdict(collections.Counter)
  unplaced_examples, kernel_examples = [], []
  for times, fetches in runs.values():
    ops = step_ops(graph, fetches)
    for device, moved in collective_bytes(ops, placement).items():
      stats[device]["bytes_in"] += moved * times
      stats[device]["bytes_out"] += moved * times
    for c in crossings(ops, placement):
      if c.bytes is None:
        stats[c.dest]["unknown_in"] += times
      else:
        stats[c.dest]["bytes_in"] += c.bytes * times
        stats[c.source]["bytes_out"] += c.bytes * times
    for op in ops:
      device = placement.device(op)
      stats[device]["ops"] += 1
      stats[device]["flops"] += matmul_flops(op) * times
      if op.name in placement.unplaced and any(placement.device(t.op) != device
                                               for t in op.inputs):
        stats[device]["unplaced_readers"] += 1
        if len(unplaced_examples) < 12:
          unplaced_examples.append("%s (%s)" % (op.name, op.type))
      if op.name in placement.no_gpu_kernel:
        stats[device]["no_gpu_kernel"] += 1
        if len(kernel_examples) < 12:
          kernel_examples.append("%s (%s)" % (op.name, op.type))
  devices = collections.OrderedDict(
      (d, DeviceReport(*(stats[d][f] for f in DeviceReport._fields)))
      for d in sorted(stats, key=_device_order))
  return Audit(devices, {k: t for k, (t, _) in runs.items()}, unplaced_examples,
               kernel_examples)


def _device_order(device):
  """Sort key: task, then CPU before GPU, then index."""
  prefix, _, last = device.rpartition("/")
  kind, _, index = last.partition(":")
  return prefix, kind != CPU, int(index)


def gpu0_ratio(report):
  """GPU:0's inbound bytes over the busiest other GPU's (of the same task), or None."""
  gpus = [(d, r) for d, r in report.devices.items() if "/GPU:" in d]
  first = [r for d, r in gpus if d.endswith("/GPU:0")]
  others = [r.bytes_in for d, r in gpus if not d.endswith("/GPU:0")]
  if not first or not others or not max(others):
    return None
  return first[0].bytes_in / float(max(others))


def format_report(report, title=""):
  """The audit as a plain-text table."""
  lines = []
  if title:
    lines.append(title)
  lines.append("runs per step: %s" % ", ".join("%s x%d" % kv for kv in report.runs.items()))
  lines.append("%-28s %7s %9s %9s %12s %12s %8s" % (
      "device", "ops", "unplaced", "noGPUkrn", "MB in/step", "MB out/step", "unknown"))
  for device, r in report.devices.items():
    lines.append("%-28s %7d %9d %9d %12.2f %12.2f %8d" % (
        device, r.ops, r.unplaced_readers, r.no_gpu_kernel, r.bytes_in / 1e6,
        r.bytes_out / 1e6, r.unknown_in))
  ratio = gpu0_ratio(report)
  if ratio is not None:
    lines.append("GPU:0 inbound / busiest other GPU: %.2f" % ratio)
  if report.unplaced_examples:
    lines.append("unplaced ops reading another device, e.g.: " +
                 ", ".join(report.unplaced_examples))
  if report.no_gpu_kernel_examples:
    lines.append("GPU-placed ops without a GPU kernel, e.g.: " +
                 ", ".join(report.no_gpu_kernel_examples))
  return "\n".join(lines)


def write_graph(graph, path):
  """Writes `graph`'s GraphDef with `_output_shapes` (and each op's requested device) as text."""
  from core import atomic_files  # pylint: disable=g-import-not-at-top
  graph_def = graph.as_graph_def(add_shapes=True)
  try:
    atomic_files.write_text(path, str(graph_def))
  except OSError as e:  # A read-only folder, a full disk: nothing was written there.
    raise InputError("--graph_out=%s: cannot write it (%s)" % (path, e.strerror or e))


def parse_args(argv):
  """(args, script, script_args) of `placement_audit.py [options] -- SCRIPT FLAGS...`; --help
  (before any --) prints the usage and exits 0."""
  parser = arguments.Parser(
      usage="placement_audit.py --fake_gpus=N [--graph_out=FILE] [--row=ROW] -- SCRIPT FLAGS...",
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  options = argv[:argv.index("--")] if "--" in argv else argv
  if "-h" in options or "--help" in options:
    parser.parse_args(["--help"])  # Prints the help; SystemExit(0).
  if "--" not in argv:
    raise InputError("expected `placement_audit.py --fake_gpus=N [--graph_out=FILE] -- SCRIPT "
                     "FLAGS...` (the -- and a run script are missing)")
  cut = argv.index("--")
  parser.add_argument("--fake_gpus", type=int, required=True,
                      help="GPUs the graph is built for (as CUDA_VISIBLE_DEVICES would show).")
  parser.add_argument("--graph_out", default=None,
                      help="Also write the GraphDef (text) with requested devices and shapes.")
  parser.add_argument("--row", default=None,
                      help="Print only one Markdown table row named ROW (scripts/"
                           "placement_table.sh): unplaced readers and ops without a GPU kernel "
                           "on GPUs, GPU:0's MB in, the busiest other GPU's, their ratio, and "
                           "the MB that cross devices per step in all.")
  args = parser.parse_args(argv[:cut])
  if args.fake_gpus < 1:
    raise InputError("--fake_gpus=%d: expected an integer >= 1" % args.fake_gpus)
  rest = argv[cut + 1:]
  if not rest:
    raise InputError("no run script after --: expected one of %s" % ", ".join(SCRIPTS))
  script = rest[0]
  if os.path.basename(script) not in SCRIPTS:
    raise InputError("%s: expected one of %s" % (script, ", ".join(SCRIPTS)))
  if not os.path.isfile(script):
    script = os.path.join(_REPO, os.path.basename(script))
  if args.graph_out and os.path.isdir(args.graph_out):
    raise InputError("--graph_out=%s: is a folder; expected a file name (e.g. %s)" % (
        args.graph_out, os.path.join(args.graph_out, "graph.pbtxt")))
  if args.graph_out and not os.path.isdir(os.path.dirname(os.path.abspath(args.graph_out))):
    raise InputError("--graph_out=%s: its folder does not exist" % args.graph_out)
  return args, script, rest[1:]


def main(argv=None):
  return arguments.run(lambda: _main(sys.argv[1:] if argv is None else argv))


def _main(argv):
  args, script, script_args = parse_args(argv)
  graph, spec = build_graph(script, script_args, args.fake_gpus)
  report = audit(graph, spec)
  if args.graph_out:
    write_graph(graph, args.graph_out)
  if args.row:
    print(table_row(report, args.row))
  else:
    print(format_report(report, "%s with %d fake GPUs" % (os.path.basename(script),
                                                          args.fake_gpus)))
  return 0


TABLE_HEADER = ("| mode | unplaced readers | GPU ops without GPU kernel | GPU:0 MB in | busiest "
                "other GPU MB in | ratio | MB crossing in all |\n| --- | --- | --- | --- | --- | "
                "--- | --- |")


def table_row(report, name):
  """One Markdown row of TABLE_HEADER for `report`."""
  gpus = {d: r for d, r in report.devices.items() if "/GPU:" in d}
  first = [r.bytes_in for d, r in gpus.items() if d.endswith("/GPU:0")]
  others = [r.bytes_in for d, r in gpus.items() if not d.endswith("/GPU:0")]
  ratio = gpu0_ratio(report)
  return "| %s | %d | %d | %.1f | %.1f | %s | %.1f |" % (
      name, sum(r.unplaced_readers for r in report.devices.values()),
      sum(r.no_gpu_kernel for r in report.devices.values()), (first or [0])[0] / 1e6,
      max(others or [0]) / 1e6, "%.2f" % ratio if ratio is not None else "-",
      sum(r.bytes_in for r in report.devices.values()) / 1e6)


if __name__ == "__main__":
  sys.exit(main())
