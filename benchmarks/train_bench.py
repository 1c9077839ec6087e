"""Training throughput of bert-mgpu: towers, sequence length, precision, XLA, reduction, accumulation.

Prints the machine (CPU model, cores, instruction-set level) and one table: examples/sec, model
TFLOP/s, and its share of two peaks for each run, then the claims checked on these figures, with Hugging Face transformers (PyTorch)
training the same configs side by side when torch is installed (requirements-bench.txt).

Each run trains the classifier of run_classifier_mgpu.py (BERT + pooled softmax, dropout 0.1)
through training.build_train_graph (the graph every run script trains with: towers, reduction,
clipping, AdamW) on a fixed synthetic batch fed through a tf.data iterator, with global
batch = batch per tower x towers x accumulation steps. Timing starts after warm-up updates (graph
optimization, XLA compilation). Every update is timed on its own, over --rounds rounds of
--steps updates, and a run's figure is the mean of its faster half of updates: other processes
on the machine only ever slow an update down, and the mean of the faster half is steadier than
the single best (the Hugging Face side is measured the same way, step by step).

FLOPs. Per token, a BERT layer does 4*H*H (Q, K, V, output) + 2*H*I (feed-forward) multiply-adds
in dense matmuls and 2*S*H in attention (Q.K^T and probs.V); forward FLOPs are twice the
multiply-adds, and training (forward + backward) is 3x forward. Embedding gathers, layer norm,
softmax and the optimizer are not counted.

Peaks. %bound is of the theoretical peak of the run's precision on this CPU, cores x maximum
clock x FLOPs per cycle of the instruction-set level (machine.theoretical_peak): no computation
can exceed it, so a run above 100% would mean a wrong FLOP count. The clock is the OS's maximum,
or BENCH_MAX_CLOCK_GHZ, or a 5 GHz ceiling (VMs do not expose the maximum). %meas is of the
measured matmul peak: the best of square matmuls of 1024, 2048 and 4096 on one device with the
same thread settings, measured before and after the runs. It is what the TF/oneDNN path that
training uses reaches, but a probe disturbed by other processes reads low, and training can then
exceed it (the table says so when it happens). ONEDNN_MAX_CPU_ISA=AVX2 (plus
XLA_FLAGS=--xla_cpu_max_isa=AVX2 for XLA runs) runs an AVX-512 machine as an AVX2 one; the
machine line and the bound follow the cap.

Usage:
  bash scripts/benchmark.sh                  # default plan, ~25 minutes on a 2-core CPU
  python benchmarks/train_bench.py --plan=full --steps=5
  python benchmarks/train_bench.py --plan=custom --configs=small --towers=1,2,4 --seqs=128 \
    --precisions=fp32,bf16 --xla=off,on --reductions=shared,allreduce
  # 8 GPUs, BERT-base, 64 rows per GPU (weak scaling), one run at a time (GPU memory):
  CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 bash scripts/benchmark.sh --plan=custom --configs=base \
    --towers=1,8 --seqs=128 --precisions=fp16 --xla=on --reductions=shared,allreduce \
    --batch_per_tower=64 --interleave=1 --hf_configs=
"""

import argparse
import collections
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from core import children
import machine
import worker_process
from classifier import model as classifier_model
from engine import training
import modeling
import tower_utils
# pylint: enable=g-import-not-at-top,wrong-import-position

_COMMON = {"hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
           "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02,
           "vocab_size": 30522}
MODEL_CONFIGS = {
    "base": dict(_COMMON, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072),  # BERT-base
    "minilm": dict(_COMMON, hidden_size=384, num_hidden_layers=12, num_attention_heads=12,
                   intermediate_size=1536),  # MiniLM-L12-H384
    "small": dict(_COMMON, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                  intermediate_size=1024),  # BERT-small (L4 H256)
}
_TOKENS_PER_TOWER_BATCH = 32 * 128  # seq 256 and 512 keep the tokens of 32 x 128

Run = collections.namedtuple(
    "Run", ["config", "seq", "batch_per_tower", "towers", "precision", "xla", "reduction",
            "accum"])
Result = collections.namedtuple("Result", ["run", "examples_per_sec", "input_wait"])


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--plan", choices=["default", "full", "custom"], default="default",
                 help="default: the towers/accumulation comparison of each --scaling_configs, "
                 "one factor at a time around a baseline, and the HF comparison (~25 min on 2 "
                 "cores); full: every combination of the lists below; "
                 "custom: like full but only the lists given.")
  p.add_argument("--configs", default="small", help="Model configs for the table: " +
                 ", ".join(sorted(MODEL_CONFIGS)))
  p.add_argument("--scaling_configs", default="small,minilm",
                 help="default plan: configs of the towers/accumulation comparison (1 tower, 2 "
                 "and 4 towers in both reductions, 4 x accumulation, same global batch).")
  p.add_argument("--towers", default="1,2,4", help="Tower counts.")
  p.add_argument("--seqs", default="128,256,512", help="Sequence lengths.")
  p.add_argument("--precisions", default="fp32,bf16,fp16", help="fp32, bf16, fp16.")
  p.add_argument("--xla", default="off,on", help="XLA settings: off, on.")
  p.add_argument("--reductions", default="shared,allreduce", help="Gradient reductions.")
  p.add_argument("--accum_steps", default="1",
                 help="full/custom plans: gradient accumulation steps (micro-batches per update).")
  p.add_argument("--global_batch", type=int, default=32,
                 help="Global batch at seq 128, split over the towers (strong scaling); longer "
                 "sequences keep the number of tokens.")
  p.add_argument("--batch_per_tower", type=int, default=0,
                 help="full/custom plans: if set, every tower gets this many rows at seq 128 "
                 "(weak scaling, as for GPUs) instead of a share of --global_batch.")
  p.add_argument("--steps", type=int, default=1, help="Timed updates per round.")
  p.add_argument("--rounds", type=int, default=16,
                 help="Timed rounds per run; the mean of the faster half of all timed updates "
                 "counts.")
  p.add_argument("--interleave", type=int, default=6,
                 help="Runs built at once and timed round by round in turn (memory: one "
                 "model, its Adam slots and activations per run).")
  p.add_argument("--warmup", type=int, default=2, help="Untimed updates per run.")
  p.add_argument("--hf_configs", default="base,minilm",
                 help="Configs for the Hugging Face comparison at seq 128 ('' to skip).")
  p.add_argument("--hf_batch", type=int, default=8, help="Batch of the HF comparison.")
  p.add_argument("--hf_precisions", default="auto",
                 help="Precisions of the HF comparison (fp32, bf16; bf16 = torch.autocast on "
                 "their side, --use_bf16 on ours); auto: fp32, and bf16 when the CPU has "
                 "bfloat16 matmul units (AVX512-BF16 or AMX, after any ONEDNN_MAX_CPU_ISA cap).")
  p.add_argument("--hf_compile", action="store_true",
                 help="Also time transformers under torch.compile (compiles for minutes).")
  p.add_argument("--hf_python", default=os.environ.get("HF_PYTHON", sys.executable),
                 help="Python with torch and transformers (default: $HF_PYTHON or this one).")
  p.add_argument("--threads", type=int, default=os.cpu_count(),
                 help="Compute threads for both frameworks: TF intra_op_parallelism_threads "
                 "and torch.set_num_threads.")
  p.add_argument("--inter_op_threads", type=int, default=2,
                 help="TF inter_op_parallelism_threads (ops, e.g. towers, run concurrently) and "
                 "torch.set_num_interop_threads (unused by eager PyTorch training).")
  p.add_argument("--json_out", default=None, help="Also write the results as JSON here.")
  return p.parse_args(argv)


def _list(text, kind=str):
  return [kind(x) for x in text.split(",") if x]


def scaling_group(config, global_batch):
  """1 tower, 2 and 4 towers in both reductions, and 4 x accumulation, at one global batch."""
  base = Run(config, 128, global_batch, 1, "fp32", False, "shared", 1)
  runs = [base]
  for towers in (2, 4):
    for reduction in ("shared", "allreduce"):
      runs.append(base._replace(towers=towers, batch_per_tower=global_batch // towers,
                                reduction=reduction))
  runs.append(base._replace(batch_per_tower=global_batch // 4, accum=4))
  return runs


def default_plan(args):
  """The scaling group of each --scaling_configs, then one factor at a time around the baseline.

  The baseline is the first of --configs at 1 tower, seq 128, fp32, XLA off.
  """
  runs = []
  for config in _list(args.scaling_configs):
    runs.extend(scaling_group(config, args.global_batch))
  base = Run(_list(args.configs)[0], 128, args.global_batch, 1, "fp32", False, "shared", 1)
  if base not in runs:
    runs.append(base)
  for seq in (256, 512):
    runs.append(base._replace(seq=seq, batch_per_tower=_TOKENS_PER_TOWER_BATCH // seq))
  for precision in ("bf16", "fp16"):
    runs.append(base._replace(precision=precision))
  runs.append(base._replace(xla=True))
  runs.append(base._replace(xla=True, precision="bf16"))
  return runs


def full_plan(args):
  """Every combination of the given lists (reduction only varies with more than one tower)."""
  runs = []
  for config, towers, seq, precision, xla, reduction, accum in itertools.product(
      _list(args.configs), _list(args.towers, int), _list(args.seqs, int),
      _list(args.precisions), [x == "on" for x in _list(args.xla)], _list(args.reductions),
      _list(args.accum_steps, int)):
    if towers == 1 and reduction != "shared":
      continue
    if args.batch_per_tower:
      per_tower = args.batch_per_tower * 128 // seq
    else:
      per_tower = args.global_batch * 128 // seq // towers
    runs.append(Run(config, seq, max(1, per_tower), towers, precision, xla, reduction, accum))
  return runs


def bert_config(name):
  return modeling.BertConfig(**MODEL_CONFIGS[name])


def train_flops_per_example(config, seq):
  """Forward + backward FLOPs of BERT (+ pooler) on one example of `seq` tokens (see above)."""
  h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
  macs_per_token = layers * (4 * h * h + 2 * h * i + 2 * seq * h)
  macs = macs_per_token * seq + h * h  # + the pooler on [CLS]
  return 3 * 2 * macs


def synthetic_batch(config, seq, rows, seed=0):
  """A fixed classification batch: dict name -> int32 array [rows, ...]."""
  rng = np.random.RandomState(seed)
  return {"input_ids": rng.randint(1, config.vocab_size, (rows, seq)).astype(np.int32),
          "input_mask": np.ones((rows, seq), np.int32),
          "segment_ids": np.zeros((rows, seq), np.int32),
          "label_ids": rng.randint(0, 2, (rows,)).astype(np.int32)}


class TfRun(object):
  """One configuration's training graph and Session, ready to time rounds of updates."""

  def __init__(self, run, args, cluster=None):
    """run: Run; args: needs threads, inter_op_threads, warmup; cluster: for one process of a
    multi-process run (parallel.cluster.Cluster), None for a one-process run."""
    self.run = run
    config = bert_config(run.config)
    parallel = tower_utils.parallel_spec(run.towers, reduction=run.reduction, accum_steps=run.accum,
                                         **({"cluster": cluster} if cluster else {}))
    spec = training.TrainSpec(
        output_dir=None, parallel=parallel,
        batch_size_per_tower=run.batch_per_tower, num_train_steps=10 ** 6, num_warmup_steps=0,
        learning_rate=1e-5, init_checkpoint=None, save_checkpoints_steps=10 ** 6,
        log_every_n_steps=10 ** 6, keep_checkpoint_max=1, seed=1, precision=run.precision,
        use_xla=run.xla)
    micro_batch = run.batch_per_tower * run.towers
    self.global_batch = micro_batch * run.accum * parallel.cluster.num_processes
    self._graph = tf.Graph()
    with self._graph.as_default():
      tf.set_random_seed(1)
      with tf.device(tower_utils.input_device(parallel)):
        dataset = tf.data.Dataset.from_tensors(synthetic_batch(config, run.seq, micro_batch))
        dataset = training.stamp_ready_time(dataset.repeat())
        features = tf.data.make_one_shot_iterator(dataset).get_next()
      self._train_graph = training.build_train_graph(
          classifier_model.make_tower_fn(config, 2, is_training=True), features, spec)
      init_op = tf.group(tf.global_variables_initializer(), tf.local_variables_initializer())
    self._sess = tower_utils.new_session(parallel, run.xla, self._graph, args.threads,
                                         args.inter_op_threads)
    self._sess.run(init_op)
    self._sess.run(self._train_graph.sync_op)
    for _ in range(args.warmup):
      self._update()

  def _update(self):
    """Runs one update; returns the seconds it waited for input."""
    return training.run_update(self._sess, self._train_graph, self.run.accum,
                               {"step": self._train_graph.train_op})[2]

  def time_updates(self, steps):
    """[(seconds, seconds waiting for input)] of each of `steps` updates."""
    timings = []
    for _ in range(steps):
      start = time.time()
      waited = self._update()
      timings.append((time.time() - start, waited))
    return timings

  def trace_update(self):
    """Runs one update (accum 1) with a full trace; returns its tf.RunMetadata step_stats."""
    metadata = tf.RunMetadata()
    self._sess.run(self._train_graph.train_op, run_metadata=metadata,
                   options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE))
    return metadata.step_stats

  def close(self):
    self._sess.close()


def measure_tf(runs, args):
  """Results of `runs`, timed in interleaved rounds (at most --interleave Sessions at once).

  Interleaving puts every run of a group under the same machine conditions in each round, so
  their ratios are fair even when other processes come and go.
  """
  results = []
  for start in range(0, len(runs), args.interleave):
    group = [TfRun(run, args) for run in runs[start:start + args.interleave]]
    timings = [[] for _ in group]
    for _ in range(args.rounds):
      for i, tf_run in enumerate(group):
        timings[i].extend(tf_run.time_updates(args.steps))
    for tf_run, run_timings in zip(group, timings):
      tf_run.close()
      fast = faster_half(run_timings)
      elapsed = sum(seconds for seconds, _ in fast)
      results.append(Result(tf_run.run, len(fast) * tf_run.global_batch / elapsed,
                            sum(waited for _, waited in fast) / elapsed))
      print("  %s: %.2f examples/sec" % (dict(tf_run.run._asdict()),
                                         results[-1].examples_per_sec), flush=True)
  return results


def faster_half(timings):
  """The faster half (rounded up) of a list of (seconds, ...) tuples."""
  return sorted(timings)[:(len(timings) + 1) // 2]


CHAIN = 8  # matmuls of 1024^2 per timed Session.run of the peak probe (as in hf_bench.py)


def measure_peak(dtype, threads, sizes=(1024, 2048, 4096), repeats=4):
  """Best GFLOP/s of square matmuls of `sizes` in `dtype` on one device (TF, `threads` threads)."""
  return max(_matmul_gflops(dtype, threads, size, repeats) for size in sizes)


def _matmul_gflops(dtype, threads, size, repeats):
  """Best GFLOP/s of `repeats` runs of a chain of size x size matmuls (c = c @ b).

  The operands are variables already in `dtype` and each run does chain_length(size) matmuls
  (8 at 1024), so the figure
  is the matmuls': neither a cast of the operands (which the former probe did in every run, as
  much work as a bfloat16 matmul of 1024 on AMX) nor the Session's per-run overhead counts.
  """
  with tf.Graph().as_default():
    a = tf.Variable(tf.cast(tf.random.normal([size, size]), dtype))
    b = tf.Variable(tf.cast(tf.random.normal([size, size]) / size ** 0.5, dtype))
    product = a
    for _ in range(chain_length(size)):
      product = tf.matmul(product, b)
    # Fetch one element so the timing is the matmuls, not a copy of the result.
    probe = product[0, 0]
    # Its own inter-op pool: the first Session of a process without use_per_session_threads
    # sizes the global pool that every later Session (the runs measured after this probe) uses.
    config = tf.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=1,
                            use_per_session_threads=True)
    with tf.Session(config=config) as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(probe)
      best = float("inf")
      for _ in range(repeats):
        start = time.time()
        sess.run(probe)
        best = min(best, time.time() - start)
  return chain_length(size) * 2.0 * size ** 3 / best / 1e9


def chain_length(size):
  """Matmuls per timed run at `size`: CHAIN at 1024, fewer for larger sizes (at least 1), where
  one matmul already takes far longer than a Session.run's overhead."""
  return max(1, int(round(CHAIN * (1024.0 / size) ** 3)))


_DTYPES = {"fp32": tf.float32, "bf16": tf.bfloat16, "fp16": tf.float16}


def measure_peaks(threads, precisions=("fp32", "bf16", "fp16")):
  """dict precision name -> measured matmul GFLOP/s, for fp32 and the `precisions` given.

  Only the precisions a plan uses are probed: under ONEDNN_MAX_CPU_ISA=AVX2 on a CPU with
  AVX512-BF16, TensorFlow still sends bfloat16 matmuls to oneDNN, which then aborts the process
  ("could not create a primitive descriptor for the matmul primitive").
  """
  names = ["fp32"] + [p for p in _DTYPES if p in precisions and p != "fp32"]
  return {name: measure_peak(_DTYPES[name], threads) for name in names}


class HfRun(object):
  """transformers training one config in its own process (hf_bench.py --interactive), timed step
  by step so that its steps interleave with TfRuns' (the same machine conditions)."""

  def __init__(self, config_name, seq, batch, precision, compile_model, args):
    self.label = "transformers %s%s" % ("torch.compile" if compile_model else "eager",
                                        ", autocast bf16" if precision == "bf16" else "")
    self.global_batch = batch
    cmd = [args.hf_python, os.path.join(_REPO, "benchmarks", "hf_bench.py"), "--interactive",
           "--config_json=%s" % json.dumps(MODEL_CONFIGS[config_name]), "--seq=%d" % seq,
           "--batch=%d" % batch, "--warmup=%d" % args.warmup, "--threads=%d" % args.threads,
           "--interop_threads=%d" % args.inter_op_threads, "--precision=%s" % precision]
    if compile_model:
      cmd.append("--compile")
    self._stderr = tempfile.TemporaryFile(mode="w+")
    self._proc = children.start(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=self._stderr, text=True)
    self.about = self._answer()

  def _answer(self):
    line = self._proc.stdout.readline()
    if not line:
      self._stderr.seek(0)
      raise RuntimeError("%s failed: %s" % (self.label, self._stderr.read().strip()[-500:]))
    return json.loads(line)

  def time_updates(self, steps):
    """[(seconds, 0.0)] of each of `steps` training steps (no input wait: a fixed batch)."""
    timings = []
    for _ in range(steps):
      self._proc.stdin.write("step\n")
      self._proc.stdin.flush()
      timings.append((self._answer()["seconds"], 0.0))
    return timings

  def close(self):
    worker_process.end(self._proc, self._stderr)


def torch_peaks(args, precisions):
  """dict precision -> PyTorch's best GFLOP/s of the same matmul chains (hf_bench.py --peak)."""
  peaks = {}
  for precision in precisions:
    cmd = [args.hf_python, os.path.join(_REPO, "benchmarks", "hf_bench.py"),
           "--peak=%s" % precision, "--threads=%d" % args.threads]
    proc = children.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode == 0:
      peaks[precision] = json.loads(proc.stdout.strip().splitlines()[-1])["peak_gflops"]
  return peaks


def hf_precisions(args):
  """The precisions of the HF comparison: --hf_precisions, where 'auto' is fp32 plus bf16 when
  the CPU (as capped by ONEDNN_MAX_CPU_ISA) has bfloat16 matmul units."""
  if args.hf_precisions != "auto":
    return _list(args.hf_precisions)
  has_bf16 = machine.isa_level() in ("AVX-512 + BF16", "AMX")
  return ["fp32", "bf16"] if has_bf16 else ["fp32"]


def hf_available(python):
  proc = children.run([python, "-c", "import torch, transformers"], capture_output=True,
                      check=False)
  return proc.returncode == 0


def format_table(results, peaks, bounds):
  """The results as a fixed-width text table. %bound and %meas are of the theoretical and the
  measured peak of the run's precision (dicts precision name -> GFLOP/s; bounds None on GPUs,
  where fp16 runs are measured against tensor-core fp16)."""
  header = ("config", "seq", "towers", "batch", "accum", "prec", "xla", "reduction", "ex/s",
            "TFLOP/s", "%bound", "%meas", "wait")
  rows = [header]
  for r in results:
    run = r.run
    tflops = train_flops_per_example(bert_config(run.config), run.seq) * r.examples_per_sec / 1e12
    rows.append((run.config, str(run.seq), str(run.towers),
                 str(run.batch_per_tower * run.towers * run.accum), str(run.accum), run.precision,
                 "on" if run.xla else "off", run.reduction if run.towers > 1 else "-",
                 "%.2f" % r.examples_per_sec, "%.3f" % tflops,
                 "%.1f%%" % (100.0 * tflops * 1e3 / bounds[run.precision]) if bounds else "-",
                 "%.1f%%" % (100.0 * tflops * 1e3 / peaks[run.precision]),
                 "%.0f%%" % (100 * r.input_wait)))
  widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
  return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows)


def find(results, **fields):
  """examples/sec of the result whose run matches `fields`, or None."""
  for r in results:
    if all(getattr(r.run, k) == v for k, v in fields.items()):
      return r.examples_per_sec
  return None


def checks(results, args):
  """(claim, ratio, threshold or None) triples computable from `results`."""
  out = []
  configs = _list(args.scaling_configs) if args.plan == "default" else _list(args.configs)
  for config in configs:
    base = dict(config=config, seq=128, precision="fp32", xla=False)
    one = find(results, towers=1, accum=1, **base)
    # The claim is for the default reduction. allreduce is printed for information: on one CPU
    # its replicas' optimizer updates (one per tower) share the same cores, on GPUs they run in
    # parallel, one per card.
    for reduction, threshold in (("shared", 0.95), ("allreduce", None)):
      four = find(results, towers=4, accum=1, reduction=reduction, **base)
      if one and four:
        out.append(("4 towers (%s) / 1 tower, global batch %d, %s" %
                    (reduction, args.global_batch, config), four / one, threshold))
    accum = find(results, towers=1, accum=4, **base)
    if one and accum:
      out.append(("accumulation 4 x %d / one batch of %d, %s" %
                  (args.global_batch // 4, args.global_batch, config), accum / one, 0.95))
  return out


def speedups(results):
  """Lines 'N towers / 1 tower' for every multi-tower run that has a 1-tower twin (same rows
  per tower and accumulation: weak scaling).

  Linear scaling is a speed-up of N; on one CPU, where the towers share the cores, it is 1.0.
  """
  lines = []
  for r in results:
    run = r.run
    if run.towers == 1:
      continue
    one = find(results, config=run.config, seq=run.seq, precision=run.precision, xla=run.xla,
               towers=1, accum=run.accum, batch_per_tower=run.batch_per_tower)
    if one:
      lines.append("  %s seq %d %s XLA %s, accum %d: %d towers (%s) x %d rows / 1 tower: %.2fx"
                   % (run.config, run.seq, run.precision, "on" if run.xla else "off", run.accum,
                      run.towers, run.reduction, run.batch_per_tower, r.examples_per_sec / one))
  return lines


def run_hf_comparison(args):
  """(lines, checks, results) of ours vs HF on --hf_configs at seq 128, batch --hf_batch.

  For each config and precision, our runs (XLA off and on in fp32; off in bf16, where XLA's CPU
  matmuls are not oneDNN's) and transformers (eager, and torch.compile with --hf_compile) are
  built side by side and timed round by round in turn, like measure_tf's groups.
  results: [(precision, config, best Result of ours)].
  """
  names = _list(args.hf_configs)
  if not names:
    return [], [], []
  if not hf_available(args.hf_python):
    return (["HF transformers: torch/transformers not importable by %s; pip install -r "
             "requirements-bench.txt (or set HF_PYTHON)" % args.hf_python], [], [])
  lines, out, best_results = [], [], []
  for name in names:
    for precision in hf_precisions(args):
      ours = [TfRun(Run(name, 128, args.hf_batch, 1, precision, xla, "shared", 1), args)
              for xla in ((False, True) if precision == "fp32" else (False,))]
      theirs = []
      try:
        for compile_model in ((False, True) if args.hf_compile else (False,)):
          theirs.append(HfRun(name, 128, args.hf_batch, precision, compile_model, args))
      except RuntimeError as e:
        print("HF transformers run failed: %s" % e)
      group = ours + theirs
      timings = [[] for _ in group]
      for _ in range(args.rounds):
        for i, contender in enumerate(group):
          timings[i].extend(contender.time_updates(args.steps))
      rates = []
      for contender, run_timings in zip(group, timings):
        contender.close()
        fast = faster_half(run_timings)
        rates.append(len(fast) * contender.global_batch / sum(t for t, _ in fast))
      ours_rates, theirs_rates = rates[:len(ours)], rates[len(ours):]
      best = max(range(len(ours)), key=lambda i: ours_rates[i])
      best_results.append((precision, name, Result(ours[best].run, ours_rates[best], 0.0)))
      text = "%-7s seq 128 batch %d %s: bert-mgpu %s" % (
          name, args.hf_batch, precision, " / ".join(
              "%.2f ex/s (XLA %s)" % (r, "on" if run.run.xla else "off")
              for r, run in zip(ours_rates, ours)))
      for contender, rate in zip(theirs, theirs_rates):
        text += "; %s %.2f ex/s" % (contender.label, rate)
      if theirs:
        about = theirs[0].about
        text += " (torch %s, transformers %s, attention %s, %d threads)" % (
            about["torch"], about["transformers"], about["attention"], about["threads"])
      lines.append(text)
      for contender, rate in zip(theirs, theirs_rates):
        threshold = {"fp32": 1.0, "bf16": 1.5}.get(precision)
        if "compile" in contender.label:
          threshold = None
        out.append(("bert-mgpu (XLA %s) / %s, %s %s seq 128" % (
            "on" if ours[best].run.xla else "off", contender.label, name, precision),
                    ours_rates[best] / rate, threshold))
  return lines, out, best_results


def step_share_lines(best_results, tf_peaks, torch_peak_values):
  """(lines, checks): each of our best HF-comparison runs as a share of the best matmul peak
  of its precision measured on this machine, by either framework."""
  lines, out = [], []
  for precision, name, result in best_results:
    gflops = train_flops_per_example(bert_config(name), 128) * result.examples_per_sec / 1e9
    peaks = [("TensorFlow", tf_peaks.get(precision)), ("PyTorch",
                                                       torch_peak_values.get(precision))]
    peaks = [(who, p) for who, p in peaks if p]
    if not peaks:
      continue
    who, best = max(peaks, key=lambda item: item[1])
    lines.append("%-7s seq 128 %s training step: %.0f GFLOP/s = %.1f%% of the best %s matmul "
                 "measured (%s %.0f GFLOP/s)" % (name, precision, gflops, 100.0 * gflops / best,
                                                 precision, who, best))
    out.append(("bert-mgpu step / best %s matmul peak (%s), %s seq 128" % (precision, who, name),
                gflops / best, 0.5 if precision == "bf16" else None))
  return lines, out


def main(argv=None):
  args = parse_args(argv)
  logging.set_verbosity(logging.WARNING)
  tf.disable_v2_behavior()
  plan = default_plan(args) if args.plan == "default" else full_plan(args)
  hf_wanted = bool(_list(args.hf_configs)) and hf_available(args.hf_python)
  precisions = sorted(set(run.precision for run in plan) |
                      set(hf_precisions(args) if _list(args.hf_configs) else []))
  load_before = os.getloadavg()
  peaks = measure_peaks(args.threads, precisions)
  results = measure_tf(plan, args)
  hf_lines, hf_checks, hf_best = run_hf_comparison(args)
  # Measured again at the end: the better of the two is the less disturbed.
  again = measure_peaks(args.threads, precisions)
  peaks = {name: max(value, again[name]) for name, value in peaks.items()}
  their_peaks = torch_peaks(args, [p for p in precisions if p != "fp16"]) if hf_wanted else {}
  share_lines, share_checks = step_share_lines(hf_best, peaks, their_peaks)
  load_after = os.getloadavg()

  print()
  print("Machine: %d cores; TF %s; threads for TF and torch alike: intra-op %d, inter-op %d; "
        "oneDNN %s" % (os.cpu_count(), tf.__version__, args.threads, args.inter_op_threads,
                       os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)")))
  bounds = None if tf.config.list_physical_devices("GPU") else {
      name: machine.theoretical_peak(name)[0] for name in peaks}
  print("CPU: %s" % machine.describe())
  print("Load average (1 min) from other processes: %.1f at the start, %.1f at the end" % (
      load_before[0], load_after[0]))
  if bounds:
    print("Theoretical peak (bound): fp32 %.0f GFLOP/s = %s%s" % (
        bounds["fp32"], machine.theoretical_peak("fp32")[1],
        "".join("; %s %.0f" % (p, bounds[p]) for p in bounds if p != "fp32")))
  print("Measured matmul peak, TensorFlow (best of square matmuls of 1024, 2048 and 4096, %d in "
        "a row at 1024, one device): %s; %%bound and %%meas are of the run's precision" % (
            CHAIN, "; ".join("%s %.1f GFLOP/s" % (p, peaks[p]) for p in peaks)))
  if their_peaks:
    print("Measured matmul peak, PyTorch (the same chains): %s" % "; ".join(
        "%s %.1f GFLOP/s" % (p, their_peaks[p]) for p in their_peaks))
  if results:
    print(format_table(results, peaks, bounds))
  over = [r for r in results if train_flops_per_example(bert_config(r.run.config), r.run.seq) *
          r.examples_per_sec / 1e9 > peaks[r.run.precision]]
  if over:
    print("Note: %d run(s) above the measured peak: the probe was disturbed (other processes) "
          "and reads low; %%bound is the figure that cannot be exceeded." % len(over))
  if hf_lines:
    print()
    print("\n".join(hf_lines + share_lines))
  print()
  print("Speed-up over 1 tower with the same rows per tower (weak scaling; linear = N):")
  print("\n".join(speedups(results)) or "  (no such pairs in this plan; the checks below compare "
        "runs of the same global batch)")
  print()
  print("Checks:")
  all_checks = checks(results, args) + hf_checks + share_checks
  if not all_checks:
    print("  (none: the checks need the default plan's runs or the HF comparison)")
  for claim, ratio, threshold in all_checks:
    if threshold is None:
      print("  %-70s %.3f  (for information)" % (claim, ratio))
    else:
      print("  %-70s %.3f  (>= %.2f: %s)" % (claim, ratio, threshold,
                                            "yes" if ratio >= threshold else "NO"))
  if args.json_out:
    with open(args.json_out, "w") as f:
      json.dump({"peaks_gflops": peaks, "torch_peaks_gflops": their_peaks,
                 "bounds_gflops": bounds, "machine": machine.describe(),
                 "load": [load_before[0], load_after[0]],
                 "hf_comparison": [[claim, ratio] for claim, ratio, _ in hf_checks],
                 "results": [dict(r.run._asdict(), examples_per_sec=r.examples_per_sec,
                                  input_wait=r.input_wait) for r in results]}, f, indent=1)


if __name__ == "__main__":
  main()
