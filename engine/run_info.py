"""What produced a run directory: output_dir/run_info.json, checked before a run reuses it.

The chief of a training run writes run_info.json once its inputs are checked and before any
expensive work: the script, the model config, the vocabulary (digest and casing) and, for the
classifier, the task and label list, with a format version. A later run in the same --output_dir
that holds a checkpoint (to resume, evaluate or predict) must have the same ones; a difference
is a one-line error naming it, instead of a model silently fed other ids or labels.
"""

import json
import os

from core import atomic_files
from core import json_files
from core.errors import InputError

FILE_NAME = "run_info.json"
FORMAT_VERSION = 1
# The divergences of the runs in output_dir (engine/divergence.py), oldest first.
DIVERGENCES = "divergences"
# The learning-rate schedule of the latest training run: num_train_steps, num_warmup_steps,
# learning_rate (training.train reads it to tell a resumed run that its schedule changed).
SCHEDULE = "schedule"
# What a rewrite of run_info.json keeps from the file it replaces.
_KEPT = (DIVERGENCES, SCHEDULE)
# Each key's name in messages, and what to rerun with to match it.
_KEY_NAMES = {
    "format_version": ("run_info format", "version of bert-mgpu"),
    "script": ("script", "script"),
    "bert_config": ("model config", "--bert_config_file"),
    "vocab": ("vocabulary", "--vocab_file/--spm_model_file and --do_lower_case"),
    "task": ("task", "--task_name"),
    "labels": ("label set", "labels in train.tsv"),
    "input_layout": ("input layout", "files of that layout (one text per row, or text_a and "
                     "text_b)"),
    "global_batch_size": ("global batch (so its steps count other examples)",
                          "--train_batch_size, --n_gpus, --grad_accum_steps and number of "
                          "processes (or --num_train_steps for a fixed count)"),
}
# The flags of the training run that a later run in the same output_dir which does not train
# (eval, predict, --predict_file, export) takes when it is not given them: a dict flag -> value.
FLAGS_KEY = "flags"
# The MODEL and UPDATE flags of the training run (common_flags.training_flags): a dict flag ->
# value, compared by run_helpers.check_run_info (a resume may not change a MODEL flag).
TRAINING_FLAGS = "training_flags"
# Recorded for the reader, not compared here: the same vocabulary may move to another path; the
# recorded flags are defaults of later runs, which may change them.
_NOT_COMPARED = ("vocab_file", FLAGS_KEY, TRAINING_FLAGS)


def identity(info):
  """The part of a run_info dict that names the model (what check compares): no paths, flag
  defaults, schedule or divergences."""
  return {key: value for key, value in sorted(info.items())
          if key not in _NOT_COMPARED + _KEPT}


def record_divergence(output_dir, record):
  """Appends `record` (a dict: step, onset, resume_from, moved_to, ...) to run_info.json's
  list of divergences (a run without run_info.json gets one holding only that list)."""
  info = dict(read(output_dir) or {})
  info[DIVERGENCES] = list(info.get(DIVERGENCES) or []) + [record]
  write(output_dir, info)


def record(output_dir, key, value):
  """Sets one key of run_info.json (e.g. SCHEDULE), keeping the rest."""
  info = dict(read(output_dir) or {})
  info[key] = value
  write(output_dir, info)


def read(output_dir):
  """The run_info dict of output_dir, or None when it has none."""
  path = os.path.join(output_dir, FILE_NAME)
  if not os.path.isfile(path):
    return None
  advice = "delete it to adopt the run as it is now"
  info = json_files.read_object(path, _TYPES, advice=advice)
  schedule = info.get(SCHEDULE) or {}
  for name, expected in sorted(_SCHEDULE_TYPES.items()):
    problem = json_files.type_problem("%s.%s" % (SCHEDULE, name), schedule.get(name), expected)
    if problem:
      raise InputError("%s: %s; %s" % (path, problem, advice))
  return info


# The JSON type of each value that readers of run_info.json rely on (null: not recorded). Other
# keys are kept as they are; the flags' values are checked against each flag where a run adopts
# them (run_setup).
_TYPES = {
    "script": str, "vocab_file": str, "task": str, "input_layout": str, "objective": str,
    "format_version": int, "global_batch_size": int, "labels": list, DIVERGENCES: list,
    "bert_config": dict, "generator_config": dict, "vocab": dict, FLAGS_KEY: dict,
    TRAINING_FLAGS: dict, SCHEDULE: dict, "head_first": dict,
}
_SCHEDULE_TYPES = {"num_train_steps": int, "num_warmup_steps": int, "head_first_steps": int,
                   "learning_rate": float}


def check(output_dir, info, has_model, flag="output_dir", otherwise="use a new --output_dir"):
  """Raises InputError when output_dir's model was produced by other inputs than `info`.

  Args:
    output_dir: the run directory.
    info: dict of this run's identity (see the module docstring); None values are unknown and
      not compared.
    has_model: whether output_dir holds a checkpoint; without one nothing is compared (a failed
      first run may be rerun with other inputs).
    flag: the flag that named output_dir (e.g. checkpoint for convert_to_hf.py).
    otherwise: the other way out, ending the message.
  """
  if not has_model:
    return
  recorded = read(output_dir)
  if recorded is None:
    return
  info = dict(info, format_version=FORMAT_VERSION)
  for key in sorted(info):
    old, new = recorded.get(key), info[key]
    if key in _NOT_COMPARED or old is None or new is None or old == new:
      continue
    noun, fix = _KEY_NAMES.get(key, (key, key))
    was, now = _describe(old, new)
    if key == "vocab" and recorded.get("vocab_file"):
      was += " from %s" % recorded["vocab_file"]
    raise InputError("--%s=%s holds a model made with a different %s: %s there (%s), %s "
                     "in this run. Rerun with the original %s, or %s" %
                     (flag, output_dir, noun, was, FILE_NAME, now, fix, otherwise))


def _describe(old, new):
  """Short descriptions of two differing values (of dicts, only the differing keys)."""
  if isinstance(old, dict) and isinstance(new, dict):
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return (", ".join("%s=%s" % (k, json.dumps(old.get(k))) for k in keys),
            ", ".join("%s=%s" % (k, json.dumps(new.get(k))) for k in keys))
  return json.dumps(old, ensure_ascii=False), json.dumps(new, ensure_ascii=False)


def write(output_dir, info):
  """Writes run_info.json (atomically) with `info` and the format version; the divergences
  recorded by earlier runs in output_dir are kept."""
  info = dict(info, format_version=FORMAT_VERSION)
  recorded = read(output_dir) or {}
  for key in _KEPT:
    if recorded.get(key):
      info.setdefault(key, recorded[key])
  atomic_files.write_text(os.path.join(output_dir, FILE_NAME),
                          json.dumps(info, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
