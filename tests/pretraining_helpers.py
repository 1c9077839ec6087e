"""Shared by the pretraining tests: a tiny vocabulary and corpus, and one tower update."""

import json
import random

import tensorflow.compat.v1 as tf

import optimization
import tower_utils
import variable_loading

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
         "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + WORDS


def write_tiny_corpus(root, config, documents, sentences=(2, 5), words=(4, 12)):
  """Writes vocab.txt (VOCAB), corpus.txt (random WORDS sentences) and bert_config.json.

  Args:
    root: pathlib.Path of a directory.
    config: dict for bert_config.json.
    documents: number of documents (blank line after each).
    sentences, words: inclusive ranges of sentences per document and words per sentence.

  Returns:
    dict root, vocab, corpus, config (paths as str, root as given).
  """
  vocab_file = str(root / "vocab.txt")
  with open(vocab_file, "w") as f:
    f.write("\n".join(VOCAB) + "\n")
  rng = random.Random(0)
  corpus = str(root / "corpus.txt")
  with open(corpus, "w") as f:
    for _ in range(documents):
      for _ in range(rng.randint(*sentences)):
        f.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(*words))) + " .\n")
      f.write("\n")
  config_file = str(root / "bert_config.json")
  with open(config_file, "w") as f:
    json.dump(config, f)
  return {"root": root, "vocab": vocab_file, "corpus": corpus, "config": config_file}


def one_update(tower_fn, n_towers, batch, start_values=None):
  """One training step of `tower_fn` on `n_towers` towers (Adam, lr 1e-3).

  Args:
    tower_fn: as for tower_utils.build_towers.
    n_towers: int.
    batch: dict of numpy arrays, the whole batch.
    start_values: optional dict variable name -> value to load before the step.

  Returns:
    (loss, variable values before the step, variable values after it).
  """
  with tf.Graph().as_default() as graph:
    features = {k: tf.constant(v) for k, v in batch.items()}
    towers = tower_utils.build_towers(tower_fn, features, tower_utils.parallel_spec(n_towers))
    train_op, _ = optimization.create_train_op_from_grads(towers.grads_and_vars, 1e-3, 10, 0)
    trainable = {v.op.name: v for v in tf.trainable_variables()}
    with tf.Session(graph=graph, config=tower_utils.session_config(n_towers)) as sess:
      sess.run(tf.global_variables_initializer())
      variable_loading.load(sess, {trainable[name]: value
                                   for name, value in (start_values or {}).items()})
      before = sess.run(trainable)
      loss, _ = sess.run([towers.loss, train_op])
      after = sess.run(trainable)
  return loss, before, after
