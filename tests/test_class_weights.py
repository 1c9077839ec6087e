"""--class_weights: the weighted loss against numpy (1 and 2 towers), balanced weights, bad lists."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from classifier import model as classifier_model
from classifier import weighting
from core.errors import InputError
import modeling
import tower_utils
from script_runner import CHINESE_VOCAB, assert_one_line_error, run_script, \
    write_tiny_bert_config
from test_classifier import _common_args, _make_task

CONFIG = modeling.BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=32,
                             max_position_embeddings=16, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
WEIGHTS = [0.5, 2.0, 3.0]
# Tower 0 gets rows 0-3 (all class 0), tower 1 rows 4-7: a per-tower mean would differ.
LABELS = np.array([0, 0, 0, 0, 1, 2, 2, 1], np.int32)


def _features():
  rng = np.random.RandomState(3)
  ids = rng.randint(1, CONFIG.vocab_size, size=(8, 8)).astype(np.int32)
  mask = np.ones((8, 8), np.int32)
  mask[1::2, 5:] = 0
  return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros((8, 8), np.int32),
          "label_ids": LABELS}


def _run(n_towers):
  """(loss, logits [8, 3], {variable: gradient}) of one weighted batch on n_towers towers."""
  with tf.Graph().as_default() as graph:
    tf.set_random_seed(11)
    features = {k: tf.constant(v) for k, v in _features().items()}
    towers = tower_utils.build_towers(
        classifier_model.make_tower_fn(CONFIG, 3, False, class_weights=WEIGHTS), features,
        tower_utils.parallel_spec(n_towers))
    grads = {v.op.name: tf.convert_to_tensor(g) for g, v in towers.grads_and_vars
             if g is not None}
    with tf.Session(graph=graph, config=tower_utils.session_config(n_towers)) as sess:
      sess.run(tf.global_variables_initializer())
      # Wide output weights: the random model's logits are then far from uniform.
      head = [v for v in tf.global_variables() if v.op.name == "output_weights"][0]
      head.load(np.random.RandomState(5).normal(0.0, 2.0, [3, CONFIG.hidden_size]), sess)
      return sess.run([towers.loss, towers.outputs["logits"], grads])


def _log_softmax(logits):
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("n_towers", [1, 2])
def test_weighted_loss_is_the_weighted_mean_over_the_global_batch(n_towers):
  loss, logits, _ = _run(n_towers)
  ce = -_log_softmax(logits.astype(np.float64))[np.arange(8), LABELS]
  w = np.array(WEIGHTS)[LABELS]
  hand = np.sum(w * ce) / np.sum(w)
  assert abs(loss - hand) < 1e-5 * max(1.0, hand), (loss, hand)
  # Not the plain mean, nor the mean of per-tower weighted means (the towers hold unequal
  # weight: 4 x 0.5 against 2 x 2 + 2 x 3).
  assert abs(hand - np.mean(ce)) > 1e-3
  per_tower = np.mean([np.sum(w[s] * ce[s]) / np.sum(w[s]) for s in (slice(0, 4), slice(4, 8))])
  assert abs(hand - per_tower) > 1e-3


def test_two_towers_give_the_gradients_of_one():
  _, _, one = _run(1)
  _, _, two = _run(2)
  assert sorted(one) == sorted(two)
  for name in one:
    np.testing.assert_allclose(two[name], one[name], rtol=2e-4, atol=1e-6, err_msg=name)


def test_balanced_weights_and_lists():
  labels = ["neg"] * 2 + ["pos"] * 8
  assert weighting.resolve("balanced", ["neg", "pos"], labels) == [10 / (2 * 2), 10 / (2 * 8)]
  assert weighting.resolve(weighting.parse("none"), ["neg", "pos"], labels) is None
  assert weighting.resolve(weighting.parse(" 1, 2.5"), ["neg", "pos"]) == [1.0, 2.5]
  with pytest.raises(InputError, match="3 weight\\(s\\) given for 2 labels"):
    weighting.resolve(weighting.parse("1,2,3"), ["neg", "pos"])
  with pytest.raises(InputError, match="no training example has the label\\(s\\) mid"):
    weighting.resolve("balanced", ["mid", "neg", "pos"], labels)


@pytest.mark.parametrize("value,fragment", [
    ("1,x", "item 2 ('x') is not a number"),
    ("1,-2", "item 2 (-2) must be a finite number >= 0"),
    ("nan,1", "item 1 (nan) must be a finite number"),
    ("0,0", "every weight is 0"),
])
def test_malformed_weight_lists(value, fragment):
  with pytest.raises(InputError, match=fragment.replace("(", "\\(").replace(")", "\\)")):
    weighting.parse(value)


@pytest.mark.parametrize("value,fragment", [
    ("1,2,3", "--class_weights: 3 weight(s) given for 2 labels (neg, pos"),
    ("1,-1", "--class_weights=1,-1: item 2 (-1) must be a finite number >= 0"),
    ("1,abc", "--class_weights=1,abc: item 2 ('abc') is not a number"),
])
def test_bad_weight_lists_stop_the_script_before_work(tmp_path, value, fragment):
  data_dir = _make_task(tmp_path / "data", n_train=8, n_dev=4, n_test=3)
  config = write_tiny_bert_config(tmp_path / "bert_config.json", 21128)
  proc = run_script("run_classifier_mgpu.py", *_common_args(
      data_dir, tmp_path / "out", config, "--do_train", "--num_train_epochs=1",
      "--class_weights=%s" % value))
  assert_one_line_error(proc, fragment)
  assert not any(p.name.endswith(".tf_record") for p in (tmp_path / "out").iterdir())


def test_balanced_training_keeps_the_best_macro_f1(tmp_path):
  """Imbalanced data (1 neg : 3 pos), balanced weights logged, best checkpoint by macro_f1."""
  data_dir = _make_task(tmp_path / "data", n_train=32, n_dev=8, n_test=3)
  rows = (data_dir / "train.tsv").read_text(encoding="utf-8").splitlines()
  kept = [r for i, r in enumerate(rows) if r.endswith("pos") or i % 6 == 1]
  (data_dir / "train.tsv").write_text("\n".join(kept) + "\n", encoding="utf-8")
  n_neg = sum(r.endswith("neg") for r in kept)
  config = write_tiny_bert_config(tmp_path / "bert_config.json", 21128)
  out = tmp_path / "out"
  proc = run_script("run_classifier_mgpu.py", *_common_args(
      data_dir, out, config, "--do_train", "--do_eval", "--num_train_steps=8",
      "--class_weights=balanced", "--eval_every_n_steps=4", "--keep_best",
      "--best_metric=macro_f1", "--early_stopping_patience=3"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  expected = "neg=%.4g, pos=%.4g" % (len(kept) / (2.0 * n_neg),
                                      len(kept) / (2.0 * (len(kept) - n_neg)))
  assert "Class weights (--class_weights): " + expected in proc.stderr
  best = dict(l.split(" = ") for l in (out / "best_results.txt").read_text().splitlines())
  assert best["best_metric"] == "macro_f1"
  history = (out / "eval_history.tsv").read_text().splitlines()
  column = history[0].split("\t").index("macro_f1")
  scores = {int(l.split("\t")[0]): float(l.split("\t")[column]) for l in history[1:]}
  assert sorted(scores) == [4, 8]
  assert abs(float(best["macro_f1"]) - max(scores.values())) < 1e-5
  assert (out / "best" / ("model.ckpt-%s.index" % best["global_step"])).exists()
  # --do_eval's results are the evaluation of step 8 made during training, not a second pass.
  assert "model.ckpt-8: the one made during training" in proc.stderr, proc.stderr[-3000:]
  final = dict(l.split(" = ") for l in (out / "eval_results.txt").read_text().splitlines())
  assert int(final["global_step"]) == 8 and abs(float(final["macro_f1"]) - scores[8]) < 1e-6
