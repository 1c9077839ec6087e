# coding=utf-8
"""General word frequencies, and the word weights of domain-aware masking (--masking=domain).

Domain-aware masking follows Difference-Masking (Wilf et al., EMNLP 2023 Findings): mask first
the words that make the domain text differ from general text, scored by TF-ICF against a
general corpus. Here the general corpus is a word-frequency list (--general_word_freq), and:

  g(w)      the word's count in the list; G the sum of all its counts
  icf(w)    log((G + 1) / (g(w) + 1))          inverse corpus frequency
  s(w)      icf(w) / log(G + 1)                in [0, 1]: 1 for a word the list does not name
  weight(w) floor + (1 - floor) * s(w) ** T    T = --domain_temperature, floor = --domain_floor

Every whole word of a sequence is a candidate with its weight; masking.choose_spans visits the
candidates in a weighted random order and takes each that still fits the sequence's budget (the
budget of every strategy: --masked_lm_prob of the maskable tokens, at most
--max_predictions_per_seq), so the mask rate is unchanged and only which words carry it moves.
The TF of TF-ICF is the text itself: a word met n times is a candidate n times, so with T = 1
and floor = 0 a word's expected share of the masks is proportional to n * icf(w), its TF-ICF in
the domain text. A higher T favours the words the list lacks more sharply; the floor keeps
ordinary words masked sometimes (floor = 1 is whole-word masking's uniform choice). A word the
list does not name counts as ordinary (s = 0) when it is punctuation only, digits only (a date
or a case number is no word a checkpoint lacks, and general lists often leave numbers out:
jieba's dictionary does), or has an [UNK] piece (predicting [UNK] teaches nothing).

The list (--general_word_freq) is one of:
  vocab   the model's own vocabulary, read as the general text it was built from: Google's
          WordPiece (and SentencePiece) vocabularies list their whole words most frequent first
          ("the", "of", "and", ...), so of its N whole words of two or more characters the
          word of rank r counts N / r (Zipf's law, scaled so that the rarest counts 1, as the
          rarest words of a corpus list do) and a single ASCII letter ("a", "i") counts N; the
          other single characters (listed in Unicode order, not by frequency) and entries
          without a letter ("...", "2017") are left out: punctuation and numbers weigh the
          floor, a letter of another script 1. A word the vocabulary spells in several pieces
          is one the checkpoint never saw as a word: s = 1. Entries before the vocabulary's
          last `[unusedN]` are not its general words either: in Google's vocabularies they are
          all special, and build_domain_vocab.py puts a domain text's added words there (it
          leaves the last [unusedN] in place), so they too count as unlisted. It needs no file
          and no general corpus. It knows no Chinese words (a Chinese vocabulary lists characters), so text
          whose words are mostly Chinese is refused with it (check_overlap).
  jieba   jieba's own dictionary (349,046 words with counts, shipped in the jieba package).
  a file  utf-8 lines `word<TAB>count` (count a positive number; blank lines skipped; a word
          listed twice adds up). scripts/build_word_freq.py writes one from a corpus you name.
  scores  a file whose first line starts with `#word_scores` gives each word's s(w) itself:
          utf-8 lines `word<TAB>score[<TAB>...]`, score in [0, 1], and the first line's
          `vocab=<fingerprint>` (vocab_fingerprint) ties it to one vocabulary: with another
          it is refused. scripts/build_word_loss.py writes one from the checkpoint's own
          masked-LM loss on each word of the domain text (pretraining/word_loss.py): the words
          the checkpoint cannot predict are masked first.
When the flag is not given, the text decides (default_source): jieba when most of its letters
are Chinese characters, else vocab. The list's words are mapped to word pieces with the model's
tokenizer, as the masking sees words: a WordPiece word and its "##" pieces, or a run of CJK
characters (a Chinese word, which should come from the same --chinese_word_segmenter as the
records' words); a list word of several such words counts for each. Words with an [UNK] piece
are dropped.

This module does not import TensorFlow.
"""

import collections
import hashlib
import math
import os
import re

import numpy as np

from core.errors import InputError
from engine import cli
import tokenization

DEFAULT_TEMPERATURE = 2.0
DEFAULT_FLOOR = 0.1

# --general_word_freq values that name built-in lists, not files.
VOCAB_SOURCE = "vocab"
JIEBA_SOURCE = "jieba"

_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

# A special entry of a vocabulary: [CLS], [unused3], <unk>, <s>.
_SPECIAL_ENTRY_RE = re.compile(r"^(\[[^\]]*\]|<[^>]*>)$")
# A free slot of Google's vocabularies ([unused0] ... [unused993]).
UNUSED_ENTRY_RE = re.compile(r"^\[unused\d+\]$")

# The first line of a file of word scores (read_scores) starts with this.
SCORES_HEADER = "#word_scores"

# A list that names fewer than this share of the domain text's words (punctuation aside) is for
# another language or vocabulary: refused before any work.
MIN_LISTED_SHARE = 0.1

# How much of the domain text the share is measured on.
OVERLAP_SAMPLE_LINES = 2000

# A token without a letter, digit or CJK character (all \w) is punctuation or a symbol.
_WORD_CHAR_RE = re.compile(r"\w", re.UNICODE)

# A digits-only token, a "##" piece of one included (ASCII and full-width digits).
_DIGITS_RE = re.compile(r"^(##)?[0-9\uff10-\uff19]+$")


def check_settings(temperature, floor):
  """Raises InputError naming the flag for a temperature <= 0 or a floor outside [0, 1]."""
  if not (temperature > 0.0 and math.isfinite(temperature)):
    raise InputError("--domain_temperature=%s: expected a number > 0" % temperature)
  if not 0.0 <= floor <= 1.0:
    raise InputError("--domain_floor=%s: expected a value in [0, 1]" % floor)


def read_counts(path):
  """The `word<TAB>count` lines of `path` as an ordered dict word -> count.

  Raises:
    InputError: no such file, bad utf-8, a line without a tab, an empty word or a count that is
      not a positive number (naming the file and line), or no entry at all.
  """
  counts = collections.OrderedDict()
  for line_number, line in cli.text_lines(path):
    if not line.strip():
      continue
    word, tab, count = line.partition("\t")
    word = word.strip()
    try:
      value = float(count)
    except ValueError:
      value = float("nan")
    if not tab or not word or not (value > 0 and math.isfinite(value)):
      raise InputError("%s:%d: expected word<TAB>count with a count > 0 (got %r)" %
                       (path, line_number, line[:80]))
    counts[word] = counts.get(word, 0.0) + value
  if not counts:
    raise InputError("%s: empty: expected word<TAB>count lines (scripts/build_word_freq.py "
                     "writes them from a corpus)" % path)
  return counts


def vocab_fingerprint(vocab):
  """A short digest of a vocabulary's entries in order (vocab: token -> id): the same for the
  same tokens whatever the file's path or line endings."""
  ordered = sorted(vocab.items(), key=lambda item: item[1])
  text = "\n".join(token for token, _ in ordered)
  return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def is_scores_file(path):
  """Whether `path` is a file of word scores: its first line starts with SCORES_HEADER."""
  if path in (VOCAB_SOURCE, JIEBA_SOURCE) or not os.path.isfile(path):
    return False
  with open(path, "rb") as f:
    return f.readline().startswith(SCORES_HEADER.encode("ascii"))


def scores_header(vocab, **fields):
  """The first line of a scores file for `vocab`: SCORES_HEADER, vocab=<fingerprint> and
  `fields` as key=value, tab-separated."""
  items = [("vocab", vocab_fingerprint(vocab))] + sorted(fields.items())
  return "\t".join([SCORES_HEADER] + ["%s=%s" % item for item in items])


def read_scores(path, vocab):
  """The `word<TAB>score` lines of a scores file as an ordered dict word -> score in [0, 1].

  Raises:
    InputError: a first line without `vocab=`, or one naming another vocabulary than `vocab`
      (token -> id); a line without a tab, an empty word or a score outside [0, 1] (naming the
      file and line); or no entry at all.
  """
  scores = collections.OrderedDict()
  header = None
  for line_number, line in cli.text_lines(path):
    if header is None:
      header = dict(field.partition("=")[::2] for field in line.strip().split("\t")[1:])
      if header.get("vocab") != vocab_fingerprint(vocab):
        raise InputError(
            "%s:1: scores for another vocabulary (vocab=%s in its first line, the model's is "
            "vocab=%s): build them with the model's own folder (scripts/build_word_loss.py "
            "--bert_dir=...)" % (path, header.get("vocab", "<missing>"),
                                  vocab_fingerprint(vocab)))
      continue
    if not line.strip():
      continue
    fields = line.split("\t")
    word = fields[0].strip()
    try:
      value = float(fields[1]) if len(fields) > 1 else float("nan")
    except ValueError:
      value = float("nan")
    if not word or not 0.0 <= value <= 1.0:
      raise InputError("%s:%d: expected word<TAB>score with a score in [0, 1] (got %r)" %
                       (path, line_number, line[:80]))
    scores[word] = max(value, scores.get(word, 0.0))
  if not scores:
    raise InputError("%s: no word<TAB>score line after its first line" % path)
  return scores


def icf_scores(counts):
  """(scores, total): s(w) = log((G + 1) / (g(w) + 1)) / log(G + 1) for each word of `counts`
  (word -> count g(w) > 0), and G, the sum of the counts."""
  total = float(sum(counts.values()))
  scale = math.log(total + 1.0)
  return {word: math.log((total + 1.0) / (count + 1.0)) / scale
          for word, count in counts.items()}, total


def is_special_entry(token):
  """Whether a vocabulary entry is a special token: [CLS], [PAD], [unused3], <unk>, <s>."""
  return bool(_SPECIAL_ENTRY_RE.match(token))


def vocab_counts(vocab):
  """The VOCAB_SOURCE list: a vocabulary's whole words as an ordered dict word -> count.

  Args:
    vocab: ordered dict token -> id, in the vocabulary file's order.

  Returns:
    OrderedDict: each entry after the last `[unusedN]` (before it: special entries, and the
    words build_domain_vocab.py added) that is not a special token ([CLS], <unk>) or a
    continuation piece ("##ing"; a SentencePiece entry without its word-start mark) or without
    a letter ("...", "2017"), word-start mark removed; of the N words of two or more characters
    the r-th counts N / r, a single ASCII letter N, and other single characters are left out.
  """
  spm = any(token.startswith(tokenization.SPM_WORD_START) for token in vocab)
  tokens = list(vocab)
  unused = [i for i, token in enumerate(tokens) if UNUSED_ENTRY_RE.match(token)]
  words = collections.OrderedDict()  # An ordered set.
  for token in tokens[unused[-1] + 1 if unused else 0:]:
    if not token.strip() or is_special_entry(token):
      continue
    continuation = (not token.startswith(tokenization.SPM_WORD_START)) if spm else (
        token.startswith("##"))
    word = token.lstrip(tokenization.SPM_WORD_START)
    if continuation or not any(char.isalpha() for char in word):
      continue  # A piece, or punctuation and digits ("...", "2017"): they weigh the floor.
    if len(word) > 1 or word in _ASCII_LETTERS:
      words[word] = True
  ranked = float(max(sum(len(word) > 1 for word in words), 1))
  counts = collections.OrderedDict()
  rank = 0
  for word in words:
    if len(word) > 1:
      rank += 1
    counts[word] = ranked / rank if len(word) > 1 else ranked
  return counts


def jieba_dictionary():
  """The path of jieba's dictionary (lines `word count tag`); InputError if jieba is missing."""
  try:
    import jieba  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise InputError("--general_word_freq=%s: jieba is not installed (pip install jieba), or "
                     "pass a word<TAB>count file" % JIEBA_SOURCE)
  return os.path.join(os.path.dirname(jieba.__file__), "dict.txt")


def jieba_counts():
  """The JIEBA_SOURCE list: jieba's dictionary as an ordered dict word -> count."""
  path = jieba_dictionary()
  counts = collections.OrderedDict()
  for line_number, line in cli.text_lines(path):
    fields = line.split()
    if not fields:
      continue
    try:
      counts[fields[0]] = counts.get(fields[0], 0.0) + float(fields[1])
    except (IndexError, ValueError):
      raise InputError("%s:%d: expected `word count tag` (jieba's dictionary)" %
                       (path, line_number))
  return counts


def default_source(sample):
  """--general_word_freq when it is not given: JIEBA_SOURCE when most of the letters of
  `sample` (an iterable of strings: the domain text's first lines, or its first records'
  tokens) are CJK characters, else VOCAB_SOURCE."""
  cjk = other = 0
  for text in sample:
    for char in text:
      if char.isalpha():
        if _is_cjk(char):
          cjk += 1
        else:
          other += 1
  return JIEBA_SOURCE if cjk > other else VOCAB_SOURCE


def source_counts(source, vocab):
  """The general list named by --general_word_freq (VOCAB_SOURCE, JIEBA_SOURCE or a file), as
  an ordered dict word -> count."""
  if source == VOCAB_SOURCE:
    return vocab_counts(vocab)
  if source == JIEBA_SOURCE:
    return jieba_counts()
  return read_counts(source)


def _is_cjk(char):
  """Whether `char` is a CJK ideograph that the tokenizer makes a token of its own."""
  return tokenization.is_cjk_code_point(ord(char))


def word_units(tokens, ids):
  """Splits one text's word pieces into the masking's words: a token starts a word unless it
  is a "##" piece or a CJK character right after another CJK token (SentencePiece: unless it
  lacks the word-start mark and is no CJK character).

  Returns:
    list of tuples of ids, one per word.
  """
  units = []
  previous_cjk = False
  for token, token_id in zip(tokens, ids):
    piece = token.lstrip(tokenization.SPM_WORD_START)
    cjk = bool(piece) and _is_cjk(piece[0])
    if token.startswith(tokenization.SPM_WORD_START):
      starts = True
    elif token.startswith("##"):
      starts = False
    else:
      starts = not (cjk and previous_cjk)
    if starts or not units:
      units.append((token_id,))
    else:
      units[-1] += (token_id,)
    previous_cjk = cjk
  return units


def sequence_units(ids, word_starts):
  """The words of a tokenized line (ids and their word_starts, no special tokens), as tuples."""
  units = []
  for token_id, start in zip(ids, word_starts):
    if start or not units:
      units.append((int(token_id),))
    else:
      units[-1] += (int(token_id),)
  return units


class WordWeights(object):
  """Word (a tuple of piece ids) -> selection weight, from a general word-frequency list or a
  scores file.

  Attributes:
    weights: dict tuple of ids -> weight, for the list's words and the vocabulary's
      punctuation; a word made only of `plain_ids` (digits, punctuation, [UNK]) or with an
      [UNK] piece weighs the floor, any other word 1.0 (s = 1).
    listed: frozenset of the list's words (as tuples of ids).
    source: the file, for messages.
    temperature, floor: the settings the weights were made with.
    total: G, the list's total count (None for a scores file).
  """

  def __init__(self, scores, punctuation_ids, temperature=DEFAULT_TEMPERATURE,
               floor=DEFAULT_FLOOR, source="general word frequencies", numeral_ids=(),
               unk_id=None, cjk_ids=(), total=None):
    """scores: dict tuple of ids -> s in [0, 1] (icf_scores of a list, or a scores file);
    punctuation_ids, numeral_ids: ids of the punctuation and digits-only tokens; unk_id: the id
    of [UNK] (or None); cjk_ids: ids of the tokens that begin with a CJK character; total: G."""
    check_settings(temperature, floor)
    self.cjk_ids = frozenset(cjk_ids)
    self.unk_id = unk_id
    self.plain_ids = frozenset(punctuation_ids) | frozenset(numeral_ids) | frozenset(
        [] if unk_id is None else [unk_id])
    self.source = source
    self.temperature = float(temperature)
    self.floor = float(floor)
    self.total = total
    self.listed = frozenset(scores)
    self.weights = {(i,): self.floor for i in punctuation_ids}
    for word, score in scores.items():
      self.weights[word] = self.weight(score)

  def weight(self, score):
    """floor + (1 - floor) * score ** temperature, for a score s in [0, 1]."""
    return self.floor + (1.0 - self.floor) * score ** self.temperature

  def __len__(self):
    return len(self.listed)

  def unit_weights(self, input_ids, starts, ends):
    """float64 array [W]: the weight of each word input_ids[starts[k]:ends[k]]."""
    ids = np.asarray(input_ids).tolist()
    return np.array([self._unit_weight(tuple(ids[s:e]))
                     for s, e in zip(starts.tolist(), ends.tolist())], dtype=np.float64)

  def _unit_weight(self, unit):
    weight = self.weights.get(unit)
    if weight is not None:
      return weight
    return self.floor if self.is_plain(unit) else 1.0

  def is_plain(self, unit):
    """Whether a word (tuple of ids) the list does not name counts as ordinary (s = 0):
    punctuation or digits only, or with an [UNK] piece."""
    return unit not in self.listed and (self.unk_id in unit or self.plain_ids.issuperset(unit))

  def listed_share(self, units):
    """(share, words): of `units` (tuples of ids) that are not punctuation, how many the list
    names, as a share, and how many were counted."""
    counted = listed = 0
    for unit in units:
      if self.is_plain(unit):
        continue  # Punctuation, a number or [UNK] the list does not name.
      counted += 1
      listed += unit in self.listed
    return listed / float(max(counted, 1)), counted

  def check_overlap(self, units, where):
    """Raises InputError when the list names under MIN_LISTED_SHARE of the words of `units`
    (the domain text's, read from `where`)."""
    share, counted = self.listed_share(units)
    if self.source == VOCAB_SOURCE and counted:
      chinese = sum(unit[0] in self.cjk_ids for unit in units if not self.is_plain(unit))
      if chinese > 0.5 * counted:
        raise InputError(
            "--general_word_freq=%s: %d of the %d words of %s are Chinese, and a vocabulary "
            "lists characters, not Chinese words: pass --general_word_freq=%s (jieba's "
            "dictionary, with --chinese_word_segmenter=jieba) or a word<TAB>count file" %
            (VOCAB_SOURCE, chinese, counted, where, JIEBA_SOURCE))
    if counted and share < MIN_LISTED_SHARE:
      raise InputError(
          "--general_word_freq=%s names only %.1f%% of the %d words of %s (at least %.0f%% "
          "expected): a list of another language or vocabulary? Build one from general text of "
          "the domain's language with scripts/build_word_freq.py" %
          (self.source, 100 * share, counted, where, 100 * MIN_LISTED_SHARE))
    return share

  def describe(self):
    return ("%d words from %s, temperature %g, floor %g" %
            (len(self), self.source, self.temperature, self.floor))


def token_classes(vocab):
  """(punctuation, numerals, cjk): the ids of `vocab`'s (token -> id) punctuation-only tokens,
  digits-only tokens, and tokens that begin with a CJK character."""
  punctuation, numerals, cjk = [], [], []
  for token, i in vocab.items():
    piece = token.lstrip(tokenization.SPM_WORD_START)
    if piece and _is_cjk(piece[0]):
      cjk.append(i)
    if not _WORD_CHAR_RE.search(piece):
      punctuation.append(i)
    elif _DIGITS_RE.match(piece):
      numerals.append(i)
  return punctuation, numerals, cjk


def load(path, tokenizer, temperature=DEFAULT_TEMPERATURE, floor=DEFAULT_FLOOR):
  """Reads a word-frequency list or a scores file and maps it to the model's word pieces.

  Args:
    path: --general_word_freq: VOCAB_SOURCE, JIEBA_SOURCE, a file of `word<TAB>count` lines or
      a scores file (is_scores_file).
    tokenizer: tokenization.FullTokenizer of the model.
    temperature, floor: --domain_temperature and --domain_floor.

  Returns:
    WordWeights.

  Raises:
    InputError: bad settings, a missing, empty or malformed file (read_counts, read_scores), a
      scores file for another vocabulary, or a list none of whose words the vocabulary can
      spell without [UNK].
  """
  check_settings(temperature, floor)
  unk = tokenizer.vocab.get("[UNK]", tokenizer.vocab.get("<unk>"))
  scored = is_scores_file(path)
  listed = (read_scores(path, tokenizer.vocab) if scored else
            source_counts(path, tokenizer.vocab))
  by_unit = {}
  for word, value in listed.items():
    tokens = tokenizer.tokenize(word)
    for unit in word_units(tokens, tokenizer.convert_tokens_to_ids(tokens)):
      if unk not in unit:  # A count adds up; a score keeps the highest.
        by_unit[unit] = (max if scored else sum)((by_unit.get(unit, 0.0), value))
  if not by_unit:
    raise InputError("%s: none of its %d words is in the model's vocabulary without [UNK]: a "
                     "list for another vocabulary or language" % (path, len(listed)))
  scores, total = (by_unit, None) if scored else icf_scores(by_unit)
  punctuation, numerals, cjk = token_classes(tokenizer.vocab)
  return WordWeights(scores, punctuation, temperature, floor, source=path, numeral_ids=numerals,
                     unk_id=unk, cjk_ids=cjk, total=total)


def count_words(input_files, split):
  """Counter word -> occurrences over every line of `input_files`, split by `split`."""
  counts = collections.Counter()
  for path in input_files:
    for _, line in cli.text_lines(path):
      counts.update(split(line))
  return counts


def count_lines(counts):
  """`word<TAB>count` lines, most frequent first (ties by word), for a Counter."""
  for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
    if word.strip() and "\t" not in word:
      yield "%s\t%d" % (word, count)
