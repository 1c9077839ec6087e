"""modeling.py: stock names and shapes, checkpoint restore, numpy-reference equivalence, errors."""

import json
import math

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from core.errors import InputError
from engine import checkpoints
import modeling

CONFIG = dict(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=24, hidden_act="gelu", hidden_dropout_prob=0.1,
              attention_probs_dropout_prob=0.1, max_position_embeddings=12, type_vocab_size=2,
              initializer_range=0.02)


def _config(**overrides):
  values = dict(CONFIG)
  values.update(overrides)
  return modeling.BertConfig.from_dict(values)


def _google_names_for_two_layers(v, h, i, p, t):
  """The variable list of a Google BERT checkpoint (encoder part), written out literally."""
  names = {
      "bert/embeddings/word_embeddings": [v, h],
      "bert/embeddings/token_type_embeddings": [t, h],
      "bert/embeddings/position_embeddings": [p, h],
      "bert/embeddings/LayerNorm/beta": [h],
      "bert/embeddings/LayerNorm/gamma": [h],
      "bert/pooler/dense/kernel": [h, h],
      "bert/pooler/dense/bias": [h],
  }
  for layer in ("layer_0", "layer_1"):
    p_ = "bert/encoder/%s/" % layer
    names.update({
        p_ + "attention/self/query/kernel": [h, h], p_ + "attention/self/query/bias": [h],
        p_ + "attention/self/key/kernel": [h, h], p_ + "attention/self/key/bias": [h],
        p_ + "attention/self/value/kernel": [h, h], p_ + "attention/self/value/bias": [h],
        p_ + "attention/output/dense/kernel": [h, h], p_ + "attention/output/dense/bias": [h],
        p_ + "attention/output/LayerNorm/beta": [h], p_ + "attention/output/LayerNorm/gamma": [h],
        p_ + "intermediate/dense/kernel": [h, i], p_ + "intermediate/dense/bias": [i],
        p_ + "output/dense/kernel": [i, h], p_ + "output/dense/bias": [h],
        p_ + "output/LayerNorm/beta": [h], p_ + "output/LayerNorm/gamma": [h],
    })
  return names


def _build(config, batch=3, seq=7, is_training=False):
  input_ids = tf.placeholder(tf.int32, [batch, seq], name="input_ids")
  input_mask = tf.placeholder(tf.int32, [batch, seq], name="input_mask")
  segment_ids = tf.placeholder(tf.int32, [batch, seq], name="segment_ids")
  model = modeling.BertModel(config, is_training, input_ids, input_mask, segment_ids)
  return model, (input_ids, input_mask, segment_ids)


def test_variable_names_and_shapes_equal_google_checkpoint_list():
  with tf.Graph().as_default():
    _build(_config())
    got = {v.op.name: v.shape.as_list() for v in tf.global_variables()}
  assert got == _google_names_for_two_layers(40, 16, 24, 12, 2)
  assert got == dict(modeling.stock_variable_shapes(_config()))


def test_building_again_under_reuse_creates_no_variable():
  with tf.Graph().as_default():
    _build(_config())
    count = len(tf.global_variables())
    with tf.variable_scope(tf.get_variable_scope(), reuse=True):
      _build(_config())
    assert len(tf.global_variables()) == count


# ---------------------------------------------------------------- independent numpy reference


def _np_layer_norm(x, gamma, beta):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + 1e-12) * gamma + beta


def _np_gelu(x):
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _np_softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def numpy_bert(w, cfg, ids, mask, types):
  """BERT forward pass in float64 numpy from a dict of stock-named weights.

  Returns (sequence_output [B,S,H], pooled_output [B,H]).
  """
  b, s = ids.shape
  h, n = cfg.hidden_size, cfg.num_attention_heads
  d = h // n
  x = (w["bert/embeddings/word_embeddings"][ids] +
       w["bert/embeddings/token_type_embeddings"][types] +
       w["bert/embeddings/position_embeddings"][:s][None])
  x = _np_layer_norm(x, w["bert/embeddings/LayerNorm/gamma"], w["bert/embeddings/LayerNorm/beta"])
  bias = (1.0 - mask[:, None, None, :].astype(np.float64)) * -10000.0  # [B,1,1,S]
  for layer in range(cfg.num_hidden_layers):
    p = "bert/encoder/layer_%d/" % layer

    def dense(t, name, p=p):
      return t @ w[p + name + "/kernel"] + w[p + name + "/bias"]

    def heads(t):
      return t.reshape(b, s, n, d).transpose(0, 2, 1, 3)

    q = heads(dense(x, "attention/self/query"))
    k = heads(dense(x, "attention/self/key"))
    v = heads(dense(x, "attention/self/value"))
    probs = _np_softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + bias)
    ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
    attn = _np_layer_norm(dense(ctx, "attention/output/dense") + x,
                          w[p + "attention/output/LayerNorm/gamma"],
                          w[p + "attention/output/LayerNorm/beta"])
    inter = _np_gelu(dense(attn, "intermediate/dense"))
    x = _np_layer_norm(dense(inter, "output/dense") + attn, w[p + "output/LayerNorm/gamma"],
                       w[p + "output/LayerNorm/beta"])
  pooled = np.tanh(x[:, 0] @ w["bert/pooler/dense/kernel"] + w["bert/pooler/dense/bias"])
  return x, pooled


def _random_stock_weights(cfg, seed=0):
  rng = np.random.RandomState(seed)
  weights = {}
  for name, shape in modeling.stock_variable_shapes(cfg):
    if name.endswith("gamma"):
      weights[name] = 1.0 + 0.1 * rng.randn(*shape)
    else:
      weights[name] = 0.3 * rng.randn(*shape)
  return weights


def _write_checkpoint(weights, prefix):
  """Writes `weights` under their names with plain tf.Variables (no modeling code involved)."""
  with tf.Graph().as_default():
    variables = [tf.Variable(value.astype(np.float32), name=name)
                 for name, value in weights.items()]
    saver = tf.train.Saver(variables)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      saver.save(sess, prefix, write_meta_graph=False)


def _inputs(seed=1, batch=3, seq=7):
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, CONFIG["vocab_size"], size=(batch, seq))
  mask = np.ones((batch, seq), np.int32)
  mask[1, 4:] = 0
  mask[2, 2:] = 0
  types = (np.arange(seq)[None] >= 3).astype(np.int32).repeat(batch, 0)
  return ids, mask, types


def test_stock_checkpoint_restores_and_forward_equals_numpy_reference(tmp_path):
  cfg = _config()
  weights = _random_stock_weights(cfg)
  prefix = str(tmp_path / "bert_model.ckpt")
  _write_checkpoint(weights, prefix)
  ids, mask, types = _inputs()
  with tf.Graph().as_default():
    model, placeholders = _build(cfg)
    checkpoints.restore_from_init_checkpoint(prefix, tf.global_variables())
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      seq_out, pooled = sess.run(
          [model.get_sequence_output(), model.get_pooled_output()],
          dict(zip(placeholders, (ids, mask, types))))
  ref_seq, ref_pooled = numpy_bert(weights, cfg, ids, mask, types)
  # Padding positions are computed too (and ignored downstream); compare the real ones.
  real = mask.astype(bool)
  assert np.max(np.abs(seq_out[real] - ref_seq[real])) < 1e-5
  assert np.max(np.abs(pooled - ref_pooled)) < 1e-5
  # The outputs are not trivially equal to zero or the input.
  assert np.std(pooled) > 0.1


def test_checkpoint_written_by_model_has_only_stock_names(tmp_path):
  cfg = _config()
  with tf.Graph().as_default():
    _build(cfg)
    saver = tf.train.Saver()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      saver.save(sess, str(tmp_path / "m.ckpt"))
  saved = dict(tf.train.list_variables(str(tmp_path / "m.ckpt")))
  assert saved == dict(modeling.stock_variable_shapes(cfg))


def test_mismatched_checkpoint_shape_is_a_clear_error(tmp_path):
  weights = _random_stock_weights(_config(vocab_size=50))
  _write_checkpoint(weights, str(tmp_path / "c.ckpt"))
  with tf.Graph().as_default():
    _build(_config())
    with pytest.raises(InputError, match="word_embeddings has shape \\[50, 16\\]"):
      checkpoints.restore_from_init_checkpoint(str(tmp_path / "c.ckpt"), tf.global_variables())


def test_gelu_is_the_tanh_form_of_the_released_models():
  with tf.Graph().as_default(), tf.Session() as sess:
    values = sess.run(modeling.gelu(tf.constant([-1.0, 0.0, 1.0, 3.0])))
  # tanh approximation; the exact erf form would give 0.8413447 at 1.0.
  np.testing.assert_allclose(values, [-0.1588080, 0.0, 0.8411920, 2.9963627], atol=1e-6)


def test_dropout_takes_a_rate_not_a_keep_probability():
  with tf.Graph().as_default(), tf.Session() as sess:
    tf.set_random_seed(3)
    out = sess.run(modeling.dropout(tf.ones([20000]), 0.9))
  dropped = np.mean(out == 0.0)
  assert 0.88 < dropped < 0.92
  np.testing.assert_allclose(out[out > 0], 10.0, rtol=1e-5)


def test_seeded_dropout_keeps_the_right_share_the_same_mask_again_and_any_shape():
  """16 random bits per element (two per Philox word): the kept share is 1 - rate to sampling
  error, neighbours (the two halves of one word) are independent, the same seed gives the same
  mask, and odd sizes, unknown shapes and bfloat16 work."""
  with tf.Graph().as_default(), tf.Session() as sess:
    seed = tf.constant([7, 11])
    with modeling.seeded_dropout_scope(seed):
      big = modeling.dropout(tf.ones([1000, 1001]), 0.1)
    with modeling.seeded_dropout_scope(seed):
      again = modeling.dropout(tf.ones([1000, 1001]), 0.1)
    with modeling.seeded_dropout_scope(seed + 1):
      other = modeling.dropout(tf.ones([1000, 1001]), 0.1)
    unknown = tf.placeholder(tf.bfloat16, [None, 3])
    with modeling.seeded_dropout_scope(seed):
      small = modeling.dropout(unknown, 0.5)
    big, again, other, small = sess.run(
        [big, again, other, tf.cast(small, tf.float32)], {unknown: np.ones([5, 3])})
  kept = big != 0.0
  assert abs(kept.mean() - 0.9) < 0.002  # sampling sd 3e-4 over 1,001,000 elements
  np.testing.assert_allclose(big[kept], 1.0 / 0.9, rtol=1e-6)
  both = np.mean(kept[:, 0:1000:2] & kept[:, 1:1001:2])  # the two halves of a word
  assert abs(both - 0.81) < 0.003
  np.testing.assert_array_equal(big, again)
  assert np.mean((other != 0.0) != kept) > 0.15  # 2 * 0.9 * 0.1 = 0.18 for independent masks
  assert small.shape == (5, 3) and set(np.unique(small)) <= {0.0, 2.0}


def test_dropout_is_off_at_inference():
  cfg = _config(hidden_dropout_prob=0.5, attention_probs_dropout_prob=0.5)
  ids, mask, types = _inputs()
  with tf.Graph().as_default():
    model, placeholders = _build(cfg, is_training=False)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      feed = dict(zip(placeholders, (ids, mask, types)))
      a, b = sess.run(model.get_pooled_output(), feed), sess.run(model.get_pooled_output(), feed)
  np.testing.assert_array_equal(a, b)


def test_sequence_longer_than_position_table_is_a_clear_error():
  with tf.Graph().as_default():
    with pytest.raises(InputError, match="max_seq_length=13 exceeds max_position_embeddings=12"):
      _build(_config(), seq=13)


def test_hidden_size_not_divisible_by_heads_is_a_clear_error():
  with tf.Graph().as_default():
    with pytest.raises(InputError, match="hidden_size=16 is not a multiple of "
                                         "num_attention_heads=5"):
      _build(_config(num_attention_heads=5))


def test_config_file_missing_keys_names_file_and_keys(tmp_path):
  path = tmp_path / "bert_config.json"
  path.write_text(json.dumps({"vocab_size": 10, "hidden_size": 8}))
  with pytest.raises(InputError) as e:
    modeling.BertConfig.from_json_file(str(path))
  assert str(path) in str(e.value)
  assert "num_hidden_layers" in str(e.value) and "intermediate_size" in str(e.value)


def test_config_round_trips_through_json(tmp_path):
  cfg = _config()
  path = tmp_path / "c.json"
  path.write_text(cfg.to_json_string())
  assert modeling.BertConfig.from_json_file(str(path)).to_dict() == cfg.to_dict()


def test_attention_mask_hides_padding():
  cfg = _config()
  ids, mask, types = _inputs()
  changed = ids.copy()
  changed[2, 2:] = (changed[2, 2:] + 1) % CONFIG["vocab_size"]  # only padded positions change
  with tf.Graph().as_default():
    model, placeholders = _build(cfg)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      a = sess.run(model.get_pooled_output(), dict(zip(placeholders, (ids, mask, types))))
      b = sess.run(model.get_pooled_output(), dict(zip(placeholders, (changed, mask, types))))
  np.testing.assert_allclose(a[2], b[2], atol=1e-6)


def test_describe_fresh_variables_names_each_missing_head():
  """A converted encoder lacks cls/predictions/* and ELECTRA's generator: each gets one line."""
  missing = ["cls/predictions/transform/dense/kernel", "cls/predictions/output_bias",
             "generator/encoder/layer_0/attention/self/query/kernel", "extra/w"]
  lines = checkpoints.describe_fresh_variables(missing)
  assert len(lines) == 2  # extra/w (like a classifier's output layer) gets no warning
  assert lines[0].startswith("cls/predictions/* not in --init_checkpoint (2 variables)")
  assert "output bias zero" in lines[0] and "tied to the word embeddings" in lines[0]
  assert lines[1].startswith("generator/* not in --init_checkpoint (1 variables)")
  assert checkpoints.describe_fresh_variables(["output_weights", "output_bias"]) == []


def test_a_tower_copy_changes_neither_the_loss_nor_the_gradient():
  """tied_output gathers from the tower's copy of the table and sends its gradient dense
  (modeling.tower_copy): the same loss and the same table gradient as the stock gather."""
  from heads import pretraining as pretraining_heads  # pylint: disable=g-import-not-at-top
  config = modeling.BertConfig(vocab_size=40, hidden_size=8, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=16,
                               max_position_embeddings=16)
  ids = np.random.RandomState(0).randint(1, 40, size=(3, 6)).astype(np.int32)
  results = []
  for tied in (False, True):
    with tf.Graph().as_default():
      tf.set_random_seed(1)
      with modeling.tower_copy_scope():
        model = modeling.BertModel(config, False, tf.constant(ids), tied_output=tied)
        table = tf.trainable_variables()[0]
        positions = tf.constant([[1, 2], [0, 5], [3, 3]])
        loss = pretraining_heads.get_masked_lm_output(
            config, model.get_sequence_output(), model.get_embedding_table(), positions,
            tf.constant(ids[:, :2]), tf.ones([3, 2]))[0]
      grad = tf.gradients(loss, [table])[0]
      with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        results.append(sess.run([loss, tf.convert_to_tensor(grad)]))
  (loss_stock, grad_stock), (loss_copy, grad_copy) = results
  assert loss_stock == pytest.approx(loss_copy, rel=1e-6)
  np.testing.assert_allclose(grad_copy, grad_stock, rtol=1e-5, atol=1e-7)
  assert np.abs(grad_stock).sum() > 0
