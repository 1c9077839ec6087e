"""ELECTRA with pipeline stages (parallel/pipeline.py, pretraining/electra_model.py): the
generator and the discriminator cut over K devices update like the unsplit tower."""

import os
import re
import threading

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import create_pretraining_data
import modeling
from parallel import pipeline
from pretraining import electra as electra_pretraining
from pretraining import electra_model
import pretraining_helpers
from script_runner import run_script
import tower_utils
from test_electra import CONFIG as ELECTRA_CONFIG
from test_electra import _batch as electra_batch
from test_pipeline import _assert_same_update, _one_update

CONFIG = dict(ELECTRA_CONFIG, num_hidden_layers=2)  # hidden 32: a generator of width 8
ROWS = 8
BUILD_AND_RUN_TIMEOUT_S = 240  # a deadlocked schedule fails here instead of hanging the suite


def _tower_fn():
  """The ELECTRA training tower; argmax sampling draws the same tokens for a row whichever
  micro-batch holds it (the stateful sampler would not)."""
  objective = electra_pretraining.ElectraObjective(
      modeling.BertConfig(**CONFIG), sample_fn=electra_model.most_likely_tokens)
  return objective.tower_fn_builder(False, is_training=True)


def _bounded_update(spec, start=None):
  """_one_update of the ELECTRA tower under `spec`, in a thread that must end in time."""
  result = []
  thread = threading.Thread(target=lambda: result.append(
      _one_update(_tower_fn(), electra_batch(rows=ROWS, seed=5), spec, start)), daemon=True)
  thread.start()
  thread.join(BUILD_AND_RUN_TIMEOUT_S)
  assert result, "no update within %d s (a deadlocked schedule?)" % BUILD_AND_RUN_TIMEOUT_S
  return result[0]


@pytest.fixture(scope="module")
def unsplit():
  return _bounded_update(tower_utils.parallel_spec(1))


def _stage_of_layers(graph, strategy, scope):
  """{layer k: set of devices} of the forward ops of `scope`'s encoder layers (tower 0)."""
  devices = {}
  for op in graph.get_operations():
    match = re.search(r"^tower_0/(?:micro_\d+/)?%s/encoder/layer_(\d+)/" % scope, op.name)
    if match and op.type not in ("Const", "NoOp"):
      devices.setdefault(int(match.group(1)), set()).add(op.device)
  return devices


def _waits_for(op, gate):
  """Whether `op` runs only after `gate` (through data or control edges)."""
  seen, todo = set(), [op]
  while todo:
    current = todo.pop()
    if current is gate:
      return True
    for parent in [t.op for t in current.inputs] + list(current.control_inputs):
      if parent not in seen:
        seen.add(parent)
        todo.append(parent)
  return False


@pytest.mark.graph_math
@pytest.mark.parametrize("schedule,micro", [("gpipe", 2), ("1f1b", 4)])
def test_two_stages_update_like_the_unsplit_electra(unsplit, schedule, micro):
  spec = tower_utils.parallel_spec(1, pipeline_stages=2, num_micro_batches=micro,
                                   pipeline_schedule=schedule)
  run = _bounded_update(spec, unsplit[2])
  _assert_same_update(unsplit, run)
  after = run[3]
  assert any(name.endswith("adam_m") for name in after)  # the slots were compared too
  moved = [n for n in unsplit[2] if np.abs(after[n] - unsplit[2][n]).max() > 1e-4]
  assert any(n.startswith("generator/") for n in moved)
  assert any(n.startswith("bert/encoder/") for n in moved)
  graph, strategy = run[4], run[5]
  stages = strategy.tower_stages[0]
  plan = pipeline.plan_stages(modeling.BertConfig(**CONFIG), 2)
  assert plan.layer_stage == [0, 1]
  # Both models are cut by the discriminator's plan: layer k of either on the same stage.
  for scope in ("bert", "generator"):
    placed = _stage_of_layers(graph, strategy, scope)
    assert placed == {0: {stages[0]}, 1: {stages[1]}}, (scope, placed)
  # One word table (shared), on the stage the plan chose; every lookup of it runs there.
  with graph.as_default():
    tables = [v for v in tf.global_variables() if v.op.name.endswith("word_embeddings")]
  assert len(tables) == 1 and tables[0].device == stages[plan.word_embedding_stage]
  gathers = [op for op in graph.get_operations() if op.type in ("GatherV2", "ResourceGather")
             and "word_embeddings" in op.inputs[0].name]
  assert len(gathers) == 2 * micro  # the generator's and the discriminator's, per micro-batch
  assert all(op.device == stages[plan.word_embedding_stage] for op in gathers)
  # 1F1B: stage s starts micro-batch m only after its backward pass of m-(K-s), one gate per
  # (stage, m >= K-s); a micro-batch crosses the stages twice (generator, then discriminator)
  # and both crossings wait: each lookup of micro-batch m >= 2 waits for stage 0's gate.
  gates = {tuple(map(int, re.search(r"1f1b_stage_(\d+)_micro_(\d+)$", op.name).groups())): op
           for op in graph.get_operations() if "1f1b_stage_" in op.name}
  if schedule == "gpipe":
    assert not gates
    return
  assert sorted(gates) == [(0, 2), (0, 3), (1, 1), (1, 2), (1, 3)]
  for gather in gathers:
    m = int(re.search(r"micro_(\d+)/", gather.name).group(1))
    waited = [later for later in (2, 3) if _waits_for(gather, gates[(0, later)])]
    assert (m in waited) == (m >= 2) and max(waited + [m]) == m, (gather.name, waited)

@pytest.mark.graph_math
def test_two_towers_of_two_stages_with_recomputation_update_like_the_unsplit_electra(unsplit):
  """2 towers x 2 stages, 2 micro-batches, --recompute=layer (both models' layers)."""
  spec = tower_utils.parallel_spec(2, pipeline_stages=2, num_micro_batches=2, recompute="layer")
  run = _bounded_update(spec, unsplit[2])
  _assert_same_update(unsplit, run)
  assert run[5].tower_stages == [["/device:CPU:0", "/device:CPU:1"],
                                 ["/device:CPU:2", "/device:CPU:3"]]
  # The recomputed layers: the generator's as well as the discriminator's.
  recomputed = {re.search(r"/(bert|generator)/encoder/layer_", op.name).group(1)
                for op in run[4].get_operations()
                if "recompute" in op.name and re.search(r"/(bert|generator)/encoder/layer_",
                                                        op.name)}
  assert recomputed == {"bert", "generator"}, recomputed


def _eval_results(out):
  with open(os.path.join(out, "eval_results.txt")) as f:
    return dict(line.strip().split(" = ") for line in f)


def test_script_trains_electra_on_two_towers_of_two_stages_with_1f1b_and_accumulation(tmp_path):
  """--n_gpus=4 --pipeline_stages=2 --pipeline_schedule=1f1b --num_micro_batches=2
  --grad_accum_steps=2: trains,
  evaluates on the stages, and leaves a checkpoint that an unsplit run (--n_gpus=1) loads and
  scores the same."""
  # One encoder layer (test_electra's config): the cut at 2 stages is embeddings | the layer.
  paths = pretraining_helpers.write_tiny_corpus(tmp_path, ELECTRA_CONFIG, documents=8)
  records = str(tmp_path / "records.tfrecord")
  create_pretraining_data.run(create_pretraining_data.Options(
      input_file=paths["corpus"], output_file=records, vocab_file=paths["vocab"],
      max_seq_length=ELECTRA_CONFIG["max_position_embeddings"], max_predictions_per_seq=4,
      dupe_factor=1, no_nsp=True))
  out = str(tmp_path / "out")
  common = ["--input_file=" + records, "--output_dir=" + out, "--vocab_file=" + paths["vocab"],
            "--bert_config_file=" + paths["config"], "--objective=electra", "--do_eval",
            "--max_eval_steps=2", "--eval_batch_size=4"]
  piped = run_script("run_pretraining_mgpu.py", *common, "--do_train", "--num_train_steps=3",
                     "--train_batch_size=4", "--num_warmup_steps=0", "--learning_rate=1e-3",
                     "--n_gpus=4", "--pipeline_stages=2", "--pipeline_schedule=1f1b",
                     "--num_micro_batches=2", "--grad_accum_steps=2")
  assert piped.returncode == 0, piped.stderr[-3000:]
  assert "tower 1 stage 1 -> /device:CPU:3" in piped.stderr
  assert "global batch 16 (4 x 2 towers x 1 processes x 2 accumulation steps), 3 steps; " \
      "this run: steps 0 -> 3" in piped.stderr
  piped_results = _eval_results(out)
  assert int(piped_results["global_step"]) == 3
  exported = dict(tf.train.list_variables(os.path.join(out, "export", "bert_model.ckpt")))
  assert set(n for n, _ in modeling.stock_variable_shapes(
      modeling.BertConfig(**ELECTRA_CONFIG))) < \
      set(exported)
  plain = run_script("run_pretraining_mgpu.py", *common, "--n_gpus=1")
  assert plain.returncode == 0, plain.stderr[-3000:]
  plain_results = _eval_results(out)
  for key in ("loss", "generator_masked_lm_loss", "discriminator_loss", "discriminator_auc"):
    assert abs(float(plain_results[key]) - float(piped_results[key])) < 1e-5, key
