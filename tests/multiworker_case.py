"""Two updates of a small BERT classifier on a fixed global batch, in one process or as a worker.

Used by test_multiworker.py: the test process runs the reference (one process, 4 towers); each
worker process runs this file as a script (2 towers each) and saves what it saw to an .npz:

  python tests/multiworker_case.py --worker_hosts=localhost:P0,localhost:P1 --task_index=i \
      --init=init.npz --out=out_dir

With --chief_leaves=exit|stop, the two processes only meet once, then the chief exits or stops
itself, and the other runs the barrier before the exit (see `chief_leaves`); with
--chief_leaves=serving_task_stops, the test stops the task serving an in-graph chief
(`serving_task_stops`).

The loss of each tower is a weighted sum divided by the global normaliser
(GlobalBatch.loss_denominator), with row weights that differ between towers and processes, so
a per-tower or per-process normalisation would give different numbers.
"""

import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import tensorflow.compat.v1 as tf

from engine import training
import graph_math
import modeling
from parallel import cluster as cluster_lib
import tower_utils
import variable_loading
# pylint: enable=g-import-not-at-top,wrong-import-position

CONFIG = modeling.BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1,
                             num_attention_heads=4, intermediate_size=32,
                             max_position_embeddings=16, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
ROWS_PER_UPDATE, SEQ, NUM_LABELS, UPDATES = 8, 8, 3, 2
TOWERS_TOTAL = 4
# (reduction, accumulation steps, pipeline stages) of every case, run in this order by every
# process; with 2 stages a process runs one tower of 2 stages and 2 micro-batches.
CASES = [("shared", 1, 1), ("allreduce", 1, 1), ("shared", 2, 1), ("allreduce", 2, 1),
         ("shared", 1, 2), ("allreduce", 1, 2)]
# --placement=inter_first: the chief's one graph holds 2 towers whose 2 stages span the two
# processes; the other process only serves its devices.
INTER_FIRST_CASES = [("shared", 1, 2), ("allreduce", 1, 2)]
# --pipeline_schedule=1f1b: (reduction, accumulation steps, placement), 2 stages, 2 micro-batches.
ONE_F_ONE_B_CASES = [("shared", 2, "intra_first"), ("allreduce", 1, "intra_first"),
                     ("allreduce", 1, "inter_first")]


def data():
  """UPDATES * ROWS_PER_UPDATE rows: ids, mask, labels and per-row loss weights (0.5 to 3)."""
  rng = np.random.RandomState(0)
  rows = UPDATES * ROWS_PER_UPDATE
  mask = np.ones((rows, SEQ), np.int32)
  mask[::3, 5:] = 0
  return {"input_ids": rng.randint(1, CONFIG.vocab_size, size=(rows, SEQ)).astype(np.int32),
          "input_mask": mask,
          "label": rng.randint(0, NUM_LABELS, size=(rows,)).astype(np.int32),
          "weight": rng.uniform(0.5, 3.0, size=(rows,)).astype(np.float32)}


def total_weight(features):
  return tf.reduce_sum(features["weight"])


def tower_fn(features, global_batch):
  """BERT + softmax; the weighted loss over the global batch's total weight."""
  model = modeling.BertModel(CONFIG, True, features["input_ids"], features["input_mask"])
  weights = tf.get_variable("output_weights", [NUM_LABELS, CONFIG.hidden_size],
                            initializer=tf.truncated_normal_initializer(stddev=0.02))
  logits = tf.matmul(model.get_pooled_output(), weights, transpose_b=True)
  per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=features["label"],
                                                               logits=logits)
  loss = tf.reduce_sum(per_example * features["weight"]) / global_batch.loss_denominator(
      total_weight)
  return loss, {}


def process_rows(rank, num_workers, accum):
  """Indices of the rows this process feeds, micro-batch after micro-batch, in order."""
  micro = ROWS_PER_UPDATE // accum
  share = micro // num_workers
  return np.concatenate([np.arange(start + rank * share, start + (rank + 1) * share)
                         for start in range(0, UPDATES * ROWS_PER_UPDATE, micro)])


def run(reduction, accum, cluster, init_values, stages=1, placement="intra_first",
        schedule="gpipe"):
  """Two updates; returns {"loss_k", "grad/<var>" (update 1), "<var>" (after), "devices" (each
  tower's stage devices), "variable_devices" (name=device of replica 0)} as numpy."""
  n_towers = TOWERS_TOTAL // cluster.num_processes // stages
  parallel = tower_utils.parallel_spec(n_towers, reduction=reduction, accum_steps=accum,
                                       pack_mb=0.01, cluster=cluster,
                                       collective_timeout_s=60, pipeline_stages=stages,
                                       num_micro_batches=stages, placement=placement,
                                       pipeline_schedule=schedule)
  spec = training.TrainSpec(
      output_dir=None, parallel=parallel,
      batch_size_per_tower=ROWS_PER_UPDATE * stages // (TOWERS_TOTAL * accum),
      num_train_steps=10,
      num_warmup_steps=0, learning_rate=1e-2, init_checkpoint=None, save_checkpoints_steps=100,
      log_every_n_steps=1, keep_checkpoint_max=1, seed=0)
  rows = process_rows(cluster.rank, cluster.num_processes, accum)
  feed = {k: v[rows] for k, v in data().items()}
  with tf.Graph().as_default():
    tf.set_random_seed(7)
    with tf.device(tower_utils.input_device(parallel)):
      dataset = tf.data.Dataset.from_tensor_slices(feed).batch(spec.batch_size_per_tower *
                                                                n_towers)
      features = tf.data.make_one_shot_iterator(dataset).get_next()
    graph = training.build_train_graph(tower_fn, features, spec)
    savable = {v.op.name: v for v in graph.strategy.savable_variables()}
    grads = {"grad/" + v.op.name: tf.convert_to_tensor(g) for g, v in graph.grads_and_vars
             if g is not None}
    init = tf.group(tf.global_variables_initializer(), tf.local_variables_initializer())
    # Every sess.run with a new set of fetches prepares (optimizes and partitions) the graph
    # anew, which costs more than the run itself here: the starting weights go in with one run
    # (variable_loading), every update fetches the same things (the gradients too, kept from
    # update 1 only), and the weights and their checksums come out together.
    with tower_utils.new_session(parallel) as sess:
      sess.run(init)
      if cluster.is_chief:
        variable_loading.load(sess, {savable[name]: value for name, value in init_values.items()})
      sess.run(graph.sync_op)
      out = {}
      for k in range(UPDATES):
        results, loss, _ = training.run_update(sess, graph, accum,
                                               dict(grads, step=graph.train_op))
        out["loss_%d" % k] = np.float32(loss)
        if k == 0:
          out.update({n: v for n, v in results.items() if n.startswith("grad/")})
      weights, checksums = sess.run((savable, graph.strategy.consistency_check()))
      out.update(weights)
      out["checksums"] = np.array(checksums)
    out["devices"] = np.array(graph.strategy.tower_stages)
    out["variable_devices"] = np.array(["%s=%s" % (v.op.name, v.device)
                                        for v in graph.strategy.replica_variables[0]])
  return out


def chief_leaves(cluster, how, timeout_s):
  """The processes meet in one collective; then the chief exits ("exit") or stops itself
  ("stop"), and the other runs the barrier processes pass before they exit
  (cluster.leave_together): a collective it runs for the first time, for which its Session
  asks the silent chief for step numbers without end. It must end within timeout_s with one
  `error:` line naming the chief."""
  config = cluster_lib.session_config(cluster, tf.ConfigProto())
  target = cluster_lib.session_target(cluster, config)
  if not cluster.is_chief:
    cluster_lib.wait_for_tasks(cluster, timeout_s, ranks=[0])
  with tf.Graph().as_default():
    met = cluster_lib._all_gather_row(cluster, [1], timeout_s)  # pylint: disable=protected-access
    barrier = cluster_lib._all_gather_row(cluster, [2], timeout_s)  # pylint: disable=protected-access
    sess = tf.Session(target, config=config)
    sess.run(met)
    if cluster.is_chief:
      time.sleep(1)  # The other has its part of `met`.
      if how == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
      os._exit(0)  # pylint: disable=protected-access
    while cluster_lib._serves_as(cluster, 0, seconds=1):  # pylint: disable=protected-access
      time.sleep(0.2)
    print("the chief is silent; the barrier starts", file=sys.stderr, flush=True)
    cluster_lib.leave_together(sess, barrier, cluster, timeout_s)
    print("passed the barrier without the chief", file=sys.stderr, flush=True)


def serving_task_stops(cluster, timeout_s):
  """--placement=inter_first: the chief runs an op on the other task's device once, then (once
  the test has stopped that task with SIGSTOP) another inside peer_faults, as its training and
  evaluation do: its Session waited without end for the stopped task. It must end within
  timeout_s with one `error:` line naming that task."""
  config = tower_utils.session_config(1, cluster=cluster)
  if not cluster.is_chief:
    cluster_lib.serve_chief_graph(cluster, config, timeout_s)
    return
  in_graph = cluster.in_graph_view()
  spec = tower_utils.parallel_spec(1, pipeline_stages=2, num_micro_batches=2, cluster=in_graph,
                                   placement="inter_first", collective_timeout_s=timeout_s)
  with tf.Graph().as_default():
    with tf.device(cluster.device_prefix(1) + "/device:CPU:0"):
      once = tf.constant(1) + 1
      again = once * 2
    with tower_utils.new_session(spec) as sess:
      sess.run(once)
      print("ran on task 1", file=sys.stderr, flush=True)
      while cluster_lib._serves_as(cluster, 1, seconds=1):  # pylint: disable=protected-access
        time.sleep(0.2)
      with cluster_lib.peer_faults(spec):
        sess.run(again)
    print("ran again on a stopped task", file=sys.stderr, flush=True)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--worker_hosts")
  parser.add_argument("--task_index", type=int)
  parser.add_argument("--init")
  parser.add_argument("--out")
  parser.add_argument("--chief_leaves", choices=["exit", "stop", "serving_task_stops"])
  parser.add_argument("--timeout_s", type=float, default=60)
  args = parser.parse_args()
  tf.disable_v2_behavior()
  cluster = cluster_lib.resolve(args.worker_hosts, args.task_index)
  if args.chief_leaves == "serving_task_stops":
    serving_task_stops(cluster, args.timeout_s)
    return
  if args.chief_leaves:
    chief_leaves(cluster, args.chief_leaves, args.timeout_s)
    return
  with graph_math.grappler_off():  # The cases compare values (tests/graph_math.py).
    run_cases(cluster, dict(np.load(args.init)), args.out)


def run_cases(cluster, init_values, out_dir):
  """Runs every case in this process's part; saves what it saw in out_dir (see main)."""
  for reduction, accum, stages in CASES:
    out = run(reduction, accum, cluster, init_values, stages)
    np.savez(os.path.join(out_dir, "%s_%d_%d_task%d.npz" % (reduction, accum, stages,
                                                             cluster.rank)), **out)
  for reduction, accum, placement in ONE_F_ONE_B_CASES:
    if placement == "intra_first":
      out = run(reduction, accum, cluster, init_values, 2, schedule="1f1b")
      np.savez(os.path.join(out_dir, "%s_%d_1f1b_task%d.npz" % (reduction, accum,
                                                                   cluster.rank)), **out)
  config = tower_utils.session_config(TOWERS_TOTAL // cluster.num_processes, cluster=cluster)
  inter_first = [case + ("gpipe",) for case in INTER_FIRST_CASES] + [
      (reduction, accum, 2, "1f1b") for reduction, accum, placement in ONE_F_ONE_B_CASES
      if placement == "inter_first"]
  for reduction, accum, stages, schedule in inter_first:
    if not cluster.is_chief:
      cluster_lib.serve_chief_graph(cluster, config, timeout_s=60)
      continue
    in_graph = cluster.in_graph_view()
    tower_utils.join_processes(tower_utils.parallel_spec(
        2, pipeline_stages=2, cluster=in_graph, placement="inter_first"), {}, {})
    out = run(reduction, accum, in_graph, init_values, stages, "inter_first", schedule)
    cluster_lib.release_tasks(in_graph, config)
    np.savez(os.path.join(out_dir, "%s_%d_%d_inter_first%s.npz" % (
        reduction, accum, stages, "_1f1b" if schedule == "1f1b" else "")), **out)


if __name__ == "__main__":
  main()
