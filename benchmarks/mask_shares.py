# coding=utf-8
"""Which words does each masking spend its predictions on? Real text, no training.

Runs the masking of create_pretraining_data.py (`masking.mask_sequence`, the function records
and dynamic masking share) over a domain text with several --masking strategies and the same
seed, and prints, per strategy, the mask rate and the share of the masks that land on three kinds
of word: words the general list does not name (what the domain adds), the list's commonest
words (what every checkpoint knows), and punctuation, numbers and [UNK]; then the words each
strategy masked most.
It measures what --masking=domain is for: the same mask rate, carried by other words.

  python benchmarks/mask_shares.py --input_file=../shared/data/corpus/legal_zh.txt \
    --vocab_file=vocab/chinese_vocab.txt --chinese_word_segmenter=jieba

The general list is create_pretraining_data.py's: by default jieba's dictionary for Chinese text
and the model's vocabulary otherwise, or --general_word_freq=vocab|jieba|FILE
(scripts/build_word_freq.py on general text of your own). A document's lines (blank lines
between documents) are packed into
sequences of at most --max_seq_length tokens, as records pack them. --words_file=F (a word a
line, e.g. the rare-term task's invented words) adds, per strategy, the share of those words'
occurrences that carry a mask and how many of them no mask reached.
"""

import argparse
import collections
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import create_pretraining_data  # pylint: disable=wrong-import-position
from core.errors import InputError  # pylint: disable=wrong-import-position
from engine import cli  # pylint: disable=wrong-import-position
from pretraining import corpus  # pylint: disable=wrong-import-position
from pretraining import masking  # pylint: disable=wrong-import-position
from pretraining import word_freq  # pylint: disable=wrong-import-position

# How many of the general list's commonest words count as "what every checkpoint knows".
COMMONEST = 100

# Listed words rarer than this share of the list's total count (10 per million) count as rare.
RARE = 1e-5


def _parse(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--input_file", required=True, help="Domain text, one passage a line.")
  parser.add_argument("--vocab_file", required=True, help="The model's WordPiece vocabulary.")
  parser.add_argument("--general_word_freq", default=None,
                      help="vocab | jieba | a file of word<TAB>count lines; default as "
                      "create_pretraining_data.py's (jieba with a segmenter, else vocab).")
  parser.add_argument("--chinese_word_segmenter", default="none", help="none | jieba.")
  parser.add_argument("--do_lower_case", default="true", help="true | false.")
  parser.add_argument("--strategies", default="whole_word,domain",
                      help="Comma-separated --masking values to compare.")
  parser.add_argument("--max_seq_length", type=int, default=128, help="Tokens per sequence.")
  parser.add_argument("--max_lines", type=int, default=100000, help="Lines of text to read.")
  parser.add_argument("--seed", type=int, default=12345, help="One seed for every strategy.")
  parser.add_argument("--top", type=int, default=12, help="Most-masked words to list.")
  parser.add_argument("--words_file", default=None,
                      help="Optional: words of interest, one per line (e.g. a task's invented "
                      "terms); prints, per strategy, the share of their occurrences that carry a "
                      "mask and how many of them no mask reached.")
  return parser.parse_args(argv)


def _sequences(featurizer, path, max_lines, max_len):
  """Yields (ids, starts) int arrays [L] with [CLS] and [SEP], L <= max_len: a document's lines
  packed together as records pack them, a line longer than that cut at a word start."""
  room = max_len - 2
  ids, starts = [], []

  def emit(ids, starts):
    return (np.array([featurizer.cls_id] + ids + [featurizer.sep_id]),
            np.array([1] + starts + [1]))
  with open(path, encoding="utf-8") as f:
    lines = [line.strip() for _, line in zip(range(max_lines), f)] + [""]
  for line in lines:
    line_ids, line_starts = featurizer.sentence(line) if line else ([], [])
    if ids and (not line or len(ids) + len(line_ids) > room):
      yield emit(ids, starts)
      ids, starts = [], []
    ids, starts = ids + line_ids, starts + line_starts
    while len(ids) > room:
      cut = max([i for i in range(1, room + 1) if starts[i]] or [room])
      yield emit(ids[:cut], starts[:cut])
      ids, starts = ids[cut:], starts[cut:]


def _word_of_each_token(starts):
  """int array [L]: the index of the word each token belongs to."""
  return np.cumsum(starts) - 1


def _kinds(config, commonest):
  """word (tuple of ids) -> 'new' (the list lacks it) | 'rare' (under RARE of the list) |
  'common' | 'punct' | 'other'."""
  weights = config.word_weights
  rare_weight = weights.weight(math.log((weights.total + 1.0) / (RARE * weights.total + 1.0)) /
                               math.log(weights.total + 1.0))

  def kind(word):
    if weights.is_plain(word):
      return "punct"  # Punctuation, digits or [UNK]: ordinary for --masking=domain.
    if word in commonest:
      return "common"
    if word not in weights.listed:
      return "new"
    return "rare" if weights.weights[word] >= rare_weight else "other"
  return kind


def _as_ids(tokenizer, words):
  """Words (strings) as the tuples of ids the text's words are compared by."""
  return {tuple(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(w))) for w in words}


def _commonest(source, tokenizer, n):
  """The list's n commonest words, as tuples of ids."""
  counts = word_freq.source_counts(source, tokenizer.vocab)
  return _as_ids(tokenizer, sorted(counts, key=counts.get, reverse=True)[:n])


def _named_words(path, tokenizer):
  """--words_file's words as tuples of ids (cased as the tokenizer cases the text); none without
  the flag."""
  if not path:
    return set()
  with open(path, encoding="utf-8") as f:
    return _as_ids(tokenizer, [line.strip() for line in f if line.strip()])


def measure(args):
  """Returns (the general list used, {strategy: (token counts by kind, mask counts by kind,
  masks by word text, {named word: [occurrences, occurrences with a mask]})})."""
  general_word_freq = (args.general_word_freq or
                       create_pretraining_data.default_general_word_list([args.input_file]))

  def featurizer(strategy):
    return corpus.Featurizer(create_pretraining_data.Options(
        input_file=args.input_file, output_file="unused", vocab_file=args.vocab_file,
        masking=strategy, general_word_freq=general_word_freq,
        chinese_word_segmenter=args.chinese_word_segmenter,
        do_lower_case=args.do_lower_case.lower() == "true"))
  featurizers = {strategy: featurizer(strategy) for strategy in args.strategies.split(",")}
  # The domain strategy's word list sorts words into kinds.
  reference = featurizers.get("domain") or featurizer("domain")
  tokenizer = reference.tokenizer
  kind = _kinds(reference.masking,
                _commonest(reference.masking.word_weights.source, tokenizer, COMMONEST))
  named = _named_words(args.words_file, tokenizer)
  results = {}
  for strategy, featurizer in featurizers.items():
    rng = np.random.default_rng(args.seed)
    tokens, masks, by_word = collections.Counter(), collections.Counter(), collections.Counter()
    seen = {w: [0, 0] for w in named}  # named word -> [occurrences, masked ones]
    for ids, starts in _sequences(reference, args.input_file, args.max_lines,
                                  args.max_seq_length):
      word = _word_of_each_token(starts)
      bounds = np.flatnonzero(np.append(starts, 1))
      words = [tuple(ids[bounds[k]:bounds[k + 1]].tolist()) for k in range(len(bounds) - 1)]
      for k, w in enumerate(words[1:-1], 1):
        tokens[kind(w)] += len(w)
      _, positions, _ = masking.mask_sequence(ids, starts, rng, featurizer.masking)
      for p in positions.tolist():
        w = words[word[p]]
        masks[kind(w)] += 1
        by_word["".join(tokenizer.convert_ids_to_tokens(list(w))).replace("##", "")] += 1
      masked_words = set(word[positions].tolist())
      for k, w in enumerate(words[1:-1], 1):
        if w in seen:
          seen[w][0] += 1
          seen[w][1] += k in masked_words
    results[strategy] = (tokens, masks, by_word, seen)
  return general_word_freq, results


def report(args, source, results):
  """Prints the table and each strategy's most-masked words; `source`: the general list."""
  print("%s: %s, general list %s, seed %d" % (
      os.path.basename(args.input_file), args.chinese_word_segmenter,
      source,
      args.seed))
  print("Share of the masks (in brackets: of the tokens) on words the list lacks, words it lists"
        " under 10 per million, its %d commonest words, and punctuation, digits or [UNK]:" %
        COMMONEST)
  print("| masking | tokens | mask rate | lacks | rare | commonest | punctuation, digits |")
  print("| --- | --- | --- | --- | --- | --- | --- |")
  for strategy, (tokens, masks, _, _) in results.items():
    total, masked = sum(tokens.values()), sum(masks.values())
    share = lambda k: 100.0 * masks[k] / max(masked, 1)
    print("| %s | %d | %.2f%% | %s |" % (
        strategy, total, 100.0 * masked / max(total, 1), " | ".join(
            "%.1f%% (%.1f%%)" % (share(k), 100.0 * tokens[k] / total)
            for k in ("new", "rare", "common", "punct"))))
  for strategy, (_, masks, by_word, _) in results.items():
    masked = max(sum(masks.values()), 1)
    print("%s, most masked: %s" % (strategy, ", ".join(
        "%s %.1f%%" % (w, 100.0 * n / masked) for w, n in by_word.most_common(args.top))))
  if args.words_file:
    for strategy, (_, _, _, seen) in results.items():
      occurrences = sum(n for n, _ in seen.values())
      reached = sum(m for _, m in seen.values())
      met = sum(1 for n, _ in seen.values() if n)
      unmasked = sum(1 for n, m in seen.values() if n and not m)
      print("%s, the %d words of %s: %d of their %d occurrences carry a mask (%.1f%%); %d of the "
            "%d met in the text carry none; %d not met" % (
                strategy, len(seen), os.path.basename(args.words_file), reached, occurrences,
                100.0 * reached / max(occurrences, 1), unmasked, met, len(seen) - met))


def main(argv=None):
  args = _parse(argv)
  try:
    for flag in ("input_file", "vocab_file") + (("words_file",) if args.words_file else ()):
      cli.require_file(getattr(args, flag), flag)
    if args.general_word_freq not in (None, word_freq.VOCAB_SOURCE, word_freq.JIEBA_SOURCE):
      cli.require_file(args.general_word_freq, "general_word_freq")
      if word_freq.is_scores_file(args.general_word_freq):
        raise InputError("--general_word_freq=%s is a scores file (build_word_loss.py): the "
                         "shares are counted by a word-frequency list's counts; pass one" %
                         args.general_word_freq)
    report(args, *measure(args))
  except (InputError, OSError, UnicodeDecodeError) as e:
    print("error: mask_shares.py: %s" % e, file=sys.stderr)
    sys.exit(2)
  except KeyboardInterrupt:
    print("error: mask_shares.py: interrupted (it writes no file)", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
  main()
