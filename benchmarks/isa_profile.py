"""Where a training step's time goes, by kind of op, and how that moves with the ISA and TF's knobs.

Why our per-step speed differs by CPU: the question of issue 12. Each variant below trains the
classifier of run_classifier_mgpu.py (train_bench.TfRun: one tower, fp32, a fixed synthetic
batch) in a child process of its own, because oneDNN and XLA read their environment once, at
import. A child times --steps updates (the mean of the faster half, as train_bench does), then
traces one update it does not count (tracing makes XLA compile its clusters again) and
--trace_steps more, and sums each op's traced time by kind:

  matmul       dense and batched matmuls (oneDNN's _Mkl* kernels, Eigen's, fused bias-adds)
  elementwise  one pass over a tensor per op: adds, muls, GELU's tanh, layer norm's rsqrt, ...
  dropout-rng  the random numbers of dropout masks (RandomUniform)
  reduction    sums and means (layer-norm moments, bias gradients), softmax
  layout       transposes, reshapes, gathers, slices, tiles, pads
  optimizer    Adam updates, weight decay, the L2 norms of gradient clipping
  xla          clusters compiled by XLA (one op in the trace for many fused ones)
  other        variables, constants, control flow, sends and receives

Op times overlap when inter-op threads run ops side by side, so the kinds are shares of the
summed op time, and the step time is the wall time. Variants (--variants):

  native       as installed: oneDNN on, every ISA the CPU has
  avx2         machine.AVX2_CAP_ENV: oneDNN (and XLA) limited to AVX2, as on an AVX2-only CPU
  eigen        TF_ENABLE_ONEDNN_OPTS=0: TensorFlow's Eigen kernels (built for AVX2 at most)
  xla          XLA auto-clustering of the tower (training's --use_xla)
  inter1       inter_op_parallelism_threads=1 (ops one at a time, each on every core)
  intra1       intra_op_parallelism_threads=1 (each op on one core, two ops side by side)
  ...and the same with the avx2 cap: avx2_eigen, avx2_xla, avx2_inter1, avx2_intra1.

  python benchmarks/isa_profile.py                          # BERT-base, seq 128, batch 8
  python benchmarks/isa_profile.py --config=small --variants=native,avx2
  python benchmarks/isa_profile.py --precision=bf16 --variants=native --top_ops=15

--precision=bf16 profiles run_classifier_mgpu.py's --use_bf16 step; --top_ops lists the op types
with the most traced time per variant, with the matmuls' achieved GFLOP/s beside them.
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.dirname(_HERE))

from core import children  # pylint: disable=g-import-not-at-top,wrong-import-position
import machine  # pylint: disable=g-import-not-at-top,wrong-import-position

KINDS = ("matmul", "elementwise", "dropout-rng", "reduction", "layout", "optimizer", "xla",
         "other")
_REDUCTION = {"Sum", "Mean", "Max", "Min", "Prod", "BiasAddGrad", "Softmax", "_MklSoftmax",
              "LogSoftmax", "SoftmaxCrossEntropyWithLogits", "ArgMax"}
_LAYOUT = {"Transpose", "_MklTranspose", "Reshape", "Tile", "ConcatV2", "Slice", "StridedSlice",
           "StridedSliceGrad", "Pad", "Pack", "Unpack", "GatherV2", "UnsortedSegmentSum",
           "ExpandDims", "Squeeze", "OneHot", "Split", "SplitV", "BroadcastTo", "Cast"}
_OPTIMIZER = {"ApplyAdam", "ResourceApplyAdam", "ApplyGradientDescent", "AssignSub", "AssignAdd",
              "Assign", "L2Loss", "AssignSubVariableOp", "AssignAddVariableOp", "AssignVariableOp"}
_OTHER = {"Const", "Identity", "VariableV2", "VarHandleOp", "ReadVariableOp", "Snapshot", "NoOp",
          "_Recv", "_Send", "_HostRecv", "_HostSend", "_Retval", "_Arg", "IteratorGetNext",
          "OneShotIterator", "Shape", "Size", "Rank", "Fill", "ZerosLike", "OnesLike", "Range"}
_BASE_VARIANTS = {
    "native": ({}, []),
    "eigen": ({"TF_ENABLE_ONEDNN_OPTS": "0"}, []),
    "xla": ({}, ["--xla"]),
    "inter1": ({}, ["--inter_op_threads=1"]),
    "intra1": ({}, ["--threads=1"]),
}


def variants():
  """name -> (environment additions, child flags): the base variants, then each capped to AVX2."""
  table = dict(_BASE_VARIANTS)
  for name, (env, flags) in _BASE_VARIANTS.items():
    capped = "avx2" if name == "native" else "avx2_" + name
    table[capped] = (dict(machine.AVX2_CAP_ENV, **env), flags)
  return table


def op_kind(op_type):
  """The KINDS entry of a traced op type."""
  if "MatMul" in op_type:
    return "matmul"
  if op_type.startswith("_Xla") or op_type in ("XlaLaunch", "XlaRun", "XlaCompile"):
    return "xla"
  if op_type == "RandomUniform":
    return "dropout-rng"
  for kind, names in (("reduction", _REDUCTION), ("layout", _LAYOUT),
                      ("optimizer", _OPTIMIZER), ("other", _OTHER)):
    if op_type in names:
      return kind
  return "elementwise"


_LABEL = re.compile(r"= (\w+)\(")


def time_by_op(step_stats_list):
  """{op type: traced milliseconds per step} summed over ops and devices, averaged over steps."""
  totals = collections.Counter()
  for step_stats in step_stats_list:
    for device in step_stats.dev_stats:
      for node in device.node_stats:
        match = _LABEL.search(node.timeline_label)
        if match:
          totals[match.group(1)] += node.all_end_rel_micros / 1000.0
  return {op: ms / len(step_stats_list) for op, ms in totals.items()}


def time_by_kind(by_op):
  """{kind: traced milliseconds per step} from time_by_op's dict."""
  totals = collections.Counter()
  for op, ms in by_op.items():
    totals[op_kind(op)] += ms
  return {kind: totals[kind] for kind in KINDS}


def child(args):
  """Times and traces one configuration in this process; prints one JSON line."""
  # pylint: disable=g-import-not-at-top
  import tensorflow.compat.v1 as tf
  tf.disable_v2_behavior()
  import train_bench
  bench_args = train_bench.parse_args(["--threads=%d" % args.threads,
                                       "--inter_op_threads=%d" % args.inter_op_threads,
                                       "--warmup=%d" % args.warmup])
  run = train_bench.Run(args.config, args.seq, args.batch, 1, args.precision, args.xla,
                        "shared", 1)
  tf_run = train_bench.TfRun(run, bench_args)
  fast = train_bench.faster_half(tf_run.time_updates(args.steps))
  step_ms = 1000.0 * sum(seconds for seconds, _ in fast) / len(fast)
  # The first traced update is not counted: tracing changes XLA's compilation cache key, so in
  # it every XLA cluster compiles again (about 40 ms each for BERT-base's GELUs), which would be
  # charged to _XlaCompile although an untraced update finds its clusters compiled.
  tf_run.trace_update()
  by_op = time_by_op([tf_run.trace_update() for _ in range(args.trace_steps)])
  tf_run.close()
  print("RESULT " + json.dumps({
      "step_ms": step_ms, "examples_per_sec": 1000.0 * args.batch / step_ms,
      "kinds": time_by_kind(by_op), "ops": by_op, "machine": machine.describe(),
      "matmul_gflop": args.batch * train_bench.train_flops_per_example(
          train_bench.bert_config(args.config), args.seq) / 1e9}))


def run_variant(name, args):
  """Runs one variant's child process; returns its result dict (None if it failed)."""
  env_add, flags = variants()[name]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", **env_add)
  cmd = [sys.executable, os.path.abspath(__file__), "--child", "--config=" + args.config,
         "--seq=%d" % args.seq, "--batch=%d" % args.batch, "--steps=%d" % args.steps,
         "--trace_steps=%d" % args.trace_steps, "--warmup=%d" % args.warmup,
         "--threads=%d" % args.threads, "--inter_op_threads=%d" % args.inter_op_threads,
         "--precision=" + args.precision] + flags
  try:
    proc = children.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
  except subprocess.TimeoutExpired:
    print("  %s failed: no result within --timeout=%d s" % (name, args.timeout), flush=True)
    return None
  for line in proc.stdout.splitlines():
    if line.startswith("RESULT "):
      return json.loads(line[len("RESULT "):])
  tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
  print("  %s failed (exit %d): %s" % (name, proc.returncode, tail), flush=True)
  return None


def format_table(results):
  """Rows: variant, step ms, examples/sec, speed vs native, then each kind's traced ms."""
  head = "%-12s %8s %7s %7s" % ("variant", "step ms", "ex/s", "vs nat") + "".join(
      " %11s" % kind for kind in KINDS)
  lines = [head, "-" * len(head)]
  native = results.get("native")
  for name, result in results.items():
    ratio = (result["examples_per_sec"] / native["examples_per_sec"]) if native else float("nan")
    lines.append("%-12s %8.0f %7.2f %6.2fx" % (name, result["step_ms"],
                                               result["examples_per_sec"], ratio) +
                 "".join(" %11.0f" % result["kinds"][kind] for kind in KINDS))
  return "\n".join(lines)


def format_top_ops(name, result, count):
  """The `count` op types with the most traced time in one variant, and the matmuls' rate."""
  ops = sorted(result["ops"].items(), key=lambda item: -item[1])[:count]
  total = sum(result["ops"].values())
  matmul_ms = result["kinds"]["matmul"]
  lines = ["%s: op types with the most traced time (of %.0f ms per step)" % (name, total)]
  lines += ["  %-36s %8.0f ms  %5.1f%%  %s" % (op, ms, 100.0 * ms / total, op_kind(op))
            for op, ms in ops]
  if matmul_ms:
    lines.append("  matmuls: %.0f ms for %.1f GFLOP of model matmuls: %.0f GFLOP/s" % (
        matmul_ms, result["matmul_gflop"], result["matmul_gflop"] / matmul_ms * 1e3))
  return "\n".join(lines)


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--config", default="base", help="train_bench.MODEL_CONFIGS name.")
  p.add_argument("--seq", type=int, default=128, help="Sequence length.")
  p.add_argument("--batch", type=int, default=8, help="Rows per step (one tower).")
  p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                 help="fp32, or bf16 (run_classifier_mgpu.py's --use_bf16).")
  p.add_argument("--top_ops", type=int, default=0,
                 help="Also list this many op types with the most traced time per variant.")
  p.add_argument("--steps", type=int, default=8, help="Timed updates per variant.")
  p.add_argument("--trace_steps", type=int, default=2, help="Traced updates per variant.")
  p.add_argument("--warmup", type=int, default=3,
                 help="Untimed updates first (XLA compiles its clusters in these).")
  p.add_argument("--threads", type=int, default=os.cpu_count(),
                 help="intra_op_parallelism_threads (intra1 sets 1).")
  p.add_argument("--inter_op_threads", type=int, default=2,
                 help="inter_op_parallelism_threads (inter1 sets 1).")
  p.add_argument("--variants", default="native,avx2,eigen,avx2_eigen,xla,avx2_xla,inter1,"
                 "avx2_inter1,intra1,avx2_intra1", help="Comma-separated; see the docstring.")
  p.add_argument("--timeout", type=int, default=900, help="Seconds per variant.")
  p.add_argument("--json_out", default=None, help="Also write the results as JSON here.")
  p.add_argument("--xla", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  return p.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  if args.child:
    return child(args)
  names = [name for name in args.variants.split(",") if name]
  unknown = sorted(set(names) - set(variants()))
  if unknown:
    print("error: --variants: unknown %s; expected some of %s" % (
        ", ".join(unknown), ", ".join(sorted(variants()))), file=sys.stderr)
    return 2
  print("Machine: %s" % machine.describe())
  print("%s, seq %d, batch %d, 1 tower, %s; %d threads, %d inter-op; load %s" % (
      args.config, args.seq, args.batch, args.precision, args.threads, args.inter_op_threads,
      " ".join("%.2f" % x for x in os.getloadavg())), flush=True)
  results = collections.OrderedDict()
  for name in names:
    result = run_variant(name, args)
    if result:
      results[name] = result
      print("  %-12s %.2f examples/sec  (%s)" % (name, result["examples_per_sec"],
                                                 result["machine"]), flush=True)
  if not results:
    print("error: isa_profile.py: no variant gave a result (see the lines above)", file=sys.stderr)
    return 2
  print("\ntraced op time per step (ms), by kind:\n" + format_table(results))
  for name, result in results.items():
    if args.top_ops:
      print("\n" + format_top_ops(name, result, args.top_ops))
  if args.json_out:
    with open(args.json_out + ".tmp", "w") as f:
      json.dump(results, f, indent=1)
    os.replace(args.json_out + ".tmp", args.json_out)  # a killed run leaves the old file whole
  return 0


if __name__ == "__main__":
  try:
    sys.exit(main())
  except KeyboardInterrupt:  # subprocess.run has already ended the running child
    print("error: isa_profile.py interrupted; the variants done so far are printed above",
          file=sys.stderr)
    sys.exit(2)
