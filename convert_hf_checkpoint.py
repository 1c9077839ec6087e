"""Converts a Hugging Face BERT (model.safetensors + config.json) into a stock BERT checkpoint.

  python convert_hf_checkpoint.py --hf_model_dir=path/to/model --output_dir=minilm_tf

writes `bert_model.ckpt.*`, `bert_config.json` and `vocab.txt` (when the model has one) under the
names and layouts of Google's released checkpoints, so run_*_mgpu.py and stock BERT load it.
Linear weights are transposed (torch stores [out, in], BERT's `kernel` is [in, out]); LayerNorm
weight/bias become gamma/beta. The reader parses safetensors itself (an 8-byte header length, a
JSON header, raw little-endian tensors), so neither torch nor the safetensors package is needed.
"""

from engine import tf_env  # pylint: disable=unused-import  (first: TensorFlow reads it on import)

import json
import os
import re
import shutil
import struct

from absl import flags
from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from engine import cli

FLAGS = flags.FLAGS

flags.DEFINE_string("hf_model_dir", None,
                    "Directory with a Hugging Face BERT: model.safetensors and config.json "
                    "(vocab.txt is copied when present).")
flags.DEFINE_string("output_dir", None, "Where to write bert_model.ckpt, bert_config.json, "
                    "vocab.txt.")

_SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
                       "BF16": None}
_CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "hidden_act", "hidden_dropout_prob",
                "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
                "initializer_range")

# Hugging Face activation names -> modeling.py's. Its "gelu" is the tanh approximation of the
# released BERT models: transformers' "gelu_new" (and "gelu_pytorch_tanh", "gelu_fast") exactly;
# transformers' "gelu" is the exact erf form, which differs by under 1e-3 anywhere (in 100
# updates of all-MiniLM-L6-v2 the losses drift apart by 2e-3: benchmarks/update_parity.py).
_STOCK_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu",
                      "gelu_fast": "gelu", "relu": "relu", "tanh": "tanh", "linear": "linear"}


def read_safetensors(path):
  """Returns {name: numpy array} for every tensor of a .safetensors file."""
  with open(path, "rb") as f:
    header_len = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(header_len))
    data = f.read()
  tensors = {}
  for name, info in header.items():
    if name == "__metadata__":
      continue
    start, end = info["data_offsets"]
    raw = data[start:end]
    if info["dtype"] == "BF16":
      # bfloat16 is the top half of a float32.
      as_u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
      array = as_u16.view(np.float32)
    elif info["dtype"] in _SAFETENSORS_DTYPES:
      array = np.frombuffer(raw, dtype=np.dtype(_SAFETENSORS_DTYPES[info["dtype"]]).newbyteorder("<"))
    else:
      raise cli.InputError("%s: tensor %s has unsupported dtype %s" % (path, name, info["dtype"]))
    tensors[name] = array.reshape(info["shape"]).astype(
        np.float32 if array.dtype.kind == "f" else array.dtype)
  return tensors


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


def convert(hf_model_dir, output_dir):
  """Writes the stock checkpoint, config and vocab; returns the number of variables written."""
  weights_path = cli.require_file(os.path.join(hf_model_dir, "model.safetensors"),
                                  "hf_model_dir (model.safetensors)")
  config_path = cli.require_file(os.path.join(hf_model_dir, "config.json"),
                                 "hf_model_dir (config.json)")
  with open(config_path, encoding="utf-8") as f:
    hf_config = json.load(f)
  if hf_config.get("position_embedding_type", "absolute") != "absolute":
    raise cli.InputError("%s: position_embedding_type=%s; BERT has absolute positions only" %
                         (config_path, hf_config["position_embedding_type"]))
  config = {k: hf_config[k] for k in _CONFIG_KEYS if k in hf_config}
  if "hidden_act" in config:
    act = config["hidden_act"]
    if act not in _STOCK_ACTIVATIONS:
      raise cli.InputError("%s: hidden_act=%s; expected one of %s" %
                           (config_path, act, ", ".join(sorted(_STOCK_ACTIVATIONS))))
    config["hidden_act"] = _STOCK_ACTIVATIONS[act]
  tf.io.gfile.makedirs(output_dir)
  with open(os.path.join(output_dir, "bert_config.json"), "w") as f:
    json.dump(config, f, indent=2)
  vocab_path = os.path.join(hf_model_dir, "vocab.txt")
  if os.path.isfile(vocab_path):
    shutil.copyfile(vocab_path, os.path.join(output_dir, "vocab.txt"))

  tensors = read_safetensors(weights_path)
  graph = tf.Graph()
  with graph.as_default():
    variables = []
    for hf_name, value in sorted(tensors.items()):
      mapped = hf_name_to_stock(hf_name)
      if mapped is None:
        logging.info("skipping %s", hf_name)
        continue
      stock_name, transpose = mapped
      value = value.T if transpose else value
      variables.append(tf.Variable(value.astype(np.float32), name=stock_name))
    global_step = tf.train.get_or_create_global_step()
    saver = tf.train.Saver(variables + [global_step])
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      saver.save(sess, os.path.join(output_dir, "bert_model.ckpt"), write_meta_graph=False)
  logging.info("Wrote %d variables to %s", len(variables),
               os.path.join(output_dir, "bert_model.ckpt"))
  return len(variables)


def main(_):
  logging.set_verbosity(logging.INFO)
  if not FLAGS.hf_model_dir or not FLAGS.output_dir:
    raise cli.InputError("--hf_model_dir and --output_dir are required")
  convert(FLAGS.hf_model_dir, FLAGS.output_dir)


if __name__ == "__main__":
  tf.disable_v2_behavior()
  cli.run_main(main)
