"""Head first: the heads an --init_checkpoint lacks learn on frozen weights before everything trains.

In-graph: the masked LM of pretraining/mlm.py through training.build_train_graph, on every
parallel layout (towers with both reductions, accumulation, pipeline stages, fp16 and bf16):
the restored weights and their Adam slots do not move during the head-first updates, the new
head does from the first one, and everything moves after. Through the script: the plan and the
frozen masked-LM accuracy are logged and recorded, a run resumed in the middle of the phase
keeps the weights frozen until its end, and a checkpoint that has its heads trains exactly as
with --head_first_steps=0.
"""

import json

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from engine import checkpoints
from engine import head_first
from engine import training
import modeling
import optimization
from pretraining import mlm
import script_runner
import tower_utils

CONFIG = modeling.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=32,
                             max_position_embeddings=16, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
ROWS, SEQ, SLOTS = 8, 8, 3
HEAD_STEPS = 2
HELD = "bert/encoder/layer_0/attention/self/query/kernel"
NEW = "cls/predictions/transform/dense/kernel"
MLM_HEAD = 1 << [s for s, _ in checkpoints.FRESH_PARTS].index("cls/predictions/")


def _batch(seed):
  rng = np.random.RandomState(seed)
  return {
      "input_ids": rng.randint(5, CONFIG.vocab_size, (ROWS, SEQ)).astype(np.int32),
      "input_mask": np.ones((ROWS, SEQ), np.int32),
      "segment_ids": np.zeros((ROWS, SEQ), np.int32),
      "masked_lm_positions": np.tile(np.arange(1, 1 + SLOTS, dtype=np.int32), (ROWS, 1)),
      "masked_lm_ids": rng.randint(5, CONFIG.vocab_size, (ROWS, SLOTS)).astype(np.int32),
      "masked_lm_weights": np.ones((ROWS, SLOTS), np.float32),
  }


def _spec(n_towers=1, reduction="shared", accum_steps=1, pipeline_stages=1, precision="fp32",
          head_first_steps=0):
  parallel = tower_utils.parallel_spec(n_towers, reduction=reduction, accum_steps=accum_steps,
                                       pipeline_stages=pipeline_stages,
                                       num_micro_batches=2 if pipeline_stages > 1 else 1)
  return training.TrainSpec(
      output_dir=None, parallel=parallel, batch_size_per_tower=ROWS // n_towers // accum_steps,
      num_train_steps=8, num_warmup_steps=0, learning_rate=1e-2, init_checkpoint=None,
      save_checkpoints_steps=100, log_every_n_steps=1, keep_checkpoint_max=1, seed=0,
      precision=precision, head_first_steps=head_first_steps)


def _trajectory(spec, updates, new_parts=MLM_HEAD):
  """Values of HELD, NEW and HELD's adam_m after each of `updates` updates (index 0: start)."""
  rows = spec.batch_size_per_tower * spec.parallel.n_towers
  batches = [_batch(i) for i in range(updates * spec.parallel.accum_steps)]
  data = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
  with tf.Graph().as_default() as graph:
    tf.set_random_seed(3)
    features = tf.data.make_one_shot_iterator(
        tf.data.Dataset.from_tensor_slices(data).batch(rows)).get_next()
    train_graph = training.build_train_graph(
        mlm.tower_fn_builder(CONFIG, False, True), features, spec, new_parts)
    variables = {v.op.name: v for v in tf.global_variables()}
    watched = [variables[HELD], variables[NEW], variables[HELD + "/adam_m"]]
    n_devices = tower_utils.devices_per_process(spec.parallel)
    with tf.Session(graph=graph, config=tower_utils.session_config(n_devices)) as sess:
      sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
      sess.run(train_graph.sync_op)
      values = [sess.run(watched)]
      for _ in range(updates):
        results, _, _ = training.run_update(sess, train_graph, spec.parallel.accum_steps,
                                            {"step": train_graph.train_op,
                                             "metrics": train_graph.metrics})
        values.append(sess.run(watched))
  assert 0.0 <= results["metrics"]["masked_lm_accuracy"][0] <= \
      results["metrics"]["masked_lm_accuracy"][1] == ROWS // spec.parallel.accum_steps * SLOTS
  return train_graph.hold, values


@pytest.mark.parametrize("layout", [
    dict(),
    dict(n_towers=2),
    dict(n_towers=2, reduction="allreduce"),
    dict(accum_steps=2),
    dict(pipeline_stages=2),
    dict(precision="fp16"),
    dict(precision="bf16"),
])
@pytest.mark.graph_math
def test_restored_weights_stay_still_while_the_new_head_learns(layout):
  hold, values = _trajectory(_spec(head_first_steps=HEAD_STEPS, **layout), HEAD_STEPS + 2)
  assert hold.until_step == HEAD_STEPS and NEW not in hold.names and HELD in hold.names
  start = values[0]
  for step in range(1, HEAD_STEPS + 1):
    held, new, held_adam_m = values[step]
    np.testing.assert_array_equal(held, start[0])  # not one bit moved
    assert not np.any(held_adam_m), "the held variable's Adam moments stay zero"
    assert np.abs(new - values[step - 1][1]).max() > 1e-4, "the new head learns at every update"
  for step in (HEAD_STEPS + 1, HEAD_STEPS + 2):
    assert np.abs(values[step][0] - values[step - 1][0]).max() > 1e-5
    assert np.any(values[step][2])


@pytest.mark.graph_math
def test_without_new_parts_the_update_is_the_plain_one():
  hold, held_first = _trajectory(_spec(), 2, new_parts=0)
  assert hold is None
  plain_hold, plain = _trajectory(_spec(head_first_steps=0), 2)
  assert plain_hold is None
  for a, b in zip(held_first, plain):
    for x, y in zip(a, b):
      np.testing.assert_array_equal(x, y)


@pytest.mark.graph_math
def test_the_schedule_starts_again_after_the_phase():
  """H = 10, warm-up 4, 30 steps: the head warms up over 4 and holds the peak until 10; then the
  stock schedule over the 20 steps left (warm-up 4, decay to 0 at 30)."""
  steps = (0, 2, 4, 9, 10, 12, 14, 22, 30)
  with tf.Graph().as_default(), tf.Session() as sess:
    step = tf.placeholder(tf.int64, [])
    rate = optimization.learning_rate_schedule(1.0, step, 30, 4, restart_at=10)
    got = [sess.run(rate, {step: s}) for s in steps]
  expected = [0, 0.5, 1, 1, 0, 0.5, 1 - 4 / 20., 1 - 12 / 20., 0]
  np.testing.assert_allclose(got, expected, atol=1e-6)
  np.testing.assert_allclose([optimization.learning_rate_at(s, 1.0, 30, 4, restart_at=10)
                              for s in steps], expected, atol=1e-6)


def _write_checkpoint(path, names_and_shapes, seed=0):
  rng = np.random.RandomState(seed)
  with tf.Graph().as_default():
    variables = [tf.Variable(rng.normal(size=shape).astype(np.float32), name=name)
                 for name, shape in names_and_shapes]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver(variables).save(sess, path)
  return path


def test_new_parts_reads_what_the_checkpoints_lack(tmp_path):
  encoder = _write_checkpoint(str(tmp_path / "enc" / "bert_model.ckpt"),
                              [("bert/embeddings/word_embeddings", [4, 2])])
  google = _write_checkpoint(str(tmp_path / "google" / "bert_model.ckpt"), [
      ("bert/embeddings/word_embeddings", [4, 2]), ("cls/predictions/output_bias", [4]),
      ("cls/seq_relationship/output_bias", [2])])
  generator = _write_checkpoint(str(tmp_path / "gen" / "generator.ckpt"), [
      ("generator/encoder/layer_0/output/dense/kernel", [2, 2]),
      ("bert/embeddings/word_embeddings", [4, 2])])
  scopes = [s for s, _ in checkpoints.FRESH_PARTS]
  lacked = lambda mask: [s for i, s in enumerate(scopes) if mask & (1 << i)]
  assert lacked(head_first.new_parts(encoder)) == scopes
  assert lacked(head_first.new_parts(google)) == ["generator/", "discriminator_predictions/"]
  assert lacked(head_first.new_parts(encoder, [(generator, "generator/")])) == [
      "cls/predictions/", "cls/seq_relationship/", "discriminator_predictions/"]
  assert head_first.new_parts(None) == 0


def test_head_first_steps_without_an_init_checkpoint_is_logged_as_ignored(caplog):
  """From scratch nothing is restored to hold: said, as for a checkpoint with every head."""
  with caplog.at_level("WARNING"):
    assert head_first.new_parts(None) == 0
  assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
      "--head_first_steps: ignored without --init_checkpoint (from scratch every variable is "
      "new: nothing is restored to hold)"]


# Through run_pretraining_mgpu.py, on a tiny model.
TINY = dict(vocab_size=26, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=32, hidden_act="gelu", hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, max_position_embeddings=32, type_vocab_size=2,
            initializer_range=0.02)


def _run(script, *args):
  return script_runner.run_script(script, *args, timeout=300)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  """Records, a config, and two checkpoints: the encoder alone, and the encoder with its MLM
  head (as Google's)."""
  root = tmp_path_factory.mktemp("head_first")
  words = ["w%d" % i for i in range(20)]
  (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."]
                                            + words) + "\n")
  rng = np.random.RandomState(0)
  (root / "corpus.txt").write_text("".join(
      "".join(" ".join(rng.choice(words, 8)) + " .\n" for _ in range(4)) + "\n"
      for _ in range(40)))
  (root / "bert_config.json").write_text(json.dumps(TINY))
  out = _run("create_pretraining_data.py", "--input_file=%s" % (root / "corpus.txt"),
             "--output_file=%s" % (root / "d.tfrecord"), "--vocab_file=%s" % (root / "vocab.txt"),
             "--max_seq_length=32", "--dynamic_masking", "--no_nsp")
  assert out.returncode == 0, out.stderr[-2000:]
  out = _pretrain(root, root / "scratch", 2)
  assert out.returncode == 0, out.stderr[-2000:]
  full = str(root / "scratch" / "export" / "bert_model.ckpt")
  reader = tf.train.load_checkpoint(full)
  encoder = str(root / "encoder" / "bert_model.ckpt")  # the same without cls/
  with tf.Graph().as_default():
    variables = [tf.Variable(reader.get_tensor(n), name=n)
                 for n in reader.get_variable_to_shape_map() if n.startswith("bert/")]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver(variables).save(sess, encoder)
  return {"root": root, "encoder": encoder, "full": full}


def _pretrain(root, out, steps, *flags, warmup="--num_warmup_steps=1"):
  return _run("run_pretraining_mgpu.py", "--input_file=%s" % (root / "d.tfrecord"),
              "--output_dir=%s" % out, "--bert_config_file=%s" % (root / "bert_config.json"),
              "--vocab_file=%s" % (root / "vocab.txt"), "--do_train", "--train_batch_size=4",
              "--num_train_steps=%d" % steps, "--learning_rate=1e-3",
              "--save_checkpoints_steps=3", "--log_every_n_steps=1", *flags,
              *([warmup] if warmup else []))


def _values(checkpoint, prefix="bert/"):
  reader = tf.train.load_checkpoint(checkpoint)
  return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()
          if n.startswith(prefix) and "adam" not in n}


def test_a_resumed_run_keeps_the_weights_frozen_until_the_phase_ends(tiny):
  out = tiny["root"] / "resumed"
  first = _pretrain(tiny["root"], out, 3, "--init_checkpoint=%s" % tiny["encoder"],
                    "--head_first_steps=6", "--n_gpus=2")
  assert first.returncode == 0, first.stderr[-2000:]
  assert "stay frozen for the whole run" in first.stderr
  second = _pretrain(tiny["root"], out, 10, "--init_checkpoint=%s" % tiny["encoder"],
                     "--head_first_steps=6", "--n_gpus=2")
  assert second.returncode == 0, second.stderr[-2000:]
  assert "what --init_checkpoint restores, bert/* (" in second.stderr
  assert "stays frozen for updates 1-6 while what it lacks, cls/predictions/* (5), learns" \
      in second.stderr
  assert "Head first done at step 6" in second.stderr and "masked_lm_accuracy" in second.stderr
  start = _values(tiny["encoder"])
  for step, frozen in ((3, True), (6, True), (9, False)):
    values = _values(str(out / ("model.ckpt-%d" % step)))
    same = all(np.array_equal(values[n], start[n]) for n in start)
    assert same == frozen, step
  assert not np.array_equal(_values(str(out / "model.ckpt-3"), "cls/")[NEW],
                            _values(str(out / "model.ckpt-6"), "cls/")[NEW])
  info = json.loads((out / "run_info.json").read_text())
  assert info["head_first"]["steps"] == 6
  assert 0.0 <= info["head_first"]["metrics_frozen"]["masked_lm_accuracy"] <= 1.0
  assert info["schedule"]["head_first_steps"] == 6


def test_a_checkpoint_with_its_heads_trains_as_without_head_first(tiny):
  runs = {}
  for name, flags in (("asked", ("--head_first_steps=3",)), ("off", ("--head_first_steps=0",))):
    out = tiny["root"] / ("google_" + name)
    result = _pretrain(tiny["root"], out, 4, "--init_checkpoint=%s" % tiny["full"], *flags)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Head first" not in result.stderr
    runs[name] = _values(str(out / "model.ckpt-4"), "")
  assert runs["asked"].keys() == runs["off"].keys()
  for name in runs["asked"]:
    np.testing.assert_array_equal(runs["asked"][name], runs["off"][name], err_msg=name)


def test_electra_continues_the_generator_saved_beside_the_checkpoint(tiny):
  first = tiny["root"] / "electra_first"
  result = _pretrain(tiny["root"], first, 2, "--objective=electra",
                     "--generator_hidden_ratio=0.5")
  assert result.returncode == 0, result.stderr[-2000:]
  init = str(first / "export" / "bert_model.ckpt")
  again = tiny["root"] / "electra_again"
  # lr 0 at the only update (warm-up), so model.ckpt-1 holds what was restored.
  result = _pretrain(tiny["root"], again, 1, "--objective=electra", "--init_checkpoint=" + init)
  assert result.returncode == 0, result.stderr[-2000:]
  assert "continuing the generator of %s" % (first / "export" / "generator" / "generator.ckpt") \
      in result.stderr
  assert "Head first" not in result.stderr  # nothing is new: the heads and the generator exist
  saved = _values(str(first / "export" / "generator" / "generator.ckpt"), "generator/")
  restored = _values(str(again / "model.ckpt-1"), "generator/")
  assert saved and saved.keys() == restored.keys()
  for name in saved:
    np.testing.assert_array_equal(saved[name], restored[name], err_msg=name)
  info = json.loads((again / "run_info.json").read_text())
  assert info["generator_config"]["hidden_size"] == TINY["hidden_size"] // 2
  refused = _pretrain(tiny["root"], tiny["root"] / "electra_ratio", 1, "--objective=electra",
                      "--init_checkpoint=" + init, "--generator_hidden_ratio=0.25")
  assert refused.returncode == 2
  assert refused.stderr.strip().splitlines()[-1].startswith(
      "error: --generator_hidden_ratio=0.25: --init_checkpoint=%s has its generator" % init)


def test_the_warm_up_is_a_tenth_of_the_run_unless_given(tiny):
  out = tiny["root"] / "warmup_default"
  result = _pretrain(tiny["root"], out, 20, warmup=None)
  assert result.returncode == 0, result.stderr[-2000:]
  assert json.loads((out / "run_info.json").read_text())["schedule"]["num_warmup_steps"] == 2
  long_warmup = _pretrain(tiny["root"], tiny["root"] / "warmup_long", 2,
                          warmup="--num_warmup_steps=8")
  assert long_warmup.returncode == 0, long_warmup.stderr[-2000:]
  assert ("--num_warmup_steps=8 > --num_train_steps=2: the learning rate never reaches "
          "--learning_rate=0.001 (it peaks at 0.00025 at the last step)") in long_warmup.stderr


def test_two_processes_hold_the_same_weights_while_only_the_chief_reads_the_checkpoint(tiny):
  """The chief reads --init_checkpoint and tells the other process which heads are new; both
  hold the restored weights still for the head-first updates and end with the same weights."""
  from script_runner import free_ports, run_processes, script_command  # pylint: disable=g-import-not-at-top
  root, out = tiny["root"], tiny["root"] / "two_processes"
  hosts = ",".join("localhost:%d" % p for p in free_ports(2))
  commands = [script_command(
      "run_pretraining_mgpu.py", "--input_file=%s" % (root / "d.tfrecord"),
      "--output_dir=%s" % out, "--bert_config_file=%s" % (root / "bert_config.json"),
      "--vocab_file=%s" % (root / "vocab.txt"), "--init_checkpoint=%s" % tiny["encoder"],
      "--do_train", "--train_batch_size=4", "--num_train_steps=5", "--num_warmup_steps=1",
      "--head_first_steps=3", "--learning_rate=1e-3", "--save_checkpoints_steps=3",
      "--worker_hosts=%s" % hosts, "--task_index=%d" % i, "--collective_timeout_s=120", "--reduction=allreduce")
      for i in range(2)]
  results = run_processes(commands, timeout=300)
  for result in results:
    assert result.returncode == 0, result.stderr[-3000:]
    assert "stays frozen for updates 1-3" in result.stderr
    assert "Weights identical in all 2 processes at the end of training" in result.stderr
  start = _values(tiny["encoder"])
  at_3, at_5 = _values(str(out / "model.ckpt-3")), _values(str(out / "model.ckpt-5"))
  assert all(np.array_equal(at_3[n], start[n]) for n in start)
  assert not all(np.array_equal(at_5[n], start[n]) for n in start)
