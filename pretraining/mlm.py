"""run_pretraining_mgpu.py --objective=mlm: BERT's masked LM (+ next-sentence prediction).

MaskedLmObjective implements pretraining/objective.py's Objective (the contract
run_pretraining_mgpu.py relies on), as electra.ElectraObjective does; both score their masked
LM with heads.pretraining.masked_lm_metrics.
"""

import numpy as np
import tensorflow.compat.v1 as tf

from engine import training
from heads import pretraining as pretraining_model
import modeling
from pretraining import objective


def tower_fn_builder(bert_config, has_nsp, is_training):
  """tower_fn(features) -> (loss, outputs) for one tower.

  Training returns the globally normalised MLM loss (+ NSP loss) and no outputs. Inference
  returns no loss and, per example, what eval_results.txt and predict.txt are computed from:
  masked_lm_log_prob [rows, P] (log-probability of the original token), masked_lm_predictions
  [rows, P], the masked_lm_positions/ids/weights [rows, P] the model saw (dynamic masks are only
  known after the input), and with NSP next_sentence_log_prob / _predictions /
  _labels [rows].
  """

  def tower_fn(features, global_batch):
    model = modeling.BertModel(
        config=bert_config,
        is_training=is_training,
        input_ids=features["input_ids"],
        input_mask=features["input_mask"],
        token_type_ids=features["segment_ids"],
        tied_output=True)
    positions = features["masked_lm_positions"]
    weights = features["masked_lm_weights"]
    denominator = None
    if is_training:
      denominator = global_batch.loss_denominator(pretraining_model.masked_token_count)
    masked_lm_loss, masked_lm_example_loss, masked_lm_log_probs = (
        pretraining_model.get_masked_lm_output(
            bert_config, model.get_sequence_output(), model.get_embedding_table(), positions,
            features["masked_lm_ids"], weights, loss_denominator=denominator))
    total_loss = masked_lm_loss
    if has_nsp:
      next_sentence_loss, next_sentence_example_loss, next_sentence_log_probs = (
          pretraining_model.get_next_sentence_output(
              bert_config, model.get_pooled_output(), features["next_sentence_labels"]))
      total_loss += next_sentence_loss
    if is_training:
      return total_loss, {
          training.METRIC_PREFIX + "masked_lm_accuracy": masked_lm_accuracy(
              masked_lm_log_probs, features["masked_lm_ids"], weights)}

    slots = modeling.get_shape_list(positions, expected_rank=2)
    outputs = {
        "masked_lm_log_prob": tf.reshape(-masked_lm_example_loss, slots),
        "masked_lm_predictions": tf.reshape(
            tf.argmax(masked_lm_log_probs, axis=-1, output_type=tf.int32), slots),
        "masked_lm_positions": positions,
        "masked_lm_ids": features["masked_lm_ids"],
        "masked_lm_weights": weights,
    }
    if has_nsp:
      outputs["next_sentence_log_prob"] = -next_sentence_example_loss
      outputs["next_sentence_predictions"] = tf.argmax(
          next_sentence_log_probs, axis=-1, output_type=tf.int32)
      outputs["next_sentence_labels"] = tf.reshape(features["next_sentence_labels"], [-1])
    return None, outputs

  return tower_fn


def masked_lm_accuracy(log_probs, label_ids, label_weights):
  """The masked-LM accuracy of a training batch as a training.metric.

  Args:
    log_probs: float Tensor [batch_size * P, vocab_size].
    label_ids: int32 Tensor [batch_size, P].
    label_weights: float Tensor [batch_size, P], 1.0 for real predictions.

  Returns:
    float32 [2]: (weighted correct predictions, sum of the weights).
  """
  weights = tf.cast(tf.reshape(label_weights, [-1]), tf.float32)
  correct = tf.cast(tf.equal(tf.argmax(log_probs, axis=-1, output_type=tf.int32),
                             tf.reshape(tf.cast(label_ids, tf.int32), [-1])), tf.float32)
  return training.metric(tf.reduce_sum(weights * correct), tf.reduce_sum(weights))


def evaluation_metrics(outputs):
  """The stock eval metrics, in numpy, from tower_fn's inference outputs.

  Masked-LM accuracy and loss are averaged over the real prediction slots (weighted by
  masked_lm_weights, as stock tf.metrics with weights); NSP metrics over examples. `loss` is
  masked_lm_loss + next_sentence_loss, the training objective.

  Args:
    outputs: dict of numpy arrays from inference.run_inference.

  Returns:
    dict of metric name -> float.
  """
  results = pretraining_model.masked_lm_metrics(outputs)
  results["loss"] = results["masked_lm_loss"]
  if "next_sentence_labels" in outputs:
    results["next_sentence_accuracy"] = float(np.mean(
        outputs["next_sentence_predictions"] == outputs["next_sentence_labels"]))
    results["next_sentence_loss"] = float(-np.mean(outputs["next_sentence_log_prob"]))
    results["loss"] += results["next_sentence_loss"]
  return results


NSP_LABELS = ("IsNext", "NotNext")  # Stock: label 0 = B follows A, 1 = B is a random sentence.


def prediction_lines(outputs, inv_vocab):
  """One line per example: `pos:original->predicted` per masked slot, then the NSP verdict.

  Args:
    outputs: dict of numpy arrays from inference.run_inference.
    inv_vocab: dict id -> token.

  Yields:
    str lines without newline, e.g. "3:法->法 7:院->人 nsp:IsNext->IsNext".
  """
  for i in range(len(outputs["masked_lm_ids"])):
    items = []
    for pos, orig, pred, weight in zip(outputs["masked_lm_positions"][i],
                                       outputs["masked_lm_ids"][i],
                                       outputs["masked_lm_predictions"][i],
                                       outputs["masked_lm_weights"][i]):
      if weight > 0:
        items.append("%d:%s->%s" % (pos, inv_vocab.get(int(orig), "<%d>" % orig),
                                    inv_vocab.get(int(pred), "<%d>" % pred)))
    if "next_sentence_labels" in outputs:
      items.append("nsp:%s->%s" % (NSP_LABELS[outputs["next_sentence_labels"][i]],
                                   NSP_LABELS[outputs["next_sentence_predictions"][i]]))
    yield " ".join(items)


class MaskedLmObjective(objective.Objective):
  """BERT's masked LM (+ NSP): the tower_fn, metrics and predict.txt lines of this module.

  --init_checkpoint restores every part of the masked LM it has; export/ holds the stock bert/
  and cls/ names, nothing more (the Objective defaults).
  """

  name = "mlm"
  uses_nsp = True  # When the records have next_sentence_labels.
  export_scopes = ("bert/", "cls/")  # what export/bert_model.ckpt holds

  def tower_fn_builder(self, has_nsp, is_training):
    return tower_fn_builder(self.bert_config, has_nsp, is_training)

  def evaluation_metrics(self, outputs):
    return evaluation_metrics(outputs)

  def prediction_lines(self, outputs, inv_vocab):
    return prediction_lines(outputs, inv_vocab)
