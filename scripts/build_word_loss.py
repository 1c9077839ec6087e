# coding=utf-8
"""Scores the words of your domain text by the checkpoint's own masked-LM loss on them.

  python scripts/build_word_loss.py --bert_dir=$BERT_DIR --input_file=domain.txt \
    --chinese_word_segmenter=jieba --output_file=word_loss.tsv
  # then mask first the words the checkpoint cannot predict:
  python create_pretraining_data.py ... --masking=domain --general_word_freq=word_loss.tsv \
    --chinese_word_segmenter=jieba

Each word of the text is masked in its sentence (at most --max_occurrences times) and scored by
how badly the checkpoint's masked-LM head predicts it: s = min(1, loss / log(vocab_size)).
--masking=domain then weighs a word floor + (1 - floor) * s ** T, as it does a general list's
TF-ICF score. The file's first line names the vocabulary, so a model with another vocabulary
refuses it. The checkpoint must carry its masked-LM head (Google's releases and our exports do;
an encoder converted without it, like all-MiniLM-L6-v2, does not). What it computes:
pretraining/word_loss.py.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# pylint: disable=g-import-not-at-top,wrong-import-position
from core.errors import InputError
from engine import tf_env  # pylint: disable=unused-import  (first: TensorFlow reads it on import)

from absl import logging
import tensorflow.compat.v1 as tf

from core import atomic_files
import create_pretraining_data
from engine import checkpoints
from engine import cli
import modeling
from pretraining import corpus
from pretraining import word_freq
from pretraining import word_loss
import tokenization
# pylint: enable=g-import-not-at-top,wrong-import-position

# (kind, name, default, help); defined only when run as a script.
_FLAG_SPECS = (
    ("string", "bert_dir", None, "The BERT folder you will continue pretraining from: "
     "bert_config.json, vocab.txt and bert_model.ckpt with its masked-LM head (a Google "
     "release or a run's export/)."),
    ("string", "input_file", None, "The domain text, as for create_pretraining_data.py: a file, "
     "or comma-separated files, glob patterns and folders (utf-8, one sentence a line)."),
    ("string", "output_file", None, "Where to write the scores: a first line naming the "
     "vocabulary, then word<TAB>score<TAB>loss<TAB>occurrences lines, highest score first; "
     "pass it as --general_word_freq."),
    ("string", "chinese_word_segmenter", "none",
     "How Chinese text is split into words, as create_pretraining_data.py will split it: none "
     "(every character is a word) | jieba | presegmented (your spaces)."),
    ("bool", "do_lower_case", True, "Lower-case the text, as for an uncased vocabulary."),
    ("integer", "max_seq_length", 128, "Longest input: a longer line keeps the pieces around "
     "the word scored."),
    ("integer", "max_occurrences", 10, "Score each word on at most its first this many "
     "occurrences (the cost grows with it)."),
    ("string", "replacement", word_loss.MASK,
     "What the scored word's pieces become, one of %s: mask = [MASK] (BERT's masked LM, "
     "Google's checkpoints); random = random vocabulary entries (for a checkpoint that never "
     "saw [MASK]: MacBERT-style pretraining, --masking_replacement=similar)." %
     "|".join(word_loss.REPLACEMENTS)),
    ("integer", "random_seed", word_loss.DEFAULT_SEED, "Seed of --replacement=random."),
    ("integer", "batch_size", 64, "Sequences per forward pass."),
)
DEFAULTS = {name: default for _, name, default, _ in _FLAG_SPECS}


def run(**options):
  """Scores the text's words and writes the file; returns the number of words written.

  Raises:
    InputError: a missing flag, file or masked-LM head, a bad number, or a text with no word
      to score; all before the text is scored, and nothing is written.
  """
  opts = dict(DEFAULTS, **options)
  for name in ("bert_dir", "input_file", "output_file"):
    if not opts[name]:
      raise InputError("--%s is required" % name)
  for name in ("max_occurrences", "batch_size"):
    cli.require_positive(opts[name], name)
  if opts["replacement"] not in word_loss.REPLACEMENTS:
    raise InputError("--replacement=%s: expected one of %s" %
                     (opts["replacement"], "|".join(word_loss.REPLACEMENTS)))
  corpus.check_segmenter(opts["chinese_word_segmenter"])
  config_file, vocab_file, checkpoint = checkpoints.bert_folder(opts["bert_dir"])
  cli.require_output_file(opts["output_file"], "output_file")
  input_files = create_pretraining_data.expand_input_files(opts["input_file"])
  bert_config = modeling.BertConfig.from_json_file(config_file)
  if not 3 <= opts["max_seq_length"] <= bert_config.max_position_embeddings:
    raise InputError("--max_seq_length=%d: expected 3 to %d (max_position_embeddings of %s)" %
                     (opts["max_seq_length"], bert_config.max_position_embeddings, config_file))
  featurizer = corpus.Featurizer(create_pretraining_data.Options(
      input_file=opts["input_file"], output_file=opts["output_file"], vocab_file=vocab_file,
      do_lower_case=opts["do_lower_case"], masking="whole_word",
      chinese_word_segmenter=opts["chinese_word_segmenter"]))
  vocab = featurizer.tokenizer.vocab
  tokenization.require_vocab_size(vocab_file, vocab, bert_config.vocab_size, config_file)
  scorer = word_loss.WordScorer(bert_config, checkpoint, opts["bert_dir"])
  start = time.time()
  found = word_loss.occurrences(
      (line for path in input_files for _, line in cli.text_lines(path)), featurizer,
      opts["max_occurrences"], opts["max_seq_length"])
  if not found:
    raise InputError("--input_file=%s: no word to score (only punctuation, numbers or [UNK])"
                     % opts["input_file"])
  logging.info("%d words, %d occurrences to score", len(found),
               sum(len(places) for places in found.values()))
  lines = word_loss.score_lines(
      scorer.score(found, vocab, opts["batch_size"], opts["replacement"], opts["random_seed"]),
      featurizer.tokenizer)
  header = word_freq.scores_header(vocab, source="checkpoint_loss",
                                   max_occurrences=opts["max_occurrences"],
                                   segmenter=opts["chinese_word_segmenter"],
                                   replacement=opts["replacement"])
  with cli.writing("output_file"):
    atomic_files.write_text(opts["output_file"], "".join(l + "\n" for l in [header] + lines))
  logging.info("Wrote %d word scores to %s in %.1f s; highest: %s", len(lines),
               opts["output_file"], time.time() - start,
               ", ".join(line.split("\t")[0] for line in lines[:8]))
  return len(lines)


if __name__ == "__main__":
  tf.disable_v2_behavior()
  cli.run_tool(run, _FLAG_SPECS)
