# coding=utf-8
"""Masked-LM masking, shared by create_pretraining_data.py and train-time dynamic masking.

Strategies (`MaskingConfig.strategy`):

  token       Stock BERT: each maskable token is a candidate of its own.
  whole_word  All pieces of a word are masked together (stock --do_whole_word_mask). A word is
              a token plus the continuation pieces after it, as told by `word_starts`: English
              WordPiece "##" pieces, or the characters of a Chinese word found by a segmenter.
  ngram       Spans of 1..max_ngram consecutive whole words (MacBERT / SpanBERT style). The span
              length n is drawn with p(n) proportional to 1/n, so shorter spans are likelier;
              a span never splits a word.
  domain      Whole words, chosen by how much they belong to the domain text and not to general
              text (Difference-Masking): each word is drawn with a weight from its TF-ICF against
              a general word-frequency list (word_freq.WordWeights, --general_word_freq), in a
              weighted random order (Efraimidis-Spirakis keys u ** (1 / weight)), and taken
              while it fits the budget. Same budget as the others; see word_freq.py.

Shared rules:
  * Maskable tokens are all tokens except the special ids ([CLS], [SEP], [PAD]); those are
    never masked, and a word never extends across one.
  * Budget: num_to_predict = min(max_predictions_per_seq, max(1, round(masked_lm_prob * n))),
    where n counts maskable tokens. (Stock also counts [CLS]/[SEP] in n, which overshoots the
    15% a little; counting only maskable tokens makes the share what the flag says.)
  * 80/10/10: a chosen unit becomes [MASK] 80% of the time, a random token 10%, and stays
    unchanged 10%. With `token` the unit is the token (as stock). With `whole_word` and `ngram`
    the unit is the whole span, so a word is never half [MASK] and half original: a kept or
    half-kept word would leak the answer (SpanBERT does the same). Token-level shares are
    80/10/10 in expectation either way.
  * Random replacements are drawn uniformly from the vocabulary minus the special ids and
    [MASK] (stock could insert [CLS], [SEP] or [PAD] into the text).

Replacement (`MaskingConfig.replacement`, --masking_replacement):

  mask        The 80% share becomes [MASK] (stock).
  similar     MacBERT's "MLM as correction": the 80% share becomes similar words instead, word
              by word within a span, each with the same number of pieces as the original word
              (similar_words.SimilarWords.replace: a neighbour from --similar_words_file, else
              a random word; never the original). The 10% random / 10% kept shares are as
              above. [MASK] then never appears in the input, as in fine-tuning.

This module does not import TensorFlow: the trainer wraps `mask_batch` in tf.numpy_function.
"""

import numpy as np

from core.errors import InputError
import tokenization

STRATEGIES = ("token", "whole_word", "ngram", "domain")
REPLACEMENTS = ("mask", "similar")

# A chosen span is replaced by [MASK] if u < _MASK_CUTOFF, kept if u < _KEEP_CUTOFF, otherwise
# replaced by random tokens (u uniform in [0, 1)).
_MASK_CUTOFF = 0.8
_KEEP_CUTOFF = 0.9

# How many random starting words an n-gram span tries before giving up on its length n.
# Retrying the start (rather than redrawing n) keeps overlaps and the budget from biasing
# spans to be short.
_NGRAM_START_TRIES = 8


class MaskingConfig(object):
  """What to mask and how; build it with `from_vocab` unless you know the ids.

  Attributes:
    strategy: "token", "whole_word", "ngram" or "domain".
    masked_lm_prob: float in (0, 1], share of maskable tokens to predict.
    max_predictions_per_seq: int, cap on predictions per sequence (P).
    max_ngram: int, longest n-gram span in words (used by "ngram").
    mask_id: int, id of [MASK].
    special_ids: int64 array of ids never masked ([CLS], [SEP], [PAD]).
    replacement_ids: int64 array of ids a random replacement is drawn from.
    ngram_probs: float64 array [max_ngram], p(n) for n = 1..max_ngram.
    replacement: "mask" or "similar" (what the 80% share becomes).
    similar_words: similar_words.SimilarWords, or None (required by "similar").
    word_weights: word_freq.WordWeights, or None (required by "domain").
  """

  def __init__(self, vocab_size, mask_id, special_ids, strategy="token", masked_lm_prob=0.15,
               max_predictions_per_seq=20, max_ngram=3, replacement="mask", similar_words=None,
               word_weights=None):
    if strategy not in STRATEGIES:
      raise InputError("--masking=%s: expected one of %s" % (strategy, "|".join(STRATEGIES)))
    if replacement not in REPLACEMENTS:
      raise InputError("--masking_replacement=%s: expected one of %s" %
                       (replacement, "|".join(REPLACEMENTS)))
    if replacement == "similar" and similar_words is None:
      raise InputError("--masking_replacement=similar needs --similar_words_file "
                       "(word<TAB>neighbour ... lines; build_similar_words.py makes one)")
    if strategy == "domain" and word_weights is None:
      raise InputError("--masking=domain needs --general_word_freq=FILE (word<TAB>count lines "
                       "of general text; scripts/build_word_freq.py makes one)")
    if not 0.0 < masked_lm_prob <= 1.0:
      raise InputError("--masked_lm_prob=%s: expected a value in (0, 1]" % masked_lm_prob)
    if max_predictions_per_seq < 1:
      raise InputError("--max_predictions_per_seq=%d: expected an integer >= 1" %
                       max_predictions_per_seq)
    if max_ngram < 1:
      raise InputError("--max_ngram=%d: expected an integer >= 1" % max_ngram)
    self.strategy = strategy
    self.masked_lm_prob = float(masked_lm_prob)
    self.max_predictions_per_seq = int(max_predictions_per_seq)
    self.max_ngram = int(max_ngram)
    self.mask_id = int(mask_id)
    self.special_ids = np.array(sorted(set(int(i) for i in special_ids)), dtype=np.int64)
    excluded = np.append(self.special_ids, self.mask_id)
    self.replacement_ids = np.setdiff1d(np.arange(vocab_size, dtype=np.int64), excluded)
    self.ngram_probs = ngram_length_probs(self.max_ngram)
    self.replacement = replacement
    self.similar_words = similar_words
    self.word_weights = word_weights

  @classmethod
  def from_vocab(cls, vocab, source="vocabulary", **kwargs):
    """Builds a config from a token -> id dict (e.g. `FullTokenizer.vocab`).

    Args:
      vocab: dict, token -> id; must contain [CLS], [SEP] and [MASK]. [PAD] defaults to id 0.
      source: how to name the vocabulary in error messages (e.g. "--vocab_file=vocab.txt").
      **kwargs: the other `MaskingConfig` arguments (strategy, masked_lm_prob, ...).

    Returns:
      A MaskingConfig.

    Raises:
      InputError: if [CLS], [SEP] or [MASK] is missing from `vocab`.
    """
    tokenization.require_tokens(vocab, ("[CLS]", "[SEP]", "[MASK]"), source,
                                "BERT pretraining needs [CLS], [SEP] and [MASK]")
    special_ids = (vocab["[CLS]"], vocab["[SEP]"], vocab.get("[PAD]", 0))
    return cls(max(vocab.values()) + 1, vocab["[MASK]"], special_ids, **kwargs)


def ngram_length_probs(max_ngram):
  """Returns p(n) proportional to 1/n for n = 1..max_ngram, as float64 [max_ngram]."""
  weights = 1.0 / np.arange(1, max_ngram + 1, dtype=np.float64)
  return weights / weights.sum()


def num_to_predict(num_maskable, config):
  """How many tokens to mask in a sequence with `num_maskable` maskable tokens."""
  if num_maskable == 0:
    return 0
  wanted = max(1, int(round(num_maskable * config.masked_lm_prob)))
  return min(config.max_predictions_per_seq, wanted)


def word_boundaries(input_ids, word_starts, config):
  """Finds the maskable units of a sequence.

  With strategy "token" every maskable token is a unit and `word_starts` is ignored. Otherwise a
  word starts at a maskable token whose word_starts is 1, or that follows a special token (a
  continuation piece whose head was truncated away is a word of its own).

  Args:
    input_ids: int array [L].
    word_starts: int array [L] (1 = starts a word), or None for "token".
    config: MaskingConfig.

  Returns:
    (starts, ends, maskable): int64 arrays [W] holding each unit's first token and one past its
    last token, and a bool array [L] marking maskable tokens.
  """
  input_ids = np.asarray(input_ids)
  maskable = np.ones(input_ids.shape, dtype=bool)
  for special_id in config.special_ids.tolist():  # 3 compares beat np.isin on short rows.
    maskable &= input_ids != special_id
  if config.strategy == "token" or word_starts is None:
    starts = np.flatnonzero(maskable)
    return starts, starts + 1, maskable
  after_special = np.concatenate(([True], ~maskable[:-1]))
  is_start = maskable & ((np.asarray(word_starts) != 0) | after_special)
  # A word runs until the next word start or special token.
  boundaries = np.flatnonzero(is_start | ~maskable)
  next_boundary = np.append(boundaries[1:], len(input_ids))
  keep = is_start[boundaries]
  return boundaries[keep], next_boundary[keep], maskable


def choose_spans(starts, ends, budget, rng, config, input_ids=None):
  """Chooses which units to mask.

  Args:
    starts: int array [W], first token of each unit (word or token), ascending.
    ends: int array [W], one past the last token of each unit.
    budget: int, the most tokens to mask (from `num_to_predict`).
    rng: numpy.random.Generator.
    config: MaskingConfig.
    input_ids: int array [L], the sequence (needed by "domain", which weighs each word).

  Returns:
    A list of (first_token, end_token, num_words) tuples, one per chosen span, in choice order.
    Spans never overlap; each covers whole units.
  """
  if config.strategy == "ngram":
    return _choose_ngram_spans(starts, ends, budget, rng, config)
  if config.strategy == "token":
    # Every unit is one token, so stock's walk reduces to the first `budget` of a permutation.
    chosen = starts[rng.permutation(len(starts))[:budget]].tolist()
    return [(p, p + 1, 1) for p in chosen]
  if config.strategy == "domain":
    order = weighted_order(config.word_weights.unit_weights(input_ids, starts, ends), rng)
  else:
    order = rng.permutation(len(starts))
  return _take_words(starts, ends, budget, order)


def weighted_order(weights, rng):
  """A random order of len(weights) items, drawn one after another without replacement with
  chances proportional to `weights` (Efraimidis-Spirakis: sort by u ** (1 / weight), u
  uniform; computed as log(u) / weight). Equal weights give a uniform random order."""
  keys = np.log(rng.random(len(weights))) / np.maximum(weights, 1e-12)
  return np.argsort(-keys, kind="stable")


def _take_words(starts, ends, budget, order):
  """Stock selection: visit units in `order`, taking each one that still fits the budget."""
  starts = starts.tolist()
  ends = ends.tolist()
  spans = []
  count = 0
  for w in order.tolist():
    if count >= budget:
      break
    length = ends[w] - starts[w]
    if count + length > budget:
      continue
    spans.append((starts[w], ends[w], 1))
    count += length
  return spans


def _choose_ngram_spans(starts, ends, budget, rng, config):
  """Draws n ~ p(n), then a random free run of n words, until the budget is used.

  Overlaps and overshoots are avoided by retrying the start position for the same n, so the
  measured span lengths follow p(n). Near the end of the budget a span that fits nowhere is
  shortened by whole words; this makes 1-word spans slightly likelier than p(1) in short
  sequences (at 512 tokens the effect is within 1 point, at 128 tokens a few points).
  """
  num_words = len(starts)
  if num_words == 0 or budget <= 0:
    return []
  max_n = min(config.max_ngram, num_words)
  probs = config.ngram_probs[:max_n] / config.ngram_probs[:max_n].sum()
  starts = starts.tolist()
  ends = ends.tolist()
  covered = bytearray(num_words)
  spans = []
  count = 0
  # Each try costs one length draw; a sequence that cannot take more words stops trying.
  for n in (rng.choice(max_n, size=4 * budget + 8, p=probs) + 1).tolist():
    if count >= budget:
      break
    placed = _place_span(covered, starts, ends, n, budget - count, rng)
    if placed is None:
      continue
    first, n = placed
    covered[first:first + n] = b"\x01" * n
    spans.append((starts[first], ends[first + n - 1], n))
    count += ends[first + n - 1] - starts[first]
  return spans


def _place_span(covered, starts, ends, n, room, rng):
  """Finds a place for a span of n words holding at most `room` tokens.

  Tries a few random starts; the first free run that fits wins. If free runs were found but
  none fits, the first is shortened word by word until it does.

  Returns:
    (first_word, num_words), or None if no free run was found or nothing fits.
  """
  limit = len(covered) - n + 1
  first_free = None
  for u in rng.random(_NGRAM_START_TRIES).tolist():
    first = int(u * limit)
    if any(covered[first:first + n]):
      continue
    if ends[first + n - 1] - starts[first] <= room:
      return first, n
    if first_free is None:
      first_free = first
  if first_free is None:
    return None
  while n > 1 and ends[first_free + n - 1] - starts[first_free] > room:
    n -= 1
  if ends[first_free + n - 1] - starts[first_free] > room:
    return None
  return first_free, n


def mask_sequence(input_ids, word_starts, rng, config):
  """Masks one sequence; the unpadded core of `mask_ids`.

  Args:
    input_ids: int array [L].
    word_starts: int array [L] (1 where a token starts a whole word), or None for "token".
    rng: numpy.random.Generator.
    config: MaskingConfig.

  Returns:
    (masked_input_ids, positions, labels): int64 arrays [L], [K] and [K] with K <=
    max_predictions_per_seq; positions ascending, labels the original ids there.
  """
  input_ids = np.asarray(input_ids, dtype=np.int64)
  starts, ends, maskable = word_boundaries(input_ids, word_starts, config)
  budget = num_to_predict(int(maskable.sum()), config)
  spans = choose_spans(starts, ends, budget, rng, config, input_ids)
  masked = input_ids.copy()
  if not spans:
    empty = np.zeros([0], dtype=np.int64)
    return masked, empty, empty
  positions = np.array([p for first, end, _ in spans for p in range(first, end)])
  # One draw per span decides [MASK] / keep / random for all of its tokens.
  span_choice = rng.random(len(spans))
  choice = np.repeat(span_choice, [end - first for first, end, _ in spans])
  to_mask = positions[choice < _MASK_CUTOFF]
  to_randomize = positions[choice >= _KEEP_CUTOFF]
  if config.replacement == "mask":
    masked[to_mask] = config.mask_id
  replacement_ids = config.replacement_ids
  masked[to_randomize] = replacement_ids[rng.integers(len(replacement_ids),
                                                      size=len(to_randomize))]
  if config.replacement == "similar":
    for (first, end, _), u in zip(spans, span_choice.tolist()):
      if u < _MASK_CUTOFF:
        _replace_words(masked, input_ids, starts, ends, first, end, rng, config)
  positions.sort()
  return masked, positions, input_ids[positions]


def _replace_words(masked, input_ids, starts, ends, first, end, rng, config):
  """Puts a similar word in place of each unit (word or token) of the span [first, end).

  Args:
    masked: int64 array [L], written in place.
    input_ids: int64 array [L], the original ids.
    starts, ends: int arrays [W], the units of the sequence (word_boundaries).
    first, end: the span's first token and one past its last.
  """
  for w in range(np.searchsorted(starts, first), np.searchsorted(starts, end)):
    masked[starts[w]:ends[w]] = config.similar_words.replace(
        input_ids[starts[w]:ends[w]], rng, config.replacement_ids)


def mask_ids(input_ids, word_starts, rng, config):
  """Masks one sequence, padded to max_predictions_per_seq (P) like stock records.

  Args:
    input_ids: int array [L] ([PAD] = a special id, never masked).
    word_starts: int array [L] (1 where a token starts a whole word, 0 on continuation pieces),
      or None with strategy "token".
    rng: numpy.random.Generator.
    config: MaskingConfig.

  Returns:
    masked_input_ids: int32 [L].
    masked_lm_positions: int32 [P], zero padded.
    masked_lm_ids: int32 [P], the original ids at those positions, zero padded.
    masked_lm_weights: float32 [P], 1.0 for real predictions, 0.0 for padding.
  """
  masked, positions, labels = mask_sequence(input_ids, word_starts, rng, config)
  size = config.max_predictions_per_seq
  count = len(positions)
  out_positions = np.zeros([size], dtype=np.int32)
  out_ids = np.zeros([size], dtype=np.int32)
  out_weights = np.zeros([size], dtype=np.float32)
  out_positions[:count] = positions
  out_ids[:count] = labels
  out_weights[:count] = 1.0
  return masked.astype(np.int32), out_positions, out_ids, out_weights


def mask_batch(input_ids, word_starts, seed, config):
  """Masks a batch; for train-time dynamic masking via tf.numpy_function.

  The same (seed, batch) always gives the same masks; pass a different seed each step (e.g.
  [random_seed, global_step]) so every pass over the data is masked differently.

  Args:
    input_ids: int array [B, L].
    word_starts: int array [B, L] (the records' `word_starts`), or None with strategy "token".
    seed: non-negative int, or a sequence/array of them.
    config: MaskingConfig.

  Returns:
    (masked_input_ids int32 [B, L], masked_lm_positions int32 [B, P], masked_lm_ids int32 [B, P],
    masked_lm_weights float32 [B, P]) with P = config.max_predictions_per_seq.
  """
  input_ids = np.asarray(input_ids)
  rng = np.random.default_rng([int(s) for s in np.ravel(seed)])
  rows = [mask_ids(input_ids[b], None if word_starts is None else word_starts[b], rng, config)
          for b in range(input_ids.shape[0])]
  if not rows:
    size = config.max_predictions_per_seq
    return (input_ids.astype(np.int32), np.zeros([0, size], np.int32),
            np.zeros([0, size], np.int32), np.zeros([0, size], np.float32))
  return tuple(np.stack(column) for column in zip(*rows))
