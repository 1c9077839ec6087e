"""Classification data: the stock GLUE/XNLI processors, a generic TSV task, and feature caching.

Every reader raises `InputError` naming the file and line of a malformed row; no example is
ever silently dropped.

A long document is either truncated (--truncation) or, with long_text="sliding", cut into
overlapping windows of max_seq_length (tokenization.window_starts), each a record of its own
with the document's label. Every record carries `doc_index`, the position of its document in
the split, so the windows' outputs are pooled back into one row per document
(classifier/windows.py); `read_doc_index` reads it back.
"""

import collections
import hashlib
import os

from absl import logging
import tensorflow.compat.v1 as tf

from core import atomic_files
from core import dropped_input
from core.errors import InputError
from engine import cli
from engine import input_data
import tokenization

LABELS_FILE = "labels.txt"
# Bumped whenever the feature layout changes, so old caches are not reused.
FEATURES_FORMAT = "classifier-features-v3"
# The record feature naming each row's document (0-based position in its split).
DOC_INDEX = "doc_index"


class InputExample(object):
  """A single example: one or two texts and (except in unlabeled test sets) a label."""

  def __init__(self, guid, text_a, text_b=None, label=None):
    self.guid = guid
    self.text_a = text_a
    self.text_b = text_b
    self.label = label


class InputFeatures(object):
  """One example as fixed-length id lists."""

  def __init__(self, input_ids, input_mask, segment_ids, label_id, truncated=False,
               text_tokens=0, cut_tokens=0, head_only=0):
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.label_id = label_id
    self.truncated = truncated
    self.text_tokens = text_tokens  # the example's tokens before truncation
    self.cut_tokens = cut_tokens  # how many of them truncation left out
    self.head_only = head_only  # its texts that head_tail cut as head (no room for the end)


def read_tsv(input_file, quotechar=None):
  """Reads a tab separated file into a list of (line_number, fields) pairs (cli.tsv_rows).

  A missing file, or a line that is not utf-8, is an InputError naming the file and line; a
  UTF-8 byte order mark (as in GLUE's MRPC files) is skipped; lines of any length are read. As
  in stock BERT (quotechar=None), a tab always separates fields and quotes are text.
  """
  if quotechar is not None:
    raise ValueError("quoted TSV is not supported (quotechar=%r)" % quotechar)
  return cli.tsv_rows(input_file)


def _field(path, line_number, fields, index, what):
  """fields[index], or an InputError naming the file, line and expected layout."""
  if index >= len(fields) or index < -len(fields):
    raise InputError("%s:%d: expected at least %d tab-separated columns (%s), got %d" %
                     (path, line_number, (index if index >= 0 else -index - 1) + 1, what,
                      len(fields)))
  return tokenization.convert_to_unicode(fields[index])


class DataProcessor(object):
  """Reads a task's train/dev/test files into InputExamples."""

  # The file of each split in data_dir; a task with other file names overrides file_name.
  FILES = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}

  def file_name(self, split):
    """The file of `split` ("train", "dev" or "test"), relative to data_dir."""
    return self.FILES[split]

  def path(self, data_dir, split):
    """The file of `split` in data_dir."""
    return os.path.join(data_dir, self.file_name(split))

  def get_train_examples(self, data_dir):
    raise NotImplementedError()

  def get_dev_examples(self, data_dir):
    raise NotImplementedError()

  def get_test_examples(self, data_dir):
    return self.read_test_file(self.path(data_dir, "test"))

  def read_test_file(self, path):
    """Examples of a test file in the task's layout (any path, e.g. --predict_file)."""
    raise NotImplementedError()

  def get_labels(self):
    raise NotImplementedError()

  def _examples(self, path, set_type, skip_header, columns, layout):
    """Builds examples from `path` with `columns` = (text_a, text_b or None, label or None)."""
    examples = []
    a_col, b_col, label_col = columns
    rows = read_tsv(path)
    cli.check_row_widths(path, rows, layout)
    for i, (line_number, fields) in enumerate(rows):
      if skip_header and i == 0:
        continue
      text_a = _field(path, line_number, fields, a_col, layout)
      text_b = _field(path, line_number, fields, b_col, layout) if b_col is not None else None
      label = _field(path, line_number, fields, label_col, layout) if label_col is not None \
          else None
      examples.append(InputExample("%s-%d" % (set_type, line_number), text_a, text_b, label))
    if not examples:
      raise InputError("%s: no examples (expected rows of %s)" % (path, layout))
    return examples


class XnliProcessor(DataProcessor):
  """XNLI (stock layout): multinli/multinli.train.<lang>.tsv, xnli.dev.tsv, xnli.test.tsv."""

  def __init__(self, language="zh"):
    self.language = language

  def file_name(self, split):
    return {"train": os.path.join("multinli", "multinli.train.%s.tsv" % self.language),
            "dev": "xnli.dev.tsv", "test": "xnli.test.tsv"}[split]

  def get_train_examples(self, data_dir):
    path = self.path(data_dir, "train")
    examples = self._examples(path, "train", True, (0, 1, 2), "premise, hypothesis, label")
    for e in examples:
      if e.label == "contradictory":
        e.label = "contradiction"
    return examples

  def _xnli_split(self, path, name):
    examples = []
    layout = "language, gold_label, ..., sentence1 (col 7), sentence2 (col 8)"
    rows = read_tsv(path)
    cli.check_row_widths(path, rows, layout)
    for i, (line_number, fields) in enumerate(rows):
      if i == 0:
        continue
      if _field(path, line_number, fields, 0, layout) != self.language:
        continue
      examples.append(InputExample(
          "%s-%d" % (name, line_number), _field(path, line_number, fields, 6, layout),
          _field(path, line_number, fields, 7, layout),
          _field(path, line_number, fields, 1, layout)))
    return examples

  def get_dev_examples(self, data_dir):
    return self._xnli_split(self.path(data_dir, "dev"), "dev")

  def read_test_file(self, path):
    return self._xnli_split(path, "test")

  def get_labels(self):
    return ["contradiction", "entailment", "neutral"]


class MnliProcessor(DataProcessor):
  """MultiNLI (GLUE): train.tsv, dev_matched.tsv, test_matched.tsv."""

  _LAYOUT = "GLUE MNLI: sentence1 in column 9, sentence2 in column 10, label last"
  FILES = {"train": "train.tsv", "dev": "dev_matched.tsv", "test": "test_matched.tsv"}

  def get_train_examples(self, data_dir):
    return self._examples(self.path(data_dir, "train"), "train", True, (8, 9, -1),
                          self._LAYOUT)

  def get_dev_examples(self, data_dir):
    return self._examples(self.path(data_dir, "dev"), "dev_matched", True, (8, 9, -1),
                          self._LAYOUT)

  def read_test_file(self, path):
    return self._examples(path, "test", True, (8, 9, None), self._LAYOUT)

  def get_labels(self):
    return ["contradiction", "entailment", "neutral"]


class MrpcProcessor(DataProcessor):
  """MRPC (GLUE): Quality, #1 ID, #2 ID, #1 String, #2 String, with a header row."""

  _LAYOUT = "Quality, #1 ID, #2 ID, #1 String, #2 String"

  def get_train_examples(self, data_dir):
    return self._examples(self.path(data_dir, "train"), "train", True, (3, 4, 0),
                          self._LAYOUT)

  def get_dev_examples(self, data_dir):
    return self._examples(self.path(data_dir, "dev"), "dev", True, (3, 4, 0),
                          self._LAYOUT)

  def read_test_file(self, path):
    return self._examples(path, "test", True, (3, 4, None), self._LAYOUT)

  def get_labels(self):
    return ["0", "1"]


class ColaProcessor(DataProcessor):
  """CoLA (GLUE): source, label, original label, sentence; no header (test: index, sentence)."""

  _LAYOUT = "source, label, original label, sentence"

  def get_train_examples(self, data_dir):
    return self._examples(self.path(data_dir, "train"), "train", False, (3, None, 1),
                          self._LAYOUT)

  def get_dev_examples(self, data_dir):
    return self._examples(self.path(data_dir, "dev"), "dev", False, (3, None, 1),
                          self._LAYOUT)

  def read_test_file(self, path):
    return self._examples(path, "test", True, (1, None, None), "index, sentence")

  def get_labels(self):
    return ["0", "1"]


_HEADER_NAMES = {
    "text_a": ("text_a", "text", "sentence", "sentence1", "content", "review", "query"),
    "text_b": ("text_b", "sentence2"),
    "label": ("label", "labels", "class", "category"),
}


class TsvProcessor(DataProcessor):
  """Users' own TSV files: `text<TAB>label` or `text_a<TAB>text_b<TAB>label`.

  Columns are found from a header row when there is one (names such as text_a/text/sentence,
  text_b/sentence2, label), else by position: 2 columns = text, label; 3 = text_a, text_b, label.
  Explicit --text_a_column/--text_b_column/--label_column override both. A test file may lack the
  label column. The label list is learned from train.tsv (sorted) and kept in
  output_dir/labels.txt so that later predict-only runs map ids back to the same strings.
  """

  def __init__(self, output_dir, text_a_column=None, text_b_column=None, label_column=None,
               header="auto"):
    self.output_dir = output_dir
    self.explicit = (text_a_column, text_b_column, label_column)
    self.header = header
    self._labels = None

  def get_train_examples(self, data_dir):
    examples = self._read(self.path(data_dir, "train"), "train", need_label=True)
    self._labels = sorted(set(e.label for e in examples))
    logging.info("Learned %d labels from train.tsv: %s", len(self._labels), self._labels)
    return examples

  def save_labels(self):
    """Writes the labels learned from train.tsv to output_dir/labels.txt (atomically).

    The script calls it once the run has been checked against what output_dir already holds,
    so a run that fails its checks leaves the previous labels.txt in place.
    """
    path = os.path.join(self.output_dir, LABELS_FILE)
    atomic_files.write_text(path, "".join(label + "\n" for label in self._labels))
    logging.info("Saved the label list to %s", path)

  def get_dev_examples(self, data_dir):
    return self._read(self.path(data_dir, "dev"), "dev", need_label=True)

  def read_test_file(self, path):
    return self._read(path, "test", need_label=False)

  def get_labels(self):
    if self._labels is None:
      path = os.path.join(self.output_dir, LABELS_FILE)
      if not os.path.isfile(path):
        raise InputError("%s: no such file; the tsv task learns its labels from train.tsv, so "
                         "run --do_train into this --output_dir first" % path)
      with open(path, "r", encoding="utf-8") as f:
        self._labels = [line.rstrip("\n") for line in f if line.strip()]
    return self._labels

  def _read(self, path, set_type, need_label):
    rows = read_tsv(path)
    if not rows:
      raise InputError("%s: file is empty" % path)
    has_header, columns = self._columns(path, rows, need_label)
    layout = self._layout(columns)
    cli.check_row_widths(path, [(n, f) for n, f in rows if any(x.strip() for x in f)], layout)
    examples = []
    for i, (line_number, fields) in enumerate(rows):
      if has_header and i == 0:
        continue
      if not any(f.strip() for f in fields):
        continue  # Blank line (often the last one); not an example.
      a_col, b_col, label_col = columns
      text_a = _field(path, line_number, fields, a_col, layout)
      text_b = _field(path, line_number, fields, b_col, layout) if b_col is not None else None
      label = None
      if label_col is not None and (need_label or label_col < len(fields)):
        label = _field(path, line_number, fields, label_col, layout).strip()
        if need_label and not label:
          raise InputError("%s:%d: empty label (expected %s)" % (path, line_number, layout))
      examples.append(InputExample("%s-%d" % (set_type, line_number), text_a, text_b, label))
    if not examples:
      raise InputError("%s: no examples (only a header or blank lines)" % path)
    return examples

  def _columns(self, path, rows, need_label):
    """(has_header, (text_a, text_b, label) column indexes) for this file."""
    first = [f.strip().lower() for f in rows[0][1]]
    has_header = self.header == "true" or (
        self.header == "auto" and any(f in names for names in _HEADER_NAMES.values()
                                      for f in first))
    if any(c is not None for c in self.explicit):
      return has_header, self._explicit_columns(path, rows, need_label)
    if has_header:
      found = {}
      for key, names in _HEADER_NAMES.items():
        found[key] = next((i for i, f in enumerate(first) if f in names), None)
      if found["text_a"] is None:
        raise InputError("%s:1: header %s has no text column (expected one of %s); or pass "
                         "--text_a_column" % (path, rows[0][1], ", ".join(_HEADER_NAMES["text_a"])))
      if need_label and found["label"] is None:
        raise InputError("%s:1: header %s has no label column; or pass --label_column" %
                         (path, rows[0][1]))
      return True, (found["text_a"], found["text_b"], found["label"])
    width = len(rows[0][1])
    if not need_label:
      return False, self._unlabeled_columns(path, rows, width)
    if width == 2:
      return False, (0, None, 1)
    if width == 3:
      return False, (0, 1, 2)
    raise InputError("%s:%d: expected text<TAB>label or text_a<TAB>text_b<TAB>label, got %d "
                     "columns; name them with a header row or --text_a_column/--label_column" %
                     (path, rows[0][0], width))

  def _unlabeled_columns(self, path, rows, width):
    """Columns of a header-less test file, which may or may not carry the label column.

    A last column whose every value is a known label is the label column (ignored); otherwise
    1 column is text, 2 are text_a and text_b.
    """
    labels = set(self.get_labels())
    last_is_label = width >= 2 and all(
        len(fields) < width or fields[width - 1].strip() in labels for _, fields in rows)
    text_width = width - 1 if last_is_label else width
    if text_width == 1:
      return (0, None, width - 1 if last_is_label else None)
    if text_width == 2:
      return (0, 1, width - 1 if last_is_label else None)
    raise InputError("%s: %d columns and no header; add a header row (text_a, text_b, label) "
                     "or pass --text_a_column/--text_b_column" % (path, width))

  def _explicit_columns(self, path, rows, need_label):
    """The --text_a_column/--text_b_column/--label_column layout (text_a defaults to column
    0), checked against the widest row of the file."""
    text_a, text_b, label = self.explicit
    columns = (0 if text_a is None else text_a, text_b, label)
    width = max(len(fields) for _, fields in rows)
    for flag, column in zip(("text_a_column", "text_b_column", "label_column"), columns):
      if column is None or (flag == "label_column" and not need_label):
        continue
      if not 0 <= column < width:
        raise InputError("--%s=%d: %s has %d column(s) (0-based: 0 to %d)" %
                         (flag, column, path, width, width - 1))
    return columns

  @staticmethod
  def _layout(columns):
    names = ["text_a (col %d)" % (columns[0] + 1)]
    if columns[1] is not None:
      names.append("text_b (col %d)" % (columns[1] + 1))
    if columns[2] is not None:
      names.append("label (col %d)" % (columns[2] + 1 if columns[2] >= 0 else columns[2]))
    return ", ".join(names)


def check_classes(examples, label_list, source):
  """A training set of one class is refused (the model would learn a constant and score 1.0 on
  a dev set of that class); a dev set of one class is logged, as its accuracy says little.

  Args:
    examples: dict split -> InputExamples ("train", "dev", ...).
    label_list: the task's labels.
    source: callable(split) -> the file the split was read from, for messages.
  """
  if "train" in examples:
    seen = sorted({e.label for e in examples["train"]})
    if len(seen) < 2:
      raise InputError("%s: every example has the label %s; a classifier needs examples of at "
                       "least two classes (labels: %s)" % (source("train"), ", ".join(seen),
                                                      ", ".join(label_list)))
  if "dev" in examples:
    seen = sorted({e.label for e in examples["dev"]})
    if len(seen) < 2 <= len(label_list):
      logging.warning("%s: every example has the label %s, so eval_accuracy only says how "
                      "often the model predicts it (see recall and f1 per class)",
                      source("dev"), ", ".join(seen))


TEXT_PAIRS = "text pairs (text_a, text_b)"
SINGLE_TEXTS = "single texts"


def input_layout(examples, source):
  """TEXT_PAIRS or SINGLE_TEXTS: what every split's examples hold (InputError if they differ).

  A model trained on single texts and fed pairs (or the reverse) would predict silently wrong
  labels, e.g. when a test file's extra column is read as a second text.

  Args:
    examples: dict split -> InputExamples.
    source: callable(split) -> the file the split was read from, for messages.

  Returns:
    the layout, or None when there are no examples.
  """
  layouts = {split: TEXT_PAIRS if any(e.text_b is not None for e in split_examples)
             else SINGLE_TEXTS for split, split_examples in sorted(examples.items())}
  if len(set(layouts.values())) > 1:
    pairs = [source(s) for s, layout in sorted(layouts.items()) if layout == TEXT_PAIRS]
    singles = [source(s) for s, layout in sorted(layouts.items()) if layout == SINGLE_TEXTS]
    raise InputError(
        "%s hold(s) text pairs (text_a, text_b) but %s single texts: the files of one task must "
        "have one layout (a column that is neither text nor a label of the task? name the "
        "columns with a header row or --text_a_column/--text_b_column)" %
        (", ".join(pairs), ", ".join(singles)))
  return next(iter(layouts.values()), None)


def text_example(line_number, text):
  """The example of one line of a plain-text --predict_file: the whole line is text_a."""
  return InputExample("predict-%d" % line_number, tokenization.convert_to_unicode(text))


def convert_single_example(example, label_map, max_seq_length, tokenizer, truncation="head",
                           source="", need_label=True):
  """Converts an InputExample to InputFeatures: [CLS] a [SEP] (b [SEP]), padded.

  Args:
    example: InputExample.
    label_map: dict label string -> id.
    max_seq_length: total length after padding.
    tokenizer: FullTokenizer.
    truncation: one of tokenization.TRUNCATION_MODES.
    source: "file" for error messages about unknown labels.
    need_label: the label must be in label_map (train/dev); else it may be absent (test).

  Returns:
    InputFeatures whose lists have max_seq_length entries.
  """
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b is not None else None
  text_tokens = len(tokens_a) + len(tokens_b or ())
  input_ids, input_mask, segment_ids, kept, head_only = tokenization.classifier_features(
      tokens_a, tokens_b, max_seq_length, truncation, tokenizer)
  return InputFeatures(input_ids, input_mask, segment_ids,
                       _label_id(example, label_map, source, need_label), kept < text_tokens,
                       text_tokens, text_tokens - kept, head_only)


def convert_example_windows(example, label_map, max_seq_length, tokenizer, truncation="head",
                            doc_stride=0, source="", need_label=True):
  """Converts an InputExample to the InputFeatures of its sliding windows (long_text=sliding).

  A single text longer than max_seq_length - 2 tokens becomes windows of that many tokens
  starting every doc_stride tokens (tokenization.window_starts), each [CLS] window [SEP] with
  the example's label. A pair that does not fit keeps its first text (cut by `truncation` to at
  most half the room when the second needs more) and slides over the second, as BERT's SQuAD
  code slides over the document after the question.

  Args:
    example, label_map, max_seq_length, tokenizer, truncation, source, need_label: see
      convert_single_example.
    doc_stride: tokens between window starts (0: half a window); at most a window's tokens.

  Returns:
    list of InputFeatures (one for a text that fits), in window order.
  """
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b is not None else None
  label_id = _label_id(example, label_map, source, need_label)
  text_tokens, kept_a = len(tokens_a) + len(tokens_b or ()), len(tokens_a)
  head_only = 0
  if tokens_b is None:
    budget = max_seq_length - 2
    windows = [(tokens_a[start:start + budget], None) for start in tokenization.window_starts(
        len(tokens_a), budget, min(doc_stride or tokenization.default_doc_stride(budget),
                                   budget))]
  elif len(tokens_a) + len(tokens_b) <= max_seq_length - 3:
    windows = [(tokens_a, tokens_b)]
  else:
    budget = max_seq_length - 3
    keep_a = min(len(tokens_a), max(budget - len(tokens_b), budget // 2))
    head_only = int(tokenization.cut_to_head_only(len(tokens_a), keep_a, truncation))
    tokens_a, _ = tokenization.truncate_tokens(tokens_a, keep_a, truncation)
    kept_a = len(tokens_a)
    budget_b = budget - len(tokens_a)
    # An empty second text leaves it no room: one window, [SEP] right after the first's.
    stride = max(1, min(doc_stride or tokenization.default_doc_stride(budget_b), budget_b))
    windows = [(tokens_a, tokens_b[start:start + budget_b])
               for start in tokenization.window_starts(len(tokens_b), budget_b, stride)]
  features = [InputFeatures(*tokenization.pack_tokens(a, b, max_seq_length, tokenizer),
                            label_id=label_id)
              for a, b in windows]
  # Every token of the sliding text is in some window; a pair's first text may be cut.
  features[0].text_tokens = text_tokens
  features[0].cut_tokens = text_tokens - kept_a - len(tokens_b) if tokens_b is not None else 0
  features[0].truncated = bool(features[0].cut_tokens)
  features[0].head_only = head_only
  return features


def _label_id(example, label_map, source, need_label):
  """The example's class id (0 for an unlabeled test example); InputError for an unknown label."""
  if example.label is None or not need_label:
    return label_map.get(example.label, 0)
  if example.label in label_map:
    return label_map[example.label]
  raise InputError("%s (%s): label %r is not one of the labels %s" %
                   (source, example.guid.replace("-", " line ", 1), example.label,
                    sorted(label_map)))


def name_to_features(max_seq_length):
  """The TFRecord feature spec of classification examples."""
  return {
      "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "label_ids": tf.io.FixedLenFeature([], tf.int64),
  }


def _int64_feature(values):
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def write_features(examples, label_map, max_seq_length, tokenizer, truncation, output_file,
                   source, need_label, long_text="truncate", doc_stride=0):
  """Tokenizes `examples` into a TFRecord file (atomically); returns its counts.

  long_text "sliding" writes every window of a long example (convert_example_windows) instead
  of its truncated form; each record's DOC_INDEX is its example's position in `examples`.

  Returns:
    collections.Counter: truncated (examples), text_tokens (before truncation), cut_tokens,
    head_only (texts that head_tail cut as head).
  """
  counts = collections.Counter()

  def _write(tmp_path):
    with tf.io.TFRecordWriter(tmp_path) as writer:
      for doc_index, example in enumerate(examples):
        if long_text == "sliding":
          rows = convert_example_windows(example, label_map, max_seq_length, tokenizer,
                                         truncation, doc_stride, source, need_label)
        else:
          rows = [convert_single_example(example, label_map, max_seq_length, tokenizer,
                                         truncation, source, need_label)]
        for f in rows:
          counts.update(truncated=int(f.truncated), text_tokens=f.text_tokens,
                        cut_tokens=f.cut_tokens, head_only=f.head_only)
          features = collections.OrderedDict([
              ("input_ids", _int64_feature(f.input_ids)),
              ("input_mask", _int64_feature(f.input_mask)),
              ("segment_ids", _int64_feature(f.segment_ids)),
              ("label_ids", _int64_feature([f.label_id])),
              (DOC_INDEX, _int64_feature([doc_index])),
          ])
          writer.write(tf.train.Example(
              features=tf.train.Features(feature=features)).SerializeToString())

  atomic_files.write_atomically(output_file, _write)
  return counts


def report_truncation(what, num_examples, counts, max_seq_length, truncation, long_text):
  """Logs how many examples of `what` were truncated and the share of their tokens cut (a
  warning above core.dropped_input.WARN_SHARE), with the flags that would keep them."""
  logging.info("%s: %d examples, %d truncated to max_seq_length=%d (mode %s)", what,
               num_examples, counts["truncated"], max_seq_length, truncation)
  if counts["head_only"]:
    logging.warning(
        "%s: --truncation=head_tail cut %d text(s) as head does, to their first tokens only: "
        "a text of a pair gets its share of the %d tokens (the longer text is cut first), and "
        "a share of %d tokens or fewer leaves no room for its end; raise --max_seq_length to "
        "keep the ends of long pairs", what, counts["head_only"], max_seq_length - 3,
        tokenization.HEAD_TAIL_HEAD_TOKENS)
  fix = "raise --max_seq_length or use --long_text=sliding to read whole texts"
  if long_text == "sliding":
    fix = ("the first text of a pair that does not fit keeps at most half a window; raise "
           "--max_seq_length")
  dropped_input.report(what, counts["cut_tokens"], counts["text_tokens"], "tokens",
                       "cut by --max_seq_length=%d in %d of %d examples (--truncation=%s): the "
                       "model never reads them; %s" % (max_seq_length, counts["truncated"],
                                                       num_examples, truncation, fix))


def read_doc_index(record_file):
  """int64 numpy array [records]: the DOC_INDEX of every record of `record_file`, in order."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  return np.array([tf.train.Example.FromString(record).features.feature[DOC_INDEX]
                   .int64_list.value[0]
                   for record in tf.io.tf_record_iterator(record_file)], np.int64)


def examples_digest(examples):
  """sha1 of every example's texts and label, in order."""
  h = hashlib.sha1()
  for e in examples:
    h.update(repr((e.text_a, e.text_b, e.label)).encode("utf-8"))
  return h.hexdigest()


def check_truncation(truncation, max_seq_length, layout):
  """Raises InputError when --truncation=head_tail can keep nothing of a text's end at
  max_seq_length: it would be --truncation=head. layout: SINGLE_TEXTS or TEXT_PAIRS (a pair
  needs 2 tokens more: tokenization.HEAD_TAIL_MIN_LENGTH)."""
  pairs = layout == TEXT_PAIRS
  smallest = tokenization.HEAD_TAIL_MIN_LENGTH["pairs" if pairs else "single"]
  if truncation == "head_tail" and max_seq_length < smallest:
    raise InputError(
        "--truncation=head_tail: needs --max_seq_length >= %d%s (got %d): it keeps the first "
        "%d tokens of a text and fills the rest from its end, and at --max_seq_length=%d "
        "nothing is left for the end%s; use --truncation=head, which is what it would do" %
        (smallest, " for text pairs" if pairs else "", max_seq_length,
         tokenization.HEAD_TAIL_HEAD_TOKENS, max_seq_length,
         " of either text ([CLS], two [SEP] and a token of the other text take the rest)"
         if pairs else ""))


def cached_features_file(examples, split, source_file, label_list, tokenizer_digest,
                         max_seq_length, truncation, output_dir, tokenizer, task_name,
                         long_text="truncate", doc_stride=0):
  """Returns a TFRecord of `examples`, reusing a cache built from exactly the same inputs.

  The cache name hashes the examples themselves (so the column, header and language settings
  that chose them count), the data file's bytes, the vocabulary's bytes, casing,
  max_seq_length, truncation, label list, task and FEATURES_FORMAT, so any change rebuilds it;
  and long_text and doc_stride (write_features) when the windows slide.
  """
  parts = [FEATURES_FORMAT, task_name, split, input_data.file_digest(source_file),
           examples_digest(examples), tokenizer_digest, max_seq_length, truncation,
           list(label_list)]
  if long_text != "truncate":
    parts += [long_text, doc_stride]
  key = input_data.cache_key(*parts)
  path = input_data.cached_record_path(output_dir, split, key)
  if os.path.exists(path):
    logging.info("Using cached %s features %s", split, path)
    return path
  tf.io.gfile.makedirs(output_dir)
  label_map = {label: i for i, label in enumerate(label_list)}
  counts = write_features(examples, label_map, max_seq_length, tokenizer, truncation, path,
                          source_file, need_label=(split != "test"), long_text=long_text,
                          doc_stride=doc_stride)
  logging.info("Wrote %d %s examples to %s", len(examples), split, path)
  report_truncation(source_file, len(examples), counts, max_seq_length, truncation, long_text)
  return path
