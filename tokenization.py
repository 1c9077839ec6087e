# coding=utf-8
"""Tokenization classes compatible with google-research/bert.

The WordPiece path (`BasicTokenizer` followed by `WordpieceTokenizer`) produces
exactly the same tokens and ids as the stock google-research/bert tokenizer for
the released vocabularies (Chinese, English uncased/cased, multilingual). As an
alternative, `FullTokenizer` can wrap a SentencePiece model instead of a
WordPiece vocabulary.

Differences from the stock module are confined to error handling and I/O:
files are read with plain Python I/O (utf-8) rather than `tf.gfile`, this
module does not import TensorFlow, and problems the user can fix (a missing or
empty vocabulary, a vocabulary without `[UNK]`, a mismatched casing flag) are
reported as `InputError` with a one-line message naming the file.
"""

import collections
import os
import re
import unicodedata

from core.errors import InputError


# Model names (the directory that holds `bert_model.ckpt`) of the checkpoints
# released by Google, grouped by how their vocabularies were built.
_LOWER_CASED_MODELS = (
    "uncased_L-24_H-1024_A-16",
    "uncased_L-12_H-768_A-12",
    "multilingual_L-12_H-768_A-12",
    "chinese_L-12_H-768_A-12",
)

_CASED_MODELS = (
    "cased_L-12_H-768_A-12",
    "cased_L-24_H-1024_A-16",
    "multi_cased_L-12_H-768_A-12",
)

# Tokens that BERT's input pipelines insert themselves, so a SentencePiece
# model used for BERT must know them as single pieces.
_SPM_REQUIRED_SYMBOLS = ("[CLS]", "[SEP]", "[MASK]")

# Code point ranges treated as CJK ideographs (the same blocks as stock BERT).
_CJK_RANGES = (
    (0x4E00, 0x9FFF),    # CJK Unified Ideographs
    (0x3400, 0x4DBF),    # Extension A
    (0x20000, 0x2A6DF),  # Extension B
    (0x2A700, 0x2B73F),  # Extension C
    (0x2B740, 0x2B81F),  # Extension D
    (0x2B820, 0x2CEAF),  # Extension E
    (0xF900, 0xFAFF),    # Compatibility Ideographs
    (0x2F800, 0x2FA1F),  # Compatibility Ideographs Supplement
)


def is_cjk_code_point(cp):
  """Whether code point `cp` is a CJK ideograph as stock BERT counts them (_CJK_RANGES): the
  tokenizer makes each such character a token of its own. Only the CJK Unified/Compatibility
  Ideograph blocks count: Hangul, Hiragana and Katakana are written with spaces between words
  and are tokenized like any other script. The project's one test of it: the
  masking's words (pretraining/word_freq.py) use it, and the exported tokenizer's CJK class
  (serving/graph_tokenizer.py) is built from the same ranges."""
  for low, high in _CJK_RANGES:
    if low <= cp <= high:
      return True
  return False


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint):
  """Checks whether the casing flag is consistent with the checkpoint name.

  Whether a checkpoint expects lower-cased input is not recorded in
  `bert_config.json`, so (as in stock BERT) it is guessed from the name of the
  directory holding `bert_model.ckpt`. Only the names of Google's released
  checkpoints are recognised; anything else passes silently.

  Args:
    do_lower_case: The value of the `--do_lower_case` flag.
    init_checkpoint: The value of the `--init_checkpoint` flag (may be empty).

  Raises:
    InputError: if the checkpoint is a known lower-cased model and
      `do_lower_case` is False, or a known cased model and it is True.
  """
  if not init_checkpoint:
    return

  match = re.match(r"^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint)
  if match is None:
    return
  model_name = match.group(1)

  if model_name in _LOWER_CASED_MODELS and not do_lower_case:
    given, kind, wanted = "False", "lower-cased", "True"
  elif model_name in _CASED_MODELS and do_lower_case:
    given, kind, wanted = "True", "cased", "False"
  else:
    return

  raise InputError(
      "--do_lower_case=%s does not match --init_checkpoint=%s: `%s` is a %s "
      "model, so pass --do_lower_case=%s to tokenize the way it was "
      "pre-trained" % (given, init_checkpoint, model_name, kind, wanted))


def convert_to_unicode(text):
  """Returns `text` as a `str`, decoding `bytes` as utf-8 (bad bytes dropped).

  Args:
    text: A `str` or `bytes` object.

  Returns:
    The text as a `str`.

  Raises:
    ValueError: if `text` is neither `str` nor `bytes`.
  """
  if isinstance(text, str):
    return text
  if isinstance(text, bytes):
    return text.decode("utf-8", "ignore")
  raise ValueError("Unsupported string type: %s" % type(text))


def printable_text(text):
  """Returns `text` as a `str` suitable for `print` or logging.

  Under Python 3 this is the same as `convert_to_unicode`; it is kept as a
  separate function for compatibility with code written against stock BERT.
  """
  return convert_to_unicode(text)


def load_vocab(vocab_file):
  """Loads a WordPiece vocabulary file into an ordered dictionary.

  The file holds one token per line; a token's id is its zero-based line
  number. Surrounding whitespace is stripped from each line and lines are split
  on "\\n" only (so e.g. a U+2028 entry stays a line of its own, as with stock
  BERT). If a token occurs on more than one line, the id of the last one wins,
  again as in stock BERT.

  Args:
    vocab_file: Path of the vocabulary file (utf-8).

  Returns:
    A `collections.OrderedDict` mapping token -> id.

  Raises:
    InputError: if the file does not exist, is not valid utf-8 or is empty.
  """
  if not vocab_file:
    raise InputError("vocab file: no path given")
  if not os.path.isfile(vocab_file):
    raise InputError("vocab file %s: no such file" % vocab_file)

  vocab = collections.OrderedDict()
  try:
    with open(vocab_file, "r", encoding="utf-8", newline="\n") as reader:
      for index, line in enumerate(reader):
        vocab[line.strip()] = index
  except UnicodeDecodeError as e:
    raise InputError("vocab file %s: not valid utf-8 (%s)" % (vocab_file, e))

  if not any(vocab):
    raise InputError("vocab file %s: empty (expected one token per line)" %
                     vocab_file)
  return vocab


def require_vocab_size(vocab_path, vocab, vocab_size, config_source):
  """Raises InputError unless `vocab` (read from vocab_path) has vocab_size entries, naming the
  repeated lines of a WordPiece file (a repeated token keeps one id, so the file has more lines
  than entries).

  Args:
    vocab_path: the vocabulary file (--vocab_file or --spm_model_file).
    vocab: its dict token -> id.
    vocab_size: the model config's vocab_size.
    config_source: names the config in the message.
  """
  if len(vocab) == vocab_size:
    return
  repeats = _repeated_lines(vocab_path) if max(vocab.values(), default=-1) >= len(vocab) else []
  detail = ""
  if repeats:
    detail = " (%d lines; %s)" % (len(vocab) + len(repeats), "; ".join(
        "line %d repeats line %d, %r" % (line, first, token) for token, first, line in
        repeats[:3]) + ("; and %d more" % (len(repeats) - 3) if len(repeats) > 3 else ""))
  raise InputError("%s has %d entries%s but vocab_size=%d in %s: the vocabulary must be the one "
                   "the model was trained with" % (vocab_path, len(vocab), detail, vocab_size,
                                               config_source))


def _repeated_lines(vocab_file):
  """[(token, first line, repeating line)] of a WordPiece vocabulary (1-based line numbers)."""
  first, repeats = {}, []
  with open(vocab_file, "r", encoding="utf-8", newline="\n") as reader:
    for number, line in enumerate(reader, 1):
      token = line.strip()
      if token in first:
        repeats.append((token, first[token], number))
      else:
        first[token] = number
  return repeats


def require_tokens(vocab, tokens, source, why):
  """Raises InputError unless every token of `tokens` is in `vocab`.

  Args:
    vocab: dict token -> id.
    tokens: the special tokens needed, e.g. ("[CLS]", "[SEP]").
    source: names the vocabulary in the message, e.g. "--vocab_file=vocab.txt".
    why: what needs them, or how to fix it (ends the message).
  """
  missing = [t for t in tokens if t not in vocab]
  if missing:
    raise InputError("%s: missing special token(s) %s; %s" % (source, ", ".join(missing), why))


def convert_by_vocab(vocab, items):
  """Maps each item (token or id) through `vocab`.

  Items missing from `vocab` are mapped to `vocab["[UNK]"]`, as in stock BERT.

  Args:
    vocab: A dict, token -> id or id -> token.
    items: An iterable of keys of `vocab`.

  Returns:
    A list of the mapped values.

  Raises:
    KeyError: if an item is missing and `vocab` has no "[UNK]" entry.
  """
  output = []
  for item in items:
    if item in vocab:
      output.append(vocab[item])
    elif "[UNK]" in vocab:
      output.append(vocab["[UNK]"])
    else:
      raise KeyError("%r is not in the vocabulary, which has no [UNK] entry" %
                     (item,))
  return output


def convert_tokens_to_ids(vocab, tokens):
  """Maps tokens to ids with `vocab` (token -> id); see `convert_by_vocab`."""
  return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab, ids):
  """Maps ids to tokens with `inv_vocab` (id -> token)."""
  return convert_by_vocab(inv_vocab, ids)


def whitespace_tokenize(text):
  """Strips `text` and splits it on runs of whitespace."""
  return text.split()


class FullTokenizer(object):
  """Runs end-to-end tokenization: text -> tokens -> ids.

  By default this is BERT's WordPiece pipeline: `BasicTokenizer` (cleanup,
  optional lower-casing and accent stripping, CJK and punctuation splitting)
  followed by `WordpieceTokenizer` on each resulting word.

  Alternatively, pass `spm_model_file` (and `vocab_file=None`) to tokenize with
  a SentencePiece model. Then `tokenize` lower-cases the text when
  `do_lower_case` is True and returns the model's pieces, `vocab`/`inv_vocab`
  are built from the model's pieces, and ids are the SentencePiece ids. For use
  with BERT the special tokens [CLS], [SEP], [MASK], [PAD] and [UNK] must exist
  in the SentencePiece model as single pieces, i.e. be declared when training
  it as `user_defined_symbols` (or `control_symbols`); for [PAD] and [UNK] the
  trainer's `pad_piece="[PAD]"` / `unk_piece="[UNK]"` also work (and make
  unknown text map to [UNK]). Construction fails if [CLS], [SEP] or [MASK] is
  missing. Special tokens written inside the text are lower-cased along with it
  when `do_lower_case` is True (the same is true of the WordPiece path), so
  insert them as tokens/ids rather than as text.

  Attributes:
    vocab: dict, token -> id.
    inv_vocab: dict, id -> token.
    do_lower_case: bool.
  """

  def __init__(self, vocab_file, do_lower_case=True, spm_model_file=None):
    """Constructs a FullTokenizer.

    Args:
      vocab_file: Path of a WordPiece vocabulary (one token per line). Ignored
        when `spm_model_file` is given.
      do_lower_case: Whether to lower-case the input (and, for WordPiece, strip
        accents). Must match how the checkpoint was pre-trained.
      spm_model_file: Optional path of a SentencePiece model to use instead of
        WordPiece.

    Raises:
      InputError: if the vocabulary or model file is missing or unusable, if a
        WordPiece vocabulary lacks [UNK], or if a SentencePiece model lacks
        [CLS], [SEP] or [MASK].
    """
    self.do_lower_case = do_lower_case
    self.sp_model = None
    self.basic_tokenizer = None
    self.wordpiece_tokenizer = None

    if spm_model_file:
      self.sp_model = _load_sentencepiece(spm_model_file)
      self.vocab = collections.OrderedDict(
          (self.sp_model.id_to_piece(i), i)
          for i in range(self.sp_model.get_piece_size()))
      require_tokens(self.vocab, _SPM_REQUIRED_SYMBOLS,
                     "sentencepiece model %s" % spm_model_file,
                     "train it with user_defined_symbols=[CLS],[SEP],[MASK]")
    else:
      self.vocab = load_vocab(vocab_file)
      if "[UNK]" not in self.vocab:
        raise InputError("vocab file %s: has no [UNK] token" % vocab_file)
      self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
      self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)

    self.inv_vocab = {v: k for k, v in self.vocab.items()}

  def tokenize(self, text):
    """Splits `text` (str or utf-8 bytes) into a list of vocabulary tokens."""
    text = convert_to_unicode(text)
    if self.sp_model is not None:
      if self.do_lower_case:
        text = text.lower()
      return self.sp_model.encode(text, out_type=str)

    split_tokens = []
    for token in self.basic_tokenizer.tokenize(text):
      split_tokens.extend(self.wordpiece_tokenizer.tokenize(token))
    return split_tokens

  def convert_tokens_to_ids(self, tokens):
    """Maps tokens to ids; unknown tokens map to the [UNK] (or spm unk) id."""
    if self.sp_model is not None:
      return [self.sp_model.piece_to_id(token) for token in tokens]
    return convert_by_vocab(self.vocab, tokens)

  def convert_ids_to_tokens(self, ids):
    """Maps ids to tokens."""
    return convert_by_vocab(self.inv_vocab, ids)


class BasicTokenizer(object):
  """Runs basic tokenization (cleanup, lower casing, punctuation splitting)."""

  def __init__(self, do_lower_case=True):
    """Constructs a BasicTokenizer.

    Args:
      do_lower_case: Whether to lower-case the input and strip accents.
    """
    self.do_lower_case = do_lower_case

  def tokenize(self, text):
    """Tokenizes a piece of text into words, CJK characters and punctuation.

    Args:
      text: A `str` or utf-8 `bytes`.

    Returns:
      A list of tokens (no token contains whitespace).
    """
    text = self._clean_text(convert_to_unicode(text))
    # Stock BERT pads CJK characters with spaces for every model (it matters
    # only for the Chinese and multilingual vocabularies).
    text = self._tokenize_chinese_chars(text)

    split_tokens = []
    for token in whitespace_tokenize(text):
      if self.do_lower_case:
        token = self._run_strip_accents(token.lower())
      split_tokens.extend(self._run_split_on_punc(token))
    # Re-split, since stripping accents can leave empty tokens behind.
    return whitespace_tokenize(" ".join(split_tokens))

  def _run_strip_accents(self, text):
    """Removes combining marks (category Mn) after NFD decomposition."""
    decomposed = unicodedata.normalize("NFD", text)
    return "".join(c for c in decomposed if unicodedata.category(c) != "Mn")

  def _run_split_on_punc(self, text):
    """Splits `text` so that each punctuation character is its own token."""
    pieces = []
    current = []
    for char in text:
      if _is_punctuation(char):
        if current:
          pieces.append("".join(current))
          current = []
        pieces.append(char)
      else:
        current.append(char)
    if current:
      pieces.append("".join(current))
    return pieces

  def _tokenize_chinese_chars(self, text):
    """Surrounds every CJK character with spaces."""
    output = []
    for char in text:
      if self._is_chinese_char(ord(char)):
        output.extend((" ", char, " "))
      else:
        output.append(char)
    return "".join(output)

  # Stock BERT's method name; the test itself, with no extra call per character.
  _is_chinese_char = staticmethod(is_cjk_code_point)

  def _clean_text(self, text):
    """Drops NUL, U+FFFD and control characters; maps whitespace to " "."""
    output = []
    for char in text:
      cp = ord(char)
      if cp == 0 or cp == 0xFFFD or _is_control(char):
        continue
      output.append(" " if _is_whitespace(char) else char)
    return "".join(output)


class WordpieceTokenizer(object):
  """Runs WordPiece tokenization."""

  def __init__(self, vocab, unk_token="[UNK]", max_input_chars_per_word=200):
    """Constructs a WordpieceTokenizer.

    Args:
      vocab: A container of tokens supporting `in` (e.g. the dict from
        `load_vocab`). Word-internal pieces carry a "##" prefix.
      unk_token: The token emitted for a word that cannot be tokenized.
      max_input_chars_per_word: Words longer than this become `unk_token`.
    """
    self.vocab = vocab
    self.unk_token = unk_token
    self.max_input_chars_per_word = max_input_chars_per_word

  def tokenize(self, text):
    """Tokenizes a piece of text into its word pieces.

    Uses a greedy longest-match-first algorithm against the vocabulary. A word
    that has no complete segmentation becomes a single `unk_token`.

    For example:
      input = "unaffable"
      output = ["un", "##aff", "##able"]

    Args:
      text: A single token or whitespace separated tokens, normally already
        passed through `BasicTokenizer`.

    Returns:
      A list of wordpiece tokens.
    """
    output_tokens = []
    for word in whitespace_tokenize(convert_to_unicode(text)):
      if len(word) > self.max_input_chars_per_word:
        output_tokens.append(self.unk_token)
        continue

      pieces = []
      start = 0
      while start < len(word):
        piece = None
        end = len(word)
        while end > start:
          candidate = word[start:end]
          if start > 0:
            candidate = "##" + candidate
          if candidate in self.vocab:
            piece = candidate
            break
          end -= 1
        if piece is None:
          pieces = None
          break
        pieces.append(piece)
        start = end

      if pieces is None:
        output_tokens.append(self.unk_token)
      else:
        output_tokens.extend(pieces)
    return output_tokens


# Truncation of token lists: the classifier's features and their in-graph copy (serving/).
TRUNCATION_MODES = ("head", "tail", "head_tail")
# head_tail keeps this many tokens from the start of a long text (and the rest from its end).
HEAD_TAIL_HEAD_TOKENS = 128
# The smallest max_seq_length at which head_tail keeps any of a text's end: [CLS], [SEP], the
# head and one token; a pair also has a second [SEP] and at least one token of the other text.
HEAD_TAIL_MIN_LENGTH = {"single": HEAD_TAIL_HEAD_TOKENS + 3, "pairs": HEAD_TAIL_HEAD_TOKENS + 5}
# SentencePiece's word-start mark.
SPM_WORD_START = u"\u2581"


def truncate_tokens(tokens, budget, mode):
  """Shortens `tokens` to at most `budget` tokens.

  Args:
    tokens: list of WordPiece tokens.
    budget: maximum length.
    mode: "head" keeps the start, "tail" keeps the end, "head_tail" keeps the first 128 tokens
      and the last budget-128 (for max_seq_length 512: 128 + 382, "How to Fine-Tune BERT for
      Text Classification").

  Returns:
    (tokens, was_truncated).
  """
  if len(tokens) <= budget:
    return tokens, False
  if mode == "head":
    return tokens[:budget], True
  if mode == "tail":
    return tokens[len(tokens) - budget:], True
  head = min(HEAD_TAIL_HEAD_TOKENS, budget)
  tail = budget - head
  return tokens[:head] + (tokens[len(tokens) - tail:] if tail else []), True


def cut_to_head_only(num_tokens, budget, mode):
  """Whether head_tail cuts a text of num_tokens to `budget` as head does: its budget (a text
  of a pair gets its share of max_seq_length - 3) leaves nothing after the first
  HEAD_TAIL_HEAD_TOKENS for its end."""
  return mode == "head_tail" and num_tokens > budget and budget <= HEAD_TAIL_HEAD_TOKENS


LONG_TEXT_MODES = ("truncate", "sliding")


def window_starts(num_tokens, budget, stride):
  """Where the sliding windows over a long text start: 0, stride, 2 stride, ...

  Each window holds tokens[start:start + budget]; windows are added until one reaches the end
  of the text, so a text of at most `budget` tokens is one window, and every token is in some
  window when stride <= budget.

  Args:
    num_tokens: the text's length in tokens.
    budget: tokens per window (max_seq_length minus the special tokens).
    stride: tokens between the starts of two windows, 1 <= stride <= budget.

  Returns:
    list of start offsets: 1 + ceil(max(0, num_tokens - budget) / stride) of them.
  """
  extra = max(0, num_tokens - budget)
  return [k * stride for k in range(1 + (extra + stride - 1) // stride)]


def default_doc_stride(budget):
  """The stride of --doc_stride=0: half a window (at least 1), so each token is seen twice."""
  return max(1, budget // 2)


def pair_budgets(len_a, len_b, budget):
  """Lengths for a pair after stock truncation (shorten the longer one first)."""
  while len_a + len_b > budget:
    if len_a > len_b:
      len_a -= 1
    else:
      len_b -= 1
  return len_a, len_b


def classifier_features(tokens_a, tokens_b, max_seq_length, truncation, tokenizer):
  """One classifier input, [CLS] a [SEP] (b [SEP]), truncated to fit and padded.

  Args:
    tokens_a: list of str, the first text's tokens; tokens_b: the second's, or None.
    max_seq_length: total length after padding.
    truncation: one of TRUNCATION_MODES; a pair is cut as stock BERT cuts it (the longer text
      first, pair_budgets), each text by `truncation`.
    tokenizer: FullTokenizer (its convert_tokens_to_ids).

  Returns:
    (input_ids, input_mask, segment_ids, tokens kept of the texts, texts that head_tail cut as
    head: cut_to_head_only): lists of max_seq_length ints, and two ints.
  """
  if tokens_b is None:
    cuts = [(tokens_a, max_seq_length - 2)]
  else:
    cuts = list(zip((tokens_a, tokens_b), pair_budgets(len(tokens_a), len(tokens_b),
                                                       max_seq_length - 3)))
  head_only = sum(cut_to_head_only(len(tokens), budget, truncation) for tokens, budget in cuts)
  kept = [truncate_tokens(tokens, budget, truncation)[0] for tokens, budget in cuts]
  tokens_a, tokens_b = kept[0], kept[1] if tokens_b is not None else None
  return pack_tokens(tokens_a, tokens_b, max_seq_length, tokenizer) + (
      len(tokens_a) + len(tokens_b or ()), head_only)


def pack_tokens(tokens_a, tokens_b, max_seq_length, tokenizer):
  """[CLS] a [SEP] (b [SEP]) as (input_ids, input_mask, segment_ids), padded to max_seq_length."""
  tokens = ["[CLS]"] + tokens_a + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  if tokens_b is not None:
    tokens += tokens_b + ["[SEP]"]
    segment_ids += [1] * (len(tokens_b) + 1)
  input_ids = tokenizer.convert_tokens_to_ids(tokens)
  input_mask = [1] * len(input_ids)
  padding = max_seq_length - len(input_ids)
  input_ids += [0] * padding
  input_mask += [0] * padding
  segment_ids += [0] * padding
  return input_ids, input_mask, segment_ids


def is_spaced_script_char(char):
  """Whether words of this character's script are separated by spaces (Latin, digits, ...).

  CJK text (U+2E80 and above) is written without spaces, and punctuation attaches directly.
  """
  return ord(char) < 0x2E80 and char.isalnum()


def detokenize(tokens):
  """Joins WordPiece (or SentencePiece) tokens into text.

  WordPiece: `##` pieces merge into the previous token; CJK characters and punctuation join
  without spaces; a space separates two neighbouring words of spaced scripts ("new york").
  SentencePiece pieces (recognised by the word-start mark U+2581) are concatenated with the
  mark turned into a space. Special tokens ([SEP], [PAD], ...) should be removed by the caller.
  """
  if any(token.startswith(SPM_WORD_START) for token in tokens):
    return "".join(tokens).replace(SPM_WORD_START, " ").strip()
  text = ""
  for token in tokens:
    if token.startswith("##") and len(token) > 2:
      text += token[2:]
    elif text and is_spaced_script_char(text[-1]) and is_spaced_script_char(token[0]):
      text += " " + token
    else:
      text += token
  return text.strip()


def _load_sentencepiece(model_file):
  """Loads a SentencePiece model, raising InputError if it cannot be used."""
  if not os.path.isfile(model_file):
    raise InputError("sentencepiece model %s: no such file" % model_file)
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  sp_model = spm.SentencePieceProcessor()
  try:
    sp_model.load(model_file)
  except (OSError, RuntimeError) as e:
    message = str(e).strip().splitlines()
    raise InputError("sentencepiece model %s: cannot load (%s)" %
                     (model_file, message[0] if message else type(e).__name__))
  return sp_model


def _is_whitespace(char):
  """Returns whether `char` is whitespace (space, \\t, \\n, \\r or Zs)."""
  # \t, \n and \r are control characters to Unicode, but they separate words.
  if char in (" ", "\t", "\n", "\r"):
    return True
  return unicodedata.category(char) == "Zs"


def _is_control(char):
  """Returns whether `char` is a control/format character (Cc or Cf)."""
  # \t, \n and \r are handled as whitespace instead.
  if char in ("\t", "\n", "\r"):
    return False
  return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char):
  """Returns whether `char` is punctuation in BERT's sense.

  That is every ASCII character that is neither a letter, a digit nor
  whitespace (so "$", "^", "`" count although Unicode calls them symbols), plus
  everything in a Unicode P* category.
  """
  cp = ord(char)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith("P")
