"""Pipeline stages (parallel/pipeline.py): a tower cut over K devices trains like the unsplit model."""

import os
import re
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from core.errors import InputError
import modeling
import optimization
from parallel import cluster as cluster_lib
from parallel import pipeline
from pretraining import mlm
from script_runner import CHINESE_VOCAB, assert_one_line_error, run_script, \
    write_tiny_bert_config
from test_classifier import _make_task
from test_towers import classifier_tower_fn
import tower_utils
from test_run_pretraining import CONFIG as PRETRAINING_CONFIG
from test_run_pretraining import _batch as pretraining_batch
import variable_loading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))

# Three layers: at 2 stages one stage holds two layers, at 3 stages the word table sits on the
# last stage (at 2, on the first): the plans' cases without a fourth layer's graph.
CONFIG = modeling.BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=3,
                             num_attention_heads=4, intermediate_size=32,
                             max_position_embeddings=16, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
ROWS, SEQ, NUM_LABELS = 8, 8, 3


def _classifier_data():
  rng = np.random.RandomState(0)
  mask = np.ones((ROWS, SEQ), np.int32)
  mask[::2, 5:] = 0
  return {"input_ids": rng.randint(1, CONFIG.vocab_size, size=(ROWS, SEQ)).astype(np.int32),
          "input_mask": mask,
          "label": rng.randint(0, NUM_LABELS, size=(ROWS,)).astype(np.int32)}


_classifier_tower = classifier_tower_fn(CONFIG, NUM_LABELS)


def _pretraining_tower():
  config = modeling.BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                               **PRETRAINING_CONFIG)
  return mlm.tower_fn_builder(config, True, is_training=True)


def _one_update(tower_fn, data, spec, start=None, loss_scale=None):
  """One update with `spec` (and optionally fp16-style loss scaling): (loss, {grad/name},
  {name: value before}, {name: value after}, graph, strategy)."""
  graph = tf.Graph()
  with graph.as_default():
    tf.set_random_seed(3)
    features = {k: tf.constant(v) for k, v in data.items()}
    towers = tower_utils.build_towers(
        tower_fn, features, spec,
        loss_scale=None if loss_scale is None else tf.constant(loss_scale, tf.float32))
    train_op, _ = optimization.create_replicated_train_op(towers.replica_grads_and_vars, 1e-2,
                                                          10, 0)
    savable = {v.op.name: v for v in towers.strategy.savable_variables()
               if v in tf.trainable_variables()}
    grads = {"grad/" + v.op.name: tf.convert_to_tensor(g) for g, v in towers.grads_and_vars
             if g is not None}
    sync = towers.strategy.post_init_op()
    with tower_utils.new_session(spec) as sess:
      sess.run(tf.global_variables_initializer())
      variable_loading.load(sess, {savable[name]: value for name, value in (start or {}).items()})
      sess.run(sync)
      before = sess.run(savable)
      loss, grad_values, _ = sess.run([towers.loss, grads, train_op])
      after = sess.run({v.op.name: v for v in towers.strategy.savable_variables()})
  return loss, grad_values, before, after, graph, towers.strategy


def _assert_same_update(reference, run):
  loss_1, grads_1, start, after_1 = reference[:4]
  loss_k, grads_k, _, after_k = run[:4]
  assert abs(loss_1 - loss_k) < 1e-5, (loss_1, loss_k)
  assert set(grads_1) == set(grads_k) and set(after_1) == set(after_k)
  for name in grads_1:
    np.testing.assert_allclose(grads_k[name], grads_1[name], atol=1e-5, rtol=0, err_msg=name)
  for name in after_1:
    np.testing.assert_allclose(after_k[name], after_1[name], atol=1e-5, rtol=0, err_msg=name)
  assert max(np.abs(after_1[n] - start[n]).max() for n in start) > 1e-3


def _classifier_rows(rows):
  rng = np.random.RandomState(1)
  mask = np.ones((rows, SEQ), np.int32)
  mask[1::3, 4:] = 0
  return {"input_ids": rng.randint(1, CONFIG.vocab_size, size=(rows, SEQ)).astype(np.int32),
          "input_mask": mask,
          "label": rng.randint(0, NUM_LABELS, size=(rows,)).astype(np.int32)}


@pytest.fixture(scope="module")
def unsplit_by_rows():
  """The unsplit classifier's update on 8 and 12 rows (8: 1 or 2 towers of 1 to 4
  micro-batches; 12: 2 towers of 3 or 6), the reference of every classifier test below."""
  return {rows: _one_update(_classifier_tower, _classifier_rows(rows),
                            tower_utils.parallel_spec(1)) for rows in (8, 12)}


@pytest.fixture(scope="module")
def pretraining_reference():
  return _one_update(_pretraining_tower(), pretraining_batch(rows=ROWS),
                     tower_utils.parallel_spec(1))


# (3 stages of 1 micro-batch repeated what 3 x 4 and 2 x 1 cover.)
@pytest.mark.graph_math
@pytest.mark.parametrize("stages,micro", [(2, 1), (2, 4), (3, 4)])
def test_stages_and_micro_batches_update_like_the_unsplit_classifier(unsplit_by_rows,
                                                                     stages, micro):
  spec = tower_utils.parallel_spec(1, pipeline_stages=stages, num_micro_batches=micro)
  run = _one_update(_classifier_tower, _classifier_rows(8), spec, unsplit_by_rows[8][2])
  _assert_same_update(unsplit_by_rows[8], run)
  graph, strategy = run[4], run[5]
  plan = pipeline.plan_stages(CONFIG, stages)
  devices = strategy.tower_stages[0]
  # Every op of encoder layer k (forward and backward, every micro-batch) runs on its stage.
  for op in graph.get_operations():
    match = re.search(r"bert/encoder/layer_(\d+)/", op.name)
    if match and op.type not in ("Const", "NoOp") and not op.name.startswith("bert/"):
      assert op.device == devices[plan.layer_stage[int(match.group(1))]], op.name
  # The heads and the loss run on the last stage.
  loss_ops = [op for op in graph.get_operations()
              if op.type == "SparseSoftmaxCrossEntropyWithLogits"]
  assert len(loss_ops) == micro and all(op.device == devices[-1] for op in loss_ops)
  # One copy of each variable, stock names, on its stage's device.
  stock = {n for n, _ in modeling.stock_variable_shapes(CONFIG)} | {"output_weights"}
  with graph.as_default():
    trainable = tf.trainable_variables()
  assert {v.op.name for v in trainable} == stock and len(trainable) == len(stock)
  for var in trainable:
    match = re.match(r"bert/encoder/layer_(\d+)/", var.op.name)
    if match:
      assert var.device == devices[plan.layer_stage[int(match.group(1))]], var.op.name
  # The lookup runs where the word table is: only the looked-up rows leave its stage.
  table_device = devices[plan.word_embedding_stage]
  gathers = [op for op in graph.get_operations() if op.type in ("GatherV2", "ResourceGather")
             and "word_embeddings" in op.inputs[0].name]
  assert len(gathers) == micro and all(op.device == table_device for op in gathers)


# (2 stages of 4 micro-batches repeated what 2 x 1 and 3 x 2 cover.)
@pytest.mark.graph_math
@pytest.mark.parametrize("stages,micro", [(2, 1), (3, 2)])
def test_pretraining_heads_with_the_tied_embedding_update_like_the_unsplit_model(
    pretraining_reference, stages, micro):
  spec = tower_utils.parallel_spec(1, pipeline_stages=stages, num_micro_batches=micro)
  run = _one_update(_pretraining_tower(), pretraining_batch(rows=ROWS), spec,
                    pretraining_reference[2])
  _assert_same_update(pretraining_reference, run)
  graph, strategy = run[4], run[5]
  # The word-embedding table is used by the first stage (lookup) and the last (MLM output):
  # one variable, on the stage the plan chose.
  with graph.as_default():
    tables = [v for v in tf.global_variables() if v.op.name.endswith("word_embeddings")]
  plan = pipeline.plan_stages(modeling.BertConfig(**PRETRAINING_CONFIG), stages)
  assert len(tables) == 1
  assert tables[0].device == strategy.tower_stages[0][plan.word_embedding_stage]


@pytest.mark.graph_math
@pytest.mark.parametrize("reduction", ["shared", "allreduce"])
def test_two_stages_times_two_replicas_update_like_one_tower(unsplit_by_rows, reduction):
  spec = tower_utils.parallel_spec(2, reduction=reduction, pipeline_stages=2, num_micro_batches=2)
  run = _one_update(_classifier_tower, _classifier_rows(8), spec, unsplit_by_rows[8][2])
  _assert_same_update(unsplit_by_rows[8], run)
  strategy = run[5]
  assert strategy.tower_stages == [["/device:CPU:0", "/device:CPU:1"],
                                   ["/device:CPU:2", "/device:CPU:3"]]


@pytest.mark.parametrize("vocab_size", [21128, 30522])
def test_bert_base_stages_hold_balanced_parameters(vocab_size):
  base = modeling.BertConfig(vocab_size=vocab_size, hidden_size=768, num_hidden_layers=12,
                             num_attention_heads=12, intermediate_size=3072)
  total = sum(int(np.prod(shape)) for _, shape in modeling.stock_variable_shapes(base))
  for stages in (2, 4):
    plan = pipeline.plan_stages(base, stages)
    sizes = plan.stage_parameters
    assert max(sizes) / min(sizes) <= 1.3, (stages, sizes)
    # The plan accounts for every parameter of the model.
    assert sum(sizes) == total
    assert len(plan.layer_stage) == 12 and plan.layer_stage == sorted(plan.layer_stage)


@pytest.mark.parametrize("schedule", [["--num_micro_batches=2"], ["--pipeline_schedule=1f1b"]],
                         ids=["gpipe", "1f1b"])
def test_classifier_script_with_stages_micro_batches_and_replicas(tmp_path, schedule):
  """--n_gpus=4 --pipeline_stages=2: 2 towers of 2 stages; the checkpoint is a stock one that
  an unsplit run loads and predicts the same from. 1f1b without --num_micro_batches takes one
  micro-batch per stage."""
  data_dir = _make_task(tmp_path / "data")
  # One encoder layer: the cut at 2 stages is embeddings | the layer and the head.
  config = write_tiny_bert_config(tmp_path / "bert_config.json", 21128)
  out = tmp_path / "out"
  common = ["--task_name=tsv", "--data_dir=%s" % data_dir, "--vocab_file=%s" % CHINESE_VOCAB,
            "--bert_config_file=%s" % config, "--output_dir=%s" % out, "--max_seq_length=16",
            "--train_batch_size=4", "--predict_batch_size=3", "--learning_rate=1e-3"]
  piped = run_script("run_classifier_mgpu.py", *common, "--do_train", "--do_eval",
                     "--do_predict", "--num_train_epochs=1", "--n_gpus=4",
                     "--pipeline_stages=2", *schedule)
  assert piped.returncode == 0, piped.stderr[-3000:]
  assert "tower 1 stage 1 -> /device:CPU:3" in piped.stderr
  assert "global batch 8 (4 x 2 towers x 1 processes x 1 accumulation steps), 8 steps" in \
      piped.stderr
  piped_probabilities = np.loadtxt(out / "test_results.tsv")
  assert len(piped_probabilities) == 13
  names = {name for name, _ in tf.train.list_variables(str(out / "model.ckpt-8"))}
  stock = {n for n, _ in modeling.stock_variable_shapes(modeling.BertConfig.from_json_file(
      config))}
  model = {n for n in names if not n.endswith(("adam_m", "adam_v")) and n != "global_step"}
  assert model == stock | {"output_weights", "output_bias"}

  plain = run_script("run_classifier_mgpu.py", *common, "--do_predict", "--n_gpus=1")
  assert plain.returncode == 0, plain.stderr[-3000:]
  np.testing.assert_allclose(np.loadtxt(out / "test_results.tsv"), piped_probabilities,
                             atol=1e-5, rtol=0)


@pytest.mark.parametrize("flags,message", [
    (["--n_gpus=3", "--pipeline_stages=2"], "--n_gpus=3 is not a multiple of --pipeline_stages=2"),
    (["--n_gpus=2", "--pipeline_stages=2", "--num_micro_batches=3"],
     "--train_batch_size=4 is not a multiple of --num_micro_batches=3"),
    (["--n_gpus=4", "--pipeline_stages=4"], "--pipeline_stages=4 exceeds num_hidden_layers + 1"),
])
def test_pipeline_flags_that_do_not_divide_are_one_line_errors(tmp_path, flags, message):
  data_dir = _make_task(tmp_path / "data")
  config = write_tiny_bert_config(tmp_path / "bert_config.json", 21128, num_hidden_layers=2)
  proc = run_script("run_classifier_mgpu.py", "--task_name=tsv", "--data_dir=%s" % data_dir,
                    "--vocab_file=%s" % CHINESE_VOCAB, "--bert_config_file=%s" % config,
                    "--output_dir=%s" % (tmp_path / "out"), "--max_seq_length=16",
                    "--train_batch_size=4", "--do_train", *flags)
  assert_one_line_error(proc, message)


def test_placements_map_stages_to_the_devices_they_promise():
  """inter_first takes the devices of all processes local index first; intra_first keeps a
  tower in its own process. (2 processes x 3 devices, 3 stages.)"""
  tasks = [cluster_lib.Task("worker", i, "localhost:%d" % (1 + i)) for i in range(2)]

  def device(task, index):
    return "/job:worker/replica:0/task:%d/device:CPU:%d" % (task, index)

  inter = tower_utils.parallel_spec(2, cluster=cluster_lib.Cluster(tasks, 0, "test")
                                    .in_graph_view(), pipeline_stages=3,
                                    placement="inter_first")
  assert tower_utils.stage_devices(inter) == [[device(0, 0), device(1, 0), device(0, 1)],
                                              [device(1, 1), device(0, 2), device(1, 2)]]
  assert tower_utils.devices_per_process(inter) == 3
  intra = tower_utils.parallel_spec(1, cluster=cluster_lib.Cluster(tasks, 1, "test"),
                                    pipeline_stages=3)
  assert tower_utils.stage_devices(intra) == [[device(1, 0), device(1, 1), device(1, 2)]]
  with pytest.raises(InputError, match="--placement=inter_first: expected several"):
    tower_utils.parallel_spec(1, pipeline_stages=2, placement="inter_first")


def _1f1b_gates(graph):
  return sorted(op.name for op in graph.get_operations() if "1f1b_stage_" in op.name)


def _assert_1f1b_gates(graph, stages, micro, towers):
  """Stage s's forward pass of micro-batch m waits for its backward pass of m-(K-s): one gate
  per (tower, stage, micro-batch m >= K-s), gating only micro-batch m's ops."""
  gates = _1f1b_gates(graph)
  assert len(gates) == towers * sum(micro - (stages - s) for s in range(stages))
  for name in gates:
    stage, m = map(int, re.search(r"1f1b_stage_(\d+)_micro_(\d+)", name).groups())
    gate = graph.get_operation_by_name(name)
    waited = {re.search(r"micro_(\d+)", op.name).group(1) for op in gate.control_inputs
              if re.search(r"micro_(\d+)", op.name)}
    assert waited == {str(m - (stages - stage))}, (name, waited)
    gated = [op for op in graph.get_operations() if gate in op.control_inputs]
    assert gated and all("micro_%d/" % m in op.name for op in gated), name


# 2 and 3 stages, 4 and 6 micro-batches, 1 and 2 towers (6 micro-batches of one tower, at 2 or
# 3 stages, and 3 stages x 4 micro-batches of one tower repeated what these two cover: 24 s of
# the suite).
@pytest.mark.graph_math
@pytest.mark.parametrize("stages,micro,towers", [(2, 4, 1), (3, 6, 2)])
def test_1f1b_updates_like_the_unsplit_model(unsplit_by_rows, stages, micro, towers):
  """The 1F1B schedule gives the unsplit model's update, with its gates where it promises."""
  rows = 2 * micro if towers == 2 else (12 if micro == 6 else 8)
  reference = unsplit_by_rows[rows]
  spec = tower_utils.parallel_spec(towers, pipeline_stages=stages, num_micro_batches=micro,
                                   pipeline_schedule="1f1b")
  run = _one_update(_classifier_tower, _classifier_rows(rows), spec, reference[2])
  _assert_same_update(reference, run)
  _assert_1f1b_gates(run[4], stages, micro, towers)


@pytest.mark.graph_math
def test_1f1b_with_loss_scaling_updates_like_gpipe_which_has_no_gates(unsplit_by_rows):
  """2 towers x 2 stages x 3 micro-batches (2 rows each) under both schedules, 1F1B with fp16's
  loss scaling (every micro-batch's backward pass differentiates the scaled loss and the summed
  gradients are unscaled once): the unsplit model's update, the same as each other's, and gates
  in 1F1B's graph only (3 per tower: both stages wait). (GPipe against the unsplit model at
  other shapes: test_stages_and_micro_batches_update_like_the_unsplit_classifier; 1F1B: above.)"""
  runs = {}
  for schedule, loss_scale in (("gpipe", None), ("1f1b", 512.0)):
    spec = tower_utils.parallel_spec(2, pipeline_stages=2, num_micro_batches=3,
                                     pipeline_schedule=schedule)
    runs[schedule] = _one_update(_classifier_tower, _classifier_rows(12), spec,
                                 unsplit_by_rows[12][2], loss_scale=loss_scale)
    _assert_same_update(unsplit_by_rows[12], runs[schedule])
  _assert_same_update(runs["gpipe"], runs["1f1b"])
  _assert_1f1b_gates(runs["1f1b"][4], 2, 3, 2)
  assert not _1f1b_gates(runs["gpipe"][4])


def test_1f1b_with_fewer_micro_batches_than_stages_is_an_input_error():
  with pytest.raises(InputError, match="--num_micro_batches=2 < --pipeline_stages=3"):
    tower_utils.parallel_spec(1, pipeline_stages=3, num_micro_batches=2,
                              pipeline_schedule="1f1b")
  with pytest.raises(InputError, match="--pipeline_schedule=zigzag: expected one of"):
    tower_utils.parallel_spec(1, pipeline_stages=2, num_micro_batches=2,
                              pipeline_schedule="zigzag")


def test_1f1b_peak_memory_does_not_grow_with_the_micro_batches():
  """benchmarks/memory_bench.py's measured peak per stage, K=2 stages of one layer, 2 rows per
  micro-batch: 1F1B at M=6 holds what it holds at M=2 (at most K micro-batches in flight), less
  than GPipe at M=6 (measured on stage 0: 4.1 MB at M=6, 3.7 MB at M=2, GPipe 17.5 MB)."""
  import memory_bench  # pylint: disable=g-import-not-at-top
  config = modeling.BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=256,
                               max_position_embeddings=128, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)

  def peaks(schedule, micro):
    return memory_bench.measure_spec(config, 128, 2 * micro, tower_utils.parallel_spec(
        1, pipeline_stages=2, num_micro_batches=micro, pipeline_schedule=schedule),
                                     timed_steps=0).peaks

  one_f_6, one_f_2, gpipe_6 = peaks("1f1b", 6), peaks("1f1b", 2), peaks("gpipe", 6)
  assert one_f_2[0] > 2e6, one_f_2  # activations (attention probabilities: 0.5 MB a micro-batch)
  for stage in range(2):
    assert one_f_6[stage] <= 1.3 * one_f_2[stage], (one_f_6, one_f_2)
    assert gpipe_6[stage] > one_f_6[stage], (gpipe_6, one_f_6)
