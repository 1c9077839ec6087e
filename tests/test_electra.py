"""ELECTRA (run_pretraining_mgpu.py --objective=electra): shared embeddings, corruption and
labels, loss weights, no gradient through the sampling, towers, and the script end to end with
its export fine-tuned by the classifier."""

import os
import random

from absl import flags
import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from core.errors import InputError
import create_pretraining_data
import modeling
from pretraining import electra as electra_pretraining
from pretraining import electra_model
import pretraining_helpers
import run_pretraining_mgpu
from script_runner import run_script

WORDS, VOCAB = pretraining_helpers.WORDS, pretraining_helpers.VOCAB
SEQ, SLOTS = 16, 4
CONFIG = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=64, max_position_embeddings=SEQ, type_vocab_size=2,
              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
EMBEDDINGS = ("bert/embeddings/word_embeddings", "bert/embeddings/position_embeddings",
              "bert/embeddings/token_type_embeddings")


def _config():
  return modeling.BertConfig(**CONFIG)


def _batch(rows=4, seed=0):
  """A fixed batch; rows hold 1 to SLOTS real slots at distinct positions, the rest padding."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(6, len(VOCAB), size=[rows, SEQ]).astype(np.int32)
  ids[:, 0] = VOCAB.index("[CLS]")
  mask = np.ones([rows, SEQ], np.int32)
  mask[1::2, 12:] = 0
  ids[mask == 0] = 0
  positions = np.zeros([rows, SLOTS], np.int32)
  labels = np.zeros([rows, SLOTS], np.int32)
  weights = np.zeros([rows, SLOTS], np.float32)
  for i in range(rows):
    count = 1 + i % SLOTS
    chosen = np.sort(rng.choice(np.arange(1, 12), size=count, replace=False))
    positions[i, :count] = chosen
    labels[i, :count] = ids[i, chosen]
    weights[i, :count] = 1.0
    ids[i, chosen] = VOCAB.index("[MASK]")
  return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids),
          "masked_lm_positions": positions, "masked_lm_ids": labels,
          "masked_lm_weights": weights}


def _build(batch, disc_weight=50.0, sample_fn=electra_model.most_likely_tokens, **kwargs):
  features = {k: tf.constant(v) for k, v in batch.items()}
  config = _config()
  return electra_model.Electra(config, electra_model.generator_config(config, 0.25), True,
                               features, disc_weight, sample_fn, **kwargs)


@pytest.fixture(scope="module")
def built():
  """One ELECTRA graph (argmax sampling) with its session, built once for several tests."""
  graph = tf.Graph()
  with graph.as_default():
    model = _build(_batch())
    sess = tf.Session(graph=graph)
    sess.run(tf.global_variables_initializer())
  yield graph, model, sess
  sess.close()


def test_one_copy_of_each_shared_embedding_and_stock_discriminator_names(built):
  graph, _, _ = built
  config = _config()
  gen = electra_model.generator_config(config, 0.25)
  assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size,
          gen.num_hidden_layers) == (8, 1, 16, 1)
  with graph.as_default():
    shapes = {v.op.name: v.shape.as_list() for v in tf.global_variables()}
  for name in EMBEDDINGS:
    assert name in shapes
  # No second table anywhere: every embedding variable is the discriminator's.
  assert [n for n in shapes if "embeddings" in n and not n.startswith("bert/embeddings/")] == [
      "generator/embeddings_project/kernel", "generator/embeddings_project/bias"]
  stock = dict(modeling.stock_variable_shapes(config))
  bert = {n: s for n, s in shapes.items() if n.startswith("bert/")}
  assert bert == {n: list(s) for n, s in stock.items()}
  others = set(shapes) - set(bert)
  assert all(n.startswith(("generator/", "discriminator_predictions/")) for n in others), others
  h, hg, v = config.hidden_size, gen.hidden_size, config.vocab_size
  assert shapes["generator/embeddings_project/kernel"] == [h, hg]
  assert shapes["generator/cls/predictions/transform/dense/kernel"] == [hg, h]
  assert shapes["generator/cls/predictions/output_bias"] == [v]
  assert shapes["generator/encoder/layer_0/attention/self/query/kernel"] == [hg, hg]
  assert shapes["discriminator_predictions/output/kernel"] == [h, 1]


def test_replacements_only_at_masked_positions_and_labels():
  batch = _batch()
  # Slot samples: row 0's one slot gets its original back (counts as original); the others
  # get token "zulu" or "yankee"; padding slots carry a sample too, which must be ignored.
  samples = np.full([4, SLOTS], VOCAB.index("zulu"), np.int32)
  samples[:, 1::2] = VOCAB.index("yankee")
  samples[0, 0] = batch["masked_lm_ids"][0, 0]
  with tf.Graph().as_default(), tf.Session() as sess:
    original, corrupted, replaced = sess.run(electra_model.corrupt(
        tf.constant(batch["input_ids"]), tf.constant(batch["masked_lm_positions"]),
        tf.constant(batch["masked_lm_ids"]), tf.constant(batch["masked_lm_weights"]),
        tf.constant(samples)))
  expected_original = batch["input_ids"].copy()
  expected_corrupted = batch["input_ids"].copy()
  for i in range(4):
    for j in range(SLOTS):
      if batch["masked_lm_weights"][i, j] > 0:
        pos = batch["masked_lm_positions"][i, j]
        expected_original[i, pos] = batch["masked_lm_ids"][i, j]
        expected_corrupted[i, pos] = samples[i, j]
  np.testing.assert_array_equal(original, expected_original)
  np.testing.assert_array_equal(corrupted, expected_corrupted)
  assert VOCAB.index("[MASK]") not in original
  np.testing.assert_array_equal(replaced, (expected_corrupted != expected_original) * 1.0)
  # Changed tokens are masked positions only; the sample equal to the original is not counted.
  changed = np.argwhere(corrupted != original)
  masked = {(i, p) for i in range(4) for p, w in zip(batch["masked_lm_positions"][i],
                                                     batch["masked_lm_weights"][i]) if w > 0}
  assert {tuple(c) for c in changed} == masked - {(0, batch["masked_lm_positions"][0, 0])}
  assert replaced[0, batch["masked_lm_positions"][0, 0]] == 0.0
  assert replaced.sum() == len(masked) - 1


def test_loss_is_generator_plus_weighted_discriminator_loss(built):
  graph, model, sess = built
  with graph.as_default():
    gen, disc, total, logits, replaced = sess.run(
        [model.generator_loss, model.discriminator_loss, model.loss, model.disc_logits,
         model.replaced])
  np.testing.assert_allclose(total, gen + 50.0 * disc, rtol=1e-6)
  # The discriminator loss is the mean sigmoid cross-entropy over the real tokens.
  mask = _batch()["input_mask"].astype(bool)
  p = 1.0 / (1.0 + np.exp(-logits))
  bce = -(replaced * np.log(p) + (1 - replaced) * np.log(1 - p))
  np.testing.assert_allclose(disc, bce[mask].mean(), rtol=1e-5)
  assert gen > 0 and disc > 0
  with tf.Graph().as_default(), tf.Session() as sess2:
    other = _build(_batch(), disc_weight=1.0)
    sess2.run(tf.global_variables_initializer())
    g, d, t = sess2.run([other.generator_loss, other.discriminator_loss, other.loss])
  np.testing.assert_allclose(t, g + d, rtol=1e-6)


def test_generator_gets_no_gradient_from_the_discriminator_loss(built):
  graph, model, _ = built
  with graph.as_default():
    variables = tf.trainable_variables()
    generator_vars = [v for v in variables if v.op.name.startswith("generator/")]
    assert len(generator_vars) > 10
    disc_grads = tf.gradients(model.discriminator_loss, generator_vars)
    assert all(g is None for g in disc_grads)
    # ... while its own loss reaches every generator variable, and the shared embeddings get
    # gradients from both losses.
    assert all(g is not None for g in tf.gradients(model.generator_loss, generator_vars))
    word = [v for v in variables if v.op.name == EMBEDDINGS[0]]
    assert tf.gradients(model.discriminator_loss, word)[0] is not None
    assert tf.gradients(model.generator_loss, word)[0] is not None
  # Also with real sampling: the sampled ids carry no gradient.
  with tf.Graph().as_default():
    sampled = _build(_batch(), sample_fn=electra_model.sample_tokens)
    generator_vars = [v for v in tf.trainable_variables()
                      if v.op.name.startswith("generator/")]
    assert all(g is None for g in tf.gradients(sampled.discriminator_loss, generator_vars))


def _one_update(n_towers, batch, start_values=None):
  """One training step of the ELECTRA tower_fn (argmax sampling) on `n_towers` towers."""
  objective = electra_pretraining.ElectraObjective(
      _config(), sample_fn=electra_model.most_likely_tokens)
  return pretraining_helpers.one_update(objective.tower_fn_builder(False, is_training=True),
                                       n_towers, batch, start_values)


@pytest.mark.graph_math
def test_two_towers_train_like_one_tower_with_the_whole_batch():
  batch = _batch(rows=4, seed=3)
  loss_1, start, after_1 = _one_update(1, batch)
  loss_2, _, after_2 = _one_update(2, batch, start)
  assert abs(loss_2 - loss_1) < 1e-5, (loss_2, loss_1)
  assert set(after_2) == set(after_1)
  for name in after_1:
    np.testing.assert_allclose(after_2[name], after_1[name], atol=1e-5, rtol=0, err_msg=name)
  moved = [n for n in start if np.abs(after_1[n] - start[n]).max() > 1e-4]
  assert any(n.startswith("generator/") for n in moved)
  assert any(n.startswith("discriminator_predictions/") for n in moved)


def test_roc_auc_matches_pair_counting():
  rng = np.random.RandomState(0)
  labels = rng.rand(200) < 0.3
  scores = np.round(rng.rand(200) + labels * 0.3, 1)  # Rounded: many ties.
  pos, neg = scores[labels], scores[~labels]
  pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
  assert abs(electra_pretraining.roc_auc(labels, scores) - pairs) < 1e-12
  assert electra_pretraining.roc_auc(np.array([True, False]), np.array([0.9, 0.1])) == 1.0


def test_sampling_from_non_finite_logits_stays_inside_the_vocabulary():
  """NaN logits (weights blown up by a huge learning rate) make tf.random.categorical return V,
  past the vocabulary; sample_tokens keeps every id a valid row of the embedding table, so the
  step ends in a non-finite loss (a reported divergence) instead of a failed lookup."""
  vocab = 7
  log_probs = np.zeros([6, vocab], np.float32)
  log_probs[0] = np.nan
  log_probs[1, 3] = np.nan
  log_probs[2] = -np.inf
  log_probs[3, :] = np.log(np.eye(vocab)[4] + 1e-30)  # all on token 4
  with tf.Graph().as_default(), tf.Session() as sess:
    raw = tf.reshape(tf.random.categorical(tf.constant(log_probs), 1, seed=1), [-1])
    stateful = electra_model.sample_tokens(tf.constant(log_probs))
    stateless = electra_model.sample_tokens(tf.constant(log_probs), seed=[3, 0])
    raw, stateful, stateless = sess.run([raw, stateful, stateless])
  assert raw[0] == vocab  # what TensorFlow does: an id one past the vocabulary
  for ids in (stateful, stateless):
    assert ids.min() >= 0 and ids.max() < vocab, ids
    assert ids[3] == 4  # finite rows sample as before


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """Vocab, config and MLM-only records of a tiny corpus, plus a tiny classification task."""
  paths = pretraining_helpers.write_tiny_corpus(tmp_path_factory.mktemp("electra"), CONFIG,
                                                documents=12, sentences=(2, 4),
                                                words=(4, 10))
  root, rng = paths["root"], random.Random(0)
  records = str(root / "records.tfrecord")
  create_pretraining_data.run(create_pretraining_data.Options(
      input_file=paths["corpus"], output_file=records, vocab_file=paths["vocab"],
      max_seq_length=SEQ, max_predictions_per_seq=SLOTS, dupe_factor=1, no_nsp=True))
  task = root / "task"
  task.mkdir()
  for split, rows in (("train", 32), ("dev", 8)):
    with open(str(task / ("%s.tsv" % split)), "w") as f:
      for i in range(rows):
        label = "pos" if i % 2 else "neg"
        word = "alpha" if i % 2 else "zulu"
        f.write("%s %s bravo\t%s\n" % (word, rng.choice(WORDS), label))
  return dict(paths, records=records, task=str(task))


def test_script_trains_resumes_evaluates_predicts_and_exports_stock_bert(data, tmp_path):
  out = str(tmp_path / "electra")
  common = ["--input_file=" + data["records"], "--output_dir=" + out,
            "--vocab_file=" + data["vocab"], "--bert_config_file=" + data["config"],
            "--objective=electra", "--train_batch_size=4", "--n_gpus=2",
            "--num_warmup_steps=0", "--learning_rate=1e-3", "--save_checkpoints_steps=3"]
  first = run_script("run_pretraining_mgpu.py", *(common + ["--do_train", "--num_train_steps=3"]))
  assert first.returncode == 0, first.stderr[-3000:]
  second = run_script("run_pretraining_mgpu.py",
                      *(common + ["--do_train", "--num_train_steps=6", "--do_eval",
                                  "--do_predict", "--max_eval_steps=0", "--eval_batch_size=4"]))
  assert second.returncode == 0, second.stderr[-3000:]
  assert "Resuming from %s" % os.path.join(out, "model.ckpt-3") in second.stderr
  with open(os.path.join(out, "eval_results.txt")) as f:
    results = dict(line.strip().split(" = ") for line in f)
  assert int(results["global_step"]) == 6
  for key in ("generator_masked_lm_accuracy", "discriminator_accuracy",
              "discriminator_precision", "discriminator_recall", "discriminator_auc"):
    assert 0.0 <= float(results[key]) <= 1.0, (key, results)
  np.testing.assert_allclose(
      float(results["loss"]),
      float(results["generator_masked_lm_loss"]) + 50 * float(results["discriminator_loss"]),
      rtol=1e-5)
  assert 0 < int(results["replaced_tokens"]) < int(results["real_tokens"])
  with open(os.path.join(out, "predict.txt")) as f:
    lines = f.read().splitlines()
  num_records = sum(1 for _ in tf.io.tf_record_iterator(data["records"]))
  assert len(lines) == num_records
  items = [item for line in lines for item in line.split()]
  replaced = [item for item in items if item.endswith((":caught", ":missed"))]
  assert len(replaced) == int(results["replaced_tokens"])
  for item in replaced:
    position, rest = item.split(":", 1)
    original, replacement = rest.rsplit(":", 1)[0].split("->")
    assert 0 < int(position) < SEQ and original in VOCAB and replacement in VOCAB
    assert original != replacement

  # export/ is a stock BERT (exactly the stock set of bert/ names) plus the discriminator's
  # head; no generator.
  exported = dict(tf.train.list_variables(os.path.join(out, "export", "bert_model.ckpt")))
  assert set(exported) == set(n for n, _ in modeling.stock_variable_shapes(_config())) | {
      "discriminator_predictions/dense/kernel", "discriminator_predictions/dense/bias",
      "discriminator_predictions/output/kernel", "discriminator_predictions/output/bias"}
  generator = dict(tf.train.list_variables(
      os.path.join(out, "export", "generator", "generator.ckpt")))
  assert "generator/embeddings_project/kernel" in generator
  assert EMBEDDINGS[0] in generator and not [n for n in generator if "adam" in n]

  # The classifier fine-tunes from it with its usual flags.
  clf = run_script("run_classifier_mgpu.py", "--task_name=tsv", "--data_dir=" + data["task"],
                   "--vocab_file=" + os.path.join(out, "export", "vocab.txt"),
                   "--bert_config_file=" + os.path.join(out, "export", "bert_config.json"),
                   "--init_checkpoint=" + os.path.join(out, "export", "bert_model.ckpt"),
                   "--output_dir=" + str(tmp_path / "clf"), "--do_train", "--do_eval",
                   "--max_seq_length=" + str(SEQ), "--train_batch_size=8",
                   "--num_train_epochs=1", "--learning_rate=1e-3")
  assert clf.returncode == 0, clf.stderr[-3000:]
  n_stock = len(modeling.stock_variable_shapes(_config()))
  assert "Initialized %d of %d trainable variables" % (n_stock, n_stock + 2) in clf.stderr


@pytest.mark.parametrize("args, fragment", [
    (["--generator_hidden_ratio=0"], "--generator_hidden_ratio=0.0: expected a value in (0, 1]"),
    (["--disc_weight=-1"], "--disc_weight=-1.0: expected a number >= 0"),
])
def test_bad_electra_flags_are_one_line_errors(args, fragment):
  flags.FLAGS.unparse_flags()
  try:
    flags.FLAGS(["run_pretraining_mgpu.py", "--objective=electra"] + args)
    with pytest.raises(InputError) as error:
      run_pretraining_mgpu.objective_from_flags(_config())
    assert fragment in str(error.value)
  finally:
    flags.FLAGS.unparse_flags()


def test_a_generator_beside_the_init_checkpoint_cut_short_is_one_error_naming_it(tmp_path):
  """export/generator/generator.ckpt, continued by a run from export/bert_model.ckpt, is read
  back whole where it is found: its data file cut short is an InputError naming that file
  (restoring it failed later as an internal OutOfRangeError)."""
  folder = tmp_path / "generator"
  folder.mkdir()
  with tf.Graph().as_default():
    table = tf.get_variable("generator/dense/kernel", initializer=np.ones((8, 4), np.float32))
    with tf.Session() as sess:
      sess.run(table.initializer)
      tf.train.Saver([table]).save(sess, str(folder / "generator.ckpt"), write_meta_graph=False)
  (folder / "generator_config.json").write_text(modeling.BertConfig(30).to_json_string())
  init = str(tmp_path / "bert_model.ckpt")
  assert electra_pretraining.companion_generator(init)[0] == str(folder / "generator.ckpt")
  os.truncate(str(folder / "generator.ckpt.data-00000-of-00001"), 64)
  with pytest.raises(InputError, match=r"--init_checkpoint=\S+bert_model\.ckpt has its generator "
                                       r"beside it, \S+generator\.ckpt: the checkpoint cannot be "
                                       r"used: \S+generator\.ckpt\.data-00000-of-00001 is cut "
                                       r"short \(reading generator/dense/kernel"):
    electra_pretraining.companion_generator(init)
