"""Masked-LM (+ next-sentence) pre-training of BERT on several GPUs (stock flags + --n_gpus).

Continued pretraining of a released checkpoint on your own domain text:

  export CUDA_VISIBLE_DEVICES=0,1
  python create_pretraining_data.py --input_file=domain.txt --output_file=domain.tfrecord \
    --vocab_file=$BERT/vocab.txt --max_seq_length=128 --max_predictions_per_seq=20
  python run_pretraining_mgpu.py --input_file=domain.tfrecord --output_dir=pretrained \
    --bert_config_file=$BERT/bert_config.json --init_checkpoint=$BERT/bert_model.ckpt \
    --do_train --do_eval --train_batch_size=32 --num_train_steps=10000 \
    --num_warmup_steps=1000 --learning_rate=2e-5 --n_gpus=2

The script reads what the records hold and adapts: stock statically masked records train MLM+NSP,
records without `next_sentence_labels` train the masked LM only, and unmasked (dynamic) records
are masked on the fly, differently at every pass (--masking, --masked_lm_prob, --max_ngram).

Outputs in --output_dir: checkpoints (a re-run resumes from the latest), TensorBoard summaries,
export/ after training (bert_model.ckpt with the model weights only, bert_config.json and the
vocabulary, --vocab_file's or the vocab.txt beside --init_checkpoint: start fine-tuning from
export/bert_model.ckpt), eval_results.txt (stock keys) and
predict.txt (each masked position's original and predicted token, one line per eval example, in
input order). --do_eval and --do_predict use --eval_batch_size per tower.

--objective=electra trains replaced-token detection on the same records instead (ELECTRA; see
pretraining/electra_model.py): a small generator samples replacements for the masked tokens and the model
learns, for every token, whether it was replaced; export/ then holds that model (the
discriminator) with stock names, export/generator/ the generator.
"""

from core.errors import InputError
from engine import tf_env  # pylint: disable=unused-import  (first: TensorFlow reads it on import)

import collections
import itertools
import os

from absl import flags
from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from engine import checkpoints
from engine import cli
from engine import common_flags
from engine import inference
from engine import predict_input
from engine import run_helpers
from engine import run_setup
from engine import training
from pretraining import electra
from pretraining import electra_model
from pretraining import masking
from pretraining import mlm
from pretraining import records as pretraining_records
from pretraining import similar_words
from pretraining import word_freq
import tokenization

FLAGS = flags.FLAGS

common_flags.define_model_flags()
common_flags.define_mode_flags()
common_flags.define_training_flags(default_learning_rate=5e-5)
common_flags.define_tpu_flags_removed()

flags.DEFINE_string(
    "input_file", None,
    "Pre-training TFRecord files written by create_pretraining_data.py: a comma-separated list "
    "of files, globs (data/part-*.tfrecord) or directories (every file in them).")
flags.DEFINE_string(
    "eval_input_file", None,
    "Records for --do_eval and --do_predict (same forms as --input_file). Default: "
    "--input_file; hold out a file of your domain text to measure what training gained.")
flags.DEFINE_integer(
    "max_predictions_per_seq", 20,
    "Maximum number of masked LM predictions per sequence. Must match data generation for "
    "statically masked records; for dynamic records, the prediction slots to fill on the fly. "
    "Taken from the records when not given.")
common_flags.define_num_train_steps(100000, "Number of training steps (global batches).")
flags.DEFINE_integer(
    "num_warmup_steps", None,
    "Number of warm-up steps (the learning rate rises linearly to --learning_rate over them). "
    "Default: a tenth of --num_train_steps (stock BERT's 10000 of 100000).")
flags.DEFINE_integer(
    "max_eval_steps", 100,
    "Evaluate (and predict) at most max_eval_steps * eval_batch_size examples, the first ones "
    "of --eval_input_file; 0 reads the whole file. The number does not depend on --n_gpus.")
flags.DEFINE_enum(
    "masking", "token", list(masking.STRATEGIES),
    "Dynamic records only: what to mask on the fly. token: single WordPiece tokens (stock "
    "BERT); whole_word: all pieces of a word together (Chinese words as segmented by "
    "create_pretraining_data.py --chinese_word_segmenter); ngram: spans of 1 to --max_ngram "
    "words, shorter spans likelier (SpanBERT/MacBERT); domain: whole words, those that general "
    "text lacks first (TF-ICF against --general_word_freq), the same mask rate.")
flags.DEFINE_string(
    "general_word_freq", None,
    "Dynamic records, --masking=domain: the general word list, as for "
    "create_pretraining_data.py: 'vocab' (the model's vocabulary, its whole words ranked as "
    "listed), 'jieba' (jieba's dictionary), a word<TAB>count file "
    "(scripts/build_word_freq.py) or a scores file (scripts/build_word_loss.py: the "
    "checkpoint's own masked-LM loss per word); unset: jieba when most letters of the first records are "
    "Chinese, else vocab. Refused when it names under 10% of the records' words, and 'vocab' "
    "for Chinese words.")
flags.DEFINE_float(
    "domain_temperature", word_freq.DEFAULT_TEMPERATURE,
    "Dynamic records, --masking=domain: T > 0 in a word's weight floor + (1 - floor) * s**T "
    "(s: its score against --general_word_freq, 1 for words it lacks).")
flags.DEFINE_float(
    "domain_floor", word_freq.DEFAULT_FLOOR,
    "Dynamic records, --masking=domain: the weight of the most ordinary word, in [0, 1], "
    "against 1 for a word general text lacks.")
flags.DEFINE_integer("max_ngram", 3, "Dynamic records, --masking=ngram: longest span in words.")
flags.DEFINE_float("masked_lm_prob", 0.15,
                   "Dynamic records only: share of the tokens to mask on the fly.")
flags.DEFINE_enum(
    "masking_replacement", "mask", list(masking.REPLACEMENTS),
    "Dynamic records only: what the 80% share of the selected words becomes. mask: [MASK]; "
    "similar: a similar word with the same number of pieces from --similar_words_file, or a "
    "random word (MacBERT's MLM as correction; never the original).")
flags.DEFINE_string(
    "similar_words_file", None,
    "--masking_replacement=similar: word<TAB>neighbour neighbour ... lines "
    "(build_similar_words.py).")
flags.DEFINE_enum(
    "objective", "mlm", ["mlm", "electra"],
    "mlm: BERT's masked LM (+ NSP when the records have it). electra: replaced-token "
    "detection (ELECTRA): a small generator fills the masked positions with sampled tokens and "
    "the model (the discriminator) learns, for every token, whether it was replaced; NSP "
    "labels are ignored. The same records serve both; export/ holds the discriminator as a "
    "stock BERT checkpoint.")
flags.DEFINE_float(
    "generator_hidden_ratio", electra_model.DEFAULT_GENERATOR_HIDDEN_RATIO,
    "--objective=electra: the generator's width as a share of the model's hidden_size (its "
    "depth is the model's, its heads hidden / 64). 0.25 is ELECTRA-small's.")
flags.DEFINE_float(
    "disc_weight", electra_model.DEFAULT_DISC_WEIGHT,
    "--objective=electra: loss = generator masked-LM loss + disc_weight x discriminator loss.")
common_flags.declare_flag_effects(
    common_flags.MODEL, "max_predictions_per_seq", "masking", "max_ngram", "masked_lm_prob",
    "masking_replacement", "objective", "generator_hidden_ratio", "disc_weight",
    "domain_temperature", "domain_floor")
common_flags.declare_flag_effects(common_flags.UPDATE, "num_warmup_steps", "head_first_steps")
common_flags.declare_flag_effects(common_flags.DATA, "input_file", "eval_input_file",
                                  "similar_words_file", "general_word_freq")
common_flags.declare_flag_effects(common_flags.OTHER, "max_eval_steps")


flags.DEFINE_integer(
    "head_first_steps", 0,
    "Updates during which the weights that --init_checkpoint restores stay frozen while what it "
    "lacks (the MLM head of a converted encoder; ELECTRA's generator and replaced-token head) "
    "learns; then everything trains, the learning-rate schedule started again (warm-up over "
    "--num_warmup_steps, decay to 0 at --num_train_steps). A checkpoint with its heads (Google's) "
    "trains as stock whatever this says. 0 (default, measured in docs/pretraining.md): "
    "everything trains from the first update, which taught a converted MiniLM more of the "
    "domain's new words; holding kept its ordinary-word accuracy better.")

def warmup_steps():
  """--num_warmup_steps, by default a tenth of --num_train_steps; a warm-up longer than the run
  (its rate never reaches --learning_rate) is said in the log."""
  if FLAGS.num_warmup_steps is None:
    return FLAGS.num_train_steps // 10
  if FLAGS.num_warmup_steps > FLAGS.num_train_steps:
    logging.warning("--num_warmup_steps=%d > --num_train_steps=%d: the learning rate never "
                    "reaches --learning_rate=%g (it peaks at %.3g at the last step); leave "
                    "--num_warmup_steps out for a tenth of the run", FLAGS.num_warmup_steps,
                    FLAGS.num_train_steps, FLAGS.learning_rate,
                    FLAGS.learning_rate * FLAGS.num_train_steps / FLAGS.num_warmup_steps)
  return FLAGS.num_warmup_steps


def record_format(files, flag_name):
  """What the records in `files` hold, reconciled with the shape flags.

  A shape flag left at its default adopts the records' value; one given explicitly must agree
  with every file. Later code reads the shapes from the returned dict, not from the flags.

  Returns:
    dict(dynamic, has_nsp, max_seq_length, max_predictions_per_seq).

  Raises:
    InputError: files of different formats, or a flag that disagrees with a file (named).
  """
  formats = [(path, pretraining_records.inspect_records(path)) for path in files]
  first_path, first = formats[0]
  for path, fmt in formats[1:]:
    if fmt != first:
      raise InputError("--%s: %s holds %s but %s holds %s; every file must come from the "
                       "same create_pretraining_data.py settings" %
                       (flag_name, first_path, fmt, path, first))
  fmt = dict(first)
  # Dynamic records have no prediction slots of their own: the flag sets how many to fill.
  shape_flags = ["max_seq_length"] + ([] if fmt["dynamic"] else ["max_predictions_per_seq"])
  for name in shape_flags:
    if FLAGS[name].present and getattr(FLAGS, name) != fmt[name]:
      raise InputError("--%s=%d but %s was written with %s=%d (create_pretraining_data.py "
                       "--%s); drop the flag or pass %d" %
                       (name, getattr(FLAGS, name), first_path, name, fmt[name], name,
                        fmt[name]))
  if fmt["dynamic"]:
    fmt["max_predictions_per_seq"] = FLAGS.max_predictions_per_seq
  logging.info("%s: %d file(s), %s", flag_name, len(files), fmt)
  return fmt


def effective_flags(fmt):
  """The MODEL flags whose value the run takes from elsewhere (common_flags.training_flags):
  the records' shapes; None for the masking flags of static records (masked when written) and
  for ELECTRA's flags under --objective=mlm, which change nothing then."""
  values = {name: fmt[name] for name in ("max_seq_length", "max_predictions_per_seq")}
  if not fmt["dynamic"]:
    values.update(dict.fromkeys(("masking", "max_ngram", "masked_lm_prob",
                                 "masking_replacement", "domain_temperature", "domain_floor")))
  if FLAGS.objective != "electra":
    values.update(dict.fromkeys(("generator_hidden_ratio", "disc_weight")))
  return values


def objective_from_flags(bert_config):
  """The --objective (mlm.MaskedLmObjective or electra.ElectraObjective), checked.

  Raises:
    InputError: a bad --generator_hidden_ratio or --disc_weight.
  """
  if FLAGS.objective == "mlm":
    return mlm.MaskedLmObjective(bert_config)
  if not 0.0 < FLAGS.generator_hidden_ratio <= 1.0:
    raise InputError("--generator_hidden_ratio=%s: expected a value in (0, 1]" %
                     FLAGS.generator_hidden_ratio)
  if FLAGS.disc_weight < 0.0:
    raise InputError("--disc_weight=%s: expected a number >= 0" % FLAGS.disc_weight)
  generator_config = None
  companion = electra.companion_generator(FLAGS.init_checkpoint)
  if companion:
    generator_config = companion[1]
    if FLAGS["generator_hidden_ratio"].present:
      raise InputError(
          "--generator_hidden_ratio=%s: --init_checkpoint=%s has its generator beside it "
          "(%s, hidden_size %d), which the run continues; drop the flag" %
          (FLAGS.generator_hidden_ratio, FLAGS.init_checkpoint, companion[0],
           generator_config.hidden_size))
    logging.info("--objective=electra: continuing the generator of %s (hidden_size %d)",
                 companion[0], generator_config.hidden_size)
  return electra.ElectraObjective(
      bert_config, FLAGS.generator_hidden_ratio, FLAGS.disc_weight, eval_seed=FLAGS.random_seed,
      generator_config=generator_config)


def checkpoint_has_nsp_head(checkpoint):
  """Whether `checkpoint` holds cls/seq_relationship (MLM-only checkpoints do not)."""
  names = set(name for name, _ in tf.train.list_variables(checkpoint))
  return "cls/seq_relationship/output_weights" in names


def check_vocab_matches(bert_config, files):
  """Raises InputError when the records hold token ids outside the config's vocabulary, or
  segment ids beyond its type_vocab_size (they would be embedded as zeros, silently).

  Only the first records are read: enough to catch records made with another vocab.
  """
  for record in itertools.islice(tf.io.tf_record_iterator(files[0]), 100):
    feature = tf.train.Example.FromString(record).features.feature
    ids = feature["input_ids"].int64_list.value
    if ids and max(ids) >= bert_config.vocab_size:
      raise InputError(
          "%s holds token id %d but vocab_size=%d in %s: the records were made with another "
          "vocabulary than the model's" % (files[0], max(ids), bert_config.vocab_size,
                                       FLAGS.bert_config_file))
    segments = feature["segment_ids"].int64_list.value
    if segments and max(segments) >= bert_config.type_vocab_size:
      raise InputError(
          "%s holds segment id %d but type_vocab_size=%d in %s: the model has no embedding for "
          "it; use a config with type_vocab_size >= %d (or records made with --no_nsp)" %
          (files[0], max(segments), bert_config.type_vocab_size, FLAGS.bert_config_file,
           max(segments) + 1))


def check_listed_share(masking_config, files):
  """--masking=domain: raises InputError when --general_word_freq names almost none of the
  words of the first records (a list of another language or vocabulary)."""
  if masking_config is None or masking_config.word_weights is None:
    return
  units = []
  for feature in first_records(files):
    ids = np.array(feature["input_ids"].int64_list.value)
    starts, ends, _ = masking.word_boundaries(
        ids, np.array(feature[pretraining_records.WORD_STARTS_FEATURE].int64_list.value),
        masking_config)
    units += [tuple(ids[s:e].tolist()) for s, e in zip(starts, ends)]
  masking_config.word_weights.check_overlap(units, "the first records of %s" % files[0])


def first_records(files, count=100):
  """The features (name -> tf.train.Feature) of the first `count` records of files[0]."""
  for record in itertools.islice(tf.io.tf_record_iterator(files[0]), count):
    yield tf.train.Example.FromString(record).features.feature


def general_word_list(files, tokenizer):
  """--general_word_freq, or when unset the list the records' text calls for
  (word_freq.default_source on the tokens of their first records)."""
  if FLAGS.general_word_freq:
    return FLAGS.general_word_freq
  return word_freq.default_source(
      token for feature in first_records(files)
      for token in tokenizer.convert_ids_to_tokens(list(feature["input_ids"].int64_list.value))
      if not word_freq.is_special_entry(token))


def load_model(setup, fmt, files, will_train=False):
  """The BertConfig, plus the tokenizer and masking config when needed, checked against `fmt`.

  Also checks the run against --output_dir's run_info.json (a training run records its own).

  Returns:
    (bert_config, tokenizer or None, masking.MaskingConfig or None, the --objective's
    objective.Objective: mlm.MaskedLmObjective or electra.ElectraObjective).
  """
  needs_vocab = fmt["dynamic"] or FLAGS.do_predict
  if needs_vocab and not (FLAGS.vocab_file or FLAGS.spm_model_file):
    raise InputError(
        "--vocab_file is required %s (the vocabulary the records were made with)" %
        ("to mask dynamic records on the fly" if fmt["dynamic"] else
         "by --do_predict to print tokens"))
  bert_config, tokenizer, vocab_digest = run_helpers.load_config_and_tokenizer(
      setup, needs_vocab or bool(FLAGS.vocab_file), max_seq_length=fmt["max_seq_length"])
  objective = objective_from_flags(bert_config)
  run_helpers.check_run_info(
      setup, run_helpers.run_identity(bert_config, vocab_digest, effective=effective_flags(fmt),
                                      **objective.run_identity()),
      will_train=will_train)
  masking_config = None
  if fmt["dynamic"]:
    if not FLAGS["masking"].present:
      logging.warning(
          "Dynamic records are masked here, with --masking=%s (the default): the --masking "
          "they were written with is not stored in them; pass --masking=domain (README's "
          "recipe), whole_word or ngram to mask otherwise", FLAGS.masking)
    similar = None
    if FLAGS.masking_replacement == "similar":
      if not FLAGS.similar_words_file:
        raise InputError("--masking_replacement=similar needs --similar_words_file "
                         "(build_similar_words.py makes one)")
      similar = similar_words.load(FLAGS.similar_words_file, tokenizer)
    weights = None
    if FLAGS.masking == "domain":
      weights = word_freq.load(general_word_list(files, tokenizer), tokenizer,
                               FLAGS.domain_temperature, FLAGS.domain_floor)
      logging.info("--masking=domain: %s", weights.describe())
    masking_config = masking.MaskingConfig.from_vocab(
        tokenizer.vocab, source="--vocab_file=%s" % (FLAGS.vocab_file or FLAGS.spm_model_file),
        strategy=FLAGS.masking, masked_lm_prob=FLAGS.masked_lm_prob,
        max_predictions_per_seq=fmt["max_predictions_per_seq"], max_ngram=FLAGS.max_ngram,
        replacement=FLAGS.masking_replacement, similar_words=similar, word_weights=weights)
  return bert_config, tokenizer, masking_config, objective


def check_trained(setup, objective, files, fmt, masking_config):
  """Scores the trained model on the first examples of `files` (at most
  objective.diagnostic_examples) and hands the metrics to objective.check_trained, which warns
  (in the log and in export/) when, e.g., ELECTRA's discriminator sits at the prior."""
  checkpoint = checkpoints.latest_checkpoint(setup.output_dir)
  outputs = inference.run_inference(
      objective.tower_fn_builder(False, is_training=False),
      pretraining_records.input_fn_builder(files, fmt, False, masking_config,
                                       objective.diagnostic_examples),
      checkpoint, setup.inference_parallel(), FLAGS.eval_batch_size)
  source = "the first %d training examples (step %d)" % (
      objective.example_count(outputs), checkpoints.checkpoint_step(checkpoint))
  objective.check_trained(objective.evaluation_metrics(outputs), setup.output_dir, source)


def check_modes():
  """At least one mode, and the records it reads (InputError)."""
  if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
    raise InputError("at least one of --do_train, --do_eval or --do_predict must be set")
  if not FLAGS.input_file and (FLAGS.do_train or not FLAGS.eval_input_file):
    raise InputError("--input_file is required")


def eval_input():
  """(files, flag name) of --do_eval and --do_predict: --eval_input_file, else --input_file;
  (None, None) without them. Checked before training, read after it."""
  if not (FLAGS.do_eval or FLAGS.do_predict):
    return None, None
  eval_flag = "eval_input_file" if FLAGS.eval_input_file else "input_file"
  return cli.expand_files(getattr(FLAGS, eval_flag), eval_flag), eval_flag


# The training records and what reads them: their files and format (record_format), the model
# config, the masking config (dynamic records), the --objective, and the vocabulary export/ gets
# (export_vocabulary).
TrainingData = collections.namedtuple("TrainingData", ["files", "fmt", "bert_config",
                                                   "masking_config", "objective",
                                                   "vocabulary"])


def export_vocabulary(setup, bert_config):
  """(vocab_file, spm_model_file) that export/ gets beside the weights: the flags', else the
  vocab.txt beside --init_checkpoint when it has the config's vocab_size (a Google release and
  convert_hf_checkpoint.py's folder keep it there; the records hold ids, so the README's run
  passes no --vocab_file), else (None, None), with a warning: export/ then has no vocabulary."""
  if FLAGS.vocab_file or FLAGS.spm_model_file:
    return FLAGS.vocab_file, FLAGS.spm_model_file
  beside = (os.path.join(os.path.dirname(setup.init_checkpoint), "vocab.txt")
            if setup.init_checkpoint else None)
  if beside and os.path.isfile(beside):
    size = len(tokenization.load_vocab(beside))
    if size == bert_config.vocab_size:
      logging.info("export/ gets %s, the vocabulary beside --init_checkpoint (pass --vocab_file "
                   "for another)", beside)
      return beside, None
    logging.warning("%s, beside --init_checkpoint, has %d entries but vocab_size=%d: not copied",
                    beside, size, bert_config.vocab_size)
  logging.warning("export/ will hold no vocabulary: pass --vocab_file (the vocabulary the records "
                  "were made with) to put vocab.txt beside the exported weights, as fine-tuning "
                  "from export/ needs it")
  return None, None


def read_training_data(setup):
  """The TrainingData of --input_file, checked against the flags, the model and --output_dir
  (load_model) before any training."""
  train_files = cli.expand_files(FLAGS.input_file, "input_file")
  fmt = record_format(train_files, "input_file")
  bert_config, _, masking_config, objective = load_model(setup, fmt, train_files,
                                                         will_train=True)
  check_vocab_matches(bert_config, train_files)
  check_listed_share(masking_config, train_files)
  vocabulary = export_vocabulary(setup, bert_config) if setup.is_chief else (None, None)
  return TrainingData(train_files, fmt, bert_config, masking_config, objective, vocabulary)


def train(setup, data):
  """Trains data.objective on the training records (training.train)."""
  objective, fmt = data.objective, data.fmt
  training.train(objective.tower_fn_builder(fmt["has_nsp"] and objective.uses_nsp,
                                        is_training=True),
                 pretraining_records.input_fn_builder(data.files, fmt, True,
                                                  data.masking_config),
                 run_helpers.train_spec(
                     setup, FLAGS.num_train_steps, warmup_steps(),
                     max_seq_length=fmt["max_seq_length"], effective=effective_flags(fmt),
                     head_first_steps=FLAGS.head_first_steps,
                     init_companions=objective.init_companions(setup.init_checkpoint)))


def export(setup, data):
  """export/ after training (the model weights only, the config and the vocabulary), then the
  objective's check of the trained model when it has one."""
  objective = data.objective
  checkpoints.export_model(setup.output_dir, data.bert_config, *data.vocabulary,
                       scopes=objective.export_scopes,
                       extra_writes=objective.export_writes(setup.output_dir))
  if objective.diagnose_after_training:
    check_trained(setup, objective, data.files, data.fmt, data.masking_config)


# The model's outputs on the eval records, with what evaluate and predict read them with.
Scored = collections.namedtuple("Scored", ["outputs", "checkpoint", "objective", "tokenizer"])


def score(setup, files, flag_name):
  """Runs the latest checkpoint (else --init_checkpoint) on the first --max_eval_steps *
  --eval_batch_size examples of `files`; returns a Scored."""
  fmt = record_format(files, flag_name)
  bert_config, tokenizer, masking_config, objective = load_model(setup, fmt, files)
  check_vocab_matches(bert_config, files)
  checkpoint = checkpoints.find_checkpoint(setup.output_dir, setup.init_checkpoint)
  has_nsp = fmt["has_nsp"] and objective.uses_nsp and checkpoint_has_nsp_head(checkpoint)
  if fmt["has_nsp"] and objective.uses_nsp and not has_nsp:
    logging.warning("%s has no next-sentence head: evaluating the masked LM only", checkpoint)
  max_examples = max(FLAGS.max_eval_steps, 0) * FLAGS.eval_batch_size
  outputs = inference.run_inference(
      objective.tower_fn_builder(has_nsp, is_training=False),
      pretraining_records.input_fn_builder(files, fmt, False, masking_config, max_examples),
      checkpoint, setup.inference_parallel(), FLAGS.eval_batch_size)
  logging.info("Ran %s on %d examples of --%s", checkpoint, objective.example_count(outputs),
               flag_name)
  return Scored(outputs, checkpoint, objective, tokenizer)


def evaluate(setup, scored, eval_flag):
  """Writes eval_results.txt: the objective's metrics of the scored examples (read from
  --`eval_flag`)."""
  results = scored.objective.evaluation_metrics(scored.outputs)
  results["global_step"] = checkpoints.checkpoint_step(scored.checkpoint)
  run_helpers.write_results(os.path.join(setup.output_dir, "eval_results.txt"), results)
  if "warning" in results:
    logging.warning("eval_results.txt: %s", results["warning"])
  if FLAGS.do_train and eval_flag == "input_file":
    logging.warning("eval_results.txt scores the records this run trained on (--input_file): "
                    "not a held-out figure; --eval_input_file=records of text kept out of "
                    "training gives one")


def predict(setup, scored):
  """Writes predict.txt: the objective's lines of each scored example."""
  predict_input.write_lines(os.path.join(setup.output_dir, "predict.txt"), list(
      scored.objective.prediction_lines(scored.outputs, scored.tokenizer.inv_vocab)))


def main(_):
  """Check, data, train (and export/), evaluate, predict; each process does its part."""
  setup = run_setup.start(check_modes, trains=FLAGS.do_train)
  if setup is None:  # It served the chief's graph, or has no part in this run.
    return
  eval_files, eval_flag = eval_input()
  if FLAGS.do_train:
    data = read_training_data(setup)
    train(setup, data)
  if not setup.is_chief:  # The chief exports, evaluates and predicts.
    return
  if FLAGS.do_train:
    export(setup, data)
  if FLAGS.do_eval or FLAGS.do_predict:
    scored = score(setup, eval_files, eval_flag)
    if FLAGS.do_eval:
      evaluate(setup, scored, eval_flag)
    if FLAGS.do_predict:
      predict(setup, scored)


if __name__ == "__main__":
  tf.disable_v2_behavior()
  cli.run_main(main)
