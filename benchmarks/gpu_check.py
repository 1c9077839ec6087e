"""A short check of each parallel mode on this machine's GPUs, as one table to paste into an issue.

For each mode it builds the engine's real training graph (engine/training.py, the graph every
run script trains with) of the classifier on synthetic batches, runs a few updates, traces one
and prints:
- examples/sec (the faster half of the timed updates), and its ratio to one device's;
- peak GB per device during the traced update (from its allocation records, as
  benchmarks/memory_bench.py), max/min over the devices;
- moved: ops that ran on another device than the graph asked for (soft placement moves an op
  without a GPU kernel to the CPU; benchmarks/placement_audit.py predicts each op's device),
  and the share of all ops that ran on GPU:0 (a peer of the others, about 1/N);
- the MB one applying run sends between devices as TensorFlow partitioned it (its _Send nodes)
  against the placement audit's count for the same graph (all-reduces aside).

On a machine without GPUs it runs the same on virtual CPU devices (the suite runs that path with
a tiny model): the table then says "CPU", and its speed and memory say nothing about GPUs.

  bash scripts/gpu_check.sh                        # every visible GPU, BERT-base, seq 128
  python benchmarks/gpu_check.py --config=small --modes=shared,allreduce --steps=3

Bad arguments: one `error:` line, exit 2.
"""

import collections
import os
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, _HERE)

# pylint: disable=g-import-not-at-top,wrong-import-position
from engine import tf_env  # pylint: disable=unused-import
import numpy as np
import tensorflow.compat.v1 as tf

from core import arguments
from core.errors import InputError
from engine import training
import machine
import memory_bench
import modeling
import pipeline_bench
import placement_audit
import tower_utils
from train_bench import MODEL_CONFIGS
# pylint: enable=g-import-not-at-top,wrong-import-position

TINY = dict(MODEL_CONFIGS["small"], hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, vocab_size=512)
CONFIGS = dict(MODEL_CONFIGS, tiny=TINY)
# Mode name -> tower_utils.parallel_spec options (towers = devices / stages).
MODES = collections.OrderedDict([
    ("shared", {}),
    ("allreduce", {"reduction": "allreduce"}),
    ("accumulation", {"accum_steps": 2}),
    ("gpipe", {"pipeline_stages": 2, "num_micro_batches": 4}),
    ("1f1b", {"pipeline_stages": 2, "num_micro_batches": 4, "pipeline_schedule": "1f1b"}),
])

Check = collections.namedtuple("Check", ["mode", "devices", "examples_per_sec", "peaks", "moved",
                                         "gpu0_share", "ops", "runtime_mb", "audit_mb"])


def _input_fn(config, seq):
  """An input_fn of random classifier batches (ids, mask, segments, labels), repeated."""

  def input_fn(rows, seed, shard):
    del seed, shard
    rng = np.random.RandomState(0)
    data = {"input_ids": rng.randint(1, config.vocab_size, (rows, seq)).astype(np.int32),
            "input_mask": np.ones((rows, seq), np.int32),
            "segment_ids": np.zeros((rows, seq), np.int32),
            "label_ids": rng.randint(0, 2, rows).astype(np.int32)}
    return tf.data.Dataset.from_tensors(data).repeat()

  return input_fn


def build(config, seq, rows, n_devices, n_gpus, options, output_dir, precision="fp32"):
  """The engine's training graph of one mode, built up to its Session: (graph, ParallelSpec)."""
  stages = options.get("pipeline_stages", 1)
  parallel = tower_utils.parallel_spec(max(n_devices // stages, 1), **options)
  spec = training.TrainSpec(
      output_dir=output_dir, parallel=parallel, batch_size_per_tower=rows,
      num_train_steps=1000, num_warmup_steps=10, learning_rate=1e-5, init_checkpoint=None,
      save_checkpoints_steps=1000, log_every_n_steps=1000, keep_checkpoint_max=1, seed=0,
      precision=precision)
  return placement_audit.capture(lambda: training.train(
      pipeline_bench.classifier_tower_fn(config), _input_fn(config, seq), spec), n_gpus)


def run_mode(name, config, seq, rows, n_devices, n_gpus, steps):
  """Check of mode `name` on n_devices devices (GPUs when n_gpus, else virtual CPUs)."""
  options = MODES[name]
  with tempfile.TemporaryDirectory() as output_dir:
    graph, spec = build(config, seq, rows, n_devices, n_gpus, options, output_dir)
  fetches = graph.get_collection(tower_utils.step_collection("update"))
  accumulate = graph.get_collection(tower_utils.step_collection("accumulate"))
  variables = (graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES) +
               graph.get_collection(tf.GraphKeys.LOCAL_VARIABLES))
  with tower_utils.new_session(spec, graph=graph) as sess:
    sess.run([v.initializer for v in variables])

    def update(**kwargs):
      for _ in range(spec.accum_steps - 1):
        sess.run(accumulate, **kwargs)
      sess.run(fetches, **kwargs)

    update()  # warm-up: graph optimization, allocation
    metadata = tf.RunMetadata()  # of the applying run (the last)
    update(options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE,
                                 output_partition_graphs=True), run_metadata=metadata)
    times = []
    for _ in range(steps):
      start = time.time()
      update()
      times.append(time.time() - start)
  faster_half = sorted(times)[:max(len(times) // 2, 1)]
  rows_per_update = rows * spec.n_towers * spec.accum_steps
  devices = [d for tower in tower_utils.stage_devices(spec) for d in tower]
  moved, on_gpu0, ran = _placement(graph, spec, metadata.step_stats, bool(n_gpus))
  home = placement_audit.home_device(spec)
  placement = placement_audit.Placement(graph, home, placement_audit.GPU if n_gpus else "CPU")
  crossing = placement_audit.crossings(placement_audit.step_ops(graph, fetches), placement)
  return Check(name, devices, rows_per_update / float(np.mean(faster_half)),
               memory_bench.device_peaks(metadata.step_stats, devices), moved,
               on_gpu0 / float(max(ran, 1)), ran,
               sum(placement_audit.partition_bytes(metadata.partition_graphs, graph,
                                                   home).values()) / 1e6,
               sum(c.bytes or 0 for c in crossing) / 1e6)


def _placement(graph, spec, step_stats, gpus):
  """(ops that ran elsewhere than predicted, ops that ran on device 0, ops that ran)."""
  home = placement_audit.home_device(spec)
  placement = placement_audit.Placement(graph, home, placement_audit.GPU if gpus else "CPU")
  moved = on_first = ran = 0
  for dev in step_stats.dev_stats:
    if "/stream" in dev.device or "/memcpy" in dev.device:
      continue  # a GPU's stream views repeat its ops
    executed = placement_audit.full_device(dev.device, home)
    for node in dev.node_stats:
      try:
        op = graph.get_operation_by_name(node.node_name)
      except KeyError:
        continue  # _SOURCE, sends and receives the runtime added
      ran += 1
      moved += placement.device(op) != executed
      on_first += executed.endswith("/GPU:0" if gpus else "/CPU:0")
  return moved, on_first, ran


def format_table(checks, kind, config_name, seq, rows):
  """The checks as a Markdown table, with the machine and the baseline."""
  lines = ["%s; %s, seq %d, %d rows per device, TensorFlow %s" % (
      machine.describe(), config_name, seq, rows, tf.__version__),
           "| mode | %ss | examples/sec | vs 1 %s | peak GB per device | max/min | moved ops "
           "| share of ops on device 0 | MB sent between devices: runtime / audit |" % (
               kind, kind),
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
  base = checks[0].examples_per_sec
  for c in checks:
    peaks = [p / 1e9 for p in c.peaks]
    lines.append("| %s | %d | %.1f | %.2f | %s | %.2f | %d of %d | %.2f | %.3f / %.3f |" % (
        c.mode, len(c.devices), c.examples_per_sec, c.examples_per_sec / base,
        ", ".join("%.3f" % p for p in peaks), max(peaks) / max(min(peaks), 1e-9), c.moved,
        c.ops, c.gpu0_share, c.runtime_mb, c.audit_mb))
  return "\n".join(lines)


def parse_args(argv):
  parser = arguments.Parser(description=__doc__.split("\n")[0])
  parser.add_argument("--config", default="base", help="Model: %s." % ", ".join(CONFIGS))
  parser.add_argument("--modes", default=",".join(MODES), help="Modes: %s." % ", ".join(MODES))
  parser.add_argument("--n_devices", type=int, default=0,
                      help="Devices (default: every visible GPU; 2 virtual CPUs without one).")
  parser.add_argument("--seq", type=int, default=128, help="Sequence length.")
  parser.add_argument("--rows", type=int, default=16, help="Rows per device (per tower).")
  parser.add_argument("--steps", type=int, default=6, help="Timed updates per mode.")
  args = parser.parse_args(argv)
  if args.config not in CONFIGS:
    raise InputError("--config=%s: expected one of %s" % (args.config, ", ".join(CONFIGS)))
  modes = [m.strip() for m in args.modes.split(",") if m.strip()]
  unknown = [m for m in modes if m not in MODES]
  if unknown or not modes:
    raise InputError("--modes=%s: expected some of %s" % (args.modes, ", ".join(MODES)))
  for flag in ("seq", "rows", "steps"):
    if getattr(args, flag) < 1:
      raise InputError("--%s=%d: expected an integer >= 1" % (flag, getattr(args, flag)))
  if args.n_devices < 0:
    raise InputError("--n_devices=%d: expected an integer >= 0" % args.n_devices)
  args.modes = modes
  return args


def main(argv=None):
  return arguments.run(lambda: _main(sys.argv[1:] if argv is None else argv))


def _main(argv):
  """Runs the checks of `argv`'s modes and prints their table."""
  args = parse_args(argv)
  gpus = tower_utils.num_visible_gpus()
  n_devices = args.n_devices or gpus or 2
  pipelined = [m for m in args.modes if MODES[m].get("pipeline_stages", 1) > 1]
  if pipelined and n_devices < 2:
    raise InputError("--modes=%s: pipeline modes need 2 devices or more" % ",".join(pipelined))
  for mode in pipelined:  # Else a device would sit idle, and the table count it.
    stages = MODES[mode]["pipeline_stages"]
    if n_devices % stages:
      raise InputError("--n_devices=%d: --modes=%s needs a multiple of its %d pipeline stages "
                       "(every tower takes one device per stage)" % (n_devices, mode, stages))
  micro = max([MODES[m].get("num_micro_batches", 1) for m in args.modes])
  if args.rows % micro:
    raise InputError("--rows=%d: expected a multiple of %d (the micro-batches of %s)" %
                     (args.rows, micro, ",".join(pipelined)))
  config = modeling.BertConfig(**CONFIGS[args.config])
  one = run_mode("shared", config, args.seq, args.rows, 1, gpus, args.steps)
  checks = [one._replace(mode="shared, 1 device")] + [
      run_mode(m, config, args.seq, args.rows, n_devices, gpus, args.steps)
      for m in args.modes]
  print(format_table(checks, "GPU" if gpus else "CPU", args.config, args.seq, args.rows))
  return 0


if __name__ == "__main__":
  sys.exit(main())
