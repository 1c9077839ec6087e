"""Data for text rewriting (UniLM-style seq2seq with BERT): TSV pairs, packing, caching, text.

Every example is packed into one sequence of max_seq_length WordPiece ids:

  [CLS] source [SEP] target [SEP] [PAD] ...
  segment_ids  0 ... 0   1 ... 1   0 ...

The source gets a fixed share, max_seq_length - max_target_length - 3 tokens (longer sources
keep their head), so that at decoding time max_target_length tokens and the final [SEP] always
fit after it. A target longer than max_target_length keeps its head and loses its final [SEP]:
the model must not learn to stop where the text was cut. Test rows may carry no target; they
are packed as `[CLS] source [SEP]`.

Rewrite pretraining (`make_pretraining_pairs`) turns plain text into the same kind of pairs.
"""

import collections

from absl import logging
import tensorflow.compat.v1 as tf

from core import atomic_files
from core import dropped_input
from core.errors import InputError
from engine import cli
from engine import input_data
import tokenization

# Bumped whenever the packing changes, so old cached records are not reused.
RECORD_FORMAT = "rewrite-records-v1"
COLUMN_ORDERS = ("source_target", "target_source")
PRETRAIN_TASKS = ("continue", "span")
# SentencePiece marks the start of a word with this character.

RewriteRow = collections.namedtuple("RewriteRow", ["line_number", "source", "target"])


def source_budget(max_seq_length, max_target_length):
  """Source tokens that fit: max_seq_length - max_target_length - 3 ([CLS], [SEP], [SEP])."""
  budget = max_seq_length - max_target_length - 3
  if max_target_length < 1 or budget < 1:
    raise InputError("--max_target_length=%d with --max_seq_length=%d leaves %d source tokens; "
                     "need max_target_length >= 1 and max_seq_length >= max_target_length + 4"
                     % (max_target_length, max_seq_length, budget))
  return budget


def _tsv_rows(path):
  """Yields (line_number, fields) of a UTF-8 TSV file (no header, no quoting)."""
  empty = True
  for line_number, text in cli.text_lines(path):
    fields = text.split("\t")
    if any(not field.strip() for field in fields):
      raise InputError("%s:%d: empty column (or blank line); every column must hold text" %
                       (path, line_number))
    empty = False
    yield line_number, fields
  if empty:
    raise InputError("%s: empty file: no rows (expected one example per line)" % path)


def read_rewrite_tsv(path, column_order="source_target", need_target=True):
  """Reads `source<TAB>target` rows (`target<TAB>source` with column_order="target_source").

  Args:
    path: the TSV file. A tab only ever separates columns (texts are not quoted).
    column_order: one of COLUMN_ORDERS.
    need_target: False for test files, whose rows may hold the source alone.

  Returns:
    list of RewriteRow(line_number, source, target or None).

  Raises:
    InputError naming the file and line of a row with the wrong number of columns or an empty
    column.
  """
  table = list(_tsv_rows(path))
  if not need_target:  # A test row may hold the source alone; a file holds one layout.
    cli.check_row_widths(path, table)
  rows = []
  for line_number, fields in table:
    if len(fields) == 1 and not need_target:
      rows.append(RewriteRow(line_number, fields[0], None))
    elif len(fields) != 2:
      layout = "target<TAB>source" if column_order == "target_source" else "source<TAB>target"
      raise InputError("%s:%d: expected %s (2 tab-separated columns%s), got %d" %
                       (path, line_number, layout, "" if need_target else ", or the source "
                        "alone", len(fields)))
    elif column_order == "target_source":
      rows.append(RewriteRow(line_number, fields[1], fields[0]))
    else:
      rows.append(RewriteRow(line_number, fields[0], fields[1]))
  return rows


def read_rank_tsv(path):
  """Reads ranking rows `source<TAB>candidate_1<TAB>...<TAB>candidate_k` (k >= 1).

  Returns:
    list of RewriteRow(line_number, source, list of candidate strings).
  """
  rows = []
  for line_number, fields in _tsv_rows(path):
    if len(fields) < 2:
      raise InputError("%s:%d: expected source<TAB>candidate_1<TAB>...<TAB>candidate_k, got "
                       "one column" % (path, line_number))
    rows.append(RewriteRow(line_number, fields[0], fields[1:]))
  return rows


def encode_pair(tokenizer, source_tokens, target_tokens, max_seq_length, max_target_length):
  """Packs one example into fixed-length id lists (see the module docstring).

  Args:
    tokenizer: FullTokenizer (for its vocabulary).
    source_tokens: list of source WordPiece tokens.
    target_tokens: list of target tokens, or None (test rows: the source part alone).
    max_seq_length, max_target_length: the layout.

  Returns:
    (features, source_truncated, target_truncated): features is a dict of "input_ids",
    "input_mask", "segment_ids", each a list of max_seq_length ints.
  """
  budget = source_budget(max_seq_length, max_target_length)
  tokens = ["[CLS]"] + source_tokens[:budget] + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  target_truncated = False
  if target_tokens is not None:
    target_truncated = len(target_tokens) > max_target_length
    tail = target_tokens[:max_target_length] + ([] if target_truncated else ["[SEP]"])
    tokens += tail
    segment_ids += [1] * len(tail)
  input_ids = tokenizer.convert_tokens_to_ids(tokens)
  padding = [0] * (max_seq_length - len(input_ids))
  features = {
      "input_ids": input_ids + padding,
      "input_mask": [1] * len(input_ids) + padding,
      "segment_ids": segment_ids + padding,
  }
  return features, len(source_tokens) > budget, target_truncated


def name_to_features(max_seq_length):
  """The TFRecord schema of packed examples."""
  return {name: tf.io.FixedLenFeature([max_seq_length], tf.int64)
          for name in ("input_ids", "input_mask", "segment_ids")}


def _to_example(features):
  """A tf.train.Example holding int64 list features."""
  return tf.train.Example(features=tf.train.Features(feature={
      name: tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))
      for name, values in features.items()}))


def write_pairs(path, token_pairs, tokenizer, max_seq_length, max_target_length, what,
                targets_cut_by_design=False):
  """Packs (source_tokens, target_tokens or None) pairs into a TFRecord file, atomically.

  Logs how many sources and targets were truncated, and the share of their tokens cut (a
  warning above core.dropped_input.WARN_SHARE); `what` names the data in those lines.
  targets_cut_by_design: the targets are the rest of a passage (rewrite pretraining's continue
  task), cut on purpose; their share is not reported.

  Returns:
    the number of examples written.
  """
  counts = collections.Counter()
  budget = source_budget(max_seq_length, max_target_length)

  def _write(tmp_path):
    with tf.io.TFRecordWriter(tmp_path) as writer:
      for source_tokens, target_tokens in token_pairs:
        features, source_cut, target_cut = encode_pair(
            tokenizer, source_tokens, target_tokens, max_seq_length, max_target_length)
        counts["examples"] += 1
        counts["source_truncated"] += int(source_cut)
        counts["target_truncated"] += int(target_cut)
        counts["source_tokens"] += len(source_tokens)
        counts["source_cut"] += max(0, len(source_tokens) - budget)
        counts["target_tokens"] += len(target_tokens or ())
        counts["target_cut"] += max(0, len(target_tokens or ()) - max_target_length)
        writer.write(_to_example(features).SerializeToString())

  atomic_files.write_atomically(path, _write)
  logging.info("%s: %d examples; %d sources truncated to %d tokens, %d targets truncated to %d "
               "tokens (max_seq_length=%d)", what, counts["examples"], counts["source_truncated"],
               budget, counts["target_truncated"], max_target_length, max_seq_length)
  dropped_input.report(
      "%s sources" % what, counts["source_cut"], counts["source_tokens"], "tokens",
      "cut from the end of %d sources longer than %d tokens (--max_seq_length=%d minus "
      "--max_target_length=%d and 3): the model never reads them; raise --max_seq_length" %
      (counts["source_truncated"], budget, max_seq_length, max_target_length))
  if not targets_cut_by_design:
    dropped_input.report(
        "%s targets" % what, counts["target_cut"], counts["target_tokens"], "tokens",
        "cut from the end of %d targets longer than --max_target_length=%d: the model learns "
        "only their heads, and decoding stops there; raise --max_target_length" %
        (counts["target_truncated"], max_target_length))
  return counts["examples"]


def cached_records(output_dir, split, key_parts, make_pairs, tokenizer, max_seq_length,
                   max_target_length, targets_cut_by_design=False):
  """The TFRecord file of `split`, built with make_pairs() unless a cache for key_parts exists.

  Args:
    output_dir: where the cache lives.
    split: name used in the file name ("train", "dev", ...).
    key_parts: everything the records depend on besides the layout (file digests, tokenizer
      digest, options); the layout and RECORD_FORMAT are added here.
    make_pairs: callable() -> iterable of (source_tokens, target_tokens or None).
    tokenizer, max_seq_length, max_target_length: see encode_pair.
    targets_cut_by_design: see write_pairs.

  Returns:
    the record file path.
  """
  key = input_data.cache_key(RECORD_FORMAT, max_seq_length, max_target_length, *key_parts)
  path = input_data.cached_record_path(output_dir, split, key)
  if tf.io.gfile.exists(path):
    logging.info("Using cached %s records %s", split, path)
  else:
    write_pairs(path, make_pairs(), tokenizer, max_seq_length, max_target_length, split,
                targets_cut_by_design)
  return path


def tokenize_rows(tokenizer, rows, with_targets=True):
  """(source_tokens, target_tokens or None) for each RewriteRow."""
  for row in rows:
    target = tokenizer.tokenize(row.target) if with_targets and row.target is not None else None
    yield tokenizer.tokenize(row.source), target


def ids_to_text(tokenizer, ids, sep_id):
  """Decoder output ids -> text: cut at the first [SEP], drop padding (0), detokenize."""
  ids = [int(i) for i in ids]
  if sep_id in ids:
    ids = ids[:ids.index(sep_id)]
  return tokenization.detokenize(tokenizer.convert_ids_to_tokens([i for i in ids if i != 0]))


def read_passages(paths, tokenizer, max_tokens):
  """Tokenized passages of plain text files.

  A blank line ends a document. The lines of a document are concatenated and cut into passages
  of max_tokens tokens (the last one of a document may be shorter), so a passage never spans two
  documents.

  Returns:
    list of token lists, each of at least 2 tokens.
  """
  passages = []
  for path in paths:
    current = []
    for _, line in cli.text_lines(path):
      if not line.strip():
        passages.append(current)
        current = []
        continue
      current += tokenizer.tokenize(line)
      while len(current) >= max_tokens:
        passages.append(current[:max_tokens])
        current = current[max_tokens:]
    passages.append(current)
  short = sum(len(p) for p in passages if len(p) < 2)
  dropped_input.report("--corpus_file=%s" % ",".join(paths), short,
                       sum(len(p) for p in passages), "tokens",
                       "are in paragraphs of one token, too short to make a pair of")
  passages = [p for p in passages if len(p) >= 2]
  if not passages:
    raise InputError("--corpus_file=%s: no text to learn from (the file(s) are empty or blank, "
                     "or no paragraph has 2 tokens)" % ",".join(paths))
  return passages


def make_pretraining_pairs(passages, rng, max_source_tokens, max_target_length, tasks):
  """Self-supervised rewrite pairs from passages, in random order.

  Tasks:
    continue: cut the passage at a random point; source = the text before the cut (its last
      max_source_tokens tokens), target = what follows. When the rest is longer than
      max_target_length, encode_pair keeps its head and drops the final [SEP] (the text goes
      on), so the model learns to stop only where a passage really ends.
    span: replace a random span of 1..max_target_length tokens (at most a third of the
      passage) by one [MASK]; source = the passage around it, target = the span.

  Args:
    passages: list of token lists (at least 2 tokens each).
    rng: random.Random.
    max_source_tokens: the source budget of the layout.
    max_target_length: longest target.
    tasks: subset of PRETRAIN_TASKS.

  Returns:
    list of (source_tokens, target_tokens).
  """
  pairs = []
  for tokens in passages:
    if "continue" in tasks:
      cut = rng.randint(1, len(tokens) - 1)
      pairs.append((tokens[max(0, cut - max_source_tokens):cut], tokens[cut:]))
    if "span" in tasks:
      length = rng.randint(1, max(1, min(max_target_length, len(tokens) // 3)))
      start = rng.randint(0, len(tokens) - length)
      source = tokens[:start] + ["[MASK]"] + tokens[start + length:]
      # Keep a window of the source around the [MASK] when the passage is too long.
      first = max(0, min(start - max_source_tokens // 2, len(source) - max_source_tokens))
      pairs.append((source[first:first + max_source_tokens], tokens[start:start + length]))
  rng.shuffle(pairs)
  return pairs
