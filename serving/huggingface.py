"""Hugging Face <-> stock checkpoints: convert_hf_checkpoint.py and convert_to_hf.py, by family.

"hf" is a transformers model folder, "stock" a checkpoint of this project under Google BERT's
names and layouts (hf_common.py). This front picks the model family -- hf_bert.py for BERT,
hf_electra.py for ELECTRA (discriminator and generator) -- and, from stock to hf, finds
the config, vocabulary and casing of the run that wrote the checkpoint (run_model_files). The
names, layouts and configs of each family are its module's; safetensors_io.py reads and writes
the weights file.
"""

import os

from absl import logging

from core.errors import InputError
from engine import checkpoints
from engine import cli
from engine import run_info
import modeling
from serving import hf_bert
from serving import hf_common
from serving import hf_electra


def hf_to_stock(hf_model_dir, output_dir, hf_generator_dir=None):
  """convert_hf_checkpoint.py: the transformers model in `hf_model_dir` as a stock checkpoint
  in `output_dir` (bert_model.ckpt, bert_config.json, vocab.txt); returns the number of
  variables written.

  An ELECTRA (config.json's model_type "electra") goes to hf_electra.hf_to_stock, with its
  generator when `hf_generator_dir` is given; anything else to hf_bert.hf_to_stock.
  """
  _, config_path, hf_config = hf_common.read_hf_dir(hf_model_dir, "hf_model_dir")
  if hf_config.get("model_type") == "electra":
    return hf_electra.hf_to_stock(hf_model_dir, output_dir, hf_generator_dir)
  if hf_generator_dir:
    raise InputError("--hf_generator_dir is for ELECTRA, but %s has model_type=%s" %
                     (config_path, hf_config.get("model_type")))
  return hf_bert.hf_to_stock(hf_model_dir, output_dir)


def stock_to_hf(checkpoint, bert_config_file, vocab_file, do_lower_case, labels_file,
                output_dir, generator_config_file=None):
  """convert_to_hf.py: hf_electra.stock_to_hf for an ELECTRA (hf_electra.is_electra), else
  hf_bert.stock_to_hf.

  The config, vocabulary and casing not given come from the run that wrote the checkpoint
  (run_model_files); do_lower_case None: not given.
  """
  bert_config_file, vocab_file, do_lower_case = run_model_files(
      hf_common.resolve_checkpoint(checkpoint), bert_config_file, vocab_file, do_lower_case)
  if hf_electra.is_electra(checkpoint):
    logging.info("%s is an ELECTRA: writing %s/discriminator and %s/generator", checkpoint,
                 output_dir, output_dir)
    return hf_electra.stock_to_hf(checkpoint, bert_config_file, vocab_file, do_lower_case,
                                  output_dir, generator_config_file)
  return hf_bert.stock_to_hf(checkpoint, bert_config_file, vocab_file, do_lower_case,
                             labels_file, output_dir)


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
    from engine import input_data  # pylint: disable=g-import-not-at-top
    identity = {}
    if bert_config_file:
      identity["bert_config"] = modeling.BertConfig.from_json_file(
          cli.require_file(bert_config_file, "bert_config_file")).to_dict()
    if vocab_file and not recorded.get("spm_model_file"):
      identity["vocab"] = {"digest": input_data.cache_key(input_data.file_digest(
          cli.require_file(vocab_file, "vocab_file")), do_lower_case, False),
                           "do_lower_case": do_lower_case}
    run_info.check(run_dir, identity, True, flag="checkpoint",
                   otherwise="leave the flag out: it is read from %s" % run_info.FILE_NAME)
  return bert_config_file, vocab_file, do_lower_case
