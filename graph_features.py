"""Model inputs from token ids, in the graph: the truncation and packing of the run scripts.

`classifier_inputs` is classifier_data.convert_single_example and `rewrite_source_inputs` is
rewrite_data.encode_pair (source only) as TensorFlow ops, on the RaggedTensors of
graph_tokenizer.GraphTokenizer.tokenize, so that an exported model builds exactly the inputs
the model was trained and predicted on.
"""

import tensorflow as tf

import classifier_data


def _positions(tokens):
  """int64 RaggedTensor like `tokens`: each token's index in its row."""
  return tf.ragged.range(tokens.row_lengths())


def truncate(tokens, budgets, mode):
  """classifier_data.truncate_tokens on every row.

  Args:
    tokens: RaggedTensor [batch, (length)].
    budgets: int64 [batch], the most tokens each row may keep.
    mode: one of classifier_data.TRUNCATION_MODES.

  Returns:
    RaggedTensor [batch, (min(length, budget))].
  """
  positions = _positions(tokens)
  lengths = tokens.row_lengths()[:, tf.newaxis]
  budgets = budgets[:, tf.newaxis]
  head = budgets
  if mode == "tail":
    head = tf.zeros_like(budgets)
  elif mode == "head_tail":
    head = tf.minimum(budgets, classifier_data.HEAD_TAIL_HEAD_TOKENS)
  keep = (lengths <= budgets) | (positions < head) | (positions >= lengths - (budgets - head))
  return tf.ragged.boolean_mask(tokens, keep)


def pair_budgets(len_a, len_b, budget):
  """classifier_data._pair_budgets in closed form: the longer text loses tokens first.

  Args:
    len_a, len_b: int64 [batch] token counts.
    budget: the tokens both texts may keep together.

  Returns:
    (budget_a, budget_b), int64 [batch] each.
  """
  # The loop shortens the longer text until both are even, then takes turns starting with b,
  # so a keeps ceil(budget / 2) unless b is short enough to leave it more.
  budget_a = tf.minimum(len_a, tf.maximum(budget - len_b, (budget + 1) // 2))
  return budget_a, tf.minimum(len_b, budget - budget_a)


def _pad(rows, max_seq_length):
  """int32 [batch, max_seq_length] from a RaggedTensor of at most max_seq_length columns."""
  return tf.cast(rows.to_tensor(default_value=0, shape=[None, max_seq_length]), tf.int32)


def _column(value, batch):
  """int64 RaggedTensor [batch, 1] holding `value`."""
  return tf.RaggedTensor.from_tensor(tf.fill([batch, 1], tf.constant(value, tf.int64)))


def classifier_inputs(ids_a, ids_b, cls_id, sep_id, max_seq_length, mode):
  """[CLS] a [SEP] (b [SEP]), truncated and padded, as classifier_data.convert_single_example.

  Args:
    ids_a: int RaggedTensor [batch, (tokens)] of the first texts.
    ids_b: the same for the second texts, or None.
    cls_id, sep_id: ids of [CLS] and [SEP].
    max_seq_length: the model's sequence length.
    mode: one of classifier_data.TRUNCATION_MODES.

  Returns:
    dict input_ids, input_mask, segment_ids: int32 [batch, max_seq_length].
  """
  ids_a = tf.cast(ids_a, tf.int64)
  batch = ids_a.nrows()
  cls, sep = _column(cls_id, batch), _column(sep_id, batch)
  if ids_b is None:
    ids_a = truncate(ids_a, tf.fill([batch], tf.constant(max_seq_length - 2, tf.int64)), mode)
    parts = [(cls, 0), (ids_a, 0), (sep, 0)]
  else:
    ids_b = tf.cast(ids_b, tf.int64)
    budget_a, budget_b = pair_budgets(ids_a.row_lengths(), ids_b.row_lengths(),
                                      max_seq_length - 3)
    parts = [(cls, 0), (truncate(ids_a, budget_a, mode), 0), (sep, 0),
             (truncate(ids_b, budget_b, mode), 1), (sep, 1)]
  input_ids = tf.concat([part for part, _ in parts], axis=1)
  segment_ids = tf.concat([tf.ones_like(part) * segment for part, segment in parts], axis=1)
  return {"input_ids": _pad(input_ids, max_seq_length),
          "input_mask": _pad(tf.ones_like(input_ids), max_seq_length),
          "segment_ids": _pad(segment_ids, max_seq_length)}


def rewrite_source_inputs(source_ids, cls_id, sep_id, max_seq_length, source_budget):
  """[CLS] source [SEP] with the head of the source kept, as rewrite_data.encode_pair.

  Args:
    source_ids: int RaggedTensor [batch, (tokens)].
    cls_id, sep_id: ids of [CLS] and [SEP].
    max_seq_length: the model's sequence length.
    source_budget: rewrite_data.source_budget of the layout.

  Returns:
    dict input_ids, input_mask, segment_ids: int32 [batch, max_seq_length] (segment ids 0).
  """
  source_ids = tf.cast(source_ids, tf.int64)
  batch = source_ids.nrows()
  source_ids = truncate(source_ids, tf.fill([batch], tf.constant(source_budget, tf.int64)),
                        "head")
  input_ids = tf.concat([_column(cls_id, batch), source_ids, _column(sep_id, batch)], axis=1)
  return {"input_ids": _pad(input_ids, max_seq_length),
          "input_mask": _pad(tf.ones_like(input_ids), max_seq_length),
          "segment_ids": _pad(tf.zeros_like(input_ids), max_seq_length)}
