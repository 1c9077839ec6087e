# coding=utf-8
"""Creates masked-LM / next-sentence TFRecords for BERT pretraining, streaming.

Input: plain text, one sentence (or passage) per line, blank lines between documents, utf-8.
Output: TFRecords in the stock google-research/bert layout (see pretraining/records.py), or
unmasked records plus word boundaries for train-time masking (--dynamic_masking).

Differences from stock create_pretraining_data.py, all so that memory stays bounded whatever
the corpus size:
  * The corpus is streamed in chunks of up to 64 documents (or 128 KB of text) and never held
    in memory whole; chunks are tokenized and turned into instances by --num_workers
    processes.
  * The "random next" segment B comes from another document of the same chunk, a bounded
    buffer of neighbouring documents (stock draws from the whole corpus).
  * Instances are shuffled within a window of --shuffle_window instances (stock shuffles all).
    The dupe_factor copies of a chunk are made together, so copies of a document land near
    each other in the output rather than anywhere.
  * Each input file starts a new document (stock lets a document run across files).
  * A document longer than 1 MB is split into parts (counted and logged).
  * A document needs at least 2 tokens to yield an instance (1 with --no_nsp); shorter ones
    are counted and logged, and a corpus with none long enough is an error.
  * --masked_lm_prob counts only maskable tokens, and random replacements never insert
    special tokens (see pretraining/masking.py, which also describes whole-word and n-gram masking).
Each chunk's random numbers come from (random_seed, chunk index, dupe index), so the output is
byte-identical for a given seed whatever --num_workers is. TensorFlow is not needed: records
are framed and serialized here (the tests read them back with TensorFlow).
"""

import collections
import os
import time

from absl import flags
from absl import logging

from core import atomic_files
from core import dropped_input
from core.errors import InputError
from core import formatting
from engine import cli
from pretraining import corpus
from pretraining import instances
from pretraining import masking
from pretraining import record_writer
from pretraining import word_freq

FLAGS = flags.FLAGS


MASKING_CHOICES = masking.STRATEGIES
# --num_workers above this many per CPU is refused (5000 started 5000 processes on 2 cores).
MAX_WORKERS_PER_CPU = 4

# (kind, name, default, help). The single source of the flags and of `Options` defaults.
_FLAG_SPECS = (
    ("string", "input_file", None,
     "Input raw text file, or a comma-separated list of files and glob patterns. utf-8, one "
     "sentence per line, blank lines between documents."),
    ("string", "output_file", None,
     "Output TFRecord file, or a comma-separated list of files: instances are written to them "
     "round-robin."),
    ("string", "vocab_file", None, "The vocabulary file that the BERT model was trained on."),
    ("bool", "do_lower_case", True,
     "Whether to lower case the input text. Should be True for uncased and Chinese models and "
     "False for cased models."),
    ("bool", "do_whole_word_mask", False,
     "Whether to use whole word masking rather than per-WordPiece masking (same as "
     "--masking=whole_word)."),
    ("integer", "max_seq_length", 128, "Maximum sequence length."),
    ("integer", "max_predictions_per_seq", 20,
     "Maximum number of masked LM predictions per sequence."),
    ("integer", "random_seed", 12345,
     "Random seed for data generation. The same seed gives byte-identical output whatever "
     "--num_workers is."),
    ("integer", "dupe_factor", 10,
     "Number of times to duplicate the input data (with different masks, sentence pairings "
     "and lengths). With --dynamic_masking, 1 is usually enough: masks change every epoch."),
    ("float", "masked_lm_prob", 0.15,
     "Masked LM probability: the share of maskable tokens (all but [CLS]/[SEP]/[PAD]) to "
     "predict, capped at --max_predictions_per_seq."),
    ("float", "short_seq_prob", 0.1,
     "Probability of creating sequences which are shorter than the maximum length. Ignored "
     "with --no_nsp, whose instances are always packed full."),
    ("string", "spm_model_file", None,
     "Optional SentencePiece model to tokenize with instead of --vocab_file's WordPiece; it "
     "must contain [CLS], [SEP] and [MASK]."),
    ("string", "masking", "token",
     "Masking strategy, one of token|whole_word|ngram|domain: token = stock per-WordPiece "
     "masking; whole_word = all pieces of a word together (Chinese words need "
     "--chinese_word_segmenter); ngram = spans of 1..--max_ngram whole words with "
     "p(n) proportional to 1/n (MacBERT/SpanBERT); domain = whole words, those of the domain "
     "text that general text lacks first (TF-ICF against --general_word_freq, "
     "Difference-Masking), the same mask rate. --do_whole_word_mask turns token into "
     "whole_word. See pretraining/masking.py for the 80/10/10 rule."),
    ("string", "general_word_freq", None,
     "--masking=domain: the general word list the domain text is scored against. 'vocab': the "
     "model's vocabulary, its whole words ranked as listed (Zipf counts); 'jieba': jieba's "
     "dictionary; unset: jieba when most of the text's letters are Chinese, else vocab; or a "
     "file of utf-8 word<TAB>count lines of general "
     "text in the domain's language (scripts/build_word_freq.py makes one from a corpus you "
     "name). A word's score s = log((G+1)/(g+1)) / log(G+1), g its count and G the total; words "
     "it does not name score 1. Or a scores file from scripts/build_word_loss.py: s is then the "
     "rank of the checkpoint's own masked-LM loss on the word (refused with another "
     "vocabulary). Refused when it names under 10% of the domain text's words, "
     "and 'vocab' for Chinese words."),
    ("float", "domain_temperature", word_freq.DEFAULT_TEMPERATURE,
     "--masking=domain: T > 0 in a word's weight floor + (1 - floor) * s**T; higher favours "
     "the words general text lacks more sharply."),
    ("float", "domain_floor", word_freq.DEFAULT_FLOOR,
     "--masking=domain: the weight of the most ordinary word, in [0, 1], against 1 for a "
     "word general text lacks (1 = whole_word's uniform choice)."),
    ("integer", "max_ngram", 3, "Longest span, in whole words, for --masking=ngram."),
    ("string", "masking_replacement", "mask",
     "What the 80% share of the selected words becomes, one of mask|similar: mask = [MASK] "
     "(stock); similar = a similar word with the same number of word pieces, from "
     "--similar_words_file, or a random word when it lists none (MacBERT's MLM as correction; "
     "never the original). Works with every --masking; see pretraining/masking.py."),
    ("string", "similar_words_file", None,
     "--masking_replacement=similar: utf-8 lines word<TAB>neighbour neighbour ... "
     "(build_similar_words.py makes one from your corpus with word2vec)."),
    ("string", "chinese_word_segmenter", "none",
     "How Chinese text is split into words for whole-word/n-gram masking and for the "
     "word_starts of --dynamic_masking, one of none|jieba|presegmented: none = every "
     "character is a word (stock); jieba = segment with jieba (pip install jieba); "
     "presegmented = the input already separates words with spaces, which define the word "
     "boundaries of CJK text (the spaces themselves are not tokens)."),
    ("bool", "no_nsp", False,
     "Make MLM-only instances without next_sentence_labels: contiguous text from the "
     "sentences of a document, continuing into the next document after a [SEP], packed to "
     "fill max_seq_length (RoBERTa FULL-SENTENCES). Only the last instance of each chunk may "
     "be shorter."),
    ("bool", "dynamic_masking", False,
     "Write unmasked instances plus a word_starts feature instead of masked positions; the "
     "trainer masks each batch anew (masking.mask_batch)."),
    ("integer", "num_workers", 1,
     "Processes that tokenize and build instances. Output does not depend on it."),
    ("integer", "shuffle_window", 10000,
     "Instances are shuffled within a window of this many (memory grows with it); 1 keeps "
     "generation order. The random-next segment B of an instance is drawn from the other "
     "documents in the same chunk of up to %d documents (%d KB), not the whole corpus." %
     (corpus.CHUNK_DOCUMENTS, corpus.CHUNK_BYTES // 1024)),
    ("integer", "log_every_docs", 1000,
     "Log progress (documents, documents/sec, instances, ETA) every this many documents."),
)


class Options(object):
  """The tool's settings: one attribute per flag, defaults as the flags'."""

  def __init__(self, **values):
    for _, name, default, _ in _FLAG_SPECS:
      setattr(self, name, values.pop(name, default))
    if values:
      raise TypeError("unknown option(s): %s" % ", ".join(sorted(values)))

  @property
  def strategy(self):
    """The masking strategy, with --do_whole_word_mask folded in."""
    if self.do_whole_word_mask and self.masking == "token":
      return "whole_word"
    return self.masking

  @property
  def needs_word_starts(self):
    """Whether word boundaries matter: written (dynamic) or used for static masking."""
    return self.dynamic_masking or self.strategy != "token"


def define_flags():
  """Defines the command-line flags from _FLAG_SPECS."""
  for kind, name, default, help_text in _FLAG_SPECS:
    getattr(flags, "DEFINE_" + kind)(name, default, help_text)


def options_from_flags():
  """Options holding the parsed command-line flags."""
  return Options(**{name: getattr(FLAGS, name) for _, name, _, _ in _FLAG_SPECS})


def check_options(opts):
  """Raises InputError naming the flag for settings that cannot work."""
  for name in ("input_file", "output_file"):
    if not getattr(opts, name):
      raise InputError("--%s is required" % name)
  if not opts.vocab_file and not opts.spm_model_file:
    raise InputError("--vocab_file is required")
  if opts.masking not in MASKING_CHOICES:
    raise InputError("--masking=%s: expected one of %s" %
                     (opts.masking, "|".join(MASKING_CHOICES)))
  if opts.masking_replacement not in masking.REPLACEMENTS:
    raise InputError("--masking_replacement=%s: expected one of %s" %
                     (opts.masking_replacement, "|".join(masking.REPLACEMENTS)))
  if opts.masking_replacement == "similar" and not opts.similar_words_file:
    raise InputError("--masking_replacement=similar needs --similar_words_file "
                     "(build_similar_words.py makes one)")
  if opts.masking == "domain":
    word_freq.check_settings(opts.domain_temperature, opts.domain_floor)
  corpus.check_segmenter(opts.chinese_word_segmenter)
  for name in ("max_predictions_per_seq", "dupe_factor", "max_ngram", "num_workers",
               "shuffle_window", "log_every_docs"):
    if getattr(opts, name) < 1:
      raise InputError("--%s=%s: expected an integer >= 1" % (name, getattr(opts, name)))
  cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  if opts.num_workers > MAX_WORKERS_PER_CPU * (cpus or 1):
    raise InputError("--num_workers=%d: this machine gives the run %d CPU(s); more than %d "
                     "workers (%d per CPU) only add memory, each holding the vocabulary and "
                     "segmenter, and start-up time; use --num_workers=%d" %
                     (opts.num_workers, cpus, MAX_WORKERS_PER_CPU * cpus, MAX_WORKERS_PER_CPU,
                      cpus))
  shortest = 3 if opts.no_nsp else 5
  if opts.max_seq_length < shortest:
    raise InputError("--max_seq_length=%d: expected at least %d ([CLS] A [SEP]%s)" %
                     (opts.max_seq_length, shortest, "" if opts.no_nsp else " B [SEP]"))
  if opts.max_predictions_per_seq > opts.max_seq_length:
    raise InputError("--max_predictions_per_seq=%d exceeds --max_seq_length=%d" %
                     (opts.max_predictions_per_seq, opts.max_seq_length))
  if not 0.0 < opts.masked_lm_prob <= 1.0:
    raise InputError("--masked_lm_prob=%s: expected a value in (0, 1]" % opts.masked_lm_prob)
  if not 0.0 <= opts.short_seq_prob <= 1.0:
    raise InputError("--short_seq_prob=%s: expected a value in [0, 1]" % opts.short_seq_prob)


def expand_input_files(patterns):
  """Files named by --input_file (paths, globs, directories; see cli.expand_files), in order;
  each must hold text.

  Raises:
    InputError: a pattern that matches no file, or a file with no non-blank line.
  """
  input_files = cli.expand_files(patterns, "input_file")
  for path in input_files:
    _check_has_text(path)
  return input_files


def _check_has_text(path):
  """Raises InputError unless `path` has a non-blank line (reads only up to the first one)."""
  with open(path, "rb") as reader:
    for raw in reader:
      if raw.strip():
        return
  raise InputError("%s: empty corpus: no text (expected utf-8 text, one sentence per line, "
                   "blank lines between documents)" % path)


# ---------------------------------------------------------------------------------------------
# Writing (in the parent).


class Progress(object):
  """Totals over chunk results, progress lines and the final summary."""

  def __init__(self, total_bytes, log_every_docs):
    self.stats = collections.Counter()
    self.short_documents = []
    self.longest_line = ("", 0, 0)  # (path, line, tokens)
    self.processes = {}  # pid -> (CPU seconds, peak RSS MB) of the processes making chunks.
    self._total_bytes = max(total_bytes, 1)
    self._log_every = log_every_docs
    self._bytes_done = 0
    self._next_log = log_every_docs
    self._start = time.time()

  def add(self, result):
    """Accumulates a ChunkResult; logs progress every log_every_docs documents."""
    longest = max(self.stats["longest_document_tokens"],
                  result.stats["longest_document_tokens"])
    self.stats.update(result.stats)
    self.stats["longest_document_tokens"] = longest
    self._bytes_done += result.nbytes
    if result.longest_line[2] > self.longest_line[2]:
      self.longest_line = result.longest_line
    pid, cpu_seconds, peak_rss_mb = result.process
    self.processes[pid] = (cpu_seconds, peak_rss_mb)
    for path, line, num_tokens in result.short_documents:
      if len(self.short_documents) < instances.NUM_LOGGED_SHORT_DOCUMENTS:
        self.short_documents.append((path, line, num_tokens))
    if self.stats["documents"] >= self._next_log:
      self._next_log += self._log_every * (
          1 + (self.stats["documents"] - self._next_log) // self._log_every)
      self._log_progress()

  @property
  def elapsed(self):
    return max(time.time() - self._start, 1e-9)

  def _log_progress(self):
    fraction = min(self._bytes_done / self._total_bytes, 1.0)
    eta = self.elapsed * (1.0 - fraction) / max(fraction, 1e-9)
    logging.info("%d documents (%.1f documents/sec), %d instances, %.1f%% of input read, "
                 "ETA %s", self.stats["documents"], self.stats["documents"] / self.elapsed,
                 self.stats["instances"], 100.0 * fraction, formatting.format_seconds(eta))


# ---------------------------------------------------------------------------------------------
# Driver.


def run(opts):
  """Creates the pretraining records described by `opts`.

  Returns:
    dict of totals: documents, instances, tokens, masked_share (None with --dynamic_masking),
    short_documents, per_file (list of (path, count)), and the other statistics.

  Raises:
    InputError: bad flags or input. The output files are written under temporary names and
      renamed into place at the end, so after any failure an output file is either absent or
      the one an earlier run left.
  """
  check_options(opts)
  input_files = expand_input_files(opts.input_file)
  output_files = [p.strip() for p in opts.output_file.split(",")]
  for path in output_files:
    cli.require_output_file(path, "output_file")
    if os.path.abspath(path) in [os.path.abspath(p) for p in input_files]:
      raise InputError("--output_file=%s is also an --input_file: it would overwrite the text "
                       "it reads; choose another output path" % path)
    atomic_files.remove_stale_temporaries(os.path.dirname(os.path.abspath(path)))
  if opts.strategy == "domain" and not opts.general_word_freq:  # The text decides; workers too.
    opts.general_word_freq = default_general_word_list(input_files)
    logging.info("--general_word_freq=%s (chosen by the text's script)", opts.general_word_freq)
  featurizer = corpus.Featurizer(opts)  # Checks vocabulary, special tokens and segmenter up front.
  if featurizer.masking.word_weights is not None:
    _check_listed_share(featurizer, input_files)
  _log_settings(opts, input_files, output_files, featurizer)
  return _generate(opts, input_files, output_files, featurizer)


def default_general_word_list(input_files):
  """--general_word_freq for `input_files` when it is not given (word_freq.default_source)."""
  return word_freq.default_source(corpus.first_lines(input_files))


def _check_listed_share(featurizer, input_files):
  """Raises InputError when --general_word_freq names almost none of the words of the first
  word_freq.OVERLAP_SAMPLE_LINES lines of the input (another language or vocabulary)."""
  units = []
  lines = corpus.first_lines(input_files)
  for line in lines:
    units += word_freq.sequence_units(*featurizer.sentence(line))
  where = "the first %d lines of %s" % (len(lines), ", ".join(input_files[:3]))
  share = featurizer.masking.word_weights.check_overlap(units, where)
  logging.info("--general_word_freq names %.1f%% of the words of %s", 100 * share, where)


def _generate(opts, input_files, output_files, featurizer):
  """Streams chunks through the workers into the writer; returns run()'s totals."""
  progress = Progress(sum(os.path.getsize(p) for p in input_files), opts.log_every_docs)
  writer = record_writer.RecordWriter(output_files, opts.shuffle_window, opts.random_seed)
  results = instances.process_chunks(corpus.make_chunks(corpus.read_documents(input_files)), opts, featurizer)
  try:
    for result in results:
      for example in result.examples:
        logging.info("*** Example ***\n%s", example)
      with cli.writing("output_file"):
        for record in result.records:
          writer.add(record)
      progress.add(result)
    if progress.stats["instances"] == 0:
      raise InputError(_no_instance_message(opts, input_files, progress.stats))
    _check_unknown_share(opts, input_files, progress.stats)
    with cli.writing("output_file"):
      writer.close()
  except BaseException:
    writer.discard()
    raise
  finally:
    results.close()
  return _summarize(opts, output_files, writer.counts, progress)


# A corpus with more [UNK] than this share of its maskable tokens is refused: the vocabulary
# does not fit it (another language, a binary or wrongly decoded file); above a tenth, a warning.
MAX_UNKNOWN_SHARE = 0.5


def _check_unknown_share(opts, input_files, stats):
  """Raises InputError when most tokens are [UNK]; warns when many are."""
  share = stats["unknown_tokens"] / float(max(stats["maskable_tokens"], 1))
  vocab = opts.spm_model_file or opts.vocab_file
  if share > MAX_UNKNOWN_SHARE:
    raise InputError("%s: %.0f%% of the tokens are [UNK] with --%s=%s: the vocabulary does "
                     "not fit this text (another language or script, a binary file, or text "
                     "decoded wrongly)" % (", ".join(input_files[:3]), 100 * share,
                                           "spm_model_file" if opts.spm_model_file else
                                           "vocab_file", vocab))
  if share > 0.1:
    logging.warning("%.1f%% of the tokens are [UNK]: is %s the vocabulary of this text?",
                    100 * share, vocab)


def _no_instance_message(opts, input_files, stats):
  """Why nothing was made, naming the files and what an instance needs."""
  names = ", ".join(input_files[:3])
  if len(input_files) > 3:
    names += " and %d more" % (len(input_files) - 3)
  need = instances.min_document_tokens(opts)
  return ("%s: no document is long enough to make an instance: %d document(s), the longest "
          "has %d token(s), an instance needs a document of at least %d token(s)%s" %
          (names, stats["documents"], stats["longest_document_tokens"], need,
           "" if opts.no_nsp else " (or use --no_nsp)"))


def _summarize(opts, output_files, counts, progress):
  """Logs the summary and returns it as a dict."""
  stats = progress.stats
  masked_share = None
  if not opts.dynamic_masking:
    masked_share = stats["masked_tokens"] / max(stats["maskable_tokens"], 1)
  summary = dict(stats)
  summary.update(masked_share=masked_share, per_file=list(zip(output_files, counts)),
                 seconds=progress.elapsed)
  logging.info("Done in %s: %d documents (%.1f documents/sec), %d instances, %d tokens%s",
               formatting.format_seconds(progress.elapsed), stats["documents"],
               stats["documents"] / progress.elapsed, stats["instances"], stats["tokens"],
               "" if masked_share is None else
               ", masked share %.2f%% of non-special tokens" % (100 * masked_share))
  for path, count in summary["per_file"]:
    logging.info("  %s: %d instances", path, count)
  _log_resources(opts, progress, summary)
  for path, line, num_tokens in progress.short_documents:
    logging.warning("%s:%d: document yields no instance (%d tokens, need %d)", path, line,
                    num_tokens, instances.min_document_tokens(opts))
  if stats["short_documents"]:
    logging.warning("%d document(s) yielded no instance (too short); the first %d are listed "
                    "above", stats["short_documents"], len(progress.short_documents))
  _log_caveats(opts, stats)
  _report_cut_tokens(opts, stats, progress.longest_line)
  return summary


def _report_cut_tokens(opts, stats, longest_line):
  """Says how many of the corpus's tokens (counted once per --dupe_factor copy) no instance
  holds, and why: sentence pairs cut to fit --max_seq_length (a line longer than a sequence
  loses its tail), documents too short for an instance."""
  cut = stats["input_tokens"] - stats["kept_tokens"]
  short = stats["short_document_tokens"]
  reasons = []
  if cut > short:
    path, line, tokens = longest_line
    why = ("sentence pairs longer than a sequence lose their ends, as in stock BERT; --no_nsp "
           "packs every token")
    if tokens > opts.max_seq_length - 3:
      why = ("the longest line, %s:%d, has %d tokens, more than a sequence holds: the input "
             "should hold one sentence per line; split long lines, or use --no_nsp, which "
             "packs every token" % (path, line, tokens))
    reasons.append("%d cut to fit --max_seq_length=%d (%s)" % (cut - short,
                                                                opts.max_seq_length, why))
  if short:
    reasons.append("%d in documents too short for an instance" % short)
  dropped_input.report("the input", cut, stats["input_tokens"], "tokens",
                       "are in no instance: %s" % "; ".join(reasons))


def _log_resources(opts, progress, summary):
  """Logs (and records in `summary`) peak memory and, with workers, their CPU time.

  Worker processes are children of the forkserver, so the caller's resource.getrusage does not
  see them; they report their own usage with each chunk instead.
  """
  summary["peak_rss_mb"] = instances.process_usage()[2]
  if opts.num_workers == 1:
    logging.info("peak RSS %.0f MB", summary["peak_rss_mb"])
    return
  usages = list(progress.processes.values()) or [(0.0, 0.0)]
  summary["worker_cpu_seconds"] = sum(cpu for cpu, _ in usages)
  summary["worker_peak_rss_mb"] = max(rss for _, rss in usages)
  logging.info("peak RSS %.0f MB in this process, at most %.0f MB in each of %d workers; "
               "workers used %.1f CPU seconds", summary["peak_rss_mb"],
               summary["worker_peak_rss_mb"], len(progress.processes),
               summary["worker_cpu_seconds"])


def _log_caveats(opts, stats):
  """Warnings about input shapes that quietly hurt the data."""
  if stats["lines_without_tokens"]:
    logging.warning("%d line(s) produced no tokens (e.g. only control characters) and were "
                    "skipped", stats["lines_without_tokens"])
  if stats["split_documents"]:
    logging.warning("%d document part(s) came from documents longer than %d bytes, which were "
                    "split at a line boundary", stats["split_documents"], corpus.MAX_DOCUMENT_BYTES)
  if stats["same_document_random_next"]:
    logging.warning("%d random-next segment(s) came from the same document because its chunk "
                    "held no other document (is the corpus missing blank lines between "
                    "documents?)", stats["same_document_random_next"])
  if not opts.no_nsp and stats["single_sentence_documents"]:
    logging.warning("%d document(s) have a single line, so all their instances are random-next "
                    "(label 1); consider --no_nsp for such corpora",
                    stats["single_sentence_documents"])


def _log_settings(opts, input_files, output_files, featurizer):
  """Logs what will be read and written, and how."""
  logging.info("*** Reading from %d input file(s) ***", len(input_files))
  for path in input_files:
    logging.info("  %s", path)
  logging.info("*** Writing to output files ***")
  for path in output_files:
    logging.info("  %s", path)
  logging.info("records: %s%s; masking: %s; segmenter: %s; vocabulary: %d tokens; "
               "workers: %d", "dynamic (unmasked + word_starts)" if opts.dynamic_masking else
               "static", ", no NSP" if opts.no_nsp else "", _describe_masking(featurizer),
               opts.chinese_word_segmenter, len(featurizer.tokenizer.vocab), opts.num_workers)


def _describe_masking(featurizer):
  """E.g. "ngram" or "ngram, similar words (4,210 words from sim.tsv)"."""
  config = featurizer.masking
  strategy = config.strategy
  if config.word_weights is not None:
    strategy = "domain (general word frequencies: %s)" % config.word_weights.describe()
  if config.replacement != "similar":
    return strategy
  return "%s, similar words (%d words from %s)" % (strategy, len(config.similar_words),
                                                    config.similar_words.source)


def main(_):
  logging.set_verbosity(logging.INFO)
  run(options_from_flags())


if __name__ == "__main__":
  define_flags()
  cli.run_main(main, output_flag="output_file")
