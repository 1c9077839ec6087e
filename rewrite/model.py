"""BERT as a sequence-to-sequence rewriter (UniLM, Dong et al. 2019): mask, labels, loss.

One sequence `[CLS] source [SEP] target [SEP]` (segment ids 0 for the source part, 1 for the
target part, see rewrite/data.py) runs through an unchanged BertModel under the UniLM seq2seq
attention mask: source tokens see the whole source, target tokens see the source plus the
earlier target tokens and themselves. Nothing else about the model changes, so any Google BERT
checkpoint is a starting point, and the output layer is the stock masked-LM head
`cls/predictions` (tied to the word embeddings, see heads/pretraining.py).

Training objective: next-token prediction. The output at each position predicts the token
after it, over the target only: the source's final [SEP] predicts the first target token, each
target token predicts the next, the last one predicts the closing [SEP]. We chose this over
UniLM's own scheme (mask target tokens and predict them from [MASK] inputs) because it is the
exact factorisation decoding uses: generating one token needs one new position through the
layers, not a token plus a [MASK] slot, and every target token is trained on in every step
rather than a masked ~15% of them.
"""

import collections

import tensorflow.compat.v1 as tf

from heads import pretraining as pretraining_model
import modeling

RewriteOutputs = collections.namedtuple("RewriteOutputs", [
    "loss",  # scalar: mean negative log-likelihood per target token
    "log_likelihood",  # [batch_size]: sum of the target tokens' log-probabilities
    "num_tokens",  # [batch_size]: number of predicted target tokens (incl. the final [SEP])
    "positions",  # [batch_size, max_target_length + 1]: the prediction slots
    "label_ids",  # [batch_size, max_target_length + 1]: the token each slot predicts
    "label_weights",  # [batch_size, max_target_length + 1]: 1.0 on real predictions
    "log_probs",  # [slots, vocab_size], see create_rewrite_model
])


def seq2seq_attention_mask(input_mask, segment_ids):
  """The UniLM seq2seq attention mask.

  Position i may attend to position j iff j is a real source token, or both are real target
  tokens and j <= i. Every row sees the source, so padding rows stay well defined (their
  outputs are never used); no row sees padding.

  Args:
    input_mask: int Tensor [batch_size, seq_length], 1 on real tokens.
    segment_ids: int Tensor [batch_size, seq_length], 0 on the source part, 1 on the target.

  Returns:
    float32 Tensor [batch_size, seq_length, seq_length] of 0/1, indexed [batch, from, to].
  """
  input_mask = tf.cast(input_mask, tf.float32)
  is_target = input_mask * tf.cast(segment_ids, tf.float32)
  is_source = input_mask - is_target
  seq_length = modeling.get_shape_list(input_mask, expected_rank=2)[1]
  causal = tf.linalg.band_part(tf.ones([seq_length, seq_length]), -1, 0)  # [from, to]: to <= from
  # The two terms never overlap (a column is either source or target), so the sum is 0/1.
  return (tf.expand_dims(is_source, 1) +
          tf.expand_dims(is_target, 2) * tf.expand_dims(is_target, 1) * causal)


def next_token_labels(input_ids, input_mask, segment_ids):
  """What each position predicts: the next token, where that token is a real target token.

  Args:
    input_ids, input_mask, segment_ids: int Tensors [batch_size, seq_length].

  Returns:
    (label_ids int32 [batch_size, seq_length], label_weights float32 [batch_size, seq_length]):
    label_ids[:, p] = input_ids[:, p + 1]; label_weights[:, p] = 1.0 iff position p + 1 is a
    real target token (so source positions other than the last [SEP], the target's final
    [SEP] and padding get 0).
  """
  is_target = tf.cast(input_mask, tf.int32) * tf.cast(segment_ids, tf.int32)
  shift = lambda t: tf.pad(t[:, 1:], [[0, 0], [0, 1]])
  return tf.cast(shift(input_ids), tf.int32), tf.cast(shift(is_target), tf.float32)


def prediction_positions(input_mask, segment_ids, max_target_length):
  """The positions that can carry a label: from the source's final [SEP] on.

  Computing the vocabulary-sized output only there (max_target_length + 1 slots instead of
  seq_length) is what makes the head affordable.

  Args:
    input_mask, segment_ids: int Tensors [batch_size, seq_length].
    max_target_length: target tokens per example at most (without the final [SEP]).

  Returns:
    int32 Tensor [batch_size, max_target_length + 1]: source_length - 1 + k, clipped to
    [0, seq_length - 1] (clipped slots have label weight 0).
  """
  is_source = tf.cast(input_mask, tf.int32) * (1 - tf.cast(segment_ids, tf.int32))
  source_length = tf.reduce_sum(is_source, axis=1, keepdims=True)
  seq_length = modeling.get_shape_list(input_mask, expected_rank=2)[1]
  positions = source_length - 1 + tf.range(max_target_length + 1)[tf.newaxis, :]
  # Clipped at 0 too: all-padding rows (the filler of a short last batch) have no source.
  return tf.clip_by_value(positions, 0, seq_length - 1)


def create_rewrite_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                         max_target_length, loss_denominator=None, all_slots=False):
  """BertModel under the seq2seq mask plus the stock MLM head on the prediction slots.

  Args:
    bert_config: modeling.BertConfig.
    is_training: dropout on.
    input_ids, input_mask, segment_ids: int32 Tensors [batch_size, seq_length].
    max_target_length: see prediction_positions.
    loss_denominator: optional scalar to divide the summed token loss by (towers pass their
      share of the whole batch's token count); default: this batch's token count.
    all_slots: run the head on every prediction slot (log_probs for all of them, e.g. to
      decode by full recompute). By default only the slots that carry a label go through the
      vocabulary-sized output layer, which dominates the cost of a small model: targets are
      usually much shorter than max_target_length. Loss and log-likelihoods are the same.

  Returns:
    RewriteOutputs; log_probs is [batch_size * (max_target_length + 1), vocab_size] with
    all_slots, else [number of labelled slots, vocab_size] in (example, slot) order.
  """
  model = modeling.BertModel(
      config=bert_config, is_training=is_training, input_ids=input_ids, input_mask=input_mask,
      token_type_ids=segment_ids,
      attention_mask=seq2seq_attention_mask(input_mask, segment_ids), tied_output=True)
  all_label_ids, all_label_weights = next_token_labels(input_ids, input_mask, segment_ids)
  positions = prediction_positions(input_mask, segment_ids, max_target_length)
  label_ids = tf.gather(all_label_ids, positions, batch_dims=1)
  label_weights = tf.gather(all_label_weights, positions, batch_dims=1)
  sequence_output = model.get_sequence_output()
  if all_slots:
    head_inputs = (sequence_output, positions, label_ids, label_weights)
  else:
    batch_size, seq_length, width = modeling.get_shape_list(sequence_output, expected_rank=3)
    # The labelled slots of the whole batch as one row of positions into [batch * seq_length].
    labelled = tf.cast(tf.where(tf.reshape(label_weights, [-1]) > 0)[:, 0], tf.int32)
    flat_positions = tf.reshape(positions + seq_length * tf.range(batch_size)[:, tf.newaxis], [-1])
    picked_labels = tf.gather(tf.reshape(label_ids, [-1]), labelled)[tf.newaxis, :]
    head_inputs = (tf.reshape(sequence_output, [1, batch_size * seq_length, width]),
                   tf.gather(flat_positions, labelled)[tf.newaxis, :], picked_labels,
                   tf.ones_like(picked_labels, dtype=tf.float32))
  loss, per_slot_loss, log_probs = pretraining_model.get_masked_lm_output(
      bert_config, head_inputs[0], model.get_embedding_table(), head_inputs[1], head_inputs[2],
      head_inputs[3], loss_denominator)
  if all_slots:
    per_slot_loss = tf.reshape(per_slot_loss, tf.shape(label_weights)) * label_weights
    log_likelihood = -tf.reduce_sum(per_slot_loss, axis=1)
  else:
    example = labelled // (max_target_length + 1)
    log_likelihood = -tf.math.unsorted_segment_sum(per_slot_loss, example, batch_size)
  return RewriteOutputs(
      loss=loss,
      log_likelihood=log_likelihood,
      num_tokens=tf.reduce_sum(label_weights, axis=1),
      positions=positions,
      label_ids=label_ids,
      label_weights=label_weights,
      log_probs=log_probs)


def count_target_tokens(input_mask, segment_ids):
  """float32 scalar: the predicted target tokens of a batch (one per real target position)."""
  return tf.reduce_sum(tf.cast(input_mask * segment_ids, tf.float32))


def target_token_count(features):
  """float32 scalar: the target tokens of a batch of packed rewrite features."""
  return count_target_tokens(features["input_mask"], features["segment_ids"])


def make_train_tower_fn(bert_config, max_target_length):
  """tower_fn for training.train: (features, global_batch) -> (loss, {}).

  Each tower divides its summed loss by its share of the target tokens of the whole global
  batch (global_batch.loss_denominator), so the mean of the tower losses is the per-token loss
  of the global batch even when towers hold different numbers of target tokens.
  """

  def tower_fn(features, global_batch):
    denominator = global_batch.loss_denominator(target_token_count) + 1e-5
    outputs = create_rewrite_model(
        bert_config, True, features["input_ids"], features["input_mask"],
        features["segment_ids"], max_target_length, loss_denominator=denominator)
    return outputs.loss, {}

  return tower_fn


def make_score_tower_fn(bert_config, max_target_length):
  """tower_fn for inference.run_inference scoring given targets (teacher forcing, no dropout).

  Outputs "log_likelihood" and "num_tokens", both [batch_size].
  """

  def tower_fn(features, global_batch):
    del global_batch  # Scoring sums per example; nothing to normalise.
    outputs = create_rewrite_model(
        bert_config, False, features["input_ids"], features["input_mask"],
        features["segment_ids"], max_target_length)
    return None, {"log_likelihood": outputs.log_likelihood, "num_tokens": outputs.num_tokens}

  return tower_fn
