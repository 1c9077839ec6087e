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
vocabulary: start fine-tuning from export/bert_model.ckpt), eval_results.txt (stock keys) and
predict.txt (each masked position's original and predicted token, one line per eval example, in
input order). --do_eval and --do_predict use --eval_batch_size per tower.

--objective=electra trains replaced-token detection on the same records instead (ELECTRA; see
pretraining/electra_model.py): a small generator samples replacements for the masked tokens and the model
learns, for every token, whether it was replaced; export/ then holds that model (the
discriminator) with stock names, export/generator/ the generator.
"""

from engine import tf_env  # pylint: disable=unused-import  (first: TensorFlow reads it on import)

import itertools
import os

from absl import flags
from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from engine import cli
from engine import common_flags
from engine import input_pipeline
from engine import training
from heads import pretraining as pretraining_model
import modeling
from pretraining import electra as electra_pretraining
from pretraining import electra_model
from pretraining import masking
from pretraining import records as pretraining_records
from pretraining import similar_words

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
flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warm-up steps.")
flags.DEFINE_integer(
    "max_eval_steps", 100,
    "Evaluate (and predict) at most max_eval_steps * eval_batch_size examples, the first ones "
    "of --eval_input_file; 0 reads the whole file. The number does not depend on --n_gpus.")
flags.DEFINE_enum(
    "masking", "token", list(masking.STRATEGIES),
    "Dynamic records only: what to mask on the fly. token: single WordPiece tokens (stock "
    "BERT); whole_word: all pieces of a word together (Chinese words as segmented by "
    "create_pretraining_data.py --chinese_word_segmenter); ngram: spans of 1 to --max_ngram "
    "words, shorter spans likelier (SpanBERT/MacBERT).")
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

def resolve_input_files(spec, flag_name):
  """The files named by a comma-separated list of paths, globs and directories.

  Returns:
    sorted list of file paths, without duplicates.

  Raises:
    InputError: when nothing matches, naming the flag and its value.
  """
  files = set()
  for part in (spec or "").split(","):
    part = part.strip()
    if not part:
      continue
    if tf.io.gfile.isdir(part):
      # Hidden files and sub-directories (e.g. checkpoints beside the data) are not records.
      files.update(os.path.join(part, name) for name in tf.io.gfile.listdir(part)
                   if not name.startswith(".")
                   and not tf.io.gfile.isdir(os.path.join(part, name)))
    else:
      files.update(tf.io.gfile.glob(part))
  if not files:
    raise cli.InputError("--%s=%s: no files match" % (flag_name, spec))
  return sorted(files)


def record_format(files, flag_name):
  """What the records in `files` hold, reconciled with the shape flags.

  A shape flag left at its default adopts the records' value (FLAGS is updated, so every later
  check sees it); one given explicitly must agree with every file.

  Returns:
    dict(dynamic, has_nsp, max_seq_length, max_predictions_per_seq).

  Raises:
    InputError: files of different formats, or a flag that disagrees with a file (named).
  """
  formats = [(path, pretraining_records.inspect_records(path)) for path in files]
  first_path, first = formats[0]
  for path, fmt in formats[1:]:
    if fmt != first:
      raise cli.InputError("--%s: %s holds %s but %s holds %s; every file must come from the "
                           "same create_pretraining_data.py settings" %
                           (flag_name, first_path, fmt, path, first))
  fmt = dict(first)
  # Dynamic records have no prediction slots of their own: the flag sets how many to fill.
  shape_flags = ["max_seq_length"] + ([] if fmt["dynamic"] else ["max_predictions_per_seq"])
  for name in shape_flags:
    if FLAGS[name].present and getattr(FLAGS, name) != fmt[name]:
      raise cli.InputError("--%s=%d but %s was written with %s=%d (create_pretraining_data.py "
                           "--%s); drop the flag or pass %d" %
                           (name, getattr(FLAGS, name), first_path, name, fmt[name], name,
                            fmt[name]))
    setattr(FLAGS, name, fmt[name])
  fmt["max_predictions_per_seq"] = FLAGS.max_predictions_per_seq
  logging.info("%s: %d file(s), %s", flag_name, len(files), fmt)
  return fmt


def input_fn_builder(input_files, fmt, is_training, masking_config=None, max_examples=0):
  """input_fn(rows, seed, shard) for training.train / training.run_inference.

  Args:
    input_files: list of TFRecord paths.
    fmt: dict from record_format.
    is_training: shuffle and repeat (training), or one pass in file order (eval/predict).
    masking_config: masking.MaskingConfig, required for dynamic records.
    max_examples: read at most this many examples when not training (0: all).

  Returns:
    callable(rows, seed, shard) -> tf.data.Dataset of feature dicts, each Tensor [rows, ...]
    (the last eval batch may be short), reading input_pipeline.Shard `shard` when training;
    always with masked_lm_* features (made on the fly for dynamic records).
  """
  name_to_features = pretraining_records.name_to_features(
      fmt["max_seq_length"], fmt["max_predictions_per_seq"], fmt["dynamic"], fmt["has_nsp"])

  def input_fn(rows, seed, shard):
    if is_training:
      d = input_pipeline.record_dataset(input_files, name_to_features, rows, True, seed=seed,
                                        shard=shard)
      if fmt["dynamic"]:
        # Batch numbers keep growing over the endless dataset, so every pass over the data gets
        # new masks; a resumed run starts from another seed (training.train adds the step).
        d = d.enumerate().map(lambda i, f: apply_masks(f, masking_config, [seed, i]))
      return d
    d = tf.data.TFRecordDataset(input_files)
    if max_examples:
      d = d.take(max_examples)
    d = d.map(lambda record: input_pipeline.decode_record(record, name_to_features))
    if fmt["dynamic"]:
      # Eval masks are seeded per example, so every checkpoint, batch size and --n_gpus is
      # scored on the same masked positions.
      d = d.batch(1).enumerate().map(
          lambda i, f: apply_masks(f, masking_config, [seed, i])).unbatch()
    return d.batch(rows)

  return input_fn


def apply_masks(features, masking_config, seed):
  """Masks a batch of dynamic records with masking.mask_batch (in numpy, on the input thread).

  Args:
    features: dict with unmasked input_ids int32 [B, L] and word_starts int32 [B, L].
    masking_config: masking.MaskingConfig (strategy, masked_lm_prob, P, special ids).
    seed: list of int scalars (Python or Tensor); the same seed gives the same masks.

  Returns:
    `features` with input_ids masked, word_starts dropped, and masked_lm_positions [B, P],
    masked_lm_ids [B, P] (int32) and masked_lm_weights [B, P] (float32) added.
  """
  uses_words = masking_config.strategy != "token"

  def _mask(input_ids, word_starts, seed_values):
    return masking.mask_batch(input_ids, word_starts if uses_words else None, seed_values,
                              masking_config)

  seed = tf.stack([tf.cast(s, tf.int64) for s in seed])
  features = dict(features)
  word_starts = features.pop(pretraining_records.WORD_STARTS_FEATURE)
  masked = tf.numpy_function(_mask, [features["input_ids"], word_starts, seed],
                             [tf.int32, tf.int32, tf.int32, tf.float32], stateful=False)
  slots_shape = features["input_ids"].shape[:1].concatenate(
      [masking_config.max_predictions_per_seq])
  for name, tensor in zip(("input_ids",) + pretraining_records.STATIC_MASK_FEATURES, masked):
    tensor.set_shape(features["input_ids"].shape if name == "input_ids" else slots_shape)
    features[name] = tensor
  return features


def tower_fn_builder(bert_config, has_nsp, is_training):
  """tower_fn(features) -> (loss, outputs) for one tower.

  Training returns the globally normalised MLM loss (+ NSP loss) and no outputs. Inference
  returns no loss and, per example, what eval_results.txt and predict.txt are computed from:
  masked_lm_log_prob [rows, P] (log-probability of the original token), masked_lm_predictions
  [rows, P], the masked_lm_positions/ids/weights [rows, P] the model saw (dynamic masks are only
  known after the input pipeline), and with NSP next_sentence_log_prob / _predictions /
  _labels [rows].
  """

  def tower_fn(features, global_batch):
    model = modeling.BertModel(
        config=bert_config,
        is_training=is_training,
        input_ids=features["input_ids"],
        input_mask=features["input_mask"],
        token_type_ids=features["segment_ids"])
    positions = features["masked_lm_positions"]
    weights = features["masked_lm_weights"]
    denominator = None
    if is_training:
      denominator = global_batch.loss_denominator(pretraining_model.masked_token_count)
    masked_lm_loss, masked_lm_example_loss, masked_lm_log_probs = (
        pretraining_model.get_masked_lm_output(
            bert_config, model.get_sequence_output(), model.get_embedding_table(), positions,
            features["masked_lm_ids"], weights, loss_denominator=denominator))
    total_loss = masked_lm_loss
    if has_nsp:
      next_sentence_loss, next_sentence_example_loss, next_sentence_log_probs = (
          pretraining_model.get_next_sentence_output(
              bert_config, model.get_pooled_output(), features["next_sentence_labels"]))
      total_loss += next_sentence_loss
    if is_training:
      return total_loss, {}

    slots = modeling.get_shape_list(positions, expected_rank=2)
    outputs = {
        "masked_lm_log_prob": tf.reshape(-masked_lm_example_loss, slots),
        "masked_lm_predictions": tf.reshape(
            tf.argmax(masked_lm_log_probs, axis=-1, output_type=tf.int32), slots),
        "masked_lm_positions": positions,
        "masked_lm_ids": features["masked_lm_ids"],
        "masked_lm_weights": weights,
    }
    if has_nsp:
      outputs["next_sentence_log_prob"] = -next_sentence_example_loss
      outputs["next_sentence_predictions"] = tf.argmax(
          next_sentence_log_probs, axis=-1, output_type=tf.int32)
      outputs["next_sentence_labels"] = tf.reshape(features["next_sentence_labels"], [-1])
    return None, outputs

  return tower_fn


def evaluation_metrics(outputs):
  """The stock eval metrics, in numpy, from tower_fn's inference outputs.

  Masked-LM accuracy and loss are averaged over the real prediction slots (weighted by
  masked_lm_weights, as stock tf.metrics with weights); NSP metrics over examples. `loss` is
  masked_lm_loss + next_sentence_loss, the training objective.

  Args:
    outputs: dict of numpy arrays from training.run_inference.

  Returns:
    dict of metric name -> float.
  """
  results = pretraining_model.masked_lm_metrics(outputs)
  results["loss"] = results["masked_lm_loss"]
  if "next_sentence_labels" in outputs:
    results["next_sentence_accuracy"] = float(np.mean(
        outputs["next_sentence_predictions"] == outputs["next_sentence_labels"]))
    results["next_sentence_loss"] = float(-np.mean(outputs["next_sentence_log_prob"]))
    results["loss"] += results["next_sentence_loss"]
  return results


NSP_LABELS = ("IsNext", "NotNext")  # Stock: label 0 = B follows A, 1 = B is a random sentence.


def prediction_lines(outputs, inv_vocab):
  """One line per example: `pos:original->predicted` per masked slot, then the NSP verdict.

  Args:
    outputs: dict of numpy arrays from training.run_inference.
    inv_vocab: dict id -> token.

  Yields:
    str lines without newline, e.g. "3:法->法 7:院->人 nsp:IsNext->IsNext".
  """
  for i in range(len(outputs["masked_lm_ids"])):
    items = []
    for pos, orig, pred, weight in zip(outputs["masked_lm_positions"][i],
                                       outputs["masked_lm_ids"][i],
                                       outputs["masked_lm_predictions"][i],
                                       outputs["masked_lm_weights"][i]):
      if weight > 0:
        items.append("%d:%s->%s" % (pos, inv_vocab.get(int(orig), "<%d>" % orig),
                                    inv_vocab.get(int(pred), "<%d>" % pred)))
    if "next_sentence_labels" in outputs:
      items.append("nsp:%s->%s" % (NSP_LABELS[outputs["next_sentence_labels"][i]],
                                   NSP_LABELS[outputs["next_sentence_predictions"][i]]))
    yield " ".join(items)


class MaskedLmObjective(object):
  """BERT's masked LM (+ NSP): the tower_fn, metrics and predict.txt lines of this module."""

  name = "mlm"
  uses_nsp = True  # When the records have next_sentence_labels.

  def __init__(self, bert_config):
    self.bert_config = bert_config

  def run_identity(self):
    return {"objective": self.name}

  def tower_fn_builder(self, has_nsp, is_training):
    return tower_fn_builder(self.bert_config, has_nsp, is_training)

  def export(self, output_dir):
    """Nothing beyond export/ (training.export_model): the heads are the stock cls/."""
    del output_dir

  @staticmethod
  def evaluation_metrics(outputs):
    return evaluation_metrics(outputs)

  @staticmethod
  def prediction_lines(outputs, inv_vocab):
    return prediction_lines(outputs, inv_vocab)


def objective_from_flags(bert_config):
  """The --objective (MaskedLmObjective or ElectraObjective), checked.

  Raises:
    InputError: a bad --generator_hidden_ratio or --disc_weight, or ELECTRA with pipeline
      stages (not built).
  """
  if FLAGS.objective == "mlm":
    return MaskedLmObjective(bert_config)
  if not 0.0 < FLAGS.generator_hidden_ratio <= 1.0:
    raise cli.InputError("--generator_hidden_ratio=%s: expected a value in (0, 1]" %
                         FLAGS.generator_hidden_ratio)
  if FLAGS.disc_weight < 0.0:
    raise cli.InputError("--disc_weight=%s: expected a number >= 0" % FLAGS.disc_weight)
  if FLAGS.pipeline_stages > 1:
    raise cli.InputError("--objective=electra does not support --pipeline_stages=%d yet; use "
                         "data-parallel towers (--pipeline_stages=1)" % FLAGS.pipeline_stages)
  return electra_pretraining.ElectraObjective(
      bert_config, FLAGS.generator_hidden_ratio, FLAGS.disc_weight, eval_seed=FLAGS.random_seed)


def checkpoint_has_nsp_head(checkpoint):
  """Whether `checkpoint` holds cls/seq_relationship (MLM-only checkpoints do not)."""
  names = set(name for name, _ in tf.train.list_variables(checkpoint))
  return "cls/seq_relationship/output_weights" in names


def check_vocab_matches(bert_config, files):
  """Raises InputError when the records hold token ids outside the config's vocabulary.

  Only the first records are read: enough to catch records made with another vocab.
  """
  for record in itertools.islice(tf.io.tf_record_iterator(files[0]), 100):
    ids = tf.train.Example.FromString(record).features.feature["input_ids"].int64_list.value
    if ids and max(ids) >= bert_config.vocab_size:
      raise cli.InputError(
          "%s holds token id %d but vocab_size=%d in %s: the records were made with another "
          "vocabulary than the model's" % (files[0], max(ids), bert_config.vocab_size,
                                           FLAGS.bert_config_file))


def load_model(fmt, will_train=False):
  """The BertConfig, plus the tokenizer and masking config when needed, checked against `fmt`.

  Also checks the run against --output_dir's run_info.json (a training run records its own).

  Returns:
    (bert_config, tokenizer or None, masking.MaskingConfig or None, the --objective's
    MaskedLmObjective or electra_pretraining.ElectraObjective).
  """
  needs_vocab = fmt["dynamic"] or FLAGS.do_predict
  if needs_vocab and not (FLAGS.vocab_file or FLAGS.spm_model_file):
    raise cli.InputError(
        "--vocab_file is required %s (the vocabulary the records were made with)" %
        ("to mask dynamic records on the fly" if fmt["dynamic"] else
         "by --do_predict to print tokens"))
  bert_config, tokenizer, vocab_digest = common_flags.load_config_and_tokenizer(
      needs_vocab or bool(FLAGS.vocab_file))
  objective = objective_from_flags(bert_config)
  common_flags.check_run_info(
      common_flags.run_identity(bert_config, vocab_digest, **objective.run_identity()),
      will_train=will_train)
  masking_config = None
  if fmt["dynamic"]:
    similar = None
    if FLAGS.masking_replacement == "similar":
      if not FLAGS.similar_words_file:
        raise cli.InputError("--masking_replacement=similar needs --similar_words_file "
                             "(build_similar_words.py makes one)")
      similar = similar_words.load(FLAGS.similar_words_file, tokenizer)
    masking_config = masking.MaskingConfig.from_vocab(
        tokenizer.vocab, source="--vocab_file=%s" % (FLAGS.vocab_file or FLAGS.spm_model_file),
        strategy=FLAGS.masking, masked_lm_prob=FLAGS.masked_lm_prob,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq, max_ngram=FLAGS.max_ngram,
        replacement=FLAGS.masking_replacement, similar_words=similar)
  return bert_config, tokenizer, masking_config, objective


def main(_):
  logging.set_verbosity(logging.INFO)
  if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
    raise cli.InputError("at least one of --do_train, --do_eval or --do_predict must be set")
  if not FLAGS.input_file and (FLAGS.do_train or not FLAGS.eval_input_file):
    raise cli.InputError("--input_file is required")
  common_flags.require_output_dir()

  if FLAGS.do_eval or FLAGS.do_predict:  # Checked before training, used after it.
    eval_flag = "eval_input_file" if FLAGS.eval_input_file else "input_file"
    eval_files = resolve_input_files(getattr(FLAGS, eval_flag), eval_flag)
  if FLAGS.do_train:
    train_files = resolve_input_files(FLAGS.input_file, "input_file")
    fmt = record_format(train_files, "input_file")
    bert_config, _, masking_config, objective = load_model(fmt, will_train=True)
    check_vocab_matches(bert_config, train_files)
    training.train(objective.tower_fn_builder(fmt["has_nsp"], is_training=True),
                   input_fn_builder(train_files, fmt, True, masking_config),
                   common_flags.train_spec(FLAGS.num_train_steps, FLAGS.num_warmup_steps))
    training.export_model(FLAGS.output_dir, bert_config, FLAGS.vocab_file, FLAGS.spm_model_file)
    objective.export(FLAGS.output_dir)

  if FLAGS.do_eval or FLAGS.do_predict:
    fmt = record_format(eval_files, eval_flag)
    bert_config, tokenizer, masking_config, objective = load_model(fmt, will_train=False)
    check_vocab_matches(bert_config, eval_files)
    checkpoint = training.find_checkpoint(FLAGS.output_dir, FLAGS.init_checkpoint)
    has_nsp = fmt["has_nsp"] and objective.uses_nsp and checkpoint_has_nsp_head(checkpoint)
    if fmt["has_nsp"] and objective.uses_nsp and not has_nsp:
      logging.warning("%s has no next-sentence head: evaluating the masked LM only", checkpoint)
    max_examples = max(FLAGS.max_eval_steps, 0) * FLAGS.eval_batch_size
    outputs = training.run_inference(
        objective.tower_fn_builder(has_nsp, is_training=False),
        input_fn_builder(eval_files, fmt, False, masking_config, max_examples),
        checkpoint, common_flags.inference_parallel(), FLAGS.eval_batch_size)
    logging.info("Ran %s on %d examples of --%s", checkpoint, len(outputs["masked_lm_ids"]),
                 eval_flag)
    if FLAGS.do_eval:
      results = objective.evaluation_metrics(outputs)
      results["global_step"] = training.checkpoint_step(checkpoint)
      common_flags.write_results(os.path.join(FLAGS.output_dir, "eval_results.txt"), results)
    if FLAGS.do_predict:
      path = os.path.join(FLAGS.output_dir, "predict.txt")
      with tf.io.gfile.GFile(path, "w") as writer:
        for line in objective.prediction_lines(outputs, tokenizer.inv_vocab):
          writer.write(line + "\n")
      logging.info("Wrote %d lines to %s", len(outputs["masked_lm_ids"]), path)


if __name__ == "__main__":
  tf.disable_v2_behavior()
  cli.run_main(main)
