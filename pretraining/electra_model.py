"""ELECTRA replaced-token detection (Clark et al., 2020) on BERT's variables.

A small generator, a masked LM, fills the masked positions with tokens sampled from its output
distribution; the discriminator, the BERT being trained, tells for every real token whether it
is the original or a replacement. The discriminator learns from every token, not only the 15%
that are masked.

Variables (H = discriminator width, Hg = generator width, V = vocab_size):

  bert/...                                  the discriminator: exactly stock BERT's names, so
                                            its checkpoint loads in stock BERT and fine-tunes as
                                            it is
  bert/embeddings/{word,position,token_type}_embeddings, bert/embeddings/LayerNorm
                                            shared: the generator embeds with the same tables
                                            (one copy of each)
  generator/embeddings_project/{kernel [H, Hg], bias [Hg]}
  generator/encoder/layer_<i>/...           the generator's Transformer (width Hg)
  generator/cls/predictions/transform/dense/{kernel [Hg, H], bias [H]}, .../LayerNorm,
  generator/cls/predictions/output_bias [V] the generator's masked-LM head, tied to the shared
                                            word table (as in ELECTRA)
  discriminator_predictions/dense/{kernel [H, H], bias [H]},
  discriminator_predictions/output/{kernel [H, 1], bias [1]}
                                            the replaced-token head

Loss = generator masked-LM loss + disc_weight * discriminator loss (ELECTRA's lambda = 50). The
sampled tokens are integers, so no gradient of the discriminator loss reaches the generator.
"""

import copy

import tensorflow.compat.v1 as tf

from heads import pretraining as pretraining_model
import modeling

DEFAULT_GENERATOR_HIDDEN_RATIO = 0.25  # ELECTRA-small's generator is 1/4 of the width.
DEFAULT_DISC_WEIGHT = 50.0
HEAD_SIZE = 64  # The generator has generator_hidden / 64 attention heads (at least 1).


def generator_config(bert_config, hidden_ratio):
  """The generator's BertConfig: the discriminator's depth, `hidden_ratio` of its width.

  Args:
    bert_config: the discriminator's `modeling.BertConfig`.
    hidden_ratio: float in (0, 1], e.g. 0.25.

  Returns:
    BertConfig with hidden_size = round(H * ratio), intermediate_size scaled alike, and
    hidden_size / 64 heads (at least 1, lowered until it divides hidden_size).
  """
  config = copy.deepcopy(bert_config)
  config.hidden_size = max(1, int(round(bert_config.hidden_size * hidden_ratio)))
  config.intermediate_size = max(1, int(round(bert_config.intermediate_size * hidden_ratio)))
  heads = max(1, config.hidden_size // HEAD_SIZE)
  while config.hidden_size % heads:
    heads -= 1
  config.num_attention_heads = heads
  return config


def sample_tokens(log_probs, seed=None):
  """One token per row from softmax(log_probs): float [N, V] -> int32 [N], always in [0, V).

  seed: None for a stateful op (training: new samples every step), or a pair of ints for a
  stateless draw that repeats (evaluation).

  A row with a NaN (weights gone non-finite: too high a learning rate) makes TensorFlow's
  categorical return V, an id past the vocabulary that would fail the discriminator's embedding
  lookup; it is clipped to V - 1, so the step runs on and gives a non-finite loss, which the
  training loop reports as a divergence (engine/training.py), as for the masked LM.
  """
  if seed is None:
    samples = tf.random.categorical(log_probs, 1, dtype=tf.int32)
  else:
    samples = tf.random.stateless_categorical(log_probs, 1, seed=seed, dtype=tf.int32)
  return tf.minimum(tf.reshape(samples, [-1]), tf.shape(log_probs)[-1] - 1)


def most_likely_tokens(log_probs):
  """Deterministic stand-in for sample_tokens (tests): argmax, float [N, V] -> int32 [N]."""
  return tf.argmax(log_probs, axis=-1, output_type=tf.int32)


def scatter_slots(values, positions, weights, seq_length):
  """Spreads per-slot values over the sequence: slot j of row b goes to position positions[b, j].

  Args:
    values: int32 Tensor [B, P].
    positions: int32 Tensor [B, P] (distinct among the real slots of a row).
    weights: float Tensor [B, P], 1.0 for real slots, 0.0 for padding (dropped).
    seq_length: int L.

  Returns:
    (spread int32 [B, L]: the value at each real slot's position, 0 elsewhere;
     is_slot bool [B, L]: positions that hold a real slot).
  """
  real = tf.cast(weights > 0, tf.int32)
  one_hot = tf.one_hot(positions, seq_length, dtype=tf.int32) * real[:, :, None]  # [B, P, L]
  spread = tf.reduce_sum(one_hot * values[:, :, None], axis=1)
  is_slot = tf.reduce_sum(one_hot, axis=1) > 0
  return spread, is_slot


def corrupt(input_ids, positions, label_ids, weights, samples):
  """The discriminator's input and labels.

  Args:
    input_ids: int32 [B, L], the generator's input (masked).
    positions, label_ids, weights: the masked-LM slots [B, P] (label_ids = original tokens).
    samples: int32 [B, P], the generator's token for each slot.

  Returns:
    (original_ids int32 [B, L], corrupted_ids int32 [B, L], replaced float32 [B, L]): the text
    before masking; the same text with every real slot's position holding its sample; 1.0 where
    the corrupted token differs from the original (a sample equal to the original is 0.0).
  """
  seq_length = modeling.get_shape_list(input_ids, expected_rank=2)[1]
  originals, is_slot = scatter_slots(label_ids, positions, weights, seq_length)
  sampled, _ = scatter_slots(samples, positions, weights, seq_length)
  original_ids = tf.where(is_slot, originals, input_ids)
  corrupted_ids = tf.where(is_slot, sampled, original_ids)
  replaced = tf.cast(tf.not_equal(corrupted_ids, original_ids), tf.float32)
  return original_ids, corrupted_ids, replaced


def generator_sequence_output(bert_config, gen_config, is_training, input_ids, input_mask,
                              token_type_ids):
  """The generator's encoder on the shared embeddings.

  Must be called in the scope that holds the discriminator's "bert/" (the tables are created
  there if they do not exist yet, and reused otherwise: the caller opens that scope with
  reuse=AUTO_REUSE or True).

  Args:
    bert_config, gen_config: discriminator and generator BertConfigs.
    is_training: apply dropout.
    input_ids, input_mask, token_type_ids: int32 [B, L].

  Returns:
    (sequence output float32 [B, L, Hg], word embedding table [V, H]).
  """
  gen_config = copy.deepcopy(gen_config)
  embed_config = copy.deepcopy(bert_config)
  if not is_training:
    for config in (gen_config, embed_config):
      config.hidden_dropout_prob = 0.0
      config.attention_probs_dropout_prob = 0.0
  # The embeddings are the discriminator's: announced with its config, first, so that a
  # placer (pipeline stages) cuts the tower by the discriminator and puts the tables where the
  # discriminator will look for them.
  modeling.begin_model(bert_config)
  with tf.variable_scope("bert/embeddings"), modeling.part_scope("embeddings"):
    # The generator's head multiplies by the whole table: the tower reads it once.
    embedded, table = modeling.bert_embeddings(embed_config, input_ids, token_type_ids,
                                               tied_output=True)
  with tf.variable_scope("generator"):
    with modeling.part_scope("embeddings"):  # [B, L, Hg] leaves the stage, not [B, L, H].
      projected = modeling.dense_layer(
          embedded, gen_config.hidden_size, name="embeddings_project",
          initializer=modeling.create_initializer(gen_config.initializer_range))
      attention_mask = modeling.create_attention_mask_from_input_mask(input_ids, input_mask)
    modeling.begin_model(gen_config)
    with tf.variable_scope("encoder"):
      sequence_output = modeling.transformer_model(
          input_tensor=projected,
          attention_mask=attention_mask,
          hidden_size=gen_config.hidden_size,
          num_hidden_layers=gen_config.num_hidden_layers,
          num_attention_heads=gen_config.num_attention_heads,
          intermediate_size=gen_config.intermediate_size,
          intermediate_act_fn=modeling.get_activation(gen_config.hidden_act),
          hidden_dropout_prob=gen_config.hidden_dropout_prob,
          attention_probs_dropout_prob=gen_config.attention_probs_dropout_prob,
          initializer_range=gen_config.initializer_range,
          do_return_all_layers=False)
  return sequence_output, table


def discriminator_logits(bert_config, sequence_output):
  """The replaced-token head: float [B, L, H] -> logits float32 [B, L] (> 0: replaced)."""
  with tf.variable_scope("discriminator_predictions"):
    hidden = modeling.dense_layer(
        sequence_output, bert_config.hidden_size, name="dense",
        activation=modeling.get_activation(bert_config.hidden_act),
        initializer=modeling.create_initializer(bert_config.initializer_range))
    logits = modeling.dense_layer(
        hidden, 1, name="output",
        initializer=modeling.create_initializer(bert_config.initializer_range))
  return tf.squeeze(tf.cast(logits, tf.float32), axis=-1)


class Electra(object):
  """Generator + discriminator for one batch; the tensors are attributes.

  Attributes (B rows, L positions, P slots):
    generator_loss: float32 scalar, the masked-LM loss (sum / loss_denominators[0]).
    discriminator_loss: float32 scalar, sigmoid cross-entropy over the real tokens (sum /
      loss_denominators[1]).
    loss: generator_loss + disc_weight * discriminator_loss.
    masked_lm_example_loss: float32 [B * P]; masked_lm_log_probs float32 [B * P, V].
    samples: int32 [B, P], the sampled tokens.
    original_ids, corrupted_ids: int32 [B, L]; replaced: float32 [B, L] (labels).
    disc_logits: float32 [B, L].
    disc_sequence_output: float [B, L, H], the discriminator's final layer (the encoder that
      fine-tuning starts from).
  """

  def __init__(self, bert_config, gen_config, is_training, features, disc_weight,
               sample_fn=sample_tokens, loss_denominators=(None, None)):
    """Builds both models.

    Args:
      bert_config, gen_config: discriminator and generator BertConfigs.
      is_training: apply dropout.
      features: dict with input_ids, input_mask, segment_ids int32 [B, L] and
        masked_lm_positions, masked_lm_ids int32 [B, P], masked_lm_weights float32 [B, P].
      disc_weight: float, the discriminator loss's weight.
      sample_fn: callable(log_probs float [B * P, V]) -> int32 [B * P].
      loss_denominators: (masked-LM, discriminator) float scalars to divide the loss sums by;
        None for this batch's own count (sum of the weights / of input_mask).
    """
    input_mask = features["input_mask"]
    positions = features["masked_lm_positions"]
    weights = features["masked_lm_weights"]
    scope = tf.get_variable_scope()
    # The generator creates the shared tables on the first build; the discriminator then finds
    # them. A scope that already reuses (a later tower) keeps reuse=True, so that no per-tower
    # copy can be created by mistake.
    with tf.variable_scope(scope, reuse=True if scope.reuse is True else tf.AUTO_REUSE):
      gen_output, table = generator_sequence_output(
          bert_config, gen_config, is_training, features["input_ids"], input_mask,
          features["segment_ids"])
      with tf.variable_scope("generator"):
        (self.generator_loss, self.masked_lm_example_loss,
         self.masked_lm_log_probs) = pretraining_model.get_masked_lm_output(
             bert_config, gen_output, table, positions, features["masked_lm_ids"], weights,
             loss_denominator=loss_denominators[0])
      slots = modeling.get_shape_list(positions, expected_rank=2)
      self.samples = tf.reshape(
          sample_fn(tf.stop_gradient(self.masked_lm_log_probs)), slots)
      self.original_ids, self.corrupted_ids, self.replaced = corrupt(
          features["input_ids"], positions, features["masked_lm_ids"], weights, self.samples)
      model = modeling.BertModel(
          config=bert_config, is_training=is_training, input_ids=self.corrupted_ids,
          input_mask=input_mask, token_type_ids=features["segment_ids"], tied_output=True)
      self.disc_sequence_output = model.get_sequence_output()
      self.disc_logits = discriminator_logits(bert_config, self.disc_sequence_output)
    token_weights = tf.cast(input_mask, tf.float32)
    per_token = tf.nn.sigmoid_cross_entropy_with_logits(labels=self.replaced,
                                                        logits=self.disc_logits)
    denominator = loss_denominators[1]
    if denominator is None:
      denominator = real_token_count(features)
    self.discriminator_loss = tf.reduce_sum(per_token * token_weights) / denominator
    self.loss = self.generator_loss + disc_weight * self.discriminator_loss


def real_token_count(features):
  """The discriminator loss denominator of a batch: its real tokens (sum of input_mask)."""
  return tf.cast(tf.reduce_sum(features["input_mask"]), tf.float32)
