"""Serving side by side: our SavedModel, ONNX Runtime and transformers on the same texts.

  python benchmarks/serving_compare.py --run_dir=out/minilm_mrpc --task_name=mrpc \
    --data_dir=glue/MRPC --work_dir=out/minilm_mrpc/serving_compare

--run_dir is a classifier run of run_classifier_mgpu.py with --do_export (its saved_model/ and
checkpoint). The Hugging Face side is made from the same checkpoint: convert_to_hf.py writes
<work_dir>/hf, torch.onnx.export writes <work_dir>/model.onnx (both kept for the next run).
Each of our contenders serves the run's SavedModel when it was exported as that contender
needs, else the same export built again in <work_dir>/<contender>/saved_model, changing only
what the contender needs (export_plan): "tflite" with assets/model.tflite (--export_tflite, fp32;
none for --long_text=sliding), for the TFLite contender (serving/tflite_classifier.py); "bf16"
(with bf16 in --precisions) as --export_precision=bf16 does (the encoder in bfloat16 from
bfloat16 kernels, without TFLite); "fp32" when the run exported bf16. Our SavedModel
serves twice per precision: as loaded, and with oneDNN's weight cache
(TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 in the serving process, serving_worker.py --weight_cache).

Each contender (serving_worker.py: savedmodel, onnxruntime, transformers) serves in a process of
its own, from raw text to logits as its users would (ours tokenizes in the graph; the other two
run the converted model's fast Hugging Face tokenizer), padding each batch to its longest row,
with the same threads. The dev texts are served at each --batch_sizes in rounds: every round
serves one pass per contender in turn, so all share the machine's conditions (other jobs on a
shared machine slow every contender of a round alike). Printed per precision, contender and
batch: p50 and p99 latency of a call over all rounds, and throughput (examples/sec), the
median of the rounds' passes; then the checks: ours against ONNX Runtime at each batch size
(>= 1.00), every fp32 contender's logits against ours on all dev texts (within 1e-4), and
our bf16 logits and labels against our fp32 ones.

--processes=N runs each contender as N worker processes serving the same texts at once (a
server per core with --threads=1, as a latency server of a small model is best deployed; see
docs/serving.md); examples/sec is then their total over the wall time of each pass.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

from absl import flags
import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
sys.path.insert(0, _REPO)
sys.path.insert(0, _HERE)

# pylint: disable=g-import-not-at-top,wrong-import-position
import machine
import worker_process
import run_classifier_mgpu
from core import atomic_files
from core import children
from core.errors import InputError
from engine import cli
from serving import saved_model_export
from serving import tflite_classifier
# pylint: enable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS

flags.DEFINE_string("run_dir", None, "A classifier run with --do_export (saved_model/, "
                    "checkpoint, labels).")
flags.DEFINE_string("work_dir", None, "Where the Hugging Face conversion, the ONNX file and "
                    "the bfloat16 SavedModel go (default <run_dir>/serving_compare).")
flags.DEFINE_string("batch_sizes", "1,32", "Serving batch sizes.")
flags.DEFINE_integer("batch1_examples", 100, "Texts served per round at batch 1 (the first ones "
                     "of dev); larger batches serve all of dev.")
flags.DEFINE_integer("serve_rounds", 5, "Rounds (one pass per contender and batch size each).")
flags.DEFINE_string("precisions", "auto", "fp32, bf16; auto: fp32, and bf16 when the CPU has "
                    "bfloat16 matmul units (AVX512-BF16 or AMX).")
flags.DEFINE_integer("threads", os.cpu_count(), "Intra-op threads of every contender.")
flags.DEFINE_integer("inter_op_threads", 1, "Inter-op threads of every contender.")
flags.DEFINE_integer("processes", 1, "Worker processes per contender, all serving the same texts "
                     "at once, each with --threads intra-op threads (e.g. --processes=2 "
                     "--threads=1: one single-threaded server per core); examples/sec is then "
                     "their total over the wall time of the pass.")
flags.DEFINE_float("tolerance", 1e-4, "Largest |logit difference| to ours allowed in fp32.")

WORKER = os.path.join(_HERE, "serving_worker.py")


class Contender(object):
  """--processes serving_worker.py processes: the servers of one kind and precision."""

  def __init__(self, kind, precision, model, texts_file, extra=()):
    self.kind, self.precision = kind, precision
    self.weight_cache = "--weight_cache" in extra
    self._texts_file = texts_file
    self._cmd = [sys.executable, WORKER, "--kind=%s" % kind, "--model=%s" % model,
           "--texts=%s" % texts_file, "--precision=%s" % precision,
           "--threads=%d" % FLAGS.threads, "--inter_op_threads=%d" % FLAGS.inter_op_threads,
           "--max_seq_length=%d" % FLAGS.max_seq_length] + list(extra)
    self._stderrs = []
    self._procs = []
    self.about = None  # set by start
    self.latencies = {}  # batch size -> every call's seconds
    self.rates = {}  # batch size -> examples/sec of each pass

  @property
  def label(self):
    return {"savedmodel": "bert-mgpu SavedModel", "tflite": "bert-mgpu TFLite (--export_tflite)",
            "onnxruntime": "ONNX Runtime",
            "transformers": "transformers eager"}[self.kind] + (
                ", weight cache" if self.weight_cache else "")

  def start(self):
    """Starts the workers and waits until each has loaded and warmed up (one worker at a time,
    so none of them loads while another one is busy)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    for _ in range(FLAGS.processes):
      self._stderrs.append(tempfile.TemporaryFile(mode="w+"))
      self._procs.append(children.start(self._cmd, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self._stderrs[-1],
                                        text=True, env=env))
      self.about = self._ask(None, which=slice(-1, None))[0]

  def _ask(self, command, which=slice(None)):
    """Sends `command` to the workers `which` selects (all by default), then reads each one's
    answer."""
    workers = list(zip(self._procs, self._stderrs))[which]
    if command is not None:
      for proc, _ in workers:
        proc.stdin.write(command + "\n")
        proc.stdin.flush()
    answers = []
    for proc, stderr in workers:
      line = proc.stdout.readline()
      if not line:
        stderr.seek(0)
        _step_failed("the %s %s server" % (self.kind, self.precision), stderr.read(),
                     os.path.dirname(self._texts_file))
      answers.append(json.loads(line))
    return answers

  def serve(self, batch_size, count):
    """Serves the first `count` texts (0: all) at `batch_size` once in every worker, all at
    once; records the timings."""
    start = time.perf_counter()
    answers = self._ask("run %d %d" % (batch_size, count))
    wall = time.perf_counter() - start
    for answer in answers:
      self.latencies.setdefault(batch_size, []).extend(answer["latencies"])
    served = count or self.num_texts
    # One worker: its own serving time (no pipe in it); several: their total over the wall.
    rate = (served / sum(answers[0]["latencies"]) if len(answers) == 1
            else len(answers) * served / wall)
    self.rates.setdefault(batch_size, []).append(rate)

  def logits(self, batch_size):
    return np.array(self._ask("logits %d" % batch_size, which=slice(0, 1))[0]["logits"])

  def close(self):
    for proc, stderr in zip(self._procs, self._stderrs):
      worker_process.end(proc, stderr)


PRECISIONS = ("fp32", "bf16")


def precisions():
  """The precisions --precisions asks for; InputError for any other."""
  if FLAGS.precisions == "auto":
    return ["fp32", "bf16"] if machine.isa_level() in ("AVX-512 + BF16", "AMX") else ["fp32"]
  wanted = [p for p in FLAGS.precisions.split(",") if p]
  if not wanted or set(wanted) - set(PRECISIONS):
    raise InputError("--precisions=%s: expected auto, or %s separated by commas" % (
        FLAGS.precisions, " and/or ".join(PRECISIONS)))
  return wanted


def batch_sizes():
  """The batch sizes of --batch_sizes; InputError unless each is an integer >= 1."""
  try:
    sizes = [int(b) for b in FLAGS.batch_sizes.split(",")]
  except ValueError:
    sizes = []
  if not sizes or min(sizes) < 1:
    raise InputError("--batch_sizes=%s: expected integers >= 1 separated by commas, e.g. 1,32"
                     % FLAGS.batch_sizes)
  return sizes


def check_flags():
  """Checks every flag before any conversion, export or server: one InputError line."""
  if not FLAGS.run_dir:
    raise InputError("--run_dir is required (a classifier run with --do_export)")
  if FLAGS.processes < 1 or FLAGS.threads < 1:
    raise InputError("--processes=%d, --threads=%d: expected 1 or more of each" % (
        FLAGS.processes, FLAGS.threads))
  for name in ("serve_rounds", "batch1_examples", "inter_op_threads"):
    if FLAGS[name].value < 1:
      raise InputError("--%s=%d: expected an integer >= 1" % (name, FLAGS[name].value))
  if not FLAGS.tolerance > 0:
    raise InputError("--tolerance=%g: expected a number > 0" % FLAGS.tolerance)
  batch_sizes()
  precisions()


def _run(cmd, work_dir):
  """Runs a preparation step (a conversion or export); its failure ends the run (_step_failed)."""
  proc = children.run(cmd, capture_output=True, text=True, check=False,
                      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  if proc.returncode != 0:
    what = os.path.basename(cmd[1]) + (" " + cmd[2] if cmd[2].startswith("--kind=") else "")
    _step_failed(what, proc.stderr, work_dir)


def _step_failed(what, stderr_text, work_dir):
  """Raises InputError: one line naming the step, its last stderr line, and
  <work_dir>/failed_step.log, which keeps the whole stderr."""
  log = os.path.join(work_dir, "failed_step.log")
  atomic_files.write_text(log, stderr_text)
  last = ([line.strip() for line in stderr_text.splitlines() if line.strip()] or
          ["(nothing on stderr)"])[-1]
  if last.startswith("error: "):
    last = last[len("error: "):]
  raise InputError("%s failed: %s (its whole stderr: %s)" % (what, last, log))


def _export_config(saved_model):
  """A SavedModel's export spec (assets/export_config.json) as a dict; None when it has none."""
  if not os.path.exists(os.path.join(saved_model, "assets", tflite_classifier.EXPORT_CONFIG)):
    return None
  return tflite_classifier.read_export_config(saved_model, ("checkpoint", "do_lower_case"))


# What an export spec holds when it does not say (an export from before the field existed).
_SPEC_DEFAULTS = {"precision": "fp32", "tflite": False}

# The export each of our contenders serves, as the fields of the spec it is built from: the
# bf16 one never inherits the run's --export_tflite, which converts fp32 only (the TFLite
# converter fails on a bfloat16 encoder), and the TFLite one never the run's bf16.
CONTENDER_EXPORTS = {"fp32": {"precision": "fp32"},
                     "tflite": {"precision": "fp32", "tflite": True},
                     "bf16": {"precision": "bf16", "tflite": False}}


def _is_export(spec, fields):
  return spec is not None and all(spec.get(k, _SPEC_DEFAULTS[k]) == v for k, v in fields.items())


def export_plan(spec, wanted):
  """{contender: None (the run's own SavedModel serves it) or the spec to build it from} for the
  contenders of CONTENDER_EXPORTS that `wanted` precisions serve and the run's export allows
  (no TFLite contender for --long_text=sliding, which the TFLite model cannot serve)."""
  names = ["fp32", "tflite"] if "fp32" in wanted else []
  if "fp32" in wanted and spec.get("long_text", "truncate") != "truncate":
    names.remove("tflite")
  names += ["bf16"] if "bf16" in wanted else []
  return {name: None if _is_export(spec, CONTENDER_EXPORTS[name])
                else dict(spec, **CONTENDER_EXPORTS[name]) for name in names}


def run_export_spec():
  """The export spec of --run_dir's SavedModel; InputError when it has none."""
  spec = _export_config(os.path.join(FLAGS.run_dir, saved_model_export.EXPORT_DIR))
  if spec is None:
    raise InputError("--run_dir=%s: no saved_model/ there (train with --do_export)" %
                     FLAGS.run_dir)
  return spec


def prepare(work_dir, spec, wanted):
  """({contender: its SavedModel}, Hugging Face dir, ONNX file), made if missing: the run's
  SavedModel, or the same export built again as the contender needs (export_plan), in
  <work_dir>/<contender>/saved_model (kept for the next run)."""
  saved_model = os.path.join(FLAGS.run_dir, saved_model_export.EXPORT_DIR)
  assets = os.path.join(saved_model, "assets")
  hf_dir = os.path.join(work_dir, "hf")
  if not os.path.exists(os.path.join(hf_dir, "config.json")):
    _run([sys.executable, os.path.join(_REPO, "convert_to_hf.py"),
          "--checkpoint=%s" % spec["checkpoint"],
          "--bert_config_file=%s" % os.path.join(assets, "bert_config.json"),
          "--vocab_file=%s" % os.path.join(assets, "vocab.txt"),
          "--labels_file=%s" % os.path.join(assets, "labels.txt"),
          "--do_lower_case=%s" % spec["do_lower_case"], "--output_dir=%s" % hf_dir], work_dir)
  onnx_file = os.path.join(work_dir, "model.onnx")
  atomic_files.remove_stale_temporaries(work_dir)  # e.g. an ONNX export killed mid-way
  if not os.path.exists(onnx_file):
    _run([sys.executable, WORKER, "--kind=onnx_export", "--model=%s" % hf_dir,
          "--onnx_out=%s" % onnx_file], work_dir)
  models = {}
  for name, build_spec in export_plan(spec, wanted).items():
    models[name] = saved_model
    if build_spec is not None:
      # Built beside, then renamed into place (saved_model_export.build).
      models[name] = os.path.join(work_dir, name, saved_model_export.EXPORT_DIR)
      if not _is_export(_export_config(models[name]), CONTENDER_EXPORTS[name]):
        os.makedirs(os.path.dirname(models[name]), exist_ok=True)
        saved_model_export.build(os.path.dirname(models[name]), build_spec)
  return models, hf_dir, onnx_file


def contenders_of(precision, models, texts_file):
  exports, hf_dir, onnx_file = models
  if precision == "bf16":
    return [Contender("savedmodel", "bf16", exports["bf16"], texts_file),
            Contender("savedmodel", "bf16", exports["bf16"], texts_file, ["--weight_cache"]),
            Contender("transformers", "bf16", hf_dir, texts_file)]
  group = [Contender("savedmodel", "fp32", exports["fp32"], texts_file),
           Contender("savedmodel", "fp32", exports["fp32"], texts_file, ["--weight_cache"])]
  if "tflite" in exports:
    group.append(Contender("tflite", "fp32", exports["tflite"], texts_file))
  return group + [Contender("onnxruntime", "fp32", onnx_file, texts_file,
                            ["--tokenizer=%s" % hf_dir]),
                  Contender("transformers", "fp32", hf_dir, texts_file)]


def main(_):
  check_flags()
  spec = run_export_spec()
  if not FLAGS.data_dir:
    raise InputError("--data_dir is required (the task's dev texts are served)")
  examples = run_classifier_mgpu.get_processor(FLAGS.run_dir).get_dev_examples(FLAGS.data_dir)
  if not examples:
    raise InputError("--data_dir=%s: no dev examples to serve" % FLAGS.data_dir)
  work_dir = cli.require_output_dir(
      FLAGS.work_dir or os.path.join(FLAGS.run_dir, "serving_compare"), "work_dir")
  wanted = precisions()
  models = prepare(work_dir, spec, wanted)
  texts = {"text_a": [e.text_a for e in examples],
           "text_b": [e.text_b for e in examples] if examples[0].text_b is not None else None}
  texts_file = os.path.join(work_dir, "texts.json")
  atomic_files.write_atomically(texts_file, atomic_files.text_writer(json.dumps(texts)))
  load_before = os.getloadavg()[0]
  rows, checks, about, ours = [], [], {}, {}
  for precision in wanted:
    group = contenders_of(precision, models, texts_file)
    try:
      for contender in group:
        contender.start()
        contender.num_texts = len(examples)
      reference = group[0].logits(32)
      ours[precision] = reference
      for contender in group[1:]:
        diff = float(np.abs(contender.logits(32) - reference).max())
        checks.append(("%s logits vs ours, %s, all %d dev texts: max |difference|" % (
            contender.label, precision, len(examples)), diff,
                       FLAGS.tolerance if precision == "fp32" else None))
      for _ in range(FLAGS.serve_rounds):
        for batch_size in batch_sizes():
          for contender in group:
            contender.serve(batch_size, FLAGS.batch1_examples if batch_size == 1 else 0)
    finally:
      for contender in group:
        contender.close()
    for batch_size in batch_sizes():
      onnx = [c for c in group if c.kind == "onnxruntime"]
      for contender in group:
        rate = float(np.median(contender.rates[batch_size]))
        latencies = np.array(contender.latencies[batch_size]) * 1e3
        rows.append((precision, contender.label, batch_size, np.percentile(latencies, 50),
                     np.percentile(latencies, 99), rate))
        if onnx and contender.kind in ("savedmodel", "tflite"):
          claim = "ours%s / ONNX Runtime, %s, batch %d (examples/sec)" % (
              " (TFLite)" if contender.kind == "tflite" else
              " (weight cache)" if contender.weight_cache else "", precision, batch_size)
          checks.append((claim, rate / float(np.median(onnx[0].rates[batch_size])), 1.0))
    about.update((k, v) for c in group for k, v in c.about.items() if k != "ready")
  if len(ours) == 2:
    checks += [("ours bf16 vs ours fp32 logits, all %d dev texts: max |difference|" % len(
        examples), float(np.abs(ours["bf16"] - ours["fp32"]).max()), None),
                ("ours bf16: share of dev texts with ours fp32's label", float(np.mean(
                    ours["bf16"].argmax(-1) == ours["fp32"].argmax(-1))), None)]
  load_after = os.getloadavg()[0]
  print("Machine: %s; per contender: %s intra-op %d, inter-op %d threads; load average (1 min) "
        "from other processes %.1f at the start, %.1f at the end" % (
            machine.describe(), "%d processes at once, each" % FLAGS.processes
            if FLAGS.processes > 1 else "1 process,", FLAGS.threads, FLAGS.inter_op_threads,
            load_before, load_after))
  print("Versions: %s" % ", ".join("%s %s" % item for item in sorted(about.items())
                                    if item[0] != "attention"))
  print("Texts: %d dev examples of %s (%s); batch 1 serves the first %d per round; %d rounds, "
        "contenders interleaved" % (len(examples), FLAGS.task_name, FLAGS.data_dir,
                                    FLAGS.batch1_examples, FLAGS.serve_rounds))
  print()
  print("| precision | contender | batch | p50 ms | p99 ms | examples/sec |")
  print("| --- | --- | --- | --- | --- | --- |")
  for precision, label, batch_size, p50, p99, rate in rows:
    print("| %s | %s | %d | %.1f | %.1f | %.1f |" % (precision, label, batch_size, p50, p99, rate))
  print()
  print("Checks:")
  for claim, value, threshold in checks:
    if threshold is None:
      print("  %-75s %.3g  (for information)" % (claim, value))
    elif "difference" in claim:
      print("  %-75s %.2e  (<= %.0e: %s)" % (claim, value, threshold,
                                            "yes" if value <= threshold else "NO"))
    else:
      print("  %-75s %.3f  (>= %.2f: %s)" % (claim, value, threshold,
                                            "yes" if value >= threshold else "NO"))


if __name__ == "__main__":
  cli.run_main(main, output_flag="work_dir")
