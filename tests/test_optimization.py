"""optimization.py: schedule, stock slot names, decoupled weight decay, clipping."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import optimization


def test_learning_rate_warms_up_linearly_then_decays_linearly_to_zero():
  with tf.Graph().as_default(), tf.Session() as sess:
    step = tf.placeholder(tf.int64, [])
    lr = optimization.learning_rate_schedule(1e-3, step, num_train_steps=100, num_warmup_steps=10)
    values = [sess.run(lr, {step: s}) for s in (0, 5, 10, 55, 100)]
  np.testing.assert_allclose(values, [0.0, 5e-4, 9e-4, 4.5e-4, 0.0], atol=1e-9)


def test_one_update_matches_the_adamw_formula_and_stock_slot_names():
  grad_w = np.array([[0.3, -0.4]], np.float32)  # global norm 0.5: below the clip
  grad_b = np.array([0.0, 0.0], np.float32)
  with tf.Graph().as_default(), tf.Session() as sess:
    with tf.variable_scope("layer"):
      w = tf.get_variable("dense/kernel", initializer=tf.constant([[1.0, 2.0]]))
      b = tf.get_variable("LayerNorm/beta", initializer=tf.constant([1.0, 1.0]))
    train_op, lr = optimization.create_train_op_from_grads(
        [(tf.constant(grad_w), w), (tf.constant(grad_b), b)], init_lr=0.1, num_train_steps=10,
        num_warmup_steps=0)
    sess.run(tf.global_variables_initializer())
    lr_value = sess.run(lr)
    sess.run(train_op)
    names = sorted(v.op.name for v in tf.global_variables())
    new_w, new_b, step = sess.run([w, b, tf.train.get_global_step()])
  assert names == ["global_step", "layer/LayerNorm/beta", "layer/LayerNorm/beta/adam_m",
                   "layer/LayerNorm/beta/adam_v", "layer/dense/kernel",
                   "layer/dense/kernel/adam_m", "layer/dense/kernel/adam_v"]
  assert step == 1
  m = 0.1 * grad_w
  v = 0.001 * grad_w ** 2
  expected_w = np.array([[1.0, 2.0]]) - lr_value * (m / (np.sqrt(v) + 1e-6) +
                                                    0.01 * np.array([[1.0, 2.0]]))
  np.testing.assert_allclose(new_w, expected_w, rtol=1e-5)
  # LayerNorm (and bias) get no weight decay: a zero gradient leaves them unchanged.
  np.testing.assert_allclose(new_b, [1.0, 1.0])


def test_gradients_are_clipped_to_global_norm_one():
  with tf.Graph().as_default(), tf.Session() as sess:
    w = tf.get_variable("w_bias", initializer=tf.constant([0.0, 0.0]))
    # Adam normalises the step, so clip the effect through m: m = 0.1 * clipped gradient.
    train_op, _ = optimization.create_train_op_from_grads(
        [(tf.constant([30.0, 40.0]), w)], init_lr=0.1, num_train_steps=10, num_warmup_steps=0)
    sess.run(tf.global_variables_initializer())
    sess.run(train_op)
    m = sess.run(tf.global_variables("w_bias/adam_m")[0])
  np.testing.assert_allclose(m, [0.1 * 0.6, 0.1 * 0.8], rtol=1e-5)


def test_an_embedding_gradient_is_clipped_by_the_norm_of_its_dense_form():
  # Token 2 twice in the batch: its two rows of the IndexedSlices add up in the dense gradient,
  # [0, 0, (3, 4) + (3, 4)] = [0, 0, (6, 8)], norm 10 (tf.global_norm of the rows: 7.07).
  with tf.Graph().as_default(), tf.Session() as sess:
    table = tf.get_variable("word_embeddings", initializer=tf.zeros([3, 2]))
    rows = tf.IndexedSlices(tf.constant([[3.0, 4.0], [3.0, 4.0]]), tf.constant([2, 2]),
                            tf.constant([3, 2]))
    assert abs(sess.run(optimization.global_norm([rows])) - 10.0) < 1e-5
    assert abs(sess.run(tf.global_norm([rows])) - 50.0 ** 0.5) < 1e-5
    train_op, _ = optimization.create_train_op_from_grads(
        [(rows, table)], init_lr=0.1, num_train_steps=10, num_warmup_steps=0)
    sess.run(tf.global_variables_initializer())
    sess.run(train_op)
    m = sess.run(tf.global_variables("word_embeddings/adam_m")[0])
  np.testing.assert_allclose(m, [[0, 0], [0, 0], [0.1 * 0.6, 0.1 * 0.8]], rtol=1e-5)


def _ancestors(op):
  """Every op `op` waits for, through data and control inputs."""
  seen, todo = set(), [op]
  while todo:
    current = todo.pop()
    for parent in [t.op for t in current.inputs] + list(current.control_inputs):
      if parent not in seen:
        seen.add(parent)
        todo.append(parent)
  return seen


def test_an_embedding_table_is_made_dense_after_every_other_update_and_its_decay():
  """The table's full-size dense gradient waits for the dense updates (the backward pass's
  gradients are then consumed) and for its own weight decay (no two table-size temporaries at
  once): what keeps the owner of the word embeddings level with the other towers' devices.
  The decay is one in-place kernel (ApplyGradientDescent, param as its own gradient)."""
  with tf.Graph().as_default() as graph, tf.Session() as sess:
    table = tf.get_variable("word_embeddings", initializer=tf.ones([3, 2]))
    kernel = tf.get_variable("dense/kernel", initializer=tf.ones([2, 2]))
    rows = tf.IndexedSlices(tf.constant([[3.0, 4.0]]), tf.constant([2]), tf.constant([3, 2]))
    train_op, _ = optimization.create_train_op_from_grads(
        [(rows, table), (tf.fill([2, 2], 0.5), kernel)], init_lr=0.1, num_train_steps=10,
        num_warmup_steps=0)
    applies = {op.inputs[0].op.name: op for op in graph.get_operations()
               if op.type in ("ApplyAdam", "ResourceApplyAdam")}
    densify = applies["word_embeddings"].inputs[-1].op  # the gradient ApplyAdam reads
    decays = [op for op in graph.get_operations()
              if op.type == "ApplyGradientDescent" and op.inputs[0].op.name == "word_embeddings"]
    assert densify.type == "UnsortedSegmentSum" and len(decays) == 1, (densify, decays)
    waits_for = _ancestors(densify)
    assert applies["dense/kernel"] in waits_for and decays[0] in waits_for
    sess.run(tf.global_variables_initializer())
    sess.run(train_op)
    new_table, new_kernel = sess.run([table, kernel])
  # lr 0.1 at step 0 of 10 without warm-up, decay 0.01. Adam's first step without bias
  # correction moves a touched value by lr * 0.1 / sqrt(0.001) (m = 0.1 g, v = 0.001 g^2), the
  # untouched rows only by the decay.
  step = 0.1 * 0.1 / np.sqrt(0.001)
  np.testing.assert_allclose(new_table[:2], 1.0 - 0.1 * 0.01, rtol=1e-6)
  np.testing.assert_allclose(new_table[2], 1.0 - 0.1 * 0.01 - step, rtol=1e-3)  # epsilon
  np.testing.assert_allclose(new_kernel, 1.0 - 0.1 * 0.01 - step, rtol=1e-3)


def test_stock_create_optimizer_trains_a_loss():
  with tf.Graph().as_default(), tf.Session() as sess:
    x = tf.get_variable("x", initializer=tf.constant(3.0))
    loss = tf.square(x - 1.0)
    train_op = optimization.create_optimizer(loss, 0.1, 200, 10, use_tpu=False)
    sess.run(tf.global_variables_initializer())
    for _ in range(200):
      sess.run(train_op)
    assert abs(sess.run(x) - 1.0) < 0.1


_BERT_NAMES = ["bert/embeddings/word_embeddings", "bert/embeddings/LayerNorm/beta",
               "bert/encoder/layer_0/attention/self/query/kernel",
               "bert/encoder/layer_1/output/dense/kernel", "bert/encoder/layer_1/output/dense/bias",
               "bert/pooler/dense/kernel", "output_weights", "output_bias"]


def test_layerwise_decay_factor_of_each_variable():
  # L = 2 layers, D = 0.8: layer k -> D^(L-k), embeddings D^(L+1), pooler and head 1.
  factors = optimization.layerwise_lr_factors(
      _BERT_NAMES + ["replica_1/bert/encoder/layer_0/attention/self/query/kernel"], 0.8)
  assert factors == pytest.approx({
      "bert/embeddings/word_embeddings": 0.512, "bert/embeddings/LayerNorm/beta": 0.512,
      "bert/encoder/layer_0/attention/self/query/kernel": 0.64,
      "replica_1/bert/encoder/layer_0/attention/self/query/kernel": 0.64,
      "bert/encoder/layer_1/output/dense/kernel": 0.8,
      "bert/encoder/layer_1/output/dense/bias": 0.8,
      "bert/pooler/dense/kernel": 1.0, "output_weights": 1.0, "output_bias": 1.0})
  # 12 layers (BERT-base): embeddings 0.8^13, layer 0 0.8^12, layer 11 0.8.
  base = ["bert/embeddings/word_embeddings"] + [
      "bert/encoder/layer_%d/output/dense/kernel" % k for k in range(12)]
  factors = optimization.layerwise_lr_factors(base, 0.8)
  assert factors[base[0]] == pytest.approx(0.8 ** 13)
  assert [factors[n] for n in base[1:]] == pytest.approx([0.8 ** (12 - k) for k in range(12)])
  assert set(optimization.layerwise_lr_factors(_BERT_NAMES, 1.0).values()) == {1.0}


@pytest.mark.parametrize("optimizer", ["adamw", "lamb"])
def test_one_update_with_layerwise_decay_matches_a_hand_computation(optimizer):
  rng = np.random.RandomState(0)
  values = {n: rng.normal(size=[2, 3]).astype(np.float32) for n in _BERT_NAMES}
  grads = {n: (rng.normal(size=[2, 3]) * 0.05).astype(np.float32) for n in _BERT_NAMES}
  assert np.sqrt(sum(np.sum(g ** 2) for g in grads.values())) < 1.0  # no clipping
  with tf.Graph().as_default(), tf.Session() as sess:
    variables = [tf.get_variable(n, initializer=tf.constant(values[n])) for n in _BERT_NAMES]
    train_op, lr = optimization.create_train_op_from_grads(
        [(tf.constant(grads[v.op.name]), v) for v in variables], init_lr=0.1,
        num_train_steps=10, num_warmup_steps=0, optimizer=optimizer, layerwise_lr_decay=0.5)
    sess.run(tf.global_variables_initializer())
    lr_value = sess.run(lr)
    sess.run(train_op)
    after = dict(zip(_BERT_NAMES, sess.run(variables)))
  factor = {"bert/embeddings/word_embeddings": 0.125, "bert/embeddings/LayerNorm/beta": 0.125,
            "bert/encoder/layer_0/attention/self/query/kernel": 0.25,
            "bert/encoder/layer_1/output/dense/kernel": 0.5,
            "bert/encoder/layer_1/output/dense/bias": 0.5}
  for name in _BERT_NAMES:
    g, w = grads[name].astype(np.float64), values[name].astype(np.float64)
    update = (0.1 * g) / (np.sqrt(0.001 * g ** 2) + 1e-6)
    excluded = "LayerNorm" in name or "bias" in name
    if not excluded:
      update = update + 0.01 * w
      if optimizer == "lamb":
        update = update * np.linalg.norm(w) / np.linalg.norm(update)
    expected = w - lr_value * factor.get(name, 1.0) * update
    # float32 (1 - beta_2) is 0.00099999 in TensorFlow: about 1e-5 of an update of 0.1.
    np.testing.assert_allclose(after[name], expected, rtol=1e-5, atol=1e-5, err_msg=name)
