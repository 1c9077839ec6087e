"""convert_to_hf.py: our checkpoints to Hugging Face BERTs, and the round trip HF -> ours -> HF.

With transformers installed (requirements-bench.txt) the converted models are loaded with the
Auto classes and their outputs compared with ours; without it those tests are skipped.
"""

import glob
import json
import os
import shutil
import struct

import re

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from classifier import model as classifier_model
from core.errors import InputError
from heads import pretraining as pretraining_model
import modeling
from serving import hf_bert
from serving import huggingface
import tokenization
from script_runner import ENGLISH_VOCAB, assert_one_line_error, run_script, \
    write_tiny_bert_config

HIDDEN, LAYERS = 32, 2


def _read_raw_safetensors(path):
  """{name: (dtype, shape, raw bytes)} of a .safetensors file, parsed independently."""
  with open(path, "rb") as f:
    header_len = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(header_len))
    data = f.read()
  return {name: (info["dtype"], info["shape"],
                 data[info["data_offsets"][0]:info["data_offsets"][1]])
          for name, info in header.items() if name != "__metadata__"}


def _hf_bert_model_tensors(rng, vocab_size, hidden=HIDDEN):
  """Tensors of a tiny transformers BertModel, named as its save_pretrained names them."""
  shapes = {"embeddings.word_embeddings.weight": [vocab_size, hidden],
            "embeddings.position_embeddings.weight": [64, hidden],
            "embeddings.token_type_embeddings.weight": [2, hidden],
            "embeddings.LayerNorm.weight": [hidden], "embeddings.LayerNorm.bias": [hidden],
            "pooler.dense.weight": [hidden, hidden], "pooler.dense.bias": [hidden]}
  for i in range(LAYERS):
    for name, shape in (("attention.self.query", [hidden, hidden]),
                        ("attention.self.key", [hidden, hidden]),
                        ("attention.self.value", [hidden, hidden]),
                        ("attention.output.dense", [hidden, hidden]),
                        ("intermediate.dense", [2 * hidden, hidden]),
                        ("output.dense", [hidden, 2 * hidden])):
      shapes["encoder.layer.%d.%s.weight" % (i, name)] = shape
      shapes["encoder.layer.%d.%s.bias" % (i, name)] = shape[:1]
    for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
      shapes["encoder.layer.%d.%s.weight" % (i, norm)] = [hidden]
      shapes["encoder.layer.%d.%s.bias" % (i, norm)] = [hidden]
  return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def _write_hf_model(model_dir, tensors, config):
  """A Hugging Face model directory (safetensors written by hand, with a position_ids buffer)."""
  os.makedirs(model_dir)
  tensors = dict(tensors, **{"embeddings.position_ids": np.arange(64, dtype=np.int64)[None]})
  header, data = {}, b""
  for name, value in tensors.items():
    raw = value.tobytes()
    header[name] = {"dtype": {"float32": "F32", "int64": "I64"}[value.dtype.name],
                    "shape": list(value.shape), "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
  header_bytes = json.dumps(header).encode()
  with open(os.path.join(model_dir, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(header_bytes)) + header_bytes + data)
  with open(os.path.join(model_dir, "config.json"), "w") as f:
    json.dump(config, f)


def test_hf_to_stock_to_hf_gives_the_same_tensors_bit_for_bit(tmp_path):
  vocab_size = 30522
  tensors = _hf_bert_model_tensors(np.random.default_rng(0), vocab_size)
  config = {"vocab_size": vocab_size, "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
            "num_attention_heads": 4, "intermediate_size": 2 * HIDDEN, "hidden_act": "gelu",
            "max_position_embeddings": 64, "type_vocab_size": 2, "model_type": "bert"}
  hf_dir, ours, back = str(tmp_path / "hf"), str(tmp_path / "ours"), str(tmp_path / "back")
  _write_hf_model(hf_dir, tensors, config)
  proc = run_script("convert_hf_checkpoint.py", "--hf_model_dir=" + hf_dir, "--output_dir=" + ours)
  assert proc.returncode == 0, proc.stderr[-3000:]
  proc = run_script("convert_to_hf.py", "--checkpoint=" + os.path.join(ours, "bert_model.ckpt"),
                    "--bert_config_file=" + os.path.join(ours, "bert_config.json"),
                    "--vocab_file=" + ENGLISH_VOCAB, "--output_dir=" + back)
  assert proc.returncode == 0, proc.stderr[-3000:]
  original = _read_raw_safetensors(os.path.join(hf_dir, "model.safetensors"))
  round_trip = _read_raw_safetensors(os.path.join(back, "model.safetensors"))
  # position_ids is a buffer (0, 1, 2, ...), not a weight: neither converter carries it.
  assert set(original) - set(round_trip) == {"embeddings.position_ids"}
  assert sorted(round_trip) == sorted(tensors)
  for name in tensors:
    assert round_trip[name] == original[name], name
  with open(os.path.join(back, "config.json")) as f:
    back_config = json.load(f)
  assert back_config["architectures"] == ["BertModel"]
  assert back_config["hidden_act"] == "gelu_new"  # modeling.py's tanh GELU
  # ... and back again: transformers' tanh GELU is modeling.py's "gelu".
  proc = run_script("convert_hf_checkpoint.py", "--hf_model_dir=" + back,
                    "--output_dir=" + str(tmp_path / "again"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(str(tmp_path / "again" / "bert_config.json")) as f:
    assert json.load(f)["hidden_act"] == "gelu"


# A config field with a tensor shape behind it, a wrong value, and what the error names.
_WRONG_FIELDS = [("vocab_size", 30000, "word_embeddings"), ("hidden_size", 48, "shape"),
                 ("intermediate_size", 96, "intermediate"),
                 ("max_position_embeddings", 128, "position_embeddings"),
                 ("type_vocab_size", 3, "token_type_embeddings"),
                 ("num_hidden_layers", 3, "num_hidden_layers=3"),
                 ("num_hidden_layers", 1, "has 2 encoder layers but num_hidden_layers=1")]


_GOOD_CONFIG = {"vocab_size": 30522, "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
                "num_attention_heads": 4, "intermediate_size": 2 * HIDDEN, "hidden_act": "gelu",
                "max_position_embeddings": 64, "type_vocab_size": 2, "model_type": "bert",
                "initializer_range": 0.02}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
  """A tiny HF BERT's tensors and its conversion to our checkpoint layout."""
  root = tmp_path_factory.mktemp("converted")
  tensors = _hf_bert_model_tensors(np.random.default_rng(0), 30522)
  _write_hf_model(str(root / "hf"), tensors, _GOOD_CONFIG)
  huggingface.hf_to_stock(str(root / "hf"), str(root / "ours"))
  return tensors, str(root / "ours")


@pytest.mark.parametrize("field,value,fragment", _WRONG_FIELDS)
def test_a_config_field_that_contradicts_the_tensors_is_refused_both_ways(converted, tmp_path,
                                                                          field, value,
                                                                          fragment):
  """Neither converter writes a model whose config says other shapes than its tensors."""
  tensors, ours = converted
  bad = dict(_GOOD_CONFIG, **{field: value})
  _write_hf_model(str(tmp_path / "hf_bad"), tensors, bad)
  with pytest.raises(InputError, match=r"model.safetensors.*%s.*config.json" % re.escape(fragment)):
    huggingface.hf_to_stock(str(tmp_path / "hf_bad"), str(tmp_path / "ours_bad"))
  assert not os.path.exists(str(tmp_path / "ours_bad"))
  bad_config = str(tmp_path / "bad_config.json")
  with open(bad_config, "w") as f:
    json.dump(bad, f)
  vocab = ENGLISH_VOCAB
  if field == "vocab_size":  # a vocabulary of the config's size, so the tensors are what differ
    vocab = str(tmp_path / "vocab.txt")
    with open(ENGLISH_VOCAB, encoding="utf-8") as f:
      lines = f.readlines()[:value]
    with open(vocab, "w", encoding="utf-8") as f:
      f.writelines(lines)
  with pytest.raises(InputError, match=r"--checkpoint=.*%s.*--bert_config_file=" %
                     re.escape(fragment)):
    hf_bert.stock_to_hf(os.path.join(ours, "bert_model.ckpt"), bad_config, vocab, True, None,
                        str(tmp_path / "back"))
  assert not os.path.exists(str(tmp_path / "back"))


def test_a_contradicting_config_is_one_error_line_from_both_scripts(converted, tmp_path):
  tensors, ours = converted
  _write_hf_model(str(tmp_path / "hf"), tensors, dict(_GOOD_CONFIG, intermediate_size=96))
  proc = run_script("convert_hf_checkpoint.py", "--hf_model_dir=" + str(tmp_path / "hf"),
                    "--output_dir=" + str(tmp_path / "ours"))
  assert_one_line_error(proc, "intermediate/dense/kernel has shape [32, 64] there but [32, 96]")
  proc = run_script("convert_to_hf.py", "--checkpoint=" + ours,
                    "--bert_config_file=" + os.path.join(str(tmp_path / "hf"), "config.json"),
                    "--vocab_file=" + ENGLISH_VOCAB, "--output_dir=" + str(tmp_path / "back"))
  assert_one_line_error(proc, "intermediate/dense/kernel has shape [32, 64] there but [32, 96]")
  assert not os.path.exists(str(tmp_path / "ours")) and not os.path.exists(str(tmp_path / "back"))


def _tiny_model_and_inputs(output_dir):
  """(bert_config.json written in output_dir, its BertConfig, the RandomState, and input ids /
  mask / segments int32 [3, 12]: row 1 padded from 9, segment 1 from 6)."""
  config_file = write_tiny_bert_config(os.path.join(output_dir, "bert_config.json"), 30522,
                                       hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                       initializer_range=0.2)
  rng = np.random.RandomState(0)
  input_ids = rng.randint(1000, 30000, size=(3, 12)).astype(np.int32)
  input_mask = np.ones_like(input_ids)
  input_mask[1, 9:] = 0
  segment_ids = np.zeros_like(input_ids)
  segment_ids[:, 6:] = 1
  return (config_file, modeling.BertConfig.from_json_file(config_file), rng,
          (input_ids, input_mask, segment_ids))


def _save_checkpoint(output_dir, build_heads):
  """A random tiny BERT (initializer_range 0.2) with build_heads(model)'s variables.

  Returns:
    (checkpoint prefix, bert_config_file, input ids/mask/segments [3, 12], the heads' outputs
    computed here).
  """
  os.makedirs(output_dir, exist_ok=True)
  config_file, config, rng, (input_ids, input_mask, segment_ids) = _tiny_model_and_inputs(
      output_dir)
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    outputs = build_heads(config, *[tf.constant(x) for x in (input_ids, input_mask, segment_ids)])
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      # Non-zero biases, so that a bias mapped to the wrong name would show.
      for variable in tf.global_variables():
        if "bias" in variable.op.name or "beta" in variable.op.name:
          sess.run(variable.assign(rng.normal(0, 0.1, variable.shape.as_list())))
      values = sess.run(outputs)
      prefix = tf.train.Saver().save(sess, os.path.join(output_dir, "model.ckpt"), global_step=7)
  return prefix, config_file, (input_ids, input_mask, segment_ids), values


def _classifier_heads(config, input_ids, input_mask, segment_ids):
  _, _, logits, _ = classifier_model.create_model(
      config, False, input_ids, input_mask, segment_ids, tf.zeros([3], tf.int32), 3)
  return {"logits": logits}


def _pretraining_heads(config, input_ids, input_mask, segment_ids):
  model = modeling.BertModel(config, False, input_ids, input_mask, segment_ids)
  positions = tf.tile(tf.range(12)[tf.newaxis], [3, 1])
  _, _, log_probs = pretraining_model.get_masked_lm_output(
      config, model.get_sequence_output(), model.get_embedding_table(), positions,
      tf.zeros_like(positions), tf.ones([3, 12]))
  pretraining_model.get_next_sentence_output(config, model.get_pooled_output(),
                                             tf.zeros([3], tf.int32))
  return {"mlm_log_probs": tf.reshape(log_probs, [3, 12, -1])}


def _convert(checkpoint, config_file, output_dir, *extra):
  proc = run_script("convert_to_hf.py", "--checkpoint=" + checkpoint,
                    "--bert_config_file=" + config_file, "--vocab_file=" + ENGLISH_VOCAB,
                    "--output_dir=" + output_dir, *extra)
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(os.path.join(output_dir, "config.json")) as f:
    return json.load(f), _read_raw_safetensors(os.path.join(output_dir, "model.safetensors"))


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
  run_dir = str(tmp_path_factory.mktemp("clf_run"))
  checkpoint, config_file, inputs, values = _save_checkpoint(run_dir, _classifier_heads)
  with open(os.path.join(run_dir, "labels.txt"), "w") as f:
    f.write("negative\nneutral\npositive\n")
  hf_dir = str(tmp_path_factory.mktemp("clf_hf"))
  config, tensors = _convert(run_dir, config_file, hf_dir)  # the run dir: latest checkpoint
  return checkpoint, hf_dir, config, tensors, inputs, values


def test_classifier_checkpoint_converts_with_its_labels_and_tokenizer(classifier):
  checkpoint, hf_dir, config, tensors, _, _ = classifier
  assert config["architectures"] == ["BertForSequenceClassification"]
  assert config["id2label"] == {"0": "negative", "1": "neutral", "2": "positive"}
  assert config["label2id"] == {"negative": 0, "neutral": 1, "positive": 2}
  assert tensors["classifier.weight"][:2] == ("F32", [3, HIDDEN])
  assert tensors["classifier.weight"][2] == tf.train.load_variable(
      checkpoint, "output_weights").tobytes()
  kernel = tf.train.load_variable(checkpoint, "bert/encoder/layer_1/intermediate/dense/kernel")
  assert tensors["bert.encoder.layer.1.intermediate.dense.weight"] == (
      "F32", [2 * HIDDEN, HIDDEN], np.ascontiguousarray(kernel.T).tobytes())
  assert len(tensors) == 5 + LAYERS * 16 + 2 + 2  # embeddings, layers, pooler, classifier
  assert not [name for name in tensors if "adam" in name or "global_step" in name]
  with open(os.path.join(hf_dir, "tokenizer_config.json")) as f:
    assert json.load(f)["do_lower_case"] is True
  with open(os.path.join(hf_dir, "vocab.txt"), "rb") as f, open(ENGLISH_VOCAB, "rb") as g:
    assert f.read() == g.read()


def test_a_stock_task_run_without_labels_txt_names_its_classes_from_run_info(classifier, tmp_path):
  """cola/mrpc/mnli/xnli runs write no labels.txt; their run_info.json holds the label list."""
  checkpoint, _, _, _, _, _ = classifier
  run_dir = str(tmp_path / "run")
  os.makedirs(run_dir)
  for path in glob.glob(checkpoint + ".*"):
    shutil.copy(path, run_dir)
  with open(os.path.join(run_dir, "run_info.json"), "w") as f:
    json.dump({"task": "mnli", "labels": ["contradiction", "entailment", "neutral"]}, f)
  config_file = os.path.join(os.path.dirname(checkpoint), "bert_config.json")
  prefix = os.path.join(run_dir, os.path.basename(checkpoint))
  config, _ = _convert(prefix, config_file, str(tmp_path / "hf"))
  assert config["id2label"] == {"0": "contradiction", "1": "entailment", "2": "neutral"}
  # A label list of the wrong length is an error, not a silent renaming.
  with open(os.path.join(run_dir, "run_info.json"), "w") as f:
    json.dump({"labels": ["0", "1"]}, f)
  proc = run_script("convert_to_hf.py", "--checkpoint=" + prefix,
                    "--bert_config_file=" + config_file, "--vocab_file=" + ENGLISH_VOCAB,
                    "--output_dir=" + str(tmp_path / "hf2"))
  assert_one_line_error(proc, "run_info.json has 2 labels but the checkpoint's classifier has 3")


def test_pretraining_checkpoint_converts_with_its_heads(tmp_path):
  checkpoint, config_file, _, _ = _save_checkpoint(str(tmp_path / "run"), _pretraining_heads)
  config, tensors = _convert(checkpoint, config_file, str(tmp_path / "hf"))
  assert config["architectures"] == ["BertForPreTraining"]
  assert {"cls.predictions.bias", "cls.predictions.transform.dense.weight",
          "cls.predictions.transform.LayerNorm.weight", "cls.seq_relationship.weight",
          "cls.seq_relationship.bias", "bert.embeddings.word_embeddings.weight"} <= set(tensors)
  assert tensors["cls.seq_relationship.weight"][1] == [2, HIDDEN]


def test_missing_checkpoint_is_a_one_line_error(tmp_path):
  config_file = write_tiny_bert_config(str(tmp_path / "bert_config.json"), 30522)
  proc = run_script("convert_to_hf.py", "--checkpoint=" + str(tmp_path / "nope" / "model.ckpt"),
                    "--bert_config_file=" + config_file, "--vocab_file=" + ENGLISH_VOCAB,
                    "--output_dir=" + str(tmp_path / "hf"))
  assert_one_line_error(proc, "--checkpoint=", "no checkpoint there")
  assert not os.path.exists(str(tmp_path / "hf"))


def test_vocab_that_does_not_match_the_config_is_a_one_line_error(classifier, tmp_path):
  checkpoint = classifier[0]
  config_file = write_tiny_bert_config(str(tmp_path / "bert_config.json"), 21128)
  proc = run_script("convert_to_hf.py", "--checkpoint=" + checkpoint,
                    "--bert_config_file=" + config_file, "--vocab_file=" + ENGLISH_VOCAB,
                    "--output_dir=" + str(tmp_path / "hf"))
  assert_one_line_error(proc, "30522 entries", "vocab_size=21128")


def _transformers():
  """The transformers module, or a skip with the reason."""
  return pytest.importorskip("transformers", reason="transformers is not installed "
                             "(pip install -r requirements-bench.txt)")


def _torch_inputs(inputs):
  import torch  # pylint: disable=g-import-not-at-top
  input_ids, input_mask, segment_ids = (torch.tensor(x, dtype=torch.long) for x in inputs)
  return {"input_ids": input_ids, "attention_mask": input_mask, "token_type_ids": segment_ids}


def test_transformers_classifier_gives_our_logits(classifier):
  transformers = _transformers()
  _, hf_dir, _, _, inputs, values = classifier
  model = transformers.AutoModelForSequenceClassification.from_pretrained(hf_dir).eval()
  logits = model(**_torch_inputs(inputs)).logits.detach().numpy()
  assert np.abs(values["logits"]).max() > 0.1  # not a degenerate comparison
  assert np.abs(logits - values["logits"]).max() < 1e-4
  assert transformers.AutoModel.from_pretrained(hf_dir).config.hidden_act == "gelu_new"
  text = "Unaffable Crème brûlée, 酒店!"
  ours = tokenization.FullTokenizer(ENGLISH_VOCAB, do_lower_case=True)
  assert transformers.AutoTokenizer.from_pretrained(hf_dir)(text)["input_ids"] == (
      ours.convert_tokens_to_ids(["[CLS]"] + ours.tokenize(text) + ["[SEP]"]))


def test_transformers_masked_lm_gives_our_predictions(tmp_path):
  transformers = _transformers()
  checkpoint, config_file, inputs, values = _save_checkpoint(str(tmp_path / "run"),
                                                             _pretraining_heads)
  _convert(checkpoint, config_file, str(tmp_path / "hf"))
  model, info = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "hf"),
                                                                  output_loading_info=True)
  assert not info["missing_keys"], info
  logits = model.eval()(**_torch_inputs(inputs)).logits.detach()
  import torch  # pylint: disable=g-import-not-at-top
  log_probs = torch.log_softmax(logits, dim=-1).numpy()
  assert np.abs(log_probs - values["mlm_log_probs"]).max() < 1e-4


def _stock_task_files(task, data_dir):
  """Tiny English data in the stock layout of `task`; returns its labels and test inputs."""
  labels = {"cola": ["0", "1"], "mrpc": ["0", "1"], "tsv": ["bad", "good"],
            "mnli": ["contradiction", "entailment", "neutral"],
            "xnli": ["contradiction", "entailment", "neutral"]}[task]
  words = ["good", "bad", "great", "awful", "fine", "poor"]

  def example(i):
    return ("the film was %s" % words[i % 6], "it was %s" % words[(i * 5 + 1) % 6],
            labels[i % len(labels)])

  def write(name, header, rows):
    path = os.path.join(data_dir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
      f.writelines("\t".join(r) + "\n" for r in ([header] if header else []) + rows)

  train, dev, test = ([example(i) for i in range(n)] for n in (24, 6, 7))
  test = [example(i + 3) for i in range(7)]
  if task == "cola":
    for name, split in (("train.tsv", train), ("dev.tsv", dev)):
      write(name, None, [["src", label, "", a] for a, _, label in split])
    write("test.tsv", ["index", "sentence"], [[str(i), a] for i, (a, _, _) in enumerate(test)])
    return labels, [a for a, _, _ in test]
  if task == "tsv":
    for name, split in (("train.tsv", train), ("dev.tsv", dev)):
      write(name, None, [[a, label] for a, _, label in split])
    write("test.tsv", ["qid", "text_a"], [[str(i), a] for i, (a, _, _) in enumerate(test)])
    return labels, [a for a, _, _ in test]
  if task == "mrpc":
    head = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    for name, split in (("train.tsv", train), ("dev.tsv", dev)):
      write(name, head, [[label, "1", "2", a, b] for a, b, label in split])
    write("test.tsv", ["index"] + head[1:], [[str(i), "1", "2", a, b]
                                             for i, (a, b, _) in enumerate(test)])
  elif task == "mnli":
    parses = ["p"] * 4
    write("train.tsv", ["index", "promptID", "pairID", "genre"] + ["parse"] * 4 + [
        "sentence1", "sentence2", "label1", "gold_label"],
          [[str(i), "1", "2", "g"] + parses + [a, b, label, label]
           for i, (a, b, label) in enumerate(train)])
    write("dev_matched.tsv", ["index", "promptID", "pairID", "genre"] + ["parse"] * 4 + [
        "sentence1", "sentence2"] + ["label%d" % k for k in range(1, 6)] + ["gold_label"],
          [[str(i), "1", "2", "g"] + parses + [a, b] + [label] * 6
           for i, (a, b, label) in enumerate(dev)])
    write("test_matched.tsv", ["index", "promptID", "pairID", "genre"] + ["parse"] * 4 + [
        "sentence1", "sentence2"], [[str(i), "1", "2", "g"] + parses + [a, b]
                                    for i, (a, b, _) in enumerate(test)])
  else:  # xnli
    write(os.path.join("multinli", "multinli.train.zh.tsv"), ["premise", "hypo", "label"],
          [[a, b, "contradictory" if label == "contradiction" else label]
           for a, b, label in train])
    head = ["language", "gold_label", "s1bp", "s2bp", "s1p", "s2p", "sentence1", "sentence2"]
    write("xnli.dev.tsv", head, [["zh", label, "p", "p", "p", "p", a, b] for a, b, label in dev])
    write("xnli.test.tsv", head, [["zh", label, "p", "p", "p", "p", a, b]
                                  for a, b, label in test])
  return labels, [{"text": a, "text_pair": b} for a, b, _ in test]


@pytest.mark.parametrize("task", ["cola", "mrpc", "mnli", "xnli", "tsv"])
def test_transformers_pipeline_gives_predict_txt_row_for_row(task, tmp_path):
  """The converted model, run by transformers' text-classification pipeline on the test set,
  names the same class as predict.txt on every row (stock tasks write no labels.txt)."""
  transformers = _transformers()
  data_dir, out = str(tmp_path / "data"), str(tmp_path / "out")
  labels, inputs = _stock_task_files(task, data_dir)
  config = write_tiny_bert_config(str(tmp_path / "bert_config.json"), 30522, hidden_size=HIDDEN)
  proc = run_script("run_classifier_mgpu.py", "--task_name=" + task, "--data_dir=" + data_dir,
                    "--vocab_file=" + ENGLISH_VOCAB, "--bert_config_file=" + config,
                    "--output_dir=" + out, "--do_train", "--do_predict", "--max_seq_length=24",
                    "--train_batch_size=8", "--num_train_epochs=2", "--learning_rate=3e-3")
  assert proc.returncode == 0, proc.stderr[-3000:]
  hf_dir = str(tmp_path / "hf")
  proc = run_script("convert_to_hf.py", "--checkpoint=" + out, "--bert_config_file=" + config,
                    "--vocab_file=" + ENGLISH_VOCAB, "--output_dir=" + hf_dir)
  assert proc.returncode == 0, proc.stderr[-3000:]
  pipe = transformers.pipeline("text-classification", model=hf_dir, tokenizer=hf_dir,
                               device="cpu")
  served = pipe(inputs, top_k=None)
  with open(os.path.join(out, "predict.txt"), encoding="utf-8") as f:
    predicted = f.read().splitlines()
  assert len(predicted) == len(inputs) == 7
  assert [max(row, key=lambda r: r["score"])["label"] for row in served] == predicted
  assert set(predicted) <= set(labels)
  probabilities = np.loadtxt(os.path.join(out, "test_results.tsv"), delimiter="\t")
  for row, expected in zip(served, probabilities):
    scores = {r["label"]: r["score"] for r in row}
    assert np.abs(np.array([scores[label] for label in labels]) - expected).max() < 1e-4


# ELECTRA: google/electra-*-style folders in and out.

GEN_HIDDEN = 16


def _hf_electra_tensors(rng, vocab_size):
  """(discriminator, generator) tensors named as transformers' ElectraForPreTraining and
  ElectraForMaskedLM save them; the generator shares the embeddings and ties its head."""
  base = _hf_bert_model_tensors(rng, vocab_size)
  disc = {"electra." + name: value for name, value in base.items()
          if not name.startswith("pooler.")}
  disc.update({"discriminator_predictions.dense.weight": [HIDDEN, HIDDEN],
               "discriminator_predictions.dense.bias": [HIDDEN],
               "discriminator_predictions.dense_prediction.weight": [1, HIDDEN],
               "discriminator_predictions.dense_prediction.bias": [1]})
  gen = {name: value for name, value in disc.items() if name.startswith("electra.embeddings.")}
  gen.update({"electra." + name: value
              for name, value in _hf_bert_model_tensors(rng, vocab_size, GEN_HIDDEN).items()
              if name.startswith("encoder.")})
  gen.update({"electra.embeddings_project.weight": [GEN_HIDDEN, HIDDEN],
              "electra.embeddings_project.bias": [GEN_HIDDEN],
              "generator_predictions.dense.weight": [HIDDEN, GEN_HIDDEN],
              "generator_predictions.dense.bias": [HIDDEN],
              "generator_predictions.LayerNorm.weight": [HIDDEN],
              "generator_predictions.LayerNorm.bias": [HIDDEN],
              "generator_lm_head.bias": [vocab_size]})
  for tensors in (disc, gen):
    for name, value in tensors.items():
      if isinstance(value, list):
        tensors[name] = rng.standard_normal(value).astype(np.float32)
  gen["generator_lm_head.weight"] = gen["electra.embeddings.word_embeddings.weight"]
  return disc, gen


def _electra_config(hidden, architecture, vocab_size=30522, **overrides):
  config = {"vocab_size": vocab_size, "embedding_size": HIDDEN, "hidden_size": hidden,
            "num_hidden_layers": LAYERS, "num_attention_heads": max(1, hidden // 8),
            "intermediate_size": 2 * hidden, "hidden_act": "gelu",
            "max_position_embeddings": 64, "type_vocab_size": 2, "model_type": "electra",
            "architectures": [architecture]}
  config.update(overrides)
  return config


@pytest.fixture(scope="module")
def hf_electra(tmp_path_factory):
  """google/electra-*-style discriminator and generator folders, and the tensors in them."""
  root = tmp_path_factory.mktemp("hf_electra")
  disc, gen = _hf_electra_tensors(np.random.default_rng(1), 30522)
  _write_hf_model(str(root / "disc"), disc, _electra_config(HIDDEN, "ElectraForPreTraining"))
  _write_hf_model(str(root / "gen"), gen, _electra_config(GEN_HIDDEN, "ElectraForMaskedLM"))
  for name in ("disc", "gen"):
    shutil.copyfile(ENGLISH_VOCAB, str(root / name / "vocab.txt"))
  return str(root / "disc"), str(root / "gen"), disc, gen


def test_hf_electra_to_stock_to_hf_gives_the_same_tensors_bit_for_bit(hf_electra, tmp_path):
  disc_dir, gen_dir, disc, gen = hf_electra
  ours, back = str(tmp_path / "ours"), str(tmp_path / "back")
  proc = run_script("convert_hf_checkpoint.py", "--hf_model_dir=" + disc_dir,
                    "--hf_generator_dir=" + gen_dir, "--output_dir=" + ours)
  assert proc.returncode == 0, proc.stderr[-3000:]
  # Our layout: export/'s. The discriminator with stock names plus its head; the generator
  # beside it with the shared tables.
  saved = dict(tf.train.list_variables(os.path.join(ours, "bert_model.ckpt")))
  config = modeling.BertConfig.from_json_file(os.path.join(ours, "bert_config.json"))
  stock = dict(modeling.stock_variable_shapes(config, with_pooler=False))
  assert set(saved) - {"global_step"} == set(stock) | {
      "discriminator_predictions/dense/kernel", "discriminator_predictions/dense/bias",
      "discriminator_predictions/output/kernel", "discriminator_predictions/output/bias"}
  assert all(list(saved[name]) == shape for name, shape in stock.items())
  generator = dict(tf.train.list_variables(os.path.join(ours, "generator", "generator.ckpt")))
  assert generator["generator/embeddings_project/kernel"] == [HIDDEN, GEN_HIDDEN]
  assert generator["bert/embeddings/word_embeddings"] == [30522, HIDDEN]
  with open(os.path.join(ours, "generator", "generator_config.json")) as f:
    assert json.load(f)["hidden_size"] == GEN_HIDDEN

  proc = run_script("convert_to_hf.py", "--checkpoint=" + os.path.join(ours, "bert_model.ckpt"),
                    "--bert_config_file=" + os.path.join(ours, "bert_config.json"),
                    "--vocab_file=" + ENGLISH_VOCAB, "--output_dir=" + back)
  assert proc.returncode == 0, proc.stderr[-3000:]
  for name, original in (("discriminator", disc_dir), ("generator", gen_dir)):
    before = _read_raw_safetensors(os.path.join(original, "model.safetensors"))
    after = _read_raw_safetensors(os.path.join(back, name, "model.safetensors"))
    # Not written: the position_ids buffer, and the generator's head weight (tied to the table).
    assert set(before) - set(after) <= {"embeddings.position_ids", "generator_lm_head.weight"}
    assert set(after) <= set(before)
    for tensor in after:
      assert after[tensor] == before[tensor], (name, tensor)
  with open(os.path.join(back, "generator", "config.json")) as f:
    gen_config = json.load(f)
  assert gen_config["architectures"] == ["ElectraForMaskedLM"]
  assert (gen_config["model_type"], gen_config["embedding_size"], gen_config["hidden_size"]) == (
      "electra", HIDDEN, GEN_HIDDEN)
  with open(os.path.join(back, "discriminator", "tokenizer_config.json")) as f:
    assert json.load(f)["tokenizer_class"] == "ElectraTokenizer"


@pytest.mark.parametrize("change, fragments", [
    ({"vocab_size": 21128}, ["word_embeddings has shape [30522, 32]", "vocab_size=21128"]),
    ({"num_hidden_layers": 3}, ["has 2 encoder layers but num_hidden_layers=3"]),
    ({"intermediate_size": 48}, ["intermediate/dense/kernel has shape [32, 64]"]),
    ({"max_position_embeddings": 128}, ["position_embeddings has shape [64, 32]"]),
    ({"embedding_size": 128}, ["embedding_size=128 but hidden_size=32"]),
    ({"architectures": ["ElectraForMaskedLM"]}, ["is an ELECTRA generator",
                                                  "--hf_generator_dir"]),
])
def test_an_electra_config_that_does_not_fit_its_tensors_is_a_one_line_error(
    hf_electra, tmp_path, change, fragments):
  disc_dir, _, _, _ = hf_electra
  bad = str(tmp_path / "bad")
  shutil.copytree(disc_dir, bad)
  with open(os.path.join(disc_dir, "config.json")) as f:
    config = dict(json.load(f), **change)
  with open(os.path.join(bad, "config.json"), "w") as f:
    json.dump(config, f)
  proc = run_script("convert_hf_checkpoint.py", "--hf_model_dir=" + bad,
                    "--output_dir=" + str(tmp_path / "ours"))
  assert_one_line_error(proc, *fragments)


def test_a_generator_whose_embeddings_differ_is_a_one_line_error(hf_electra, tmp_path):
  disc_dir, _, _, gen = hf_electra
  gen = dict(gen, **{"electra.embeddings.LayerNorm.bias": np.zeros([HIDDEN], np.float32)})
  _write_hf_model(str(tmp_path / "gen"), gen, _electra_config(GEN_HIDDEN, "ElectraForMaskedLM"))
  proc = run_script("convert_hf_checkpoint.py", "--hf_model_dir=" + disc_dir,
                    "--hf_generator_dir=" + str(tmp_path / "gen"),
                    "--output_dir=" + str(tmp_path / "ours"))
  assert_one_line_error(proc, "bert/embeddings/LayerNorm/beta differs from the discriminator's")


def _electra_run(run_dir):
  """A random tiny ELECTRA of ours (initializer_range 0.2, random biases) saved as a run's
  checkpoint, with export/generator/generator_config.json beside it.

  Returns:
    (checkpoint prefix, bert_config_file, {input_ids, corrupted_ids, input_mask, segment_ids,
    positions}, {disc_logits [B, L], generator_log_probs [B * P, V]} computed here).
  """
  from pretraining import electra_model  # pylint: disable=g-import-not-at-top
  os.makedirs(os.path.join(run_dir, "export", "generator"))
  config_file, config, rng, (ids, mask, segments) = _tiny_model_and_inputs(run_dir)
  gen_config = electra_model.generator_config(config, 0.5)
  with open(os.path.join(run_dir, "export", "generator", "generator_config.json"), "w") as f:
    f.write(gen_config.to_json_string())
  positions = np.array([[1, 4, 7], [2, 3, 8], [5, 6, 10]], np.int32)
  features = {"input_ids": ids, "input_mask": mask, "segment_ids": segments,
              "masked_lm_positions": positions,
              "masked_lm_ids": np.take_along_axis(ids, positions, 1),
              "masked_lm_weights": np.ones([3, 3], np.float32)}
  np.put_along_axis(ids, positions, 103, 1)  # [MASK]
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    model = electra_model.Electra(config, gen_config, False,
                                  {k: tf.constant(v) for k, v in features.items()}, 50.0,
                                  electra_model.most_likely_tokens)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      for variable in tf.global_variables():
        if "bias" in variable.op.name or "beta" in variable.op.name:
          sess.run(variable.assign(rng.normal(0, 0.1, variable.shape.as_list())))
      corrupted, logits, log_probs = sess.run(
          [model.corrupted_ids, model.disc_logits, model.masked_lm_log_probs])
      prefix = tf.train.Saver().save(sess, os.path.join(run_dir, "model.ckpt"), global_step=5)
  inputs = dict(input_ids=ids, corrupted_ids=corrupted, input_mask=mask, segment_ids=segments,
                positions=positions)
  return prefix, config_file, inputs, {"disc_logits": logits, "generator_log_probs": log_probs}


@pytest.fixture(scope="module")
def electra_run(tmp_path_factory):
  """Our ELECTRA run converted with convert_to_hf.py (from its output_dir)."""
  run_dir = str(tmp_path_factory.mktemp("electra_run"))
  checkpoint, config_file, inputs, values = _electra_run(run_dir)
  hf_dir = str(tmp_path_factory.mktemp("electra_hf"))
  proc = run_script("convert_to_hf.py", "--checkpoint=" + run_dir,
                    "--bert_config_file=" + config_file, "--vocab_file=" + ENGLISH_VOCAB,
                    "--output_dir=" + hf_dir)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return checkpoint, config_file, hf_dir, inputs, values


def test_stock_electra_to_hf_and_back_gives_the_same_variables_bit_for_bit(electra_run, tmp_path):
  checkpoint, _, hf_dir, _, _ = electra_run
  with open(os.path.join(hf_dir, "discriminator", "config.json")) as f:
    assert json.load(f)["architectures"] == ["ElectraForPreTraining"]
  back = str(tmp_path / "back")
  proc = run_script("convert_hf_checkpoint.py",
                    "--hf_model_dir=" + os.path.join(hf_dir, "discriminator"),
                    "--hf_generator_dir=" + os.path.join(hf_dir, "generator"),
                    "--output_dir=" + back)
  assert proc.returncode == 0, proc.stderr[-3000:]
  reader = tf.train.load_checkpoint(checkpoint)
  originals = {name for name in reader.get_variable_to_shape_map()
               if not name.endswith(("adam_m", "adam_v")) and name != "global_step"}
  returned = {}
  for prefix in ("bert_model.ckpt", os.path.join("generator", "generator.ckpt")):
    again = tf.train.load_checkpoint(os.path.join(back, prefix))
    for name in again.get_variable_to_shape_map():
      if name != "global_step":
        returned[name] = again.get_tensor(name)
  # bert/pooler/ is never trained in ELECTRA and transformers' ELECTRA has none.
  assert set(returned) == originals - {"bert/pooler/dense/kernel", "bert/pooler/dense/bias"}
  for name, value in returned.items():
    assert value.tobytes() == reader.get_tensor(name).tobytes(), name


def test_an_electra_checkpoint_with_the_wrong_generator_config_is_a_one_line_error(
    electra_run, tmp_path):
  checkpoint, config_file, _, _, _ = electra_run
  wrong = write_tiny_bert_config(str(tmp_path / "gen.json"), 30522, hidden_size=8,
                                 num_hidden_layers=LAYERS, num_attention_heads=1)
  proc = run_script("convert_to_hf.py", "--checkpoint=" + checkpoint,
                    "--bert_config_file=" + config_file, "--vocab_file=" + ENGLISH_VOCAB,
                    "--generator_config_file=" + wrong, "--output_dir=" + str(tmp_path / "hf"))
  assert_one_line_error(proc, "generator/encoder/layer_0/attention/self/query/kernel has shape "
                        "[16, 16]", "gen.json")


def test_transformers_electra_gives_our_logits(electra_run):
  transformers = _transformers()
  import torch  # pylint: disable=g-import-not-at-top
  from transformers.activations import ACT2FN  # pylint: disable=g-import-not-at-top
  _, _, hf_dir, inputs, values = electra_run
  common = {"attention_mask": torch.tensor(inputs["input_mask"], dtype=torch.long),
            "token_type_ids": torch.tensor(inputs["segment_ids"], dtype=torch.long)}
  disc, info = transformers.AutoModelForPreTraining.from_pretrained(
      os.path.join(hf_dir, "discriminator"), output_loading_info=True)
  assert type(disc).__name__ == "ElectraForPreTraining" and not info["missing_keys"], info
  logits = disc.eval()(input_ids=torch.tensor(inputs["corrupted_ids"], dtype=torch.long),
                       **common).logits.detach().numpy()
  real = inputs["input_mask"] > 0
  assert np.abs(values["disc_logits"]).max() > 0.1  # not a degenerate comparison
  assert np.abs(logits - values["disc_logits"])[real].max() < 1e-5

  gen, info = transformers.AutoModelForMaskedLM.from_pretrained(
      os.path.join(hf_dir, "generator"), output_loading_info=True)
  assert type(gen).__name__ == "ElectraForMaskedLM" and not info["missing_keys"], info
  # transformers' generator head hard-codes the erf GELU; ours (and Google's ELECTRA) use
  # hidden_act, the tanh form.
  gen.generator_predictions.activation = ACT2FN["gelu_new"]
  scores = gen.eval()(input_ids=torch.tensor(inputs["input_ids"], dtype=torch.long),
                      **common).logits.detach()
  rows = np.arange(3)[:, None]
  log_probs = torch.log_softmax(scores[rows, inputs["positions"]], dim=-1).numpy()
  assert np.abs(log_probs.reshape(9, -1) - values["generator_log_probs"]).max() < 1e-5
  text = "Unaffable Crème brûlée, 酒店!"
  ours = tokenization.FullTokenizer(ENGLISH_VOCAB, do_lower_case=True)
  for model in ("discriminator", "generator"):
    tokenizer = transformers.AutoTokenizer.from_pretrained(os.path.join(hf_dir, model))
    assert tokenizer(text)["input_ids"] == ours.convert_tokens_to_ids(
        ["[CLS]"] + ours.tokenize(text) + ["[SEP]"])


def _recorded_run(run_dir, config_file, vocab_file, do_lower_case=False):
  """A run directory whose run_info.json records config_file and vocab_file as a run script
  does (run_helpers.run_identity)."""
  from engine import input_data  # pylint: disable=g-import-not-at-top
  from engine import run_info  # pylint: disable=g-import-not-at-top
  os.makedirs(run_dir)
  run_info.write(run_dir, {
      "script": "run_classifier_mgpu.py",
      "bert_config": modeling.BertConfig.from_json_file(config_file).to_dict(),
      "vocab": {"digest": input_data.cache_key(input_data.file_digest(vocab_file),
                                               do_lower_case, False),
                "do_lower_case": do_lower_case},
      run_info.FLAGS_KEY: {"bert_config_file": config_file, "vocab_file": vocab_file,
                           "do_lower_case": do_lower_case}})
  return os.path.join(run_dir, "model.ckpt-8")


def test_the_config_and_vocabulary_come_from_the_run_and_must_be_its_own(tmp_path):
  """A run directory's recorded config, vocabulary and casing are the defaults; a config of
  other heads or another activation (the tensors' shapes fit, the logits would not) or another
  vocabulary is refused, naming what differs."""
  config = write_tiny_bert_config(str(tmp_path / "bert_config.json"), 30522)
  checkpoint = _recorded_run(str(tmp_path / "run"), config, ENGLISH_VOCAB)
  assert huggingface.run_model_files(checkpoint, None, None, None) == (
      config, ENGLISH_VOCAB, False)
  assert huggingface.run_model_files(checkpoint, config, ENGLISH_VOCAB, None) == (
      config, ENGLISH_VOCAB, False)
  with open(config) as f:
    recorded = json.load(f)
  for change, fragment in (({"num_attention_heads": 2}, "num_attention_heads=4 there"),
                           ({"hidden_act": "relu"}, 'hidden_act="gelu" there')):
    other = str(tmp_path / "other.json")
    with open(other, "w") as f:
      json.dump(dict(recorded, **change), f)
    with pytest.raises(InputError, match="different model config: .*%s.*leave the flag out" %
                       re.escape(fragment)):
      huggingface.run_model_files(checkpoint, other, None, None)
  with pytest.raises(InputError, match="different vocabulary"):
    huggingface.run_model_files(checkpoint, None, None, True)  # the run was cased
  # Labels: the run's, in its order; a labels file of another order is refused.
  from engine import run_info  # pylint: disable=g-import-not-at-top
  run_info.record(str(tmp_path / "run"), "labels", ["neg", "pos"])
  assert hf_bert.read_labels(None, 2, str(tmp_path / "run")) == ["neg", "pos"]
  swapped = tmp_path / "labels.txt"
  swapped.write_text("pos\nneg\n")
  with pytest.raises(InputError, match=r"holds the labels \['pos', 'neg'\] but the run"):
    hf_bert.read_labels(str(swapped), 2, str(tmp_path / "run"))
  # export/ of a run: the files beside the checkpoint, checked against the run above it.
  export = os.path.join(str(tmp_path / "run"), "export")
  os.makedirs(export)
  shutil.copy(config, os.path.join(export, "bert_config.json"))
  shutil.copy(ENGLISH_VOCAB, os.path.join(export, "vocab.txt"))
  assert huggingface.run_model_files(os.path.join(export, "bert_model.ckpt"), None, None,
                                     None) == (os.path.join(export, "bert_config.json"),
                                               os.path.join(export, "vocab.txt"), False)
