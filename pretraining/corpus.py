# coding=utf-8
"""Raw text to token ids: documents, chunks and the Featurizer (create_pretraining_data.py).

Input text is utf-8, one sentence (or passage) per line, blank lines between documents. The
corpus is streamed: `read_documents` yields documents and `make_chunks` groups them into chunks
of at most CHUNK_DOCUMENTS documents or CHUNK_BYTES of text, the unit of parallel work and of
the "random next" document pool. A `Featurizer` turns a document's lines into WordPiece (or
SentencePiece) ids and, for whole-word masking, the start of every word (Chinese words from a
segmenter: none, jieba or presegmented text).
"""

import collections
import logging as python_logging
import os
import re
import unicodedata

from core.errors import InputError
from engine.cli import decode_line
from pretraining import masking
from pretraining import similar_words
from pretraining import word_freq
import tokenization


# A chunk (the unit of parallel work and of the "random next" document pool) closes after this
# many documents or bytes of text, whichever comes first. Fixed, so output does not depend on
# the number of workers. Small enough to balance work across workers even on small corpora,
# large enough that a random other document is rarely a close neighbour.
CHUNK_DOCUMENTS = 64


CHUNK_BYTES = 128 * 1024


# Documents longer than this are split, so one huge "document" (e.g. a file without blank
# lines) cannot exhaust memory.
MAX_DOCUMENT_BYTES = 1024 * 1024


# How far ahead (in CJK characters) token/segmenter alignment looks to resynchronise, e.g.
# past characters that became [UNK].
_ALIGN_WINDOW = 64


_CJK_CLASS = (u"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df"
              u"\U0002a700-\U0002ceaf\U0002f800-\U0002fa1f")


_CJK_CHAR_RE = re.compile(u"[%s]" % _CJK_CLASS)


_CJK_RUN_RE = re.compile(u"[%s]+" % _CJK_CLASS)


_CJK_GAP_RE = re.compile(u"(?<=[%s])\\s+(?=[%s])" % (_CJK_CLASS, _CJK_CLASS))




SEGMENTER_CHOICES = ("none", "jieba", "presegmented")


def load_tokenizer(opts):
  """The FullTokenizer for --vocab_file / --spm_model_file (InputError if unusable)."""
  if opts.spm_model_file:
    return tokenization.FullTokenizer(None, opts.do_lower_case, opts.spm_model_file)
  if not os.path.isfile(opts.vocab_file):
    raise InputError("--vocab_file=%s: no such file" % opts.vocab_file)
  return tokenization.FullTokenizer(opts.vocab_file, opts.do_lower_case)


def has_cjk(text):
  """Whether `text` holds a CJK character (such words are the segmenter's to split)."""
  return bool(_CJK_CHAR_RE.search(text))


def check_segmenter(name):
  """Raises InputError unless `name` is one of SEGMENTER_CHOICES."""
  if name not in SEGMENTER_CHOICES:
    raise InputError("--chinese_word_segmenter=%s: expected one of %s" %
                     (name, "|".join(SEGMENTER_CHOICES)))


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


def word_splitter(segmenter_name, do_lower_case):
  """callable(line) -> list of words, split as the masking splits them: the segmenter's CJK
  words (each CJK character with "none"), and elsewhere BERT's basic tokenizer's words and
  punctuation marks."""
  basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
  segment = make_segmenter(segmenter_name)

  def split(line):
    words = []
    for piece in (segment(line) if segment else [line]):
      piece = piece.strip()
      if not piece:
        continue
      if segment and has_cjk(piece):
        words.append(piece.lower() if do_lower_case else piece)
      else:
        words.extend(basic.tokenize(piece))
    return words

  return split


Document = collections.namedtuple("Document", ["path", "line", "lines", "nbytes", "split"])


Chunk = collections.namedtuple("Chunk", ["index", "documents", "nbytes"])


def first_lines(input_files):
  """The input's first lines: its first documents' lines, at least
  word_freq.OVERLAP_SAMPLE_LINES of them when the input has that many."""
  lines = []
  for document in read_documents(input_files):
    lines += document.lines
    if len(lines) >= word_freq.OVERLAP_SAMPLE_LINES:
      break
  return lines


def read_documents(input_files):
  """Yields the Documents of `input_files`, streaming.

  A document is a run of non-blank lines (stripped). `line` is the first line's number, `nbytes`
  the bytes consumed since the previous document (for progress), `split` whether it is the
  continuation of a document cut at MAX_DOCUMENT_BYTES.

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
        if size > MAX_DOCUMENT_BYTES:
          yield Document(path, first, lines, nbytes, split)
          lines, nbytes, size, split = [], 0, 0, True
    if lines:
      yield Document(path, first, lines, nbytes, split)


def make_chunks(documents):
  """Groups documents into Chunks of <= CHUNK_DOCUMENTS documents / ~CHUNK_BYTES bytes."""
  batch, nbytes, index = [], 0, 0
  for document in documents:
    batch.append(document)
    nbytes += document.nbytes
    if len(batch) >= CHUNK_DOCUMENTS or nbytes >= CHUNK_BYTES:
      yield Chunk(index, batch, nbytes)
      batch, nbytes, index = [], 0, index + 1
  if batch:
    yield Chunk(index, batch, nbytes)


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
    self.unk_id = self.tokenizer.vocab.get("[UNK]", self.tokenizer.vocab.get("<unk>"))
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
      starts = [1 if t.startswith(tokenization.SPM_WORD_START) or _CJK_CHAR_RE.match(t) else 0
                for t in tokens]
    else:
      starts = [0 if t.startswith("##") else 1 for t in tokens]
    if words is None:
      return starts
    chars, continues = _cjk_continuations(words)
    position = 0
    for i, token in enumerate(tokens):
      piece = token.lstrip(tokenization.SPM_WORD_START) if self._spm else token
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


def masking_config(opts, tokenizer):
  """The MaskingConfig for `opts`; InputError if the vocabulary lacks a special token or the
  similar-words file or the general word-frequency list is unusable."""
  source = "--spm_model_file=%s" % opts.spm_model_file
  if not opts.spm_model_file:
    source = "--vocab_file=%s" % opts.vocab_file
  similar = None
  if opts.masking_replacement == "similar":
    similar = similar_words.load(opts.similar_words_file, tokenizer)
  weights = None
  if opts.strategy == "domain":
    if not opts.general_word_freq:  # The entry point chooses it: the text decides.
      raise ValueError("masking_config: --masking=domain needs opts.general_word_freq resolved "
                       "first (create_pretraining_data.default_general_word_list)")
    weights = word_freq.load(opts.general_word_freq, tokenizer, opts.domain_temperature,
                             opts.domain_floor)
  return masking.MaskingConfig.from_vocab(
      tokenizer.vocab, source=source, strategy=opts.strategy,
      masked_lm_prob=opts.masked_lm_prob, max_predictions_per_seq=opts.max_predictions_per_seq,
      max_ngram=opts.max_ngram, replacement=opts.masking_replacement, similar_words=similar,
      word_weights=weights)
