"""Multi-process data parallelism: speed, bytes between processes, and scaling on paper.

  python benchmarks/multiworker_bench.py                 # MiniLM shape, a few minutes on 2 cores
  python benchmarks/multiworker_bench.py --config=small --global_batch=32

On this host, at the same global batch and the same total threads, in alternating rounds:
  A. 1 process x 2 towers;
  B. 2 processes x 1 tower on localhost ports (a multi-process run as on 2 hosts), for each
     --reductions (shared = HierarchicalStrategy, allreduce = AllReduceStrategy);
and prints B / A (target >= 0.90). Bytes between processes: the loopback interface's transmitted
bytes during the timed updates (quiet machine: only our traffic), per update, against the
ring all-reduce's 2(N-1)/N x gradient bytes sent by each of the N processes.

Then, on paper, the expected scaling of BERT-base and BERT-large (seq 128) on 2x8 and 4x8 GPUs
at 100 and 25 Gb/s between hosts, flat ring against hierarchical (see `scaling_on_paper`).

On real hosts (one process per host, task 0 prints the figures):
  CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 python benchmarks/multiworker_bench.py --role=worker \
    --config=base --towers=8 --batch_per_tower=64 --precision=fp16 --xla \
    --worker_hosts=host0:2222,host1:2222 --task_index=<0 or 1> --reduction=shared
and the same with --worker_hosts=host0:2222 --task_index=0 (one host) for the baseline.
"""

import argparse
import json
import os
import subprocess
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, _HERE)

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import logging
import tensorflow.compat.v1 as tf

from core import children
import machine
import modeling
from parallel import cluster as cluster_lib
import train_bench
# pylint: enable=g-import-not-at-top,wrong-import-position


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--role", default="driver", choices=["driver", "worker"],
                 help="driver: run the comparison on this host; worker: one process of a run.")
  p.add_argument("--config", default="minilm", choices=sorted(train_bench.MODEL_CONFIGS))
  p.add_argument("--seq", type=int, default=128)
  p.add_argument("--global_batch", type=int, default=32, help="driver: rows per update.")
  p.add_argument("--rounds", type=int, default=2, help="driver: alternating rounds per setup.")
  p.add_argument("--reductions", default="shared,allreduce", help="driver: for setup B.")
  p.add_argument("--updates", type=int, default=8, help="Timed updates per round.")
  p.add_argument("--warmup", type=int, default=2, help="Untimed updates first.")
  p.add_argument("--threads", type=int, default=os.cpu_count(),
                 help="Intra-op threads of this process (the driver splits them over B's).")
  p.add_argument("--inter_op_threads", type=int, default=2)
  # worker role
  p.add_argument("--towers", type=int, default=1)
  p.add_argument("--batch_per_tower", type=int, default=16)
  p.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
  p.add_argument("--xla", action="store_true")
  p.add_argument("--reduction", default="shared", choices=["shared", "allreduce"])
  p.add_argument("--worker_hosts", default=None)
  p.add_argument("--task_index", type=int, default=0)
  return p.parse_args(argv)


def loopback_tx_bytes():
  """Bytes sent through the loopback interface so far (Linux /proc/net/dev)."""
  with open("/proc/net/dev") as f:
    for line in f:
      name, _, counters = line.partition(":")
      if name.strip() == "lo":
        return int(counters.split()[8])
  return 0


def gradient_bytes(config):
  """float32 bytes of all of BERT's trainable variables (+ a 2-class head)."""
  elements = sum(int(_prod(shape)) for _, shape in modeling.stock_variable_shapes(config))
  return 4 * (elements + 2 * config.hidden_size + 2)


def _prod(shape):
  out = 1
  for d in shape:
    out *= d
  return out


def run_worker(args):
  """One process: times updates; prints a JSON line (task 0 only, or a one-process run)."""
  cluster = (cluster_lib.resolve(args.worker_hosts, args.task_index) if args.worker_hosts and
             "," in args.worker_hosts else None)
  run = train_bench.Run(args.config, args.seq, args.batch_per_tower, args.towers,
                        args.precision, args.xla, args.reduction, 1)
  tf_run = train_bench.TfRun(run, args, cluster)
  sent = loopback_tx_bytes()
  timings = tf_run.time_updates(args.updates)
  sent = loopback_tx_bytes() - sent
  fast = train_bench.faster_half(timings)
  if cluster is None or cluster.is_chief:
    print(json.dumps({"examples_per_sec": len(fast) * tf_run.global_batch /
                                          sum(s for s, _ in fast),
                      "loopback_bytes_per_update": sent / float(args.updates),
                      "processes": cluster.num_processes if cluster else 1}), flush=True)
  tf_run.close()


def _launch(args, towers, threads, reduction, processes):
  """Runs one setup as `processes` worker processes; returns the chief's JSON result."""
  ports = []
  if processes > 1:
    import socket  # pylint: disable=g-import-not-at-top
    socks = [socket.socket() for _ in range(processes)]
    for s in socks:
      s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
      s.close()
  hosts = ",".join("localhost:%d" % p for p in ports)
  commands = [[sys.executable, os.path.abspath(__file__), "--role=worker",
               "--config=%s" % args.config, "--seq=%d" % args.seq,
               "--batch_per_tower=%d" % (args.global_batch // (towers * processes)),
               "--towers=%d" % towers, "--reduction=%s" % reduction,
               "--threads=%d" % threads, "--inter_op_threads=%d" % args.inter_op_threads,
               "--updates=%d" % args.updates, "--warmup=%d" % args.warmup] +
              (["--worker_hosts=%s" % hosts, "--task_index=%d" % i] if hosts else [])
              for i in range(processes)]
  env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
  procs = [children.start(c, stdout=subprocess.PIPE, text=True, env=env) for c in commands]
  outputs = [p.communicate(timeout=1800)[0] for p in procs]
  if any(p.returncode for p in procs):
    raise RuntimeError("a benchmark process failed: %s" % [p.returncode for p in procs])
  return json.loads(outputs[0].strip().splitlines()[-1])


def scaling_on_paper(gpus_per_host=8, nvlink_gbytes=120.0, seconds_per_gflop=1 / 28400.0,
                     rows_per_gpu=64, seq=128):
  """Expected speed-up of W hosts x 8 GPUs over one GPU, without compute/communication overlap.

  Step compute time per GPU: FLOPs of `rows_per_gpu` examples at 28.4 TFLOP/s effective (NVIDIA's
  423 seq/s per V100 for BERT-base, fp16 + XLA). Gradients are float32 (4 bytes per parameter).
  - flat ring over all N = 8W GPUs: a host's network link carries 2(N-1)/N x G;
  - hierarchical (HierarchicalStrategy): inside a host the shared reduction moves 2(8-1)/8 x G
    over NVLink (about 120 GB/s bus bandwidth), then one W-member ring per device index moves
    2(W-1)/W x G/8 each, 2(W-1)/W x G per host link in all.
  Speed-up = N x compute / (compute + communication).

  Returns:
    list of printable lines.
  """
  lines = ["model   hosts x GPUs  link      compute   flat ring            hierarchical",
           "                                 ms/step  comm ms  speed-up   comm ms  speed-up"]
  for name, layers, hidden in (("base", 12, 768), ("large", 24, 1024)):
    config = modeling.BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
                                 num_attention_heads=hidden // 64,
                                 intermediate_size=4 * hidden)
    compute = (rows_per_gpu * train_bench.train_flops_per_example(config, seq) / 1e9 *
               seconds_per_gflop)
    grad = gradient_bytes(config)
    for hosts in (2, 4):
      n = hosts * gpus_per_host
      for gbits in (100, 25):
        link = gbits / 8.0 * 1e9
        flat = 2.0 * (n - 1) / n * grad / link
        hier = (2.0 * (gpus_per_host - 1) / gpus_per_host * grad / (nvlink_gbytes * 1e9) +
                2.0 * (hosts - 1) / hosts * grad / link)
        lines.append("%-7s %d x %d        %3d Gb/s  %7.0f  %7.0f  %6.1fx    %7.0f  %6.1fx" % (
            name, hosts, gpus_per_host, gbits, compute * 1e3, flat * 1e3,
            n * compute / (compute + flat), hier * 1e3, n * compute / (compute + hier)))
  return lines


def run_driver(args):
  """Setup A and each setup B in alternating rounds; prints the table, ratios and bytes."""
  config = train_bench.bert_config(args.config)
  reductions = [r for r in args.reductions.split(",") if r]
  setups = [("1 process x 2 towers", 2, args.threads, "shared", 1)] + [
      ("2 processes x 1 tower (%s)" % r, 1, max(args.threads // 2, 1), r, 2) for r in reductions]
  best = {}
  for _ in range(args.rounds):
    for label, towers, threads, reduction, processes in setups:
      result = _launch(args, towers, threads, reduction, processes)
      print("  %s: %.2f examples/sec, %.1f MB over loopback per update" % (
          label, result["examples_per_sec"], result["loopback_bytes_per_update"] / 1e6),
            flush=True)
      if result["examples_per_sec"] > best.get(label, {}).get("examples_per_sec", 0):
        best[label] = result
  grad = gradient_bytes(config)
  print()
  print("Machine: %s; TF %s; global batch %d, seq %d, %s shape (%.1f M parameters, %.1f MB of "
        "float32 gradients); threads: %d in all" % (
            machine.describe(), tf.__version__, args.global_batch, args.seq, args.config,
            grad / 4e6, grad / 1e6, args.threads))
  base = best[setups[0][0]]["examples_per_sec"]
  for label, _, _, _, processes in setups:
    result = best[label]
    line = "%-32s %8.2f ex/s  %.3f of 1 process" % (label, result["examples_per_sec"],
                                                     result["examples_per_sec"] / base)
    if processes > 1:
      ring = 2.0 * (processes - 1) / processes * grad * processes
      line += ("  | between processes %.1f MB/update; ring 2(N-1)/N x %.1f MB x %d processes = "
               "%.1f MB (measured / ring %.2f)" % (
                   result["loopback_bytes_per_update"] / 1e6, grad / 1e6, processes, ring / 1e6,
                   result["loopback_bytes_per_update"] / ring))
    print(line)
  print()
  print("Checks:")
  for label, _, _, _, processes in setups[1:]:
    ratio = best[label]["examples_per_sec"] / base
    print("  %-40s %.3f  (>= 0.90: %s)" % (label + " / 1 process x 2 towers", ratio,
                                            "yes" if ratio >= 0.90 else "NO"))
  print()
  print("On paper (no overlap of communication with compute; see scaling_on_paper):")
  print("\n".join("  " + line for line in scaling_on_paper()))


def main(argv=None):
  args = parse_args(argv)
  logging.set_verbosity(logging.ERROR)
  tf.disable_v2_behavior()
  if args.role == "worker":
    run_worker(args)
  else:
    run_driver(args)


if __name__ == "__main__":
  main()
