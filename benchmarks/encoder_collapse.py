"""Does a BERT checkpoint's encoder still depend on its input? A check for collapsed pretraining.

A model pretrained too briefly from scratch can settle on predicting the token prior, with an
encoder that gives the same vector for every token of every input; fine-tuning then starts from
nothing to learn from. This prints, per checkpoint, on the first --rows texts of a TSV file:

  [CLS] spread   mean over dimensions of the std of the final [CLS] vector across examples,
                 divided by its mean RMS (0 = the same vector for every input)
  token cosine   mean cosine similarity between 2,000 sampled final token vectors
                 (1 = every token has the same vector)
  token spread   mean over dimensions of the std of the final token vectors across every real
                 token, divided by their mean RMS: encoder_output_spread of an ELECTRA run's
                 eval_results.txt (pretraining/electra.py; a random BERT about 0.82, 0 = one
                 vector for every token)

  python benchmarks/encoder_collapse.py --bert_config_file=scripts/small_chinese_bert_config.json \
    --vocab_file=vocab/chinese_vocab.txt --tsv=$SHARED/classify/chnsenticorp/dev.tsv \
    none output/objective_comparison/pretrain_mlm/export/bert_model.ckpt

`none` stands for random initialisation (seed 1).

With --reference=CHECKPOINT it also says how far each checkpoint's encoder moved from that one
(e.g. continued pretraining from it), on the same texts:

  drift token    mean cosine similarity between the two encoders' final vectors of each real
                 token (1 = unchanged)
  drift text     the same for each text's mean-pooled final vector
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from engine import tf_env  # pylint: disable=unused-import,g-import-not-at-top

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top

import modeling  # pylint: disable=g-import-not-at-top
from pretraining import electra  # pylint: disable=g-import-not-at-top
import tokenization  # pylint: disable=g-import-not-at-top


def encode(tsv, vocab_file, rows, seq_length):
  """The first `rows` texts (column 1) as input_ids and input_mask int32 [rows, seq_length]."""
  tokenizer = tokenization.FullTokenizer(vocab_file, True)
  with open(tsv, encoding="utf-8") as f:
    texts = [line.split("\t")[0] for line in f][:rows]
  ids = np.zeros([len(texts), seq_length], np.int32)
  mask = np.zeros_like(ids)
  for i, text in enumerate(texts):
    tokens = ["[CLS]"] + tokenizer.tokenize(text)[:seq_length - 2] + ["[SEP]"]
    ids[i, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
    mask[i, :len(tokens)] = 1
  return ids, mask


def final_layer(config, checkpoint, ids, mask):
  """The final-layer vectors float32 [rows, seq_length, H] of `checkpoint` ("none": random init)."""
  with tf.Graph().as_default(), tf.Session() as sess:
    tf.set_random_seed(1)
    model = modeling.BertModel(config, False, tf.constant(ids), tf.constant(mask))
    sess.run(tf.global_variables_initializer())
    if checkpoint != "none":
      tf.train.Saver([v for v in tf.global_variables()
                      if v.op.name.startswith("bert/")]).restore(sess, checkpoint)
    return sess.run(model.get_sequence_output())


def measure(sequence, mask):
  """([CLS] spread, token cosine, token spread) of final-layer vectors [rows, L, H]."""
  cls = sequence[:, 0]
  rms = np.mean(np.linalg.norm(cls, axis=1) / np.sqrt(cls.shape[1]))
  spread = float(np.mean(np.std(cls, axis=0)) / rms)
  real = sequence * mask[:, :, None]
  token_spread = electra.output_spread({
      "token_sum": real.sum(axis=1), "token_sumsq": (real ** 2).sum(axis=1),
      "token_rms_sum": np.sqrt(np.mean(real ** 2, axis=-1)).sum(axis=1), "input_mask": mask})
  tokens = sequence[mask.astype(bool)]
  tokens /= np.linalg.norm(tokens, axis=1, keepdims=True)
  sample = tokens[np.random.RandomState(0).choice(len(tokens), min(2000, len(tokens)),
                                                  replace=False)]
  return spread, float(np.mean(sample @ sample.T)), token_spread


def _cosines(a, b):
  """Row-wise cosine similarity of two float arrays [N, H]."""
  return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def drift(sequence, reference, mask):
  """(token cosine, text cosine) between two encoders' final vectors [rows, L, H] of the same
  texts: means over the real tokens, and over the texts' mean-pooled vectors."""
  real = mask.astype(bool)
  pooled = lambda x: (x * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
  return (float(np.mean(_cosines(sequence[real], reference[real]))),
          float(np.mean(_cosines(pooled(sequence), pooled(reference)))))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("checkpoints", nargs="+", help="checkpoint prefixes, or none")
  parser.add_argument("--bert_config_file", required=True)
  parser.add_argument("--vocab_file", required=True)
  parser.add_argument("--tsv", required=True, help="texts in the first column")
  parser.add_argument("--rows", type=int, default=128)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--reference", help="also say how far each encoder moved from this one")
  args = parser.parse_args()
  tf.disable_v2_behavior()
  config = modeling.BertConfig.from_json_file(args.bert_config_file)
  ids, mask = encode(args.tsv, args.vocab_file, args.rows, args.max_seq_length)
  reference = final_layer(config, args.reference, ids, mask) if args.reference else None
  for checkpoint in args.checkpoints:
    sequence = final_layer(config, checkpoint, ids, mask)
    spread, cosine, token_spread = measure(sequence, mask)
    moved = ""
    if reference is not None:
      moved = "  drift token %.3f  drift text %.3f" % drift(sequence, reference, mask)
    print("[CLS] spread %.3f  token cosine %.3f  token spread %.3f%s  %s" % (
        spread, cosine, token_spread, moved, checkpoint))


if __name__ == "__main__":
  main()
