"""Greedy and beam-search decoding for the rewrite model, in-graph, with a key/value cache.

What it does. `decode` builds, for one tower, a graph that rewrites a batch of sources:

1. The source part `[CLS] source [SEP]` runs once through the stock BertModel (bidirectional
   over the source, exactly what the seq2seq mask gives source tokens in training). Each
   layer's keys and values of the source positions are kept: they are the projections of that
   layer's input through the layer's own `key` / `value` kernels. The output at the source's
   [SEP] gives the distribution of the first target token.
2. A `tf.while_loop` then generates one token per iteration. The new token (segment 1,
   position source_length + t) runs alone through the layers: at each layer its query attends
   to the cached source keys/values plus the cached target keys/values of slots 0..t, and its
   own key/value is written into slot t of that layer's target cache (a fixed-size buffer of
   max_target_length slots, so every tensor keeps its shape across iterations). One iteration
   therefore costs O((source_length + max_target_length) * hidden) per layer: the cost per
   generated token is constant, not growing with the square of the target length as a full
   recompute of the growing sequence would.
3. Greedy search takes the argmax; beam search keeps `beam_size` hypotheses per example,
   reorders the target caches by parent beam each step (the source cache is shared by all beams
   of an example and never moves), and stops an example once it has `beam_size` finished
   hypotheses (early stopping). A hypothesis ending in [SEP] is scored
   log P / ((5 + length) / 6) ** length_penalty (GNMT), length counting the [SEP]. As in
   Hugging Face's beam search, a [SEP] only finishes a hypothesis when it ranks within the top
   beam_size candidates of the step, which makes beam_size=1 identical to greedy search.

Every variable is fetched with tf.get_variable under the stock scopes (`bert/embeddings/...`,
`bert/encoder/layer_<i>/...`, `cls/predictions/...`) with reuse, and the math is that of
modeling.py (same dense/layer-norm/attention helpers), so a checkpoint trained with
rewrite/model.py drives the decoder unchanged.

Constraints applied to every step: [PAD], [CLS] and [MASK] are never generated; [SEP] may not
come before min_target_length tokens (an undertrained model under beam search otherwise
prefers the empty output, whose single log-probability beats any long hypothesis); the token
after max_target_length generated tokens is forced to be [SEP]; with no_repeat_ngram_size=n > 0,
a token that would repeat an n-gram already in the hypothesis is banned.
"""

import collections

import tensorflow.compat.v1 as tf

from heads import pretraining as pretraining_model
import modeling

NEG_INF = -1e9

DecodeParams = collections.namedtuple("DecodeParams", [
    "max_target_length",  # target tokens before the forced [SEP]
    "min_target_length",  # target tokens before [SEP] may come (1: no empty output)
    "beam_size",  # 1 = greedy
    "length_penalty",  # GNMT alpha; 0 ranks hypotheses by their total log-probability
    "no_repeat_ngram_size",  # 0 = off
    "sep_id",
    "banned_ids",  # ids never generated: [PAD], [CLS], [MASK]
])

SourceCache = collections.namedtuple("SourceCache", [
    "keys",  # list (one per layer) of float [batch, heads, seq_length, size_per_head]
    "values",  # same shapes
    "mask",  # float [batch, seq_length]: 1 on source tokens
    "length",  # int32 [batch]: source tokens incl. [CLS] and [SEP]
    "first_log_probs",  # float [batch, vocab_size]: distribution of the first target token
])


def decode_params_from_vocab(vocab, max_target_length, min_target_length, beam_size,
                             length_penalty, no_repeat_ngram_size):
  """DecodeParams with the special ids looked up in a token -> id vocabulary."""
  return DecodeParams(max_target_length, min_target_length, beam_size, length_penalty,
                      no_repeat_ngram_size,
                      vocab["[SEP]"], [vocab[t] for t in ("[PAD]", "[CLS]", "[MASK]")
                                       if t in vocab])


def _split_heads(tensor, batch, length, config):
  """[batch * length, hidden] -> [batch, heads, length, size_per_head]."""
  heads = config.num_attention_heads
  tensor = tf.reshape(tensor, [batch, length, heads, config.hidden_size // heads])
  return tf.transpose(tensor, [0, 2, 1, 3])


def encode_source(bert_config, input_ids, input_mask, segment_ids):
  """Runs the source part of packed examples once and caches its keys and values.

  Args:
    bert_config: modeling.BertConfig.
    input_ids, input_mask, segment_ids: int32 Tensors [batch, seq_length]; target columns
      (segment 1), if any, are ignored.

  Returns:
    SourceCache.
  """
  source_mask = input_mask * (1 - segment_ids)
  model = modeling.BertModel(config=bert_config, is_training=False,
                             input_ids=input_ids * source_mask, input_mask=source_mask,
                             token_type_ids=tf.zeros_like(input_ids))
  batch, seq_length = modeling.get_shape_list(input_ids, expected_rank=2)
  layer_inputs = [model.get_embedding_output()] + model.get_all_encoder_layers()[:-1]
  keys, values = [], []
  initializer = modeling.create_initializer(bert_config.initializer_range)
  for layer, layer_input in enumerate(layer_inputs):
    flat = tf.reshape(layer_input, [-1, bert_config.hidden_size])
    with tf.variable_scope("bert/encoder/layer_%d/attention/self" % layer, reuse=True):
      for name, cache in (("key", keys), ("value", values)):
        projected = modeling.dense_layer(flat, bert_config.hidden_size, name=name,
                                         initializer=initializer)
        cache.append(_split_heads(projected, batch, seq_length, bert_config))
  length = tf.reduce_sum(source_mask, axis=1)
  # max(): the all-padding rows that fill up a short last batch have no source at all.
  first_log_probs = _output_log_probs(bert_config, model.get_sequence_output(),
                                      model.get_embedding_table(), tf.maximum(length - 1, 0))
  return SourceCache(keys, values, tf.cast(source_mask, tf.float32), length, first_log_probs)


def _output_log_probs(bert_config, sequence_output, embedding_table, positions):
  """Log-probabilities of the stock MLM head at one position per row.

  Args:
    sequence_output: float [rows, length, hidden].
    embedding_table: the word embeddings (tied output weights).
    positions: int32 [rows].

  Returns:
    float [rows, vocab_size].
  """
  positions = tf.expand_dims(positions, 1)
  zeros = tf.zeros_like(positions)
  # The head's loss terms get weight 0; only its log-probabilities are used.
  _, _, log_probs = pretraining_model.get_masked_lm_output(
      bert_config, sequence_output, embedding_table, positions, zeros,
      tf.cast(zeros, tf.float32))
  return log_probs


def _embed_step(bert_config, token_ids, positions):
  """Embeddings of one target token per row: word + type 1 + position, layer-normed.

  Args:
    token_ids, positions: int32 [rows].

  Returns:
    float [rows, hidden].
  """
  with tf.variable_scope("embeddings"):
    word_table = tf.get_variable("word_embeddings")
    type_table = tf.get_variable("token_type_embeddings")
    position_table = tf.get_variable("position_embeddings")
    # Summed in the order of modeling.embedding_postprocessor: (word + type) + position.
    output = tf.gather(word_table, token_ids) + type_table[1]
    output += tf.gather(position_table, positions)
    return modeling.layer_norm(output), word_table


def _layer_step(bert_config, layer_input, source_keys, source_values, source_mask,
                target_keys, target_values, slot):
  """One Transformer layer for one new position per row, attending to the caches.

  Args:
    layer_input: float [rows, hidden].
    source_keys, source_values: float [rows, heads, seq_length, size_per_head].
    source_mask: float [rows, seq_length].
    target_keys, target_values: float [rows, heads, max_target_length, size_per_head]; slots
      >= `slot` are still zero.
    slot: int32 scalar, the target slot of the new token.

  Returns:
    (layer output [rows, hidden], target_keys, target_values with slot `slot` filled).
  """
  config = bert_config
  rows = modeling.get_shape_list(layer_input)[0]
  num_slots = target_keys.shape[2]
  initializer = modeling.create_initializer(config.initializer_range)
  with tf.variable_scope("attention"):
    with tf.variable_scope("self"):
      projections = [
          _split_heads(modeling.dense_layer(layer_input, config.hidden_size, name=name,
                                            initializer=initializer), rows, 1, config)
          for name in ("query", "key", "value")]
    # Writing by adding a one-hot slot keeps the buffers' shapes fixed in the while_loop.
    at_slot = tf.reshape(tf.one_hot(slot, num_slots), [1, 1, num_slots, 1])
    target_keys += at_slot * projections[1]
    target_values += at_slot * projections[2]
    visible_targets = tf.cast(tf.range(num_slots) <= slot, tf.float32)
    mask = tf.concat([source_mask, tf.tile(visible_targets[tf.newaxis, :], [rows, 1])], axis=1)
    context = modeling.scaled_dot_product_attention(
        projections[0], tf.concat([source_keys, target_keys], axis=2),
        tf.concat([source_values, target_values], axis=2), tf.expand_dims(mask, 1))
    context = tf.reshape(context, [rows, config.hidden_size])
    with tf.variable_scope("output"):
      attention_output = modeling.dense_layer(context, config.hidden_size, name="dense",
                                              initializer=initializer)
      attention_output = modeling.layer_norm(attention_output + layer_input)
  with tf.variable_scope("intermediate"):
    intermediate = modeling.dense_layer(
        attention_output, config.intermediate_size, name="dense",
        activation=modeling.get_activation(config.hidden_act), initializer=initializer)
  with tf.variable_scope("output"):
    output = modeling.dense_layer(intermediate, config.hidden_size, name="dense",
                                  initializer=initializer)
    output = modeling.layer_norm(output + attention_output)
  return output, target_keys, target_values


def make_step_fn(bert_config, source, repeat):
  """The incremental decoder over `repeat` copies (beams) of each source.

  Args:
    bert_config: modeling.BertConfig.
    source: SourceCache of `batch` examples.
    repeat: rows per example (beam_size); row b * repeat + k belongs to example b.

  Returns:
    step_fn(token_ids [rows], slot, target_cache) -> (log_probs [rows, vocab_size],
    target_cache): feeds each row's token of target slot `slot` (int32 scalar) and returns the
    distribution of the next one. target_cache is a list of 2 * num_layers float Tensors
    [rows, heads, max_target_length, size_per_head] (keys, values of each layer), threaded
    through the while_loop.
  """
  tile = lambda t: tf.repeat(t, repeat, axis=0)
  source_keys = [tile(k) for k in source.keys]
  source_values = [tile(v) for v in source.values]
  source_mask = tile(source.mask)
  source_length = tile(source.length)

  def step_fn(token_ids, slot, target_cache):
    new_cache = []
    with tf.variable_scope("bert", reuse=True):
      hidden, word_table = _embed_step(bert_config, token_ids, source_length + slot)
      for layer in range(bert_config.num_hidden_layers):
        with tf.variable_scope("encoder/layer_%d" % layer):
          hidden, keys, values = _layer_step(
              bert_config, hidden, source_keys[layer], source_values[layer], source_mask,
              target_cache[2 * layer], target_cache[2 * layer + 1], slot)
          new_cache += [keys, values]
    with tf.variable_scope(tf.get_variable_scope(), reuse=True):
      log_probs = _output_log_probs(bert_config, tf.expand_dims(hidden, 1), word_table,
                                    tf.zeros_like(token_ids))
    return log_probs, new_cache

  return step_fn


def empty_target_cache(bert_config, rows, max_target_length):
  """2 * num_layers zero buffers [rows, heads, max_target_length, size_per_head]."""
  heads = bert_config.num_attention_heads
  shape = [rows, heads, max_target_length, bert_config.hidden_size // heads]
  return [tf.zeros(shape) for _ in range(2 * bert_config.num_hidden_layers)]


def length_penalty(length, alpha):
  """GNMT length normaliser ((5 + length) / 6) ** alpha; length a number or float Tensor."""
  return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def constrain_log_probs(log_probs, sequences, slot, params):
  """Applies the decoding constraints to the distribution of target slot `slot`.

  Args:
    log_probs: float [rows, vocab_size].
    sequences: int32 [rows, max_target_length + 1], each row's tokens; slots < `slot` are set.
    slot: int32 scalar.
    params: DecodeParams.

  Returns:
    float [rows, vocab_size] with banned tokens at NEG_INF.
  """
  rows, vocab_size = modeling.get_shape_list(log_probs, expected_rank=2)
  banned = tf.reduce_sum(tf.one_hot(params.banned_ids, vocab_size), axis=0)[tf.newaxis, :]
  # After max_target_length tokens only [SEP] may follow.
  sep = tf.one_hot(params.sep_id, vocab_size)[tf.newaxis, :]
  banned += tf.cast(tf.equal(slot, params.max_target_length), tf.float32) * (1.0 - sep)
  # Before min_target_length tokens, [SEP] may not come.
  banned += tf.cast(slot < min(params.min_target_length, params.max_target_length),
                    tf.float32) * sep
  if params.no_repeat_ngram_size > 0:
    banned += _repeated_ngram_bans(sequences, slot, params.no_repeat_ngram_size, rows,
                                   vocab_size)
  return tf.where_v2(banned > 0, NEG_INF, log_probs)


def _repeated_ngram_bans(sequences, slot, n, rows, vocab_size):
  """float [rows, vocab_size], > 0 for tokens that would complete an n-gram seen before.

  The new token at `slot` completes the n-gram sequences[slot - n + 1 : slot + 1]. For every
  earlier start j (j + n - 1 < slot) whose first n - 1 tokens equal the last n - 1 generated
  ones, the token that followed them (sequences[j + n - 1]) is banned.
  """
  num_slots = sequences.shape[1]
  starts = num_slots - n + 1  # possible n-gram starts j in the buffer
  if starts < 1:
    return tf.zeros([rows, vocab_size])
  match = tf.tile((tf.range(starts) <= slot - n)[tf.newaxis, :], [rows, 1])
  for m in range(n - 1):
    previous = tf.gather(sequences, tf.maximum(slot - n + 1 + m, 0), axis=1)  # [rows]
    match &= tf.equal(sequences[:, m:m + starts], previous[:, tf.newaxis])
  followers = sequences[:, n - 1:n - 1 + starts]  # [rows, starts]
  row_ids = tf.tile(tf.range(rows)[:, tf.newaxis], [1, starts])
  indices = tf.stack([tf.reshape(row_ids, [-1]), tf.reshape(followers, [-1])], axis=1)
  return tf.scatter_nd(indices, tf.reshape(tf.cast(match, tf.float32), [-1]),
                       [rows, vocab_size])


def _write_slot(sequences, slot, tokens):
  """sequences [..., num_slots] with `tokens` [...] written at `slot` (which held 0)."""
  num_slots = sequences.shape[-1]
  return sequences + tf.one_hot(slot, num_slots, dtype=tf.int32) * tokens[..., tf.newaxis]


def greedy_search(bert_config, source, params):
  """Greedy decoding.

  Args:
    bert_config: modeling.BertConfig.
    source: SourceCache of `batch` examples.
    params: DecodeParams.

  Returns:
    (output_ids int32 [batch, max_target_length + 1]: the tokens up to and including [SEP],
    then 0; scores float [batch]: log P / length_penalty).
  """
  batch = modeling.get_shape_list(source.first_log_probs)[0]
  step_fn = make_step_fn(bert_config, source, 1)
  num_slots = params.max_target_length + 1

  def select(log_probs, sequences, slot, done, log_prob_sum, length):
    log_probs = constrain_log_probs(log_probs, sequences, slot, params)
    tokens = tf.where(done, tf.zeros([batch], tf.int32),
                      tf.argmax(log_probs, axis=1, output_type=tf.int32))
    log_prob_sum += tf.where(done, tf.zeros([batch]), tf.reduce_max(log_probs, axis=1))
    length = tf.where(done, length, tf.fill([batch], slot + 1))
    return (_write_slot(sequences, slot, tokens), done | tf.equal(tokens, params.sep_id),
            log_prob_sum, length)

  state = select(source.first_log_probs, tf.zeros([batch, num_slots], tf.int32), 0,
                 tf.zeros([batch], tf.bool), tf.zeros([batch]), tf.zeros([batch], tf.int32))

  def body(slot, sequences, done, log_prob_sum, length, cache):
    log_probs, cache = step_fn(sequences[:, slot - 1], slot - 1, cache)
    return (slot + 1,) + select(log_probs, sequences, slot, done, log_prob_sum, length) + (
        cache,)

  loop_vars = (tf.constant(1),) + state + (
      empty_target_cache(bert_config, batch, params.max_target_length),)
  _, sequences, _, log_prob_sum, length, _ = tf.while_loop(
      lambda slot, seqs, done, *_: tf.logical_not(tf.reduce_all(done)), body, loop_vars,
      back_prop=False, maximum_iterations=params.max_target_length)
  return sequences, log_prob_sum / length_penalty(length, params.length_penalty)


BeamState = collections.namedtuple("BeamState", [
    "alive_seq",  # int32 [batch, beam, slots]
    "alive_log_probs",  # float [batch, beam]
    "finished_seq",  # int32 [batch, beam, slots]
    "finished_scores",  # float [batch, beam], NEG_INF for empty entries
    "done",  # bool [batch]
])


def _beam_select(log_probs, state, slot, params):
  """Extends the alive hypotheses by the tokens of target slot `slot`.

  Args:
    log_probs: float [batch * beam, vocab_size], the next-token distribution of each alive row.
    state: BeamState.
    slot: int32 scalar.
    params: DecodeParams.

  Returns:
    (new BeamState, parents int32 [batch, beam]: the alive row each new alive row extends).
  """
  batch, beam, num_slots = modeling.get_shape_list(state.alive_seq)
  log_probs = constrain_log_probs(
      log_probs, tf.reshape(state.alive_seq, [batch * beam, num_slots]), slot, params)
  vocab_size = modeling.get_shape_list(log_probs)[1]
  candidates = tf.expand_dims(state.alive_log_probs, 2) + tf.reshape(
      log_probs, [batch, beam, vocab_size])
  top_scores, top_ids = tf.nn.top_k(tf.reshape(candidates, [batch, beam * vocab_size]),
                                    k=2 * beam)
  top_parents, top_tokens = top_ids // vocab_size, top_ids % vocab_size
  top_seq = _write_slot(tf.gather(state.alive_seq, top_parents, batch_dims=1), slot, top_tokens)
  is_sep = tf.equal(top_tokens, params.sep_id)

  # A [SEP] ranked within the first `beam` candidates finishes its hypothesis.
  finishing = (is_sep & (tf.range(2 * beam) < beam)[tf.newaxis, :] &
               tf.logical_not(state.done)[:, tf.newaxis] & (top_scores > NEG_INF / 2))
  new_scores = tf.where(finishing, top_scores / length_penalty(slot + 1, params.length_penalty),
                        tf.fill(tf.shape(top_scores), NEG_INF))
  finished_scores, keep = tf.nn.top_k(tf.concat([state.finished_scores, new_scores], 1), k=beam)
  finished_seq = tf.gather(tf.concat([state.finished_seq, top_seq], 1), keep, batch_dims=1)

  # The best `beam` candidates not ending in [SEP] stay alive.
  alive_log_probs, keep = tf.nn.top_k(
      tf.where(is_sep, tf.fill(tf.shape(top_scores), NEG_INF), top_scores), k=beam)
  new_state = BeamState(
      alive_seq=tf.gather(top_seq, keep, batch_dims=1),
      alive_log_probs=alive_log_probs,
      finished_seq=finished_seq,
      finished_scores=finished_scores,
      done=state.done | (finished_scores[:, beam - 1] > NEG_INF / 2))
  return new_state, tf.gather(top_parents, keep, batch_dims=1)


def beam_search(bert_config, source, params):
  """Beam search (see the module docstring).

  Args:
    bert_config: modeling.BertConfig.
    source: SourceCache of `batch` examples.
    params: DecodeParams; beam_size >= 1.

  Returns:
    (output_ids int32 [batch, max_target_length + 1], scores float [batch]) of the best
    finished hypothesis of each example.
  """
  batch = modeling.get_shape_list(source.first_log_probs)[0]
  beam = params.beam_size
  num_slots = params.max_target_length + 1
  step_fn = make_step_fn(bert_config, source, beam)
  # Only beam 0 is live at first, so the first step does not pick the same token `beam` times.
  initial = BeamState(
      alive_seq=tf.zeros([batch, beam, num_slots], tf.int32),
      alive_log_probs=tf.tile(tf.constant([[0.0] + [NEG_INF] * (beam - 1)]), [batch, 1]),
      finished_seq=tf.zeros([batch, beam, num_slots], tf.int32),
      finished_scores=tf.fill([batch, beam], NEG_INF),
      done=tf.zeros([batch], tf.bool))
  state, _ = _beam_select(tf.repeat(source.first_log_probs, beam, axis=0), initial, 0, params)

  def body(slot, state, cache):
    tokens = tf.reshape(state.alive_seq[:, :, slot - 1], [batch * beam])
    log_probs, cache = step_fn(tokens, slot - 1, cache)
    state, parents = _beam_select(log_probs, state, slot, params)
    rows = tf.reshape(parents + beam * tf.range(batch)[:, tf.newaxis], [batch * beam])
    return slot + 1, state, [tf.gather(c, rows) for c in cache]

  _, state, _ = tf.while_loop(
      lambda slot, state, cache: tf.logical_not(tf.reduce_all(state.done)), body,
      (tf.constant(1), state, empty_target_cache(bert_config, batch * beam,
                                                 params.max_target_length)),
      back_prop=False, maximum_iterations=params.max_target_length)
  return state.finished_seq[:, 0], state.finished_scores[:, 0]


def decode(bert_config, input_ids, input_mask, segment_ids, params):
  """Rewrites each source: greedy when params.beam_size == 1, else beam search.

  Returns:
    dict "output_ids" int32 [batch, max_target_length + 1] (tokens up to [SEP], then 0) and
    "scores" float [batch].
  """
  source = encode_source(bert_config, input_ids, input_mask, segment_ids)
  search = greedy_search if params.beam_size == 1 else beam_search
  output_ids, scores = search(bert_config, source, params)
  return {"output_ids": output_ids, "scores": scores}


def make_decode_tower_fn(bert_config, params):
  """tower_fn for inference.run_inference: features -> (None, decode outputs)."""

  def tower_fn(features, global_batch):
    del global_batch  # Decoding has no loss to normalise.
    return None, decode(bert_config, features["input_ids"], features["input_mask"],
                        features["segment_ids"], params)

  return tower_fn
