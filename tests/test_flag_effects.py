"""Every flag says what it changes, and every flag that changes the model or its loss is compared.

engine/common_flags.py declares each flag's effect (MODEL, UPDATE, PARALLEL, DATA, OTHER); the
processes of a run compare every MODEL and UPDATE flag in their handshake, a resumed run is
checked against the ones its training run recorded. A flag without a declared effect, or a
MODEL/UPDATE flag that the handshake does not compare, fails here; so does a process or a
resume that differs in one.
"""

import json
import os
import subprocess
import sys

import pytest

from engine import common_flags
from script_runner import CHINESE_VOCAB, REPO_ROOT, assert_one_line_error, run_script, \
    write_tiny_bert_config
from test_classifier import _make_task

# Run in a fresh process per script (two run scripts cannot define their flags in one): import
# the script, list the project's flags with their effects, and build the spec of a training run
# to read what its handshake compares.
_PROBE = r"""
import json, os, sys, tempfile
sys.argv = [os.path.join(%(root)r, %(script)r)]
import %(module)s
from absl import flags
from engine import common_flags, run_helpers, run_setup, training
import tower_utils

FLAGS = flags.FLAGS
FLAGS(sys.argv)
project = {name for module, module_flags in FLAGS.flags_by_module_dict().items()
           if not module.startswith(("absl", "tensorflow")) for name in
           (f.name for f in module_flags)}
setup = run_setup.RunSetup(parallel=tower_utils.parallel_spec(1), output_dir=tempfile.mkdtemp(),
                           init_checkpoint=None, precision="fp32", batch_size_per_tower=4)
spec = run_helpers.train_spec(setup, 10, 1)
print(json.dumps({"effects": {name: common_flags.flag_effect(name) for name in project},
                  "compared": list(training._must_agree(spec))}))
"""


@pytest.mark.parametrize("script", ["run_classifier_mgpu.py", "run_rewrite_finetune.py",
                                    "run_pretraining_mgpu.py"])
def test_every_flag_has_an_effect_and_the_processes_compare_every_model_flag(script):
  env = dict(os.environ, PYTHONPATH=REPO_ROOT, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
  proc = subprocess.run([sys.executable, "-c", _PROBE % {
      "root": REPO_ROOT, "script": script, "module": script[:-3]}], cwd=REPO_ROOT, env=env,
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  probe = json.loads(proc.stdout.strip().splitlines()[-1])
  effects = probe["effects"]
  assert len(effects) > 40
  undeclared = sorted(name for name, effect in effects.items() if effect is None)
  assert not undeclared, ("declare what these flags change (common_flags.declare_flag_effects)",
                          undeclared)
  model_flags = sorted(name for name, effect in effects.items()
                       if effect in (common_flags.MODEL, common_flags.UPDATE))
  assert {"max_seq_length", "learning_rate", "do_lower_case"} <= set(model_flags)
  missing = [name for name in model_flags if "--" + name not in probe["compared"]]
  assert not missing, ("the processes of a run do not compare", missing)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
  root = tmp_path_factory.mktemp("effects")
  return _make_task(root / "data"), write_tiny_bert_config(root / "bert_config.json", 21128)


def _args(task, out, *extra):
  data_dir, config = task
  return ["--task_name=tsv", "--data_dir=%s" % data_dir, "--vocab_file=%s" % CHINESE_VOCAB,
          "--bert_config_file=%s" % config, "--output_dir=%s" % out, "--max_seq_length=16",
          "--train_batch_size=4", "--learning_rate=2e-3"] + list(extra)


def test_a_resume_may_not_change_a_model_flag_and_other_runs_say_what_differs(task, tmp_path):
  """Resuming with another --truncation or --class_weights is refused, naming both values;
  another learning rate is logged; an evaluation at another --max_seq_length says so."""
  out = str(tmp_path / "out")
  proc = run_script("run_classifier_mgpu.py", *_args(task, out, "--do_train",
                                                     "--num_train_steps=2"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(os.path.join(out, "run_info.json")) as f:
    recorded = json.load(f)["training_flags"]
  assert recorded["truncation"] == "head" and recorded["class_weights"] == "none"
  proc = run_script("run_classifier_mgpu.py", *_args(task, out, "--do_train",
                                                     "--num_train_steps=4",
                                                     "--truncation=tail",
                                                     "--class_weights=balanced"))
  assert_one_line_error(proc, "trained with --class_weights=none, --truncation=head",
                        "resume it with --class_weights=balanced, --truncation=tail",
                        "use a new --output_dir")
  assert os.path.exists(os.path.join(out, "model.ckpt-2.index"))
  assert not os.path.exists(os.path.join(out, "model.ckpt-4.index"))
  proc = run_script("run_classifier_mgpu.py", *_args(task, out, "--do_train",
                                                     "--num_train_steps=4",
                                                     "--learning_rate=1e-3"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert ("Resuming with --learning_rate=0.001; the checkpoints so far were trained with "
          "--learning_rate=0.002") in proc.stderr
  data_dir, _ = task
  proc = run_script("run_classifier_mgpu.py", "--output_dir=%s" % out, "--do_eval",
                    "--data_dir=%s" % data_dir, "--max_seq_length=12")
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert ("--max_seq_length=12, but the model of %s was trained with --max_seq_length=16" %
          out) in proc.stderr
