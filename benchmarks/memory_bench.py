"""Measured peak memory per device and step time: plain, --recompute=layer, GPipe and 1F1B.

  python benchmarks/memory_bench.py                       # the table of docs/results/memory.md
  python benchmarks/memory_bench.py --cases=base-128 --modes=plain,recompute --rows=4

For each case (BERT-base at seq 128 and 512, BERT-large at seq 128; random weights, the
classifier's tower) and each mode, one training step (forward, backward, Adam) is built with
tower_utils as the run scripts build it, run once traced and once timed. The memory figure is
the allocator's: a traced step (RunOptions FULL_TRACE) records every allocation and every
release of every op with the device the op ran on (RunMetadata step_stats, the records
TensorFlow's own timeline draws); replaying them in time order gives the peak of the bytes live
on each device during the step. It counts what a step allocates -- activations, their
gradients, the weight gradients, the optimizer's temporaries -- and not what persists between
steps (weights, Adam slots), which parallel/pipeline.plan_stages gives per stage. The same
records exist on GPUs (the GPU allocator's device is the GPU), so the code reports GPU memory
where there is one; there `tf.config.experimental.get_memory_info` would give the same peak.

"activation peak" subtracts one copy of the dense weight gradients of the variables on that
device (4 bytes per parameter; what any schedule must hold at the end of the step; the word
table's gradient is sparse, only the rows looked up, and is not subtracted) from the peak, so
that the schedules' difference, which is activations, is read without the fixed part.

Modes: plain (one device); recompute (--recompute=layer); gpipe and 1f1b (--pipeline_stages=K,
--num_micro_batches=M, K devices); 1f1b+recompute; towers-shared and towers-allreduce (--towers
in-graph replicas of --rows rows each, one device each, --reduction=shared or allreduce: the
peak of every tower's device, and max/min over them, which the target wants <= 1.1: no device
piling up more than the others, as the first GPU does under PyTorch's DataParallel).
"""

import argparse
import collections
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, _HERE)
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # not the profiler's lines of each trace

# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import tensorflow.compat.v1 as tf

import machine
import optimization
import pipeline_bench
import tower_utils
# pylint: enable=g-import-not-at-top,wrong-import-position

CASES = {"base-128": (pipeline_bench.BERT_BASE, 128), "base-512": (pipeline_bench.BERT_BASE, 512),
         "large-128": (pipeline_bench.BERT_LARGE, 128)}
MODES = {  # mode -> parallel_spec keyword arguments (stages and micro-batches filled in)
    "plain": {},
    "recompute": {"recompute": "layer"},
    "gpipe": {"pipeline_schedule": "gpipe", "pipelined": True},
    "1f1b": {"pipeline_schedule": "1f1b", "pipelined": True},
    "1f1b+recompute": {"pipeline_schedule": "1f1b", "recompute": "layer", "pipelined": True},
    "towers-shared": {"reduction": "shared", "towers": True},
    "towers-allreduce": {"reduction": "allreduce", "towers": True},
}
TOWER_MODES = ("towers-shared", "towers-allreduce")

Measurement = collections.namedtuple("Measurement", [
    "peaks",  # per device of the tower (stage order), peak bytes live during the step
    "gradient_bytes",  # per device, bytes of the weight gradients of the variables there
    "step_s",  # seconds of one untraced step
    "variable_bytes",  # per device, bytes that persist between steps: variables, Adam slots
])


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--cases", default="base-128,base-512,large-128",
                 help="Comma-separated: " + ", ".join(CASES))
  p.add_argument("--modes", default=",".join(m for m in MODES if m not in TOWER_MODES),
                 help="Comma-separated: " + ", ".join(MODES) + " (default: all but the tower "
                 "modes).")
  p.add_argument("--rows", type=int, default=8,
                 help="Rows per step of one tower (the tower modes: per tower).")
  p.add_argument("--towers", type=int, default=4,
                 help="Towers of the tower modes (in-graph replicas on as many devices).")
  p.add_argument("--stages", type=int, default=2, help="Pipeline stages K.")
  p.add_argument("--micro_batches", type=int, default=8, help="Micro-batches M.")
  p.add_argument("--timed_steps", type=int, default=2,
                 help="Untraced steps timed after the traced one; the fastest is reported.")
  p.add_argument("--skip", default="",
                 help="Comma-separated case:mode pairs not to run (e.g. base-512:gpipe).")
  return p.parse_args(argv)


def device_peaks(step_stats, devices):
  """Peak bytes live on each device during a traced step, from its allocation records.

  Args:
    step_stats: RunMetadata.step_stats of a FULL_TRACE step.
    devices: device names, in the order wanted.

  Returns:
    list of peak bytes, one per device (0 for a device with no record).
  """
  wanted = [tf.DeviceSpec.from_string(d) for d in devices]
  events = collections.defaultdict(list)
  for dev in step_stats.dev_stats:
    spec = tf.DeviceSpec.from_string(dev.device.split("/stream")[0].split("/memcpy")[0])
    for node in dev.node_stats:
      for memory in node.memory:
        for record in memory.allocation_records:
          events[(spec.device_type, spec.device_index)].append(
              (record.alloc_micros, record.alloc_bytes))
  peaks = []
  for spec in wanted:
    live = peak = 0
    for _, size in sorted(events[(spec.device_type, spec.device_index)]):
      live += size
      peak = max(peak, live)
    peaks.append(peak)
  return peaks


def measure(case, mode, args):
  """Measurement of one training step of `case` under `mode`."""
  base, seq = CASES[case]
  config = pipeline_bench._config(base)  # pylint: disable=protected-access
  options = dict(MODES[mode])
  if options.pop("pipelined", False):
    options.update(pipeline_stages=args.stages, num_micro_batches=args.micro_batches)
  towers = args.towers if options.pop("towers", False) else 1
  return measure_spec(config, seq, args.rows * towers,
                      tower_utils.parallel_spec(towers, **options), args.timed_steps)


def measure_spec(config, seq, rows, spec, timed_steps=2):
  """Measurement of one training step of the classifier on `config` with ParallelSpec `spec`
  (the best of `timed_steps` untraced steps for the time); `rows` are split over the towers,
  and the peaks are of every device of every tower (tower order, stages within)."""
  with tf.Graph().as_default() as graph:
    tf.set_random_seed(1)
    features = pipeline_bench.random_features(rows, seq, config.vocab_size)
    towers = tower_utils.build_towers(pipeline_bench.classifier_tower_fn(config), features,
                                      spec)
    train_op, _ = optimization.create_replicated_train_op(towers.replica_grads_and_vars, 1e-5,
                                                          100, 10)
    devices = [d for tower in tower_utils.stage_devices(spec) for d in tower]
    dense = [v for grads_and_vars in towers.replica_grads_and_vars for g, v in grads_and_vars
             if g is not None and not isinstance(g, tf.IndexedSlices)]
    gradient_bytes = [sum(4 * v.shape.num_elements() for v in dense if _on(v, d))
                      for d in devices]
    variable_bytes = [sum(v.shape.num_elements() * v.dtype.base_dtype.size
                          for v in tf.global_variables() if _on(v, d)) for d in devices]
    init = tf.global_variables_initializer()
    graph.finalize()
    with tower_utils.new_session(spec) as sess:
      sess.run(init)
      metadata = tf.RunMetadata()
      sess.run(train_op, options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE),
               run_metadata=metadata)
      peaks = device_peaks(metadata.step_stats, devices)
      step_s = float("inf")
      for _ in range(timed_steps):
        start = time.time()
        sess.run(train_op)
        step_s = min(step_s, time.time() - start)
  return Measurement(peaks, gradient_bytes, step_s, variable_bytes)


def _on(variable, device):
  """Whether `variable` lives on `device`."""
  return (tf.DeviceSpec.from_string(variable.device).to_string() ==
          tf.DeviceSpec.from_string(device).to_string())


def _gb(n):
  return "%.2f" % (n / 1e9)


def main():
  args = parse_args()
  tf.disable_v2_behavior()
  tf.logging.set_verbosity(tf.logging.ERROR)
  print("Machine: %s; TensorFlow %s" % (machine.describe(), tf.__version__))
  print("%d rows per step and tower (one tower; %d in the tower modes), pipelines K=%d, M=%d; "
        "peak = bytes live during a training step (activations, gradients, optimizer "
        "temporaries), per device; activation peak = peak - one copy of that device's dense "
        "weight gradients." % (args.rows, args.towers, args.stages, args.micro_batches))
  print("| model, seq | mode | peak GB per device | activation peak GB per device | "
        "largest vs plain | step s | step vs plain |")
  print("| --- | --- | --- | --- | --- | --- | --- |")
  skip = set(args.skip.split(",")) if args.skip else set()
  results = {}
  for case in args.cases.split(","):
    for mode in args.modes.split(","):
      if "%s:%s" % (case, mode) in skip:
        continue
      m = measure(case, mode, args)
      results[(case, mode)] = m
      activation = [p - g for p, g in zip(m.peaks, m.gradient_bytes)]
      plain = results.get((case, "plain"))
      vs_plain = ("%.2f" % (max(m.peaks) / float(max(plain.peaks))), "%.2f" % (
          m.step_s / plain.step_s)) if plain else ("-", "-")
      print("| %s | %s | %s | %s | %s | %.1f | %s |" % (
          case.replace("-", ", seq "), mode, ", ".join(_gb(p) for p in m.peaks),
          ", ".join(_gb(a) for a in activation), vs_plain[0], m.step_s, vs_plain[1]),
          flush=True)
  for (case, mode), m in sorted(results.items()):
    if mode in TOWER_MODES:
      held = [p + v for p, v in zip(m.peaks, m.variable_bytes)]
      print("%s, %s: %d towers x %d rows, peak per device max/min %.3f (target <= 1.10: %s); "
            "variables + Adam slots per device %s GB; peak + those max/min %.3f" % (
                case, mode, args.towers, args.rows, max(m.peaks) / float(min(m.peaks)),
                "yes" if max(m.peaks) <= 1.1 * min(m.peaks) else "NO",
                ", ".join(_gb(v) for v in m.variable_bytes), max(held) / float(min(held))))
  for case in args.cases.split(","):
    gpipe, one_f = results.get((case, "gpipe")), results.get((case, "1f1b"))
    if gpipe and one_f:
      ratios = [(p1 - g) / float(pg - g) for p1, pg, g in
                zip(one_f.peaks, gpipe.peaks, gpipe.gradient_bytes)]
      print("%s: 1F1B / GPipe activation peak per stage: %s (target <= (K/M)*1.25 = %.3f)" % (
          case, ", ".join("%.3f" % r for r in ratios),
          1.25 * args.stages / args.micro_batches))
    plain, recompute = results.get((case, "plain")), results.get((case, "recompute"))
    if plain and recompute:
      print("%s: recompute / plain peak: %.3f, activation peak: %.3f; step time x%.2f" % (
          case, max(recompute.peaks) / float(max(plain.peaks)),
          (recompute.peaks[0] - recompute.gradient_bytes[0]) /
          float(plain.peaks[0] - plain.gradient_bytes[0]), recompute.step_s / plain.step_s))


if __name__ == "__main__":
  main()
