"""rewrite_metrics on examples whose scores are worked out by hand in the comments."""

import math

import pytest

from rewrite import metrics as rewrite_metrics


def test_bleu_single_sentence_with_brevity_penalty():
  # hyp 今天天气好 (5 chars), ref 今天天气很好 (6 chars).
  # 1-grams 5/5, 2-grams 3/4 (今天 天天 天气; not 气好), 3-grams 2/3, 4-grams 1/2 (今天天气).
  # Brevity penalty exp(1 - 6/5).
  expected = 100 * (1 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25 * math.exp(1 - 6 / 5)
  assert rewrite_metrics.corpus_bleu(["今天天气好"], ["今天天气很好"]) == pytest.approx(expected)
  assert expected == pytest.approx(57.8928, abs=1e-3)


def test_bleu_is_corpus_level():
  # Second pair identical (4 chars): counts add up before the precisions are taken.
  # 1-grams 9/9, 2-grams 6/7, 3-grams 4/5, 4-grams 2/3; lengths 9 vs 10.
  expected = 100 * (6 / 7 * 4 / 5 * 2 / 3) ** 0.25 * math.exp(1 - 10 / 9)
  got = rewrite_metrics.corpus_bleu(["今天天气好", "abcd"], ["今天天气很好", "ABCD"])
  assert got == pytest.approx(expected)


def test_bleu_zero_without_any_4gram_match_and_clipping():
  # abcd vs abce: no common 4-gram -> 0 (unsmoothed corpus BLEU).
  assert rewrite_metrics.corpus_bleu(["abcd"], ["abce"]) == 0.0
  # Clipping: "aaaa" against "aaab": 1-grams min(4, 3) = 3 of 4, 2-grams 2/3, 3-grams 1/2,
  # 4-grams 0/1 -> 0; with max_order=3: (3/4 * 2/3 * 1/2) ** (1/3), equal lengths.
  assert rewrite_metrics.corpus_bleu(["aaaa"], ["aaab"], max_order=3) == pytest.approx(
      100 * (3 / 4 * 2 / 3 * 1 / 2) ** (1 / 3))


def test_bleu_perfect_and_longer_hypothesis():
  assert rewrite_metrics.corpus_bleu(["我爱北京"], ["我爱北京"]) == pytest.approx(100.0)
  # Longer hypothesis: no brevity penalty, precisions 4/5, 3/4, 2/3, 1/2.
  assert rewrite_metrics.corpus_bleu(["我爱北京啊"], ["我爱北京"]) == pytest.approx(
      100 * (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25)


def test_lcs_and_rouge_l():
  assert rewrite_metrics.lcs_length("abcd", "acbd") == 3
  assert rewrite_metrics.lcs_length("", "abc") == 0
  # LCS 今天天气好 = 5: P = 5/5, R = 5/6, F = 2 * 1 * 5/6 / (1 + 5/6) = 10/11.
  assert rewrite_metrics.rouge_l_f("今天天气好", "今天天气很好") == pytest.approx(10 / 11)
  assert rewrite_metrics.rouge_l_f("abcd", "acbd") == pytest.approx(0.75)
  assert rewrite_metrics.rouge_l_f("xyz", "abc") == 0.0
  assert rewrite_metrics.rouge_l_f("", "abc") == 0.0
  assert rewrite_metrics.rouge_l_f(" ", "") == 1.0


def test_rewrite_scores():
  hyps = ["今天 天气好", "A B", "xyz"]
  refs = ["今天天气很好", "ab", "abc"]
  scores = rewrite_metrics.rewrite_scores(hyps, refs)
  # Whitespace and case are ignored: "A B" equals "ab".
  assert scores["exact_match"] == pytest.approx(100 / 3)
  assert scores["rouge_l_f"] == pytest.approx(100 * (10 / 11 + 1 + 0) / 3)
  assert scores["num_examples"] == 3
  # 1-grams: 5 + 2 + 0 of 10; 2-grams 3 + 1 + 0 of 7; 3-grams 2 + 0 + 0 of 4;
  # 4-grams 1 of 2 (only the first pair has any); lengths 10 vs 11.
  expected = 100 * (7 / 10 * 4 / 7 * 2 / 4 * 1 / 2) ** 0.25 * math.exp(1 - 11 / 10)
  assert scores["bleu4"] == pytest.approx(expected)
  with pytest.raises(ValueError):
    rewrite_metrics.rewrite_scores(["a"], [])
