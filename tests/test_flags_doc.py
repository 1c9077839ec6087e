"""docs/flags.md has a row for every flag bert-mgpu adds to stock BERT's, and names no other.

The flags are read in this process: each script file is executed as a module of its own while
absl's FLAGS is swapped for an empty one (own_flags), so scripts whose flags share a name (the
classifier's and the rewriter's --data_dir) each define theirs, and none stays defined after.
"""

import contextlib
import importlib.util
import os
import re
import sys

from absl import flags

from script_runner import REPO_ROOT

# The flags of stock google-research/bert's run_classifier.py, run_pretraining.py and
# create_pretraining_data.py: they keep their names and need no row.
STOCK_FLAGS = {
    "bert_config_file", "vocab_file", "output_dir", "init_checkpoint", "do_lower_case",
    "max_seq_length", "do_train", "do_eval", "do_predict", "train_batch_size", "eval_batch_size",
    "predict_batch_size", "learning_rate", "num_train_epochs", "warmup_proportion",
    "save_checkpoints_steps", "iterations_per_loop", "use_tpu", "tpu_name", "tpu_zone",
    "gcp_project", "master", "num_tpu_cores", "data_dir", "task_name",  # run_classifier.py
    "input_file", "max_predictions_per_seq", "num_train_steps", "num_warmup_steps",
    "max_eval_steps",  # run_pretraining.py
    "output_file", "do_whole_word_mask", "random_seed", "dupe_factor", "masked_lm_prob",
    "short_seq_prob",  # create_pretraining_data.py
}
SCRIPTS = ("run_classifier_mgpu.py", "run_pretraining_mgpu.py", "run_rewrite_finetune.py",
           "create_pretraining_data.py")


@contextlib.contextmanager
def own_flags():
  """absl's FLAGS, empty for the block and restored after it: a script file executed inside
  (load_script) defines its flags as in a process of its own, and leaves none behind.

  The block must not import a root script by its name for the first time (its flags are
  defined on import): they would go with the block, and the module stay cached.
  """
  saved = dict(flags.FLAGS.__dict__)
  before = set(sys.modules)
  flags.FLAGS.__dict__.update(flags.FlagValues().__dict__)
  try:
    yield flags.FLAGS
  finally:
    defined_by = set(flags.FLAGS.flags_by_module_dict())
    flags.FLAGS.__dict__.clear()
    flags.FLAGS.__dict__.update(saved)
  # The packages define flags in functions, called again; a root script on its import only.
  cached = sorted(m for m in defined_by & (set(sys.modules) - before) if "." not in m)
  assert not cached, ("import these before own_flags: their flags are gone", cached)


def load_script(path):
  """Executes the script file `path` as a new module (not put in sys.modules); returns it."""
  name = "_flags_of_" + os.path.basename(path)[:-3]
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def script_flags(script):
  """{flag name: help} of every flag `script` (a file in the repo root) takes."""
  with own_flags() as fv:
    module = load_script(os.path.join(REPO_ROOT, script))
    if script == "create_pretraining_data.py":  # Defines its flags in main.
      module.define_flags()
    return {name: fv[name].help for name in fv}


def documented_flags():
  """The flags named in the first column of docs/flags.md's table rows."""
  with open(os.path.join(REPO_ROOT, "docs", "flags.md"), encoding="utf-8") as f:
    rows = [line.split(" | ")[0] for line in f if line.startswith("| `--")]
  return {name for row in rows for name in re.findall(r"`--(\w+)`", row)}


def test_every_added_flag_has_a_row_in_docs_flags_md_and_every_row_a_flag():
  taken = {}
  for script in SCRIPTS:
    taken.update(script_flags(script))
  assert {"n_gpus", "learning_rate", "masking", "beam_size"} <= set(taken)
  documented = documented_flags()
  undocumented = sorted(set(taken) - STOCK_FLAGS - documented)
  assert not undocumented, ("add a row to docs/flags.md for", undocumented)
  unknown = sorted(documented - set(taken))
  assert not unknown, ("docs/flags.md names flags no script takes", unknown)
  # Nothing stays defined: the rewriter's flags are gone (unless imported by its name).
  assert "pretrain_dupe_factor" not in flags.FLAGS or "run_rewrite_finetune" in sys.modules
