# coding=utf-8
"""Builds --similar_words_file for MacBERT-style masking from your own corpus: neighbours from
word2vec trained on the corpus, or from a checkpoint's word-piece embeddings.

  pip install gensim    # optional dependency, only for word2vec
  python build_similar_words.py --input_file='corpus/*.txt' --output_file=similar_words.tsv \
    --chinese_word_segmenter=jieba --vocab_file=$BERT_DIR/vocab.txt
  # A corpus of a few million words or less: neighbours from the checkpoint you will continue
  python build_similar_words.py --input_file=task_text.txt --output_file=similar_words.tsv \
    --vocab_file=$BERT_DIR/vocab.txt --init_checkpoint=$BERT_DIR/bert_model.ckpt

The corpus is split into words the way create_pretraining_data.py's masking splits it
(--chinese_word_segmenter: jieba words, your own spaces, or single characters; English words as
BERT's basic tokenizer finds them), a word2vec model (gensim) is trained on it, and each word
with at least --min_count occurrences gets its --top_k nearest words by cosine similarity.
Output lines: `word<TAB>neighbour neighbour ...`, best first, most frequent words first.
Nothing is downloaded.

word2vec needs millions of words: on a task's own text (MRPC's 145k words) its neighbours of
"was" were "added michael justice lawyer" and of "at" numbers. With --init_checkpoint, the words
are the same (the corpus words seen --min_count times) but a word's vector is the mean of its
pieces' rows of the checkpoint's bert/embeddings/word_embeddings, learnt on the checkpoint's own
large corpus: on MRPC's words with MiniLM's table, "said" -> "says say saying told stated",
"fell" -> "falling fallen dropped slipped". gensim is not needed then.

With --vocab_file, only words whose word pieces are all in the vocabulary are kept, and a
neighbour must have as many pieces as its word (what the masking can use); the search for
neighbours then looks further down the ranking (up to 5 x top_k) to fill the list.
"""

import collections
import functools
import logging as python_logging
import re
import time

from absl import logging

from core import atomic_files
from core.errors import InputError
from engine import cli
from pretraining import corpus
import tokenization

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
    ("string", "init_checkpoint", None,
     "Optional: a BERT checkpoint (Google's layout, or converted); neighbours by cosine of its "
     "word-piece embeddings (a word: the mean of its pieces' rows) instead of word2vec on the "
     "corpus. Better for corpora under a few million words. Needs --vocab_file of that model."),
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
  """callable(line) -> list of words, split as the masking splits them (corpus.word_splitter),
  punctuation left out."""
  split = corpus.word_splitter(segmenter_name, do_lower_case)
  return lambda line: [w for w in split(line) if _WORD_RE.search(w)]


def read_sentences(input_files, split):
  """All lines of the corpus as lists of words (blank lines skipped)."""
  sentences = []
  for path in input_files:
    for _, line in cli.text_lines(path):
      words = split(line)
      if words:
        sentences.append(words)
  return sentences


def piece_ids(vocab_file, do_lower_case):
  """callable(word) -> tuple of word-piece ids, or None if a piece is [UNK]; None without vocab."""
  if not vocab_file:
    return None
  cli.require_file(vocab_file, "vocab_file")
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
  unk = tokenizer.vocab.get("[UNK]")

  def ids_of(word):
    ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word))
    return tuple(ids) if ids and unk not in ids else None

  ids_of.vocab_size = len(tokenizer.vocab)
  return ids_of


def neighbour_lines(model, top_k, ids_of=None):
  """Yields `word<TAB>neighbours` for every word of the model's vocabulary that has some.

  Args:
    model: a trained gensim Word2Vec.
    top_k: neighbours per word.
    ids_of: None, or callable(word) -> piece ids or None (see piece_ids).
  """
  keys = model.wv.index_to_key
  pieces = {w: _piece_count(ids_of(w)) for w in keys} if ids_of else None
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


def _piece_count(ids):
  return None if ids is None else len(ids)


def checkpoint_embeddings(init_checkpoint, vocab_size):
  """[vocab_size, hidden] float32 array: the checkpoint's bert/embeddings/word_embeddings.

  Raises:
    InputError: no such checkpoint, no such variable, or a table of another vocabulary size.
  """
  # TensorFlow only for this path (word2vec needs none), imported quietly as by every script.
  from engine import tf_env  # pylint: disable=g-import-not-at-top,unused-import
  from engine import checkpoints  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  name = "bert/embeddings/word_embeddings"
  checkpoints.check_init_checkpoint(init_checkpoint)  # The run scripts' check and messages.
  reader = tf.train.load_checkpoint(init_checkpoint)
  if not reader.has_tensor(name):
    raise InputError("--init_checkpoint=%s has no %s: expected a BERT checkpoint with stock "
                     "names" % (init_checkpoint, name))
  table = np.asarray(reader.get_tensor(name), np.float32)
  if table.shape[0] != vocab_size:
    raise InputError("--init_checkpoint=%s has %d word-piece rows but --vocab_file has %d "
                     "entries: expected the vocabulary of that model" % (
                         init_checkpoint, table.shape[0], vocab_size))
  return table


def embedding_neighbours(words, ids_of, table, top_k, block=256):
  """dict word -> its top_k neighbours (best first) among `words` of the same piece count.

  Args:
    words: list of distinct words, each with pieces (ids_of(word) is not None).
    ids_of: callable(word) -> tuple of piece ids.
    table: [vocab_size, hidden] word-piece embeddings; a word's vector is the mean of its
      pieces' rows, and neighbours are ranked by cosine similarity.
    top_k: neighbours per word.
    block: rows of the [block, group] similarity matrix computed at once.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  groups = {}
  for word in words:
    groups.setdefault(len(ids_of(word)), []).append(word)
  near = {}
  for group in groups.values():
    k = min(top_k, len(group) - 1)
    if k < 1:
      continue
    vectors = np.stack([table[list(ids_of(w))].mean(axis=0) for w in group])  # [group, hidden]
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    for start in range(0, len(group), block):
      sims = vectors[start:start + block] @ vectors.T  # [rows, group]
      rows = np.arange(sims.shape[0])
      sims[rows, start + rows] = -np.inf  # Never the word itself.
      best = np.argpartition(-sims, k - 1, axis=1)[:, :k]  # [rows, k], unordered
      order = np.argsort(-np.take_along_axis(sims, best, axis=1), axis=1, kind="stable")
      for row, columns in enumerate(np.take_along_axis(best, order, axis=1)):
        near[group[start + row]] = [group[c] for c in columns]
  return near


def _too_little_text(opts):
  return InputError("--input_file=%s: fewer than 2 words occur --min_count=%d times; lower "
                    "--min_count or give more text" % (opts["input_file"], opts["min_count"]))


def word2vec_lines(word2vec, sentences, opts, ids_of):
  """The output lines from word2vec trained on `sentences` (lists of words)."""
  model = word2vec(sentences, vector_size=opts["vector_size"], window=opts["window"],
                   min_count=opts["min_count"], workers=opts["workers"],
                   seed=opts["random_seed"], epochs=opts["epochs"])
  if len(model.wv.index_to_key) < 2:
    raise _too_little_text(opts)
  logging.info("word2vec: %d words seen at least %d times", len(model.wv.index_to_key),
               opts["min_count"])
  return neighbour_lines(model, opts["top_k"], ids_of)


def checkpoint_lines(table, sentences, opts, ids_of):
  """The output lines from the checkpoint's embeddings `table` for the corpus words."""
  counts = collections.Counter(word for sentence in sentences for word in sentence)
  ids = {}
  for word, count in counts.most_common():
    pieces = ids_of(word) if count >= opts["min_count"] else None
    if pieces is not None:
      ids[word] = pieces
  if len(ids) < 2:
    raise _too_little_text(opts)
  logging.info("%d words seen at least %d times with no [UNK] piece; neighbours from the "
               "word-piece embeddings of %s", len(ids), opts["min_count"], opts["init_checkpoint"])
  near = embedding_neighbours(list(ids), ids.__getitem__, table, opts["top_k"])
  return ("%s\t%s" % (word, " ".join(near[word])) for word in ids if near.get(word))


def run(**options):
  """Builds the similar-words file; `options` are the flags' names and values (DEFAULTS).

  Raises:
    InputError: a missing flag, a bad value, no gensim (word2vec only), no such checkpoint, no
      input, or too little text.
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
  corpus.check_segmenter(opts["chinese_word_segmenter"])
  cli.require_output_file(opts["output_file"], "output_file")
  if opts["init_checkpoint"] and not opts["vocab_file"]:
    raise InputError("--init_checkpoint needs --vocab_file: the vocabulary of that checkpoint")
  input_files = cli.expand_files(opts["input_file"], "input_file")
  ids_of = piece_ids(opts["vocab_file"], opts["do_lower_case"])
  if opts["init_checkpoint"]:
    table = checkpoint_embeddings(opts["init_checkpoint"], ids_of.vocab_size)
    make_lines = functools.partial(checkpoint_lines, table)
  else:
    make_lines = functools.partial(word2vec_lines, import_gensim())

  start = time.time()
  sentences = read_sentences(
      input_files, word_splitter(opts["chinese_word_segmenter"], opts["do_lower_case"]))
  logging.info("%d sentences, %d words from %d file(s) in %.1f s", len(sentences),
               sum(len(s) for s in sentences), len(input_files), time.time() - start)
  lines = make_lines(sentences, opts, ids_of)

  def write(tmp_path):
    written = 0
    with open(tmp_path, "w", encoding="utf-8") as writer:
      for line in lines:
        writer.write(line + "\n")
        written += 1
    logging.info("Wrote %d words with neighbours to %s (%.1f s)", written, opts["output_file"],
                 time.time() - start)

  with cli.writing("output_file"):
    atomic_files.write_atomically(opts["output_file"], write)


if __name__ == "__main__":
  cli.run_tool(run, _FLAG_SPECS)
