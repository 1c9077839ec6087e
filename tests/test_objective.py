"""pretraining/objective.py: the contract is enough to write a third objective.

A toy objective built from objective.Objective alone (token-level "is this the original
token?", spotting the corruption the records already hold, with no generator) goes the way
run_pretraining_mgpu.py takes an objective: training.train on two towers, a resume, export/,
inference.run_inference, eval_results.txt's metrics and predict.txt's lines; and it learns.
"""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import create_pretraining_data
from engine import checkpoints
from engine import inference
from engine import training
import modeling
from pretraining import objective
from pretraining import records as pretraining_records
import pretraining_helpers
import tower_utils

VOCAB = pretraining_helpers.VOCAB
SEQ, SLOTS, TOWERS, ROWS = 32, 5, 2, 8
CONFIG = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=64, max_position_embeddings=SEQ, type_vocab_size=2)


def _real_tokens(features):
  return tf.reduce_sum(tf.cast(features["input_mask"], tf.float32))


class OriginalTokenObjective(objective.Objective):
  """Tells, for every real token, whether it is the original: the records put [MASK] or a
  random word at most masked slots. Only the members without a default are written here."""

  name = "original_token"
  export_scopes = ("bert/", "original_token/")

  def tower_fn_builder(self, has_nsp, is_training):
    del has_nsp  # no next-sentence task

    def tower_fn(features, global_batch):
      model = modeling.BertModel(self.bert_config, is_training, features["input_ids"],
                                 features["input_mask"], features["segment_ids"])
      ids = features["input_ids"]
      # [rows, P, L]: 1.0 where a real slot points at a position.
      at_slot = tf.one_hot(features["masked_lm_positions"], tf.shape(ids)[1]) * (
          features["masked_lm_weights"][:, :, None])
      slot_ids = tf.reduce_sum(at_slot * tf.cast(features["masked_lm_ids"], tf.float32)[
          :, :, None], axis=1)
      original = tf.where(tf.reduce_max(at_slot, axis=1) > 0, tf.cast(slot_ids, tf.int32), ids)
      replaced = tf.cast(tf.not_equal(ids, original), tf.float32)  # [rows, L]
      hidden = self.bert_config.hidden_size
      with tf.variable_scope("original_token"):
        kernel = tf.get_variable("kernel", [hidden, 1], initializer=tf.truncated_normal_initializer(
            stddev=self.bert_config.initializer_range))
        bias = tf.get_variable("bias", [1], initializer=tf.zeros_initializer())
      logits = tf.squeeze(tf.einsum("blh,ho->blo", model.get_sequence_output(), kernel), -1) + bias
      mask = tf.cast(features["input_mask"], tf.float32)
      token_loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=replaced, logits=logits)
      if is_training:
        loss = (tf.reduce_sum(token_loss * mask) /
                global_batch.loss_denominator(_real_tokens))
        flagged = tf.cast(logits > 0.0, tf.float32)
        return loss, {training.METRIC_PREFIX + "replaced_recall": training.metric(
            tf.reduce_sum(flagged * replaced * mask), tf.reduce_sum(replaced * mask))}
      return None, {"input_mask": features["input_mask"], "input_ids": ids,
                    "replaced": tf.cast(replaced, tf.int32), "prob": tf.sigmoid(logits)}

    return tower_fn

  def evaluation_metrics(self, outputs):
    real = outputs["input_mask"] > 0
    labels, probs = outputs["replaced"][real] > 0, outputs["prob"][real].astype(np.float64)
    flagged = probs > 0.5
    loss = -np.mean(np.where(labels, np.log(np.maximum(probs, 1e-7)),
                             np.log(np.maximum(1.0 - probs, 1e-7))))
    return {"loss": float(loss), "accuracy": float(np.mean(flagged == labels)),
            "recall": float(np.sum(flagged & labels) / max(np.sum(labels), 1)),
            "replaced_share": float(np.mean(labels))}

  def prediction_lines(self, outputs, inv_vocab):
    for i in range(len(outputs["input_mask"])):
      items = []
      for pos in np.flatnonzero(outputs["input_mask"][i]):
        replaced, flagged = outputs["replaced"][i][pos] > 0, outputs["prob"][i][pos] > 0.5
        if replaced or flagged:
          items.append("%d:%s:%s" % (pos, inv_vocab[int(outputs["input_ids"][i][pos])],
                                     "false_alarm" if not replaced else
                                     "caught" if flagged else "missed"))
      yield " ".join(items)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
  """Static records with next-sentence labels (which the toy ignores), their layout, vocab."""
  paths = pretraining_helpers.write_tiny_corpus(tmp_path_factory.mktemp("objective"), CONFIG,
                                                documents=30)
  path = str(paths["root"] / "static.tfrecord")
  create_pretraining_data.run(create_pretraining_data.Options(
      input_file=paths["corpus"], output_file=path, vocab_file=paths["vocab"],
      max_seq_length=SEQ, max_predictions_per_seq=SLOTS, dupe_factor=2))
  fmt = pretraining_records.inspect_records(path)
  assert fmt["has_nsp"] and not fmt["dynamic"]
  return [path], fmt, paths["vocab"]


def _train(obj, files, fmt, output_dir, steps):
  spec = training.TrainSpec(
      output_dir=output_dir, parallel=tower_utils.parallel_spec(TOWERS),
      batch_size_per_tower=ROWS, num_train_steps=steps, num_warmup_steps=0, learning_rate=3e-3,
      init_checkpoint=None, save_checkpoints_steps=1000, log_every_n_steps=steps,
      keep_checkpoint_max=2, seed=0, init_companions=obj.init_companions(None))
  return training.train(
      obj.tower_fn_builder(fmt["has_nsp"] and obj.uses_nsp, is_training=True),
      pretraining_records.input_fn_builder(files, fmt, True), spec)


def _infer(obj, files, fmt, output_dir):
  checkpoint = checkpoints.latest_checkpoint(output_dir)
  return inference.run_inference(
      obj.tower_fn_builder(False, is_training=False),
      pretraining_records.input_fn_builder(files, fmt, False, max_examples=64), checkpoint,
      tower_utils.parallel_spec(TOWERS), ROWS)


def test_a_toy_objective_from_the_base_class_alone_trains_evaluates_predicts_and_exports(
    records, tmp_path, caplog):
  files, fmt, vocab = records
  config = modeling.BertConfig(**CONFIG)
  obj = OriginalTokenObjective(config)
  # The defaults the toy did not write.
  assert obj.run_identity() == {"objective": "original_token"}
  assert obj.init_companions("some/bert_model.ckpt") == ()
  assert obj.export_writes(str(tmp_path)) == []
  assert not obj.uses_nsp and not obj.diagnose_after_training
  output_dir = str(tmp_path / "run")

  assert _train(obj, files, fmt, output_dir, 1)["global_step"] == 1
  before = obj.evaluation_metrics(_infer(obj, files, fmt, output_dir))
  with caplog.at_level("INFO"):
    assert _train(obj, files, fmt, output_dir, 60)["global_step"] == 60  # resumes at step 1
  assert "replaced_recall" in caplog.text  # the training metric reached the log
  outputs = _infer(obj, files, fmt, output_dir)
  after = obj.evaluation_metrics(outputs)

  assert obj.example_count(outputs) == 64
  # About an eighth of the tokens are [MASK] or a random word; [MASK] is easy to spot.
  assert 0.05 < after["replaced_share"] < 0.2, after
  share = after["replaced_share"]
  prior = -(share * np.log(share) + (1.0 - share) * np.log(1.0 - share))
  # Learned, and more than how often a token is replaced (the prior's loss).
  assert after["loss"] < 0.5 * min(before["loss"], prior), (before, after, prior)
  assert after["recall"] > 0.6 and after["accuracy"] > 1.0 - after["replaced_share"], after

  lines = list(obj.prediction_lines(outputs, {i: t for i, t in enumerate(VOCAB)}))
  assert len(lines) == 64
  assert sum(line.count(":[MASK]:caught") for line in lines) > 20, lines[:5]

  prefix = checkpoints.export_model(output_dir, config, vocab, scopes=obj.export_scopes,
                                    extra_writes=obj.export_writes(output_dir))
  exported = {name for name, _ in tf.train.list_variables(prefix)}
  assert exported == {name for name, _ in modeling.stock_variable_shapes(config)} | {
      "original_token/kernel", "original_token/bias"}


def test_the_base_class_names_what_a_subclass_must_give():
  bare = objective.Objective(modeling.BertConfig(**CONFIG))
  for call in (lambda: bare.tower_fn_builder(False, True),
               lambda: bare.evaluation_metrics({}),
               lambda: list(bare.prediction_lines({}, {}))):
    with pytest.raises(NotImplementedError, match="Objective has no"):
      call()
  assert bare.check_trained({}, "out", "somewhere") is None
  assert bare.example_count({"a": np.zeros([3, 2]), "b": np.zeros([3])}) == 3
