# coding=utf-8
"""Baseline for benchmarks: the stock google-research/bert create_pretraining_data algorithm.

Single process, whole corpus in memory, as stock does it: read and tokenize every document,
shuffle the documents, make dupe_factor passes of instances (string tokens, Python `random`),
shuffle all instances, then write tf.train.Examples. Written for this repository so that
benchmarks/pretraining_data_bench.py can compare speed and peak memory with
create_pretraining_data.py; it is not meant for real use.

Usage: python benchmarks/stock_pretraining_data.py --input_file=a.txt --output_file=a.tfrecord
    --vocab_file=vocab/chinese_vocab.txt [--dupe_factor=10 ...]
"""

import argparse
import collections
import os
import random
import sys

import tensorflow as tf  # Imported at start-up, as stock does: part of its wall clock.

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tokenization  # pylint: disable=g-import-not-at-top,wrong-import-position

Instance = collections.namedtuple(
    "Instance", ["tokens", "segment_ids", "is_random_next", "positions", "labels"])


def read_documents(input_files, tokenizer):
  """All documents of all files: lists of tokenized lines (stock: one big list)."""
  documents = [[]]
  for path in input_files:
    with open(path, encoding="utf-8") as reader:
      for line in reader:
        line = line.strip()
        if not line:
          documents.append([])
          continue
        tokens = tokenizer.tokenize(line)
        if tokens:
          documents[-1].append(tokens)
  return [d for d in documents if d]


def masked_lm(tokens, args, vocab_words, rng):
  """Stock create_masked_lm_predictions (per-WordPiece masking)."""
  candidates = [i for i, t in enumerate(tokens) if t not in ("[CLS]", "[SEP]")]
  rng.shuffle(candidates)
  wanted = min(args.max_predictions_per_seq,
               max(1, int(round(len(tokens) * args.masked_lm_prob))))
  output = list(tokens)
  chosen = sorted(candidates[:wanted])
  for index in chosen:
    if rng.random() < 0.8:
      output[index] = "[MASK]"
    elif rng.random() >= 0.5:
      output[index] = vocab_words[rng.randint(0, len(vocab_words) - 1)]
  return output, chosen, [tokens[i] for i in chosen]


def document_instances(documents, index, args, vocab_words, rng):
  """Stock create_instances_from_document."""
  document = documents[index]
  max_tokens = args.max_seq_length - 3
  target = rng.randint(2, max_tokens) if rng.random() < args.short_seq_prob else max_tokens
  instances, chunk, size, i = [], [], 0, 0
  while i < len(document):
    chunk.append(document[i])
    size += len(document[i])
    if i == len(document) - 1 or size >= target:
      split = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
      first = [t for sentence in chunk[:split] for t in sentence]
      second = []
      is_random_next = len(chunk) == 1 or rng.random() < 0.5
      if is_random_next:
        other = index
        for _ in range(10):
          other = rng.randint(0, len(documents) - 1)
          if other != index:
            break
        for sentence in documents[other][rng.randint(0, len(documents[other]) - 1):]:
          second.extend(sentence)
          if len(second) >= target - len(first):
            break
        i -= len(chunk) - split
      else:
        second = [t for sentence in chunk[split:] for t in sentence]
      while len(first) + len(second) > max_tokens:
        longer = first if len(first) > len(second) else second
        longer.pop(0 if rng.random() < 0.5 else -1)
      tokens = ["[CLS]"] + first + ["[SEP]"] + second + ["[SEP]"]
      segment_ids = [0] * (len(first) + 2) + [1] * (len(second) + 1)
      tokens, positions, labels = masked_lm(tokens, args, vocab_words, rng)
      instances.append(Instance(tokens, segment_ids, is_random_next, positions, labels))
      chunk, size = [], 0
    i += 1
  return instances


def write_examples(instances, tokenizer, args):
  """Stock write_instance_to_example_files, one output file."""

  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  with tf.io.TFRecordWriter(args.output_file) as writer:
    for instance in instances:
      pad = [0] * (args.max_seq_length - len(instance.tokens))
      empty = [0] * (args.max_predictions_per_seq - len(instance.positions))
      features = collections.OrderedDict()
      features["input_ids"] = ints(tokenizer.convert_tokens_to_ids(instance.tokens) + pad)
      features["input_mask"] = ints([1] * len(instance.tokens) + pad)
      features["segment_ids"] = ints(instance.segment_ids + pad)
      features["masked_lm_positions"] = ints(instance.positions + empty)
      features["masked_lm_ids"] = ints(tokenizer.convert_tokens_to_ids(instance.labels) + empty)
      features["masked_lm_weights"] = tf.train.Feature(float_list=tf.train.FloatList(
          value=[1.0] * len(instance.positions) + [0.0] * len(empty)))
      features["next_sentence_labels"] = ints([int(instance.is_random_next)])
      writer.write(tf.train.Example(
          features=tf.train.Features(feature=features)).SerializeToString())


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--input_file", required=True, help="Comma-separated text files.")
  parser.add_argument("--output_file", required=True, help="One output TFRecord file.")
  parser.add_argument("--vocab_file", required=True, help="WordPiece vocabulary.")
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--max_predictions_per_seq", type=int, default=20)
  parser.add_argument("--random_seed", type=int, default=12345)
  parser.add_argument("--dupe_factor", type=int, default=10)
  parser.add_argument("--masked_lm_prob", type=float, default=0.15)
  parser.add_argument("--short_seq_prob", type=float, default=0.1)
  args = parser.parse_args()
  tokenizer = tokenization.FullTokenizer(args.vocab_file)
  rng = random.Random(args.random_seed)
  documents = read_documents(args.input_file.split(","), tokenizer)
  rng.shuffle(documents)
  vocab_words = list(tokenizer.vocab.keys())
  instances = []
  for _ in range(args.dupe_factor):
    for index in range(len(documents)):
      instances.extend(document_instances(documents, index, args, vocab_words, rng))
  rng.shuffle(instances)
  write_examples(instances, tokenizer, args)
  print("documents=%d instances=%d" % (len(documents), len(instances)))


if __name__ == "__main__":
  main()
