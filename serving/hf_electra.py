"""The ELECTRA family: transformers' ElectraForPreTraining / ElectraForMaskedLM <-> a stock ELECTRA.

A stock ELECTRA is pretraining/electra_model.py's variables, as run_pretraining_mgpu.py
--objective=electra saves them: the discriminator under stock BERT's bert/ names with its
replaced-token head discriminator_predictions/, and the generator under generator/, embedding
with the discriminator's bert/embeddings/ tables. `stock_to_hf` (convert_to_hf.py, through
huggingface.py) writes a run as transformers' ElectraForPreTraining (output_dir/discriminator/)
and ElectraForMaskedLM (output_dir/generator/); `hf_to_stock` (convert_hf_checkpoint.py) reads
google/electra-*-style folders into the layout of a run's export/ (bert_model.ckpt;
generator/generator.ckpt and generator_config.json). The encoders' names map as hf_bert.py maps
BERT's, under "electra."; every config field with a tensor behind it is checked against the
tensors before anything is written. A transformers ELECTRA converted both ways gives the same
tensors bit for bit.
"""

import os
import re

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from core.errors import InputError
from core import atomic_files
from engine import checkpoints
from engine import run_info
import modeling
from serving import hf_bert
from serving import hf_common
from serving import safetensors_io


# ELECTRA (pretraining/electra_model.py) <-> transformers' ElectraForPreTraining (the
# discriminator) and ElectraForMaskedLM (the generator). bert/... maps as BERT's encoder does,
# under "electra."; the shared bert/embeddings/ go to both models; generator/encoder/ is the
# generator's encoder; bert/pooler/ has no ELECTRA counterpart (it is never trained). The rest:
_HEADS = (  # (model, stock name, hf name)
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
MODELS = ("discriminator", "generator")


def stock_name_to_hf(name):
  """Maps a variable of a stock ELECTRA to its transformers tensors.

  Returns:
    list of (model, Hugging Face name, transpose?), model "discriminator" or "generator"; two
    entries for a shared embedding, none for bert/pooler/, Adam slots and global_step.
  """
  for model, stock, hf in _HEADS:
    if name == stock:
      return [(model, hf, stock.endswith("/kernel"))]
  if name.startswith("generator/encoder/"):
    mapped = hf_bert.stock_name_to_hf("bert/" + name[len("generator/"):], "electra.")
    return [("generator",) + mapped] if mapped else []
  if not name.startswith("bert/") or name.startswith("bert/pooler/"):
    return []
  mapped = hf_bert.stock_name_to_hf(name, "electra.")
  if not mapped:
    return []
  models = MODELS if name.startswith("bert/embeddings/") else ("discriminator",)
  return [(model,) + mapped for model in models]


def hf_name_to_stock(hf_name, model):
  """Maps a tensor of a transformers ELECTRA `model` ("discriminator" or "generator") to
  (stock variable name, transpose?), or None to skip it. Names with or without the "electra."
  prefix of the task models (a bare ElectraModel is saved without it) are read."""
  name = re.sub(r"^electra\.", "", hf_name)
  for head_model, stock, hf in _HEADS:
    if model == head_model and name == re.sub(r"^electra\.", "", hf):
      return stock, stock.endswith("/kernel")
  mapped = hf_bert.hf_name_to_stock(name)
  if mapped is None or mapped[0].startswith("bert/pooler/"):
    return None
  stock, transpose = mapped
  if model == "generator" and stock.startswith("bert/encoder/"):
    stock = "generator/" + stock[len("bert/"):]
  return stock, transpose


# Beside an ELECTRA's bert_model.ckpt, as pretraining/electra.py's export writes them in export/
# (serving may not import pretraining; tests/test_electra_prior.py converts a real export).
GENERATOR_DIR = "generator"
GENERATOR_CKPT = "generator.ckpt"
GENERATOR_CONFIG = "generator_config.json"


def head_shapes(bert_config, gen_config):
  """{stock name: shape} of the ELECTRA variables outside the two encoders."""
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


def _check_fits(variables, bert_config, gen_config, what, config_name, gen_config_name):
  """hf_common.check_tensors_fit for the discriminator and, when `gen_config` is given, the
  generator and its head; the heads' shapes against the configs."""
  hf_common.check_tensors_fit(variables, bert_config, what, config_name)
  if gen_config is not None:
    hf_common.check_tensors_fit(variables, gen_config, what, gen_config_name, scope="generator/")
  for name, shape in head_shapes(bert_config, gen_config or bert_config).items():
    if name.startswith("generator/") and gen_config is None:
      continue
    if name.startswith("generator/") and name not in variables:
      raise InputError("%s lacks %s (the generator's, %s)" % (what, name, gen_config_name))
    if name in variables and list(variables[name].shape) != shape:
      raise InputError("%s: %s has shape %s but %s and %s give %s" %
                       (what, name, list(variables[name].shape), config_name,
                        gen_config_name, shape))


def _check_embedding_size(hf_config, width, config_path, why):
  """Raises InputError unless config.json's embedding_size (transformers' default: 128) is
  `width`."""
  embedding_size = hf_config.get("embedding_size", 128)
  if embedding_size != width:
    raise InputError("%s: embedding_size=%s but %s" % (config_path, embedding_size, why))


def _check_tied(generator, path):
  """Raises InputError when a saved generator_lm_head.weight is not the word table (this
  project's ELECTRA ties them, as ELECTRA does)."""
  head = generator.get("generator_lm_head.weight")
  table = generator.get("electra.embeddings.word_embeddings.weight")
  if head is not None and table is not None and not np.array_equal(head, table):
    raise InputError("%s: generator_lm_head.weight is not the word embedding table; this "
                     "project's ELECTRA ties them" % path)


def hf_to_stock(hf_model_dir, output_dir, hf_generator_dir=None):
  """A transformers ELECTRA discriminator (ElectraForPreTraining or ElectraModel, as
  google/electra-*-discriminator) -> the stock layout: output_dir/bert_model.ckpt (bert/...
  and, with the head, discriminator_predictions/...), bert_config.json, vocab.txt. With
  `hf_generator_dir` (an ElectraForMaskedLM, as google/electra-*-generator), also
  output_dir/generator/generator.ckpt (generator/... plus the shared bert/embeddings/) and
  generator_config.json, as a run's export/ holds them. Returns the number of variables.
  """
  weights_path, config_path, hf_config = hf_common.read_hf_dir(hf_model_dir, "hf_model_dir")
  if "ElectraForMaskedLM" in (hf_config.get("architectures") or []):
    raise InputError("%s is an ELECTRA generator (ElectraForMaskedLM); pass the "
                     "discriminator as --hf_model_dir and this one as --hf_generator_dir" %
                     config_path)
  bert_config = hf_common.hf_config_to_stock(hf_config, config_path)
  _check_embedding_size(hf_config, bert_config.hidden_size, config_path,
                        "hidden_size=%d: this project's ELECTRA (stock BERT) embeds at the "
                        "model's width, with no embeddings_project" % bert_config.hidden_size)
  variables = hf_common.hf_tensors_to_stock(safetensors_io.read(weights_path),
                                            lambda name: hf_name_to_stock(name, "discriminator"))
  gen_config = None
  if hf_generator_dir:
    gen_weights, gen_config_path, gen_hf_config = hf_common.read_hf_dir(hf_generator_dir,
                                                                        "hf_generator_dir")
    gen_config = hf_common.hf_config_to_stock(gen_hf_config, gen_config_path)
    _check_embedding_size(gen_hf_config, bert_config.hidden_size, gen_config_path,
                          "the discriminator's hidden_size=%d: the two share their embedding "
                          "tables" % bert_config.hidden_size)
    generator = safetensors_io.read(gen_weights)
    _check_tied(generator, gen_weights)
    gen_variables = hf_common.hf_tensors_to_stock(
        generator, lambda name: hf_name_to_stock(name, "generator"))
    for name, value in gen_variables.items():
      if name in variables and not np.array_equal(value, variables[name]):
        raise InputError("%s: %s differs from the discriminator's (%s); this project's "
                         "ELECTRA shares one copy of the embeddings" %
                         (gen_weights, name, weights_path))
    variables.update(gen_variables)
  _check_fits(variables, bert_config, gen_config, "model.safetensors of %s" % (
      " and ".join(filter(None, (hf_model_dir, hf_generator_dir)))), config_path,
              hf_generator_dir and os.path.join(hf_generator_dir, "config.json"))
  prefixes = [os.path.join(output_dir, "bert_model.ckpt")]
  parts = [{n: v for n, v in variables.items() if not n.startswith("generator/")}]
  writes = hf_common.stock_dir_writes(output_dir, bert_config, hf_model_dir)
  if gen_config is not None:
    gen_dir = os.path.join(output_dir, GENERATOR_DIR)
    prefixes.append(os.path.join(gen_dir, GENERATOR_CKPT))
    parts.append({n: v for n, v in variables.items()
                  if n.startswith(("generator/", "bert/embeddings/"))})
    writes.append((os.path.join(gen_dir, GENERATOR_CONFIG),
                   atomic_files.text_writer(gen_config.to_json_string())))
  hf_common.write_outputs(writes + [hf_common.stock_checkpoint_write(part, prefix)
                                    for part, prefix in zip(parts, prefixes)], prefixes)
  return sum(len(part) for part in parts)


def is_electra(checkpoint):
  """Whether the checkpoint `checkpoint` (a prefix or a directory) is an ELECTRA of this
  project: it holds discriminator_predictions/ or generator/, or has a generator/ folder beside
  it (export/)."""
  checkpoint = hf_common.resolve_checkpoint(checkpoint)
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
  raise InputError("%s holds an ELECTRA generator but no generator_config.json was found "
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


def stock_to_hf(checkpoint, bert_config_file, vocab_file, do_lower_case, output_dir,
                generator_config_file=None):
  """Writes an ELECTRA of this project as transformers models: output_dir/discriminator/
  (ElectraForPreTraining; ElectraModel when the checkpoint has no discriminator head) and, when
  it has a generator, output_dir/generator/ (ElectraForMaskedLM); each with config.json,
  model.safetensors and the tokenizer files. Returns the number of tensors written."""
  bert_config = hf_common.load_config_and_vocab(bert_config_file, vocab_file)
  checkpoint = hf_common.resolve_checkpoint(checkpoint)
  variables = _read_variables(checkpoint)
  what = checkpoint
  beside = _generator_checkpoint(checkpoint)
  if not any(n.startswith("generator/") for n in variables) and (
      checkpoints.checkpoint_exists(beside)):
    generator = _read_variables(beside)
    for name, value in generator.items():
      if name in variables and not np.array_equal(value, variables[name]):
        raise InputError("%s: %s differs from %s's" % (beside, name, checkpoint))
    variables.update(generator)
    what = "%s and %s" % (checkpoint, beside)
  gen_config, gen_config_name = None, None
  if any(n.startswith("generator/") for n in variables):
    gen_config, gen_config_name = _generator_config(checkpoint, generator_config_file)
    if gen_config.hidden_size == bert_config.hidden_size:
      raise InputError("%s: the generator is as wide as the discriminator; transformers' "
                       "ElectraForMaskedLM has no embeddings_project then" % gen_config_name)
  _check_fits(variables, bert_config, gen_config, what, bert_config_file, gen_config_name)
  models, written = {model: {} for model in MODELS}, 0
  for name, value in sorted(variables.items()):
    for model, hf_name, transpose in stock_name_to_hf(name):
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
    hf = hf_common.stock_config_to_hf(config, architecture, "electra")
    hf["embedding_size"] = bert_config.hidden_size
    hf["tie_word_embeddings"] = True
    writes += hf_common.hf_dir_writes(os.path.join(output_dir, model), tensors, hf, vocab_file,
                                      do_lower_case, "ElectraTokenizer",
                                      bert_config.max_position_embeddings)
    written += len(tensors)
  discriminator_dir = os.path.join(output_dir, "discriminator")
  warning = _export_warning_writes(checkpoint, discriminator_dir)
  hf_common.write_outputs(writes + warning)
  if not warning:  # One written by an earlier conversion into this folder no longer holds.
    atomic_files.remove_quietly(os.path.join(discriminator_dir, checkpoints.EXPORT_WARNING))
  logging.info("Wrote %d tensors of %s to %s", written, what, output_dir)
  return written
