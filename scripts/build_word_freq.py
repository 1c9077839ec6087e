# coding=utf-8
"""Builds --general_word_freq for domain-aware masking (--masking=domain) from a corpus you name.

  python scripts/build_word_freq.py --input_file='general/*.txt' --output_file=general_freq.tsv
  python scripts/build_word_freq.py --input_file=news_zh.txt --output_file=general_zh.tsv \
    --chinese_word_segmenter=jieba

The corpus should be general text of the domain text's language (news, books, an encyclopedia:
what the checkpoint was trained on, roughly), not the domain text itself. It is split into words
the way the masking splits them (corpus.word_splitter: BERT's basic tokenizer's words and
punctuation marks; Chinese words from --chinese_word_segmenter, which should be the one
create_pretraining_data.py will use), and each word seen at least --min_count times is written as
`word<TAB>count`, most frequent first. The list does not depend on a vocabulary: one list serves
every model of the language (pass the same --do_lower_case). Nothing is downloaded.
"""

import os
import sys
import time

from absl import logging

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from core import atomic_files  # pylint: disable=g-import-not-at-top,wrong-import-position
from core.errors import InputError
from engine import cli
from pretraining import corpus
from pretraining import word_freq

# (kind, name, default, help); defined only when run as a script.
_FLAG_SPECS = (
    ("string", "input_file", None,
     "General corpus: a file, or a comma-separated list of files, globs and directories "
     "(utf-8 text, one sentence or passage a line)."),
    ("string", "output_file", None, "Where to write the word<TAB>count lines."),
    ("string", "chinese_word_segmenter", "none",
     "How Chinese text is split into words, as create_pretraining_data.py: none (every "
     "character is a word) | jieba | presegmented (your spaces)."),
    ("bool", "do_lower_case", True, "Lower-case the text (as the model's tokenizer)."),
    ("integer", "min_count", 1, "Leave out words seen fewer times than this."),
)
DEFAULTS = {name: default for _, name, default, _ in _FLAG_SPECS}


def run(**options):
  """Counts the words of the corpus and writes the list; returns the number of words written.

  Raises:
    InputError: a missing flag or file, bad utf-8, or a corpus with no word.
  """
  opts = dict(DEFAULTS, **options)
  for name in ("input_file", "output_file"):
    if not opts[name]:
      raise InputError("--%s is required" % name)
  cli.require_positive(opts["min_count"], "min_count")
  corpus.check_segmenter(opts["chinese_word_segmenter"])
  cli.require_output_file(opts["output_file"], "output_file")
  input_files = cli.expand_files(opts["input_file"], "input_file")
  start = time.time()
  counts = word_freq.count_words(
      input_files, corpus.word_splitter(opts["chinese_word_segmenter"], opts["do_lower_case"]))
  kept = {w: c for w, c in counts.items() if c >= opts["min_count"]}
  if not kept:
    raise InputError("%s: no word seen --min_count=%d times" % (
        ", ".join(input_files[:3]), opts["min_count"]))
  lines = list(word_freq.count_lines(kept))

  def write(tmp_path):
    with open(tmp_path, "w", encoding="utf-8") as writer:
      for line in lines:
        writer.write(line + "\n")

  with cli.writing("output_file"):
    atomic_files.write_atomically(opts["output_file"], write)
  logging.info("Wrote %d words (%d occurrences; %d words seen fewer than %d times left out) "
               "from %d file(s) to %s in %.1f s", len(lines), sum(kept.values()),
               len(counts) - len(kept), opts["min_count"], len(input_files),
               opts["output_file"], time.time() - start)
  return len(lines)


if __name__ == "__main__":
  cli.run_tool(run, _FLAG_SPECS)
