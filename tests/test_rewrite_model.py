"""The seq2seq attention mask and the target-only loss of rewrite_model."""

import numpy as np
import tensorflow.compat.v1 as tf

import modeling
from rewrite import model as rewrite_model

SEQ_LENGTH = 9
MAX_TARGET = 3


def _packed(lengths, seq_length=SEQ_LENGTH, seed=0):
  """Packed rows for (source_length incl. [CLS]/[SEP], target_length incl. final [SEP])."""
  rng = np.random.RandomState(seed)
  ids, mask, seg = (np.zeros([len(lengths), seq_length], np.int32) for _ in range(3))
  for row, (a, b) in enumerate(lengths):
    ids[row, :a + b] = rng.randint(5, 20, size=a + b)
    mask[row, :a + b] = 1
    seg[row, a:a + b] = 1
  return ids, mask, seg


def _expected_mask(a, b, seq_length):
  """UniLM's seq2seq mask written out cell by cell: rows attend (from) -> columns (to)."""
  m = np.zeros([seq_length, seq_length], np.float32)
  for i in range(seq_length):
    for j in range(seq_length):
      if j < a:
        m[i, j] = 1  # every row sees the whole source
      elif a <= i < a + b and a <= j <= i:
        m[i, j] = 1  # a target row sees the targets up to itself
  return m


def test_attention_mask_is_unilm_seq2seq_mask():
  lengths = [(3, 2), (5, 4), (2, 1), (4, 5)]  # the last fills the sequence: no padding
  ids, mask, seg = _packed(lengths)
  with tf.Graph().as_default(), tf.Session() as sess:
    got = sess.run(rewrite_model.seq2seq_attention_mask(tf.constant(mask), tf.constant(seg)))
  for row, (a, b) in enumerate(lengths):
    np.testing.assert_array_equal(got[row], _expected_mask(a, b, SEQ_LENGTH))
  # Spot checks of the layout [CLS] x [SEP] | y [SEP] | pad: source rows never see the target.
  assert got[0, 0].tolist() == [1, 1, 1, 0, 0, 0, 0, 0, 0]
  assert got[0, 3].tolist() == [1, 1, 1, 1, 0, 0, 0, 0, 0]
  assert got[0, 4].tolist() == [1, 1, 1, 1, 1, 0, 0, 0, 0]
  assert got[0, 7].tolist() == [1, 1, 1, 0, 0, 0, 0, 0, 0]


def test_labels_and_prediction_slots():
  ids, mask, seg = _packed([(3, 2), (4, 4)])
  with tf.Graph().as_default(), tf.Session() as sess:
    labels, weights = sess.run(rewrite_model.next_token_labels(
        tf.constant(ids), tf.constant(mask), tf.constant(seg)))
    positions = sess.run(rewrite_model.prediction_positions(
        tf.constant(mask), tf.constant(seg), MAX_TARGET))
  np.testing.assert_array_equal(labels[:, :-1], ids[:, 1:])
  # Row 0: [CLS] x [SEP] y [SEP]: the [SEP] at 2 predicts y, y at 3 predicts [SEP].
  assert weights[0].tolist() == [0, 0, 1, 1, 0, 0, 0, 0, 0]
  assert weights[1].tolist() == [0, 0, 0, 1, 1, 1, 1, 0, 0]
  assert positions[0].tolist() == [2, 3, 4, 5]
  assert positions[1].tolist() == [3, 4, 5, 6]


def _model_outputs(ids, mask, seg, all_slots=True):
  config = modeling.BertConfig(vocab_size=20, hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=32,
                               max_position_embeddings=SEQ_LENGTH)
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    outputs = rewrite_model.create_rewrite_model(
        config, False, tf.constant(ids), tf.constant(mask), tf.constant(seg), MAX_TARGET,
        all_slots=all_slots)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      return sess.run(outputs._asdict())


def test_loss_covers_target_tokens_only():
  ids, mask, seg = _packed([(3, 2), (4, 4), (5, 1)])
  out = _model_outputs(ids, mask, seg)
  # Only next tokens that are real target tokens are predicted: 2 + 4 + 1 of them.
  np.testing.assert_array_equal(out["num_tokens"], [2, 4, 1])
  weights = out["label_weights"]
  assert weights.sum() == 7
  for row in range(3):
    for slot, position in enumerate(out["positions"][row]):
      is_target_next = position + 1 < SEQ_LENGTH and mask[row, position + 1] and \
          seg[row, position + 1]
      assert weights[row, slot] == float(bool(is_target_next))
      if weights[row, slot]:
        assert out["label_ids"][row, slot] == ids[row, position + 1]
  log_probs = out["log_probs"].reshape(weights.shape + (-1,))
  picked = np.take_along_axis(log_probs, out["label_ids"][..., None], axis=-1)[..., 0]
  np.testing.assert_allclose(out["log_likelihood"], (picked * weights).sum(1), rtol=1e-5)
  np.testing.assert_allclose(out["loss"], -(picked * weights).sum() / weights.sum(), rtol=1e-4)


def test_loss_ignores_source_and_padding_contents_beyond_the_mask():
  ids, mask, seg = _packed([(3, 2), (4, 4)])
  changed = ids.copy()
  changed[0, 5:] = 7  # padding of row 0
  changed[1, 8:] = 7
  base = _model_outputs(ids, mask, seg)
  other = _model_outputs(changed, mask, seg)
  np.testing.assert_allclose(base["loss"], other["loss"], rtol=1e-6)
  np.testing.assert_allclose(base["log_likelihood"], other["log_likelihood"], rtol=1e-6)


def test_labelled_slots_only_head_gives_the_same_loss():
  ids, mask, seg = _packed([(3, 2), (4, 4), (5, 1)])
  full = _model_outputs(ids, mask, seg, all_slots=True)
  sparse = _model_outputs(ids, mask, seg, all_slots=False)
  assert sparse["log_probs"].shape[0] == 7  # one row per labelled slot, not 3 * 4
  np.testing.assert_allclose(sparse["loss"], full["loss"], rtol=1e-5)
  np.testing.assert_allclose(sparse["log_likelihood"], full["log_likelihood"], rtol=1e-5)
  np.testing.assert_array_equal(sparse["num_tokens"], full["num_tokens"])
