"""run_pretraining_mgpu.py and heads/pretraining.py: heads, tower equivalence, dynamic masking,
and the real script end to end (train, resume, eval, predict, errors) on tiny data."""

import os
import re

from absl import flags
import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from core.errors import InputError
import create_pretraining_data
from engine import cli
from engine import input_data
from heads import pretraining as pretraining_model
import modeling
from pretraining import masking
from pretraining import mlm
from pretraining import records as pretraining_records
import run_pretraining_mgpu
import pretraining_helpers
from script_runner import run_script

FLAGS = flags.FLAGS

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SCRIPT = os.path.join(REPO, "run_pretraining_mgpu.py")
WORDS, VOCAB = pretraining_helpers.WORDS, pretraining_helpers.VOCAB
SEQ, SLOTS = 32, 5
CONFIG = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=64, max_position_embeddings=SEQ, type_vocab_size=2)
# The script runs' bert_config.json (the data fixture): one encoder layer, less to build; the
# in-graph tests (and test_pipeline's 3 stages) keep CONFIG's two.
SCRIPT_CONFIG = dict(CONFIG, num_hidden_layers=1)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """A tiny vocab, bert_config.json and three kinds of records made by create_pretraining_data."""
  paths = pretraining_helpers.write_tiny_corpus(tmp_path_factory.mktemp("pretraining"),
                                                SCRIPT_CONFIG, documents=20)
  for name, options in (("static", {}), ("dynamic_mlm", dict(dynamic_masking=True, no_nsp=True))):
    paths[name] = str(paths["root"] / ("%s.tfrecord" % name))
    create_pretraining_data.run(create_pretraining_data.Options(
        input_file=paths["corpus"], output_file=paths[name], vocab_file=paths["vocab"],
        max_seq_length=SEQ,
        max_predictions_per_seq=SLOTS, dupe_factor=1, **options))
  return paths


def test_heads_have_stock_names_and_shapes():
  config = modeling.BertConfig(**CONFIG)
  with tf.Graph().as_default():
    model = modeling.BertModel(config, False, tf.zeros([2, SEQ], tf.int32))
    _, per_slot_loss, log_probs = pretraining_model.get_masked_lm_output(
        config, model.get_sequence_output(), model.get_embedding_table(),
        tf.zeros([2, SLOTS], tf.int32), tf.zeros([2, SLOTS], tf.int32), tf.ones([2, SLOTS]))
    _, nsp_loss, nsp_log_probs = pretraining_model.get_next_sentence_output(
        config, model.get_pooled_output(), tf.zeros([2, 1], tf.int32))
    heads = {v.op.name: v.shape.as_list() for v in tf.global_variables()
             if v.op.name.startswith("cls/")}
    all_names = set(v.op.name for v in tf.global_variables())
  h, v = config.hidden_size, config.vocab_size
  assert heads == {
      "cls/predictions/transform/dense/kernel": [h, h],
      "cls/predictions/transform/dense/bias": [h],
      "cls/predictions/transform/LayerNorm/beta": [h],
      "cls/predictions/transform/LayerNorm/gamma": [h],
      "cls/predictions/output_bias": [v],
      "cls/seq_relationship/output_weights": [2, h],
      "cls/seq_relationship/output_bias": [2],
  }
  # Output embeddings are tied: no separate output matrix beside bert/ and the heads.
  assert all_names == set(heads) | set(n for n, _ in modeling.stock_variable_shapes(config))
  assert per_slot_loss.shape.as_list() == [2 * SLOTS]
  assert log_probs.shape.as_list() == [2 * SLOTS, v]
  assert nsp_loss.shape.as_list() == [2] and nsp_log_probs.shape.as_list() == [2, 2]


def test_gather_indexes_picks_each_examples_positions():
  seq = np.arange(2 * 4 * 3, dtype=np.float32).reshape([2, 4, 3])
  with tf.Graph().as_default(), tf.Session() as sess:
    got = sess.run(pretraining_model.gather_indexes(tf.constant(seq),
                                                    tf.constant([[3, 0], [1, 1]])))
  np.testing.assert_array_equal(got, [seq[0, 3], seq[0, 0], seq[1, 1], seq[1, 1]])


def _batch(rows=6, seed=0):
  """A fixed batch whose rows hold different numbers of masked slots (1 to SLOTS)."""
  rng = np.random.RandomState(seed)
  weights = np.zeros([rows, SLOTS], np.float32)
  for i in range(rows):
    weights[i, :1 + i % SLOTS] = 1.0
  mask = np.ones([rows, SEQ], np.int32)
  mask[::2, 20:] = 0
  return {
      "input_ids": rng.randint(5, len(VOCAB), size=[rows, SEQ]).astype(np.int32),
      "input_mask": mask,
      "segment_ids": (np.arange(SEQ)[None, :] >= 12).repeat(rows, 0).astype(np.int32),
      "masked_lm_positions": rng.randint(1, 20, size=[rows, SLOTS]).astype(np.int32),
      "masked_lm_ids": rng.randint(5, len(VOCAB), size=[rows, SLOTS]).astype(np.int32),
      "masked_lm_weights": weights,
      "next_sentence_labels": rng.randint(0, 2, size=[rows, 1]).astype(np.int32),
  }


def _one_update(n_towers, batch, start_values=None):
  """One training step of the pretraining tower_fn on `n_towers` towers.

  Returns:
    (loss, variable values before the step, variable values after it).
  """
  config = modeling.BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                               **CONFIG)
  return pretraining_helpers.one_update(
      mlm.tower_fn_builder(config, True, is_training=True), n_towers, batch,
      start_values)


@pytest.mark.graph_math
def test_n_towers_train_like_one_tower_with_the_whole_batch():
  batch = _batch()
  loss_1, start, after_1 = _one_update(1, batch)
  for n_towers in (2, 3):
    loss_n, _, after_n = _one_update(n_towers, batch, start)
    assert abs(loss_n - loss_1) < 1e-5, (n_towers, loss_n, loss_1)
    assert set(after_n) == set(after_1)
    for name in after_1:
      np.testing.assert_allclose(after_n[name], after_1[name], atol=1e-5, rtol=0, err_msg=name)
  # The update did something, so equal values are not trivially equal.
  assert any(np.abs(after_1[n] - start[n]).max() > 1e-4 for n in start)


def test_masked_lm_loss_is_the_stock_weighted_mean():
  """Without loss_denominator the head divides by sum(weights) + 1e-5, like stock BERT."""
  rng = np.random.RandomState(1)
  with tf.Graph().as_default(), tf.Session() as sess:
    loss, per_slot, _ = pretraining_model.get_masked_lm_output(
        modeling.BertConfig(**CONFIG),
        tf.constant(rng.randn(2, SEQ, 32).astype(np.float32)),
        tf.constant(rng.randn(len(VOCAB), 32).astype(np.float32)),
        tf.constant([[1, 2, 0], [3, 0, 0]]), tf.constant([[7, 8, 0], [9, 0, 0]]),
        tf.constant([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))
    sess.run(tf.global_variables_initializer())
    loss, per_slot = sess.run([loss, per_slot])
  np.testing.assert_allclose(loss, per_slot[[0, 1, 3]].sum() / (3 + 1e-5), rtol=1e-6)


def _dynamic_batches(data, is_training, batch_size, num_batches=None):
  """Batches of the dynamic records as masked by the script's input_fn (numpy dicts)."""
  fmt = pretraining_records.inspect_records(data["dynamic_mlm"])
  fmt["max_predictions_per_seq"] = SLOTS
  config = masking.MaskingConfig.from_vocab({t: i for i, t in enumerate(VOCAB)},
                                            max_predictions_per_seq=SLOTS)
  input_fn = pretraining_records.input_fn_builder([data["dynamic_mlm"]], fmt, is_training,
                                                   config)
  with tf.Graph().as_default(), tf.Session() as sess:
    dataset = input_fn(batch_size, 3, input_data.WHOLE)
    if num_batches:
      dataset = dataset.take(num_batches)
    next_batch = tf.data.make_one_shot_iterator(dataset).get_next()
    batches = []
    while True:
      try:
        batches.append(sess.run(next_batch))
      except tf.errors.OutOfRangeError:
        return batches


def _unmasked(batch):
  """Each row's original input_ids (labels put back at the masked slots) and its mask slots."""
  for row in range(len(batch["input_ids"])):
    ids = batch["input_ids"][row].copy()
    real = batch["masked_lm_weights"][row] > 0
    positions = batch["masked_lm_positions"][row][real]
    ids[positions] = batch["masked_lm_ids"][row][real]
    yield tuple(ids), tuple(positions)


def test_dynamic_records_are_masked_differently_at_every_pass(data):
  originals = set(tuple(ids) for batch in _dynamic_batches(data, False, 64)
                  for ids, _ in _unmasked(batch))
  seen = {}
  # About four passes over the records, in shuffled order.
  for batch in _dynamic_batches(data, True, 8, num_batches=4 * len(originals) // 8):
    assert batch["masked_lm_weights"].sum(axis=1).min() >= 1
    for ids, positions in _unmasked(batch):
      assert ids in originals  # Only the masked slots were changed.
      seen.setdefault(ids, []).append(positions)
  repeated = [masks for masks in seen.values() if len(masks) >= 2]
  assert len(repeated) > len(originals) // 2
  differ = sum(len(set(masks)) > 1 for masks in repeated)
  assert differ >= 0.8 * len(repeated), (differ, len(repeated))


def test_dynamic_eval_masks_do_not_depend_on_batch_size(data):
  first = _dynamic_batches(data, False, 4)
  second = _dynamic_batches(data, False, 7)
  for name in ("input_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights"):
    np.testing.assert_array_equal(np.concatenate([b[name] for b in first]),
                                  np.concatenate([b[name] for b in second]))


def test_input_file_forms_and_no_match(data, tmp_path):
  resolve = cli.expand_files
  root = str(data["root"])
  assert resolve(data["static"] + "," + data["static"], "input_file") == [data["static"]]
  assert data["static"] in resolve(os.path.join(root, "*.tfrecord"), "input_file")
  assert data["dynamic_mlm"] in resolve(root, "input_file")
  with pytest.raises(InputError, match="--input_file=.*nothing.*: no file matches .*nothing"):
    resolve(str(tmp_path / "nothing*.tfrecord"), "input_file")


def _run_script(args, data):
  """Runs the real script on CPU in a subprocess; returns the CompletedProcess."""
  base = ["--bert_config_file=" + data["config"], "--vocab_file=" + data["vocab"],
          "--n_gpus=2", "--train_batch_size=4", "--eval_batch_size=4", "--learning_rate=1e-3",
          "--num_warmup_steps=1", "--log_every_n_steps=1", "--save_checkpoints_steps=2"]
  return run_script("run_pretraining_mgpu.py", *(base + args), timeout=300)


def test_train_resume_eval_predict_then_continue_on_dynamic_records(data, tmp_path):
  output_dir = str(tmp_path / "out")
  common = ["--input_file=" + data["static"], "--output_dir=" + output_dir]
  first = _run_script(common + ["--do_train", "--num_train_steps=4"], data)
  assert first.returncode == 0, first.stderr[-3000:]
  assert tf.train.latest_checkpoint(output_dir).endswith("model.ckpt-4")

  # As after an interruption at step 4: the re-run continues from there, not from step 0.
  second = _run_script(common + ["--do_train", "--num_train_steps=8", "--do_eval",
                                 "--do_predict", "--max_eval_steps=0"], data)
  assert second.returncode == 0, second.stderr[-3000:]
  assert "Resuming from %s" % os.path.join(output_dir, "model.ckpt-4") in second.stderr
  assert "steps 4 -> 8" in second.stderr
  assert "step 5/8" in second.stderr and "step 4/8" not in second.stderr
  not_held_out = "eval_results.txt scores the records this run trained on (--input_file)"
  assert not_held_out in second.stderr
  assert tf.train.latest_checkpoint(output_dir).endswith("model.ckpt-8")
  _check_eval_results(output_dir, global_step=8, has_nsp=True)
  _check_predictions(os.path.join(output_dir, "predict.txt"), _count_records(data["static"]))

  # Continued pretraining on MLM-only records masked on the fly, from a checkpoint saved at
  # step 4: it starts again at step 0 (the init checkpoint's global_step is not restored).
  # The output is then exported as a Google-style folder with the model weights only.
  continued_dir = str(tmp_path / "continued")
  third = _run_script(["--input_file=" + data["dynamic_mlm"], "--output_dir=" + continued_dir,
                       "--init_checkpoint=" + os.path.join(output_dir, "model.ckpt-4"),
                       "--eval_input_file=" + data["dynamic_mlm"],
                       "--do_train", "--do_eval", "--num_train_steps=3"], data)
  assert third.returncode == 0, third.stderr[-3000:]
  assert not_held_out not in third.stderr  # --eval_input_file names the records to score.
  # No --masking: the run says which masking it applies (records do not carry theirs).
  warning = "Dynamic records are masked here, with --masking=token (the default)"
  assert warning in third.stderr and warning not in second.stderr
  # Every variable of the MLM-only graph (bert/ and cls/predictions/) came from the checkpoint.
  num_vars = len(modeling.stock_variable_shapes(modeling.BertConfig(**SCRIPT_CONFIG))) + 5
  assert "Initialized %d of %d trainable variables" % (num_vars, num_vars) in third.stderr
  _check_eval_results(continued_dir, global_step=3, has_nsp=False)
  # The export holds the model weights only, so fine-tuning from it starts at step 0.
  exported = dict(tf.train.list_variables(os.path.join(continued_dir, "export", "bert_model.ckpt")))
  assert "global_step" not in exported and "cls/predictions/output_bias" in exported
  assert not [name for name in exported if "adam" in name]
  assert os.path.exists(os.path.join(continued_dir, "export", "bert_config.json"))


def _check_eval_results(output_dir, global_step, has_nsp):
  """eval_results.txt has the stock keys (NSP ones only with NSP) and consistent values."""
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    results = dict(line.strip().split(" = ") for line in f)
  keys = ["masked_lm_accuracy", "masked_lm_loss", "global_step", "loss"]
  nsp_keys = ["next_sentence_accuracy", "next_sentence_loss"]
  for key in keys + (nsp_keys if has_nsp else []):
    assert key in results, results
  if not has_nsp:
    assert not set(nsp_keys) & set(results), results
  assert int(results["global_step"]) == global_step
  assert 0.0 <= float(results["masked_lm_accuracy"]) <= 1.0
  nsp_loss = float(results["next_sentence_loss"]) if has_nsp else 0.0
  np.testing.assert_allclose(float(results["loss"]), float(results["masked_lm_loss"]) + nsp_loss,
                             rtol=1e-6)


def _check_predictions(path, num_examples):
  """predict.txt: one line per example, `pos:original->predicted` items, then the NSP verdict."""
  with open(path) as f:
    lines = f.read().splitlines()
  assert len(lines) == num_examples
  verdicts = ["nsp:%s->%s" % (a, b) for a in ("IsNext", "NotNext") for b in ("IsNext", "NotNext")]
  for line in lines:
    items = line.split()
    assert items[-1] in verdicts, line
    assert len(items) >= 2, line
    for item in items[:-1]:
      position, tokens = item.split(":", 1)
      original, predicted = tokens.split("->")
      assert 0 < int(position) < SEQ and original in VOCAB and predicted in VOCAB, line


def _count_records(path):
  return sum(1 for _ in tf.io.tf_record_iterator(path))


@pytest.fixture
def parse_flags():
  """Parses the script's flags in this process for one test, then resets them."""
  def _parse(args):
    FLAGS.unparse_flags()
    FLAGS(["run_pretraining_mgpu.py"] + args)
  yield _parse
  FLAGS.unparse_flags()


def _setup(output_dir):
  """A one-process, one-tower run_setup.RunSetup writing to `output_dir`."""
  from engine import run_setup  # pylint: disable=g-import-not-at-top
  import tower_utils  # pylint: disable=g-import-not-at-top
  return run_setup.RunSetup(parallel=tower_utils.parallel_spec(1), output_dir=str(output_dir),
                            init_checkpoint=None, precision="fp32", batch_size_per_tower=8)


def test_shape_flags_adopt_the_records_or_must_agree(data, parse_flags):
  parse_flags([])
  fmt = run_pretraining_mgpu.record_format([data["static"]], "input_file")
  assert (fmt["max_seq_length"], fmt["max_predictions_per_seq"]) == (SEQ, SLOTS)
  assert fmt["has_nsp"] and not fmt["dynamic"]
  assert FLAGS.max_seq_length == 128  # The flag's default: the records' shapes never go into FLAGS.
  parse_flags(["--max_predictions_per_seq=7"])
  with pytest.raises(InputError, match="--max_predictions_per_seq=7 but .*static.tfrecord"):
    run_pretraining_mgpu.record_format([data["static"]], "input_file")
  with pytest.raises(InputError, match="static.tfrecord holds .* but .*dynamic_mlm.tfrecord"):
    run_pretraining_mgpu.record_format([data["static"], data["dynamic_mlm"]], "input_file")


def test_vocabulary_must_fit_the_config(data, tmp_path, parse_flags):
  bigger_vocab = str(tmp_path / "vocab.txt")
  with open(bigger_vocab, "w") as f:
    f.write("\n".join(VOCAB + ["extra"]) + "\n")
  parse_flags(["--bert_config_file=" + data["config"], "--vocab_file=" + bigger_vocab])
  fmt = run_pretraining_mgpu.record_format([data["static"]], "input_file")
  with pytest.raises(InputError, match="has %d entries but vocab_size=%d" %
                     (len(VOCAB) + 1, len(VOCAB))):
    run_pretraining_mgpu.load_model(_setup(tmp_path), fmt, [data["static"]])
  # Records holding ids beyond the config's vocabulary were made with another vocabulary.
  small_config = modeling.BertConfig(**dict(CONFIG, vocab_size=8))
  with pytest.raises(InputError, match="static.tfrecord holds token id .* but vocab_size=8"):
    run_pretraining_mgpu.check_vocab_matches(small_config, [data["static"]])


def test_export_gets_the_vocabulary_beside_the_init_checkpoint(data, tmp_path, parse_flags):
  """The README's continued pretraining passes no --vocab_file (the records hold ids): export/
  gets the vocab.txt of the release it continued, when it fits the config; else a warning."""
  release = tmp_path / "release"
  release.mkdir()
  setup = _setup(tmp_path)._replace(init_checkpoint=str(release / "bert_model.ckpt"))
  config = modeling.BertConfig(**CONFIG)
  parse_flags(["--vocab_file=" + data["vocab"]])
  assert run_pretraining_mgpu.export_vocabulary(setup, config) == (data["vocab"], None)
  parse_flags([])
  assert run_pretraining_mgpu.export_vocabulary(setup, config) == (None, None)  # none beside
  (release / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  assert run_pretraining_mgpu.export_vocabulary(setup, config) == (
      str(release / "vocab.txt"), None)
  wider = modeling.BertConfig(**dict(CONFIG, vocab_size=len(VOCAB) + 1))
  assert run_pretraining_mgpu.export_vocabulary(setup, wider) == (None, None)


def test_bad_input_exits_2_with_one_error_line(data, tmp_path):
  result = _run_script(["--input_file=" + data["static"], "--max_seq_length=64",
                        "--output_dir=" + str(tmp_path / "out"), "--do_train"], data)
  assert result.returncode == 2, result.stderr[-3000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
  assert re.search("--max_seq_length=64 but .*static.tfrecord was written with "
                   "max_seq_length=32", errors[0]), errors[0]
