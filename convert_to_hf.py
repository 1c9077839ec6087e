"""Converts a checkpoint of this project (or a Google BERT) into a Hugging Face BERT.

  python convert_to_hf.py --checkpoint=out/classifier --bert_config_file=bert_config.json \
    --vocab_file=vocab.txt --output_dir=hf_model

The mirror of convert_hf_checkpoint.py. --checkpoint is a checkpoint prefix or a run's
output_dir (its latest checkpoint). The output directory gets:

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
"""

import json
import os
import shutil
import struct

from absl import flags
from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from engine import checkpoints
from engine import cli
import modeling
import tokenization

FLAGS = flags.FLAGS

flags.DEFINE_string("checkpoint", None,
                    "A checkpoint prefix (e.g. out/model.ckpt-1000, export/bert_model.ckpt) or "
                    "a directory holding checkpoints (its latest one is converted).")
flags.DEFINE_string("bert_config_file", None, "The bert_config.json of the checkpoint.")
flags.DEFINE_string("vocab_file", None, "The WordPiece vocabulary of the checkpoint.")
flags.DEFINE_bool("do_lower_case", True,
                  "Whether the model's tokenizer lower-cases (and strips accents); written to "
                  "tokenizer_config.json.")
flags.DEFINE_string("labels_file", None,
                    "Classifier labels, one per line in output order; default labels.txt beside "
                    "the checkpoint (written by the tsv task). Without one, labels are named "
                    "LABEL_0, LABEL_1, ... as in transformers.")
flags.DEFINE_string("output_dir", None, "Where to write the Hugging Face model.")

# modeling.py activation names -> transformers' (ACT2FN) names of the same function.
_HF_ACTIVATIONS = {"gelu": "gelu_new", "relu": "relu", "tanh": "tanh"}
_SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                   "cls_token": "[CLS]", "mask_token": "[MASK]"}
_CLASSIFIER = ("output_weights", "output_bias")


def stock_name_to_hf(name, prefix):
  """Maps a stock BERT variable name to (Hugging Face name, transpose?), or None to skip it.

  The inverse of convert_hf_checkpoint.hf_name_to_stock, plus the heads.
  """
  if name.endswith(("/adam_m", "/adam_v")) or name == "global_step":
    return None
  if name in _CLASSIFIER:
    return "classifier." + ("weight" if name == "output_weights" else "bias"), False
  if name == "cls/seq_relationship/output_weights":
    return "cls.seq_relationship.weight", False
  if name == "cls/predictions/output_bias":
    return "cls.predictions.bias", False
  transpose = name.endswith("/kernel")
  hf_name = name.replace("/layer_", "/layer/").replace("/", ".")
  for stock, hf in (("kernel", "weight"), ("gamma", "weight"), ("beta", "bias"),
                    ("output_bias", "bias")):
    if hf_name.endswith("." + stock):
      hf_name = hf_name[:-len(stock)] + hf
  if hf_name.startswith("bert.embeddings.") and not hf_name.startswith(
      "bert.embeddings.LayerNorm"):
    hf_name += ".weight"
  if hf_name.startswith("bert."):
    return prefix + hf_name[len("bert."):], transpose
  if hf_name.startswith("cls."):
    return hf_name, transpose
  return None


def write_safetensors(path, tensors):
  """Writes {name: numpy array} as a .safetensors file (header, then raw little-endian data).

  The layout read by convert_hf_checkpoint.read_safetensors: an 8-byte header length, a JSON
  header of dtype, shape and data offsets per tensor, padded with spaces to 8 bytes, the data.
  """
  dtypes = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16",
            np.dtype(np.int64): "I64", np.dtype(np.int32): "I32"}
  header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
  for name in sorted(tensors):
    array = np.ascontiguousarray(tensors[name])
    data = array.astype(array.dtype.newbyteorder("<")).tobytes()
    header[name] = {"dtype": dtypes[array.dtype], "shape": list(array.shape),
                    "data_offsets": [offset, offset + len(data)]}
    chunks.append(data)
    offset += len(data)
  header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
  header_bytes += b" " * (-len(header_bytes) % 8)
  with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(header_bytes)))
    f.write(header_bytes)
    for chunk in chunks:
      f.write(chunk)


def resolve_checkpoint(path):
  """A checkpoint prefix from --checkpoint (a prefix, or a directory's latest checkpoint)."""
  if path and os.path.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if latest:
      return latest
    raise cli.InputError("--checkpoint=%s: the directory holds no checkpoint" % path)
  if not checkpoints.checkpoint_exists(path):
    raise cli.InputError("--checkpoint=%s: no checkpoint there (expected a prefix such as "
                         "out/model.ckpt-1000 with its .index file, or a run's output_dir)" %
                         path)
  return path


def read_labels(labels_file, num_labels):
  """The label names of a classifier with num_labels outputs (see --labels_file)."""
  if not labels_file or not os.path.isfile(labels_file):
    logging.info("No labels file; naming the %d classes LABEL_<i>", num_labels)
    return ["LABEL_%d" % i for i in range(num_labels)]
  with open(labels_file, encoding="utf-8") as f:
    labels = [line.rstrip("\n") for line in f if line.strip()]
  if len(labels) != num_labels:
    raise cli.InputError("%s has %d labels but the checkpoint's classifier has %d outputs" %
                         (labels_file, len(labels), num_labels))
  return labels


def hf_config(bert_config, names, labels):
  """The config.json dict of transformers' BertConfig for a checkpoint with these variables."""
  if bert_config.hidden_act not in _HF_ACTIVATIONS:
    raise cli.InputError("hidden_act=%s has no transformers equivalent" % bert_config.hidden_act)
  if "output_weights" in names:
    architecture = "BertForSequenceClassification"
  elif "cls/seq_relationship/output_weights" in names:
    architecture = "BertForPreTraining"
  elif "cls/predictions/output_bias" in names:
    architecture = "BertForMaskedLM"
  else:
    architecture = "BertModel"
  config = dict(bert_config.to_dict(), architectures=[architecture], model_type="bert",
                hidden_act=_HF_ACTIVATIONS[bert_config.hidden_act], layer_norm_eps=1e-12,
                pad_token_id=0, position_embedding_type="absolute", torch_dtype="float32")
  if labels:
    config["id2label"] = {str(i): label for i, label in enumerate(labels)}
    config["label2id"] = {label: i for i, label in enumerate(labels)}
  return config


def convert(checkpoint, bert_config_file, vocab_file, do_lower_case, labels_file, output_dir):
  """Writes the Hugging Face model of `checkpoint`; returns the number of tensors written."""
  bert_config = modeling.BertConfig.from_json_file(
      cli.require_file(bert_config_file, "bert_config_file"))
  vocab = tokenization.load_vocab(cli.require_file(vocab_file, "vocab_file"))
  if len(vocab) != bert_config.vocab_size:
    raise cli.InputError("%s has %d entries but vocab_size=%d in %s: the vocabulary must be the "
                         "one the model was trained with" % (vocab_file, len(vocab),
                                                             bert_config.vocab_size,
                                                             bert_config_file))
  checkpoint = resolve_checkpoint(checkpoint)
  reader = tf.train.load_checkpoint(checkpoint)
  names = sorted(reader.get_variable_to_shape_map())
  labels = None
  if "output_weights" in names:
    labels_file = labels_file or os.path.join(os.path.dirname(checkpoint), "labels.txt")
    labels = read_labels(labels_file, reader.get_variable_to_shape_map()["output_weights"][0])
  has_head = labels is not None or any(name.startswith("cls/") for name in names)
  tensors = {}
  for name in names:
    mapped = stock_name_to_hf(name, "bert." if has_head else "")
    if mapped is None:
      continue
    value = reader.get_tensor(name)
    tensors[mapped[0]] = value.T if mapped[1] else value

  os.makedirs(output_dir, exist_ok=True)
  write_safetensors(os.path.join(output_dir, "model.safetensors"), tensors)
  _write_json(os.path.join(output_dir, "config.json"), hf_config(bert_config, names, labels))
  shutil.copyfile(vocab_file, os.path.join(output_dir, "vocab.txt"))
  _write_json(os.path.join(output_dir, "special_tokens_map.json"), _SPECIAL_TOKENS)
  _write_json(os.path.join(output_dir, "tokenizer_config.json"), dict(
      _SPECIAL_TOKENS, tokenizer_class="BertTokenizer", do_lower_case=do_lower_case,
      tokenize_chinese_chars=True, strip_accents=None,
      model_max_length=bert_config.max_position_embeddings))
  logging.info("Wrote %d tensors of %s to %s", len(tensors), checkpoint, output_dir)
  return len(tensors)


def _write_json(path, value):
  with open(path, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=2, ensure_ascii=False)
    f.write("\n")


def main(_):
  logging.set_verbosity(logging.INFO)
  if not FLAGS.output_dir:
    raise cli.InputError("--output_dir is required")
  if not FLAGS.checkpoint:
    raise cli.InputError("--checkpoint is required")
  convert(FLAGS.checkpoint, FLAGS.bert_config_file, FLAGS.vocab_file, FLAGS.do_lower_case,
          FLAGS.labels_file, FLAGS.output_dir)


if __name__ == "__main__":
  tf.disable_v2_behavior()
  cli.run_main(main)
