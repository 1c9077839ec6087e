# coding=utf-8
"""Builds --similar_words_file for MacBERT-style masking from your own corpus, with word2vec.

  pip install gensim    # optional dependency, only for this tool
  python build_similar_words.py --input_file='corpus/*.txt' --output_file=similar_words.tsv \
    --chinese_word_segmenter=jieba --vocab_file=$BERT_DIR/vocab.txt

The corpus is split into words the way create_pretraining_data.py's masking splits it
(--chinese_word_segmenter: jieba words, your own spaces, or single characters; English words as
BERT's basic tokenizer finds them), a word2vec model (gensim) is trained on it, and each word
with at least --min_count occurrences gets its --top_k nearest words by cosine similarity.
Output lines: `word<TAB>neighbour neighbour ...`, best first, most frequent words first.
Nothing is downloaded.

With --vocab_file, only words whose word pieces are all in the vocabulary are kept, and a
neighbour must have as many pieces as its word (what the masking can use); the search for
neighbours then looks further down the ranking (up to 5 x top_k) to fill the list.
"""

import logging as python_logging
import os
import re
import time

from absl import flags
from absl import logging

from core import atomic_files
from core.errors import InputError
from engine import cli
from pretraining import corpus
import tokenization

FLAGS = flags.FLAGS

# (kind, name, default, help); defined only when run as a script, so that tests can import this
# module beside run scripts that define flags of the same names.
_FLAG_SPECS = (
    ("string", "input_file", None,
     "Corpus: a file, or a comma-separated list of files and glob patterns (utf-8, one "
     "sentence or passage a line, as for create_pretraining_data.py)."),
    ("string", "output_file", None, "Where to write the word<TAB>neighbours lines."),
    ("string", "chinese_word_segmenter", "jieba",
     "How Chinese text is split into words, as create_pretraining_data.py: jieba | "
     "presegmented (your spaces) | none (every character is a word)."),
    ("string", "vocab_file", None,
     "Optional: the model's vocabulary; keeps words and neighbours the masking can use (no "
     "[UNK] piece, same piece count)."),
    ("bool", "do_lower_case", True, "Lower-case the text (as the model's tokenizer)."),
    ("integer", "top_k", 10, "Neighbours per word."),
    ("integer", "min_count", 5, "Ignore words seen fewer times than this."),
    ("integer", "vector_size", 100, "word2vec vector size."),
    ("integer", "window", 5, "word2vec context window."),
    ("integer", "epochs", 5, "word2vec passes over the corpus."),
    ("integer", "workers", 1, "word2vec threads (1 gives reproducible vectors)."),
    ("integer", "random_seed", 12345, "word2vec seed."),
)
DEFAULTS = {name: default for _, name, default, _ in _FLAG_SPECS}

# A word worth a neighbour has a letter, digit or CJK character (not punctuation alone).
_WORD_RE = re.compile(r"[\w\u3400-\u9fff]", re.UNICODE)


def import_gensim():
  """gensim's Word2Vec class, or InputError with the install command."""
  try:
    from gensim.models import Word2Vec  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise InputError("build_similar_words.py needs gensim, an optional dependency: "
                     "pip install gensim")
  python_logging.getLogger("gensim").setLevel(python_logging.WARNING)  # Per-epoch chatter.
  return Word2Vec


def word_splitter(segmenter_name, do_lower_case):
  """callable(line) -> list of words, split as the masking splits them."""
  basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
  segment = corpus.make_segmenter(segmenter_name)

  def split(line):
    words = []
    # The basic tokenizer splits punctuation and English words, and each CJK character on its
    # own; a segmenter's words regroup the CJK characters.
    for piece in (segment(line) if segment else [line]):
      piece = piece.strip()
      if not piece:
        continue
      if segment and corpus.has_cjk(piece):
        words.append(piece.lower() if do_lower_case else piece)
      else:
        words.extend(basic.tokenize(piece))
    return [w for w in words if _WORD_RE.search(w)]

  return split


def read_sentences(input_files, split):
  """All lines of the corpus as lists of words (blank lines skipped)."""
  sentences = []
  for path in input_files:
    for _, line in cli.text_lines(path):
      words = split(line)
      if words:
        sentences.append(words)
  return sentences


def piece_counter(vocab_file, do_lower_case):
  """callable(word) -> number of word pieces, or None if a piece is [UNK]; None without vocab."""
  if not vocab_file:
    return None
  cli.require_file(vocab_file, "vocab_file")
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
  unk = tokenizer.vocab.get("[UNK]")

  def count(word):
    ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word))
    return len(ids) if ids and unk not in ids else None

  return count


def neighbour_lines(model, top_k, count_pieces=None):
  """Yields `word<TAB>neighbours` for every word of the model's vocabulary that has some.

  Args:
    model: a trained gensim Word2Vec.
    top_k: neighbours per word.
    count_pieces: None, or callable(word) -> piece count or None (see piece_counter).
  """
  keys = model.wv.index_to_key
  pieces = {w: count_pieces(w) for w in keys} if count_pieces else None
  search = top_k if pieces is None else 5 * top_k
  for word in keys:
    if pieces is not None and pieces[word] is None:
      continue
    near = []
    for other, _ in model.wv.most_similar(word, topn=min(search, len(keys) - 1)):
      if other == word or (pieces is not None and pieces[other] != pieces[word]):
        continue
      near.append(other)
      if len(near) == top_k:
        break
    if near:
      yield "%s\t%s" % (word, " ".join(near))


def run(**options):
  """Builds the similar-words file; `options` are the flags' names and values (DEFAULTS).

  Raises:
    InputError: a missing flag, a bad value, no gensim, no input, or too little text.
  """
  unknown = set(options) - set(DEFAULTS)
  if unknown:
    raise TypeError("unknown option(s): %s" % ", ".join(sorted(unknown)))
  opts = dict(DEFAULTS, **options)
  for name in ("input_file", "output_file"):
    if not opts[name]:
      raise InputError("--%s is required" % name)
  for name in ("top_k", "min_count", "vector_size", "window", "epochs", "workers"):
    cli.require_positive(opts[name], name)
  if opts["chinese_word_segmenter"] not in corpus.SEGMENTER_CHOICES:
    raise InputError("--chinese_word_segmenter=%s: expected one of %s" % (
        opts["chinese_word_segmenter"], "|".join(corpus.SEGMENTER_CHOICES)))
  cli.require_output_file(opts["output_file"], "output_file")
  word2vec = import_gensim()
  input_files = cli.expand_files(opts["input_file"], "input_file")
  count_pieces = piece_counter(opts["vocab_file"], opts["do_lower_case"])

  start = time.time()
  sentences = read_sentences(
      input_files, word_splitter(opts["chinese_word_segmenter"], opts["do_lower_case"]))
  logging.info("%d sentences, %d words from %d file(s) in %.1f s", len(sentences),
               sum(len(s) for s in sentences), len(input_files), time.time() - start)
  model = word2vec(sentences, vector_size=opts["vector_size"], window=opts["window"],
                   min_count=opts["min_count"], workers=opts["workers"],
                   seed=opts["random_seed"], epochs=opts["epochs"])
  if len(model.wv.index_to_key) < 2:
    raise InputError("--input_file=%s: fewer than 2 words occur --min_count=%d times; lower "
                     "--min_count or give more text" % (opts["input_file"], opts["min_count"]))
  logging.info("word2vec: %d words seen at least %d times (%.1f s so far)",
               len(model.wv.index_to_key), opts["min_count"], time.time() - start)

  def write(tmp_path):
    written = 0
    with open(tmp_path, "w", encoding="utf-8") as writer:
      for line in neighbour_lines(model, opts["top_k"], count_pieces):
        writer.write(line + "\n")
        written += 1
    logging.info("Wrote %d words with neighbours to %s (%.1f s)", written, opts["output_file"],
                 time.time() - start)

  with cli.writing("output_file"):
    atomic_files.write_atomically(opts["output_file"], write)


def main(_):
  logging.set_verbosity(logging.INFO)
  run(**{name: getattr(FLAGS, name) for name in DEFAULTS})


if __name__ == "__main__":
  for kind, name, default, help_text in _FLAG_SPECS:
    getattr(flags, "DEFINE_" + kind)(name, default, help_text)
  cli.run_main(main)
