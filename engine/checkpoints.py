"""Checkpoints of a run: finding the newest intact one, restoring, saving, exporting.

A run's checkpoints are output_dir/model.ckpt-<step> with TensorFlow's `checkpoint` state file.
`tf.train.Saver` writes the data and index files of a checkpoint first and only then rewrites
the state file, itself through a temporary file and a rename, so a run killed mid-save leaves
the previous checkpoint as the latest one. `latest_checkpoint` takes the newest *intact*
checkpoint: one whose files are missing, truncated, fail their checksums or hold non-finite
values is skipped with a warning naming it. `Checkpoints` saves only finite weights.

export/ (`export_model`) holds the model weights only (`bert/`, `cls/`: no Adam slot, no
global_step), bert_config.json and the vocabulary: laid out like Google's releases.
"""

import os
import re
import shutil

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from core import atomic_files
from core.errors import InputError
from engine import cli
from engine import run_info
import modeling
import optimization


def checkpoint_exists(prefix):
  """Whether `prefix` names a TF checkpoint (its .index file exists)."""
  return bool(prefix) and tf.io.gfile.exists(prefix + ".index")


def check_init_checkpoint(init_checkpoint):
  """Raises InputError unless `init_checkpoint` is None or a checkpoint prefix whose files read
  back whole (check_whole); a folder (a run's output_dir, a release, a Hugging Face model) is
  told which checkpoint of it, or which tool, to use, and a file of a checkpoint its prefix."""
  if not init_checkpoint:
    return
  what = "--init_checkpoint=%s" % init_checkpoint
  if checkpoint_exists(init_checkpoint):
    check_whole(init_checkpoint, what)
    return
  if os.path.isdir(init_checkpoint):
    raise InputError("%s: expected a checkpoint prefix, not a folder; the folder %s" %
                     (what, describe_folder(init_checkpoint)))
  prefix = _FILE_SUFFIX.sub("", init_checkpoint)
  if prefix != init_checkpoint and checkpoint_exists(prefix):
    raise InputError("%s: expected the checkpoint's prefix, not one of its files: "
                     "--init_checkpoint=%s" % (what, prefix))
  raise InputError("%s: no checkpoint there (expected %s.index and data files, e.g. "
                   ".../bert_model.ckpt)" % (what, init_checkpoint))


_UNUSED_ENTRY = re.compile(r"^\[unused\d+\]$")


def check_vocab_beside(init_checkpoint, vocab_file):
  """Raises InputError when the vocab.txt beside `init_checkpoint` is not --vocab_file's.

  A checkpoint reads text through the vocabulary it was trained with, and its folder (a Google
  release, a run's export/, scripts/build_domain_vocab.py's output) holds that one as
  vocab.txt. Entries may differ only where that vocab.txt has `[unusedN]` (a vocabulary
  extended by hand into the free slots); any other difference is refused: e.g. a domain vocabulary's export fine-tuned
  with the original vocabulary would read every added word as pieces whose rows were never
  trained for it. Nothing is checked without a vocab.txt beside the checkpoint.
  """
  if not init_checkpoint or not vocab_file:
    return
  beside = os.path.join(os.path.dirname(os.path.abspath(init_checkpoint)), "vocab.txt")
  if not os.path.isfile(beside) or not os.path.isfile(vocab_file) or os.path.samefile(
      beside, vocab_file):
    return
  theirs = [line.strip() for line in open(beside, encoding="utf-8", errors="replace")]
  ours = [line.strip() for line in open(vocab_file, encoding="utf-8", errors="replace")]
  differ = [i for i, (t, o) in enumerate(zip(theirs, ours))
            if t != o and not _UNUSED_ENTRY.match(t)]
  if len(theirs) == len(ours) and not differ:
    return
  where = ("entry %d is %r there, %r here" % (differ[0], theirs[differ[0]], ours[differ[0]])
           if differ else "%d entries there, %d here" % (len(theirs), len(ours)))
  raise InputError("--vocab_file=%s is not the vocabulary of --init_checkpoint=%s (%s; %d "
                   "entries differ): pass --vocab_file=%s" % (vocab_file, init_checkpoint, where,
                                                             len(differ), beside))


# The files of a checkpoint prefix P: P.index, P.data-00000-of-00001, ..., P.meta.
_FILE_SUFFIX = re.compile(r"\.(index|data-\d+-of-\d+|meta)$")


def check_whole(checkpoint, what):
  """Raises InputError, with `what` (e.g. "--init_checkpoint=...") and the file at fault, unless
  every tensor of `checkpoint` reads back whole and finite (_checkpoint_problem)."""
  problem = _checkpoint_problem(checkpoint)
  if problem:
    raise InputError("%s: the checkpoint cannot be used: %s%s" % (
        what, problem, "" if problem.startswith(_NON_FINITE) else
        "; copy it again whole (its .index and .data-* files)"))


# Files of a Hugging Face model folder (transformers' save_pretrained).
_HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "tf_model.h5")


def bert_folder(bert_dir, flag="bert_dir"):
  """(bert_config.json, vocab.txt, checkpoint prefix) of a folder laid out like Google's
  releases; InputError naming --<flag> and the missing file."""
  config = os.path.join(bert_dir, "bert_config.json")
  vocab = os.path.join(bert_dir, "vocab.txt")
  checkpoint = os.path.join(bert_dir, "bert_model.ckpt")
  for path in (vocab, config, checkpoint + ".index"):
    if not os.path.isfile(path):
      raise InputError("--%s=%s: %s is missing (expected bert_config.json, vocab.txt and "
                       "bert_model.ckpt)" % (flag, bert_dir, os.path.basename(path)))
  return config, vocab, checkpoint


def describe_folder(path):
  """What the folder `path` holds, and how to use it, for messages: "is empty", "holds a
  training run of run_classifier_mgpu.py (run_info.json), checkpoints (the latest is ...)",
  "holds a Hugging Face model ...: convert it first with convert_hf_checkpoint.py ...", ..."""
  if not os.path.isdir(path):
    return "does not exist"
  names = sorted(n for n in os.listdir(path) if not n.startswith("."))
  if not names:
    return "is empty"
  release = os.path.join(path, EXPORT_DIR, "bert_model.ckpt")
  if not checkpoint_exists(release):
    release = os.path.join(path, "bert_model.ckpt")
  held = []
  info = run_info.read(path)
  if info:
    held.append("a training run of %s (%s)" % (info.get("script") or "a run script",
                                               run_info.FILE_NAME))
  latest = latest_checkpoint(path)
  if latest:
    held.append("checkpoints (the latest is %s)" % latest)
  if checkpoint_exists(release):
    held.append("the model weights %s (use that as --init_checkpoint, with the "
                "bert_config.json and vocabulary beside it)" % release)
  if held:
    return "holds " + ", ".join(held)
  if "config.json" in names and any(n in names for n in _HF_WEIGHTS):
    return ("holds a Hugging Face model (config.json, %s): convert it first with "
            "convert_hf_checkpoint.py --hf_model_dir=%s --output_dir=<folder>, then use "
            "<folder>/bert_model.ckpt" % (next(n for n in _HF_WEIGHTS if n in names), path))
  if all(os.path.isfile(os.path.join(path, d, "config.json"))
         for d in ("discriminator", "generator")):
    return ("holds a Hugging Face ELECTRA (discriminator/, generator/, as convert_to_hf.py "
            "writes it): convert it with convert_hf_checkpoint.py --hf_model_dir=%s "
            "--hf_generator_dir=%s --output_dir=<folder>" % (
                os.path.join(path, "discriminator"), os.path.join(path, "generator")))
  return "holds no checkpoint and no model: %s%s" % (", ".join(names[:5]),
                                                     ", ..." if len(names) > 5 else "")


def restore_from_init_checkpoint(init_checkpoint, savable_variables, companions=()):
  """Overrides the initializers of graph variables found in `init_checkpoint` (by exact name).

  Args:
    init_checkpoint: checkpoint prefix.
    savable_variables: the stock-named variables of the graph (strategy.savable_variables()).
    companions: ((checkpoint prefix, scope), ...): the variables under each scope are restored
      from that checkpoint instead (e.g. ELECTRA's generator/ from generator/generator.ckpt).

  Raises InputError when a variable's shape differs from the checkpoint's, naming it: that means
  bert_config_file (or the vocab) does not belong to the checkpoint.
  """
  # Model weights only, as in stock BERT: a checkpoint written by a training run also holds
  # global_step and Adam slots, and restoring those would make a new run start at the old step.
  trainable_names = {v.op.name for v in tf.trainable_variables()}
  tvars = [v for v in savable_variables if v.op.name in trainable_names]
  initialized = set()
  sources = [(checkpoint, scope, [v for v in tvars if v.op.name.startswith(scope)])
             for checkpoint, scope in companions]
  taken = {v.op.name for _, _, part in sources for v in part}
  sources.insert(0, (init_checkpoint, "", [v for v in tvars if v.op.name not in taken]))
  for checkpoint, scope, part in sources:
    initialized |= _restore_part(checkpoint, part)
    if scope:
      logging.info("Initialized %s* from %s", scope, checkpoint)
  missing = [v.op.name for v in tvars if v.op.name not in initialized]
  logging.info("Initialized %d of %d trainable variables from %s", len(tvars) - len(missing),
               len(tvars), init_checkpoint)
  for name in missing:
    logging.info("  not in init_checkpoint (trained from scratch): %s", name)
  for line in describe_fresh_variables(missing):
    logging.warning(line)


def _restore_part(checkpoint, variables):
  """Restores `variables` found in `checkpoint` (by exact name); returns the names restored.

  Raises InputError when a variable's shape differs from the checkpoint's, naming it.
  """
  assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(variables, checkpoint)
  ckpt_shapes = dict(tf.train.list_variables(checkpoint))
  by_name = {v.op.name: v for v in variables}
  for name in assignment_map:
    graph_shape = by_name[name].shape.as_list()
    if list(ckpt_shapes[name]) != graph_shape:
      raise InputError(
          "--init_checkpoint=%s: variable %s has shape %s there but %s in the model; does "
          "--bert_config_file belong to this checkpoint?" %
          (checkpoint, name, list(ckpt_shapes[name]), graph_shape))
  tf.train.init_from_checkpoint(checkpoint, assignment_map)
  return set(initialized)


# How the parts a checkpoint may lack start (scope prefix, what the user should know). A released
# BERT carries cls/*; a converted Hugging Face encoder (e.g. all-MiniLM-L6-v2) does not.
FRESH_PARTS = (
    ("cls/predictions/", "the MLM head starts from random init (transform: truncated normal "
     "of stddev initializer_range, LayerNorm gamma 1 and beta 0) and the output bias zero; the "
     "decoder is tied to the word embeddings, so it starts from the checkpoint's"),
    ("cls/seq_relationship/", "the next-sentence head starts from random init"),
    ("generator/", "ELECTRA's generator (encoder, embeddings projection, masked-LM head) starts "
     "from random init; it shares the checkpoint's embeddings"),
    ("discriminator_predictions/", "ELECTRA's replaced-token head starts from random init"),
)


def describe_fresh_variables(missing):
  """One line per part of the model that `init_checkpoint` lacks, saying how it starts.

  Args:
    missing: names of the trainable variables not found in the checkpoint.

  Returns:
    list of str: a line for each FRESH_PARTS scope with missing variables. The rest (e.g. a
    classifier's new output layer, always fresh) are only listed at INFO level by the caller.
  """
  lines = []
  for scope, how in FRESH_PARTS:
    part = [name for name in missing if name.startswith(scope)]
    if part:
      lines.append("%s* not in --init_checkpoint (%d variables): %s" % (scope, len(part), how))
  return lines


CHECKPOINT_NAME = "model.ckpt"


def latest_checkpoint(output_dir):
  """The newest intact checkpoint of output_dir (model.ckpt-<step>), or None.

  Checkpoints are tried newest first, by step. One that cannot be read back whole (a missing or
  truncated file, a checksum error, a non-finite value) is skipped with a warning naming it, so
  a run resumes from, and evaluates, the newest good one.
  """
  if not output_dir or not tf.io.gfile.isdir(output_dir):
    return None
  for prefix in _checkpoints_newest_first(output_dir):
    problem = _checkpoint_problem(prefix)
    if problem is None:
      return prefix
    logging.warning("Checkpoint %s is broken (%s); falling back to the previous one", prefix,
                    problem)
  return None


def has_checkpoint(output_dir):
  """Whether output_dir holds any checkpoint file of a run (intact or not)."""
  return bool(output_dir) and bool(_checkpoints_newest_first(output_dir))


def _step_of(prefix):
  """The step of a checkpoint prefix .../model.ckpt-<step>."""
  return int(prefix.rsplit("-", 1)[1])


def _checkpoints_newest_first(output_dir):
  """Prefixes of output_dir/model.ckpt-<step> (any file of theirs present), highest step first."""
  steps = set()
  pattern = re.compile(re.escape(CHECKPOINT_NAME) + r"-(\d+)\.(index|data-\d+-of-\d+|meta)$")
  for name in tf.io.gfile.listdir(output_dir):
    match = pattern.match(name)
    if match:
      steps.add(int(match.group(1)))
  return [os.path.join(output_dir, "%s-%d" % (CHECKPOINT_NAME, step))
          for step in sorted(steps, reverse=True)]


_INTACT = {}  # prefix -> (size and mtime of its files, problem or None): each is read once.


def _checkpoint_problem(prefix):
  """Why the checkpoint at `prefix` cannot be used (a short string), or None when it is intact."""
  files = sorted(tf.io.gfile.glob(prefix + ".*"))
  stamp = tuple((f, os.path.getsize(f), os.path.getmtime(f)) for f in files
                if os.path.exists(f))
  if _INTACT.get(prefix, (None,))[0] != stamp:
    _INTACT[prefix] = (stamp, _read_back(prefix))
  return _INTACT[prefix][1]


_NON_FINITE = "non-finite values in"


def _read_back(prefix):
  """Reads every tensor of a checkpoint (TensorFlow checks each one's CRC); returns a problem
  that names the file at fault, or None."""
  index = prefix + ".index"
  if not tf.io.gfile.exists(index):
    return "no .index file"
  try:
    reader = tf.train.load_checkpoint(prefix)
  except Exception as e:  # pylint: disable=broad-except  (OpError, ... by damage)
    return "%s is damaged (%s)" % (index, cli.first_line(str(e), 200))
  data = sorted(tf.io.gfile.glob(prefix + ".data-*"))
  if not data and reader.get_variable_to_dtype_map():
    return "its data file is missing (no %s.data-* beside %s)" % (prefix, index)
  data = data[0] if len(data) == 1 else "its data files %s.data-*" % prefix
  for name, dtype in sorted(reader.get_variable_to_dtype_map().items()):
    try:
      value = reader.get_tensor(name)
    except Exception as e:  # pylint: disable=broad-except  (OpError, IndexError, ... by damage)
      text = cli.first_line(str(e), 200)
      how = ("is cut short" if isinstance(e, (IndexError, tf.errors.OutOfRangeError))
             else "is missing a part" if "No such file" in text else "is damaged")
      return "%s %s (reading %s: %s)" % (data, how, name, text)
    if dtype.is_floating and not np.all(np.isfinite(value)):
      return "%s %s" % (_NON_FINITE, name)
  return None


def check_checkpoint_fits(checkpoint, bert_config, what, complete=False,
                          config_source="--bert_config_file"):
  """Raises InputError when `checkpoint`'s BERT variables do not have the shapes of bert_config.

  Args:
    checkpoint: checkpoint prefix (an --init_checkpoint, or the latest of --output_dir).
    bert_config: BertConfig of this run.
    what: names the checkpoint in the message, e.g. "--init_checkpoint=...".
    complete, config_source: see check_shapes_fit.
  """
  try:
    saved = dict(tf.train.list_variables(checkpoint))
  except (tf.errors.OpError, ValueError) as e:
    raise InputError("%s: cannot read the checkpoint (%s)" % (what, cli.first_line(str(e))))
  check_shapes_fit(saved, bert_config, what, complete, config_source)


def check_shapes_fit(saved, bert_config, what, complete=False,
                     config_source="--bert_config_file", scope="bert/"):
  """Raises InputError when the BERT variables of `saved` do not have bert_config's shapes.

  Every field of the config with a tensor shape behind it is checked: vocab_size,
  type_vocab_size, max_position_embeddings (embedding rows), hidden_size, intermediate_size
  (every kernel) and num_hidden_layers (the layers present).

  Args:
    saved: dict variable name -> shape (of a checkpoint, or of tensors about to be written as
      one).
    bert_config: the BertConfig the variables should fit.
    what: names the variables' source in messages.
    complete: every encoder variable must be present (a conversion writes a whole model).
    config_source: names the config in messages ("--bert_config_file", "config.json").
    scope: where the encoder lives: "bert/", or "generator/" for ELECTRA's generator (whose
      embedding tables are the discriminator's, so only its encoder layers are checked).
  """
  for name, shape in modeling.stock_variable_shapes(bert_config):
    name = scope + name[len("bert/"):]
    if name in saved and list(saved[name]) != list(shape):
      raise InputError("%s: variable %s has shape %s there but %s under %s; does %s belong to "
                       "these weights?" % (what, name, list(saved[name]), list(shape),
                                           _config_names(bert_config), config_source))
    if complete and name not in saved:
      raise InputError("%s lacks the variable %s of a BERT with num_hidden_layers=%d; does %s "
                       "belong to these weights?" % (what, name, bert_config.num_hidden_layers,
                                                     config_source))
  layers = {int(m.group(1)) for m in map(re.compile(scope + r"encoder/layer_(\d+)/").match,
                                         saved) if m}
  if layers and max(layers) + 1 != bert_config.num_hidden_layers:
    raise InputError("%s has %d encoder layers but num_hidden_layers=%d in %s; does the config "
                     "belong to these weights?" % (what, max(layers) + 1,
                                                   bert_config.num_hidden_layers, config_source))


def _config_names(bert_config):
  return ("vocab_size=%d, hidden_size=%d, intermediate_size=%d, max_position_embeddings=%d, "
          "type_vocab_size=%d" % (bert_config.vocab_size, bert_config.hidden_size,
                                  bert_config.intermediate_size,
                                  bert_config.max_position_embeddings,
                                  bert_config.type_vocab_size))


def remove_partial_checkpoints(output_dir):
  """Removes what an interrupted or failed save left: TF's *tempstate*, _temp and .tmp files."""
  leftovers = []
  for pattern in ("*tempstate*", CHECKPOINT_NAME + "-*_temp*", CHECKPOINT_NAME + "-*.tmp*",
                  "checkpoint.tmp*"):
    leftovers += tf.io.gfile.glob(os.path.join(output_dir, pattern))
  for path in leftovers:
    logging.info("Removing %s (left by an unfinished checkpoint save)", path)
    if os.path.isdir(path):
      shutil.rmtree(path, ignore_errors=True)
    else:
      atomic_files.remove_quietly(path)


def all_finite(variables):
  """A bool Tensor: whether every value of the floating-point `variables` is finite."""
  checks = [tf.reduce_all(tf.math.is_finite(v)) for v in variables
            if v.dtype.base_dtype.is_floating]
  return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)


def checkpoint_step(checkpoint, missing=0):
  """global_step stored in `checkpoint`; `missing` for None or a checkpoint without one (such as
  Google's releases)."""
  if not checkpoint:
    return missing
  try:
    return int(tf.train.load_variable(checkpoint, "global_step"))
  except (tf.errors.NotFoundError, ValueError):
    return missing


class Checkpoints(object):
  """Restores and saves the run's checkpoints; does nothing in a process that is not the chief.

  `latest` is the newest finite checkpoint of the run (None before the first): what a rerun
  resumes from.
  """

  def __init__(self, saver, output_dir, finite, resume_from):
    self._saver = saver
    self._output_dir = output_dir
    self._prefix = os.path.join(output_dir, CHECKPOINT_NAME)
    self._finite = finite
    self.latest = resume_from if saver else None

  @property
  def is_chief(self):
    """Whether this process saves (the chief of the run)."""
    return self._saver is not None

  @property
  def output_dir(self):
    return self._output_dir

  def restore(self, sess):
    if self.latest:
      logging.info("Resuming from %s", self.latest)
      self._saver.restore(sess, self.latest)
      state = _state_file_latest(self._output_dir)
      if not state or os.path.normpath(state) != os.path.normpath(self.latest):
        # Fell back past a broken checkpoint: stock tools reading the state file agree now.
        tf.train.update_checkpoint_state(self._output_dir, os.path.basename(self.latest))

  def save(self, sess, step):
    """Saves the weights at `step` if they are finite; returns whether it saved (or is no chief)."""
    if not self._saver:
      return True
    if not sess.run(self._finite):
      return False
    try:
      saved = self._saver.save(sess, self._prefix, global_step=step)
    except BaseException as e:
      remove_partial_checkpoints(self._output_dir)
      fault = cli.machine_fault(e) if isinstance(e, (OSError, tf.errors.OpError)) else None
      if fault:
        raise InputError("saving %s-%d: %s; %s" % (self._prefix, step, fault, self.where()))
      raise
    self.latest = saved
    logging.info("Saved %s", self.latest)
    return True

  def set_aside(self, first_unsafe_step, diverged_step):
    """Moves the checkpoints of steps >= first_unsafe_step out of the run (see divergence.py).

    They go to output_dir/diverged-step-<diverged_step>/, and the `checkpoint` state file
    names the newest remaining checkpoint (or is moved too, when none remains), so a rerun
    resumes from a safe checkpoint or starts afresh. Does nothing in a process that is not the
    chief.

    Returns:
      (the newest remaining checkpoint prefix or None, the folder or None, the moved steps).
    """
    if not self._saver:
      return None, None, []
    prefixes = _checkpoints_newest_first(self._output_dir)
    bad = [p for p in prefixes if _step_of(p) >= first_unsafe_step]
    good = [p for p in prefixes if _step_of(p) < first_unsafe_step]
    folder = os.path.join(self._output_dir, "diverged-step-%d" % diverged_step)
    if bad or not good:
      tf.io.gfile.makedirs(folder)
    for prefix in bad:
      for path in tf.io.gfile.glob(prefix + ".*"):
        tf.io.gfile.rename(path, os.path.join(folder, os.path.basename(path)), overwrite=True)
    state = os.path.join(self._output_dir, "checkpoint")
    if good:
      tf.train.update_checkpoint_state(
          self._output_dir, os.path.basename(good[0]),
          all_model_checkpoint_paths=[os.path.basename(p) for p in reversed(good)])
    elif tf.io.gfile.exists(state):
      tf.io.gfile.rename(state, os.path.join(folder, "checkpoint"), overwrite=True)
    self.latest = good[0] if good else None
    return self.latest, folder if (bad or not good) else None, sorted(_step_of(p) for p in bad)

  def where(self):
    """Names the latest checkpoint and its step, for messages."""
    if not self.latest:
      return "no checkpoint was saved"
    return "the latest checkpoint is %s (step %d)" % (self.latest,
                                                       checkpoint_step(self.latest))


def _state_file_latest(output_dir):
  """What output_dir's `checkpoint` state file names as latest (None if it cannot be read)."""
  try:
    return tf.train.latest_checkpoint(output_dir)
  except Exception:  # pylint: disable=broad-except  (a damaged file: OpError, ParseError, ...)
    return None


def find_checkpoint(output_dir, init_checkpoint):
  """The checkpoint to evaluate or predict with: the latest in output_dir, else init_checkpoint."""
  latest = latest_checkpoint(output_dir)
  if latest:
    return latest
  if init_checkpoint:
    check_init_checkpoint(init_checkpoint)
    return init_checkpoint
  raise InputError("no checkpoint to evaluate or predict with: %s has none and "
                   "--init_checkpoint is not set (train first with --do_train)" % output_dir)


def check_checkpoint_has(checkpoint, variables):
  """Raises InputError naming the variables of the model that `checkpoint` lacks."""
  saved = dict(tf.train.list_variables(checkpoint))
  missing = [v.op.name for v in variables if v.op.name not in saved]
  if missing:
    raise InputError(
        "checkpoint %s lacks %d variable(s) of the model, e.g. %s: it was not trained for this "
        "task (train with --do_train first, or point --output_dir at a trained model)" %
        (checkpoint, len(missing), ", ".join(missing[:3])))


EXPORT_DIR = "export"
# In export/ when the model may be worse than it looks (an objective's check after training,
# e.g. ELECTRA at the prior); convert_to_hf.py copies it along.
EXPORT_WARNING = "WARNING.txt"


def export_model(output_dir, bert_config, vocab_file=None, spm_model_file=None,
                 scopes=("bert/", "cls/"), extra_writes=()):
  """Exports the latest checkpoint of output_dir as output_dir/export/, like Google's releases.

  Writes bert_model.ckpt with the model weights only (`scopes`, by default `bert/` and `cls/`;
  no Adam slot, no global_step: fine-tuning from it starts at step 0 with fresh optimizer state),
  bert_config.json, and vocab.txt (or the SentencePiece model). Pass the folder as BERT_DIR to
  the fine-tuning scripts, or export/bert_model.ckpt as --init_checkpoint. The files, with
  `extra_writes` (an objective's more files, atomic_files' (path, write_fn) pairs), replace the
  old ones all together or not at all.

  Returns:
    the exported checkpoint prefix.
  """
  checkpoint = latest_checkpoint(output_dir)
  export_dir = os.path.join(output_dir, EXPORT_DIR)
  prefix = os.path.join(export_dir, "bert_model.ckpt")
  writes = [(prefix, lambda tmp: write_model_weights(checkpoint, tmp, scopes)),
            (os.path.join(export_dir, "bert_config.json"),
             atomic_files.text_writer(bert_config.to_json_string()))]
  if spm_model_file:
    writes.append((os.path.join(export_dir, os.path.basename(spm_model_file)),
                   atomic_files.copy_writer(spm_model_file)))
  elif vocab_file:
    writes.append((os.path.join(export_dir, "vocab.txt"), atomic_files.copy_writer(vocab_file)))
  with cli.writing("output_dir"):
    atomic_files.write_all_atomically(writes + list(extra_writes))
    tf.train.update_checkpoint_state(export_dir, os.path.basename(prefix),
                                    all_model_checkpoint_paths=[os.path.basename(prefix)])
  logging.info("Exported the model weights of %s to %s", checkpoint, prefix)
  return prefix


def write_model_weights(checkpoint, prefix, scopes=("bert/", "cls/"), replace=None):
  """Writes the weights of `checkpoint` under `scopes` (no Adam slot) to `prefix` (its .index and
  .data files; no `checkpoint` state file: the caller names it once the files are in place).

  replace: optional dict name -> numpy array written instead of the checkpoint's value (same
    shape and dtype).

  Returns:
    `prefix`.
  """
  replace = replace or {}
  reader = tf.train.load_checkpoint(checkpoint)
  dtypes = reader.get_variable_to_dtype_map()
  with tf.Graph().as_default():
    variables = {name: tf.get_variable(name, shape, dtypes[name])
                 for name, shape in tf.train.list_variables(checkpoint)
                 if name.startswith(tuple(scopes))
                 and not name.endswith(optimization.SLOT_SUFFIXES)}
    saver = tf.train.Saver(variables)
    with tf.Session() as sess:
      for name, variable in variables.items():
        value = replace[name] if name in replace else reader.get_tensor(name)
        variable.load(value, sess)  # Fed, not baked into the graph as constants.
      saver.save(sess, prefix, write_meta_graph=False, write_state=False)
  logging.info("Wrote the %d model weights of %s", len(variables), checkpoint)
  return prefix
