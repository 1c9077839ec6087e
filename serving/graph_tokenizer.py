"""BERT's WordPiece tokenizer as TensorFlow ops, for exported SavedModels.

`GraphTokenizer.tokenize` turns a batch of strings into the ids that tokenization.FullTokenizer
gives, with the same steps as tokenization.BasicTokenizer and WordpieceTokenizer:

1. drop invalid UTF-8, NUL, U+FFFD and control/format characters; whitespace becomes " ";
2. put spaces around CJK ideographs;
3. with do_lower_case: lower-case (tf.strings.lower, Unicode-aware, final sigma included),
   decompose (NFD) and drop the combining marks (Mn), through a per-character table;
4. split on whitespace and around every punctuation character;
5. WordPiece: greedy longest match first against the vocabulary, "##" marking word-internal
   pieces; a word of more than 200 characters, or one with no complete segmentation, is [UNK].

Only core TensorFlow ops are used (regex, string, lookup-table and control-flow ops), so a
SavedModel holding this tokenizer loads in any TensorFlow runtime with no custom op library:
tf.saved_model.load, saved_model_cli, TensorFlow Serving. The character classes of steps 1-4
are generated at export time from Python's unicodedata through tokenization.py's own
predicates (and its CJK ranges), so the graph classifies every character exactly as the
tokenizer it mirrors.

`GraphTokenizer.detokenize` is rewrite_data.ids_to_text in the graph.
"""

import functools
import itertools
import unicodedata

import tensorflow as tf

import tokenization

# The last Unicode code point; surrogates (U+D800-U+DFFF) are not characters and are skipped.
_MAX_CODE_POINT = 0x10FFFF
# Marks a character that the accent table does not map (NUL never survives step 1).
_UNMAPPED = "\x00"


def _code_points():
  """Every Unicode scalar value, as an iterable of ints."""
  return itertools.chain(range(0xD800), range(0xE000, _MAX_CODE_POINT + 1))


def _ranges_class(code_points):
  """An RE2 character class "[...]" of `code_points` (ascending ints)."""
  ranges = []
  for c in code_points:
    if ranges and c == ranges[-1][1] + 1:
      ranges[-1][1] = c
    else:
      ranges.append([c, c])
  return "[%s]" % "".join(r"\x{%X}" % a if a == b else r"\x{%X}-\x{%X}" % (a, b)
                          for a, b in ranges)


@functools.lru_cache(maxsize=None)
def _regex_class(predicate):
  """An RE2 character class "[...]" of the code points c for which predicate(chr(c)) holds."""
  # filter() and map() walk the 1.1M code points in C: only the predicate runs in Python.
  return _ranges_class(map(ord, filter(predicate, map(chr, _code_points()))))


def _cjk_class():
  """The class of tokenization's CJK ideograph ranges (tokenization.is_cjk_code_point)."""
  return _ranges_class(sorted(set(itertools.chain.from_iterable(
      range(low, high + 1) for low, high in tokenization._CJK_RANGES))))  # pylint: disable=protected-access


def _is_dropped(char):
  """BasicTokenizer._clean_text drops NUL, U+FFFD and control/format characters."""
  return char in ("\x00", "\ufffd") or tokenization._is_control(char)  # pylint: disable=protected-access


def _strip_accents(char):
  """What BasicTokenizer._run_strip_accents makes of one (lower-cased) character."""
  return "".join(c for c in unicodedata.normalize("NFD", char) if unicodedata.category(c) != "Mn")


def _may_lose_accents(char):
  """Whether _strip_accents can change `char`: it decomposes under NFD or is itself a mark."""
  return not unicodedata.is_normalized("NFD", char) or unicodedata.category(char) == "Mn"


@functools.lru_cache(maxsize=None)
def _accent_pairs():
  """(characters, replacements): every character that _strip_accents changes."""
  pairs = [(c, _strip_accents(c)) for c in filter(_may_lose_accents, map(chr, _code_points()))]
  pairs = [(c, s) for c, s in pairs if c != s]
  return [c for c, _ in pairs], [s for _, s in pairs]


class GraphTokenizer(tf.Module):
  """text <-> WordPiece ids in the graph, identical to tokenization.FullTokenizer.

  Attributes:
    vocab: dict token -> id (tokenization.load_vocab: the last of duplicate lines wins).
  """

  def __init__(self, vocab_file, do_lower_case, max_word_chars=None):
    """Builds the tables (the first one in a process takes seconds: it scans all of Unicode).

    Args:
      vocab_file: a WordPiece vocabulary (one token per line).
      do_lower_case: as the model was trained (--do_lower_case).
      max_word_chars: longer words become [UNK]; default tokenization.WordpieceTokenizer's.
    """
    super().__init__()
    self.vocab = tokenization.load_vocab(vocab_file)
    self.do_lower_case = do_lower_case
    self.max_word_chars = max_word_chars or tokenization.WordpieceTokenizer(
        self.vocab).max_input_chars_per_word
    self.unk_id = self.vocab["[UNK]"]
    self.sep_id = self.vocab["[SEP]"]
    self._max_token_chars = max(len(token) for token in self.vocab)
    self._table = self._lookup_table(self.vocab)
    # Word-internal pieces by their text after "##": looking a candidate up here costs less
    # than prefixing "##" to every candidate string.
    self._suffix_table = self._lookup_table(
        {token[2:]: i for token, i in self.vocab.items() if token.startswith("##")})
    tokens_by_id = [""] * (max(self.vocab.values()) + 1)
    for token, i in self.vocab.items():
      tokens_by_id[i] = token
    self._tokens_by_id = tf.constant(tokens_by_id)
    self._dropped = _regex_class(_is_dropped)
    self._whitespace = _regex_class(tokenization._is_whitespace)  # pylint: disable=protected-access
    self._cjk = _cjk_class()
    self._split = _regex_class(str.isspace)  # str.split() separators (whitespace_tokenize)
    self._punctuation = _regex_class(tokenization._is_punctuation)  # pylint: disable=protected-access
    self._spaced_script = _regex_class(tokenization.is_spaced_script_char)
    if do_lower_case:
      self._accent_table = tf.lookup.StaticHashTable(
          tf.lookup.KeyValueTensorInitializer(*_accent_pairs()), _UNMAPPED)

  @staticmethod
  def _lookup_table(token_ids):
    """dict token -> id as a string -> int64 table; -1 for a string it does not hold."""
    # A table cannot be empty (a vocabulary with no "##" pieces): " " is never looked up
    # (words hold no whitespace) and gives -1 like any string not held.
    token_ids = token_ids or {" ": -1}
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(list(token_ids), list(token_ids.values()),
                                            key_dtype=tf.string, value_dtype=tf.int64), -1)

  def tokenize(self, texts):
    """string [batch] -> int32 RaggedTensor [batch, (tokens)]: FullTokenizer's ids."""
    words = self.basic_tokenize(texts)
    return words.with_flat_values(self._wordpiece(words.flat_values)).merge_dims(1, 2)

  def basic_tokenize(self, texts):
    """string [batch] -> string RaggedTensor [batch, (words)]: BasicTokenizer.tokenize."""
    texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="ignore")
    texts = tf.strings.regex_replace(texts, self._dropped, "")
    texts = tf.strings.regex_replace(texts, self._whitespace, " ")
    texts = tf.strings.regex_replace(texts, "(%s)" % self._cjk, r" \1 ")
    if self.do_lower_case:
      texts = self._strip_accents(tf.strings.lower(texts, encoding="utf-8"))
    texts = tf.strings.regex_replace(texts, "(%s)" % self._punctuation, r" \1 ")
    return tf.strings.split(tf.strings.regex_replace(texts, self._split, " "))

  def _strip_accents(self, texts):
    """string [batch] with every character replaced by its accent-stripped NFD form."""
    chars = tf.strings.unicode_split(texts, "UTF-8")
    mapped = self._accent_table.lookup(chars.flat_values)
    chars = chars.with_flat_values(tf.where(tf.equal(mapped, _UNMAPPED), chars.flat_values,
                                            mapped))
    return tf.strings.reduce_join(chars, axis=1)

  def _wordpiece(self, words):
    """string [words] -> int32 RaggedTensor [words, (pieces)], greedy longest match first.

    Each loop iteration takes one piece off the front of every unfinished word: it looks up
    the candidates of 1..max_token_chars characters (as "##" pieces after the first piece) and
    keeps the longest one in the vocabulary. A word with no matching candidate, or longer than
    max_word_chars, becomes one [UNK]. An iteration writes one [words] column of pieces, so
    the work and memory follow the most pieces a word takes, not the longest word's length.
    """
    lengths = tf.strings.length(words, unit="UTF8_CHAR")
    widths = tf.range(1, self._max_token_chars + 1)

    def body(step, start, failed, pieces):
      alive = tf.where((start < lengths) & ~failed)[:, 0]  # only unfinished words cost work
      alive_start = tf.gather(start, alive)
      positions = alive_start[:, tf.newaxis] + tf.zeros_like(widths)[tf.newaxis, :]
      sizes = widths[tf.newaxis, :] + tf.zeros_like(alive_start)[:, tf.newaxis]
      candidates = tf.strings.substr(
          tf.tile(tf.gather(words, alive)[:, tf.newaxis], [1, self._max_token_chars]),
          positions, sizes, unit="UTF8_CHAR")
      # A piece after the first is "##" + candidate, looked up without the "##".
      ids = tf.cast(tf.where(positions > 0, self._suffix_table.lookup(candidates),
                             self._table.lookup(candidates)), tf.int32)
      fits = positions + sizes <= tf.gather(lengths, alive)[:, tf.newaxis]
      width = tf.reduce_max(tf.where((ids >= 0) & fits, sizes, 0), axis=1)  # 0: no match
      piece = tf.gather(ids, tf.maximum(width - 1, 0), batch_dims=1)
      # Pieces are stored as id + 1 so that 0 marks an empty slot.
      column = tf.scatter_nd(alive[:, tf.newaxis], tf.where(width > 0, piece + 1, 0),
                             tf.shape(lengths, out_type=tf.int64))
      return (step + 1, tf.tensor_scatter_nd_add(start, alive[:, tf.newaxis], width),
              tf.tensor_scatter_nd_update(failed, alive[:, tf.newaxis], tf.equal(width, 0)),
              pieces.write(step, column))

    # Column 0 is empty: the stack is never of zero columns (no words, or none to split).
    columns = tf.TensorArray(tf.int32, size=1, dynamic_size=True).write(
        0, tf.zeros_like(lengths))
    _, _, failed, columns = tf.while_loop(
        lambda step, start, failed, pieces: tf.reduce_any((start < lengths) & ~failed),
        body, (1, tf.zeros_like(lengths), lengths > self.max_word_chars, columns))
    pieces = tf.transpose(columns.stack())  # [words, 1 + iterations]
    pieces = tf.where(failed[:, tf.newaxis], 0, pieces)
    unk = tf.where(failed, self.unk_id + 1, 0)[:, tf.newaxis]
    pieces = tf.concat([unk, pieces], axis=1)
    return tf.ragged.boolean_mask(pieces, pieces > 0) - 1

  def detokenize(self, ids):
    """int32 [batch, length] decoder output -> string [batch], as rewrite_data.ids_to_text.

    Cuts each row at its first [SEP], drops padding (id 0), merges "##" pieces into the
    previous token and puts a space only between two neighbouring words of spaced scripts.
    """
    before_sep = tf.equal(tf.cumsum(tf.cast(tf.equal(ids, self.sep_id), tf.int32), axis=1), 0)
    tokens = tf.ragged.boolean_mask(tf.gather(self._tokens_by_id, ids),
                                    before_sep & tf.not_equal(ids, 0))
    flat = tokens.flat_values
    is_suffix = tf.strings.regex_full_match(flat, "##.+")
    pieces = tf.where(is_suffix, tf.strings.regex_replace(flat, "^##", ""), flat)
    spaced_start = tf.strings.regex_full_match(
        tf.strings.substr(pieces, 0, 1, unit="UTF8_CHAR"), self._spaced_script)
    spaced_end = tf.strings.regex_full_match(
        tf.strings.substr(pieces, -1, 1, unit="UTF8_CHAR"), self._spaced_script)
    first = tf.equal(tf.range(tf.size(flat, out_type=tf.int64)),
                     tf.gather(tokens.row_starts(), tokens.value_rowids()))
    previous_spaced_end = tf.concat([[False], spaced_end[:-1]], 0)
    space = ~first & ~is_suffix & spaced_start & previous_spaced_end
    joined = tokens.with_flat_values(tf.where(space, " " + pieces, pieces))
    return tf.strings.strip(tf.strings.reduce_join(joined, axis=1))
