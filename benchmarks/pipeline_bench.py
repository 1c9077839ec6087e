"""Pipeline stages: idle share, memory per device, bytes between processes, and OneFlow on paper.

  python benchmarks/pipeline_bench.py                  # all four parts, ~5 min on 2 cores
  python benchmarks/pipeline_bench.py --parts=bytes,paper

1. idle: the measured idle share of each stage of one pipelined tower (virtual CPU devices, one
   step's trace, forward and backward only) under GPipe and 1F1B (--schedules) against the
   bubble (K-1)/(M+K-1) both share, for K = 2, 4 and M = 1..16 (1F1B: M >= K). A stage is busy while any op of it runs; idle = 1 - busy / step span. Each
   op runs on one thread (intra_op=1) and K ops may run at once (inter_op=K), so on a machine
   with K free cores a stage behaves as a device of its own; with fewer cores than stages the
   stages wait for cores too and the figures mix the bubble with that contention.
2. memory: parameters + Adam slots (12 bytes per parameter) per device for BERT-large at K = 1,
   2, 4, from the cut of parallel/pipeline.py; the largest device's share against 1/K.
3. bytes: per update, the bytes that cross the process boundary with 2 processes x 2 devices
   (2 towers of 2 stages) at BERT-base (seq 128, 32 rows per tower, 4 micro-batches), read off
   the graphs tower_utils builds (no run needed): intra_first: the all-reduce packs (each of
   the N ring members sends 2(N-1)/N of a pack, every member in another process); inter_first:
   every tensor produced in one process and consumed in the other (activations forward, their
   gradients backward).
4. paper: OneFlow's BERT setups (24 layers on 2 nodes x 2 GPUs, 48 layers on 4 x 4) under both
   placements: the network time per update from the same byte counts at several network speeds,
   against OneFlow's measured step times (0.80 vs 1.20 s and 5.23 vs 10.96 s).
"""

import argparse
import collections
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, _HERE)
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import tensorflow.compat.v1 as tf

import machine
from classifier import model as classifier_model
import modeling
from parallel import cluster as cluster_lib
from parallel import pipeline
import tower_utils
# pylint: enable=g-import-not-at-top,wrong-import-position

BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072)
BERT_LARGE = dict(vocab_size=30522, hidden_size=1024, num_hidden_layers=24,
                  num_attention_heads=16, intermediate_size=4096)
BYTES_PER_PARAMETER = 12  # float32 weight + Adam m and v
# OneFlow's reported step times (s): (layers, nodes, GPUs per node) -> (inter_first, intra_first)
ONEFLOW = {(24, 2, 2): (0.80, 1.20), (48, 4, 4): (5.23, 10.96)}


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--parts", default="idle,memory,bytes,paper",
                 help="Comma-separated parts to run: idle, memory, bytes, paper.")
  p.add_argument("--stages", default="2,4", help="idle: stage counts K.")
  p.add_argument("--micro_batches", default="1,2,4,8,16", help="idle: micro-batch counts M.")
  p.add_argument("--schedules", default="gpipe,1f1b",
                 help="idle: pipeline schedules (1f1b only where M >= K).")
  p.add_argument("--rows_per_micro_batch", type=int, default=4, help="idle: rows per micro-batch.")
  p.add_argument("--idle_seq", type=int, default=128, help="idle: sequence length.")
  p.add_argument("--idle_hidden", type=int, default=256,
                 help="idle: hidden size (2 layers per stage, intermediate 4x hidden).")
  p.add_argument("--bytes_rows", type=int, default=32, help="bytes: rows per tower per update.")
  p.add_argument("--bytes_micro_batches", type=int, default=4, help="bytes: micro-batches.")
  p.add_argument("--seq", type=int, default=128, help="bytes and paper: sequence length.")
  p.add_argument("--paper_rows", type=int, default=32,
                 help="paper: rows per pipeline per update (OneFlow does not state its batch).")
  p.add_argument("--network_gbps", default="10,25,100",
                 help="paper: network speeds between nodes, Gbit/s per direction per node.")
  return p.parse_args(argv)


def classifier_tower_fn(config):
  """run_classifier_mgpu.py's tower (BERT + pooled softmax, 2 labels): the task head on the
  last stage."""
  return classifier_model.make_tower_fn(config, 2, is_training=True)


def random_features(rows, seq, vocab_size, as_constants=True):
  """Classifier features of `rows` random rows [rows, seq] (constants, or placeholders)."""
  if not as_constants:
    return {"input_ids": tf.placeholder(tf.int32, [rows, seq]),
            "input_mask": tf.placeholder(tf.int32, [rows, seq]),
            "segment_ids": tf.placeholder(tf.int32, [rows, seq]),
            "label_ids": tf.placeholder(tf.int32, [rows])}
  rng = np.random.RandomState(0)
  return {"input_ids": tf.constant(rng.randint(1, vocab_size, (rows, seq)).astype(np.int32)),
          "input_mask": tf.ones([rows, seq], tf.int32),
          "segment_ids": tf.zeros([rows, seq], tf.int32),
          "label_ids": tf.constant(rng.randint(0, 2, rows).astype(np.int32))}


def _config(base, layers=None):
  values = dict(base, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                max_position_embeddings=512)
  if layers:
    values["num_hidden_layers"] = layers
  return modeling.BertConfig(**values)


# 1. Idle share.
def busy_share(step_stats, devices):
  """Per device, the share of the step span during which one of its ops ran.

  Args:
    step_stats: RunMetadata.step_stats of one traced step.
    devices: the stage device names, first to last.

  Returns:
    list of busy shares (0..1), one per device.
  """
  def key(device):
    spec = tf.DeviceSpec.from_string(device)
    return spec.device_type, spec.device_index

  intervals = collections.defaultdict(list)
  for dev in step_stats.dev_stats:
    for node in dev.node_stats:
      if node.node_name in ("_SOURCE", "_SINK") or node.op_end_rel_micros <= 0:
        continue
      start = node.all_start_micros
      intervals[key(dev.device)].append((start, start + node.op_end_rel_micros))
  keys = [key(d) for d in devices]
  everything = [iv for k in keys for iv in intervals[k]]
  span = max(e for _, e in everything) - min(s for s, _ in everything)
  return [_union_length(intervals[k]) / float(span) for k in keys]


def _union_length(intervals):
  """Total length covered by a list of (start, end) intervals."""
  total, current_start, current_end = 0, None, None
  for start, end in sorted(intervals):
    if current_end is None or start > current_end:
      if current_end is not None:
        total += current_end - current_start
      current_start, current_end = start, end
    else:
      current_end = max(current_end, end)
  return total + (current_end - current_start if current_end is not None else 0)


def measure_idle(stages, micro_batches, args, repeats=3, schedule="gpipe"):
  """Idle share of each stage of one tower (forward + backward) under `schedule`, the best of
  `repeats` steps."""
  config = modeling.BertConfig(
      vocab_size=1000, hidden_size=args.idle_hidden, num_hidden_layers=2 * stages,
      num_attention_heads=max(1, args.idle_hidden // 64),
      intermediate_size=4 * args.idle_hidden, hidden_dropout_prob=0.0,
      attention_probs_dropout_prob=0.0, max_position_embeddings=max(128, args.idle_seq))
  spec = tower_utils.parallel_spec(1, pipeline_stages=stages, num_micro_batches=micro_batches,
                                   pipeline_schedule=schedule)
  with tf.Graph().as_default() as graph:
    features = random_features(args.rows_per_micro_batch * micro_batches, args.idle_seq,
                               config.vocab_size)
    towers = tower_utils.build_towers(classifier_tower_fn(config), features, spec)
    grads = [g for g, _ in towers.grads_and_vars if g is not None]
    devices = tower_utils.stage_devices(spec)[0]
    init = tf.global_variables_initializer()
    graph.finalize()
    with tower_utils.new_session(spec, intra_op_threads=1, inter_op_threads=stages) as sess:
      sess.run(init)
      sess.run(grads)  # warm-up
      best = None
      for _ in range(repeats):
        metadata = tf.RunMetadata()
        sess.run(grads, options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE),
                 run_metadata=metadata)
        busy = busy_share(metadata.step_stats, devices)
        if best is None or np.mean(busy) > np.mean(best):
          best = busy
  return [1.0 - b for b in best]


def run_idle(args):
  print("\n## 1. Idle share per stage, measured vs GPipe's bubble (K-1)/(M+K-1)")
  print("One tower, 2 encoder layers per stage, hidden %d, seq %d, %d rows per micro-batch; "
        "intra_op=1, inter_op=K; %d cores here." % (args.idle_hidden, args.idle_seq,
                                                    args.rows_per_micro_batch, os.cpu_count()))
  print("| schedule | K | M | bubble (K-1)/(M+K-1) | measured idle per stage | mean |")
  print("| --- | --- | --- | --- | --- | --- |")
  for schedule in args.schedules.split(","):
    for stages in [int(k) for k in args.stages.split(",")]:
      for micro in [int(m) for m in args.micro_batches.split(",")]:
        if schedule == "1f1b" and micro < stages:
          continue
        idle = measure_idle(stages, micro, args, schedule=schedule)
        print("| %s | %d | %d | %.3f | %s | %.3f |" % (
            schedule, stages, micro, (stages - 1.0) / (micro + stages - 1), ", ".join(
                "%.3f" % x for x in idle), np.mean(idle)), flush=True)


# 2. Memory per device.
def run_memory():
  print("\n## 2. Parameters + Adam slots per device, BERT-large (12 bytes per parameter)")
  print("| K | layers per stage | GB per device | largest share | 1/K |")
  print("| --- | --- | --- | --- | --- |")
  config = _config(BERT_LARGE)
  for stages in (1, 2, 4):
    plan = pipeline.plan_stages(config, stages)
    gigabytes = [p * BYTES_PER_PARAMETER / 1e9 for p in plan.stage_parameters]
    layers = [plan.layer_stage.count(s) for s in range(stages)]
    print("| %d | %s (word table on stage %d) | %s | %.3f | %.3f |" % (
        stages, ", ".join(map(str, layers)), plan.word_embedding_stage,
        ", ".join("%.2f" % g for g in gigabytes), max(gigabytes) / sum(gigabytes),
        1.0 / stages))


# 3. Bytes between processes.
def _device_of(op, devices_by_name):
  """The device an op runs on (its own or its colocation group's), or None if unplaced."""
  if op.device:
    return tf.DeviceSpec.from_string(op.device)
  for group in op.colocation_groups():
    owner = devices_by_name.get(group.decode()[len("loc:@"):])
    if owner:
      return tf.DeviceSpec.from_string(owner)
  return None


def _needed_ops(fetches):
  """The ops a Session runs for `fetches` (TensorFlow prunes the rest of the graph)."""
  stack = [t.op if hasattr(t, "op") else t for t in fetches]
  seen = set()
  while stack:
    op = stack.pop()
    if op in seen:
      continue
    seen.add(op)
    stack.extend(t.op for t in op.inputs)
    stack.extend(op.control_inputs)
  return seen


def cross_task_bytes(fetches):
  """Bytes of the tensors made in one task and read in another when `fetches` run.

  TensorFlow sends a tensor once per step to each device that reads it, so each (tensor,
  destination device) pair counts once.

  Returns:
    (bytes, number of tensors sent).
  """
  needed = _needed_ops(fetches)
  devices_by_name = {op.name: op.device for op in needed if op.device}
  sent = {}
  for op in needed:
    destination = _device_of(op, devices_by_name)
    for tensor in op.inputs:
      source = _device_of(tensor.op, devices_by_name)
      if None in (source, destination) or source.task == destination.task:
        continue
      if tensor.dtype.base_dtype == tf.resource or not tensor.shape.is_fully_defined():
        continue
      sent[(tensor.name, destination.to_string())] = (tensor.shape.num_elements() *
                                                      tensor.dtype.base_dtype.size)
  return sum(sent.values()), len(sent)


def allreduce_bytes(graph):
  """Bytes each process sends in its ring all-reduces: 2(N-1)/N of every pack it reduces."""
  total = 0.0
  for op in graph.get_operations():
    if op.type.startswith("CollectiveReduce"):
      n = op.get_attr("group_size") if op.type == "CollectiveReduce" else None
      if n is None:
        n = int(tf.get_static_value(op.inputs[1]))
      tensor = op.inputs[0]
      total += 2.0 * (n - 1) / n * tensor.shape.num_elements() * tensor.dtype.base_dtype.size
  return total


def _two_tasks():
  """A 2-process cluster as rank 0 sees it (nothing is started: graphs are only built)."""
  tasks = [cluster_lib.Task("worker", i, "localhost:%d" % (1 + i)) for i in range(2)]
  return cluster_lib.Cluster(tasks, 0, "benchmark")


def placement_bytes(config, rows, micro_batches, seq, reduction="allreduce"):
  """(intra_first, inter_first) bytes crossing the process boundary per update, summed over
  both directions, for 2 processes x 2 devices (2 towers of 2 stages)."""
  cluster = _two_tasks()
  # intra_first: each process builds 1 tower of 2 stages; the processes all-reduce per stage.
  with tf.Graph().as_default() as graph:
    spec = tower_utils.parallel_spec(1, reduction=reduction, cluster=cluster, pipeline_stages=2,
                                     num_micro_batches=micro_batches)
    tower_utils.build_towers(classifier_tower_fn(config),
                             random_features(rows, seq, config.vocab_size, False), spec)
    intra = allreduce_bytes(graph) * cluster.num_processes
  # inter_first: the chief's graph holds both towers; stage s of each runs in process s.
  with tf.Graph().as_default() as graph:
    spec = tower_utils.parallel_spec(2, reduction=reduction, cluster=cluster.in_graph_view(),
                                     pipeline_stages=2, num_micro_batches=micro_batches,
                                     placement="inter_first")
    towers = tower_utils.build_towers(classifier_tower_fn(config),
                                      random_features(2 * rows, seq, config.vocab_size, False),
                                      spec)
    inter, _ = cross_task_bytes([g for replica in towers.replica_grads_and_vars
                                 for g, _ in replica if g is not None])
  return intra, inter


def run_bytes(args):
  print("\n## 3. Bytes crossing the process boundary per update, 2 processes x 2 devices")
  print("BERT-base, seq %d, %d rows per tower (2 towers of 2 stages), %d micro-batches; from "
        "the graphs tower_utils builds." % (args.seq, args.bytes_rows, args.bytes_micro_batches))
  print("| reduction | intra_first (all-reduce) | inter_first (activations) | ratio |")
  print("| --- | --- | --- | --- |")
  results = {}
  for reduction in ("allreduce", "shared"):
    intra, inter = placement_bytes(_config(BERT_BASE), args.bytes_rows,
                                   args.bytes_micro_batches, args.seq, reduction)
    results[reduction] = (intra, inter)
    print("| %s | %.1f MB | %.1f MB | %.1fx fewer with inter_first |" % (
        reduction, intra / 1e6, inter / 1e6, intra / inter), flush=True)
  return results


# 4. OneFlow's setups on paper.
def oneflow_bytes(layers, nodes, gpus, rows, seq):
  """(intra_first, inter_first) bytes each node sends per update, BERT-large width.

  intra_first: a pipeline of `gpus` stages in each node, data parallel across nodes: every
  stage's gradients go round a ring of `nodes` members, one per node (2(N-1)/N of them sent per
  member). inter_first: a pipeline of `nodes` stages across the nodes (one per local GPU
  index), data parallel inside each node: each stage boundary sends one activation forward and
  its gradient backward, [rows, seq, hidden] float32, per pipeline.
  """
  config = _config(BERT_LARGE, layers)
  word, other, layer, pooler = pipeline._part_parameters(config)  # pylint: disable=protected-access
  gradient_bytes = 4.0 * (word + other + layers * layer + pooler)
  intra = 2.0 * (nodes - 1) / nodes * gradient_bytes
  activation = rows * seq * config.hidden_size * 4.0
  inter = 2 * activation * gpus  # each node sends, per pipeline, one boundary's worth each way
  return intra, inter


def run_paper(args):
  print("\n## 4. OneFlow's BERT-large setups on paper (rows per pipeline %d, seq %d)" %
        (args.paper_rows, args.seq))
  speeds = [float(s) for s in args.network_gbps.split(",")]
  print("| setup | placement | GB each node sends per update | %s | OneFlow measured |" %
        " | ".join("network time at %g Gb/s" % s for s in speeds))
  print("| --- | --- | --- | %s | --- |" % " | ".join("---" for _ in speeds))
  for (layers, nodes, gpus), (inter_s, intra_s) in sorted(ONEFLOW.items()):
    intra, inter = oneflow_bytes(layers, nodes, gpus, args.paper_rows, args.seq)
    for name, sent, measured in (("intra_first", intra, intra_s), ("inter_first", inter, inter_s)):
      times = ["%.3f s" % (sent * 8 / (s * 1e9)) for s in speeds]
      print("| %d layers, %d x %d | %s | %.3f | %s | %.2f s |" % (
          layers, nodes, gpus, name, sent / 1e9, " | ".join(times), measured))
  print("The difference of OneFlow's two measured step times is what the network costs "
        "intra_first over inter_first; the columns give that cost per network speed.")


def main():
  args = parse_args()
  tf.disable_v2_behavior()
  tf.logging.set_verbosity(tf.logging.ERROR)
  print("Machine: %s; TensorFlow %s" % (machine.describe(), tf.__version__))
  parts = args.parts.split(",")
  if "idle" in parts:
    run_idle(args)
  if "memory" in parts:
    run_memory()
  if "bytes" in parts:
    run_bytes(args)
  if "paper" in parts:
    run_paper(args)


if __name__ == "__main__":
  main()
