"""BERT's pre-training heads: masked LM and next-sentence prediction, with stock variable names.

The variables are exactly those of Google's checkpoints, so a released checkpoint restores its
heads too and continued pretraining starts from the trained heads rather than from random ones:

  cls/predictions/transform/dense/{kernel [H, H], bias [H]}
  cls/predictions/transform/LayerNorm/{beta [H], gamma [H]}
  cls/predictions/output_bias [vocab_size]
  cls/seq_relationship/output_weights [2, H]
  cls/seq_relationship/output_bias [2]

The masked-LM output projection is the word embedding table (`bert/embeddings/word_embeddings`,
[vocab_size, H]) transposed: input and output embeddings are tied, as in the released models.
"""

import numpy as np
import tensorflow.compat.v1 as tf

import modeling

# Added to the sum of the masked-LM weights before dividing by it (stock value): a batch whose
# prediction slots are all padding gets loss 0 instead of NaN.
MASKED_LM_WEIGHT_EPSILON = 1e-5


def masked_token_count(features):
  """The masked-LM loss denominator of a batch: sum of its masked_lm_weights + epsilon.

  The training tower divides its weighted masked-LM loss sum by its share of this count over
  the whole global batch (GlobalBatch.loss_denominator). The mean of the tower losses is then
  exactly the loss of the whole batch, and N towers x b rows train like 1 tower x N*b rows, even
  when the towers hold different numbers of masked tokens (per-tower normalisation would weight
  those unequally).

  Args:
    features: dict with "masked_lm_weights" float Tensor [rows, P].

  Returns:
    float32 scalar.
  """
  return tf.reduce_sum(features["masked_lm_weights"]) + MASKED_LM_WEIGHT_EPSILON


def gather_indexes(sequence_tensor, positions):
  """Gathers the vectors at `positions` of each sequence of a batch.

  Args:
    sequence_tensor: float Tensor [batch_size, seq_length, width].
    positions: int32 Tensor [batch_size, num_positions], indices into seq_length.

  Returns:
    float Tensor [batch_size * num_positions, width], rows in (example, position) order.
  """
  batch_size, seq_length, width = modeling.get_shape_list(sequence_tensor, expected_rank=3)
  # Offsetting each example's positions by its first row in the flattened batch turns a batched
  # gather into one plain gather.
  flat_offsets = tf.reshape(tf.range(0, batch_size, dtype=tf.int32) * seq_length, [-1, 1])
  flat_positions = tf.reshape(positions + flat_offsets, [-1])
  flat_sequence_tensor = tf.reshape(sequence_tensor, [batch_size * seq_length, width])
  return tf.gather(flat_sequence_tensor, flat_positions)


def get_masked_lm_output(bert_config, input_tensor, output_weights, positions, label_ids,
                         label_weights, loss_denominator=None):
  """The masked-LM head, its loss and per-position log-probabilities.

  Args:
    bert_config: `modeling.BertConfig`.
    input_tensor: float Tensor [batch_size, seq_length, H], the encoder's sequence output.
    output_weights: float Tensor [vocab_size, H], the word embedding table (tied weights).
    positions: int32 Tensor [batch_size, P], the masked positions (zero-padded).
    label_ids: int32 Tensor [batch_size, P], the original token at each masked position.
    label_weights: float Tensor [batch_size, P], 1.0 for real predictions, 0.0 for padding.
    loss_denominator: optional float scalar Tensor to divide the weighted loss sum by instead of
      sum(label_weights) + 1e-5 (stock). Towers pass their share of the whole batch's
      denominator so that the mean of the tower losses is the loss of the whole batch.

  Returns:
    (loss, per_example_loss, log_probs): scalar weighted mean loss; float Tensor
    [batch_size * P], the loss at each slot; float Tensor [batch_size * P, vocab_size].
  """
  input_tensor = gather_indexes(input_tensor, positions)

  with tf.variable_scope("cls/predictions"):
    # One more non-linear transformation before the output layer; it is not used after
    # pre-training, but Google's checkpoints carry it, so it is kept to restore them.
    with tf.variable_scope("transform"):
      input_tensor = modeling.dense_layer(
          input_tensor, bert_config.hidden_size, name="dense",
          activation=modeling.get_activation(bert_config.hidden_act),
          initializer=modeling.create_initializer(bert_config.initializer_range))
      input_tensor = modeling.layer_norm(input_tensor)

    # Output weights are the input embeddings; only the bias belongs to the head.
    output_bias = tf.get_variable("output_bias", shape=[bert_config.vocab_size],
                                  initializer=tf.zeros_initializer())
    logits = tf.matmul(input_tensor, output_weights, transpose_b=True)
    logits = tf.nn.bias_add(logits, output_bias)
    log_probs = tf.nn.log_softmax(logits, axis=-1)

    label_ids = tf.reshape(label_ids, [-1])
    label_weights = tf.reshape(label_weights, [-1])
    one_hot_labels = tf.one_hot(label_ids, depth=bert_config.vocab_size, dtype=tf.float32)

    # `positions` is zero-padded when a sequence has fewer than P predictions; the padding slots
    # have weight 0 and drop out of the numerator and the denominator.
    per_example_loss = -tf.reduce_sum(log_probs * one_hot_labels, axis=[-1])
    numerator = tf.reduce_sum(label_weights * per_example_loss)
    if loss_denominator is None:
      loss_denominator = tf.reduce_sum(label_weights) + MASKED_LM_WEIGHT_EPSILON
    loss = numerator / loss_denominator

  return loss, per_example_loss, log_probs


def get_next_sentence_output(bert_config, input_tensor, labels):
  """The next-sentence head: a binary classifier on the pooled [CLS] output.

  Label 0 means "B follows A", 1 means "B is a random sentence" (stock convention).

  Args:
    bert_config: `modeling.BertConfig`.
    input_tensor: float Tensor [batch_size, H], the pooled output.
    labels: int32 Tensor [batch_size] or [batch_size, 1].

  Returns:
    (loss, per_example_loss, log_probs): scalar mean loss; float Tensor [batch_size];
    float Tensor [batch_size, 2].
  """
  with tf.variable_scope("cls/seq_relationship"):
    output_weights = tf.get_variable(
        "output_weights", shape=[2, bert_config.hidden_size],
        initializer=modeling.create_initializer(bert_config.initializer_range))
    output_bias = tf.get_variable("output_bias", shape=[2], initializer=tf.zeros_initializer())

    logits = tf.matmul(input_tensor, output_weights, transpose_b=True)
    logits = tf.nn.bias_add(logits, output_bias)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    labels = tf.reshape(labels, [-1])
    one_hot_labels = tf.one_hot(labels, depth=2, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
    loss = tf.reduce_mean(per_example_loss)
  return loss, per_example_loss, log_probs


def masked_lm_metrics(outputs):
  """Masked-LM accuracy and loss in numpy, averaged over the real prediction slots.

  Weighted by masked_lm_weights, as stock tf.metrics with weights.

  Args:
    outputs: dict of numpy arrays [examples, P]: masked_lm_weights, masked_lm_predictions,
      masked_lm_ids and masked_lm_log_prob (log-probability of the original token).

  Returns:
    dict: masked_lm_accuracy, masked_lm_loss, masked_lm_predictions_count, eval_examples.
  """
  weights = outputs["masked_lm_weights"].astype(np.float64)
  total_weight = max(float(np.sum(weights)), 1e-12)
  correct = outputs["masked_lm_predictions"] == outputs["masked_lm_ids"]
  return {
      "masked_lm_accuracy": float(np.sum(weights * correct) / total_weight),
      "masked_lm_loss": float(-np.sum(weights * outputs["masked_lm_log_prob"]) / total_weight),
      "masked_lm_predictions_count": int(np.sum(weights > 0)),
      "eval_examples": int(len(weights)),
  }
