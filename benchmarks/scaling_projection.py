"""A projection, not a measurement: BERT's training step on 1-8 GPUs from the graph's own counts.

For each model and GPU count the engine's training graph (the classifier at a fixed length,
fp16, 32 rows per GPU: weak scaling) is built as on that many GPUs (placement_audit, nothing
runs) and read: the matmul FLOPs of the busiest GPU and the bytes the busiest GPU receives per
step (tensors from other GPUs, and a ring all-reduce's 2(N-1)/N of the gradients). With a GPU's
dense 16-bit peak, an assumed share of it reached (--mfu) and a link's bandwidth per direction:

  compute = FLOPs / (peak x mfu);  link = bytes in / bandwidth
  step time between max(compute, link) (transfers hidden behind compute) and compute + link
  (none hidden); speed-up over one GPU = N x compute(1 GPU) / step time(N)

TensorFlow 1's graph runs a tower's backward pass and the reduction of the gradients already
computed at once, so the truth lies between the two; NVIDIA's published TF1 BERT pretraining
scaling (8 x A100 80GB, NVLink: 8.05x the single GPU, DeepLearningExamples) is the one real
figure printed beside it. The links (per direction; stated, not measured here):

  NVLink 3 (A100 SXM): 300 GB/s; NVLink 4 (H100 SXM): 450 GB/s;
  PCIe 4.0 x16 (A100 PCIe, no NVLink bridge): 25 GB/s; PCIe 5.0 x16 (H100 PCIe): 50 GB/s.

  python benchmarks/scaling_projection.py                   # BERT-base and -large, 1-8 GPUs
  python benchmarks/scaling_projection.py --configs=base --gpus=1,8 --mfu=0.35
"""

import collections
import os
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, _HERE)

# pylint: disable=g-import-not-at-top,wrong-import-position
from engine import tf_env  # pylint: disable=unused-import
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()

from core import arguments
from core.errors import InputError
import gpu_check
import modeling
import placement_audit
from train_bench import MODEL_CONFIGS
# pylint: enable=g-import-not-at-top,wrong-import-position

CONFIGS = dict(MODEL_CONFIGS, large=dict(MODEL_CONFIGS["base"], hidden_size=1024,
                                         num_hidden_layers=24, num_attention_heads=16,
                                         intermediate_size=4096))
# GPU -> dense fp16/bf16 peak TFLOP/s; link -> (GPU, GB/s per direction).
PEAKS = {"A100": 312.0, "H100": 989.0}
LINKS = collections.OrderedDict([
    ("A100 NVLink3", ("A100", 300.0)), ("A100 PCIe4", ("A100", 25.0)),
    ("H100 NVLink4", ("H100", 450.0)), ("H100 PCIe5", ("H100", 50.0))])
NVIDIA_TF1_8XA100 = 8.05
REDUCTIONS = ("shared", "allreduce")

Counts = collections.namedtuple("Counts", ["flops", "bytes_in"])


def counts(config, n_gpus, reduction, seq, rows):
  """Counts of the busiest GPU: (matmul FLOPs per step, bytes received per step)."""
  options = {"reduction": reduction} if reduction != "shared" else {}
  with tempfile.TemporaryDirectory() as output_dir:
    graph, spec = gpu_check.build(config, seq, rows, n_gpus, n_gpus, options, output_dir,
                                  precision="fp16")
  report = placement_audit.audit(graph, spec)
  gpus = [r for d, r in report.devices.items() if "/GPU:" in d]
  return Counts(max(r.flops for r in gpus), max(r.bytes_in for r in gpus))


def project(one, many, n_gpus, link, mfu):
  """(lower, upper) speed-up over one GPU on `link` (a LINKS key)."""
  gpu, bandwidth = LINKS[link]
  rate = PEAKS[gpu] * 1e12 * mfu
  compute_1 = one.flops / rate
  compute, transfer = many.flops / rate, many.bytes_in / (bandwidth * 1e9)
  return (n_gpus * compute_1 / (compute + transfer),
          n_gpus * compute_1 / max(compute, transfer))


def parse_args(argv):
  parser = arguments.Parser(description=__doc__.split("\n")[0])
  parser.add_argument("--configs", default="base,large", help="Models: %s." % ", ".join(CONFIGS))
  parser.add_argument("--gpus", default="1,2,4,8", help="GPU counts (1 first).")
  parser.add_argument("--seq", type=int, default=128, help="Sequence length.")
  parser.add_argument("--rows", type=int, default=32, help="Rows per GPU.")
  parser.add_argument("--mfu", type=float, default=0.45,
                      help="Share of the GPU's 16-bit peak a BERT step's matmuls reach "
                           "(assumed).")
  args = parser.parse_args(argv)
  args.configs = [c.strip() for c in args.configs.split(",") if c.strip()]
  if not args.configs or any(c not in CONFIGS for c in args.configs):
    raise InputError("--configs=%s: expected some of %s" % (",".join(args.configs),
                                                             ", ".join(CONFIGS)))
  try:
    args.gpus = sorted({int(n) for n in args.gpus.split(",")} | {1})
  except ValueError:
    raise InputError("--gpus=%s: expected integers such as 1,2,4,8" % args.gpus)
  if args.gpus[0] < 1:
    raise InputError("--gpus: expected integers >= 1")
  if not 0 < args.mfu <= 1:
    raise InputError("--mfu=%s: expected a share in (0, 1]" % args.mfu)
  if args.seq < 1 or args.rows < 1:
    raise InputError("--seq and --rows: expected integers >= 1")
  return args


def main(argv=None):
  return arguments.run(lambda: _main(sys.argv[1:] if argv is None else argv))


def _main(argv):
  """Prints the projection table of `argv`'s models and GPU counts."""
  args = parse_args(argv)
  print("PROJECTION (not measured): seq %d, %d rows per GPU, fp16, matmuls at %.0f%% of peak; "
        "speed-up over 1 GPU as 'none hidden - all hidden'; NVIDIA's published TF1 BERT: "
        "%.2fx on 8 x A100 NVLink" % (args.seq, args.rows, 100 * args.mfu, NVIDIA_TF1_8XA100))
  print("| model | GPUs | reduction | GFLOP per GPU | MB in per GPU | %s |" % " | ".join(LINKS))
  print("| --- | --- | --- | --- | --- |" + " --- |" * len(LINKS))
  for name in args.configs:
    config = modeling.BertConfig(**CONFIGS[name])
    one = counts(config, 1, "shared", args.seq, args.rows)
    for n in args.gpus:
      for reduction in (REDUCTIONS if n > 1 else ("-",)):
        many = one if n == 1 else counts(config, n, reduction, args.seq, args.rows)
        cells = ["%.2f-%.2fx" % project(one, many, n, link, args.mfu) for link in LINKS]
        print("| %s | %d | %s | %.0f | %.0f | %s |" % (
            name, n, reduction, many.flops / 1e9, many.bytes_in / 1e6, " | ".join(cells)))
  print("linear: %s" % ", ".join("%dx" % n for n in args.gpus))
  return 0


if __name__ == "__main__":
  sys.exit(main())
