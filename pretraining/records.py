# coding=utf-8
"""BERT pretraining TFRecords: their feature specs, which kind a file holds, and their input_fn.

create_pretraining_data.py writes three layouts (L = max_seq_length, P = max_predictions_per_seq):

  static (stock)   input_ids[L], input_mask[L], segment_ids[L], masked_lm_positions[P],
                   masked_lm_ids[P], masked_lm_weights[P] (float), next_sentence_labels[1]
  static --no_nsp  the same without next_sentence_labels
  dynamic          input_ids[L] (unmasked), input_mask[L], segment_ids[L], word_starts[L],
                   and next_sentence_labels[1] unless --no_nsp; masking.mask_batch masks them
                   at train time.

All features are int64 except masked_lm_weights (float32).
"""

import tensorflow.compat.v1 as tf

from core.errors import InputError
from engine import input_data
from pretraining import masking

SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")
STATIC_MASK_FEATURES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
WORD_STARTS_FEATURE = "word_starts"
NSP_FEATURE = "next_sentence_labels"


def name_to_features(max_seq_length, max_predictions_per_seq, dynamic=False, has_nsp=True):
  """The tf.io.FixedLenFeature spec for tf.io.parse_single_example.

  Args:
    max_seq_length: int, L.
    max_predictions_per_seq: int, P (ignored when `dynamic`).
    dynamic: records hold unmasked input_ids plus word_starts (--dynamic_masking).
    has_nsp: records hold next_sentence_labels (i.e. they were not made with --no_nsp).

  Returns:
    dict feature name -> tf.io.FixedLenFeature.
  """
  spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in SEQUENCE_FEATURES}
  if dynamic:
    spec[WORD_STARTS_FEATURE] = tf.io.FixedLenFeature([max_seq_length], tf.int64)
  else:
    spec["masked_lm_positions"] = tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64)
    spec["masked_lm_ids"] = tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64)
    spec["masked_lm_weights"] = tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32)
  if has_nsp:
    spec[NSP_FEATURE] = tf.io.FixedLenFeature([1], tf.int64)
  return spec


def inspect_records(path):
  """Reads the first record of `path` and tells which layout the file holds.

  Args:
    path: a TFRecord file written by create_pretraining_data.py (or stock BERT's).

  Returns:
    dict(dynamic=bool, has_nsp=bool, max_seq_length=int, max_predictions_per_seq=int or None);
    max_predictions_per_seq is None for dynamic records, whose masking happens at train time.

  Raises:
    InputError: if the file is missing, empty, cut short, not a TFRecord file, or its records
      are not BERT pretraining examples.
  """
  if not tf.io.gfile.exists(path):
    raise InputError("%s: no such file" % path)
  try:
    first = next(iter(tf.io.tf_record_iterator(path)), None)
  except (tf.errors.DataLossError, tf.errors.OpError) as e:
    raise InputError("%s: not a TFRecord file (%s)" % (path, e.message.splitlines()[0]))
  if first is None:
    raise InputError("%s: holds no records (expected BERT pretraining examples)" % path)
  input_data.check_framing(path)  # A TFRecord file, but is it whole?
  try:
    features = tf.train.Example.FromString(first).features.feature
  except Exception:  # pylint: disable=broad-except
    # protobuf raises its own DecodeError type, which differs across protobuf backends.
    raise InputError("%s: the first record is not a tf.train.Example" % path)
  return _describe_layout(path, features)


def _describe_layout(path, features):
  """Checks a record's feature map against the layouts above; returns inspect_records' dict."""
  missing = [name for name in SEQUENCE_FEATURES if name not in features]
  if missing:
    raise InputError("%s: not a BERT pretraining TFRecord (missing feature %s)" %
                     (path, ", ".join(missing)))
  max_seq_length = len(features["input_ids"].int64_list.value)
  dynamic = WORD_STARTS_FEATURE in features
  expected = [WORD_STARTS_FEATURE] if dynamic else list(STATIC_MASK_FEATURES)
  missing = [name for name in expected if name not in features]
  if missing:
    raise InputError("%s: not a BERT pretraining TFRecord (has neither word_starts nor %s)" %
                     (path, ", ".join(missing)))
  max_predictions_per_seq = None
  if not dynamic:
    max_predictions_per_seq = len(features["masked_lm_positions"].int64_list.value)
  return dict(dynamic=dynamic, has_nsp=NSP_FEATURE in features, max_seq_length=max_seq_length,
              max_predictions_per_seq=max_predictions_per_seq)


def input_fn_builder(input_files, fmt, is_training, masking_config=None, max_examples=0):
  """input_fn(rows, seed, shard) for training.train / inference.run_inference.

  Args:
    input_files: list of TFRecord paths.
    fmt: dict(dynamic, has_nsp, max_seq_length, max_predictions_per_seq), as
      run_pretraining_mgpu.record_format gives it.
    is_training: shuffle and repeat (training), or one pass in file order (eval/predict).
    masking_config: masking.MaskingConfig, required for dynamic records.
    max_examples: read at most this many examples when not training (0: all).

  Returns:
    callable(rows, seed, shard) -> tf.data.Dataset of feature dicts, each Tensor [rows, ...]
    (the last eval batch may be short), reading input_data.Shard `shard` when training;
    always with masked_lm_* features (made on the fly for dynamic records).
  """
  features_spec = name_to_features(
      fmt["max_seq_length"], fmt["max_predictions_per_seq"], fmt["dynamic"], fmt["has_nsp"])

  def input_fn(rows, seed, shard):
    if is_training:
      d = input_data.record_dataset(input_files, features_spec, rows, True, seed=seed,
                                    shard=shard)
      if fmt["dynamic"]:
        # Batch numbers keep growing over the endless dataset, so every pass over the data gets
        # new masks; a resumed run starts from another seed (training.train adds the step).
        d = input_data.plain_map(d.enumerate(),
                                 lambda i, f: apply_masks(f, masking_config, [seed, i]))
      return d
    d = tf.data.TFRecordDataset(input_files)
    if max_examples:
      d = d.take(max_examples)
    d = input_data.plain_map(
        d, lambda record: input_data.decode_record(record, features_spec))
    if fmt["dynamic"]:
      # Eval masks are seeded per example, so every checkpoint, batch size and --n_gpus is
      # scored on the same masked positions.
      d = input_data.plain_map(
          d.batch(1).enumerate(), lambda i, f: apply_masks(f, masking_config, [seed, i])).unbatch()
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
  word_starts = features.pop(WORD_STARTS_FEATURE)
  masked = tf.numpy_function(_mask, [features["input_ids"], word_starts, seed],
                             [tf.int32, tf.int32, tf.int32, tf.float32], stateful=False)
  slots_shape = features["input_ids"].shape[:1].concatenate(
      [masking_config.max_predictions_per_seq])
  for name, tensor in zip(("input_ids",) + STATIC_MASK_FEATURES, masked):
    tensor.set_shape(features["input_ids"].shape if name == "input_ids" else slots_shape)
    features[name] = tensor
  return features
