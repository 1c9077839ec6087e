"""tower_utils.py: N towers x batch b == 1 tower x batch N*b, placement, one copy per variable."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from core.errors import InputError
from engine import inference
from engine import input_data
import modeling
import optimization
import tower_utils

CONFIG = modeling.BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1,
                             num_attention_heads=4, intermediate_size=32,
                             max_position_embeddings=16, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
GLOBAL_BATCH, SEQ, NUM_LABELS = 6, 8, 3


def _data(seed=0):
  rng = np.random.RandomState(seed)
  ids = rng.randint(1, CONFIG.vocab_size, size=(GLOBAL_BATCH, SEQ)).astype(np.int32)
  mask = np.ones((GLOBAL_BATCH, SEQ), np.int32)
  mask[::2, 5:] = 0
  labels = rng.randint(0, NUM_LABELS, size=(GLOBAL_BATCH,)).astype(np.int32)
  return {"input_ids": ids, "input_mask": mask, "label": labels}


def classifier_tower_fn(config, num_labels=NUM_LABELS):
  """A classifier tower: BERT + softmax on the pooled output (gather => sparse gradients)."""

  def tower_fn(features, global_batch):
    del global_batch
    model = modeling.BertModel(config, True, features["input_ids"], features["input_mask"])
    weights = tf.get_variable("output_weights", [num_labels, config.hidden_size],
                              initializer=tf.truncated_normal_initializer(stddev=0.02))
    logits = tf.matmul(model.get_pooled_output(), weights, transpose_b=True)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=features["label"], logits=logits))
    return loss, {"logits": logits}

  return tower_fn


_tower_fn = classifier_tower_fn(CONFIG)


def _one_update(n_towers, data):
  """Builds n towers, returns (loss, {var: averaged grad}, {var: value after one update})."""
  with tf.Graph().as_default() as graph:
    tf.set_random_seed(7)
    features = {k: tf.constant(v) for k, v in data.items()}
    result = tower_utils.build_towers(_tower_fn, features, tower_utils.parallel_spec(n_towers))
    train_op, _ = optimization.create_train_op_from_grads(result.grads_and_vars, 1e-2, 10, 0)
    dense_grads = {v.op.name: tf.convert_to_tensor(g) for g, v in result.grads_and_vars}
    with tf.Session(graph=graph, config=tower_utils.session_config(n_towers)) as sess:
      sess.run(tf.global_variables_initializer())
      loss, grads = sess.run([result.loss, dense_grads])
      sess.run(train_op)
      values = sess.run({v.op.name: v for v in tf.trainable_variables()})
    kinds = {v.op.name: type(g).__name__ for g, v in result.grads_and_vars}
  return loss, grads, values, kinds


@pytest.mark.graph_math
@pytest.mark.parametrize("n_towers", [2, 3])
def test_n_towers_equal_one_tower_with_the_whole_batch(n_towers):
  data = _data()
  loss_1, grads_1, values_1, _ = _one_update(1, data)
  loss_n, grads_n, values_n, kinds = _one_update(n_towers, data)
  # The embedding gradient really is sparse, so the IndexedSlices path is what is compared.
  assert kinds["bert/embeddings/word_embeddings"] == "IndexedSlices"
  assert abs(loss_1 - loss_n) < 1e-5
  assert grads_1.keys() == grads_n.keys()
  for name in grads_1:
    assert np.max(np.abs(grads_1[name] - grads_n[name])) < 1e-5, name
  for name in values_1:
    assert np.max(np.abs(values_1[name] - values_n[name])) < 1e-5, name
  # The update moved the weights: the comparison is not between two untouched initial states.
  _, _, before, _ = _one_update_without_step(data)
  moved = max(np.max(np.abs(values_1[n] - before[n])) for n in before)
  assert moved > 1e-3


def _one_update_without_step(data):
  with tf.Graph().as_default() as graph:
    tf.set_random_seed(7)
    features = {k: tf.constant(v) for k, v in data.items()}
    tower_utils.build_towers(_tower_fn, features, tower_utils.parallel_spec(1))
    with tf.Session(graph=graph) as sess:
      sess.run(tf.global_variables_initializer())
      values = sess.run({v.op.name: v for v in tf.trainable_variables()})
  return None, None, values, None


def test_each_tower_runs_on_its_own_device_and_each_variable_exists_once():
  n_towers = 3
  with tf.Graph().as_default() as graph:
    features = {k: tf.constant(v) for k, v in _data().items()}
    result = tower_utils.build_towers(_tower_fn, features, tower_utils.parallel_spec(n_towers))
    train_op, _ = optimization.create_train_op_from_grads(result.grads_and_vars, 1e-2, 10, 0)

    names = [v.op.name for v in tf.global_variables()]
    assert len(names) == len(set(names))
    assert not [n for n in names if "tower" in n]
    trainable_vars = tf.trainable_variables()
    trainable = {v.op.name for v in trainable_vars}
    assert trainable == ({n for n, _ in modeling.stock_variable_shapes(CONFIG)} |
                         {"output_weights"})
    # Variables are spread over the tower devices, not piled on one.
    var_devices = {v.device for v in tf.trainable_variables()}
    assert len(var_devices) == n_towers

    # Requested placement: every op of tower i (forward and backward) asks for CPU:i, except
    # the word-embedding gather and its gradient, colocated with the table (modeling.py).
    colocated = {op.name for op in graph.get_operations() if op.name.startswith("tower_")
                 and any(g.decode().split("@", 1)[1] in trainable for g in op.colocation_groups())}
    assert colocated and all("/bert/embeddings/GatherV2" in name for name in colocated), colocated
    assert len(colocated) <= 16 * n_towers
    for i in range(n_towers):
      ops = [op for op in graph.get_operations()
             if op.name.startswith("tower_%d/" % i) and op.name not in colocated]
      assert len(ops) > 100
      assert all(op.device.endswith("CPU:%d" % i) for op in ops), i
      assert any("gradients" in op.name for op in ops)

    # Actual placement, from the step's trace: tower i's kernels executed on CPU:i.
    with tf.Session(graph=graph, config=tower_utils.session_config(n_towers)) as sess:
      sess.run(tf.global_variables_initializer())
      metadata = tf.RunMetadata()
      sess.run(train_op, options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE),
               run_metadata=metadata)
  executed = {}
  for dev_stats in metadata.step_stats.dev_stats:
    for node in dev_stats.node_stats:
      executed[node.node_name] = dev_stats.device
  table_device = [v.device for v in trainable_vars
                  if v.op.name == "bert/embeddings/word_embeddings"][0]
  for i in range(n_towers):
    tower_nodes = [n for n in executed if n.startswith("tower_%d/" % i) and n not in colocated]
    assert len(tower_nodes) > 100
    # The word-embedding gather reads the table in place (colocated with it), so only the
    # gathered rows travel to the tower; everything else runs on CPU:i.
    gather = "tower_%d/bert/embeddings/GatherV2" % i
    assert gather in colocated and executed[gather].endswith(table_device.split("/")[-1])
    assert all(executed[n].endswith("CPU:%d" % i) for n in tower_nodes), (
        i, [(n, executed[n]) for n in tower_nodes if not executed[n].endswith("CPU:%d" % i)])


def test_towers_round_robin_over_visible_gpus(monkeypatch):
  monkeypatch.setattr(tower_utils, "num_visible_gpus", lambda: 2)
  assert tower_utils.process_devices(5) == ["/device:GPU:0", "/device:GPU:1", "/device:GPU:0",
                                            "/device:GPU:1", "/device:GPU:0"]
  monkeypatch.setattr(tower_utils, "num_visible_gpus", lambda: 0)
  assert tower_utils.process_devices(3) == ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"]
  assert tower_utils.session_config(3).device_count["CPU"] == 3


def test_device_map_is_logged_with_the_physical_card(monkeypatch, caplog):
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
  with caplog.at_level("INFO"):
    tower_utils.log_device_map(["/device:GPU:0", "/device:GPU:1", "/device:GPU:0"])
  text = caplog.text
  assert "tower 0 -> /device:GPU:0 (CUDA_VISIBLE_DEVICES card 3)" in text
  assert "tower 1 -> /device:GPU:1 (CUDA_VISIBLE_DEVICES card 5)" in text
  assert "tower 2 -> /device:GPU:0 (CUDA_VISIBLE_DEVICES card 3)" in text
  # The second process of a host that took cards 6,7 of CUDA_VISIBLE_DEVICES=4,5,6,7.
  with caplog.at_level("INFO"):
    tower_utils.log_device_map(["/device:GPU:0", "/device:GPU:1"], ["6", "7"])
  assert "tower 1 -> /device:GPU:1 (CUDA_VISIBLE_DEVICES card 7)" in caplog.text


@pytest.mark.parametrize("bad", [0, -1])
def test_fewer_than_one_tower_is_an_input_error(bad):
  with pytest.raises(InputError, match="n_towers=%d: expected an integer >= 1" % bad):
    tower_utils.parallel_spec(bad)


@pytest.mark.graph_math
def test_average_gradients_of_dense_and_sparse_gradients():
  with tf.Graph().as_default(), tf.Session() as sess:
    var = tf.get_variable("v", [4, 2], initializer=tf.zeros_initializer())
    dense = [(tf.constant([[1.0, 2.0]] * 4), var), (tf.constant([[3.0, 6.0]] * 4), var)]
    sparse = [(tf.IndexedSlices(tf.constant([[2.0, 2.0]]), tf.constant([1]),
                                tf.constant([4, 2])), var),
              (tf.IndexedSlices(tf.constant([[4.0, 0.0], [1.0, 1.0]]), tf.constant([1, 3]),
                                tf.constant([4, 2])), var)]
    (avg_dense, _), = tower_utils.average_gradients([[dense[0]], [dense[1]]])
    (avg_sparse, _), = tower_utils.average_gradients([[sparse[0]], [sparse[1]]])
    assert isinstance(avg_sparse, tf.IndexedSlices)
    d, s = sess.run([avg_dense, tf.convert_to_tensor(avg_sparse)])
  np.testing.assert_allclose(d, [[2.0, 4.0]] * 4)
  np.testing.assert_allclose(s, [[0, 0], [3.0, 1.0], [0, 0], [0.5, 0.5]])


@pytest.mark.graph_math
def test_inference_keeps_every_example_in_order_when_batches_do_not_divide():
  """11 examples, 3 towers x 2 rows: the last global batch is short and padded."""
  num_examples, n_towers = 11, 3

  def input_fn(rows, seed, shard):
    del seed
    assert shard == input_data.WHOLE
    ids = np.arange(num_examples, dtype=np.int32)
    return tf.data.Dataset.from_tensor_slices({"x": ids}).batch(rows)

  def tower_fn(features, global_batch):
    del global_batch
    scale = tf.get_variable("scale", [], initializer=tf.constant_initializer(2.0))
    return None, {"doubled": tf.cast(features["x"], tf.float32) * scale}

  import tempfile  # pylint: disable=g-import-not-at-top
  prefix = tempfile.mkdtemp() + "/m.ckpt"
  with tf.Graph().as_default():
    tf.get_variable("scale", [], initializer=tf.constant_initializer(2.0))
    saver = tf.train.Saver()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      saver.save(sess, prefix)
  outputs = inference.run_inference(tower_fn, input_fn, prefix,
                                   tower_utils.parallel_spec(n_towers), 2)
  np.testing.assert_array_equal(outputs["doubled"], 2.0 * np.arange(num_examples))


@pytest.mark.graph_math
def test_replicated_inference_gives_one_towers_outputs(tmp_path):
  """Eval and predict keep a copy of the weights per device (run_setup.inference_parallel):
  every copy is filled from the checkpoint, so 3 towers give the logits of 1."""
  prefix = str(tmp_path / "m.ckpt")
  with tf.Graph().as_default():
    features = {k: tf.constant(v) for k, v in _data().items()}
    tower_utils.build_towers(_tower_fn, features, tower_utils.parallel_spec(1),
                             compute_gradients=False)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver().save(sess, prefix)

  def input_fn(rows, seed, shard):
    del seed, shard
    return tf.data.Dataset.from_tensor_slices(_data()).batch(rows)

  one, three = (inference.run_inference(
      _tower_fn, input_fn, prefix, tower_utils.parallel_spec(n, reduction=reduction), 2)
                for n, reduction in ((1, "shared"), (3, "allreduce")))
  assert one["logits"].shape == (GLOBAL_BATCH, NUM_LABELS)
  np.testing.assert_allclose(three["logits"], one["logits"], rtol=1e-5, atol=1e-6)
