"""Features take their settings as arguments: no feature module reads a flag it does not define.

A feature module (classifier/, pretraining/, rewrite/, serving/, heads/) that read FLAGS.<x>
defined by a run script would work only when that script was imported first. Two checks: no
feature module reads FLAGS (read by the source: a read inside a function that no test calls
counts too), and each feature module imports alone, in a process where no run script defined
its flags, and the export's entry functions run there on a tiny config (with a stand-in for
build_saved_model.py that records the spec it is given).
"""

import ast
import glob
import json
import os
import subprocess
import sys
import textwrap

from script_runner import CHINESE_VOCAB, REPO_ROOT, write_tiny_bert_config

FEATURE_PACKAGES = ("classifier", "heads", "pretraining", "rewrite", "serving")


def _feature_modules():
  """{dotted name: path} of every module of the feature packages."""
  modules = {}
  for package in FEATURE_PACKAGES:
    for path in sorted(glob.glob(os.path.join(REPO_ROOT, package, "*.py"))):
      name = os.path.splitext(os.path.basename(path))[0]
      modules[package if name == "__init__" else "%s.%s" % (package, name)] = path
  return modules


def _flag_reads(path):
  """The lines of `path` that read a flag's value: FLAGS.<name>, FLAGS[<name>] (with FLAGS
  bound to absl's flags.FLAGS, or flags.FLAGS written out)."""
  tree = ast.parse(open(path, encoding="utf-8").read(), path)
  reads = []
  for node in ast.walk(tree):
    if isinstance(node, (ast.Attribute, ast.Subscript)):
      target = node.value
      names_flags = (isinstance(target, ast.Name) and target.id == "FLAGS") or (
          isinstance(target, ast.Attribute) and target.attr == "FLAGS")
      if names_flags:
        reads.append(node.lineno)
  return reads


def test_no_feature_module_reads_a_flag():
  reads = {name: lines for name, path in _feature_modules().items()
           for lines in [_flag_reads(path)] if lines}
  assert not reads, ("feature modules take their settings as arguments from the run script "
                     "(the lines that read FLAGS)", reads)


_PROBE = r"""
import importlib, json, os, sys, traceback
sys.path.insert(0, %(root)r)
from engine import tf_env  # As every script: first.
import tensorflow.compat.v1 as tf  # Once, before the forks: each child imports one module.
from absl import flags

MODULES, WORK = %(modules)r, %(work)r
RUN_SCRIPT_FLAGS = ("bert_config_file", "output_dir", "data_dir", "do_train", "truncation",
                    "max_target_length", "input_file")


def call_export(module):
  from engine import run_helpers
  builder = os.path.join(WORK, "builder.py")
  with open(builder, "w") as f:  # Records the spec in the SavedModel's place.
    f.write("import json, os, sys\n"
            "spec = json.loads(sys.argv[1][len('--spec='):])\n"
            "os.makedirs(spec['export_dir'])\n"
            "json.dump(spec, open(os.path.join(spec['export_dir'], 'spec.json'), 'w'))\n")
  module._BUILDER = builder
  model = run_helpers.ModelFiles(
      checkpoint=os.path.join(WORK, "model.ckpt-3"), bert_config_file=%(config)r,
      vocab_file=%(vocab)r, spm_model_file=None, do_lower_case=True, max_seq_length=16)
  module.check_tflite(True, True, "fp32", "truncate")
  specs = {}
  for task in ("classifier", "rewriter"):
    os.makedirs(os.path.join(WORK, task))
  specs["classifier"] = module.export_classifier(
      os.path.join(WORK, "classifier"), model, ["neg", "pos"], text_pairs=False,
      truncation="head", long_text="truncate", doc_stride=0, window_pooling="mean",
      precision="fp32", tflite=True)
  specs["rewriter"] = module.export_rewriter(
      os.path.join(WORK, "rewriter"), model, max_target_length=8, min_target_length=1,
      beam_size=2, length_penalty=1.0, no_repeat_ngram_size=0)
  return {task: json.load(open(os.path.join(path, "spec.json")))
          for task, path in specs.items()}


CALLS = {"serving.saved_model_export": call_export}
results = {}
for name in MODULES:
  path = os.path.join(WORK, name + ".json")
  pid = os.fork()
  if pid == 0:
    try:
      module = importlib.import_module(name)
      called = CALLS[name](module) if name in CALLS else None
      defined = [f for f in RUN_SCRIPT_FLAGS if f in flags.FLAGS]
      result = {"called": called, "run_script_flags": defined}
    except BaseException:  # pylint: disable=broad-except
      result = {"error": traceback.format_exc()}
    with open(path, "w") as f:
      json.dump(result, f)
    os._exit(0)
  os.waitpid(pid, 0)
  results[name] = (json.load(open(path)) if os.path.exists(path)
                   else {"error": "the child wrote nothing"})
print(json.dumps(results))
"""


def test_each_feature_module_imports_and_runs_alone(tmp_path):
  """Each feature module imports in a process of its own (forked once TensorFlow is in) with no
  run script's flags; the export's entry functions build their specs from arguments."""
  config = str(tmp_path / "bert_config.json")
  write_tiny_bert_config(config, vocab_size=21128)
  work = tmp_path / "work"
  work.mkdir()
  modules = sorted(_feature_modules())
  probe = _PROBE % {"root": REPO_ROOT, "modules": modules, "work": str(work),
                    "config": config, "vocab": CHINESE_VOCAB}
  proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                        cwd=str(tmp_path), timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads(proc.stdout.strip().splitlines()[-1])
  assert sorted(results) == modules
  failed = {name: r["error"] for name, r in results.items() if "error" in r}
  assert not failed, "\n".join("%s:\n%s" % item for item in sorted(failed.items()))
  assert not any(r["run_script_flags"] for r in results.values()), results
  specs = results["serving.saved_model_export"]["called"]
  common = {"checkpoint": str(work / "model.ckpt-3"), "bert_config_file": config,
            "vocab_file": os.path.abspath(CHINESE_VOCAB), "do_lower_case": True,
            "max_seq_length": 16, "precision": "fp32"}
  for task in specs:
    assert specs[task].pop("export_dir").startswith(str(work / task / "saved_model.tmp-"))
  assert specs["classifier"] == dict(
      common, task="classifier", labels=["neg", "pos"], truncation="head", text_b=False,
      long_text="truncate", doc_stride=0, window_pooling="mean", tflite=True)
  assert specs["rewriter"] == dict(
      common, task="rewriter", max_target_length=8, min_target_length=1, beam_size=2,
      length_penalty=1.0, no_repeat_ngram_size=0)
