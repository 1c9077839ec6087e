# coding=utf-8
"""Tests for pretraining/masking.py: budgets, the 80/10/10 rule, word and n-gram integrity, batches."""

import collections
import os

import numpy as np
import pytest

from core.errors import InputError
from pretraining import masking
import tokenization

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CLS, _SEP, _MASK, _PAD = 101, 102, 103, 0
_ENGLISH_TEXT = (
    "the internationalization of unbelievably misunderstood photosynthesis experiments "
    "surprised researchers who were investigating the reproducibility of thermodynamics "
    "while overcomplicated bureaucracies kept questioning their characterization methods")


@pytest.fixture(scope="module")
def chinese_vocab():
  return tokenization.load_vocab(os.path.join(_REPO, "vocab", "chinese_vocab.txt"))


@pytest.fixture(scope="module")
def english_tokenizer():
  return tokenization.FullTokenizer(os.path.join(_REPO, "vocab", "english_uncased_vocab.txt"))


def _config(vocab, **kwargs):
  return masking.MaskingConfig.from_vocab(vocab, **kwargs)


def _random_pairs(rng, count, length, pad=0):
  """[count, length] ids shaped [CLS] A [SEP] B [SEP] [PAD]*pad, plus random word_starts."""
  ids = rng.integers(1000, 20000, size=(count, length))
  ids[:, 0] = _CLS
  ids[:, length // 3] = _SEP
  ids[:, length - pad - 1] = _SEP
  if pad:
    ids[:, length - pad:] = _PAD
  word_starts = (rng.random((count, length)) < 0.6).astype(np.int64)
  word_starts[ids == _PAD] = 0
  return ids, word_starts


def _classify(original, masked, positions, weights):
  """Counts of [MASK] / kept / random replacements at the weighted positions."""
  counts = collections.Counter()
  for row in range(original.shape[0]):
    for p in positions[row][weights[row] > 0]:
      if masked[row, p] == _MASK:
        counts["mask"] += 1
      elif masked[row, p] == original[row, p]:
        counts["keep"] += 1
      else:
        counts["random"] += 1
  return counts


def _words(word_starts_row, maskable_row):
  """Lists of token positions forming each word (word_starts, broken at special tokens)."""
  words = []
  previous_maskable = False
  for i, (start, ok) in enumerate(zip(word_starts_row, maskable_row)):
    if ok and (start or not previous_maskable):
      words.append([i])
    elif ok:
      words[-1].append(i)
    previous_maskable = ok
  return words


@pytest.mark.parametrize("strategy", ["token", "whole_word", "ngram"])
def test_share_and_80_10_10(chinese_vocab, strategy):
  config = _config(chinese_vocab, strategy=strategy)
  rng = np.random.default_rng(1)
  ids, word_starts = _random_pairs(rng, 1200, 128)
  masked, positions, labels, weights = masking.mask_batch(ids, word_starts, 7, config)
  maskable = 128 - 3
  share = weights.sum() / (maskable * len(ids))
  assert abs(share - 0.15) <= 0.01
  counts = _classify(ids, masked, positions, weights)
  total = sum(counts.values())
  assert abs(counts["mask"] / total - 0.8) <= 0.02
  assert abs(counts["keep"] / total - 0.1) <= 0.02
  assert abs(counts["random"] / total - 0.1) <= 0.02
  # Labels are the original ids at the masked positions.
  rows = np.arange(len(ids))[:, None]
  np.testing.assert_array_equal(labels * (weights > 0), ids[rows, positions] * (weights > 0))


def test_special_ids_never_masked_and_output_shapes(chinese_vocab):
  config = _config(chinese_vocab, strategy="whole_word", max_predictions_per_seq=20)
  rng = np.random.default_rng(2)
  ids, word_starts = _random_pairs(rng, 200, 64, pad=20)
  masked, positions, labels, weights = masking.mask_batch(ids, word_starts, [3, 4], config)
  assert masked.shape == (200, 64) and masked.dtype == np.int32
  assert positions.shape == labels.shape == weights.shape == (200, 20)
  assert positions.dtype == labels.dtype == np.int32 and weights.dtype == np.float32
  specials = np.isin(ids, [_CLS, _SEP, _PAD])
  np.testing.assert_array_equal(masked[specials], ids[specials])
  for row in range(len(ids)):
    chosen = positions[row][weights[row] > 0]
    assert not specials[row, chosen].any()
    assert list(chosen) == sorted(set(chosen))
    # Padding slots of the prediction arrays are zero.
    assert not positions[row][weights[row] == 0].any()
  # A random replacement never inserts a special token or [MASK] outside [MASK] decisions.
  replaced = (masked != ids) & (masked != _MASK)
  assert not np.isin(masked[replaced], [_CLS, _SEP, _PAD, _MASK]).any()


@pytest.mark.parametrize("strategy", ["whole_word", "ngram"])
def test_words_are_never_split(chinese_vocab, strategy):
  config = _config(chinese_vocab, strategy=strategy)
  rng = np.random.default_rng(3)
  ids, word_starts = _random_pairs(rng, 400, 128, pad=10)
  masked, positions, _, weights = masking.mask_batch(ids, word_starts, 11, config)
  maskable = ~np.isin(ids, [_CLS, _SEP, _PAD])
  for row in range(len(ids)):
    chosen = set(positions[row][weights[row] > 0].tolist())
    for word in _words(word_starts[row], maskable[row]):
      inside = [p in chosen for p in word]
      assert all(inside) or not any(inside), (row, word)
      if all(inside):
        # One decision per span: a word is all [MASK], all kept, or all replaced.
        kinds = {"mask" if masked[row, p] == _MASK else
                 "keep" if masked[row, p] == ids[row, p] else "random" for p in word}
        assert len(kinds) == 1, (row, word, kinds)


@pytest.mark.parametrize("strategy", ["whole_word", "ngram"])
def test_english_wordpieces_masked_together(english_tokenizer, strategy):
  tokens = ["[CLS]"] + english_tokenizer.tokenize(_ENGLISH_TEXT) + ["[SEP]"]
  assert sum(t.startswith("##") for t in tokens) >= 10  # The text really has ## pieces.
  ids = english_tokenizer.convert_tokens_to_ids(tokens)
  word_starts = [0 if t.startswith("##") else 1 for t in tokens]  # As pretraining/corpus.py.
  config = _config(english_tokenizer.vocab, strategy=strategy)
  rng = np.random.default_rng(4)
  seen_multi_piece = 0
  for _ in range(300):
    masked, positions, labels = masking.mask_sequence(ids, word_starts, rng, config)
    positions = positions.tolist()
    assert labels.tolist() == [ids[p] for p in positions]
    chosen = set(positions)
    for p in positions:
      # The head of the word and all its ## continuations are chosen together.
      head = p
      while tokens[head].startswith("##"):
        head -= 1
      end = p + 1
      while end < len(tokens) and tokens[end].startswith("##"):
        end += 1
      assert set(range(head, end)) <= chosen, (tokens[head:end], positions)
      seen_multi_piece += end - head > 1
    assert masked[0] == ids[0] and masked[-1] == ids[-1]  # [CLS] and [SEP] are never masked.
  assert seen_multi_piece > 0


@pytest.mark.parametrize("word_share", [1.0, 0.6])
def test_ngram_span_lengths_follow_inverse_n(chinese_vocab, word_share):
  config = _config(chinese_vocab, strategy="ngram", max_ngram=3, max_predictions_per_seq=80)
  rng = np.random.default_rng(5)
  lengths = collections.Counter()
  for _ in range(500):
    ids = rng.integers(1000, 20000, size=512)
    ids[0], ids[-1] = _CLS, _SEP
    word_starts = (rng.random(512) < word_share).astype(np.int64)
    starts, ends, maskable = masking.word_boundaries(ids, word_starts, config)
    budget = masking.num_to_predict(int(maskable.sum()), config)
    spans = masking.choose_spans(starts, ends, budget, rng, config)
    assert sum(end - first for first, end, _ in spans) <= budget
    for _, _, n in spans:
      lengths[n] += 1
  total = sum(lengths.values())
  expected = masking.ngram_length_probs(3)  # 6/11, 3/11, 2/11
  np.testing.assert_allclose(expected, [6 / 11, 3 / 11, 2 / 11])
  for n in (1, 2, 3):
    assert abs(lengths[n] / total - expected[n - 1]) <= 0.02, (n, lengths)


def test_mask_batch_differs_across_seeds_and_keeps_share(chinese_vocab):
  config = _config(chinese_vocab, strategy="whole_word")
  rng = np.random.default_rng(6)
  ids, word_starts = _random_pairs(rng, 300, 128)
  first = masking.mask_batch(ids, word_starts, [12345, 0], config)
  again = masking.mask_batch(ids, word_starts, [12345, 0], config)
  second = masking.mask_batch(ids, word_starts, [12345, 1], config)
  for a, b in zip(first, again):
    np.testing.assert_array_equal(a, b)
  same_rows = np.all(first[1] == second[1], axis=1).mean()
  assert same_rows < 0.05
  for masked in (first, second):
    assert abs(masked[3].sum() / (125 * 300) - 0.15) <= 0.01


def test_budget_and_token_strategy_without_word_starts(chinese_vocab):
  config = _config(chinese_vocab, masked_lm_prob=0.5, max_predictions_per_seq=5)
  assert masking.num_to_predict(0, config) == 0
  assert masking.num_to_predict(3, config) == 2
  assert masking.num_to_predict(100, config) == 5
  ids = np.array([_CLS, 2000, 2001, 2002, _SEP])
  masked, positions, labels, weights = masking.mask_ids(ids, None, np.random.default_rng(0),
                                                        config)
  assert weights.sum() == 2 and set(positions[:2]) <= {1, 2, 3}


def test_config_errors(chinese_vocab):
  vocab = dict(chinese_vocab)
  del vocab["[MASK]"]
  with pytest.raises(InputError, match=r"my_vocab\.txt: missing special token\(s\) \[MASK\]"):
    masking.MaskingConfig.from_vocab(vocab, source="my_vocab.txt")
  with pytest.raises(InputError, match="--masking=span"):
    _config(chinese_vocab, strategy="span")
  with pytest.raises(InputError, match="--masked_lm_prob"):
    _config(chinese_vocab, masked_lm_prob=0.0)
