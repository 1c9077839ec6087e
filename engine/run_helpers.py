"""What the run scripts build from the flags and their run_setup.RunSetup: the run's parts.

engine/common_flags.py defines the flags; this module reads them (never writes) and turns them
into what each phase of a run script's main uses: the config and tokenizer, checked against the
checkpoints (`load_config_and_tokenizer`); the run's identity in run_info.json and the check of a
rerun against it (`run_identity`, `check_run_info`); the training schedule and spec
(`epoch_schedule`, `train_spec`); record input functions with the length options
(`record_input_fn`); evaluation during training (`periodic_eval`) and its reuse by the final
--do_eval (`reuse_last_evaluation`); the checkpoint that eval,
predict and export use (`eval_checkpoint`); where predictions and eval results go
(`predict_output`, `write_results`); what an export needs of the model (`model_files`).
"""

import collections
import copy
import os
import sys

from absl import flags
from absl import logging

from core.errors import InputError
from engine import checkpoints
from engine import cli
from engine import common_flags
from engine import input_data
from engine import periodic_eval as periodic_eval_lib
from engine import predict_input
from engine import run_info
from engine import training
import modeling
import tokenization

FLAGS = flags.FLAGS


def length_options(is_training):
  """The input_data.LengthOptions of the length flags (flags checked in check_shared_flags)."""
  if "pad_to_batch_max" not in FLAGS or not FLAGS.pad_to_batch_max:
    return input_data.FIXED_LENGTH
  # Eval and predict always sort by length within windows (outputs come back in input order);
  # training only with --bucket_by_length.
  return input_data.LengthOptions(
      FLAGS.pad_to_multiple_of, FLAGS.bucket_window if FLAGS.bucket_by_length or not is_training
      else 0)


def record_input_fn(record_file, name_to_features, is_training):
  """input_fn(rows, seed, shard) over one TFRecord file, with the run's length options."""
  lengths = length_options(is_training)

  def input_fn(rows, seed, shard):
    return input_data.record_dataset([record_file], name_to_features, rows, is_training,
                                     seed=seed, shard=shard, lengths=lengths)

  return input_fn


def periodic_eval(setup, evaluate_fn):
  """A periodic_eval.PeriodicEval from the flags, or None without --eval_every_n_steps."""
  if not FLAGS.eval_every_n_steps:
    return None
  return periodic_eval_lib.PeriodicEval(evaluate_fn, FLAGS.eval_every_n_steps, FLAGS.best_metric,
                                        setup.output_dir, FLAGS.keep_best,
                                        FLAGS.early_stopping_patience)


def reuse_last_evaluation(evaluate_fn):
  """evaluate_fn(checkpoint) that answers again, from memory, for the checkpoint it was last
  asked about: a run that evaluated its final checkpoint during training (--eval_every_n_steps)
  does not go over the dev set a second time for --do_eval. Each answer is a copy."""
  last = {}

  def evaluate(checkpoint):
    if checkpoint in last:
      logging.info("Evaluation of %s: the one made during training", checkpoint)
    else:
      last.clear()
      last[checkpoint] = evaluate_fn(checkpoint)
    return copy.deepcopy(last[checkpoint])

  return evaluate


def eval_checkpoint(setup):
  """The checkpoint to evaluate, predict and export with: the best (--use_best_checkpoint),
  else the latest of --output_dir, else --init_checkpoint."""
  if "use_best_checkpoint" in FLAGS and FLAGS.use_best_checkpoint:
    return periodic_eval_lib.best_checkpoint(setup.output_dir)
  return checkpoints.find_checkpoint(setup.output_dir, setup.init_checkpoint)


# The model that eval, predict and export read, and how it reads text: what --do_export needs
# of a run (serving/saved_model_export.py takes it as an argument).
ModelFiles = collections.namedtuple("ModelFiles", [
    "checkpoint", "bert_config_file", "vocab_file", "spm_model_file", "do_lower_case",
    "max_seq_length"])


def model_files(setup):
  """The run's ModelFiles: eval_checkpoint's checkpoint, --bert_config_file, --vocab_file,
  --spm_model_file, --do_lower_case and --max_seq_length."""
  return ModelFiles(eval_checkpoint(setup), FLAGS.bert_config_file, FLAGS.vocab_file,
                    FLAGS.spm_model_file, FLAGS.do_lower_case, FLAGS.max_seq_length)


def predict_output(setup):
  """--predict_output, or output_dir/predict.txt."""
  return FLAGS.predict_output or os.path.join(setup.output_dir, "predict.txt")


def predict_output_flag():
  """The flag that chose predict_output's path, for error lines."""
  return "predict_output" if FLAGS.predict_output else "output_dir"


def epoch_schedule(num_examples, global_batch_size):
  """(num_train_steps, num_warmup_steps): --num_train_steps when given, else from
  --num_train_epochs over `num_examples` examples.

  Steps count updates of the effective batch (RunSetup.global_batch_size); at least one.
  """
  num_train_steps = FLAGS.num_train_steps if FLAGS["num_train_steps"].present else 0
  if not num_train_steps:
    num_train_steps = max(1, int(num_examples / global_batch_size * FLAGS.num_train_epochs))
  return num_train_steps, int(num_train_steps * FLAGS.warmup_proportion)


def load_config_and_tokenizer(setup, need_tokenizer=True, special_tokens=("[CLS]", "[SEP]"),
                              max_seq_length=None):
  """Reads --bert_config_file and the vocabulary, checking that they fit together.

  Everything is checked here, before any data is read: the config's types and values, the flag
  values, the vocabulary's size and special tokens, and that --init_checkpoint and the latest
  checkpoint of --output_dir have the config's shapes.

  Args:
    setup: the run_setup.RunSetup (its output_dir and init_checkpoint are checked).
    need_tokenizer: load the vocabulary (False: the config alone).
    special_tokens: tokens the run's inputs are built with; the vocabulary must have them.
    max_seq_length: the run's sequence length (default --max_seq_length; pretraining passes
      what its records hold).

  Returns:
    (bert_config, tokenizer or None, tokenizer_digest): the digest names the vocabulary's bytes
    and casing, for cache keys.

  Raises:
    InputError: a missing file, max_seq_length above max_position_embeddings, a vocabulary whose
      size differs from the config's vocab_size or that lacks a special token, casing that
      contradicts the checkpoint name, or a checkpoint of another shape.
  """

  if not FLAGS.bert_config_file:
    raise InputError("--bert_config_file is required" + _no_training_run(setup))
  bert_config = modeling.BertConfig.from_json_file(FLAGS.bert_config_file)
  max_seq_length = max_seq_length or FLAGS.max_seq_length
  if max_seq_length > bert_config.max_position_embeddings:
    raise InputError(
        "--max_seq_length=%d exceeds max_position_embeddings=%d in %s (BERT has no position "
        "embedding beyond it)" % (max_seq_length, bert_config.max_position_embeddings,
                              FLAGS.bert_config_file))
  if max_seq_length < 3:
    raise InputError("--max_seq_length=%d: expected at least 3" % max_seq_length)
  _check_checkpoints_fit(setup, bert_config)
  if not need_tokenizer:
    return bert_config, None, None
  return (bert_config,) + _load_tokenizer(setup, bert_config, special_tokens)


def _load_tokenizer(setup, bert_config, special_tokens):
  """(tokenizer, digest) of --vocab_file or --spm_model_file, checked against the config, the
  casing of the checkpoint's name and `special_tokens` (see load_config_and_tokenizer)."""
  tokenization.validate_case_matches_checkpoint(FLAGS.do_lower_case, setup.init_checkpoint)
  if FLAGS.spm_model_file:
    cli.require_file(FLAGS.spm_model_file, "spm_model_file")
    vocab_path = FLAGS.spm_model_file
  else:
    if not FLAGS.vocab_file:
      raise InputError("--vocab_file is required" + _no_training_run(setup))
    vocab_path = cli.require_file(FLAGS.vocab_file, "vocab_file")
  tokenizer = tokenization.FullTokenizer(
      vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case,
      spm_model_file=FLAGS.spm_model_file)
  tokenization.require_vocab_size(vocab_path, tokenizer.vocab, bert_config.vocab_size,
                                  FLAGS.bert_config_file)
  tokenization.require_tokens(
      tokenizer.vocab, special_tokens, "--%s=%s" % (
          "spm_model_file" if FLAGS.spm_model_file else "vocab_file", vocab_path),
      "every input is built with %s; is this the model's vocabulary?" %
      ", ".join(special_tokens))
  digest = input_data.cache_key(input_data.file_digest(vocab_path), FLAGS.do_lower_case,
                                bool(FLAGS.spm_model_file))
  return tokenizer, digest


def _no_training_run(setup):
  """The end of the message of a flag that a run which does not train could not take from
  --output_dir's training run: there is none, and what the folder holds instead ("" for a
  training run, or when there is one)."""
  if setup.trains or run_info.read(setup.output_dir):
    return ""
  return (": --output_dir=%s holds no training run to take it from (no %s); the folder %s" %
          (setup.output_dir, run_info.FILE_NAME, checkpoints.describe_folder(setup.output_dir)))


def _check_checkpoints_fit(setup, bert_config):
  """--init_checkpoint and the latest checkpoint of --output_dir must have the config's shapes."""
  checkpoints.check_init_checkpoint(setup.init_checkpoint)
  if setup.init_checkpoint:
    checkpoints.check_checkpoint_fits(setup.init_checkpoint, bert_config,
                                   "--init_checkpoint=%s" % setup.init_checkpoint)
  latest = checkpoints.latest_checkpoint(setup.output_dir)
  if latest:
    checkpoints.check_checkpoint_fits(latest, bert_config,
                                   "--output_dir's latest checkpoint %s" % latest)


# The flags that say how a model reads its input; a training run records them in run_info.json
# and a later run in its output_dir that does not train adopts them (run_setup.from_flags).
MODEL_INPUT_FLAGS = ("bert_config_file", "vocab_file", "spm_model_file", "do_lower_case",
                     "max_seq_length")
_PATH_FLAGS = ("bert_config_file", "vocab_file", "spm_model_file")


def run_identity(bert_config, vocab_digest, input_flags=(), effective=None, **extra):
  """What run_info.json records of this run: the script, config and vocabulary, the model
  input flags (MODEL_INPUT_FLAGS and the script's `input_flags`, e.g. --truncation), the
  MODEL and UPDATE flags (common_flags.training_flags, with `effective` values), plus `extra`."""
  info = {
      "script": os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else None,
      "bert_config": bert_config.to_dict(),
      "vocab": None,
  }
  if vocab_digest:
    info["vocab"] = {"digest": vocab_digest, "do_lower_case": FLAGS.do_lower_case}
    info["vocab_file"] = os.path.abspath(FLAGS.spm_model_file or FLAGS.vocab_file)
  info[run_info.FLAGS_KEY] = {
      name: os.path.abspath(FLAGS[name].value) if name in _PATH_FLAGS and FLAGS[name].value
      else FLAGS[name].value
      for name in MODEL_INPUT_FLAGS + tuple(input_flags) if name in FLAGS}
  info[run_info.TRAINING_FLAGS] = common_flags.training_flags(effective)
  info[_GIVEN] = sorted(name for name in info[run_info.TRAINING_FLAGS]
                        if FLAGS[name].present or name in (effective or {}))
  info.update(extra)
  return info


# run_identity's note of the training flags this run was given (or took from its data), which
# check_run_info compares in a run that does not train; not recorded.
_GIVEN = "_given_flags"


def check_run_info(setup, info, will_train):
  """Checks this run against --output_dir's run_info.json; training runs then record theirs.

  Called once the run's inputs are checked and before any expensive work: a run that does not
  match the model in --output_dir stops here, before it writes anything.
  """
  info = dict(info)
  given = info.pop(_GIVEN, ())
  if will_train:  # A resumed run whose steps count other examples would train too few of them.
    info = dict(info, global_batch_size=setup.global_batch_size)
  has_model = checkpoints.has_checkpoint(setup.output_dir)
  run_info.check(setup.output_dir, info, has_model)
  recorded = (run_info.read(setup.output_dir) or {}).get(run_info.TRAINING_FLAGS)
  if has_model and recorded:
    _check_training_flags(setup.output_dir, recorded, info[run_info.TRAINING_FLAGS],
                          will_train, given)
  if will_train:
    run_info.write(setup.output_dir, info)


def _check_training_flags(output_dir, recorded, now, will_train, given):
  """A run in an output_dir that holds a model, against the MODEL and UPDATE flags its training
  run recorded: a resumed run with another MODEL flag is refused (its checkpoints would mix two
  models or losses: InputError), with another UPDATE flag logged; a run that does not train is
  told (a warning) which of the MODEL flags it was given differ."""
  differ = [name for name in sorted(now) if name in recorded and recorded[name] != now[name]]
  model = [n for n in differ if common_flags.flag_effect(n) == common_flags.MODEL and (will_train or n in given)]
  update = [n for n in differ if common_flags.flag_effect(n) == common_flags.UPDATE and will_train]
  if will_train and model:
    raise InputError(
        "--output_dir=%s holds a model trained with %s (run_info.json); this run would resume "
        "it with %s, which changes the model or its loss. Rerun with the original flags, or "
        "use a new --output_dir (with --init_checkpoint=%s/model.ckpt-<step> to start from "
        "its weights)" % (
            output_dir, _flag_list(model, recorded), _flag_list(model, now), output_dir))
  for name in update:
    logging.warning("Resuming with --%s=%s; the checkpoints so far were trained with --%s=%s "
                    "(run_info.json)", name, _flag_text(now[name]), name,
                    _flag_text(recorded[name]))
  for name in model if not will_train else ():
    logging.warning("--%s=%s, but the model of %s was trained with --%s=%s (run_info.json)",
                    name, _flag_text(now[name]), output_dir, name, _flag_text(recorded[name]))


def _flag_text(value):
  """A flag value as it is written on the command line (booleans in lower case)."""
  return str(value).lower() if isinstance(value, bool) else str(value)


def _flag_list(names, values):
  return ", ".join("--%s=%s" % (name, _flag_text(values[name])) for name in names)


def train_spec(setup, num_train_steps, num_warmup_steps, max_seq_length=None, effective=None,
               head_first_steps=0, init_companions=(), num_examples=None):
  """A training.TrainSpec from the run setup and the shared flags (max_seq_length: see
  load_config_and_tokenizer; effective: see common_flags.training_flags; head_first_steps,
  init_companions and num_examples: see training.TrainSpec).

  Its model_digest names the config, sequence length, casing and the run's identity as
  check_run_info wrote it to setup.output_dir (every process writes its own: vocabulary, task,
  labels, input layout, objective); agreed_flags are the MODEL and UPDATE flags. The processes
  of a run must agree on both (training.train).
  """
  return training.TrainSpec(
      output_dir=setup.output_dir,
      parallel=setup.parallel,
      batch_size_per_tower=FLAGS.train_batch_size,
      num_train_steps=num_train_steps,
      num_warmup_steps=num_warmup_steps,
      learning_rate=FLAGS.learning_rate,
      init_checkpoint=setup.init_checkpoint,
      save_checkpoints_steps=FLAGS.save_checkpoints_steps,
      log_every_n_steps=FLAGS.log_every_n_steps,
      keep_checkpoint_max=FLAGS.keep_checkpoint_max,
      seed=FLAGS.random_seed,
      precision=setup.precision,
      use_xla=FLAGS.use_xla,
      optimizer=FLAGS.optimizer,
      layerwise_lr_decay=FLAGS.layerwise_lr_decay,
      head_first_steps=head_first_steps,
      init_companions=tuple(init_companions),
      num_examples=num_examples,
      model_digest=input_data.cache_key(
          input_data.file_digest(FLAGS.bert_config_file) if FLAGS.bert_config_file else "",
          max_seq_length or FLAGS.max_seq_length, FLAGS.do_lower_case,
          run_info.identity(run_info.read(setup.output_dir) or {})),
      agreed_flags=tuple(common_flags.training_flags(effective).items()))


def write_results(path, results, beside=()):
  """Writes `key = value` lines (sorted by key), the stock eval_results.txt format, and the
  (path, lines) files of `beside` that go with them (predict_input.write_line_files)."""
  logging.info("***** Results (%s) *****", path)
  for key in sorted(results):
    logging.info("  %s = %s", key, results[key])
  predict_input.write_line_files(
      [(path, ["%s = %s" % (key, results[key]) for key in sorted(results)])] + list(beside))
