"""Converts a checkpoint of this project (or a Google BERT) into a Hugging Face BERT.

  python convert_to_hf.py --checkpoint=out/classifier --output_dir=hf_model

The mirror of convert_hf_checkpoint.py. --checkpoint is a checkpoint prefix or a run's
output_dir (its latest checkpoint). --bert_config_file, --vocab_file and --do_lower_case default
to the run's (the files beside an export/ checkpoint, else those its run_info.json names); a
config or vocabulary other than the run's is refused (heads or an activation of another config
fit the tensors and would give other logits). A checkpoint without a run (a Google release)
needs them given. The output directory gets:

  config.json              BertConfig of transformers; `architectures` from the heads found:
                           BertForSequenceClassification (output_weights/output_bias, with
                           id2label/label2id from labels.txt), BertForPreTraining
                           (cls/predictions + cls/seq_relationship), BertForMaskedLM
                           (cls/predictions) or BertModel (none)
  model.safetensors        the weights, float32, written here (no torch or safetensors package)
  vocab.txt, tokenizer_config.json, special_tokens_map.json   the BertTokenizer files

Linear kernels are transposed to torch's [out, in], gamma/beta become LayerNorm weight/bias;
output_weights [num_labels, hidden] is already [out, in]. Models with a head get the `bert.`
prefix of transformers' task models, a bare encoder is saved as transformers' BertModel saves
it, so a Hugging Face BERT converted with convert_hf_checkpoint.py and back gives the same
tensors bit for bit. modeling.py's "gelu" is the tanh approximation, transformers' "gelu_new".
Optimizer slots (adam_m, adam_v) and global_step are left out.

An ELECTRA of run_pretraining_mgpu.py --objective=electra (its output_dir, a checkpoint of it,
or its export/bert_model.ckpt with export/generator/ beside) is written as two transformers
models, their shapes checked against the configs first:

  output_dir/discriminator/  ElectraForPreTraining (the model, with its replaced-token head)
  output_dir/generator/      ElectraForMaskedLM (generator_lm_head tied to the shared table)

each with config.json (model_type electra, embedding_size = the discriminator's hidden_size),
model.safetensors and the tokenizer files (tokenizer_class ElectraTokenizer). The conversion
itself is serving/huggingface.py's stock_to_hf (serving/hf_bert.py, serving/hf_electra.py).

  python convert_to_hf.py --checkpoint=domain_electra/export/bert_model.ckpt \
    --bert_config_file=domain_electra/export/bert_config.json \
    --vocab_file=domain_electra/export/vocab.txt --output_dir=hf_electra
"""

from core.errors import InputError
from engine import tf_env  # pylint: disable=unused-import  (first: TensorFlow reads it on import)

from absl import flags
from absl import logging
import tensorflow.compat.v1 as tf

from engine import cli
from serving import huggingface

FLAGS = flags.FLAGS

flags.DEFINE_string("checkpoint", None,
                    "A checkpoint prefix (e.g. out/model.ckpt-1000, export/bert_model.ckpt) or "
                    "a directory holding checkpoints (its latest one is converted).")
flags.DEFINE_string("bert_config_file", None,
                    "The bert_config.json of the checkpoint. Default: the one beside it "
                    "(export/), else the one its run recorded in run_info.json; a config other "
                    "than the run's is refused.")
flags.DEFINE_string("vocab_file", None,
                    "The WordPiece vocabulary of the checkpoint. Default: vocab.txt beside it "
                    "(export/), else the one its run recorded in run_info.json; a vocabulary "
                    "other than the run's is refused.")
flags.DEFINE_bool("do_lower_case", True,
                  "Whether the model's tokenizer lower-cases (and strips accents); written to "
                  "tokenizer_config.json. Default: the casing its run recorded, else true.")
flags.DEFINE_string("labels_file", None,
                    "Classifier labels, one per line in output order; default labels.txt beside "
                    "the checkpoint (written by the tsv task). Without one, labels are named "
                    "LABEL_0, LABEL_1, ... as in transformers.")
flags.DEFINE_string("output_dir", None, "Where to write the Hugging Face model (an ELECTRA: "
                    "its discriminator/ and generator/ folders).")
flags.DEFINE_string("generator_config_file", None,
                    "ELECTRA only: the generator's config; default generator_config.json of "
                    "export/generator/ (or generator/ beside --checkpoint), else the "
                    "generator_config the run recorded in its run_info.json.")


def main(_):
  logging.set_verbosity(logging.INFO)
  if not FLAGS.output_dir:
    raise InputError("--output_dir is required")
  if not FLAGS.checkpoint:
    raise InputError("--checkpoint is required")
  cli.require_output_dir(FLAGS.output_dir, "output_dir", create=False)
  huggingface.stock_to_hf(FLAGS.checkpoint, FLAGS.bert_config_file, FLAGS.vocab_file,
                          FLAGS.do_lower_case if FLAGS["do_lower_case"].present else None,
                          FLAGS.labels_file, FLAGS.output_dir, FLAGS.generator_config_file)


if __name__ == "__main__":
  tf.disable_v2_behavior()
  cli.run_main(main)
