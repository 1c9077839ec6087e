"""What the Hugging Face conversions of every model family share: both sides' folders and configs.

Two sides, one word each in every function name: "hf" is a transformers model folder
(config.json, model.safetensors, the tokenizer files) and its tensor names; "stock" is a
checkpoint of this project under the names and layouts of Google's released BERT
(bert_model.ckpt, bert_config.json, vocab.txt; ELECTRA's generator/ and
discriminator_predictions/ beside bert/). hf_bert.py and hf_electra.py map the names of one
model family; this module reads and writes the folders, maps the configs (modeling.py's "gelu"
is the tanh approximation, transformers' "gelu_new"), checks tensors against a config, and
writes a conversion's files all together or not at all. The weights file itself is
safetensors_io.py's.
"""

import json
import os

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from core.errors import InputError
from core import atomic_files
from core import json_files
from engine import checkpoints
from engine import cli
import modeling
from serving import safetensors_io
import tokenization


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


# modeling.py activation names -> transformers' (ACT2FN) names of the same function.
_HF_ACTIVATIONS = {"gelu": "gelu_new", "relu": "relu", "tanh": "tanh"}


_SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                   "cls_token": "[CLS]", "mask_token": "[MASK]"}


def read_hf_dir(hf_model_dir, flag):
  """(model.safetensors path, config.json path, config dict) of a Hugging Face model folder."""
  if hf_model_dir and os.path.isdir(hf_model_dir) and not os.path.isfile(
      os.path.join(hf_model_dir, "model.safetensors")) and not os.path.isfile(
          os.path.join(hf_model_dir, "config.json")):
    raise InputError("--%s=%s: no Hugging Face model there (model.safetensors, "
                     "config.json); the folder %s" % (flag, hf_model_dir,
                                                      checkpoints.describe_folder(
                                                          hf_model_dir)))
  weights_path = cli.require_file(os.path.join(hf_model_dir or "", "model.safetensors"),
                                  "%s (model.safetensors)" % flag)
  config_path = cli.require_file(os.path.join(hf_model_dir, "config.json"),
                                 "%s (config.json)" % flag)
  return weights_path, config_path, json_files.read_object(config_path)


def hf_config_to_stock(hf_config, config_path):
  """The modeling.BertConfig of a transformers BERT or ELECTRA config.json dict."""
  if hf_config.get("position_embedding_type", "absolute") != "absolute":
    raise InputError("%s: position_embedding_type=%s; BERT has absolute positions only" %
                     (config_path, hf_config["position_embedding_type"]))
  config = {k: hf_config[k] for k in _CONFIG_KEYS if k in hf_config}
  if "hidden_act" in config:
    act = config["hidden_act"]
    if act not in _STOCK_ACTIVATIONS:
      raise InputError("%s: hidden_act=%s; expected one of %s" %
                       (config_path, act, ", ".join(sorted(_STOCK_ACTIVATIONS))))
    config["hidden_act"] = _STOCK_ACTIVATIONS[act]
  try:
    return modeling.BertConfig.from_dict(config)
  except InputError as e:
    raise InputError("%s: %s" % (config_path, e))


def stock_config_to_hf(bert_config, architecture, model_type):
  """transformers' config.json dict of `bert_config` for one model class."""
  if bert_config.hidden_act not in _HF_ACTIVATIONS:
    raise InputError("hidden_act=%s has no transformers equivalent" % bert_config.hidden_act)
  return dict(bert_config.to_dict(), architectures=[architecture], model_type=model_type,
              hidden_act=_HF_ACTIVATIONS[bert_config.hidden_act], layer_norm_eps=1e-12,
              pad_token_id=0, position_embedding_type="absolute", torch_dtype="float32")


def hf_tensors_to_stock(tensors, name_fn):
  """{stock name: float32 array in the stock layout} of {Hugging Face name: array};
  name_fn(hf name) gives (stock name, transpose?) or None to skip."""
  variables = {}
  for hf_name, value in sorted(tensors.items()):
    mapped = name_fn(hf_name)
    if mapped is None:
      logging.info("skipping %s", hf_name)
      continue
    value = value.T if mapped[1] else value
    variables[mapped[0]] = value.astype(np.float32)
  return variables


def check_tensors_fit(variables, bert_config, what, config_name, scope="bert/"):
  """Raises InputError unless `variables` hold every encoder tensor of bert_config under
  `scope`, each of its shape (the config's sizes and layer count are read from the tensors)."""
  shapes = {name: list(value.shape) for name, value in variables.items()}
  checkpoints.check_shapes_fit(shapes, bert_config, what, config_source=config_name, scope=scope)
  for name, _ in modeling.stock_variable_shapes(bert_config, with_pooler=False):
    name = scope + name[len("bert/"):]
    if name.startswith("generator/embeddings/"):
      continue  # the generator embeds with the discriminator's tables
    if name not in shapes:
      raise InputError("%s lacks %s, which %s (num_hidden_layers=%d) needs" %
                       (what, name, config_name, bert_config.num_hidden_layers))


def load_config_and_vocab(bert_config_file, vocab_file):
  """The BertConfig, checked against the vocabulary's size."""
  bert_config = modeling.BertConfig.from_json_file(
      cli.require_file(bert_config_file, "bert_config_file"))
  check_vocab_size(cli.require_file(vocab_file, "vocab_file"), bert_config, bert_config_file)
  return bert_config


def check_vocab_size(vocab_file, bert_config, config_source):
  """The vocabulary must have vocab_size entries (InputError)."""
  tokenization.require_vocab_size(vocab_file, tokenization.load_vocab(vocab_file),
                                  bert_config.vocab_size, config_source)


def resolve_checkpoint(path):
  """A checkpoint prefix from --checkpoint (a prefix, or a directory's latest checkpoint)."""
  if path and os.path.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if latest:
      return latest
    raise InputError("--checkpoint=%s: no checkpoint there; the folder %s" %
                     (path, checkpoints.describe_folder(path)))
  if not checkpoints.checkpoint_exists(path):
    raise InputError("--checkpoint=%s: no checkpoint there (expected a prefix such as "
                     "out/model.ckpt-1000 with its .index file, or a run's output_dir)" %
                     path)
  return path


def stock_dir_writes(output_dir, bert_config, hf_model_dir):
  """The writes of bert_config.json, and of vocab.txt when the Hugging Face folder has one."""
  writes = [(os.path.join(output_dir, "bert_config.json"),
             atomic_files.text_writer(bert_config.to_json_string()))]
  vocab_path = os.path.join(hf_model_dir, "vocab.txt")
  if os.path.isfile(vocab_path):
    writes.append((os.path.join(output_dir, "vocab.txt"), atomic_files.copy_writer(vocab_path)))
  return writes


def stock_checkpoint_write(variables, prefix):
  """The write of {name: array} (plus global_step 0) as the checkpoint `prefix`."""

  def write(tmp_prefix):
    with tf.Graph().as_default():
      saved = [tf.Variable(value, name=name) for name, value in sorted(variables.items())]
      saver = tf.train.Saver(saved + [tf.train.get_or_create_global_step()])
      with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        saver.save(sess, tmp_prefix, write_meta_graph=False, write_state=False)
    logging.info("Wrote %d variables to %s", len(saved), prefix)

  return prefix, write


def hf_dir_writes(output_dir, tensors, config, vocab_file, do_lower_case, tokenizer_class,
                  model_max_length):
  """The writes of a Hugging Face model folder: model.safetensors, config.json and the WordPiece
  tokenizer's files (vocab.txt, tokenizer_config.json, special_tokens_map.json)."""
  return [
      (os.path.join(output_dir, "model.safetensors"), safetensors_io.writer(tensors)),
      (os.path.join(output_dir, "config.json"), _json_writer(config)),
      (os.path.join(output_dir, "vocab.txt"), atomic_files.copy_writer(vocab_file)),
      (os.path.join(output_dir, "special_tokens_map.json"), _json_writer(_SPECIAL_TOKENS)),
      (os.path.join(output_dir, "tokenizer_config.json"), _json_writer(dict(
          _SPECIAL_TOKENS, tokenizer_class=tokenizer_class, do_lower_case=do_lower_case,
          tokenize_chinese_chars=True, strip_accents=None, model_max_length=model_max_length)))]


def _json_writer(value):
  return atomic_files.text_writer(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def write_outputs(writes, checkpoint_prefixes=()):
  """Writes a converted model's files (atomic_files' (path, write_fn) pairs) all together or
  not at all, then names each checkpoint of `checkpoint_prefixes` in its folder's `checkpoint`
  file. Temporaries of a killed earlier conversion are removed first."""
  for folder in sorted(set(os.path.dirname(path) for path, _ in writes)):
    atomic_files.remove_stale_temporaries(folder)
  with cli.writing("output_dir"):
    atomic_files.write_all_atomically(writes)
    for prefix in checkpoint_prefixes:
      name = os.path.basename(prefix)
      tf.train.update_checkpoint_state(os.path.dirname(prefix), name,
                                       all_model_checkpoint_paths=[name])
