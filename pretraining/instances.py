# coding=utf-8
"""Token ids to training instances: NSP pairs or packed MLM-only sequences, masked (or not).

The worker side of create_pretraining_data.py: `init_worker` builds one Featurizer per process,
`process_chunk` turns a chunk of documents into serialized tf.train.Example records
(`nsp_instances` for [CLS] A [SEP] B [SEP] with a random-next label, `packed_instances` for
--no_nsp, then masking or, with --dynamic_masking, the word starts), and `process_chunks` runs
chunks on a pool of processes while keeping their order. Each chunk's random numbers come from
(random_seed, chunk index, dupe index), so the output does not depend on the number of workers.
"""

import collections
import os
import multiprocessing
import resource
import signal

import numpy as np

from core import children
from pretraining import corpus
from pretraining import masking
from pretraining import record_writer
import tokenization


# Chunks handed to workers but not yet written, per worker: enough to keep workers busy while
# the parent writes, few enough to bound memory.
_IN_FLIGHT_PER_WORKER = 2


# Instances printed at the start, like stock's "*** Example ***" lines.
_NUM_LOGGED_EXAMPLES = 3


# Documents yielding no instance whose location is logged (all are counted).
NUM_LOGGED_SHORT_DOCUMENTS = 5


Instance = collections.namedtuple("Instance",
                                  ["ids", "segment_ids", "word_starts", "is_random_next"])


def _concat(sentences):
  """Joins (ids, word_starts) sentences into one (ids, word_starts) pair."""
  ids, starts = [], []
  for sentence_ids, sentence_starts in sentences:
    ids.extend(sentence_ids)
    if sentence_starts is not None:
      starts.extend(sentence_starts)
  return ids, starts


def nsp_instances(documents, document_index, rng, opts, featurizer, stats):
  """Stock create_instances_from_document: sentence pairs A/B, B random half of the time.

  Args:
    documents: list of documents, each a list of (ids, word_starts) sentences (the chunk).
    document_index: which document to make instances from.
    rng: numpy.random.Generator.
    opts: Options.
    featurizer: Featurizer (for [CLS]/[SEP] ids).
    stats: collections.Counter, gets "same_document_random_next" and "kept_tokens" (the
      document's own tokens that made it into an instance: A, and B when it is the actual
      next; the rest was cut to fit max_seq_length).

  Returns:
    list of Instance.
  """
  document = documents[document_index]
  max_num_tokens = opts.max_seq_length - 3
  # Usually fill the sequence; sometimes (short_seq_prob) aim shorter, to match fine-tuning.
  target_seq_length = max_num_tokens
  if rng.random() < opts.short_seq_prob:
    target_seq_length = int(rng.integers(2, max_num_tokens + 1))
  instances = []
  current_chunk = []
  current_length = 0
  i = 0
  while i < len(document):
    current_chunk.append(document[i])
    current_length += len(document[i][0])
    if i == len(document) - 1 or current_length >= target_seq_length:
      a_end = 1
      if len(current_chunk) >= 2:
        a_end = int(rng.integers(1, len(current_chunk)))
      segment_a = _concat(current_chunk[:a_end])
      if len(current_chunk) == 1 or rng.random() < 0.5:
        is_random_next = True
        segment_b = _random_segment(documents, document_index,
                                    target_seq_length - len(segment_a[0]), rng, stats)
        # The sentences not used as B go back to the document for the next instance.
        i -= len(current_chunk) - a_end
      else:
        is_random_next = False
        segment_b = _concat(current_chunk[a_end:])
      instance = _pair_instance(segment_a, segment_b, is_random_next, max_num_tokens, rng,
                                featurizer)
      instances.append(instance)
      stats["kept_tokens"] += len(instance.ids) - 3 - (
          instance.segment_ids.count(1) - 1 if is_random_next else 0)
      current_chunk = []
      current_length = 0
    i += 1
  return instances


def _random_segment(documents, document_index, target_length, rng, stats):
  """Stock random-next B: sentences of another document from a random start."""
  for _ in range(10):
    random_index = int(rng.integers(len(documents)))
    if random_index != document_index:
      break
  if random_index == document_index:
    stats["same_document_random_next"] += 1
  random_document = documents[random_index]
  start = int(rng.integers(len(random_document)))
  sentences = []
  length = 0
  for sentence in random_document[start:]:
    sentences.append(sentence)
    length += len(sentence[0])
    if length >= target_length:
      break
  return _concat(sentences)


def truncate_seq_pair(len_a, len_b, max_num_tokens, rng):
  """Stock truncation, as index ranges: drop tokens from the longer of A and B, each time from
  the front or the back at random, until A + B fits.

  Returns:
    (a_start, a_end, b_start, b_end): the kept ranges.
  """
  a_start, a_end, b_start, b_end = 0, len_a, 0, len_b
  excess = len_a + len_b - max_num_tokens
  if excess <= 0:
    return a_start, a_end, b_start, b_end
  for front in (rng.random(excess) < 0.5).tolist():
    if a_end - a_start > b_end - b_start:
      a_start, a_end = (a_start + 1, a_end) if front else (a_start, a_end - 1)
    else:
      b_start, b_end = (b_start + 1, b_end) if front else (b_start, b_end - 1)
  return a_start, a_end, b_start, b_end


def _pair_instance(segment_a, segment_b, is_random_next, max_num_tokens, rng, featurizer):
  """[CLS] A [SEP] B [SEP] after truncation; word_starts 1 on specials and segment starts."""
  (ids_a, starts_a), (ids_b, starts_b) = segment_a, segment_b
  a0, a1, b0, b1 = truncate_seq_pair(len(ids_a), len(ids_b), max_num_tokens, rng)
  cls_id, sep_id = featurizer.cls_id, featurizer.sep_id
  ids = [cls_id] + ids_a[a0:a1] + [sep_id] + ids_b[b0:b1] + [sep_id]
  segment_ids = [0] * (a1 - a0 + 2) + [1] * (b1 - b0 + 1)
  word_starts = None
  if featurizer.opts.needs_word_starts:
    # A piece whose word head was truncated away starts a word of its own.
    word_starts = [1, 1] + starts_a[a0 + 1:a1] + [1, 1] + starts_b[b0 + 1:b1] + [1]
  return Instance(ids, segment_ids, word_starts, is_random_next)


def packed_instances(documents, featurizer):
  """--no_nsp instances: the chunk's token stream cut into full [CLS] ... [SEP] sequences.

  Documents follow each other with a [SEP] between them (RoBERTa FULL-SENTENCES); only the
  last instance of the chunk can be shorter than max_seq_length.
  """
  size = featurizer.opts.max_seq_length - 2
  cls_id, sep_id = featurizer.cls_id, featurizer.sep_id
  with_starts = featurizer.opts.needs_word_starts
  ids, starts = [], []
  instances = []

  def emit(count):
    body_starts = None
    if with_starts:
      body_starts = [1, 1] + starts[1:count] + [1]
    instances.append(Instance([cls_id] + ids[:count] + [sep_id], [0] * (count + 2),
                              body_starts, None))
    del ids[:count]
    del starts[:count]

  for document in documents:
    if ids:
      ids.append(sep_id)
      starts.append(1)
    for sentence_ids, sentence_starts in document:
      ids.extend(sentence_ids)
      starts.extend(sentence_starts or ())
      while len(ids) >= size:
        emit(size)
  if ids:
    emit(len(ids))
  return instances


def instance_features(instance, rng, featurizer, stats):
  """The features of one instance, masked unless --dynamic_masking.

  Returns:
    (features, masked): features a list of (name, serialized Feature) in stock order; masked
    the (masked ids, positions, labels) or None.
  """
  opts = featurizer.opts
  length = len(instance.ids)
  padding = [0] * (opts.max_seq_length - length)
  stats["tokens"] += length
  stats["maskable_tokens"] += (length - instance.ids.count(featurizer.cls_id) -
                               instance.ids.count(featurizer.sep_id))
  stats["unknown_tokens"] += instance.ids.count(featurizer.unk_id)
  masked = None
  input_ids = instance.ids
  if not opts.dynamic_masking:
    masked = masking.mask_sequence(instance.ids, instance.word_starts, rng, featurizer.masking)
    input_ids = masked[0].tolist()
  features = [("input_ids", record_writer.int64_feature(input_ids + padding)),
              ("input_mask", record_writer.int64_feature([1] * length + padding)),
              ("segment_ids", record_writer.int64_feature(instance.segment_ids + padding))]
  if masked is None:
    features.append(("word_starts", record_writer.int64_feature(instance.word_starts + padding)))
  else:
    positions, labels = masked[1].tolist(), masked[2].tolist()
    stats["masked_tokens"] += len(positions)
    empty = opts.max_predictions_per_seq - len(positions)
    features += [("masked_lm_positions", record_writer.int64_feature(positions + [0] * empty)),
                 ("masked_lm_ids", record_writer.int64_feature(labels + [0] * empty)),
                 ("masked_lm_weights", record_writer.float_feature([1.0] * len(positions) + [0.0] * empty))]
  if instance.is_random_next is not None:
    features.append(("next_sentence_labels", record_writer.int64_feature([int(instance.is_random_next)])))
  return features, masked


def describe_instance(instance, masked, featurizer):
  """A multi-line, stock-like description of an instance for the log."""
  to_tokens = featurizer.tokenizer.convert_ids_to_tokens
  ids = instance.ids if masked is None else masked[0].tolist()
  lines = ["tokens: %s" % " ".join(tokenization.printable_text(t) for t in to_tokens(ids)),
           "segment_ids: %s" % " ".join(str(s) for s in instance.segment_ids)]
  if instance.is_random_next is not None:
    lines.append("is_random_next: %s" % instance.is_random_next)
  if masked is None:
    lines.append("word_starts: %s" % " ".join(str(s) for s in instance.word_starts))
  else:
    lines.append("masked_lm_positions: %s" % " ".join(str(p) for p in masked[1].tolist()))
    lines.append("masked_lm_labels: %s" % " ".join(to_tokens(masked[2].tolist())))
  return "\n".join(lines)


ChunkResult = collections.namedtuple(
    "ChunkResult",
    ["index", "records", "stats", "short_documents", "examples", "nbytes", "process",
     "longest_line"])


_FEATURIZER = None  # The worker process's Featurizer, set by init_worker.


def init_worker(opts, run_pid):
  """Pool initializer: builds this process's Featurizer.

  Workers ignore SIGINT: a Ctrl-C reaches the whole process group, and the parent alone stops
  the run (closing the pool ends the workers) and reports it in one line. They die with the run
  `run_pid` (children.follow), `kill -9` included, even inside a chunk.
  """
  global _FEATURIZER
  children.follow(run_pid)
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  _FEATURIZER = corpus.Featurizer(opts)


def min_document_tokens(opts):
  """Fewest tokens a document needs to yield an instance.

  With NSP, 2: stock's shortest target sequence (segment A plus at least one more token);
  with --no_nsp, 1.
  """
  return 1 if opts.no_nsp else 2


def process_chunk(chunk):
  """Tokenizes a chunk and makes its instances for every dupe; runs in a worker.

  Returns:
    ChunkResult: serialized examples in generation order, a Counter of statistics (with
    input_tokens and kept_tokens: the tokens read, counted once per dupe, and those some
    instance holds), the (path, line, tokens) of documents too short for an instance, a few
    printable examples, the worker's (pid, CPU seconds, peak RSS MB) so far, and the (path,
    line, tokens) of the chunk's longest line.
  """
  featurizer = _FEATURIZER
  opts = featurizer.opts
  stats = collections.Counter(documents=len(chunk.documents))
  documents, short_documents = [], []
  longest_line = ("", 0, 0)
  for document in chunk.documents:
    sentences = []
    for offset, line in enumerate(document.lines):
      sentence = featurizer.sentence(line)
      if sentence[0]:
        sentences.append(sentence)
      if len(sentence[0]) > longest_line[2]:
        longest_line = (document.path, document.line + offset, len(sentence[0]))
    stats["lines_without_tokens"] += len(document.lines) - len(sentences)
    num_tokens = sum(len(s[0]) for s in sentences)
    stats["split_documents"] += document.split
    stats["longest_document_tokens"] = max(stats["longest_document_tokens"], num_tokens)
    if num_tokens < min_document_tokens(opts):
      short_documents.append((document.path, document.line, num_tokens))
      continue
    stats["single_sentence_documents"] += len(sentences) == 1
    documents.append(sentences)
  stats["short_documents"] = len(short_documents)
  # Each copy of the chunk reads every token once; the tokens no instance holds were cut.
  document_tokens = sum(len(ids) for sentences in documents for ids, _ in sentences)
  stats["input_tokens"] = opts.dupe_factor * (
      document_tokens + sum(num_tokens for _, _, num_tokens in short_documents))
  stats["short_document_tokens"] = opts.dupe_factor * sum(n for _, _, n in short_documents)
  records, examples = [], []
  for dupe in range(opts.dupe_factor):
    rng = np.random.default_rng([opts.random_seed, chunk.index, dupe])
    if opts.no_nsp:
      instances = packed_instances(documents, featurizer) if documents else []
      stats["kept_tokens"] += document_tokens  # Packed instances hold every token.
    else:
      instances = []
      for index in range(len(documents)):
        instances.extend(nsp_instances(documents, index, rng, opts, featurizer, stats))
    for instance in instances:
      features, masked = instance_features(instance, rng, featurizer, stats)
      records.append(record_writer.serialize_example(features))
      if chunk.index == 0 and len(examples) < _NUM_LOGGED_EXAMPLES:
        examples.append(describe_instance(instance, masked, featurizer))
  stats["instances"] = len(records)
  return ChunkResult(chunk.index, records, stats, short_documents, examples, chunk.nbytes,
                     process_usage(), longest_line)


def process_usage():
  """(pid, CPU seconds, peak RSS in MB) of this process, so far."""
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return os.getpid(), usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0


def process_chunks(chunks, opts, featurizer):
  """Yields ChunkResults in chunk order, from opts.num_workers processes.

  With one worker, chunks are processed here with `featurizer`. Otherwise at most
  _IN_FLIGHT_PER_WORKER chunks per worker are read ahead, so memory stays bounded, and workers
  are forked from a clean forkserver process rather than from this one, because the calling
  process may have imported TensorFlow (tests, the trainer), which is not fork-safe. (So, as
  for any multiprocessing code, a script calling this must guard its entry point with
  `if __name__ == "__main__":`.)

  Args:
    chunks: iterable of Chunk.
    opts: Options.
    featurizer: this process's Featurizer.
  """
  global _FEATURIZER
  if opts.num_workers == 1:
    _FEATURIZER = featurizer
    for chunk in chunks:
      yield process_chunk(chunk)
    return
  context = multiprocessing.get_context("forkserver")
  with context.Pool(opts.num_workers, init_worker, (opts, os.getpid())) as pool:
    pending = collections.deque()
    for chunk in chunks:
      pending.append(pool.apply_async(process_chunk, (chunk,)))
      if len(pending) >= _IN_FLIGHT_PER_WORKER * opts.num_workers:
        yield pending.popleft().get()
    while pending:
      yield pending.popleft().get()
