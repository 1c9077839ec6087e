"""--recompute=layer (parallel/recompute.py): the same update as without it, with less kept."""

import functools
import os
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import modeling
from test_pipeline import CONFIG as PIPELINE_CONFIG
from test_pipeline import _assert_same_update, _classifier_data, _one_update
from test_towers import classifier_tower_fn
import tower_utils

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))

# Two layers (test_pipeline's CONFIG has three): recomputation is per layer, and two layers
# already make one recomputed layer feed another and split over two pipeline stages; smaller
# graphs (the tests' CPU is mostly building them).
CONFIG = modeling.BertConfig(**dict(PIPELINE_CONFIG.to_dict(), num_hidden_layers=2))
DROPOUT_CONFIG = modeling.BertConfig(**dict(CONFIG.to_dict(), hidden_dropout_prob=0.1,
                                            attention_probs_dropout_prob=0.2))
CONFIGS = {"no_dropout": CONFIG, "dropout": DROPOUT_CONFIG}


def _tower(config, dtype=tf.float32):
  tower_fn = classifier_tower_fn(config)

  def tower_in_dtype(features, global_batch):
    with modeling.compute_dtype_scope(dtype):
      return tower_fn(features, global_batch)

  return tower_in_dtype


def _update(config, recompute, dtype=tf.float32, start=None, **parallel):
  spec = tower_utils.parallel_spec(recompute=recompute, **parallel)
  return _one_update(_tower(config, dtype), _classifier_data(), spec, start)


@functools.lru_cache(maxsize=None)
def _plain(config_name, n_towers=1, dtype=tf.float32):
  """The update without recomputation from the seeded start (shared by the tests that compare
  with it); config_name: "no_dropout" or "dropout"."""
  return _update(CONFIGS[config_name], "none", dtype, n_towers=n_towers)


def _kept_for_backward(graph):
  """Forward attention and feed-forward ops of the encoder whose outputs a gradient op reads."""
  kept = set()
  for op in graph.get_operations():
    if "gradients" in op.name or "/encoder/layer_" not in op.name:
      continue
    if op.type not in ("Softmax", "BatchMatMulV2", "MatMul", "Tanh", "Pow", "Mul"):
      continue
    if any("gradients" in consumer.name for out in op.outputs for consumer in out.consumers()):
      kept.add(op.name)
  return kept


@pytest.mark.graph_math
@pytest.mark.parametrize("config_name, n_towers", [("no_dropout", 1), ("dropout", 1),
                                                   ("dropout", 2)])
def test_layer_recompute_updates_like_no_recompute(config_name, n_towers):
  """Two towers without dropout repeated what one tower without it and two with it cover."""
  plain = _plain(config_name, n_towers)
  recomputed = _update(CONFIGS[config_name], "layer", start=plain[2], n_towers=n_towers)
  _assert_same_update(plain, recomputed)
  # Without recomputation the backward pass reads the layers' insides; with it, none of them.
  assert len(_kept_for_backward(plain[4])) >= 4 * CONFIG.num_hidden_layers
  assert not _kept_for_backward(recomputed[4])
  # The variables are the stock ones, one copy.
  with recomputed[4].as_default():
    names = sorted(v.op.name for v in tf.trainable_variables())
  assert names == sorted([n for n, _ in modeling.stock_variable_shapes(CONFIG)] +
                         ["output_weights"])


@pytest.mark.graph_math
def test_dropout_is_on_and_the_same_mask_is_replayed():
  """With dropout the loss differs from the dropout-free one (so the masks act), yet the
  recomputed backward pass reproduces the forward masks (same gradients as above)."""
  no_dropout, dropout = _plain("no_dropout"), _plain("dropout")
  for name, value in no_dropout[2].items():  # the same seeded start
    np.testing.assert_array_equal(dropout[2][name], value, err_msg=name)
  changed = max(np.abs(dropout[1][n] - no_dropout[1][n]).max() for n in no_dropout[1])
  assert changed > 1e-3, changed


@pytest.mark.graph_math
def test_recompute_with_pipeline_stages_and_bfloat16():
  plain = _plain("no_dropout", dtype=tf.bfloat16)
  piped = _update(CONFIG, "layer", dtype=tf.bfloat16, start=plain[2], pipeline_stages=2,
                  num_micro_batches=2)
  loss_1, grads_1, _, after_1 = plain[:4]
  loss_k, grads_k, _, after_k = piped[:4]
  # bfloat16 rounds each micro-batch's sums differently: compare at bfloat16's precision.
  assert abs(loss_1 - loss_k) < 2e-2
  for name in after_1:
    np.testing.assert_allclose(after_k[name], after_1[name], atol=2e-3, rtol=0, err_msg=name)
  unsplit = _update(CONFIG, "layer", dtype=tf.bfloat16, start=plain[2])
  _assert_same_update(plain, unsplit)


@pytest.mark.graph_math
def test_recompute_with_pipeline_stages_updates_like_the_unsplit_model():
  plain = _plain("no_dropout")
  piped = _update(CONFIG, "layer", start=plain[2], pipeline_stages=2, num_micro_batches=2,
                  n_towers=2)
  _assert_same_update(plain, piped)


def test_classifier_script_with_recompute_accumulation_and_dropout(tmp_path):
  """run_classifier_mgpu.py --recompute=layer (2 towers, accumulation, dropout on) writes the
  checkpoint a run without recomputation writes: stock names, the same values."""
  from script_runner import CHINESE_VOCAB, run_script, write_tiny_bert_config
  from test_classifier import _make_task
  data_dir = _make_task(tmp_path / "data", n_train=16)
  config = write_tiny_bert_config(tmp_path / "bert_config.json", 21128,
                                  hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
  values = {}
  for mode in ("none", "layer"):
    out = tmp_path / mode
    proc = run_script("run_classifier_mgpu.py", "--task_name=tsv", "--data_dir=%s" % data_dir,
                      "--vocab_file=%s" % CHINESE_VOCAB, "--bert_config_file=%s" % config,
                      "--output_dir=%s" % out, "--max_seq_length=16", "--train_batch_size=2",
                      "--learning_rate=1e-3", "--do_train", "--num_train_epochs=1",
                      "--n_gpus=2", "--grad_accum_steps=2", "--recompute=%s" % mode)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reader = tf.train.load_checkpoint(str(out / "model.ckpt-2"))
    values[mode] = {name: reader.get_tensor(name) for name, _ in
                    tf.train.list_variables(str(out / "model.ckpt-2"))}
  assert set(values["none"]) == set(values["layer"])
  assert {n for n, _ in modeling.stock_variable_shapes(modeling.BertConfig.from_json_file(
      config))} <= set(values["layer"])
  for name, value in values["none"].items():
    np.testing.assert_allclose(values["layer"][name], value, atol=1e-5, rtol=0, err_msg=name)


def test_recompute_lowers_the_measured_peak_memory():
  """benchmarks/memory_bench.py's allocator peak on a small BERT at seq 128: recomputation keeps
  under half of the plain step's peak."""
  import memory_bench  # pylint: disable=g-import-not-at-top
  config = modeling.BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=4,
                               num_attention_heads=4, intermediate_size=256,
                               max_position_embeddings=128)
  peaks = {mode: memory_bench.measure_spec(config, 128, 8, tower_utils.parallel_spec(
      1, recompute=mode), timed_steps=0).peaks[0] for mode in ("none", "layer")}
  assert peaks["none"] > 4e6  # activations of 4 layers x 8 rows x seq 128, not a stray tensor
  assert peaks["layer"] < 0.5 * peaks["none"], peaks


@pytest.mark.graph_math
def test_pretraining_heads_with_recompute_update_like_without():
  """The masked-LM and NSP heads (the tied word table) of run_pretraining_mgpu.py's tower."""
  from test_pipeline import _pretraining_tower, pretraining_batch, ROWS
  plain = _one_update(_pretraining_tower(), pretraining_batch(rows=ROWS),
                      tower_utils.parallel_spec(1))
  recomputed = _one_update(_pretraining_tower(), pretraining_batch(rows=ROWS),
                           tower_utils.parallel_spec(2, recompute="layer"), plain[2])
  _assert_same_update(plain, recomputed)


def test_rewrite_script_with_recompute_writes_the_same_checkpoint(tmp_path):
  """run_rewrite_finetune.py (UniLM mask through the recomputed layers): 3 updates on 2 towers
  give the checkpoint they give without recomputation."""
  import test_rewrite_script as rewrite_case  # pylint: disable=g-import-not-at-top
  data_dir = str(tmp_path / "data")
  rewrite_case._write_data(data_dir, num_hidden_layers=1)  # pylint: disable=protected-access
  values = {}
  for mode in ("none", "layer"):
    out = str(tmp_path / mode)
    result = rewrite_case._run(rewrite_case._common_flags(data_dir, out) + [  # pylint: disable=protected-access
        "--do_train", "--n_gpus=2", "--train_batch_size=4", "--learning_rate=2e-3",
        "--num_train_steps=3", "--recompute=%s" % mode])
    assert result.returncode == 0, result.stderr[-3000:]
    path = os.path.join(out, "model.ckpt-3")
    values[mode] = {name: tf.train.load_checkpoint(path).get_tensor(name)
                    for name, _ in tf.train.list_variables(path)}
  assert set(values["none"]) == set(values["layer"])
  for name, value in values["none"].items():
    np.testing.assert_allclose(values["layer"][name], value, atol=1e-5, rtol=0, err_msg=name)
