"""Character-level metrics for text rewriting: BLEU-4, ROUGE-L (F) and exact match.

All three compare characters, the usual unit for Chinese where word segmentation is ambiguous.
Before comparing, `normalize` lower-cases a string and removes all whitespace: the WordPiece
tokenizer lower-cases (uncased and Chinese models) and drops whitespace, so a model cannot be
expected to reproduce either. Scores are percentages (0-100).

  bleu4        corpus-level BLEU (Papineni et al. 2002): clipped 1- to 4-gram precisions summed
               over the corpus, their geometric mean, times the brevity penalty
               exp(1 - ref_chars / hyp_chars) when the hypotheses are shorter. No smoothing.
  rouge_l_f    ROUGE-L F1 per sentence (P = LCS / hyp_chars, R = LCS / ref_chars,
               F = 2PR / (P + R)), averaged over the sentences.
  exact_match  share of sentences whose normalized strings are equal.
"""

import collections
import math

BLEU_MAX_ORDER = 4


def normalize(text):
  """Lower-cased `text` without any whitespace."""
  return "".join(text.split()).lower()


def _ngram_counts(chars, n):
  """Counter of the n-grams (tuples) of a character string."""
  return collections.Counter(tuple(chars[i:i + n]) for i in range(len(chars) - n + 1))


def corpus_bleu(hypotheses, references, max_order=BLEU_MAX_ORDER):
  """Character-level corpus BLEU, in percent.

  Args:
    hypotheses: list of strings.
    references: list of strings (one reference per hypothesis).
    max_order: longest n-gram (4 for BLEU-4).

  Returns:
    float in [0, 100]; 0 when some n-gram order has no match at all.
  """
  _check_lengths(hypotheses, references)
  matches = [0] * max_order
  totals = [0] * max_order
  hyp_len = ref_len = 0
  for hyp, ref in zip(hypotheses, references):
    hyp, ref = normalize(hyp), normalize(ref)
    hyp_len += len(hyp)
    ref_len += len(ref)
    for n in range(1, max_order + 1):
      hyp_counts = _ngram_counts(hyp, n)
      ref_counts = _ngram_counts(ref, n)
      # Clipping: an n-gram is credited at most as often as it occurs in the reference.
      matches[n - 1] += sum(min(c, ref_counts[g]) for g, c in hyp_counts.items())
      totals[n - 1] += max(len(hyp) - n + 1, 0)
  if min(matches) == 0 or hyp_len == 0:
    return 0.0
  log_precision = sum(math.log(float(m) / t) for m, t in zip(matches, totals)) / max_order
  brevity = 1.0 if hyp_len >= ref_len else math.exp(1.0 - float(ref_len) / hyp_len)
  return 100.0 * brevity * math.exp(log_precision)


def lcs_length(a, b):
  """Length of the longest common subsequence of two sequences (O(len(a) * len(b)))."""
  if len(a) < len(b):
    a, b = b, a
  previous = [0] * (len(b) + 1)
  for x in a:
    current = [0]
    for j, y in enumerate(b):
      current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
    previous = current
  return previous[-1]


def rouge_l_f(hypothesis, reference):
  """ROUGE-L F1 of one sentence pair, in [0, 1] (1 when both are empty)."""
  hyp, ref = normalize(hypothesis), normalize(reference)
  if not hyp or not ref:
    return 1.0 if hyp == ref else 0.0
  lcs = lcs_length(hyp, ref)
  if lcs == 0:
    return 0.0
  precision = float(lcs) / len(hyp)
  recall = float(lcs) / len(ref)
  return 2.0 * precision * recall / (precision + recall)


# What run_rewrite_finetune.py's eval reports (and --best_metric may watch): rewrite_scores'
# metrics and the mean per-token loss of the references.
EVAL_METRICS = ("bleu4", "rouge_l_f", "exact_match", "eval_loss")


def rewrite_scores(hypotheses, references):
  """All metrics of a corpus.

  Returns:
    dict with "bleu4", "rouge_l_f", "exact_match" (percentages) and "num_examples".
  """
  _check_lengths(hypotheses, references)
  n = max(len(references), 1)
  return {
      "bleu4": corpus_bleu(hypotheses, references),
      "rouge_l_f": 100.0 * sum(rouge_l_f(h, r) for h, r in zip(hypotheses, references)) / n,
      "exact_match": 100.0 * sum(normalize(h) == normalize(r)
                                 for h, r in zip(hypotheses, references)) / n,
      "num_examples": len(references),
  }


def _check_lengths(hypotheses, references):
  if len(hypotheses) != len(references):
    raise ValueError("%d hypotheses for %d references" % (len(hypotheses), len(references)))
