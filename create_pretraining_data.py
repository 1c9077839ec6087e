# coding=utf-8
"""Creates masked-LM / next-sentence TFRecords for BERT pretraining, streaming.

Input: plain text, one sentence (or passage) per line, blank lines between documents, utf-8.
Output: TFRecords in the stock google-research/bert layout (see pretraining/records.py), or
unmasked records plus word boundaries for train-time masking (--dynamic_masking).

Differences from stock create_pretraining_data.py, all so that memory stays bounded whatever
the corpus size:
  * The corpus is streamed in chunks of up to 64 documents (or 128 KB of text) and never held
    in memory whole; chunks are tokenized and turned into instances by --num_workers
    processes.
  * The "random next" segment B comes from another document of the same chunk, a bounded
    buffer of neighbouring documents (stock draws from the whole corpus).
  * Instances are shuffled within a window of --shuffle_window instances (stock shuffles all).
    The dupe_factor copies of a chunk are made together, so copies of a document land near
    each other in the output rather than anywhere.
  * Each input file starts a new document (stock lets a document run across files).
  * A document longer than 1 MB is split into parts (counted and logged).
  * A document needs at least 2 tokens to yield an instance (1 with --no_nsp); shorter ones
    are counted and logged, and a corpus with none long enough is an error.
  * --masked_lm_prob counts only maskable tokens, and random replacements never insert
    special tokens (see pretraining/masking.py, which also describes whole-word and n-gram masking).
Each chunk's random numbers come from (random_seed, chunk index, dupe index), so the output is
byte-identical for a given seed whatever --num_workers is. TensorFlow is not needed: records
are framed and serialized here (the tests read them back with TensorFlow).
"""

import collections
import glob
import logging as python_logging
import multiprocessing
import os
import random
import re
import resource
import signal
import struct
import time
import unicodedata

from absl import flags
from absl import logging
import numpy as np

from core import atomic_files
from core.errors import InputError
from core import formatting
from engine.cli import decode_line
from engine.cli import run_main
from pretraining import masking
from pretraining import similar_words
import tokenization

FLAGS = flags.FLAGS

# A chunk (the unit of parallel work and of the "random next" document pool) closes after this
# many documents or bytes of text, whichever comes first. Fixed, so output does not depend on
# the number of workers. Small enough to balance work across workers even on small corpora,
# large enough that a random other document is rarely a close neighbour.
_CHUNK_DOCUMENTS = 64
_CHUNK_BYTES = 128 * 1024
# Documents longer than this are split, so one huge "document" (e.g. a file without blank
# lines) cannot exhaust memory.
_MAX_DOCUMENT_BYTES = 1024 * 1024
# Chunks handed to workers but not yet written, per worker: enough to keep workers busy while
# the parent writes, few enough to bound memory.
_IN_FLIGHT_PER_WORKER = 2
# Instances printed at the start, like stock's "*** Example ***" lines.
_NUM_LOGGED_EXAMPLES = 3
# Documents yielding no instance whose location is logged (all are counted).
_NUM_LOGGED_SHORT_DOCUMENTS = 5
# How far ahead (in CJK characters) token/segmenter alignment looks to resynchronise, e.g.
# past characters that became [UNK].
_ALIGN_WINDOW = 64

_CJK_CLASS = (u"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df"
              u"\U0002a700-\U0002ceaf\U0002f800-\U0002fa1f")
_CJK_CHAR_RE = re.compile(u"[%s]" % _CJK_CLASS)
_CJK_RUN_RE = re.compile(u"[%s]+" % _CJK_CLASS)
_CJK_GAP_RE = re.compile(u"(?<=[%s])\\s+(?=[%s])" % (_CJK_CLASS, _CJK_CLASS))
_SPM_WORD_START = u"\u2581"

MASKING_CHOICES = masking.STRATEGIES
SEGMENTER_CHOICES = ("none", "jieba", "presegmented")

# (kind, name, default, help). The single source of the flags and of `Options` defaults.
_FLAG_SPECS = (
    ("string", "input_file", None,
     "Input raw text file, or a comma-separated list of files and glob patterns. utf-8, one "
     "sentence per line, blank lines between documents."),
    ("string", "output_file", None,
     "Output TFRecord file, or a comma-separated list of files: instances are written to them "
     "round-robin."),
    ("string", "vocab_file", None, "The vocabulary file that the BERT model was trained on."),
    ("bool", "do_lower_case", True,
     "Whether to lower case the input text. Should be True for uncased and Chinese models and "
     "False for cased models."),
    ("bool", "do_whole_word_mask", False,
     "Whether to use whole word masking rather than per-WordPiece masking (same as "
     "--masking=whole_word)."),
    ("integer", "max_seq_length", 128, "Maximum sequence length."),
    ("integer", "max_predictions_per_seq", 20,
     "Maximum number of masked LM predictions per sequence."),
    ("integer", "random_seed", 12345,
     "Random seed for data generation. The same seed gives byte-identical output whatever "
     "--num_workers is."),
    ("integer", "dupe_factor", 10,
     "Number of times to duplicate the input data (with different masks, sentence pairings "
     "and lengths). With --dynamic_masking, 1 is usually enough: masks change every epoch."),
    ("float", "masked_lm_prob", 0.15,
     "Masked LM probability: the share of maskable tokens (all but [CLS]/[SEP]/[PAD]) to "
     "predict, capped at --max_predictions_per_seq."),
    ("float", "short_seq_prob", 0.1,
     "Probability of creating sequences which are shorter than the maximum length. Ignored "
     "with --no_nsp, whose instances are always packed full."),
    ("string", "spm_model_file", None,
     "Optional SentencePiece model to tokenize with instead of --vocab_file's WordPiece; it "
     "must contain [CLS], [SEP] and [MASK]."),
    ("string", "masking", "token",
     "Masking strategy, one of token|whole_word|ngram: token = stock per-WordPiece masking; "
     "whole_word = all pieces of a word together (Chinese words need "
     "--chinese_word_segmenter); ngram = spans of 1..--max_ngram whole words with "
     "p(n) proportional to 1/n (MacBERT/SpanBERT). --do_whole_word_mask turns token into "
     "whole_word. See pretraining/masking.py for the 80/10/10 rule."),
    ("integer", "max_ngram", 3, "Longest span, in whole words, for --masking=ngram."),
    ("string", "masking_replacement", "mask",
     "What the 80% share of the selected words becomes, one of mask|similar: mask = [MASK] "
     "(stock); similar = a similar word with the same number of word pieces, from "
     "--similar_words_file, or a random word when it lists none (MacBERT's MLM as correction; "
     "never the original). Works with every --masking; see pretraining/masking.py."),
    ("string", "similar_words_file", None,
     "--masking_replacement=similar: utf-8 lines word<TAB>neighbour neighbour ... "
     "(build_similar_words.py makes one from your corpus with word2vec)."),
    ("string", "chinese_word_segmenter", "none",
     "How Chinese text is split into words for whole-word/n-gram masking and for the "
     "word_starts of --dynamic_masking, one of none|jieba|presegmented: none = every "
     "character is a word (stock); jieba = segment with jieba (pip install jieba); "
     "presegmented = the input already separates words with spaces, which define the word "
     "boundaries of CJK text (the spaces themselves are not tokens)."),
    ("bool", "no_nsp", False,
     "Make MLM-only instances without next_sentence_labels: contiguous text from the "
     "sentences of a document, continuing into the next document after a [SEP], packed to "
     "fill max_seq_length (RoBERTa FULL-SENTENCES). Only the last instance of each chunk may "
     "be shorter."),
    ("bool", "dynamic_masking", False,
     "Write unmasked instances plus a word_starts feature instead of masked positions; the "
     "trainer masks each batch anew (masking.mask_batch)."),
    ("integer", "num_workers", 1,
     "Processes that tokenize and build instances. Output does not depend on it."),
    ("integer", "shuffle_window", 10000,
     "Instances are shuffled within a window of this many (memory grows with it); 1 keeps "
     "generation order. The random-next segment B of an instance is drawn from the other "
     "documents in the same chunk of up to %d documents (%d KB), not the whole corpus." %
     (_CHUNK_DOCUMENTS, _CHUNK_BYTES // 1024)),
    ("integer", "log_every_docs", 1000,
     "Log progress (documents, documents/sec, instances, ETA) every this many documents."),
)


class Options(object):
  """The tool's settings: one attribute per flag, defaults as the flags'."""

  def __init__(self, **values):
    for _, name, default, _ in _FLAG_SPECS:
      setattr(self, name, values.pop(name, default))
    if values:
      raise TypeError("unknown option(s): %s" % ", ".join(sorted(values)))

  @property
  def strategy(self):
    """The masking strategy, with --do_whole_word_mask folded in."""
    if self.do_whole_word_mask and self.masking == "token":
      return "whole_word"
    return self.masking

  @property
  def needs_word_starts(self):
    """Whether word boundaries matter: written (dynamic) or used for static masking."""
    return self.dynamic_masking or self.strategy != "token"


def define_flags():
  """Defines the command-line flags from _FLAG_SPECS."""
  for kind, name, default, help_text in _FLAG_SPECS:
    getattr(flags, "DEFINE_" + kind)(name, default, help_text)


def options_from_flags():
  """Options holding the parsed command-line flags."""
  return Options(**{name: getattr(FLAGS, name) for _, name, _, _ in _FLAG_SPECS})


def check_options(opts):
  """Raises InputError naming the flag for settings that cannot work."""
  for name in ("input_file", "output_file"):
    if not getattr(opts, name):
      raise InputError("--%s is required" % name)
  if not opts.vocab_file and not opts.spm_model_file:
    raise InputError("--vocab_file is required")
  if opts.masking not in MASKING_CHOICES:
    raise InputError("--masking=%s: expected one of %s" %
                     (opts.masking, "|".join(MASKING_CHOICES)))
  if opts.masking_replacement not in masking.REPLACEMENTS:
    raise InputError("--masking_replacement=%s: expected one of %s" %
                     (opts.masking_replacement, "|".join(masking.REPLACEMENTS)))
  if opts.masking_replacement == "similar" and not opts.similar_words_file:
    raise InputError("--masking_replacement=similar needs --similar_words_file "
                     "(build_similar_words.py makes one)")
  if opts.chinese_word_segmenter not in SEGMENTER_CHOICES:
    raise InputError("--chinese_word_segmenter=%s: expected one of %s" %
                     (opts.chinese_word_segmenter, "|".join(SEGMENTER_CHOICES)))
  for name in ("max_predictions_per_seq", "dupe_factor", "max_ngram", "num_workers",
               "shuffle_window", "log_every_docs"):
    if getattr(opts, name) < 1:
      raise InputError("--%s=%s: expected an integer >= 1" % (name, getattr(opts, name)))
  shortest = 3 if opts.no_nsp else 5
  if opts.max_seq_length < shortest:
    raise InputError("--max_seq_length=%d: expected at least %d ([CLS] A [SEP]%s)" %
                     (opts.max_seq_length, shortest, "" if opts.no_nsp else " B [SEP]"))
  if opts.max_predictions_per_seq > opts.max_seq_length:
    raise InputError("--max_predictions_per_seq=%d exceeds --max_seq_length=%d" %
                     (opts.max_predictions_per_seq, opts.max_seq_length))
  if not 0.0 < opts.masked_lm_prob <= 1.0:
    raise InputError("--masked_lm_prob=%s: expected a value in (0, 1]" % opts.masked_lm_prob)
  if not 0.0 <= opts.short_seq_prob <= 1.0:
    raise InputError("--short_seq_prob=%s: expected a value in [0, 1]" % opts.short_seq_prob)


def expand_input_files(patterns):
  """Files named by a comma-separated list of paths/globs, in order; each must hold text.

  Raises:
    InputError: a pattern that matches no file, or a file with no non-blank line.
  """
  input_files = []
  for pattern in patterns.split(","):
    pattern = pattern.strip()
    matches = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
    if not matches:
      raise InputError("--input_file: no file matches %r" % pattern)
    input_files.extend(matches)
  for path in input_files:
    _check_has_text(path)
  return input_files


def _check_has_text(path):
  """Raises InputError unless `path` has a non-blank line (reads only up to the first one)."""
  with open(path, "rb") as reader:
    for raw in reader:
      if raw.strip():
        return
  raise InputError("%s: empty corpus: no text (expected utf-8 text, one sentence per line, "
                   "blank lines between documents)" % path)


def load_tokenizer(opts):
  """The FullTokenizer for --vocab_file / --spm_model_file (InputError if unusable)."""
  if opts.spm_model_file:
    return tokenization.FullTokenizer(None, opts.do_lower_case, opts.spm_model_file)
  if not os.path.isfile(opts.vocab_file):
    raise InputError("--vocab_file=%s: no such file" % opts.vocab_file)
  return tokenization.FullTokenizer(opts.vocab_file, opts.do_lower_case)


def masking_config(opts, tokenizer):
  """The MaskingConfig for `opts`; InputError if the vocabulary lacks a special token or the
  similar-words file is unusable."""
  source = "--spm_model_file=%s" % opts.spm_model_file
  if not opts.spm_model_file:
    source = "--vocab_file=%s" % opts.vocab_file
  similar = None
  if opts.masking_replacement == "similar":
    similar = similar_words.load(opts.similar_words_file, tokenizer)
  return masking.MaskingConfig.from_vocab(
      tokenizer.vocab, source=source, strategy=opts.strategy,
      masked_lm_prob=opts.masked_lm_prob, max_predictions_per_seq=opts.max_predictions_per_seq,
      max_ngram=opts.max_ngram, replacement=opts.masking_replacement, similar_words=similar)


def has_cjk(text):
  """Whether `text` holds a CJK character (such words are the segmenter's to split)."""
  return bool(_CJK_CHAR_RE.search(text))


def make_segmenter(name):
  """Returns a function text -> list of words, or None for "none"."""
  if name == "none":
    return None
  if name == "presegmented":
    return str.split
  try:
    import jieba  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise InputError("--chinese_word_segmenter=jieba: jieba is not installed "
                     "(pip install jieba)")
  jieba.setLogLevel(python_logging.WARNING)  # Its dictionary-loading chatter is noise here.
  return jieba.lcut


# ---------------------------------------------------------------------------------------------
# Reading: documents and chunks.

Document = collections.namedtuple("Document", ["path", "line", "lines", "nbytes", "split"])
Chunk = collections.namedtuple("Chunk", ["index", "documents", "nbytes"])


def read_documents(input_files):
  """Yields the Documents of `input_files`, streaming.

  A document is a run of non-blank lines (stripped). `line` is the first line's number, `nbytes`
  the bytes consumed since the previous document (for progress), `split` whether it is the
  continuation of a document cut at _MAX_DOCUMENT_BYTES.

  Raises:
    InputError: a line that is not valid utf-8.
  """
  for path in input_files:
    lines, first, nbytes, size, split = [], 0, 0, 0, False
    with open(path, "rb") as reader:
      for line_number, raw in enumerate(reader, 1):
        nbytes += len(raw)
        text = decode_line(raw, path, line_number).strip()
        if not text:
          if lines:
            yield Document(path, first, lines, nbytes, split)
            lines, nbytes, size, split = [], 0, 0, False
          continue
        if not lines:
          first = line_number
        lines.append(text)
        size += len(raw)
        if size > _MAX_DOCUMENT_BYTES:
          yield Document(path, first, lines, nbytes, split)
          lines, nbytes, size, split = [], 0, 0, True
    if lines:
      yield Document(path, first, lines, nbytes, split)


def make_chunks(documents):
  """Groups documents into Chunks of <= _CHUNK_DOCUMENTS documents / ~_CHUNK_BYTES bytes."""
  batch, nbytes, index = [], 0, 0
  for document in documents:
    batch.append(document)
    nbytes += document.nbytes
    if len(batch) >= _CHUNK_DOCUMENTS or nbytes >= _CHUNK_BYTES:
      yield Chunk(index, batch, nbytes)
      batch, nbytes, index = [], 0, index + 1
  if batch:
    yield Chunk(index, batch, nbytes)


# ---------------------------------------------------------------------------------------------
# Tokenizing: sentences as (ids, word_starts).


class Featurizer(object):
  """Per-process state: tokenizer, word segmenter and masking config.

  Attributes:
    opts: Options.
    tokenizer: tokenization.FullTokenizer.
    masking: masking.MaskingConfig.
    cls_id, sep_id: ints.
  """

  def __init__(self, opts):
    self.opts = opts
    self.tokenizer = load_tokenizer(opts)
    self.masking = masking_config(opts, self.tokenizer)
    self.cls_id = self.tokenizer.vocab["[CLS]"]
    self.sep_id = self.tokenizer.vocab["[SEP]"]
    self._spm = bool(opts.spm_model_file)
    self._presegmented = opts.chinese_word_segmenter == "presegmented"
    self._segment = None
    if opts.needs_word_starts:
      self._segment = make_segmenter(opts.chinese_word_segmenter)

  def sentence(self, line):
    """Tokenizes one line.

    Returns:
      (ids, word_starts): lists of ints, same length; word_starts is None unless
      opts.needs_word_starts.
    """
    text = _CJK_GAP_RE.sub("", line) if self._presegmented else line
    tokens = self.tokenizer.tokenize(text)
    ids = self.tokenizer.convert_tokens_to_ids(tokens)
    if not self.opts.needs_word_starts:
      return ids, None
    words = self._segment(line) if self._segment else None
    return ids, self._word_starts(tokens, words)

  def _word_starts(self, tokens, words):
    """1 where a token starts a word: WordPiece/SentencePiece rules, then segmenter words.

    The segmenter only decides for tokens that begin with a CJK character: such a token
    continues a word iff its first character continues a segmenter word. Tokens and words
    are aligned by walking both CJK character streams.
    """
    if self._spm:
      starts = [1 if t.startswith(_SPM_WORD_START) or _CJK_CHAR_RE.match(t) else 0
                for t in tokens]
    else:
      starts = [0 if t.startswith("##") else 1 for t in tokens]
    if words is None:
      return starts
    chars, continues = _cjk_continuations(words)
    position = 0
    for i, token in enumerate(tokens):
      piece = token.lstrip(_SPM_WORD_START) if self._spm else token
      if not piece or not _CJK_CHAR_RE.match(piece):
        continue
      found = chars.find(unicodedata.normalize("NFD", piece[0]), position,
                         position + _ALIGN_WINDOW)
      if found >= 0:
        starts[i] = 0 if continues[found] else 1
        position = found + 1
    return starts


def _cjk_continuations(words):
  """The CJK characters of `words` (NFD) as one string, and per character whether it
  continues a word (follows another CJK character of the same word), as a bytearray."""
  chars = []
  continues = bytearray()
  for word in words:
    for run in _CJK_RUN_RE.findall(unicodedata.normalize("NFD", word)):
      chars.append(run)
      continues += b"\x00" + b"\x01" * (len(run) - 1)
  return "".join(chars), continues


# ---------------------------------------------------------------------------------------------
# Instances: (ids, segment_ids, word_starts, is_random_next), unpadded, with [CLS]/[SEP].

Instance = collections.namedtuple("Instance",
                                  ["ids", "segment_ids", "word_starts", "is_random_next"])


def _concat(sentences):
  """Joins (ids, word_starts) sentences into one (ids, word_starts) pair."""
  ids, starts = [], []
  for sentence_ids, sentence_starts in sentences:
    ids.extend(sentence_ids)
    if sentence_starts is not None:
      starts.extend(sentence_starts)
  return ids, starts


def nsp_instances(documents, document_index, rng, opts, featurizer, stats):
  """Stock create_instances_from_document: sentence pairs A/B, B random half of the time.

  Args:
    documents: list of documents, each a list of (ids, word_starts) sentences (the chunk).
    document_index: which document to make instances from.
    rng: numpy.random.Generator.
    opts: Options.
    featurizer: Featurizer (for [CLS]/[SEP] ids).
    stats: collections.Counter, gets "same_document_random_next".

  Returns:
    list of Instance.
  """
  document = documents[document_index]
  max_num_tokens = opts.max_seq_length - 3
  # Usually fill the sequence; sometimes (short_seq_prob) aim shorter, to match fine-tuning.
  target_seq_length = max_num_tokens
  if rng.random() < opts.short_seq_prob:
    target_seq_length = int(rng.integers(2, max_num_tokens + 1))
  instances = []
  current_chunk = []
  current_length = 0
  i = 0
  while i < len(document):
    current_chunk.append(document[i])
    current_length += len(document[i][0])
    if i == len(document) - 1 or current_length >= target_seq_length:
      a_end = 1
      if len(current_chunk) >= 2:
        a_end = int(rng.integers(1, len(current_chunk)))
      segment_a = _concat(current_chunk[:a_end])
      if len(current_chunk) == 1 or rng.random() < 0.5:
        is_random_next = True
        segment_b = _random_segment(documents, document_index,
                                    target_seq_length - len(segment_a[0]), rng, stats)
        # The sentences not used as B go back to the document for the next instance.
        i -= len(current_chunk) - a_end
      else:
        is_random_next = False
        segment_b = _concat(current_chunk[a_end:])
      instances.append(_pair_instance(segment_a, segment_b, is_random_next, max_num_tokens,
                                      rng, featurizer))
      current_chunk = []
      current_length = 0
    i += 1
  return instances


def _random_segment(documents, document_index, target_length, rng, stats):
  """Stock random-next B: sentences of another document from a random start."""
  for _ in range(10):
    random_index = int(rng.integers(len(documents)))
    if random_index != document_index:
      break
  if random_index == document_index:
    stats["same_document_random_next"] += 1
  random_document = documents[random_index]
  start = int(rng.integers(len(random_document)))
  sentences = []
  length = 0
  for sentence in random_document[start:]:
    sentences.append(sentence)
    length += len(sentence[0])
    if length >= target_length:
      break
  return _concat(sentences)


def truncate_seq_pair(len_a, len_b, max_num_tokens, rng):
  """Stock truncation, as index ranges: drop tokens from the longer of A and B, each time from
  the front or the back at random, until A + B fits.

  Returns:
    (a_start, a_end, b_start, b_end): the kept ranges.
  """
  a_start, a_end, b_start, b_end = 0, len_a, 0, len_b
  excess = len_a + len_b - max_num_tokens
  if excess <= 0:
    return a_start, a_end, b_start, b_end
  for front in (rng.random(excess) < 0.5).tolist():
    if a_end - a_start > b_end - b_start:
      a_start, a_end = (a_start + 1, a_end) if front else (a_start, a_end - 1)
    else:
      b_start, b_end = (b_start + 1, b_end) if front else (b_start, b_end - 1)
  return a_start, a_end, b_start, b_end


def _pair_instance(segment_a, segment_b, is_random_next, max_num_tokens, rng, featurizer):
  """[CLS] A [SEP] B [SEP] after truncation; word_starts 1 on specials and segment starts."""
  (ids_a, starts_a), (ids_b, starts_b) = segment_a, segment_b
  a0, a1, b0, b1 = truncate_seq_pair(len(ids_a), len(ids_b), max_num_tokens, rng)
  cls_id, sep_id = featurizer.cls_id, featurizer.sep_id
  ids = [cls_id] + ids_a[a0:a1] + [sep_id] + ids_b[b0:b1] + [sep_id]
  segment_ids = [0] * (a1 - a0 + 2) + [1] * (b1 - b0 + 1)
  word_starts = None
  if featurizer.opts.needs_word_starts:
    # A piece whose word head was truncated away starts a word of its own.
    word_starts = [1, 1] + starts_a[a0 + 1:a1] + [1, 1] + starts_b[b0 + 1:b1] + [1]
  return Instance(ids, segment_ids, word_starts, is_random_next)


def packed_instances(documents, featurizer):
  """--no_nsp instances: the chunk's token stream cut into full [CLS] ... [SEP] sequences.

  Documents follow each other with a [SEP] between them (RoBERTa FULL-SENTENCES); only the
  last instance of the chunk can be shorter than max_seq_length.
  """
  size = featurizer.opts.max_seq_length - 2
  cls_id, sep_id = featurizer.cls_id, featurizer.sep_id
  with_starts = featurizer.opts.needs_word_starts
  ids, starts = [], []
  instances = []

  def emit(count):
    body_starts = None
    if with_starts:
      body_starts = [1, 1] + starts[1:count] + [1]
    instances.append(Instance([cls_id] + ids[:count] + [sep_id], [0] * (count + 2),
                              body_starts, None))
    del ids[:count]
    del starts[:count]

  for document in documents:
    if ids:
      ids.append(sep_id)
      starts.append(1)
    for sentence_ids, sentence_starts in document:
      ids.extend(sentence_ids)
      starts.extend(sentence_starts or ())
      while len(ids) >= size:
        emit(size)
  if ids:
    emit(len(ids))
  return instances


# ---------------------------------------------------------------------------------------------
# Serializing: tf.train.Example protobufs, encoded by hand: this tool never imports TensorFlow.


def _varint(value):
  """Protobuf base-128 varint of a non-negative int."""
  out = bytearray()
  while value > 0x7F:
    out.append((value & 0x7F) | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


_SMALL_VARINTS = [_varint(v) for v in range(1 << 15)]  # Covers the ids of common vocabularies.


def _length_delimited(tag, payload):
  """A protobuf length-delimited field: tag byte, varint length, payload."""
  size = len(payload)
  return tag + (_SMALL_VARINTS[size] if size < 32768 else _varint(size)) + payload


def _int64_feature(values):
  """A serialized tf.train.Feature holding an Int64List (packed) of non-negative ints."""
  top = max(values)
  if top < 128:
    payload = bytes(values)  # One byte per varint: the common case of masks and segment ids.
  elif top < len(_SMALL_VARINTS):
    payload = b"".join(map(_SMALL_VARINTS.__getitem__, values))
  else:
    payload = b"".join(map(_varint, values))
  return _length_delimited(b"\x1a", _length_delimited(b"\x0a", payload))


def _float_feature(values):
  """A serialized tf.train.Feature holding a FloatList (packed float32)."""
  payload = struct.pack("<%df" % len(values), *values)
  return _length_delimited(b"\x12", _length_delimited(b"\x0a", payload))


def serialize_example(features):
  """A serialized tf.train.Example from (name, serialized Feature) pairs."""
  entries = b"".join(
      _length_delimited(b"\x0a", _length_delimited(b"\x0a", name.encode("utf-8")) +
                        _length_delimited(b"\x12", feature))
      for name, feature in features)
  return _length_delimited(b"\x0a", entries)


def instance_features(instance, rng, featurizer, stats):
  """The features of one instance, masked unless --dynamic_masking.

  Returns:
    (features, masked): features a list of (name, serialized Feature) in stock order; masked
    the (masked ids, positions, labels) or None.
  """
  opts = featurizer.opts
  length = len(instance.ids)
  padding = [0] * (opts.max_seq_length - length)
  stats["tokens"] += length
  stats["maskable_tokens"] += (length - instance.ids.count(featurizer.cls_id) -
                               instance.ids.count(featurizer.sep_id))
  masked = None
  input_ids = instance.ids
  if not opts.dynamic_masking:
    masked = masking.mask_sequence(instance.ids, instance.word_starts, rng, featurizer.masking)
    input_ids = masked[0].tolist()
  features = [("input_ids", _int64_feature(input_ids + padding)),
              ("input_mask", _int64_feature([1] * length + padding)),
              ("segment_ids", _int64_feature(instance.segment_ids + padding))]
  if masked is None:
    features.append(("word_starts", _int64_feature(instance.word_starts + padding)))
  else:
    positions, labels = masked[1].tolist(), masked[2].tolist()
    stats["masked_tokens"] += len(positions)
    empty = opts.max_predictions_per_seq - len(positions)
    features += [("masked_lm_positions", _int64_feature(positions + [0] * empty)),
                 ("masked_lm_ids", _int64_feature(labels + [0] * empty)),
                 ("masked_lm_weights", _float_feature([1.0] * len(positions) + [0.0] * empty))]
  if instance.is_random_next is not None:
    features.append(("next_sentence_labels", _int64_feature([int(instance.is_random_next)])))
  return features, masked


def describe_instance(instance, masked, featurizer):
  """A multi-line, stock-like description of an instance for the log."""
  to_tokens = featurizer.tokenizer.convert_ids_to_tokens
  ids = instance.ids if masked is None else masked[0].tolist()
  lines = ["tokens: %s" % " ".join(tokenization.printable_text(t) for t in to_tokens(ids)),
           "segment_ids: %s" % " ".join(str(s) for s in instance.segment_ids)]
  if instance.is_random_next is not None:
    lines.append("is_random_next: %s" % instance.is_random_next)
  if masked is None:
    lines.append("word_starts: %s" % " ".join(str(s) for s in instance.word_starts))
  else:
    lines.append("masked_lm_positions: %s" % " ".join(str(p) for p in masked[1].tolist()))
    lines.append("masked_lm_labels: %s" % " ".join(to_tokens(masked[2].tolist())))
  return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Chunk processing (in workers).

ChunkResult = collections.namedtuple(
    "ChunkResult",
    ["index", "records", "stats", "short_documents", "examples", "nbytes", "process"])

_FEATURIZER = None  # The worker process's Featurizer, set by init_worker.


def init_worker(opts):
  """Pool initializer: builds this process's Featurizer.

  Workers ignore SIGINT: a Ctrl-C reaches the whole process group, and the parent alone stops
  the run (closing the pool ends the workers) and reports it in one line.
  """
  global _FEATURIZER
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  _FEATURIZER = Featurizer(opts)


def min_document_tokens(opts):
  """Fewest tokens a document needs to yield an instance.

  With NSP, 2: stock's shortest target sequence (segment A plus at least one more token);
  with --no_nsp, 1.
  """
  return 1 if opts.no_nsp else 2


def process_chunk(chunk):
  """Tokenizes a chunk and makes its instances for every dupe; runs in a worker.

  Returns:
    ChunkResult: serialized examples in generation order, a Counter of statistics, the
    (path, line, tokens) of documents too short for an instance, a few printable examples,
    and the worker's (pid, CPU seconds, peak RSS MB) so far.
  """
  featurizer = _FEATURIZER
  opts = featurizer.opts
  stats = collections.Counter(documents=len(chunk.documents))
  documents, short_documents = [], []
  for document in chunk.documents:
    sentences = [featurizer.sentence(line) for line in document.lines]
    sentences = [s for s in sentences if s[0]]
    stats["lines_without_tokens"] += len(document.lines) - len(sentences)
    num_tokens = sum(len(s[0]) for s in sentences)
    stats["split_documents"] += document.split
    stats["longest_document_tokens"] = max(stats["longest_document_tokens"], num_tokens)
    if num_tokens < min_document_tokens(opts):
      short_documents.append((document.path, document.line, num_tokens))
      continue
    stats["single_sentence_documents"] += len(sentences) == 1
    documents.append(sentences)
  stats["short_documents"] = len(short_documents)
  records, examples = [], []
  for dupe in range(opts.dupe_factor):
    rng = np.random.default_rng([opts.random_seed, chunk.index, dupe])
    if opts.no_nsp:
      instances = packed_instances(documents, featurizer) if documents else []
    else:
      instances = []
      for index in range(len(documents)):
        instances.extend(nsp_instances(documents, index, rng, opts, featurizer, stats))
    for instance in instances:
      features, masked = instance_features(instance, rng, featurizer, stats)
      records.append(serialize_example(features))
      if chunk.index == 0 and len(examples) < _NUM_LOGGED_EXAMPLES:
        examples.append(describe_instance(instance, masked, featurizer))
  stats["instances"] = len(records)
  return ChunkResult(chunk.index, records, stats, short_documents, examples, chunk.nbytes,
                     _process_usage())


def _process_usage():
  """(pid, CPU seconds, peak RSS in MB) of this process, so far."""
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return os.getpid(), usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0


def process_chunks(chunks, opts, featurizer):
  """Yields ChunkResults in chunk order, from opts.num_workers processes.

  With one worker, chunks are processed here with `featurizer`. Otherwise at most
  _IN_FLIGHT_PER_WORKER chunks per worker are read ahead, so memory stays bounded, and workers
  are forked from a clean forkserver process rather than from this one, because the calling
  process may have imported TensorFlow (tests, the trainer), which is not fork-safe. (So, as
  for any multiprocessing code, a script calling this must guard its entry point with
  `if __name__ == "__main__":`.)

  Args:
    chunks: iterable of Chunk.
    opts: Options.
    featurizer: this process's Featurizer.
  """
  global _FEATURIZER
  if opts.num_workers == 1:
    _FEATURIZER = featurizer
    for chunk in chunks:
      yield process_chunk(chunk)
    return
  context = multiprocessing.get_context("forkserver")
  with context.Pool(opts.num_workers, init_worker, (opts,)) as pool:
    pending = collections.deque()
    for chunk in chunks:
      pending.append(pool.apply_async(process_chunk, (chunk,)))
      if len(pending) >= _IN_FLIGHT_PER_WORKER * opts.num_workers:
        yield pending.popleft().get()
    while pending:
      yield pending.popleft().get()


# ---------------------------------------------------------------------------------------------
# Writing (in the parent).


class Crc32c(object):
  """CRC-32C (Castagnoli), as TFRecord framing needs, in numpy; no TensorFlow needed.

  CRC is linear over GF(2), so a block's CRC register is the XOR of per-byte contributions
  _by_distance[d][byte] (the register after that byte followed by d zero bytes), and the
  incoming register's effect is looked up the same way. That turns the byte loop into one
  numpy gather + XOR-reduce per block of up to _BLOCK bytes.
  """

  _POLY = 0x82F63B78  # Reflected Castagnoli polynomial.
  _BLOCK = 4096

  def __init__(self):
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
      table = np.where(table & 1, (table >> 1) ^ np.uint32(self._POLY), table >> 1)
    self._table = table.astype(np.uint32).tolist()
    self._by_distance = np.empty([self._BLOCK, 256], dtype=np.uint32)
    self._by_distance[0] = table
    for d in range(1, self._BLOCK):
      previous = self._by_distance[d - 1]
      self._by_distance[d] = table[previous & 0xFF] ^ (previous >> 8)
    self._distances = np.arange(self._BLOCK - 1, -1, -1)

  def __call__(self, data):
    """The CRC-32C of bytes `data`, as an int."""
    register = 0xFFFFFFFF
    view = np.frombuffer(data, dtype=np.uint8)
    for start in range(0, len(view), self._BLOCK):
      block = view[start:start + self._BLOCK]
      size = len(block)
      if size < 4:  # Too short for the register lookup below; a few plain steps instead.
        for byte in block.tolist():
          register = self._table[(register ^ byte) & 0xFF] ^ (register >> 8)
        break
      table = self._by_distance
      contribution = np.bitwise_xor.reduce(table[self._distances[-size:], block])
      carried = (table[size - 1, register & 0xFF] ^ table[size - 2, (register >> 8) & 0xFF] ^
                 table[size - 3, (register >> 16) & 0xFF] ^ table[size - 4, register >> 24])
      register = int(contribution ^ carried)
    return register ^ 0xFFFFFFFF

  def masked(self, data):
    """TFRecord's masked CRC of `data`."""
    crc = self(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class TFRecordFile(object):
  """Writes the TFRecord format (length, masked CRC, data, masked CRC) without TensorFlow.

  TensorFlow's import takes seconds and hundreds of MB, for what is a simple framing; the
  tests read these files back with TensorFlow, which checks every CRC.
  """

  def __init__(self, path, crc32c):
    self.path = path
    self._file = open(atomic_files.temporary_path(path), "wb")
    self._crc32c = crc32c

  def write(self, record):
    header = struct.pack("<Q", len(record))
    try:
      self._file.write(b"".join((header, struct.pack("<I", self._crc32c.masked(header)), record,
                                 struct.pack("<I", self._crc32c.masked(record)))))
    except OSError as e:  # e.g. disk full: name the file (a write error names none).
      raise OSError(e.errno, e.strerror, self.path)

  def flush(self):
    self._file.flush()

  def close(self, keep=True):
    """Closes the file (once); renames it into place if `keep`, else removes it."""
    if self._file.closed:
      return
    if keep:
      self._file.close()
      os.replace(self._file.name, self.path)
      return
    try:
      self._file.close()
    except OSError:  # e.g. the disk is still full; the file goes anyway.
      pass
    atomic_files.remove_quietly(self._file.name)


class RecordWriter(object):
  """Shuffles serialized examples within a bounded window; writes them round-robin to files."""

  def __init__(self, output_files, shuffle_window, seed):
    crc32c = Crc32c()
    self._writers = [TFRecordFile(path, crc32c) for path in output_files]
    self.counts = [0] * len(output_files)
    self._window = shuffle_window
    self._buffer = []
    self._rng = random.Random(seed)
    self._next_writer = 0

  def add(self, record):
    """Queues a record; once the window is full, writes a random queued one."""
    if len(self._buffer) < self._window:
      self._buffer.append(record)
      return
    index = self._rng.randrange(self._window)
    self._write(self._buffer[index])
    self._buffer[index] = record

  def close(self):
    """Writes what is left in the window, shuffled, then puts every file in place."""
    self._rng.shuffle(self._buffer)
    for record in self._buffer:
      self._write(record)
    self._buffer = []
    for writer in self._writers:
      writer.flush()
    for writer in self._writers:
      writer.close(keep=True)

  def discard(self):
    """Removes the files being written (after a failure); earlier outputs stay as they were."""
    for writer in self._writers:
      writer.close(keep=False)

  def _write(self, record):
    self._writers[self._next_writer].write(record)
    self.counts[self._next_writer] += 1
    self._next_writer = (self._next_writer + 1) % len(self._writers)


class Progress(object):
  """Totals over chunk results, progress lines and the final summary."""

  def __init__(self, total_bytes, log_every_docs):
    self.stats = collections.Counter()
    self.short_documents = []
    self.processes = {}  # pid -> (CPU seconds, peak RSS MB) of the processes making chunks.
    self._total_bytes = max(total_bytes, 1)
    self._log_every = log_every_docs
    self._bytes_done = 0
    self._next_log = log_every_docs
    self._start = time.time()

  def add(self, result):
    """Accumulates a ChunkResult; logs progress every log_every_docs documents."""
    longest = max(self.stats["longest_document_tokens"],
                  result.stats["longest_document_tokens"])
    self.stats.update(result.stats)
    self.stats["longest_document_tokens"] = longest
    self._bytes_done += result.nbytes
    pid, cpu_seconds, peak_rss_mb = result.process
    self.processes[pid] = (cpu_seconds, peak_rss_mb)
    for path, line, num_tokens in result.short_documents:
      if len(self.short_documents) < _NUM_LOGGED_SHORT_DOCUMENTS:
        self.short_documents.append((path, line, num_tokens))
    if self.stats["documents"] >= self._next_log:
      self._next_log += self._log_every * (
          1 + (self.stats["documents"] - self._next_log) // self._log_every)
      self._log_progress()

  @property
  def elapsed(self):
    return max(time.time() - self._start, 1e-9)

  def _log_progress(self):
    fraction = min(self._bytes_done / self._total_bytes, 1.0)
    eta = self.elapsed * (1.0 - fraction) / max(fraction, 1e-9)
    logging.info("%d documents (%.1f documents/sec), %d instances, %.1f%% of input read, "
                 "ETA %s", self.stats["documents"], self.stats["documents"] / self.elapsed,
                 self.stats["instances"], 100.0 * fraction, formatting.format_seconds(eta))



# ---------------------------------------------------------------------------------------------
# Driver.


def run(opts):
  """Creates the pretraining records described by `opts`.

  Returns:
    dict of totals: documents, instances, tokens, masked_share (None with --dynamic_masking),
    short_documents, per_file (list of (path, count)), and the other statistics.

  Raises:
    InputError: bad flags or input. The output files are written under temporary names and
      renamed into place at the end, so after any failure an output file is either absent or
      the one an earlier run left.
  """
  check_options(opts)
  input_files = expand_input_files(opts.input_file)
  output_files = [p.strip() for p in opts.output_file.split(",")]
  for path in output_files:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
      raise InputError("--output_file=%s: directory %s does not exist" % (path, directory))
    if os.path.isdir(path):
      raise InputError("--output_file=%s: is a directory; expected a file name" % path)
    atomic_files.remove_stale_temporaries(directory)
  featurizer = Featurizer(opts)  # Checks vocabulary, special tokens and segmenter up front.
  _log_settings(opts, input_files, output_files, featurizer)
  return _generate(opts, input_files, output_files, featurizer)


def _generate(opts, input_files, output_files, featurizer):
  """Streams chunks through the workers into the writer; returns run()'s totals."""
  progress = Progress(sum(os.path.getsize(p) for p in input_files), opts.log_every_docs)
  writer = RecordWriter(output_files, opts.shuffle_window, opts.random_seed)
  results = process_chunks(make_chunks(read_documents(input_files)), opts, featurizer)
  try:
    for result in results:
      for example in result.examples:
        logging.info("*** Example ***\n%s", example)
      for record in result.records:
        writer.add(record)
      progress.add(result)
    if progress.stats["instances"] == 0:
      raise InputError(_no_instance_message(opts, input_files, progress.stats))
    writer.close()
  except BaseException:
    writer.discard()
    raise
  finally:
    results.close()
  return _summarize(opts, output_files, writer.counts, progress)


def _no_instance_message(opts, input_files, stats):
  """Why nothing was made, naming the files and what an instance needs."""
  names = ", ".join(input_files[:3])
  if len(input_files) > 3:
    names += " and %d more" % (len(input_files) - 3)
  need = min_document_tokens(opts)
  return ("%s: no document is long enough to make an instance: %d document(s), the longest "
          "has %d token(s), an instance needs a document of at least %d token(s)%s" %
          (names, stats["documents"], stats["longest_document_tokens"], need,
           "" if opts.no_nsp else " (or use --no_nsp)"))


def _summarize(opts, output_files, counts, progress):
  """Logs the summary and returns it as a dict."""
  stats = progress.stats
  masked_share = None
  if not opts.dynamic_masking:
    masked_share = stats["masked_tokens"] / max(stats["maskable_tokens"], 1)
  summary = dict(stats)
  summary.update(masked_share=masked_share, per_file=list(zip(output_files, counts)),
                 seconds=progress.elapsed)
  logging.info("Done in %s: %d documents (%.1f documents/sec), %d instances, %d tokens%s",
               formatting.format_seconds(progress.elapsed), stats["documents"],
               stats["documents"] / progress.elapsed, stats["instances"], stats["tokens"],
               "" if masked_share is None else
               ", masked share %.2f%% of non-special tokens" % (100 * masked_share))
  for path, count in summary["per_file"]:
    logging.info("  %s: %d instances", path, count)
  _log_resources(opts, progress, summary)
  for path, line, num_tokens in progress.short_documents:
    logging.warning("%s:%d: document yields no instance (%d tokens, need %d)", path, line,
                    num_tokens, min_document_tokens(opts))
  if stats["short_documents"]:
    logging.warning("%d document(s) yielded no instance (too short); the first %d are listed "
                    "above", stats["short_documents"], len(progress.short_documents))
  _log_caveats(opts, stats)
  return summary


def _log_resources(opts, progress, summary):
  """Logs (and records in `summary`) peak memory and, with workers, their CPU time.

  Worker processes are children of the forkserver, so the caller's resource.getrusage does not
  see them; they report their own usage with each chunk instead.
  """
  summary["peak_rss_mb"] = _process_usage()[2]
  if opts.num_workers == 1:
    logging.info("peak RSS %.0f MB", summary["peak_rss_mb"])
    return
  usages = list(progress.processes.values()) or [(0.0, 0.0)]
  summary["worker_cpu_seconds"] = sum(cpu for cpu, _ in usages)
  summary["worker_peak_rss_mb"] = max(rss for _, rss in usages)
  logging.info("peak RSS %.0f MB in this process, at most %.0f MB in each of %d workers; "
               "workers used %.1f CPU seconds", summary["peak_rss_mb"],
               summary["worker_peak_rss_mb"], len(progress.processes),
               summary["worker_cpu_seconds"])


def _log_caveats(opts, stats):
  """Warnings about input shapes that quietly hurt the data."""
  if stats["lines_without_tokens"]:
    logging.warning("%d line(s) produced no tokens (e.g. only control characters) and were "
                    "skipped", stats["lines_without_tokens"])
  if stats["split_documents"]:
    logging.warning("%d document part(s) came from documents longer than %d bytes, which were "
                    "split at a line boundary", stats["split_documents"], _MAX_DOCUMENT_BYTES)
  if stats["same_document_random_next"]:
    logging.warning("%d random-next segment(s) came from the same document because its chunk "
                    "held no other document (is the corpus missing blank lines between "
                    "documents?)", stats["same_document_random_next"])
  if not opts.no_nsp and stats["single_sentence_documents"]:
    logging.warning("%d document(s) have a single line, so all their instances are random-next "
                    "(label 1); consider --no_nsp for such corpora",
                    stats["single_sentence_documents"])


def _log_settings(opts, input_files, output_files, featurizer):
  """Logs what will be read and written, and how."""
  logging.info("*** Reading from %d input file(s) ***", len(input_files))
  for path in input_files:
    logging.info("  %s", path)
  logging.info("*** Writing to output files ***")
  for path in output_files:
    logging.info("  %s", path)
  logging.info("records: %s%s; masking: %s; segmenter: %s; vocabulary: %d tokens; "
               "workers: %d", "dynamic (unmasked + word_starts)" if opts.dynamic_masking else
               "static", ", no NSP" if opts.no_nsp else "", _describe_masking(featurizer),
               opts.chinese_word_segmenter, len(featurizer.tokenizer.vocab), opts.num_workers)


def _describe_masking(featurizer):
  """E.g. "ngram" or "ngram, similar words (4,210 words from sim.tsv)"."""
  config = featurizer.masking
  if config.replacement != "similar":
    return config.strategy
  return "%s, similar words (%d words from %s)" % (config.strategy, len(config.similar_words),
                                                    config.similar_words.source)


def main(_):
  logging.set_verbosity(logging.INFO)
  run(options_from_flags())


if __name__ == "__main__":
  define_flags()
  run_main(main)
