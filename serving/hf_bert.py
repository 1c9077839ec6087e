"""The BERT family: a transformers BERT <-> a stock BERT checkpoint, both directions.

`hf_to_stock` (convert_hf_checkpoint.py, through huggingface.py) reads a Hugging Face BERT
(model.safetensors + config.json) and writes `bert_model.ckpt.*`, `bert_config.json` and
`vocab.txt` under the names and layouts of Google's released checkpoints, so run_*_mgpu.py and
stock BERT load it. `stock_to_hf` (convert_to_hf.py) is the mirror: a checkpoint of this project
(or a Google BERT) becomes a transformers BertModel / BertForMaskedLM / BertForPreTraining /
BertForSequenceClassification folder (config.json, model.safetensors, tokenizer files).

Linear weights are transposed (torch stores [out, in], BERT's `kernel` is [in, out]); LayerNorm
weight/bias are gamma/beta; output_weights [num_labels, hidden] is already [out, in]. A Hugging
Face BERT converted both ways gives the same tensors bit for bit. Optimizer slots and
global_step are left out. The labels of a classifier (config.json's id2label) come from
labels.txt or its run's run_info.json: `read_labels`.
"""

import os
import re

from absl import logging
import tensorflow.compat.v1 as tf

from core.errors import InputError
from engine import checkpoints
from engine import run_info
from serving import hf_common
from serving import safetensors_io


_CLASSIFIER = ("output_weights", "output_bias")


def hf_name_to_stock(name):
  """Maps a Hugging Face BERT parameter name to (stock name, transpose?), or None to skip it."""
  name = re.sub(r"^bert\.", "", name)
  if name.endswith("position_ids") or not (name.startswith("embeddings.") or
                                            name.startswith("encoder.") or
                                            name.startswith("pooler.")):
    return None
  transpose = False
  name = re.sub(r"^encoder\.layer\.(\d+)\.", r"encoder/layer_\1/", name)
  name = name.replace("embeddings.word_embeddings.weight", "embeddings/word_embeddings")
  name = name.replace("embeddings.position_embeddings.weight", "embeddings/position_embeddings")
  name = name.replace("embeddings.token_type_embeddings.weight",
                      "embeddings/token_type_embeddings")
  if name.endswith("LayerNorm.weight"):
    name = name[:-len("weight")] + "gamma"
  elif name.endswith("LayerNorm.bias"):
    name = name[:-len("bias")] + "beta"
  elif name.endswith(".weight"):
    name = name[:-len("weight")] + "kernel"
    transpose = True
  return "bert/" + name.replace(".", "/"), transpose


def stock_name_to_hf(name, prefix):
  """Maps a stock BERT variable name to (Hugging Face name, transpose?), or None to skip it.

  The inverse of hf_name_to_stock, plus the heads: prefix is "bert." for a model with a
  head (transformers' task models), "" for a bare encoder (BertModel).
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


def hf_to_stock(hf_model_dir, output_dir):
  """A transformers BERT folder -> output_dir/bert_model.ckpt, bert_config.json and vocab.txt
  (when the folder has one); returns the number of variables written.

  The config is checked against the tensors, and the vocabulary against the config, before
  anything is written.
  """
  weights_path, config_path, hf_config = hf_common.read_hf_dir(hf_model_dir, "hf_model_dir")
  bert_config = hf_common.hf_config_to_stock(hf_config, config_path)
  variables = hf_common.hf_tensors_to_stock(safetensors_io.read(weights_path), hf_name_to_stock)
  hf_common.check_tensors_fit(variables, bert_config, weights_path, config_path)
  vocab_path = os.path.join(hf_model_dir, "vocab.txt")
  if os.path.isfile(vocab_path):
    hf_common.check_vocab_size(vocab_path, bert_config, config_path)
  prefix = os.path.join(output_dir, "bert_model.ckpt")
  hf_common.write_outputs(hf_common.stock_dir_writes(output_dir, bert_config, hf_model_dir) +
                          [hf_common.stock_checkpoint_write(variables, prefix)],
                          checkpoint_prefixes=[prefix])
  return len(variables)


def stock_to_hf(checkpoint, bert_config_file, vocab_file, do_lower_case, labels_file, output_dir):
  """Writes the transformers BERT of the stock `checkpoint` (a prefix or a directory) to
  output_dir: config.json (its architecture from the heads found, a classifier's labels from
  read_labels), model.safetensors and the BertTokenizer files. Returns the number of tensors
  written."""
  bert_config = hf_common.load_config_and_vocab(bert_config_file, vocab_file)
  checkpoint = hf_common.resolve_checkpoint(checkpoint)
  what, config_source = "--checkpoint=%s" % checkpoint, "--bert_config_file=%s" % bert_config_file
  checkpoints.check_checkpoint_fits(checkpoint, bert_config, what, complete=True,
                                    config_source=config_source)
  reader = tf.train.load_checkpoint(checkpoint)
  _check_head_shapes(reader.get_variable_to_shape_map(), bert_config, what, config_source)
  names = sorted(reader.get_variable_to_shape_map())
  labels = None
  if "output_weights" in names:
    labels_file = labels_file or os.path.join(os.path.dirname(checkpoint), "labels.txt")
    labels = read_labels(labels_file, reader.get_variable_to_shape_map()["output_weights"][0],
                         run_dir=os.path.dirname(checkpoint))
  has_head = labels is not None or any(name.startswith("cls/") for name in names)
  tensors = {}
  for name in names:
    mapped = stock_name_to_hf(name, "bert." if has_head else "")
    if mapped is None:
      continue
    value = reader.get_tensor(name)
    tensors[mapped[0]] = value.T if mapped[1] else value
  hf_common.write_outputs(hf_common.hf_dir_writes(
      output_dir, tensors, hf_config(bert_config, names, labels), vocab_file, do_lower_case,
      "BertTokenizer", bert_config.max_position_embeddings))
  logging.info("Wrote %d tensors of %s to %s", len(tensors), checkpoint, output_dir)
  return len(tensors)


def _check_head_shapes(shapes, bert_config, what, config_source):
  """The pretraining and classifier heads of a checkpoint must fit bert_config (InputError)."""
  h = bert_config.hidden_size
  expected = {"cls/predictions/output_bias": [bert_config.vocab_size],
              "cls/predictions/transform/dense/kernel": [h, h],
              "cls/predictions/transform/dense/bias": [h],
              "cls/predictions/transform/LayerNorm/gamma": [h],
              "cls/predictions/transform/LayerNorm/beta": [h],
              "cls/seq_relationship/output_weights": [2, h],
              "cls/seq_relationship/output_bias": [2]}
  if "output_weights" in shapes:
    num_labels = shapes["output_weights"][0]
    expected.update(output_weights=[num_labels, h], output_bias=[num_labels])
  for name, shape in sorted(expected.items()):
    if name in shapes and list(shapes[name]) != shape:
      raise InputError("%s: variable %s has shape %s there but %s under hidden_size=%d, "
                       "vocab_size=%d in %s" % (what, name, list(shapes[name]), shape, h,
                                                 bert_config.vocab_size, config_source))


def hf_config(bert_config, names, labels):
  """The config.json dict of transformers' BertConfig for a checkpoint with these variables."""
  if "output_weights" in names:
    architecture = "BertForSequenceClassification"
  elif "cls/seq_relationship/output_weights" in names:
    architecture = "BertForPreTraining"
  elif "cls/predictions/output_bias" in names:
    architecture = "BertForMaskedLM"
  else:
    architecture = "BertModel"
  config = hf_common.stock_config_to_hf(bert_config, architecture, "bert")
  if labels:
    config["id2label"] = {str(i): label for i, label in enumerate(labels)}
    config["label2id"] = {label: i for i, label in enumerate(labels)}
  return config


def read_labels(labels_file, num_labels, run_dir=None):
  """The label names of a classifier with num_labels outputs, in class id order.

  From `labels_file` (--labels_file, or the run's labels.txt) when it exists, else from the
  label list the run recorded in its run_info.json (every classifier run does, stock GLUE/XNLI
  tasks included), else LABEL_<i>.
  """
  source = labels_file if labels_file and os.path.isfile(labels_file) else None
  recorded = (run_info.read(run_dir) or {}).get("labels") if run_dir else None
  if source:
    with open(source, encoding="utf-8") as f:
      labels = [line.rstrip("\n") for line in f if line.strip()]
    if recorded and labels != recorded:
      raise InputError("%s holds the labels %s but the run of the checkpoint was trained "
                       "with %s (%s): class i would get another name; leave out "
                       "--labels_file" % (source, labels, recorded, os.path.join(
                           run_dir, run_info.FILE_NAME)))
  else:
    labels = recorded
    source = os.path.join(run_dir or "", run_info.FILE_NAME)
  if not labels:
    logging.info("No labels file and no labels in run_info.json; naming the %d classes "
                 "LABEL_<i>", num_labels)
    return ["LABEL_%d" % i for i in range(num_labels)]
  if len(labels) != num_labels:
    raise InputError("%s has %d labels but the checkpoint's classifier has %d outputs" %
                     (source, len(labels), num_labels))
  return labels
