"""Serves a run's test set from its exported SavedModel and checks it against the run's outputs.

  python benchmarks/serving_bench.py --output_dir=out/my_task --data_dir=my_task --task_name=tsv

Loads <output_dir>/saved_model with tf.saved_model.load (TF2, eager: the way a Python server
would), classifies the test examples through the raw-text signature serving_default, and
prints how many labels equal predict.txt, the largest difference to test_results.tsv, and the
serving throughput in examples/sec at batch 1 and at batch 32 (the mean of the faster half of
the rounds, after one warm-up call per batch shape), then at batch 32 again with one long word
(--long_word_chars letters: a hash, an identifier or a run of letters as users' text has them)
in the first example of every batch. The graph's WordPiece loop takes one piece off every word
per iteration, so a batch costs one iteration per piece of its longest word (180 letters: 108
pieces with Google's Chinese vocabulary, 90 with the English one; a common word takes 1-3): this
round shows what such a word costs a batch. The machine's CPU and instruction set come first.
"""

import os
import sys
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from classifier import data  # pylint: disable=g-import-not-at-top,wrong-import-position
import machine  # pylint: disable=g-import-not-at-top,wrong-import-position
import run_classifier_mgpu  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS

flags.DEFINE_integer("batch1_examples", 200, "Examples served one at a time.")
flags.DEFINE_integer("rounds", 3, "Timed passes per batch size.")
flags.DEFINE_integer("long_word_chars", 180,
                     "Letters of the word added to the first example of each batch in the last "
                     "round (WordPiece's limit is 200; 0 skips the round).")


def _inputs(examples, with_text_b):
  inputs = {"text_a": tf.constant([e.text_a for e in examples])}
  if with_text_b:
    inputs["text_b"] = tf.constant([e.text_b for e in examples])
  return inputs


def serve(signature, examples, batch_size, with_text_b):
  """Probabilities [n, labels] and labels [n] of `examples`, batch by batch."""
  probabilities, labels = [], []
  for start in range(0, len(examples), batch_size):
    outputs = signature(**_inputs(examples[start:start + batch_size], with_text_b))
    probabilities.append(outputs["probabilities"].numpy())
    labels += [label.decode("utf-8") for label in outputs["label"].numpy()]
  return np.concatenate(probabilities), labels


def throughput(signature, examples, batch_size, with_text_b):
  """examples/sec: the mean of the faster half of FLAGS.rounds passes, after a warm-up."""
  serve(signature, examples[:batch_size], batch_size, with_text_b)
  rates = []
  for _ in range(FLAGS.rounds):
    start = time.perf_counter()
    serve(signature, examples, batch_size, with_text_b)
    rates.append(len(examples) / (time.perf_counter() - start))
  return float(np.mean(sorted(rates)[len(rates) // 2:]))


def with_long_words(examples, batch_size, chars):
  """`examples` with a word of `chars` letters appended to text_a of every batch's first one."""
  long_word = ("abcdefghij" * (chars // 10 + 1))[:chars]
  return [data.InputExample(e.guid, "%s %s" % (e.text_a, long_word), e.text_b, e.label)
          if i % batch_size == 0 else e for i, e in enumerate(examples)]


def main(_):
  print("machine: %s" % machine.describe())
  examples = run_classifier_mgpu.get_processor(FLAGS.output_dir).get_test_examples(FLAGS.data_dir)
  model = tf.saved_model.load(os.path.join(FLAGS.output_dir, "saved_model"))
  signature = model.signatures["serving_default"]
  with_text_b = "text_b" in signature.structured_input_signature[1]
  probabilities, labels = serve(signature, examples, 32, with_text_b)
  with open(os.path.join(FLAGS.output_dir, "predict.txt"), encoding="utf-8") as f:
    predicted = f.read().splitlines()
  expected = np.loadtxt(os.path.join(FLAGS.output_dir, "test_results.tsv"), delimiter="\t",
                        ndmin=2)
  print("examples %d: labels equal to predict.txt %d, max |probability - test_results.tsv| "
        "%.2e" % (len(examples), sum(a == b for a, b in zip(labels, predicted)),
                  np.abs(probabilities - expected).max()))
  for batch_size, subset in ((1, examples[:FLAGS.batch1_examples]), (32, examples)):
    print("serving_default batch %d: %.1f examples/sec (%d examples)" % (
        batch_size, throughput(signature, subset, batch_size, with_text_b), len(subset)))
  if FLAGS.long_word_chars:
    print("serving_default batch 32, a %d-letter word in each batch: %.1f examples/sec" % (
        FLAGS.long_word_chars, throughput(
            signature, with_long_words(examples, 32, FLAGS.long_word_chars), 32, with_text_b)))


if __name__ == "__main__":
  app.run(main)
