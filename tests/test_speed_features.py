"""Speed features: allreduce, gradient accumulation, mixed precision, loss scaling, LAMB, flags."""

import re
import time

from absl import flags
import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from core.errors import InputError
from engine import common_flags
from engine import run_helpers
from engine import training
import modeling
import optimization
from parallel import collective
import tower_utils
from test_towers import CONFIG, _data, _tower_fn
import variable_loading

FLAGS = flags.FLAGS
ROWS_PER_UPDATE = 6


def _spec(**overrides):
  """A TrainSpec for in-graph tests: constant-free schedule (lr 1e-2, decaying over 10 steps)."""
  parallel = {name: overrides.pop(name) for name in ("n_towers", "reduction", "accum_steps",
                                                      "pack_mb") if name in overrides}
  fields = dict(output_dir=None, parallel=tower_utils.parallel_spec(**parallel),
                batch_size_per_tower=ROWS_PER_UPDATE, num_train_steps=10, num_warmup_steps=0,
                learning_rate=1e-2, init_checkpoint=None, save_checkpoints_steps=100,
                log_every_n_steps=1, keep_checkpoint_max=1, seed=0)
  fields.update(overrides)
  return training.TrainSpec(**fields)


def _two_updates_data():
  """12 rows: two updates of ROWS_PER_UPDATE rows."""
  first, second = _data(0), _data(1)
  return {k: np.concatenate([first[k], second[k]]) for k in first}


def _run_two_updates(spec, n_devices, init_values=None):
  """Trains two updates with training.build_train_graph; returns (initial, final) values.

  Initial values of the stock-named variables are loaded from `init_values` when given (so
  graphs of different shapes start from the same point), then copied into the replicas.
  """
  micro_batch = spec.batch_size_per_tower * spec.parallel.n_towers
  with tf.Graph().as_default() as graph:
    tf.set_random_seed(7)
    dataset = tf.data.Dataset.from_tensor_slices(_two_updates_data()).batch(micro_batch)
    features = tf.data.make_one_shot_iterator(dataset).get_next()
    train_graph = training.build_train_graph(_tower_fn, features, spec)
    masters = {v.op.name: v for v in train_graph.strategy.savable_variables()}
    everything = {v.op.name: v for v in tf.global_variables()}
    with tf.Session(graph=graph, config=tower_utils.session_config(n_devices)) as sess:
      sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
      variable_loading.load(sess, {masters[name]: value
                                   for name, value in (init_values or {}).items()})
      sess.run(train_graph.sync_op)
      initial = sess.run(everything)
      for _ in range(2):
        results, _, _ = training.run_update(sess, train_graph, spec.parallel.accum_steps,
                                            {"step": train_graph.train_op})
      final = sess.run(everything)
  assert results["step"] == 2
  return initial, final


@pytest.fixture(scope="module")
def one_tower_run():
  """The reference: one tower, the whole update's batch at once."""
  return _run_two_updates(_spec(), 1)


@pytest.mark.parametrize("reduction,devices,accum", [
    ("allreduce", ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"], 1),
    ("shared", ["/device:CPU:0", "/device:CPU:1"], 3),
    # Three towers on two devices (as with more towers than GPUs): towers 0 and 2 share a copy.
    ("allreduce", ["/device:CPU:0", "/device:CPU:1", "/device:CPU:0"], 2),
])
@pytest.mark.graph_math
def test_reductions_and_accumulation_equal_one_tower_with_the_whole_batch(
    one_tower_run, monkeypatch, reduction, devices, accum):
  monkeypatch.setattr(tower_utils, "process_devices", lambda n, cluster=None: list(devices))
  n_towers = len(devices)
  spec = _spec(n_towers=n_towers, batch_size_per_tower=ROWS_PER_UPDATE // (n_towers * accum),
               reduction=reduction, accum_steps=accum)
  ref_initial, ref_final = one_tower_run
  stock = {name: value for name, value in ref_initial.items()
           if name in {n for n, _ in modeling.stock_variable_shapes(CONFIG)}}
  initial, final = _run_two_updates(spec, len(set(devices)), stock)
  # Same variables and slots as one tower (global_step too), all moved by the same updates.
  masters = {n: v for n, v in final.items() if not n.startswith("replica_")}
  assert masters.keys() == ref_final.keys()
  for name in masters:
    np.testing.assert_allclose(masters[name], ref_final[name], atol=1e-5, rtol=0, err_msg=name)
  moved = max(np.max(np.abs(ref_final[n] - ref_initial[n])) for n in stock)
  assert moved > 1e-3
  # Every replica copy started identical to replica 0 and stayed identical.
  replicas = [n for n in final if n.startswith("replica_")]
  assert bool(replicas) == (reduction == "allreduce")
  for name in replicas:
    master = name.split("/", 1)[1]
    np.testing.assert_array_equal(initial[name], initial[master])
    np.testing.assert_allclose(final[name], final[master], atol=1e-6, rtol=0, err_msg=name)


def test_allreduce_replicas_live_on_their_devices_and_packs_follow_variable_order():
  with tf.Graph().as_default():
    features = {k: tf.constant(v) for k, v in _data().items()}
    result = tower_utils.build_towers(
        _tower_fn, features, tower_utils.parallel_spec(2, reduction="allreduce", pack_mb=0.001))
    assert len(result.replica_grads_and_vars) == 2
    for replica, grads_and_vars in enumerate(result.replica_grads_and_vars):
      for grad, var in grads_and_vars:
        assert var.device.endswith("CPU:%d" % replica), var.op.name
        assert grad.device.endswith("CPU:%d" % replica), var.op.name
        assert var.op.name.startswith("replica_1/") == (replica == 1)
    reduces = [op for op in tf.get_default_graph().get_operations()
               if op.type == "CollectiveReduce"]
    # 1 KB packs: several per device, each issued after the previous one on its device.
    assert len(reduces) > 4 and len(reduces) % 2 == 0
    on_cpu0 = [op for op in reduces if op.device.endswith("CPU:0")]
    for previous, op in zip(on_cpu0, on_cpu0[1:]):
      assert previous in op.control_inputs
  assert collective.pack_plan([3, None, 5, 2, 10, 1], 6) == [[0, 2], [3, 4], [5]]


@pytest.mark.graph_math
@pytest.mark.parametrize("dtype,atol", [(tf.float16, 2e-2), (tf.bfloat16, 6e-2)])
def test_mixed_precision_model_keeps_float32_variables_outputs_and_gradients(dtype, atol):
  data = _data()
  with tf.Graph().as_default(), tf.Session() as sess:
    ids, mask = tf.constant(data["input_ids"]), tf.constant(data["input_mask"])
    reference = modeling.BertModel(CONFIG, False, ids, mask)
    with tf.variable_scope(tf.get_variable_scope(), reuse=True), \
        modeling.compute_dtype_scope(dtype):
      mixed = modeling.BertModel(CONFIG, False, ids, mask)
    names = {v.op.name: v.dtype.base_dtype for v in tf.global_variables()}
    assert set(names) == {n for n, _ in modeling.stock_variable_shapes(CONFIG)}
    assert set(names.values()) == {tf.float32}
    assert modeling.get_compute_dtype() == tf.float32
    assert mixed.get_sequence_output().dtype == tf.float32
    assert mixed.get_pooled_output().dtype == tf.float32
    encoder_matmuls = [op for op in tf.get_default_graph().get_operations()
                       if op.type == "BatchMatMulV2" or op.type == "MatMul"]
    assert any(op.get_attr("T") == dtype for op in encoder_matmuls)
    grads = tf.gradients(tf.reduce_sum(mixed.get_pooled_output()), tf.trainable_variables())
    assert all(tf.convert_to_tensor(g).dtype == tf.float32 for g in grads if g is not None)
    sess.run(tf.global_variables_initializer())
    want, got = sess.run([reference.get_sequence_output(), mixed.get_sequence_output()])
  np.testing.assert_allclose(got, want, atol=atol, rtol=0)


@pytest.mark.graph_math
@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_fused_gelu_equals_gelu_and_its_gradient(dtype):
  x = np.linspace(-6.0, 6.0, 2001).astype(np.float32)
  with tf.Graph().as_default(), tf.Session() as sess:
    x32 = tf.constant(x)
    x16 = tf.cast(x32, dtype)
    fused = modeling.fused_gelu(x16)
    reference = modeling.gelu(tf.cast(x16, tf.float32))  # the same (rounded) inputs
    upstream = tf.constant(np.cos(x).astype(np.float32))
    grad_fused = tf.gradients(fused, x16, grad_ys=tf.cast(upstream, dtype))[0]
    grad_reference = tf.gradients(reference, x16, grad_ys=upstream)[0]
    assert fused.dtype == dtype and grad_fused.dtype == dtype
    got, want, got_grad, want_grad = sess.run([tf.cast(fused, tf.float32), reference,
                                               tf.cast(grad_fused, tf.float32),
                                               tf.cast(grad_reference, tf.float32)])
  # One rounding to the 16-bit type: relative 2^-8 (bfloat16) or 2^-11 (float16).
  rtol = 2.0 ** -8 if dtype == tf.bfloat16 else 2.0 ** -11
  np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6)
  np.testing.assert_allclose(got_grad, want_grad, rtol=2 * rtol, atol=1e-5)  # fp16 subnormals
  assert np.abs(want_grad).max() > 0.5 and np.abs(got - want).max() > 0  # not trivially equal


@pytest.mark.parametrize("dtype,is_training,fused", [
    (tf.bfloat16, True, True), (tf.float16, True, True), (tf.bfloat16, False, False),
    (tf.float32, True, False)])
def test_training_in_16_bits_fuses_gelu_and_nothing_else_changes(dtype, is_training, fused):
  data = _data()
  with tf.Graph().as_default() as graph:
    with modeling.compute_dtype_scope(dtype):
      modeling.BertModel(CONFIG, is_training, tf.constant(data["input_ids"]),
                         tf.constant(data["input_mask"]))
    marked = [op for op in graph.get_operations() if "_XlaCompile" in op.node_def.attr]
    tanh = [op for op in graph.get_operations() if op.type == "Tanh" and "intermediate" in op.name]
  assert len(tanh) == CONFIG.num_hidden_layers
  assert bool(marked) == fused
  assert all(op.get_attr("T") == (tf.float32 if fused else dtype) for op in tanh)


@pytest.mark.graph_math
def test_loss_scaling_skips_non_finite_updates_and_adapts_the_scale():
  with tf.Graph().as_default(), tf.Session() as sess:
    w = tf.get_variable("dense/kernel", initializer=tf.constant([1.0, 2.0]))
    grad = tf.placeholder(tf.float32, [2])
    loss_scale = optimization.DynamicLossScale(initial_scale=8.0, growth_interval=2)
    train_op, _ = optimization.create_train_op_from_grads(
        [(grad, w)], 0.1, 10, 0, loss_scale=loss_scale)
    m = tf.global_variables("dense/kernel/adam_m")[0]
    sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
    state = lambda: sess.run([tf.train.get_global_step(), w, m, loss_scale.scale])

    assert sess.run(train_op, {grad: [np.inf, 1.0]}) == 0
    step, w_value, m_value, scale = state()
    assert step == 0 and scale == 4.0
    np.testing.assert_array_equal(w_value, [1.0, 2.0])
    np.testing.assert_array_equal(m_value, [0.0, 0.0])

    assert sess.run(train_op, {grad: [0.1, 0.1]}) == 1
    assert sess.run(train_op, {grad: [0.1, 0.1]}) == 2
    step, w_value, _, scale = state()
    assert scale == 8.0  # two finite steps in a row: doubled
    assert np.all(w_value < [1.0, 2.0])
    # All variables stay float32 and stock-named; the scale is a local variable, never saved.
    assert [v.op.name for v in tf.global_variables()] == [
        "dense/kernel", "global_step", "dense/kernel/adam_m", "dense/kernel/adam_v"]


def _numpy_lamb(w, g, lr, m=0.0, v=0.0, b1=0.9, b2=0.999, eps=1e-6, wd=0.01, adapt=True):
  """One LAMB step (ALBERT's: no bias correction, decoupled weight decay, trust ratio)."""
  m = b1 * m + (1 - b1) * g
  v = b2 * v + (1 - b2) * g * g
  update = m / (np.sqrt(v) + eps) + wd * w
  ratio = 1.0
  if adapt:
    w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
    ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
  return w - lr * ratio * update, m, v


@pytest.mark.graph_math
def test_lamb_matches_a_numpy_step_with_stock_slot_names():
  w0 = np.array([[0.5, -1.0], [2.0, 0.25]], np.float32)
  b0 = np.array([1.0, 1.0], np.float32)
  gw = np.array([[0.1, -0.2], [0.05, 0.3]], np.float32)
  gb = np.array([0.2, -0.1], np.float32)
  with tf.Graph().as_default(), tf.Session() as sess:
    w = tf.get_variable("layer/dense/kernel", initializer=tf.constant(w0))
    b = tf.get_variable("layer/LayerNorm/beta", initializer=tf.constant(b0))
    train_op, lr = optimization.create_train_op_from_grads(
        [(tf.constant(gw), w), (tf.constant(gb), b)], 0.1, 10, 0, optimizer="lamb")
    sess.run(tf.global_variables_initializer())
    lr_value = sess.run(lr)
    sess.run(train_op)
    names = sorted(v.op.name for v in tf.global_variables())
    values = sess.run({v.op.name: v for v in tf.global_variables()})
  assert names == ["global_step", "layer/LayerNorm/beta", "layer/LayerNorm/beta/adam_m",
                   "layer/LayerNorm/beta/adam_v", "layer/dense/kernel",
                   "layer/dense/kernel/adam_m", "layer/dense/kernel/adam_v"]
  # Global norm of both gradients is below 1: no clipping.
  want_w, want_m, want_v = _numpy_lamb(w0, gw, lr_value)
  want_b, _, _ = _numpy_lamb(b0, gb, lr_value, wd=0.0, adapt=False)
  np.testing.assert_allclose(values["layer/dense/kernel"], want_w, rtol=1e-5)
  np.testing.assert_allclose(values["layer/dense/kernel/adam_m"], want_m, rtol=1e-5)
  np.testing.assert_allclose(values["layer/dense/kernel/adam_v"], want_v, rtol=1e-5)
  np.testing.assert_allclose(values["layer/LayerNorm/beta"], want_b, rtol=1e-5)
  # The trust ratio really changed the step: AdamW's would differ.
  assert np.max(np.abs(want_w - _numpy_lamb(w0, gw, lr_value, adapt=False)[0])) > 1e-3


def _input_fn(delay_seconds=0.0):
  """input_fn over a fixed synthetic task; each batch waits `delay_seconds` (a slow input)."""

  def slow(features):
    wait = tf.py_function(lambda: time.sleep(delay_seconds) or 0.0, [], tf.float32)
    with tf.control_dependencies([wait]):
      return {k: tf.identity(v) for k, v in features.items()}

  def input_fn(rows, seed, shard):
    del seed, shard
    dataset = tf.data.Dataset.from_tensor_slices(_two_updates_data()).repeat()
    dataset = dataset.batch(rows, drop_remainder=True)
    return dataset.map(slow) if delay_seconds else dataset

  return input_fn


def test_fp16_allreduce_accumulated_training_saves_a_stock_float32_checkpoint(tmp_path):
  spec = _spec(output_dir=str(tmp_path), n_towers=2, batch_size_per_tower=1, num_train_steps=3,
               precision="fp16", reduction="allreduce", accum_steps=3)
  assert training.global_batch_size(spec) == 6
  assert training.train(_tower_fn, _input_fn(), spec)["global_step"] == 3
  checkpoint = tf.train.latest_checkpoint(str(tmp_path))
  dtypes = tf.train.load_checkpoint(checkpoint).get_variable_to_dtype_map()
  model = {n for n, _ in modeling.stock_variable_shapes(CONFIG)} | {"output_weights"}
  want = model | {n + s for n in model for s in ("/adam_m", "/adam_v")} | {"global_step"}
  assert set(dtypes) == want
  assert {d for n, d in dtypes.items() if n != "global_step"} == {tf.float32}
  # Resuming restores replica 0 and copies it into the other replica before training on.
  spec = spec._replace(num_train_steps=4)
  assert training.train(_tower_fn, _input_fn(), spec)["global_step"] == 4


def test_bf16_training_logs_the_input_wait(tmp_path, caplog):
  spec = _spec(output_dir=str(tmp_path), n_towers=2, batch_size_per_tower=3, num_train_steps=8,
               log_every_n_steps=4, precision="bf16")
  with caplog.at_level("INFO"):
    training.train(_tower_fn, _input_fn(delay_seconds=0.3), spec)
  shares = re.findall(r"input wait ([0-9.]+)% of step time \((\d) of 4 steps waited\)",
                      caplog.text)
  assert len(shares) == 2, caplog.text[-2000:]
  # The batches buffered during the first (slow) run are used up in the first interval; then
  # every step waits about 0.3 s for a batch that the tiny model consumes in milliseconds.
  assert float(shares[1][0]) > 30.0 and int(shares[1][1]) >= 2, caplog.text[-2000:]


def test_xla_compiles_each_tower_forward_and_backward():
  with tf.Graph().as_default() as graph:
    features = {k: tf.constant(v) for k, v in _data().items()}
    tower_utils.build_towers(_tower_fn, features, tower_utils.parallel_spec(2), use_xla=True)
    for i in range(2):
      matmuls = [op for op in graph.get_operations()
                 if op.name.startswith("tower_%d/" % i) and op.type == "MatMul"]
      assert any("gradients" in op.name for op in matmuls)
      assert all(op.get_attr("_XlaCompile") for op in matmuls)
  config = tower_utils.session_config(2, use_xla=True)
  assert config.graph_options.optimizer_options.global_jit_level == tf.OptimizerOptions.ON_1


def test_speed_flags_reach_the_train_spec_and_the_global_batch(tmp_path):
  import run_classifier_mgpu  # pylint: disable=g-import-not-at-top,unused-import
  from engine import run_setup  # pylint: disable=g-import-not-at-top
  args = ["--n_gpus=2", "--train_batch_size=8", "--grad_accum_steps=4", "--use_bf16",
          "--use_xla", "--reduction=allreduce", "--optimizer=lamb", "--allreduce_pack_mb=8",
          "--output_dir=%s" % tmp_path]
  FLAGS.unparse_flags()
  try:
    FLAGS(["run_classifier_mgpu.py"] + args)
    setup = run_setup.from_flags()
    assert setup.global_batch_size == 64 and setup.is_chief
    assert (setup.output_dir, setup.precision) == (str(tmp_path), "bf16")
    spec = run_helpers.train_spec(setup, 100, 10)
    assert (spec.precision, spec.use_xla, spec.parallel.reduction, spec.parallel.accum_steps,
            spec.optimizer, spec.parallel.pack_mb) == ("bf16", True, "allreduce", 4, "lamb", 8.0)
    assert spec.parallel.n_towers == 2 and spec.parallel.cluster.num_processes == 1
    FLAGS.unparse_flags()
    FLAGS(["run_classifier_mgpu.py", "--use_fp16", "--use_bf16"])
    with pytest.raises(Exception, match="exclude each other"):
      common_flags.check_shared_flags()
  finally:
    FLAGS.unparse_flags()
  # Callers that build a TrainSpec without the speed fields get fp32 without XLA, AdamW, and
  # one process of one tower with the shared reduction.
  spec = _spec()
  assert (spec.precision, spec.use_xla, spec.optimizer) == ("fp32", False, "adamw")
  assert spec.parallel == tower_utils.parallel_spec()
  assert (spec.parallel.reduction, spec.parallel.accum_steps, spec.parallel.pack_mb) == (
      "shared", 1, tower_utils.DEFAULT_PACK_MB)
  with pytest.raises(InputError, match="--optimizer=sgd"):
    _spec(optimizer="sgd")
  with pytest.raises(InputError, match="--grad_accum_steps=0"):
    _spec(accum_steps=0)
