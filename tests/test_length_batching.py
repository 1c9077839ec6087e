"""Length-aware batches (input_data.LengthOptions): padding to each batch's longest row and
bucketing by length change no prediction and lose, repeat or reorder no row."""

import collections
import glob
import os
import shutil

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from classifier import model as classifier_model
from core.errors import InputError
from engine import inference
from engine import input_data
import modeling
import tower_utils

MAX_SEQ = 32
SPEC = {"input_ids": tf.io.FixedLenFeature([MAX_SEQ], tf.int64),
        "input_mask": tf.io.FixedLenFeature([MAX_SEQ], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([MAX_SEQ], tf.int64),
        "label_ids": tf.io.FixedLenFeature([], tf.int64)}


def _write_records(path, lengths, seed=0):
  """Classifier records whose row i is `lengths[i]` real tokens long and has label_ids = i."""
  rng = np.random.RandomState(seed)
  with tf.io.TFRecordWriter(str(path)) as writer:
    for i, length in enumerate(lengths):
      ids = [2] + list(rng.randint(5, 50, size=length - 1)) + [0] * (MAX_SEQ - length)
      mask = [1] * length + [0] * (MAX_SEQ - length)
      segments = [0] * (length // 2) + [1] * (length - length // 2) + [0] * (MAX_SEQ - length)
      feature = {name: tf.train.Feature(int64_list=tf.train.Int64List(value=values))
                 for name, values in (("input_ids", ids), ("input_mask", mask),
                                      ("segment_ids", segments), ("label_ids", [i]))}
      writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                   .SerializeToString())
  return str(path)


def test_sorted_windows_batch_similar_lengths_and_give_each_row_its_input_position(tmp_path):
  lengths = [9, 3, 31, 17, 4, 25, 12, 30, 6, 20, 8]
  path = _write_records(tmp_path / "test.tf_record", lengths)
  batches = _batches(path, 2, False, input_data.LengthOptions(8, 3))
  assert [len(b["label_ids"]) for b in batches] == [2, 2, 2, 2, 2, 1]
  positions = np.concatenate([b[input_data.INDEX_FEATURE] for b in batches])
  assert list(np.concatenate([b["label_ids"] for b in batches])) == list(positions)
  assert sorted(positions) == list(range(11))
  # Windows of 3 x 2 rows: rows 0-5 sorted by length, then rows 6-10.
  assert [lengths[i] for i in positions] == [3, 4, 9, 17, 25, 31, 6, 8, 12, 20, 30]
  assert [b["input_ids"].shape[1] for b in batches] == [8, 24, 32, 8, 24, 32]


def _batches(path, rows, is_training, lengths, count=None):
  """The first `count` batches (all, when not training) as dicts of numpy arrays."""
  with tf.Graph().as_default():
    d = input_data.record_dataset([path], SPEC, rows, is_training, seed=7, lengths=lengths)
    batch = tf.data.make_one_shot_iterator(d).get_next()
    out = []
    with tf.Session() as sess:
      while count is None or len(out) < count:
        try:
          out.append(sess.run(batch))
        except tf.errors.OutOfRangeError:
          break
  return out


def test_padded_length_rounds_up_and_never_exceeds_max_seq_length():
  with tf.Graph().as_default(), tf.Session() as sess:
    got = sess.run([input_data.padded_length(n, 8, 30) for n in (1, 8, 9, 24, 25, 30)])
    mask = tf.constant([[1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]])
    assert list(sess.run(input_data.row_lengths(mask))) == [2, 3, 0]
  assert got == [8, 8, 16, 24, 30, 30]


def test_bucketing_keeps_every_example_once_per_epoch(tmp_path):
  rng = np.random.RandomState(3)
  n, batch, window = 37, 4, 3
  path = _write_records(tmp_path / "train.tf_record", rng.randint(2, MAX_SEQ + 1, size=n))
  lengths = input_data.LengthOptions(pad_to_multiple=8, bucket_window=window)
  # 37 windows of 3 x 4 rows = 444 rows = 12 epochs of 37 examples.
  batches = _batches(path, batch, True, lengths, count=37 * window)
  counts = collections.Counter()
  for k, b in enumerate(batches):
    assert b["label_ids"].shape == (batch,)  # every batch full: it splits over the towers
    real = b["input_mask"].sum(axis=1)
    assert b["input_ids"].shape[1] == min(-(-real.max() // 8) * 8, MAX_SEQ)
    counts.update(b["label_ids"].tolist())
    if (k + 1) % window == 0:  # a window holds exactly the rows the stream brought
      assert max(counts.values()) - min(counts[i] for i in range(n)) <= 1, k
  assert sorted(counts) == list(range(n)) and set(counts.values()) == {12}

  # Bucketing makes batches shorter than the same stream cut into batches as it comes.
  plain = _batches(path, batch, True, input_data.LengthOptions(8, 0), count=len(batches))
  mean_length = lambda bs: np.mean([b["input_ids"].shape[1] for b in bs])
  assert mean_length(batches) < 0.85 * mean_length(plain), (mean_length(batches),
                                                             mean_length(plain))


def test_training_stream_holds_every_record_once_per_epoch(tmp_path):
  path = _write_records(tmp_path / "train.tf_record", [5] * 10)
  labels = np.concatenate([b["label_ids"] for b in _batches(path, 5, True, None, count=6)])
  for epoch in range(3):  # shuffled anew each epoch, never mixed across epochs
    assert sorted(labels[10 * epoch:10 * (epoch + 1)]) == list(range(10))
  assert list(labels[:10]) != list(labels[10:20])


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
  """A random tiny classifier checkpoint and 11 records of lengths 3..31 (unsorted)."""
  root = tmp_path_factory.mktemp("lengths")
  config = modeling.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1,
                               num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=MAX_SEQ)
  with tf.Graph().as_default():
    ids = tf.zeros([1, MAX_SEQ], tf.int32)
    classifier_model.create_model(config, False, ids, ids, ids, tf.zeros([1], tf.int32), 3)
    tf.train.get_or_create_global_step()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      rng = np.random.RandomState(1)
      for v in tf.trainable_variables():  # large weights: outputs far apart from row to row
        v.load(rng.normal(0.0, 0.5, size=v.shape.as_list()), sess)
      checkpoint = tf.train.Saver().save(sess, str(root / "model.ckpt"))
  records = _write_records(root / "test.tf_record", [9, 3, 31, 17, 4, 25, 12, 30, 6, 20, 8])
  return config, checkpoint, records


def _predict(classifier, lengths, n_towers, batch_size_per_tower):
  config, checkpoint, records = classifier

  def input_fn(rows, seed, shard):
    return input_data.record_dataset([records], SPEC, rows, False, seed=seed, shard=shard,
                                     lengths=lengths)

  return inference.run_inference(classifier_model.make_tower_fn(config, 3, False), input_fn,
                                checkpoint, tower_utils.parallel_spec(n_towers),
                                batch_size_per_tower)


def test_batch_max_padding_and_sorted_batches_change_no_prediction_nor_row_order(classifier):
  fixed = _predict(classifier, None, 1, 8)
  # The rows differ from one another, so equal outputs in order mean the same row order.
  assert len({tuple(np.round(p, 3)) for p in fixed["probabilities"]}) == 11
  # (towers, rows per tower, pad to a multiple of, sorting window in batches (0: none)).
  for n_towers, batch_size_per_tower, multiple, window in (
      (1, 4, 8, 0), (2, 3, 1, 0), (2, 3, 8, 1), (1, 4, 1, 2)):
    dynamic = _predict(classifier, input_data.LengthOptions(multiple, window), n_towers,
                       batch_size_per_tower)
    assert dynamic["probabilities"].shape == (11, 3)  # every row, the short last batch too
    np.testing.assert_allclose(dynamic["probabilities"], fixed["probabilities"], atol=1e-5)
    np.testing.assert_allclose(dynamic["per_example_loss"], fixed["per_example_loss"],
                               atol=1e-5)


def test_a_checkpoint_deleted_before_it_is_read_is_one_input_error(classifier, tmp_path):
  """What --do_predict meets when a training run in the same output_dir rotates the checkpoint
  it found away before it read it."""
  config, checkpoint, records = classifier
  copy = str(tmp_path / "model.ckpt")
  for path in glob.glob(checkpoint + ".*"):
    shutil.copy(path, copy + path[len(checkpoint):])
  for path in glob.glob(copy + ".*"):
    os.remove(path)
  with pytest.raises(InputError, match=r"checkpoint .*model\.ckpt disappeared while this run "
                                       r"read it .*--keep_checkpoint_max"):
    _predict((config, copy, records), None, 1, 8)
