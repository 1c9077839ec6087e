"""Converts a Hugging Face BERT (model.safetensors + config.json) into a stock BERT checkpoint.

  python convert_hf_checkpoint.py --hf_model_dir=path/to/model --output_dir=minilm_tf

writes `bert_model.ckpt.*`, `bert_config.json` and `vocab.txt` (when the model has one) under the
names and layouts of Google's released checkpoints, so run_*_mgpu.py and stock BERT load it.
Linear weights are transposed (torch stores [out, in], BERT's `kernel` is [in, out]); LayerNorm
weight/bias become gamma/beta. The reader parses safetensors itself (an 8-byte header length, a
JSON header, raw little-endian tensors), so neither torch nor the safetensors package is needed.
Every config field with a tensor behind it (vocab_size, hidden_size, intermediate_size,
max_position_embeddings, type_vocab_size, num_hidden_layers) is checked against the tensors.

An ELECTRA (model_type electra: google/electra-*-discriminator, ElectraForPreTraining or
ElectraModel) becomes the layout of a run's export/: bert_model.ckpt holds the discriminator
(stock bert/ names, so the classifier fine-tunes it) and its discriminator_predictions/ head;
with --hf_generator_dir (google/electra-*-generator), generator/generator.ckpt and
generator_config.json hold the generator. Its embedding_size must equal hidden_size
(ELECTRA-base and -large; ELECTRA-small embeds at 128 with a projection our BERT lacks).

  python convert_hf_checkpoint.py --hf_model_dir=electra-base-discriminator \
    --hf_generator_dir=electra-base-generator --output_dir=electra_tf

The conversion itself is serving/huggingface.py's hf_to_stock (serving/hf_bert.py,
serving/hf_electra.py).
"""

from core.errors import InputError
from engine import tf_env  # pylint: disable=unused-import  (first: TensorFlow reads it on import)

from absl import flags
from absl import logging
import tensorflow.compat.v1 as tf

from engine import cli
from serving import huggingface

FLAGS = flags.FLAGS

flags.DEFINE_string("hf_model_dir", None,
                    "Directory with a Hugging Face BERT: model.safetensors and config.json "
                    "(vocab.txt is copied when present).")
flags.DEFINE_string("hf_generator_dir", None,
                    "ELECTRA only: the generator (ElectraForMaskedLM, e.g. "
                    "google/electra-base-generator) of the discriminator in --hf_model_dir; it "
                    "is written to output_dir/generator/ as a run's export/generator/.")
flags.DEFINE_string("output_dir", None, "Where to write bert_model.ckpt, bert_config.json, "
                    "vocab.txt.")


def main(_):
  logging.set_verbosity(logging.INFO)
  if not FLAGS.hf_model_dir or not FLAGS.output_dir:
    raise InputError("--hf_model_dir and --output_dir are required")
  cli.require_output_dir(FLAGS.output_dir, "output_dir", create=False)
  huggingface.hf_to_stock(FLAGS.hf_model_dir, FLAGS.output_dir, FLAGS.hf_generator_dir)


if __name__ == "__main__":
  tf.disable_v2_behavior()
  cli.run_main(main)
