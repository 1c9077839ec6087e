# coding=utf-8
"""The checkpoint's own score of a domain text's words: its masked-LM loss on each word.

Domain-aware masking (--masking=domain) masks first the words a checkpoint does not know. A
general word list (pretraining/word_freq.py) guesses them from outside: words general text
lacks. The checkpoint can also say it itself, as selective masking (Gu et al., EMNLP 2020)
does: mask a word of the domain text in its sentence and see how badly the checkpoint's
masked-LM head predicts it. `WordScorer` does that for every word of the text:

  occurrence   one line of the text (a sentence; at most max_seq_length - 2 pieces around the
               word) with all the pieces of one word replaced by [MASK] (or, for a checkpoint
               that never saw [MASK], such as a MacBERT-style one, by random pieces: replacer)
  loss(o)      the mean over the word's pieces of -log p(piece), from the checkpoint's
               masked-LM head (cls/predictions, as Google's checkpoints carry it)
  loss(w)      the mean of loss(o) over the word's first max_occurrences occurrences
  s(w)         the share of the text's other scored words with a lower loss(w): 1 for the
               word the checkpoint predicts worst, 0 for the one it predicts best (ties share
               their mean rank)

s is a rank, not a scaled loss, because a checkpoint's losses need not be calibrated: a small
Chinese BERT made here (MacBERT-style, 1,700 steps) put 215 of the 1,035 words of a review text
above the loss of a uniform guess (193 with random pieces), common words ("也", "丰富") among
them, so a scaled loss would weigh nearly every word alike; their order still ranked half of the
words holding the text's invented names among its first 13%.

Words are the masking's words (word_freq.word_units: WordPiece words, Chinese words from the
same --chinese_word_segmenter as the records). Punctuation-only and digits-only words and words
with an [UNK] piece are not scored: the masking weighs them at the floor anyway. score_lines
gives the lines `word<TAB>score<TAB>loss<TAB>occurrences`, highest score first, that
scripts/build_word_loss.py writes under a first line naming the vocabulary
(word_freq.scores_header); `--general_word_freq=<that file>` then gives
the masking these scores instead of TF-ICF (word_freq.load), and another vocabulary is refused.

Costs: one forward pass per scored occurrence, at most words x max_occurrences sequences (the
576-sentence Chinese rare-term text, 10 occurrences: 5,116 sequences, 3 s for a 3.2M-parameter
model on 2 CPU cores). It needs a checkpoint with its masked-LM head: an encoder converted
without it (all-MiniLM-L6-v2) is refused; score with a general list instead.
"""

import collections
import math
import time

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from core import formatting
from core.errors import InputError
from engine import checkpoints
from pretraining import mlm
from pretraining import word_freq
import tokenization

# A word of more pieces has only its first MAX_WORD_PIECES masked and scored.
MAX_WORD_PIECES = 20

# What a scored word's pieces become (replacer).
MASK = "mask"
RANDOM = "random"
REPLACEMENTS = (MASK, RANDOM)
DEFAULT_SEED = 12345

# Log progress every this many batches.
LOG_EVERY_BATCHES = 50


def occurrences(lines, featurizer, max_occurrences, max_seq_length):
  """The scored occurrences of each word of `lines`, in text order.

  Args:
    lines: iterable of text lines (sentences).
    featurizer: corpus.Featurizer with word starts (its tokenizer and segmenter are the
      records').
    max_occurrences: at most this many occurrences per word (the first ones).
    max_seq_length: the model's input length; a longer line keeps the pieces around the word.

  Returns:
    OrderedDict word (tuple of piece ids) -> list of (ids, start, end): ids a list of at most
    max_seq_length - 2 piece ids (no [CLS]/[SEP]), the word at ids[start:end].
  """
  punctuation, numerals, _ = word_freq.token_classes(featurizer.tokenizer.vocab)
  plain = frozenset(punctuation) | frozenset(numerals)
  room = max_seq_length - 2
  found = collections.OrderedDict()
  for line in lines:
    ids, starts = featurizer.sentence(line)
    if not ids:
      continue
    position = 0
    for unit in word_freq.sequence_units(ids, starts):
      start, position = position, position + len(unit)
      if featurizer.unk_id in unit or plain.issuperset(unit):
        continue
      places = found.setdefault(unit, [])
      if len(places) < max_occurrences:
        first = start  # A word longer than the window: its first pieces.
        if len(unit) < room:  # Else the word in the middle of its window.
          first = min(max(0, start - (room - len(unit)) // 2), max(0, len(ids) - room))
        window = ids[first:first + room]
        places.append((window, start - first, min(position - first, len(window))))
  return found


def replacer(replacement, vocab, seed):
  """replace() -> the id the next scored piece becomes.

  MASK: [MASK], as BERT's masked LM reads a masked word (Google's checkpoints). RANDOM: a
  random entry of the vocabulary that is no special token, as the 10% of BERT's and
  MacBERT's masks that become random words read (for a checkpoint that never saw [MASK]:
  MacBERT-style pretraining replaces words, so its [MASK] embedding is untrained); drawn in
  scoring order from `seed`, so a run repeats exactly.
  """
  if replacement == MASK:
    mask_id = vocab["[MASK]"]
    return lambda: mask_id
  ordinary = np.array(sorted(i for token, i in vocab.items()
                             if not word_freq.is_special_entry(token)), np.int64)
  rng = np.random.RandomState(seed)
  return lambda: int(ordinary[rng.randint(len(ordinary))])


def _batch(items, cls_id, sep_id, replace):
  """Feature arrays for a list of (ids, start, end): the word's pieces (at most
  MAX_WORD_PIECES) replaced by replace(), [CLS] ids [SEP], zero-padded to
  the longest row.

  Returns:
    dict of int32 arrays: input_ids, input_mask, segment_ids [B, L]; masked_lm_positions,
    masked_lm_ids [B, P]; float32 masked_lm_weights [B, P].
  """
  length = max(len(ids) for ids, _, _ in items) + 2
  pieces = max(min(end - start, MAX_WORD_PIECES) for _, start, end in items)
  rows = len(items)
  features = {name: np.zeros([rows, length], np.int32)
              for name in ("input_ids", "input_mask", "segment_ids")}
  for name in ("masked_lm_positions", "masked_lm_ids"):
    features[name] = np.zeros([rows, pieces], np.int32)
  features["masked_lm_weights"] = np.zeros([rows, pieces], np.float32)
  for row, (ids, start, end) in enumerate(items):
    sequence = [cls_id] + list(ids) + [sep_id]
    end = min(end, start + MAX_WORD_PIECES)
    for slot, position in enumerate(range(start + 1, end + 1)):
      features["masked_lm_positions"][row, slot] = position
      features["masked_lm_ids"][row, slot] = sequence[position]
      features["masked_lm_weights"][row, slot] = 1.0
      sequence[position] = replace()
    features["input_ids"][row, :len(sequence)] = sequence
    features["input_mask"][row, :len(sequence)] = 1
  return features


def check_head(checkpoint, bert_config, variables, bert_dir):
  """Raises InputError when `checkpoint` does not fit bert_config (checkpoints.
  check_checkpoint_fits) or lacks one of `variables` (the masked-LM graph's)."""
  what = "--bert_dir=%s" % bert_dir
  checkpoints.check_checkpoint_fits(checkpoint, bert_config, what,
                                    config_source="its bert_config.json")
  saved = dict(tf.train.list_variables(checkpoint))
  missing = [v.op.name for v in variables if v.op.name not in saved]
  if missing:
    head = [name for name in missing if name.startswith("cls/")]
    raise InputError(
        "%s: its checkpoint lacks %d of the model's variables (%s%s)%s" % (
            what, len(missing), missing[0], ", ..." if len(missing) > 1 else "",
            ": it has no masked-LM head (an encoder converted without it, like "
            "all-MiniLM-L6-v2?), so it cannot score words; use a general word list "
            "(--general_word_freq=vocab|jieba|FILE) instead" if head else ""))


class WordScorer(object):
  """The checkpoint's masked-LM graph in a session, checked and restored on construction.

  Attributes:
    session, features (placeholders by name), word_loss (float Tensor [B]: the mean loss over
    each row's masked pieces).
  """

  def __init__(self, bert_config, checkpoint, bert_dir):
    """bert_config: modeling.BertConfig; checkpoint: its prefix; bert_dir: for messages.

    Raises InputError (check_head) before anything is read from the text."""
    self.graph = tf.Graph()
    with self.graph.as_default():
      names = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids")
      self.features = {name: tf.placeholder(tf.int32, [None, None], name=name)
                       for name in names}
      weights = tf.placeholder(tf.float32, [None, None], name="masked_lm_weights")
      self.features["masked_lm_weights"] = weights
      _, outputs = mlm.tower_fn_builder(bert_config, has_nsp=False, is_training=False)(
          self.features, None)
      log_prob = outputs["masked_lm_log_prob"]  # [B, P]
      self.word_loss = -tf.reduce_sum(log_prob * weights, axis=1) / tf.reduce_sum(weights,
                                                                                  axis=1)
      variables = tf.global_variables()
      check_head(checkpoint, bert_config, variables, bert_dir)
      self.session = tf.Session(graph=self.graph)
      tf.train.Saver(variables).restore(self.session, checkpoint)

  def score(self, found, vocab, batch_size, replacement=MASK, seed=DEFAULT_SEED):
    """Each word's mean masked-LM loss over its occurrences.

    Args:
      found: occurrences() of the text.
      vocab: token -> id of the checkpoint's vocabulary.
      batch_size: sequences per forward pass.
      replacement: what the word's pieces become, one of REPLACEMENTS (replacer).
      seed: the random pieces' seed, for RANDOM.

    Returns:
      OrderedDict word (tuple of ids) -> (loss in nats, occurrences scored), in `found`'s
      order.
    """
    items = [(word, place) for word, places in found.items() for place in places]
    order = sorted(range(len(items)), key=lambda k: len(items[k][1][0]))  # Short rows together.
    losses = np.zeros([len(items)], np.float64)
    replace = replacer(replacement, vocab, seed)
    start = time.time()
    batches = int(math.ceil(len(order) / float(batch_size)))
    for index in range(batches):
      rows = order[index * batch_size:(index + 1) * batch_size]
      values = _batch([items[k][1] for k in rows], vocab["[CLS]"], vocab["[SEP]"], replace)
      losses[rows] = self.session.run(self.word_loss,
                                      {self.features[n]: values[n] for n in self.features})
      if (index + 1) % LOG_EVERY_BATCHES == 0 or index + 1 == batches:
        done, elapsed = min((index + 1) * batch_size, len(order)), time.time() - start
        logging.info("Scored %d of %d occurrences (%.1f sequences/sec, ETA %s)", done,
                     len(order), done / max(elapsed, 1e-9),
                     formatting.format_seconds(elapsed / (index + 1) * (batches - index - 1)))
    totals = collections.OrderedDict()
    for (word, _), loss in zip(items, losses):
      total, count = totals.get(word, (0.0, 0))
      totals[word] = (total + loss, count + 1)
    return collections.OrderedDict(
        (word, (total / count, count)) for word, (total, count) in totals.items())


def word_text(unit, tokenizer):
  """A word's text from its piece ids, as the tokenizer reads it back."""
  return tokenization.detokenize(tokenizer.convert_ids_to_tokens(list(unit)))


def loss_ranks(losses):
  """float64 array [N]: each loss's rank among `losses` scaled to [0, 1] (0 the lowest, 1 the
  highest; ties share their mean rank; a single word scores 1)."""
  losses = np.asarray(losses, np.float64)
  if len(losses) < 2:
    return np.ones([len(losses)])
  _, inverse, counts = np.unique(losses, return_inverse=True, return_counts=True)
  first = np.concatenate([[0], np.cumsum(counts)[:-1]])  # The rank of each value's first copy.
  ranks = first[inverse] + (counts[inverse] - 1) / 2.0
  return ranks / (len(losses) - 1)


def score_lines(word_losses, tokenizer):
  """`word<TAB>score<TAB>loss<TAB>occurrences` lines, highest score first (ties by word); the
  score is loss_ranks of the words' losses."""
  rows = collections.OrderedDict()
  for unit, (loss, count) in word_losses.items():
    word = word_text(unit, tokenizer)
    if word.strip() and "\t" not in word and word not in rows:
      rows[word] = (loss, count)
  scores = loss_ranks([loss for loss, _ in rows.values()])
  ordered = sorted(zip(scores, rows.items()), key=lambda item: (-item[0], item[1][0]))
  return ["%s\t%.6f\t%.4f\t%d" % (word, score, loss, count)
          for score, (word, (loss, count)) in ordered]
