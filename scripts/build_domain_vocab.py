# coding=utf-8
"""Gives the words of your domain text that the checkpoint splits into pieces tokens of their own.

  python scripts/build_domain_vocab.py --bert_dir=$BERT_DIR --input_file=domain.txt \
    --output_dir=domain_start
  # then continue pretraining from domain_start/ (its vocab.txt and bert_model.ckpt):
  python create_pretraining_data.py ... --vocab_file=domain_start/vocab.txt --masking=domain
  python run_pretraining_mgpu.py ... --vocab_file=domain_start/vocab.txt \
    --bert_config_file=domain_start/bert_config.json \
    --init_checkpoint=domain_start/bert_model.ckpt

The vocabulary's [unusedN] entries become the text's split words (most frequent first, met at
least --min_count times), each started at the mean of its pieces' embeddings; the vocabulary
keeps its size, so stock BERT loads the result. English (WordPiece) words only: BERT reads
Chinese text as single characters. What it writes: pretraining/domain_vocab.py.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# pylint: disable=g-import-not-at-top,wrong-import-position
from core.errors import InputError
from engine import tf_env  # pylint: disable=unused-import  (first: TensorFlow reads it on import)

from absl import flags
from absl import logging
import tensorflow.compat.v1 as tf

from engine import cli
from pretraining import domain_vocab
# pylint: enable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS

# (kind, name, default, help); defined only when run as a script, so that tests can import this
# module beside run scripts that define flags of the same names.
_FLAG_SPECS = (
    ("string", "bert_dir", None, "The BERT folder to start from: bert_config.json, vocab.txt "
     "and bert_model.ckpt (a Google release, convert_hf_checkpoint.py's output or a run's "
     "export/)."),
    ("string", "input_file", None, "The domain text whose split words get tokens, as for "
     "create_pretraining_data.py: a file, or comma-separated files, glob patterns and folders "
     "(utf-8)."),
    ("string", "output_dir", None, "Where to write the new BERT folder: vocab.txt, "
     "bert_model.ckpt, bert_config.json and added_words.tsv (word, count, pieces)."),
    ("integer", "min_count", 2, "Give a token only to words met at least this many times."),
    ("integer", "max_words", 0, "Add at most this many words (0: as many as the vocabulary has "
     "[unusedN] entries but one: 993 in Google's English vocabularies)."),
    ("bool", "do_lower_case", True, "Lower-case the text, as for an uncased vocabulary."),
    ("bool", "allow_none", False, "When the text has no such word, write nothing and exit 0 "
     "instead of failing: for scripts that then start from --bert_dir itself "
     "(scripts/pretrain_domain.sh)."),
    ("bool", "skip_chinese", False, "Write nothing and exit 0 when most of the text's letters "
     "are Chinese (the test --masking=domain picks jieba by): a Chinese vocabulary's [unusedN] "
     "slots would take only the text's English words, a step measured on English text only."),
)


def main(_):
  logging.set_verbosity(logging.INFO)
  for flag in ("bert_dir", "input_file", "output_dir"):
    if not getattr(FLAGS, flag):
      raise InputError("--%s is required" % flag)
  domain_vocab.build(FLAGS.bert_dir, FLAGS.input_file, FLAGS.output_dir, FLAGS.min_count,
                     FLAGS.max_words, FLAGS.do_lower_case, FLAGS.allow_none, FLAGS.skip_chinese)


if __name__ == "__main__":
  for kind, name, default, help_text in _FLAG_SPECS:
    getattr(flags, "DEFINE_" + kind)(name, default, help_text)
  tf.disable_v2_behavior()
  cli.run_main(main)
