# coding=utf-8
"""Similar words for MacBERT-style masking ("MLM as correction", --masking_replacement=similar).

A selected word that would become [MASK] becomes a similar word instead: one with the same
number of word pieces, so the sequence keeps its length and every piece has one label. The
model then learns to correct a plausible wrong word, and [MASK], which never occurs in
fine-tuning, is not seen in pretraining.

File format (--similar_words_file), utf-8, one word a line, neighbours best first:

  word<TAB>neighbour neighbour ...

build_similar_words.py writes such a file from your own corpus with word2vec. Words and
neighbours are tokenized with the model's tokenizer; a neighbour with another piece count than
its word, with an [UNK] piece, or equal to the word is dropped.

This module does not import TensorFlow (create_pretraining_data.py runs without it).
"""

import numpy as np

from core.errors import InputError
from engine import cli

# How many times a random replacement is redrawn when it equals the original word.
_REDRAWS = 16


class SimilarWords(object):
  """Word -> similar words, at the level of token ids.

  Attributes:
    neighbours: dict tuple of ids -> list of tuples of ids (same length, never the word).
    words_by_length: dict length -> int64 array [count, length]: every known word with that
      many pieces (the fallback "random word").
    source: the file it came from, for messages.
  """

  def __init__(self, neighbours, source="similar words"):
    self.neighbours = {word: list(near) for word, near in neighbours.items()}
    self.source = source
    by_length = {}
    for word, near in self.neighbours.items():
      for item in [word] + self.neighbours[word]:
        by_length.setdefault(len(item), set()).add(item)
    self.words_by_length = {n: np.array(sorted(items), dtype=np.int64).reshape([-1, n])
                            for n, items in by_length.items()}

  def __len__(self):
    return len(self.neighbours)

  def replace(self, word_ids, rng, replacement_ids):
    """A word to put in place of `word_ids`: a similar one, else a random one.

    Args:
      word_ids: int array [n], the pieces of one word.
      rng: numpy.random.Generator.
      replacement_ids: int64 array of ids a random piece may be drawn from (no special ids).

    Returns:
      int64 array [n], never equal to `word_ids`: a neighbour drawn uniformly from the word's
      list; without one, a random known word of n pieces; without one (or when the only one is
      the word itself), n random pieces.
    """
    word = tuple(int(i) for i in word_ids)
    near = self.neighbours.get(word)
    if near:
      return np.array(near[rng.integers(len(near))], dtype=np.int64)
    n = len(word)
    pool = self.words_by_length.get(n)
    if pool is not None:
      for _ in range(_REDRAWS):
        candidate = pool[rng.integers(len(pool))]
        if tuple(candidate.tolist()) != word:
          return candidate.copy()
    for _ in range(_REDRAWS):
      candidate = replacement_ids[rng.integers(len(replacement_ids), size=n)]
      if tuple(candidate.tolist()) != word:
        return candidate
    # A vocabulary of one usable token cannot avoid the original; never reached in practice.
    raise InputError("%s: cannot draw a replacement different from %s" % (self.source, word))


def load(path, tokenizer):
  """Reads a similar-words file and maps it to token ids with `tokenizer`.

  Args:
    path: file of `word<TAB>neighbour neighbour ...` lines (blank lines skipped).
    tokenizer: tokenization.FullTokenizer of the model.

  Returns:
    SimilarWords.

  Raises:
    InputError: missing file, bad utf-8, a line without a tab or without a word (naming the file
      and line), or a file from which no usable pair remains.
  """
  unk = tokenizer.vocab.get("[UNK]")
  cache = {}

  def ids_of(text):
    if text not in cache:
      ids = tuple(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)))
      cache[text] = ids if ids and unk not in ids else None
    return cache[text]

  neighbours = {}
  for line_number, line in cli.text_lines(path):
    if not line.strip():
      continue
    word, tab, rest = line.partition("\t")
    if not tab or not word.strip():
      raise InputError("%s:%d: expected word<TAB>neighbour neighbour ... (got %r)" %
                       (path, line_number, line[:80]))
    word_ids = ids_of(word.strip())
    if word_ids is None:
      continue
    near = neighbours.setdefault(word_ids, [])
    for neighbour in rest.split():
      near_ids = ids_of(neighbour)
      if near_ids and len(near_ids) == len(word_ids) and near_ids != word_ids \
          and near_ids not in near:
        near.append(near_ids)
  neighbours = {word: near for word, near in neighbours.items() if near}
  if not neighbours:
    raise InputError("%s: no usable pair (a word and a neighbour of the same number of word "
                     "pieces, both in the vocabulary)" % path)
  return SimilarWords(neighbours, source=path)
