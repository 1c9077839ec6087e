"""A domain vocabulary: the words of a domain text that WordPiece splits get tokens of their own.

A word that WordPiece spells in several pieces ("stavigloth" -> "st ##avi ##gl ##oth") is one
the checkpoint never saw as a word. `build` writes a copy of a BERT folder in which such words
of a domain text have tokens of their own, so that continued pretraining gives each one
embedding (scripts/build_domain_vocab.py is its command line):

- vocab.txt: the checkpoint's vocabulary with its `[unusedN]` entries, in order, replaced by the
  domain text's split words, most frequent first (words of letters only, met at least
  min_count times, no [UNK] piece), all but the last [unusedN] (993 words in Google's English
  vocabularies). The vocabulary keeps its size, so the checkpoint's shapes,
  and stock BERT, still fit it; WordPiece's longest match then reads each added word as one
  token. BERT's basic tokenizer splits Chinese text into characters before WordPiece, so
  Chinese words cannot be added this way (their English words can).
- The last [unusedN] stays where it was: --masking=domain's built-in general list
  (`--general_word_freq=vocab`, word_freq.vocab_counts) ranks only the words after it, so the
  added words, which sit before it, still count as words the checkpoint's general text lacks
  and are masked first (ranked by their place, they would look like the commonest words).
- bert_model.ckpt: the checkpoint with each added word's row of bert/embeddings/word_embeddings
  (and of cls/predictions/output_bias, when the checkpoint has a masked-LM head) set to the mean
  of its pieces' rows. Every other weight is copied, under the same names.
- added_words.tsv: `word<TAB>count<TAB>pieces` for each added word; bert_config.json, copied.

Costs: one pass over the text and one copy of the checkpoint (seconds for MiniLM). Measured on
the rare-term tasks of benchmarks/rare_terms.py (scripts/rare_term_table.sh, ARMS=domain_vocab):
docs/results/pretraining.md.
"""

import collections
import os

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from core import atomic_files
from core.errors import InputError
from engine import checkpoints
from engine import cli
from pretraining import corpus
from pretraining import word_freq
import tokenization

EMBEDDINGS = "bert/embeddings/word_embeddings"
OUTPUT_BIAS = "cls/predictions/output_bias"


def free_slots(vocab):
  """The ids of the vocabulary's `[unusedN]` entries but the last, in file order.

  vocab: token -> id. The last one marks where the vocabulary's own words begin
  (word_freq.vocab_counts).
  """
  return [i for token, i in vocab.items() if word_freq.UNUSED_ENTRY_RE.match(token)][:-1]


def split_words(paths, tokenizer, min_count):
  """The words of the files `paths` that WordPiece spells in 2+ pieces, most frequent first.

  Returns:
    list of (word, count, pieces): letters-only words met at least `min_count` times whose
    pieces hold no [UNK]; ties in alphabetical order.
  """
  counts = collections.Counter()
  for path in paths:
    for _, line in cli.text_lines(path):
      counts.update(w for w in tokenizer.basic_tokenizer.tokenize(line) if w.isalpha())
  found = []
  for word, count in counts.items():
    pieces = tokenizer.wordpiece_tokenizer.tokenize(word)
    if count >= min_count and len(pieces) > 1 and "[UNK]" not in pieces:
      found.append((word, count, pieces))
  return sorted(found, key=lambda item: (-item[1], item[0]))


def new_rows(reader, name, vocab, added):
  """`name`'s array with each added word's row (axis 0) set to the mean of its pieces' rows.

  Args:
    reader: a checkpoint reader; name: a variable of shape [vocab_size, ...].
    vocab: token -> id; added: list of (slot id, word, pieces).
  """
  value = np.array(reader.get_tensor(name))
  for slot, _, pieces in added:
    value[slot] = value[[vocab[p] for p in pieces]].mean(axis=0)
  return value


def build(bert_dir, input_file, output_dir, min_count=2, max_words=0, do_lower_case=True,
          allow_none=False, skip_chinese=False):
  """Writes output_dir (see the module docstring); returns the added (slot id, word, pieces).

  allow_none: when the text has no word to add, write nothing and return [] instead of raising.
  skip_chinese: when most of the letters of the text's first lines are Chinese (the test
    --masking=domain picks its general list by, word_freq.default_source), write nothing and
    return []: a Chinese vocabulary's slots would take only the text's English words, which
    this step was not measured on.

  input_file: the domain text: a file, or comma-separated files, glob patterns and folders
    (cli.expand_files, as create_pretraining_data.py reads --input_file).

  Raises:
    InputError: a BERT folder without its three files, no input file, a vocabulary without two
      [unusedN] entries, or no word to add; before anything is written.
  """
  config_file, vocab_file, checkpoint = checkpoints.bert_folder(bert_dir)
  input_files = cli.expand_files(input_file, "input_file")
  if min_count < 1 or max_words < 0:
    raise InputError("--min_count takes an integer >= 1 and --max_words one >= 0, got %d and %d"
                     % (min_count, max_words))
  cli.require_output_dir(output_dir, "output_dir", create=False)

  if skip_chinese and (word_freq.default_source(corpus.first_lines(input_files))
                       == word_freq.JIEBA_SOURCE):
    logging.info("%s is mostly Chinese text: no words added, nothing written; start from %s "
                 "itself", input_file, bert_dir)
    return []
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  vocab = tokenizer.vocab
  slots = free_slots(vocab)
  if not slots:
    raise InputError("--bert_dir=%s: vocab.txt has fewer than two [unusedN] entries: none to "
                     "give a word (the last one stays)" % bert_dir)
  words = split_words(input_files, tokenizer, min_count)
  if not words and allow_none:
    logging.info("No word of %s met %d+ times is split by WordPiece: nothing to add, nothing "
                 "written; start from %s itself", input_file, min_count, bert_dir)
    return []
  if not words:
    raise InputError("--input_file=%s: no word met %d+ times that WordPiece splits in pieces "
                     "(Chinese characters are single tokens already)" % (input_file, min_count))
  keep = min(len(slots), max_words or len(slots))
  words, left_out = words[:keep], words[keep:]
  added = [(slot, word, pieces) for slot, (word, _, pieces) in zip(slots, words)]

  tokens = list(vocab)
  for slot, word, _ in added:
    tokens[slot] = word
  reader = tf.train.load_checkpoint(checkpoint)
  replace = {EMBEDDINGS: new_rows(reader, EMBEDDINGS, vocab, added)}
  if reader.has_tensor(OUTPUT_BIAS):
    replace[OUTPUT_BIAS] = new_rows(reader, OUTPUT_BIAS, vocab, added)
  prefix = os.path.join(output_dir, "bert_model.ckpt")
  writes = [
      (prefix, lambda tmp: checkpoints.write_model_weights(checkpoint, tmp, replace=replace)),
      (os.path.join(output_dir, "vocab.txt"),
       atomic_files.text_writer("".join(t + "\n" for t in tokens))),
      (os.path.join(output_dir, "bert_config.json"), atomic_files.copy_writer(config_file)),
      (os.path.join(output_dir, "added_words.tsv"), atomic_files.text_writer(
          "".join("%s\t%d\t%s\n" % (w, c, " ".join(p)) for w, c, p in words))),
  ]
  with cli.writing("output_dir"):
    atomic_files.write_all_atomically(writes)
    tf.train.update_checkpoint_state(output_dir, "bert_model.ckpt",
                                    all_model_checkpoint_paths=["bert_model.ckpt"])
  logging.info("Gave %d split words met %d+ times in %s their own tokens (%d free [unusedN] "
               "entries); wrote %s", len(added), min_count, input_file, len(slots), output_dir)
  if left_out:
    logging.warning(
        "%d more split words met %d+ times did not fit: the first left out is \"%s\" (met %d "
        "times), the last added \"%s\" (met %d times); words met equally often are taken in "
        "alphabetical order. The added words: %s", len(left_out), min_count, left_out[0][0],
        left_out[0][1], words[-1][0], words[-1][1], os.path.join(output_dir, "added_words.tsv"))
  return added
