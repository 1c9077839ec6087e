"""Hugging Face BERT and ELECTRA <-> stock BERT checkpoints: names, layouts, configs, safetensors.

`hf_to_bert` (convert_hf_checkpoint.py) reads a Hugging Face BERT (model.safetensors +
config.json) and writes `bert_model.ckpt.*`, `bert_config.json` and `vocab.txt` under the names
and layouts of Google's released checkpoints, so run_*_mgpu.py and stock BERT load it.
`bert_to_hf` (convert_to_hf.py) is the mirror: a checkpoint of this project (or a Google BERT)
becomes a transformers BertModel / BertForMaskedLM / BertForPreTraining /
BertForSequenceClassification directory (config.json, model.safetensors, tokenizer files).

ELECTRA (pretraining/electra_model.py's variables) goes both ways too: `electra_to_hf` writes a
run as transformers' ElectraForPreTraining (discriminator/) and ElectraForMaskedLM (generator/),
and `hf_electra_to_ours` reads google/electra-*-style folders into the layout of a run's
export/ (bert_model.ckpt; generator/generator.ckpt). Every config field with a tensor behind it
is checked against the tensors before anything is written.

Linear weights are transposed (torch stores [out, in], BERT's `kernel` is [in, out]); LayerNorm
weight/bias are gamma/beta; output_weights [num_labels, hidden] is already [out, in]. The
safetensors format (an 8-byte header length, a JSON header, raw little-endian tensors) is read
and written here, so neither torch nor the safetensors package is needed. A Hugging Face BERT
or ELECTRA converted both ways gives the same tensors bit for bit. modeling.py's "gelu" is the
tanh approximation, transformers' "gelu_new". Optimizer slots and global_step are left out.
"""

import json
import os
import re
import struct

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from core import atomic_files
from engine import checkpoints
from engine import cli
from engine import run_info
import modeling
import tokenization


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


def hf_to_bert(hf_model_dir, output_dir, hf_generator_dir=None):
  """Writes the stock checkpoint, config and vocab; returns the number of variables written.

  An ELECTRA (config.json's model_type "electra") goes to hf_electra_to_ours, with its generator
  when `hf_generator_dir` is given.
  """
  weights_path, config_path, hf_config = _read_hf_dir(hf_model_dir, "hf_model_dir")
  if hf_config.get("model_type") == "electra":
    return hf_electra_to_ours(hf_model_dir, output_dir, hf_generator_dir)
  if hf_generator_dir:
    raise cli.InputError("--hf_generator_dir is for ELECTRA, but %s has model_type=%s" %
                         (config_path, hf_config.get("model_type")))
  bert_config = _stock_config(hf_config, config_path)
  variables = _map_tensors(read_safetensors(weights_path), hf_name_to_stock)
  _check_tensors_fit(variables, bert_config, weights_path, config_path)
  vocab_path = os.path.join(hf_model_dir, "vocab.txt")
  if os.path.isfile(vocab_path):
    _check_vocab_size(vocab_path, bert_config, config_path)
  prefix = os.path.join(output_dir, "bert_model.ckpt")
  _write_outputs(_stock_dir_writes(output_dir, bert_config, hf_model_dir) +
                 [_checkpoint_write(variables, prefix)], checkpoint_prefixes=[prefix])
  return len(variables)


def _read_hf_dir(hf_model_dir, flag):
  """(model.safetensors path, config.json path, config dict) of a Hugging Face model folder."""
  if hf_model_dir and os.path.isdir(hf_model_dir) and not os.path.isfile(
      os.path.join(hf_model_dir, "model.safetensors")) and not os.path.isfile(
          os.path.join(hf_model_dir, "config.json")):
    raise cli.InputError("--%s=%s: no Hugging Face model there (model.safetensors, "
                         "config.json); the folder %s" % (flag, hf_model_dir,
                                                          checkpoints.describe_folder(
                                                              hf_model_dir)))
  weights_path = cli.require_file(os.path.join(hf_model_dir or "", "model.safetensors"),
                                  "%s (model.safetensors)" % flag)
  config_path = cli.require_file(os.path.join(hf_model_dir, "config.json"),
                                 "%s (config.json)" % flag)
  with open(config_path, encoding="utf-8") as f:
    try:
      hf_config = json.load(f)
    except ValueError as e:
      raise cli.InputError("%s: not valid JSON (%s)" % (config_path, e))
  return weights_path, config_path, hf_config


def _stock_config(hf_config, config_path):
  """The modeling.BertConfig of a transformers BERT or ELECTRA config.json dict."""
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
  try:
    return modeling.BertConfig.from_dict(config)
  except cli.InputError as e:
    raise cli.InputError("%s: %s" % (config_path, e))


def _map_tensors(tensors, name_fn):
  """{our name: float32 array in our layout} of {Hugging Face name: array}; name_fn(hf name)
  gives (our name, transpose?) or None to skip."""
  variables = {}
  for hf_name, value in sorted(tensors.items()):
    mapped = name_fn(hf_name)
    if mapped is None:
      logging.info("skipping %s", hf_name)
      continue
    value = value.T if mapped[1] else value
    variables[mapped[0]] = value.astype(np.float32)
  return variables


def _check_tensors_fit(variables, bert_config, what, config_name, scope="bert/"):
  """Raises InputError unless `variables` hold every encoder tensor of bert_config under
  `scope`, each of its shape (the config's sizes and layer count are read from the tensors)."""
  shapes = {name: list(value.shape) for name, value in variables.items()}
  checkpoints.check_shapes_fit(shapes, bert_config, what, config_source=config_name, scope=scope)
  for name, _ in modeling.stock_variable_shapes(bert_config, with_pooler=False):
    name = scope + name[len("bert/"):]
    if name.startswith("generator/embeddings/"):
      continue  # the generator embeds with the discriminator's tables
    if name not in shapes:
      raise cli.InputError("%s lacks %s, which %s (num_hidden_layers=%d) needs" %
                           (what, name, config_name, bert_config.num_hidden_layers))


def _write_outputs(writes, checkpoint_prefixes=()):
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


def _stock_dir_writes(output_dir, bert_config, hf_model_dir):
  """The writes of bert_config.json, and of vocab.txt when the Hugging Face folder has one."""
  writes = [(os.path.join(output_dir, "bert_config.json"),
             atomic_files.text_writer(bert_config.to_json_string()))]
  vocab_path = os.path.join(hf_model_dir, "vocab.txt")
  if os.path.isfile(vocab_path):
    writes.append((os.path.join(output_dir, "vocab.txt"), atomic_files.copy_writer(vocab_path)))
  return writes


def _checkpoint_write(variables, prefix):
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


# ELECTRA (pretraining/electra_model.py) <-> transformers' ElectraForPreTraining (the
# discriminator) and ElectraForMaskedLM (the generator). bert/... maps as BERT's encoder does,
# under "electra."; the shared bert/embeddings/ go to both models; generator/encoder/ is the
# generator's encoder; bert/pooler/ has no ELECTRA counterpart (it is never trained). The rest:
_ELECTRA_HEADS = (
    ("generator", "generator/embeddings_project/kernel", "electra.embeddings_project.weight"),
    ("generator", "generator/embeddings_project/bias", "electra.embeddings_project.bias"),
    ("generator", "generator/cls/predictions/transform/dense/kernel",
     "generator_predictions.dense.weight"),
    ("generator", "generator/cls/predictions/transform/dense/bias",
     "generator_predictions.dense.bias"),
    ("generator", "generator/cls/predictions/transform/LayerNorm/gamma",
     "generator_predictions.LayerNorm.weight"),
    ("generator", "generator/cls/predictions/transform/LayerNorm/beta",
     "generator_predictions.LayerNorm.bias"),
    ("generator", "generator/cls/predictions/output_bias", "generator_lm_head.bias"),
    ("discriminator", "discriminator_predictions/dense/kernel",
     "discriminator_predictions.dense.weight"),
    ("discriminator", "discriminator_predictions/dense/bias",
     "discriminator_predictions.dense.bias"),
    ("discriminator", "discriminator_predictions/output/kernel",
     "discriminator_predictions.dense_prediction.weight"),
    ("discriminator", "discriminator_predictions/output/bias",
     "discriminator_predictions.dense_prediction.bias"),
)
ELECTRA_MODELS = ("discriminator", "generator")


def electra_name_to_hf(name):
  """Maps a variable of our ELECTRA to its transformers tensors.

  Returns:
    list of (model, Hugging Face name, transpose?), model "discriminator" or "generator"; two
    entries for a shared embedding, none for bert/pooler/, Adam slots and global_step.
  """
  for model, ours, hf in _ELECTRA_HEADS:
    if name == ours:
      return [(model, hf, ours.endswith("/kernel"))]
  if name.startswith("generator/encoder/"):
    mapped = stock_name_to_hf("bert/" + name[len("generator/"):], "electra.")
    return [("generator",) + mapped] if mapped else []
  if not name.startswith("bert/") or name.startswith("bert/pooler/"):
    return []
  mapped = stock_name_to_hf(name, "electra.")
  if not mapped:
    return []
  models = ELECTRA_MODELS if name.startswith("bert/embeddings/") else ("discriminator",)
  return [(model,) + mapped for model in models]


def electra_hf_name_to_ours(hf_name, model):
  """Maps a tensor of a transformers ELECTRA `model` ("discriminator" or "generator") to
  (our variable name, transpose?), or None to skip it. Names with or without the "electra."
  prefix of the task models (a bare ElectraModel is saved without it) are read."""
  name = re.sub(r"^electra\.", "", hf_name)
  for head_model, ours, hf in _ELECTRA_HEADS:
    if model == head_model and name == re.sub(r"^electra\.", "", hf):
      return ours, ours.endswith("/kernel")
  mapped = hf_name_to_stock(name)
  if mapped is None or mapped[0].startswith("bert/pooler/"):
    return None
  ours, transpose = mapped
  if model == "generator" and ours.startswith("bert/encoder/"):
    ours = "generator/" + ours[len("bert/"):]
  return ours, transpose


# Beside an ELECTRA's bert_model.ckpt, as pretraining/electra.py's export writes them in export/
# (serving may not import pretraining; tests/test_electra_prior.py converts a real export).
GENERATOR_DIR = "generator"
GENERATOR_CKPT = "generator.ckpt"
GENERATOR_CONFIG = "generator_config.json"


def electra_head_shapes(bert_config, gen_config):
  """{our name: shape} of the ELECTRA variables outside the two encoders."""
  h, hg = bert_config.hidden_size, gen_config.hidden_size
  return {"discriminator_predictions/dense/kernel": [h, h],
          "discriminator_predictions/dense/bias": [h],
          "discriminator_predictions/output/kernel": [h, 1],
          "discriminator_predictions/output/bias": [1],
          "generator/embeddings_project/kernel": [h, hg],
          "generator/embeddings_project/bias": [hg],
          "generator/cls/predictions/transform/dense/kernel": [hg, h],
          "generator/cls/predictions/transform/dense/bias": [h],
          "generator/cls/predictions/transform/LayerNorm/gamma": [h],
          "generator/cls/predictions/transform/LayerNorm/beta": [h],
          "generator/cls/predictions/output_bias": [bert_config.vocab_size]}


def _check_electra_fits(variables, bert_config, gen_config, what, config_name, gen_config_name):
  """_check_tensors_fit for the discriminator and, when `gen_config` is given, the generator and
  its head; the heads' shapes against the configs."""
  _check_tensors_fit(variables, bert_config, what, config_name)
  if gen_config is not None:
    _check_tensors_fit(variables, gen_config, what, gen_config_name, scope="generator/")
  for name, shape in electra_head_shapes(bert_config, gen_config or bert_config).items():
    if name.startswith("generator/") and gen_config is None:
      continue
    if name.startswith("generator/") and name not in variables:
      raise cli.InputError("%s lacks %s (the generator's, %s)" % (what, name, gen_config_name))
    if name in variables and list(variables[name].shape) != shape:
      raise cli.InputError("%s: %s has shape %s but %s and %s give %s" %
                           (what, name, list(variables[name].shape), config_name,
                            gen_config_name, shape))


def hf_electra_to_ours(hf_model_dir, output_dir, hf_generator_dir=None):
  """A transformers ELECTRA discriminator (ElectraForPreTraining or ElectraModel, as
  google/electra-*-discriminator) -> our layout: output_dir/bert_model.ckpt (bert/... and, with
  the head, discriminator_predictions/...), bert_config.json, vocab.txt. With
  `hf_generator_dir` (an ElectraForMaskedLM, as google/electra-*-generator), also
  output_dir/generator/generator.ckpt (generator/... plus the shared bert/embeddings/) and
  generator_config.json, as a run's export/ holds them. Returns the number of variables.
  """
  weights_path, config_path, hf_config = _read_hf_dir(hf_model_dir, "hf_model_dir")
  if "ElectraForMaskedLM" in (hf_config.get("architectures") or []):
    raise cli.InputError("%s is an ELECTRA generator (ElectraForMaskedLM); pass the "
                         "discriminator as --hf_model_dir and this one as --hf_generator_dir" %
                         config_path)
  bert_config = _stock_config(hf_config, config_path)
  _check_embedding_size(hf_config, bert_config.hidden_size, config_path,
                        "hidden_size=%d: this project's ELECTRA (stock BERT) embeds at the "
                        "model's width, with no embeddings_project" % bert_config.hidden_size)
  variables = _map_tensors(read_safetensors(weights_path),
                           lambda name: electra_hf_name_to_ours(name, "discriminator"))
  gen_config = None
  if hf_generator_dir:
    gen_weights, gen_config_path, gen_hf_config = _read_hf_dir(hf_generator_dir,
                                                               "hf_generator_dir")
    gen_config = _stock_config(gen_hf_config, gen_config_path)
    _check_embedding_size(gen_hf_config, bert_config.hidden_size, gen_config_path,
                          "the discriminator's hidden_size=%d: the two share their embedding "
                          "tables" % bert_config.hidden_size)
    generator = read_safetensors(gen_weights)
    _check_tied(generator, gen_weights)
    gen_variables = _map_tensors(generator,
                                 lambda name: electra_hf_name_to_ours(name, "generator"))
    for name, value in gen_variables.items():
      if name in variables and not np.array_equal(value, variables[name]):
        raise cli.InputError("%s: %s differs from the discriminator's (%s); this project's "
                             "ELECTRA shares one copy of the embeddings" %
                             (gen_weights, name, weights_path))
    variables.update(gen_variables)
  _check_electra_fits(variables, bert_config, gen_config, "model.safetensors of %s" % (
      " and ".join(filter(None, (hf_model_dir, hf_generator_dir)))), config_path,
                      hf_generator_dir and os.path.join(hf_generator_dir, "config.json"))
  prefixes = [os.path.join(output_dir, "bert_model.ckpt")]
  parts = [{n: v for n, v in variables.items() if not n.startswith("generator/")}]
  writes = _stock_dir_writes(output_dir, bert_config, hf_model_dir)
  if gen_config is not None:
    gen_dir = os.path.join(output_dir, GENERATOR_DIR)
    prefixes.append(os.path.join(gen_dir, GENERATOR_CKPT))
    parts.append({n: v for n, v in variables.items()
                  if n.startswith(("generator/", "bert/embeddings/"))})
    writes.append((os.path.join(gen_dir, GENERATOR_CONFIG),
                   atomic_files.text_writer(gen_config.to_json_string())))
  _write_outputs(writes + [_checkpoint_write(part, prefix)
                           for part, prefix in zip(parts, prefixes)], prefixes)
  return sum(len(part) for part in parts)


def _check_embedding_size(hf_config, width, config_path, why):
  """Raises InputError unless config.json's embedding_size (transformers' default: 128) is
  `width`."""
  embedding_size = hf_config.get("embedding_size", 128)
  if embedding_size != width:
    raise cli.InputError("%s: embedding_size=%s but %s" % (config_path, embedding_size, why))


def _check_tied(generator, path):
  """Raises InputError when a saved generator_lm_head.weight is not the word table (ours ties
  them, as ELECTRA does)."""
  head = generator.get("generator_lm_head.weight")
  table = generator.get("electra.embeddings.word_embeddings.weight")
  if head is not None and table is not None and not np.array_equal(head, table):
    raise cli.InputError("%s: generator_lm_head.weight is not the word embedding table; this "
                         "project's ELECTRA ties them" % path)


def is_electra(checkpoint):
  """Whether the checkpoint `checkpoint` (a prefix or a directory) is an ELECTRA of this
  project: it holds discriminator_predictions/ or generator/, or has a generator/ folder beside
  it (export/)."""
  checkpoint = resolve_checkpoint(checkpoint)
  names = [name for name, _ in tf.train.list_variables(checkpoint)]
  return any(name.startswith(("discriminator_predictions/", "generator/")) for name in names) or (
      checkpoints.checkpoint_exists(_generator_checkpoint(checkpoint)))


def _generator_checkpoint(checkpoint):
  return os.path.join(os.path.dirname(checkpoint), GENERATOR_DIR, GENERATOR_CKPT)


def _read_variables(checkpoint):
  """{name: array} of a checkpoint's model variables (no Adam slot, no global_step)."""
  reader = tf.train.load_checkpoint(checkpoint)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name != "global_step" and not name.endswith(("/adam_m", "/adam_v"))}


def _generator_config(checkpoint, generator_config_file):
  """(generator BertConfig, where it came from): --generator_config_file, else
  generator_config.json beside the generator (export/generator/), else the run's
  run_info.json."""
  run_dir = os.path.dirname(checkpoint)
  candidates = [generator_config_file] if generator_config_file else [
      os.path.join(run_dir, GENERATOR_DIR, GENERATOR_CONFIG),
      os.path.join(run_dir, checkpoints.EXPORT_DIR, GENERATOR_DIR, GENERATOR_CONFIG)]
  for path in candidates:
    if os.path.isfile(path) or generator_config_file:
      return modeling.BertConfig.from_json_file(path), path
  recorded = (run_info.read(run_dir) or {}).get("generator_config")
  if recorded:
    return modeling.BertConfig.from_dict(recorded), os.path.join(run_dir, run_info.FILE_NAME)
  raise cli.InputError("%s holds an ELECTRA generator but no generator_config.json was found "
                       "(looked in %s and %s's run_info.json); pass --generator_config_file" %
                       (checkpoint, " and ".join(candidates), run_dir))


def _export_warning_writes(checkpoint, hf_dir):
  """The copy of export/WARNING.txt of the checkpoint's run (beside it, or in its export/) into
  `hf_dir`, so that the warning travels with the model: [] without one."""
  run_dir = os.path.dirname(checkpoint)
  for path in (os.path.join(run_dir, checkpoints.EXPORT_WARNING),
               os.path.join(run_dir, checkpoints.EXPORT_DIR, checkpoints.EXPORT_WARNING)):
    if os.path.isfile(path):
      logging.warning("%s: copied to %s", path, hf_dir)
      return [(os.path.join(hf_dir, checkpoints.EXPORT_WARNING), atomic_files.copy_writer(path))]
  return []


def electra_to_hf(checkpoint, bert_config_file, vocab_file, do_lower_case, output_dir,
                  generator_config_file=None):
  """Writes an ELECTRA of this project as transformers models: output_dir/discriminator/
  (ElectraForPreTraining; ElectraModel when the checkpoint has no discriminator head) and, when
  it has a generator, output_dir/generator/ (ElectraForMaskedLM); each with config.json,
  model.safetensors and the tokenizer files. Returns the number of tensors written."""
  bert_config = _load_config_and_vocab(bert_config_file, vocab_file)
  checkpoint = resolve_checkpoint(checkpoint)
  variables = _read_variables(checkpoint)
  what = checkpoint
  beside = _generator_checkpoint(checkpoint)
  if not any(n.startswith("generator/") for n in variables) and (
      checkpoints.checkpoint_exists(beside)):
    generator = _read_variables(beside)
    for name, value in generator.items():
      if name in variables and not np.array_equal(value, variables[name]):
        raise cli.InputError("%s: %s differs from %s's" % (beside, name, checkpoint))
    variables.update(generator)
    what = "%s and %s" % (checkpoint, beside)
  gen_config, gen_config_name = None, None
  if any(n.startswith("generator/") for n in variables):
    gen_config, gen_config_name = _generator_config(checkpoint, generator_config_file)
    if gen_config.hidden_size == bert_config.hidden_size:
      raise cli.InputError("%s: the generator is as wide as the discriminator; transformers' "
                           "ElectraForMaskedLM has no embeddings_project then" % gen_config_name)
  _check_electra_fits(variables, bert_config, gen_config, what, bert_config_file,
                      gen_config_name)
  models, written = {model: {} for model in ELECTRA_MODELS}, 0
  for name, value in sorted(variables.items()):
    for model, hf_name, transpose in electra_name_to_hf(name):
      models[model][hf_name] = value.T if transpose else value
  writes = []
  for model, tensors in models.items():
    if model == "generator" and gen_config is None:
      continue
    if model == "generator":
      architecture, config = "ElectraForMaskedLM", gen_config
    elif "discriminator_predictions.dense.weight" in tensors:
      architecture, config = "ElectraForPreTraining", bert_config
    else:  # export/ of an older run: the encoder only, saved as transformers saves ElectraModel
      architecture, config = "ElectraModel", bert_config
      tensors = {name[len("electra."):]: value for name, value in tensors.items()}
    hf = _hf_base_config(config, architecture, "electra")
    hf["embedding_size"] = bert_config.hidden_size
    hf["tie_word_embeddings"] = True
    writes += _hf_dir_writes(os.path.join(output_dir, model), tensors, hf, vocab_file,
                             do_lower_case, "ElectraTokenizer",
                             bert_config.max_position_embeddings)
    written += len(tensors)
  discriminator_dir = os.path.join(output_dir, "discriminator")
  warning = _export_warning_writes(checkpoint, discriminator_dir)
  _write_outputs(writes + warning)
  if not warning:  # One written by an earlier conversion into this folder no longer holds.
    atomic_files.remove_quietly(os.path.join(discriminator_dir, checkpoints.EXPORT_WARNING))
  logging.info("Wrote %d tensors of %s to %s", written, what, output_dir)
  return written


def safetensors_chunks(tensors):
  """{name: numpy array} as the bytes of a .safetensors file (header, then raw little-endian
  data): a list of bytes, for atomic_files.bytes_writer.

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
  return [struct.pack("<Q", len(header_bytes)), header_bytes] + chunks


def resolve_checkpoint(path):
  """A checkpoint prefix from --checkpoint (a prefix, or a directory's latest checkpoint)."""
  if path and os.path.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if latest:
      return latest
    raise cli.InputError("--checkpoint=%s: no checkpoint there; the folder %s" %
                         (path, checkpoints.describe_folder(path)))
  if not checkpoints.checkpoint_exists(path):
    raise cli.InputError("--checkpoint=%s: no checkpoint there (expected a prefix such as "
                         "out/model.ckpt-1000 with its .index file, or a run's output_dir)" %
                         path)
  return path


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
      raise cli.InputError("%s holds the labels %s but the run of the checkpoint was trained "
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
    raise cli.InputError("%s has %d labels but the checkpoint's classifier has %d outputs" %
                         (source, len(labels), num_labels))
  return labels


def _hf_base_config(bert_config, architecture, model_type):
  """transformers' config.json dict of `bert_config` for one model class."""
  if bert_config.hidden_act not in _HF_ACTIVATIONS:
    raise cli.InputError("hidden_act=%s has no transformers equivalent" % bert_config.hidden_act)
  return dict(bert_config.to_dict(), architectures=[architecture], model_type=model_type,
              hidden_act=_HF_ACTIVATIONS[bert_config.hidden_act], layer_norm_eps=1e-12,
              pad_token_id=0, position_embedding_type="absolute", torch_dtype="float32")


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
  config = _hf_base_config(bert_config, architecture, "bert")
  if labels:
    config["id2label"] = {str(i): label for i, label in enumerate(labels)}
    config["label2id"] = {label: i for i, label in enumerate(labels)}
  return config


def _load_config_and_vocab(bert_config_file, vocab_file):
  """The BertConfig, checked against the vocabulary's size."""
  bert_config = modeling.BertConfig.from_json_file(
      cli.require_file(bert_config_file, "bert_config_file"))
  _check_vocab_size(cli.require_file(vocab_file, "vocab_file"), bert_config, bert_config_file)
  return bert_config


def _check_vocab_size(vocab_file, bert_config, config_source):
  """The vocabulary must have vocab_size entries (InputError)."""
  tokenization.require_vocab_size(vocab_file, tokenization.load_vocab(vocab_file),
                                  bert_config.vocab_size, config_source)


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
      raise cli.InputError("%s: variable %s has shape %s there but %s under hidden_size=%d, "
                           "vocab_size=%d in %s" % (what, name, list(shapes[name]), shape, h,
                                                     bert_config.vocab_size, config_source))


def checkpoint_to_hf(checkpoint, bert_config_file, vocab_file, do_lower_case, labels_file,
                     output_dir, generator_config_file=None):
  """convert_to_hf.py: electra_to_hf for an ELECTRA (is_electra), else bert_to_hf.

  The config, vocabulary and casing not given come from the run that wrote the checkpoint
  (run_model_files); do_lower_case None: not given.
  """
  bert_config_file, vocab_file, do_lower_case = run_model_files(
      resolve_checkpoint(checkpoint), bert_config_file, vocab_file, do_lower_case)
  if is_electra(checkpoint):
    logging.info("%s is an ELECTRA: writing %s/discriminator and %s/generator", checkpoint,
                 output_dir, output_dir)
    return electra_to_hf(checkpoint, bert_config_file, vocab_file, do_lower_case, output_dir,
                         generator_config_file)
  return bert_to_hf(checkpoint, bert_config_file, vocab_file, do_lower_case, labels_file,
                    output_dir)


def run_dir_of(checkpoint):
  """The run directory whose run_info.json describes the checkpoint prefix `checkpoint` (its
  folder, or the folder above export/), or None."""
  folder = os.path.dirname(checkpoint)
  candidates = [folder]
  if os.path.basename(folder) == checkpoints.EXPORT_DIR:
    candidates.append(os.path.dirname(folder))
  return next((d for d in candidates if run_info.read(d) is not None), None)


def run_model_files(checkpoint, bert_config_file, vocab_file, do_lower_case):
  """(bert_config_file, vocab_file, do_lower_case) of the checkpoint prefix `checkpoint`.

  Files not given are the ones beside the checkpoint (export/'s bert_config.json and vocab.txt),
  else those its run recorded in run_info.json; casing not given (None) is the run's, else True.
  Given or not, the config and the vocabulary must be the run's (InputError otherwise): a config
  of other heads or another activation fits the tensors and gives other logits, silently.
  """
  run_dir = run_dir_of(checkpoint)
  info = run_info.read(run_dir) if run_dir else {}
  recorded = info.get(run_info.FLAGS_KEY) or {}
  given = {"bert_config_file": bert_config_file, "vocab_file": vocab_file}
  beside = {"bert_config_file": "bert_config.json", "vocab_file": "vocab.txt"}
  for name in sorted(given):
    if given[name]:
      continue
    for path, source in ((os.path.join(os.path.dirname(checkpoint), beside[name]),
                          "beside the checkpoint"),
                         (recorded.get(name), "recorded in %s" % os.path.join(
                             run_dir or "", run_info.FILE_NAME))):
      if path and os.path.isfile(path):
        given[name] = path
        logging.info("--%s=%s (%s)", name, path, source)
        break
  if do_lower_case is None:
    do_lower_case = (info.get("vocab") or {}).get("do_lower_case", True)
  bert_config_file, vocab_file = given["bert_config_file"], given["vocab_file"]
  if info:
    from engine import input_pipeline  # pylint: disable=g-import-not-at-top
    identity = {}
    if bert_config_file:
      identity["bert_config"] = modeling.BertConfig.from_json_file(
          cli.require_file(bert_config_file, "bert_config_file")).to_dict()
    if vocab_file and not recorded.get("spm_model_file"):
      identity["vocab"] = {"digest": input_pipeline.cache_key(input_pipeline.file_digest(
          cli.require_file(vocab_file, "vocab_file")), do_lower_case, False),
                           "do_lower_case": do_lower_case}
    run_info.check(run_dir, identity, True, flag="checkpoint",
                   otherwise="leave the flag out: it is read from %s" % run_info.FILE_NAME)
  return bert_config_file, vocab_file, do_lower_case


def bert_to_hf(checkpoint, bert_config_file, vocab_file, do_lower_case, labels_file, output_dir):
  """Writes the Hugging Face model of `checkpoint`; returns the number of tensors written."""
  bert_config = _load_config_and_vocab(bert_config_file, vocab_file)
  checkpoint = resolve_checkpoint(checkpoint)
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
  _write_outputs(_hf_dir_writes(output_dir, tensors, hf_config(bert_config, names, labels),
                                vocab_file, do_lower_case, "BertTokenizer",
                                bert_config.max_position_embeddings))
  logging.info("Wrote %d tensors of %s to %s", len(tensors), checkpoint, output_dir)
  return len(tensors)


def _hf_dir_writes(output_dir, tensors, config, vocab_file, do_lower_case, tokenizer_class,
                   model_max_length):
  """The writes of a Hugging Face model folder: model.safetensors, config.json and the WordPiece
  tokenizer's files (vocab.txt, tokenizer_config.json, special_tokens_map.json)."""
  return [
      (os.path.join(output_dir, "model.safetensors"),
       atomic_files.bytes_writer(safetensors_chunks(tensors))),
      (os.path.join(output_dir, "config.json"), _json_writer(config)),
      (os.path.join(output_dir, "vocab.txt"), atomic_files.copy_writer(vocab_file)),
      (os.path.join(output_dir, "special_tokens_map.json"), _json_writer(_SPECIAL_TOKENS)),
      (os.path.join(output_dir, "tokenizer_config.json"), _json_writer(dict(
          _SPECIAL_TOKENS, tokenizer_class=tokenizer_class, do_lower_case=do_lower_case,
          tokenize_chinese_chars=True, strip_accents=None, model_max_length=model_max_length)))]


def _json_writer(value):
  return atomic_files.text_writer(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
