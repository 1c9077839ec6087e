"""Model inputs from token ids, in the graph: the truncation and packing of the run scripts.

`classifier_inputs` is classifier_data.convert_single_example and `rewrite_source_inputs` is
rewrite_data.encode_pair (source only) as TensorFlow ops, on the RaggedTensors of
graph_tokenizer.GraphTokenizer.tokenize, so that an exported model builds exactly the inputs
the model was trained and predicted on. `sliding_windows` is tokenization.window_starts (the
windows of --long_text=sliding) and `pool_windows` classifier/windows.py's pooling.
"""

import collections

import tensorflow as tf

import tokenization


class Segment(collections.namedtuple("Segment", ["values", "rows", "columns", "lengths"])):
  """Tokens to place in each row: values, rows and columns [n] (column within the segment),
  lengths [batch] (tokens per row)."""


def truncate(tokens, budgets, mode):
  """tokenization.truncate_tokens on every row, as flat lists of the tokens kept.

  Args:
    tokens: int64 RaggedTensor [batch, (length)].
    budgets: int64 [batch], the most tokens each row may keep.
    mode: one of tokenization.TRUNCATION_MODES.

  Returns:
    a Segment of the kept tokens.
  """
  rows = tokens.value_rowids()
  index = tf.range(tf.size(tokens.flat_values, out_type=tf.int64)) - tf.gather(
      tokens.row_starts(), rows)
  length = tf.gather(tokens.row_lengths(), rows)
  budget = tf.gather(budgets, rows)
  head = budget
  if mode == "tail":
    head = tf.zeros_like(budget)
  elif mode == "head_tail":
    head = tf.minimum(budget, tokenization.HEAD_TAIL_HEAD_TOKENS)
  in_head = (length <= budget) | (index < head)
  keep = in_head | (index >= length - (budget - head))
  # A kept token of the tail part moves up by the tokens cut out before it.
  columns = tf.where(in_head, index, index - length + budget)
  return Segment(tf.boolean_mask(tokens.flat_values, keep), tf.boolean_mask(rows, keep),
                 tf.boolean_mask(columns, keep),
                 tf.math.unsorted_segment_sum(tf.cast(keep, tf.int64), rows, tokens.nrows()))


def sliding_windows(tokens, budget, stride):
  """The windows of tokenization.window_starts over every row, as one batch of windows.

  Args:
    tokens: int RaggedTensor [batch, (length)].
    budget: tokens per window.
    stride: tokens between window starts (1 <= stride <= budget).

  Returns:
    (windows int64 RaggedTensor [num_windows, (<= budget)], doc int64 [num_windows]: the row
    each window comes from, windows of a row consecutive and in order).
  """
  tokens = tf.cast(tokens, tf.int64)
  lengths = tokens.row_lengths()
  counts = 1 + (tf.maximum(lengths - budget, 0) + stride - 1) // stride
  doc = tf.repeat(tf.range(tokens.nrows(), dtype=tf.int64), counts)
  starts = tf.ragged.range(counts).flat_values * stride
  ends = tf.minimum(starts + budget, tf.gather(lengths, doc))
  offset = tf.gather(tokens.row_starts(), doc)
  positions = tf.ragged.range(offset + starts, offset + ends)
  windows = tf.RaggedTensor.from_row_splits(tf.gather(tokens.flat_values, positions.flat_values),
                                            positions.row_splits)
  return windows, doc


def pool_windows(logits, doc, batch, mode):
  """Each row's logits [batch, num_labels]: the mean or max of its windows' logits.

  Args:
    logits: float [num_windows, num_labels].
    doc: int64 [num_windows], each window's row (every row has one).
    batch: the number of rows.
    mode: "mean" or "max".
  """
  if mode == "max":
    return tf.math.unsorted_segment_max(logits, doc, batch)
  return tf.math.unsorted_segment_mean(logits, doc, batch)


def _special(token_id, batch):
  """One `token_id` in every row of a batch."""
  rows = tf.range(batch)
  return Segment(tf.fill([batch], tf.constant(token_id, tf.int64)), rows, tf.zeros_like(rows),
                 tf.ones_like(rows))


def pair_budgets(len_a, len_b, budget):
  """tokenization.pair_budgets in closed form: the longer text loses tokens first.

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


def _pack(segments, batch, max_seq_length):
  """Lays (Segment, segment id) pairs out one after the other in each row, then pads.

  Returns:
    dict input_ids, input_mask, segment_ids: int32 [batch, max_seq_length].
  """
  offset = tf.zeros([batch], tf.int64)
  indices, ids, segment_ids = [], [], []
  for segment, segment_id in segments:
    indices.append(tf.stack([segment.rows, tf.gather(offset, segment.rows) + segment.columns],
                            axis=1))
    ids.append(segment.values)
    segment_ids.append(tf.fill(tf.shape(segment.values), tf.constant(segment_id, tf.int64)))
    offset += segment.lengths
  indices = tf.concat(indices, axis=0)
  shape = tf.stack([tf.cast(batch, tf.int64), max_seq_length])

  def scatter(values):
    return tf.cast(tf.scatter_nd(indices, values, shape), tf.int32)

  ids = tf.concat(ids, axis=0)
  return {"input_ids": scatter(ids), "input_mask": scatter(tf.ones_like(ids)),
          "segment_ids": scatter(tf.concat(segment_ids, axis=0))}


def classifier_inputs(ids_a, ids_b, cls_id, sep_id, max_seq_length, mode):
  """[CLS] a [SEP] (b [SEP]), truncated and padded, as classifier_data.convert_single_example.

  Args:
    ids_a: int RaggedTensor [batch, (tokens)] of the first texts.
    ids_b: the same for the second texts, or None.
    cls_id, sep_id: ids of [CLS] and [SEP].
    max_seq_length: the model's sequence length.
    mode: one of tokenization.TRUNCATION_MODES.

  Returns:
    dict input_ids, input_mask, segment_ids: int32 [batch, max_seq_length].
  """
  ids_a = tf.cast(ids_a, tf.int64)
  batch = ids_a.nrows()
  cls, sep = _special(cls_id, batch), _special(sep_id, batch)
  if ids_b is None:
    budget = tf.fill([batch], tf.constant(max_seq_length - 2, tf.int64))
    segments = [(cls, 0), (truncate(ids_a, budget, mode), 0), (sep, 0)]
  else:
    ids_b = tf.cast(ids_b, tf.int64)
    budget_a, budget_b = pair_budgets(ids_a.row_lengths(), ids_b.row_lengths(),
                                      max_seq_length - 3)
    segments = [(cls, 0), (truncate(ids_a, budget_a, mode), 0), (sep, 0),
                (truncate(ids_b, budget_b, mode), 1), (sep, 1)]
  return _pack(segments, batch, max_seq_length)


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
  budget = tf.fill([batch], tf.constant(source_budget, tf.int64))
  return _pack([(_special(cls_id, batch), 0), (truncate(source_ids, budget, "head"), 0),
                (_special(sep_id, batch), 0)], batch, max_seq_length)
