# coding=utf-8
"""--do_export end to end, and the in-graph tokenizer and packing against the Python ones.

The SavedModels are loaded in fresh processes that do not have this repository on their path,
as a server would load them.
"""

import json
import os
import shutil
import subprocess
import sys
import unicodedata

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from classifier import data as classifier_data
from core.errors import InputError
from rewrite import data as rewrite_data
from serving import graph_features
from serving import graph_tokenizer
import tokenization
from script_runner import CHINESE_VOCAB, ENGLISH_VOCAB, REPO_ROOT, assert_one_line_error, \
    run_script, write_tiny_bert_config
import test_quiet_scripts
import test_rewrite_script

# Run in a fresh process outside the repository: loads the SavedModel, calls the signatures
# listed on stdin as [signature, {input: value}] pairs and prints their outputs as JSON.
_PROBE = """
import json, sys
import numpy as np
import tensorflow as tf
model = tf.saved_model.load(sys.argv[1])
def plain(value):
  value = value.numpy()
  if value.dtype.kind in "SO":
    value = np.vectorize(lambda b: b.decode("utf-8"), otypes=[str])(value)
  return value.tolist()
outputs = []
for signature, inputs in json.load(sys.stdin):
  if isinstance(inputs, int):  # the outputs of an earlier call
    inputs = outputs[inputs]
  outputs.append(model.signatures[signature](**{k: tf.constant(v) for k, v in inputs.items()}))
print(json.dumps([{k: plain(v) for k, v in out.items()} for out in outputs]))
"""

# Single texts that exercise every step of BasicTokenizer and WordpieceTokenizer.
PROBE_TEXTS = [
    "酒店的服务很好，我们非常满意！",  # Chinese with full-width punctuation
    "The UNAFFABLE hotel's staff were unhelpful...",  # English, casing, ##pieces
    "iPhone 12很好用，price ¥5,999。",  # mixed scripts, digits, currency
    "Crème brûlée à São Paulo, ΟΔΟΣ Straße İstanbul",  # accents, final sigma, ß, dotted I
    "tab\there\u00a0nbsp\u3000ideographic\u200bzero-width\x00nul\ufffd\x07bell\u2028line",
    "a" * 201 + " " + "b" * 200 + " " + "é" * 120,  # over-long words ([UNK] beyond 200 chars)
    "한국어 にほんご ﬁne ½ ²",  # Hangul decomposes, kana, ligature, numbers
    "",
]


def _probe(saved_model_dir, calls):
  """Outputs of `calls` ([signature, inputs] pairs; inputs k: the outputs of call k) from a
  fresh process without the repo."""
  return _probe_then(saved_model_dir, calls, "")[0]


def _probe_then(saved_model_dir, calls, then):
  """_probe's outputs, and the stdout of the Python code `then` run after the calls in the same
  process (`model`: the loaded SavedModel): one TensorFlow start and load for both."""
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  proc = subprocess.run([sys.executable, "-c", _PROBE + then, saved_model_dir],
                        input=json.dumps(calls), capture_output=True, text=True, cwd="/", env=env,
                        timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stdout.strip().splitlines()
  last = max(i for i, line in enumerate(lines) if line.startswith("["))  # _PROBE's JSON line
  return json.loads(lines[last]), "\n".join(lines[last + 1:]) + "\n"


def _write_tsv(path, rows):
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join("\t".join(row) + "\n" for row in rows))


def _pair_task(data_dir):
  """Pairs of mixed Chinese/English text whose label says whether they share a sentiment."""
  os.makedirs(data_dir)
  good, bad = ["好", "喜欢 great", "满意 Très bien"], ["差", "讨厌 awful", "失望 DÉÇU"]

  def rows(n, offset):
    out = []
    for i in range(n):
      a = (good if (i + offset) % 2 else bad)[i % 3]
      b = (good if (i + offset) % 3 else bad)[(i + 1) % 3]
      same = ((i + offset) % 2 == 1) == ((i + offset) % 3 != 0)
      out.append(["酒店的服务%s，房间%s" % (a, a * (i % 4)), "早餐%s" % b,
                  "same" if same else "different"])
    return out

  _write_tsv(os.path.join(data_dir, "train.tsv"), rows(48, 0))
  _write_tsv(os.path.join(data_dir, "dev.tsv"), rows(8, 1))
  _write_tsv(os.path.join(data_dir, "test.tsv"),
             [["text_a", "text_b"]] + [row[:2] for row in rows(11, 2)])


def _classifier_args(root, output_dir, *extra):
  return ["--task_name=tsv", "--data_dir=%s" % os.path.join(root, "data"),
          "--vocab_file=%s" % CHINESE_VOCAB,
          "--bert_config_file=%s" % os.path.join(root, "bert_config.json"),
          "--output_dir=%s" % output_dir, "--max_seq_length=20", "--truncation=tail"] + list(
              extra)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
  """A tiny pair classifier trained, predicted and exported in one run (tail truncation)."""
  root = str(tmp_path_factory.mktemp("export_clf"))
  _pair_task(os.path.join(root, "data"))
  write_tiny_bert_config(os.path.join(root, "bert_config.json"), 21128)
  out = os.path.join(root, "out")
  proc = run_script("run_classifier_mgpu.py", *_classifier_args(
      root, out, "--do_train", "--do_predict", "--do_export", "--num_train_epochs=2",
      "--train_batch_size=8", "--predict_batch_size=4", "--learning_rate=2e-3"))
  assert proc.returncode == 0, proc.stderr[-4000:]
  return root, out


@pytest.fixture(scope="module")
def classifier_served(classifier):
  """One fresh process on the exported classifier: the outputs of classifier_outputs' calls,
  then what _EDGE_BATCHES prints."""
  root, out = classifier
  examples = classifier_data.TsvProcessor(out).get_test_examples(os.path.join(root, "data"))
  texts = {"text_a": [e.text_a for e in examples], "text_b": [e.text_b for e in examples]}
  probes = {"text_a": PROBE_TEXTS, "text_b": PROBE_TEXTS[::-1]}
  outputs, edge_stdout = _probe_then(os.path.join(out, "saved_model"), [
      ["serving_default", texts], ["tokenize", texts], ["tokenize", probes], ["serve_ids", 1]],
                                     _EDGE_BATCHES)
  return examples, probes, outputs, edge_stdout


@pytest.fixture(scope="module")
def classifier_outputs(classifier_served):
  """The exported classifier's outputs on the test set and the probe texts, fresh process."""
  examples, probes, (served, tokenized, probe_ids, from_ids), _ = classifier_served
  return examples, probes, served, tokenized, probe_ids, from_ids


def test_exported_classifier_reproduces_test_results_and_predict_txt(classifier,
                                                                     classifier_outputs):
  _, out = classifier
  _, _, served, _, _, _ = classifier_outputs
  expected = np.loadtxt(os.path.join(out, "test_results.tsv"), delimiter="\t")
  assert expected.shape == (11, 2)
  assert np.abs(np.array(served["probabilities"]) - expected).max() < 1e-5
  with open(os.path.join(out, "predict.txt"), encoding="utf-8") as f:
    assert served["label"] == f.read().splitlines()
  assert served["label_id"] == [int(np.argmax(row)) for row in expected]


def test_text_and_id_signatures_agree_and_pack_like_the_run_script(classifier_outputs):
  examples, probes, served, tokenized, probe_ids, from_ids = classifier_outputs
  assert np.abs(np.array(from_ids["logits"]) - np.array(served["logits"])).max() < 1e-5
  assert from_ids["label"] == served["label"]
  tokenizer = tokenization.FullTokenizer(CHINESE_VOCAB, do_lower_case=True)
  probe_examples = [classifier_data.InputExample("probe-%d" % i, a, b)
                    for i, (a, b) in enumerate(zip(probes["text_a"], probes["text_b"]))]
  truncated = 0
  for graph, example_list in ((tokenized, examples), (probe_ids, probe_examples)):
    for i, example in enumerate(example_list):
      expected = classifier_data.convert_single_example(example, {}, 20, tokenizer, "tail",
                                                        need_label=False)
      truncated += expected.truncated
      assert graph["input_ids"][i] == expected.input_ids, example.text_a
      assert graph["input_mask"][i] == expected.input_mask
      assert graph["segment_ids"][i] == expected.segment_ids
  assert truncated >= 10  # tail truncation of pairs was exercised


# (Run after _PROBE, in its process: `model` is the loaded SavedModel.)
_EDGE_BATCHES = """
serve = model.signatures["serving_default"]
empty = serve(text_a=tf.constant([], tf.string), text_b=tf.constant([], tf.string))
print("empty", empty["label"].shape, empty["probabilities"].shape)
try:
  serve(text_a=tf.constant([["a", "b"]]), text_b=tf.constant([["c", "d"]]))
  print("2-D accepted")
except tf.errors.InvalidArgumentError as e:
  print("2-D refused:", [l for l in str(e).splitlines() if "expected" in l][0])
try:
  serve(text_a=tf.constant("a"), text_b=tf.constant(["c"]))
  print("one text accepted")
except tf.errors.InvalidArgumentError as e:
  print("one text refused:", [l for l in str(e).splitlines() if "expected" in l][0])
try:
  serve(text_a=tf.constant(["a", "b"]), text_b=tf.constant(["c", "d", "e"]))
  print("uneven accepted")
except tf.errors.InvalidArgumentError as e:
  print("uneven refused:", [l for l in str(e).splitlines() if "expected" in l][0])
"""


def test_an_empty_batch_gives_empty_outputs_and_a_2d_or_uneven_batch_is_refused(
    classifier_served):
  """Both texts of a pair go through the tokenizer as one batch, so a text_b batch of another
  size must be refused by name, not read as the next examples' first texts. One text (a
  scalar) is refused by name too."""
  stdout = classifier_served[3]
  assert "empty (0,) (0, 2)" in stdout
  assert "2-D refused: " in stdout and (
      "text_a: expected a 1-D batch of strings, one text per example" in stdout)
  assert "one text refused: assertion failed: [text_a: expected a 1-D batch of strings, one " \
      "text per example (one text: [text])]" in stdout
  assert "uneven refused: " in stdout and (
      "text_b: expected one text per text_a, as many texts as text_a" in stdout)


def test_assets_make_the_saved_model_self_contained(classifier):
  _, out = classifier
  assets = os.path.join(out, "saved_model", "assets")
  assert sorted(os.listdir(assets)) == ["bert_config.json", "export_config.json", "labels.txt",
                                        "vocab.txt"]
  with open(os.path.join(assets, "labels.txt"), encoding="utf-8") as f:
    assert f.read().split() == ["different", "same"]
  with open(os.path.join(assets, "vocab.txt"), "rb") as f, open(CHINESE_VOCAB, "rb") as g:
    assert f.read() == g.read()
  with open(os.path.join(assets, "export_config.json"), encoding="utf-8") as f:
    spec = json.load(f)
  assert (spec["task"], spec["truncation"], spec["text_b"], spec["max_seq_length"]) == (
      "classifier", "tail", True, 20)
  assert not [d for d in os.listdir(out) if ".tmp-" in d or ".old-" in d]


def test_saved_model_cli_runs_the_text_signature(classifier):
  _, out = classifier
  cli_path = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
  proc = subprocess.run(
      [cli_path, "run", "--dir", os.path.join(out, "saved_model"), "--tag_set", "serve",
       "--signature_def", "serving_default",
       "--input_exprs", 'text_a=["酒店的服务好"];text_b=["早餐差"]'],
      capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "Result for output key label:" in proc.stdout
  assert "Result for output key probabilities:" in proc.stdout


def _write_checkpoint_without_head(source_checkpoint, output_dir):
  """A checkpoint in output_dir with the bert/ weights of source_checkpoint only."""
  reader = tf.train.load_checkpoint(source_checkpoint)
  with tf.Graph().as_default():
    variables = [tf.Variable(reader.get_tensor(name), name=name)
                 for name, _ in tf.train.list_variables(source_checkpoint)
                 if name.startswith("bert/")]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver(variables).save(sess, os.path.join(output_dir, "model.ckpt"),
                                     global_step=1)


def test_failed_export_leaves_the_existing_saved_model_intact(classifier, tmp_path):
  root, out = classifier
  other = str(tmp_path / "no_head")
  os.makedirs(other)
  shutil.copy(os.path.join(out, "labels.txt"), other)
  shutil.copytree(os.path.join(out, "saved_model"), os.path.join(other, "saved_model"))
  _write_checkpoint_without_head(tf.train.latest_checkpoint(out), other)
  before = {name: os.path.getmtime(os.path.join(other, "saved_model", name))
            for name in os.listdir(os.path.join(other, "saved_model"))}
  proc = run_script("run_classifier_mgpu.py", *_classifier_args(root, other, "--do_export"))
  assert_one_line_error(proc, "lacks 2 variable(s)", "output_bias")
  assert {name: os.path.getmtime(os.path.join(other, "saved_model", name))
          for name in os.listdir(os.path.join(other, "saved_model"))} == before
  assert not [d for d in os.listdir(other) if ".tmp-" in d or ".old-" in d]


@pytest.fixture(scope="module")
def exported_again(classifier, tmp_path_factory):
  """The trained run copied without its SavedModel and exported again by an export-only run
  with --export_tflite: (its stderr, the new SavedModel's directory). One run serves both the
  export-only test and the TFLite test (the TFLite file is written beside the same SavedModel)."""
  _, out = classifier
  copy = str(tmp_path_factory.mktemp("export_again") / "copy")
  shutil.copytree(out, copy, ignore=shutil.ignore_patterns("saved_model*"))
  proc = run_script("run_classifier_mgpu.py", "--task_name=tsv", "--output_dir=%s" % copy,
                    "--do_export", "--export_tflite")
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stderr, os.path.join(copy, "saved_model")


def test_export_after_training_needs_only_the_output_dir(classifier_outputs, exported_again):
  """An export-only run takes the config, vocabulary, max_seq_length, truncation and the pair
  layout from the training run's run_info.json: no --data_dir, no model flags."""
  examples, _, served, _, _, _ = classifier_outputs
  stderr, saved_model = exported_again
  assert "--truncation=tail, from the training run" in stderr
  assert "contains input name(s)" not in stderr  # TensorFlow's 2 KB lines about internals
  texts = {"text_a": [e.text_a for e in examples], "text_b": [e.text_b for e in examples]}
  again = _probe(saved_model, [["serving_default", texts]])[0]
  assert again["label"] == served["label"]
  assert np.abs(np.array(again["logits"]) - np.array(served["logits"])).max() < 1e-6


# Prints {variable name: dtype} of a SavedModel's model variables (build_saved_model tracks them).
# (Appended to _PROBE: `model` is the loaded SavedModel.)
_DTYPES = """
print(json.dumps({v.name.split(":")[0]: v.dtype.name for v in model.model_variables}))
"""


def _export_again(out, tmp_path, *flags):
  """The trained run `out` copied without its SavedModel and exported with `flags`; returns the
  new SavedModel's directory."""
  copy = str(tmp_path / "copy")
  shutil.copytree(out, copy, ignore=shutil.ignore_patterns("saved_model*"))
  proc = run_script("run_classifier_mgpu.py", "--task_name=tsv", "--output_dir=%s" % copy,
                    "--do_export", *flags)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return os.path.join(copy, "saved_model")


def test_bf16_export_keeps_kernels_in_bfloat16_and_serves_close_to_fp32(
    classifier, classifier_outputs, tmp_path):
  """--export_precision=bf16: the dense kernels are stored in bfloat16 (embeddings, biases and
  layer norms stay float32), and the test set's logits are fp32's within bfloat16 rounding,
  with the same labels."""
  root, out = classifier
  examples, _, served, _, _, _ = classifier_outputs
  saved_model = _export_again(out, tmp_path, "--export_precision=bf16")
  texts = {"text_a": [e.text_a for e in examples], "text_b": [e.text_b for e in examples]}
  # One fresh process serves the test set, then lists the variables' dtypes.
  (bf16,), dtypes = _probe_then(saved_model, [["serving_default", texts]], _DTYPES)
  dtypes = json.loads(dtypes)
  kernels = [name for name in dtypes if name.endswith("/kernel")]
  with open(os.path.join(root, "bert_config.json")) as f:
    layers = json.load(f)["num_hidden_layers"]
  assert len(kernels) == 6 * layers + 1  # q, k, v, attention output, intermediate, output; pooler
  assert {dtypes[name] for name in kernels} == {"bfloat16"}
  assert {dtype for name, dtype in dtypes.items() if name not in kernels} == {"float32"}
  fp32_logits, bf16_logits = np.array(served["logits"]), np.array(bf16["logits"])
  difference = np.abs(bf16_logits - fp32_logits).max()
  print("bf16 vs fp32 logits: max |difference| %.2e of max |logit| %.2f" % (
      difference, np.abs(fp32_logits).max()))
  assert 0 < difference < 0.03 * np.abs(fp32_logits).max()
  assert bf16["label"] == served["label"]
  with open(os.path.join(saved_model, "assets", "export_config.json")) as f:
    assert json.load(f)["precision"] == "bf16"


def test_tflite_export_serves_the_saved_models_logits_one_text_at_a_time_and_in_batches(
    classifier_outputs, exported_again):
  """--export_tflite: assets/model.tflite, served by TfliteClassifier from raw text (tokenized
  in Python like the run script: tail truncation of pairs at max_seq_length 20), gives the
  SavedModel's logits and labels one pair at a time (lengths change, the interpreter resizes)
  and in a batch padded to its longest row."""
  from serving import tflite_classifier  # pylint: disable=g-import-not-at-top
  examples, _, served, _, _, _ = classifier_outputs
  _, saved_model = exported_again
  model = tflite_classifier.TfliteClassifier(saved_model, num_threads=1)
  texts_a, texts_b = [e.text_a for e in examples], [e.text_b for e in examples]
  lengths = {int(model.features([a], [b])["input_mask"].sum()) for a, b in zip(texts_a, texts_b)}
  assert len(lengths) > 3 and max(lengths) == 20  # several lengths, some pairs truncated
  one_by_one = np.concatenate([model.classify([a], [b])["logits"]
                               for a, b in zip(texts_a, texts_b)])
  batch = model.classify(texts_a, texts_b)
  np.testing.assert_allclose(one_by_one, served["logits"], atol=2e-5)
  np.testing.assert_allclose(batch["logits"], served["logits"], atol=2e-5)
  assert batch["label"] == served["label"]
  with pytest.raises(InputError, match="this model reads text pairs"):
    model.classify(texts_a)
  with pytest.raises(InputError, match=r"texts_a: expected a list of texts, got one str; "
                                       r"pass \[text\] for one text"):
    model.classify(texts_a[0], texts_b[0])
  empty = model.classify([], [])
  assert empty["logits"].shape == (0, 2) and empty["label"] == []
  # In a user's process on a machine without a GPU: no start-up noise, no TFLite INFO line.
  proc = subprocess.run(
      [sys.executable, "-c", "import sys; from serving.tflite_classifier import TfliteClassifier; "
       "print(TfliteClassifier(sys.argv[1]).classify(['x'], ['y'])['label'])", saved_model],
      capture_output=True, text=True, timeout=120, env=test_quiet_scripts._env())
  assert proc.returncode == 0 and proc.stdout.strip() in ("['same']", "['different']"), proc.stderr
  noise = [line for line in proc.stderr.splitlines() if "XNNPACK" in line or any(
      pattern.search(line) for _, pattern in test_quiet_scripts.NOISE)]
  assert not noise, noise


@pytest.mark.parametrize("keep", [0.5, 0.99])
def test_a_tflite_model_cut_short_is_one_error_naming_it(tmp_path, keep):
  """A damaged assets/model.tflite (cut at half its bytes: TensorFlow Lite's reader refuses it;
  cut by its last bytes: its first allocation does) is an InputError naming the file."""
  from serving import tflite_classifier  # pylint: disable=g-import-not-at-top
  with tf.Graph().as_default(), tf.Session() as sess:
    ids = tf.placeholder(tf.float32, [1, 4], name="ids")
    logits = tf.identity(tf.matmul(ids, tf.ones([4, 2])) + 1.0, name="logits")
    model = tf.lite.TFLiteConverter.from_session(sess, [ids], [logits]).convert()
  assets = tmp_path / "saved_model" / "assets"
  assets.mkdir(parents=True)
  (assets / "model.tflite").write_bytes(model[:int(len(model) * keep)])
  shutil.copy(ENGLISH_VOCAB, str(assets / "vocab.txt"))
  (assets / "export_config.json").write_text(json.dumps(dict(
      labels=["a", "b"], text_b=False, max_seq_length=8, truncation="head", do_lower_case=True)))
  with pytest.raises(InputError, match=r"assets/model\.tflite: not a TensorFlow Lite model that "
                                       r"runs \(.+\); a file cut short or damaged\?"):
    tflite_classifier.TfliteClassifier(str(tmp_path / "saved_model"), num_threads=1)


def test_tflite_classifier_refuses_a_sliding_window_export(tmp_path):
  """Exported before --export_tflite was checked after run_info.json's flags were adopted: the
  model scores one window, and this class would truncate what the run pooled."""
  from serving import tflite_classifier  # pylint: disable=g-import-not-at-top
  assets = tmp_path / "saved_model" / "assets"
  assets.mkdir(parents=True)
  (assets / "model.tflite").write_bytes(b"")
  (assets / "export_config.json").write_text(json.dumps(dict(
      labels=["a", "b"], text_b=False, max_seq_length=8, truncation="head", do_lower_case=True,
      long_text="sliding")))
  with pytest.raises(InputError, match=r"saved_model: exported with --long_text=sliding, whose "
                                       r"texts are pooled over windows"):
    tflite_classifier.TfliteClassifier(str(tmp_path / "saved_model"), num_threads=1)


_SERVED = dict(labels=["a", "b"], text_b=False, max_seq_length=8, truncation="head",
               do_lower_case=True, checkpoint="model.ckpt-1")


@pytest.mark.parametrize("content,problem", [
    (b'{"labels": ["a", "b"], ', "not valid JSON (Expecting property name enclosed in double "
                                 "quotes: line 1 column 24 (char 23))"),
    (b'{"labels": ["\xff\xfe"]}', "not valid utf-8 (byte 0xff at offset 13)"),
    (b'["a", "b"]', 'expected a JSON object, got ["a", "b"]'),
    (json.dumps(dict(_SERVED, max_seq_length="8")).encode(),
     'max_seq_length is "8": expected an integer'),
    (json.dumps(dict(_SERVED, do_lower_case="yes")).encode(),
     'do_lower_case is "yes": expected true or false'),
    (json.dumps({k: v for k, v in _SERVED.items() if k != "truncation"}).encode(),
     'no "truncation"'),
    (json.dumps(dict(_SERVED, labels=[0, 1])).encode(), "labels must be strings, got [0, 1]"),
    (json.dumps(dict(_SERVED, truncation="middle")).encode(),
     "truncation is 'middle': expected one of head, tail, head_tail"),
])
def test_a_damaged_export_config_is_one_error_naming_it(tmp_path, content, problem):
  """assets/export_config.json, read by TfliteClassifier and serving_compare, goes through
  core/json_files as run_info.json does: bad JSON, other bytes, wrong types and missing fields
  are an InputError naming the file (they were a JSONDecodeError, KeyError or a label per
  character). serving_compare's main ends there too, before any conversion."""
  from serving import tflite_classifier  # pylint: disable=g-import-not-at-top
  from test_flags_doc import load_script, own_flags  # pylint: disable=g-import-not-at-top
  import run_classifier_mgpu  # pylint: disable=g-import-not-at-top,unused-import
  assets = tmp_path / "run" / "saved_model" / "assets"
  assets.mkdir(parents=True)
  (assets / "model.tflite").write_bytes(b"")
  (assets / "export_config.json").write_bytes(content)
  expected = "%s: %s; export the model again with --do_export" % (
      assets / "export_config.json", problem)
  with pytest.raises(InputError) as raised:
    tflite_classifier.TfliteClassifier(str(tmp_path / "run" / "saved_model"), num_threads=1)
  assert str(raised.value) == expected
  if content.startswith(b"["):  # A folder in its place, once.
    (assets / "export_config.json").unlink()
    (assets / "export_config.json").mkdir()
    with pytest.raises(InputError, match="export_config.json: is a folder; expected a JSON "
                                         "file; export the model again"):
      tflite_classifier.TfliteClassifier(str(tmp_path / "run" / "saved_model"), num_threads=1)
    return
  if "truncation" in problem:  # serving_compare needs only checkpoint and do_lower_case.
    return
  script = os.path.join(REPO_ROOT, "benchmarks", "serving_compare.py")
  with own_flags() as fv:
    serving_compare = load_script(script)
    fv([script, "--run_dir=%s" % (tmp_path / "run"), "--work_dir=%s" % (tmp_path / "work")])
    with pytest.raises(InputError) as raised:
      serving_compare.main(None)
  assert str(raised.value) == expected
  assert not (tmp_path / "work").exists()


@pytest.mark.parametrize("extra,message", [
    (["--predict_file=unread.txt", "--export_tflite"],
     "--export_tflite: needs --do_export (the TFLite model is written into the SavedModel's "
     "assets)"),
    (["--do_export", "--export_tflite", "--export_precision=bf16"],
     "--export_tflite: needs --export_precision=fp32 (got bf16)")])
def test_tflite_export_refuses_what_it_cannot_serve_before_any_work(classifier, tmp_path, extra,
                                                                    message):
  _, out = classifier
  proc = run_script("run_classifier_mgpu.py", "--task_name=tsv",
                    "--output_dir=%s" % (tmp_path / "never"), *extra)
  errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
  assert proc.returncode == 2 and errors == ["error: " + message], proc.stderr[-2000:]
  assert not os.path.exists(tmp_path / "never" / "saved_model")


def test_export_without_a_checkpoint_is_a_one_line_error(classifier, tmp_path):
  root, out = classifier
  shutil.copy(os.path.join(out, "labels.txt"), str(tmp_path))
  proc = run_script("run_classifier_mgpu.py", *_classifier_args(root, str(tmp_path),
                                                                "--do_export"))
  assert_one_line_error(proc, "no checkpoint", str(tmp_path))
  assert not os.path.exists(str(tmp_path / "saved_model"))


def test_export_with_a_vocab_that_does_not_match_the_config_is_a_one_line_error(classifier):
  root, out = classifier
  args = _classifier_args(root, out, "--do_export")
  args[2] = "--vocab_file=%s" % ENGLISH_VOCAB
  assert_one_line_error(run_script("run_classifier_mgpu.py", *args), "30522 entries",
                        "vocab_size=21128")


def test_exported_rewriter_reproduces_predict_txt(tmp_path):
  data_dir, out = str(tmp_path / "data"), str(tmp_path / "out")
  sources = test_rewrite_script._write_data(data_dir, num_hidden_layers=1)
  flags = test_rewrite_script._common_flags(data_dir, out) + [
      "--do_train", "--do_predict", "--do_export", "--num_train_steps=60",
      "--train_batch_size=16", "--learning_rate=1e-3", "--beam_size=3",
      "--length_penalty=0.6", "--no_repeat_ngram_size=2", "--min_target_length=2"]
  proc = run_script("run_rewrite_finetune.py", *flags)
  assert proc.returncode == 0, proc.stderr[-4000:]
  served, _, from_ids = _probe(os.path.join(out, "saved_model"), [
      ["serving_default", {"source": sources}], ["tokenize", {"source": sources}],
      ["serve_ids", 1]])
  with open(os.path.join(out, "predict.txt"), encoding="utf-8") as f:
    predictions = f.read().splitlines()
  assert len(predictions) == test_rewrite_script.NUM_TEST
  assert served["rewrite"] == predictions
  assert from_ids["rewrite"] == predictions
  assert len(set(predictions)) >= 3  # varied rewrites, not one constant string
  with open(os.path.join(out, "saved_model", "assets", "export_config.json")) as f:
    spec = json.load(f)
  assert (spec["beam_size"], spec["length_penalty"], spec["no_repeat_ngram_size"],
          spec["min_target_length"], spec["max_target_length"]) == (3, 0.6, 2, 2, 6)


def _graph_values(build):
  """Evaluates build() -> dict of Tensors/RaggedTensors in a fresh graph, as Python lists."""
  with tf.Graph().as_default():
    tensors = build()
    with tf.Session() as sess:
      sess.run(tf.tables_initializer())
      values = sess.run(tensors)
  return {k: v.to_list() if hasattr(v, "to_list") else v.tolist() for k, v in values.items()}


@pytest.mark.parametrize("vocab_file", [CHINESE_VOCAB, ENGLISH_VOCAB])
def test_graph_tokenizer_gives_full_tokenizer_ids(vocab_file):
  """The probe texts, and (lower-cased) Basic Multilingual Plane characters inside a word."""
  # Every character for the English vocabulary, every 7th for the Chinese one (time).
  step = 1 if vocab_file == ENGLISH_VOCAB else 7
  every_char = ["Ab%sCd é" % chr(c) for c in range(0, 0x10000, step)
                if not 0xD800 <= c <= 0xDFFF]
  for do_lower_case, texts in ((True, PROBE_TEXTS + every_char), (False, PROBE_TEXTS)):
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
    graph = _graph_values(lambda: {"ids": graph_tokenizer.GraphTokenizer(
        vocab_file, do_lower_case).tokenize(tf.constant(texts))})
    mismatches = [text for text, ids in zip(texts, graph["ids"])
                  if tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)) != ids]
    assert not mismatches, mismatches[:5]
  # The over-long probe sits on both sides of the 200-character limit.
  assert tokenizer.tokenize("a" * 201) == ["[UNK]"]
  assert "[UNK]" not in tokenizer.tokenize("b" * 200)


def test_graph_tokenizer_without_word_internal_pieces(tmp_path):
  """A vocabulary with no "##" pieces (the graph's table of them would be empty) gives
  FullTokenizer's ids too: whole words where they are tokens, [UNK] for the rest, and a
  literal "##" word is punctuation, not a piece."""
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "#", "hello", "world",
                                    "he", "h"]) + "\n")
  texts = ["hello world", "hell", "helloworld", "he h", "##he", "", "world ## hello"]
  tokenizer = tokenization.FullTokenizer(str(vocab_file), do_lower_case=True)
  graph = _graph_values(lambda: {"ids": graph_tokenizer.GraphTokenizer(
      str(vocab_file), True).tokenize(tf.constant(texts))})
  expected = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)) for text in texts]
  assert graph["ids"] == expected
  assert expected[0] == [5, 6] and expected[1] == [1] and expected[4] == [4, 4, 7]


def test_graph_detokenizer_gives_rewrite_text():
  tokenizer = tokenization.FullTokenizer(ENGLISH_VOCAB, do_lower_case=True)
  rng = np.random.RandomState(0)
  ids = rng.randint(0, 30522, size=(300, 12))
  ids[:, 8] = 102  # [SEP]: what follows is dropped
  ids[rng.rand(300, 12) < 0.2] = 0  # padding is dropped
  graph = _graph_values(lambda: {"text": graph_tokenizer.GraphTokenizer(
      ENGLISH_VOCAB, True).detokenize(tf.constant(ids, tf.int32))})
  assert [t.decode("utf-8") for t in graph["text"]] == [
      rewrite_data.ids_to_text(tokenizer, row, 102) for row in ids]


def test_graph_packing_matches_classifier_data_for_every_truncation_mode():
  tokenizer = tokenization.FullTokenizer(ENGLISH_VOCAB, do_lower_case=True)
  rng = np.random.RandomState(1)
  words = ["the", "unaffable", "hotel", "中", ",", "staff", "ok"]
  texts = [" ".join(rng.choice(words, size=rng.randint(0, 200))) for _ in range(40)]
  cases = [(mode, pair, length) for mode in tokenization.TRUNCATION_MODES
           for pair in (False, True) for length in (8, 140, 300)]

  def build():
    graph_tok = graph_tokenizer.GraphTokenizer(ENGLISH_VOCAB, True)
    ids_a, ids_b = graph_tok.tokenize(texts), graph_tok.tokenize(texts[::-1])
    return {"%s-%s-%d" % case: graph_features.classifier_inputs(
        ids_a, ids_b if case[1] else None, 101, 102, case[2], case[0])["input_ids"]
            for case in cases}

  graph = _graph_values(build)
  for mode, pair, length in cases:
    for i, text in enumerate(texts):
      example = classifier_data.InputExample("x", text, texts[::-1][i] if pair else None)
      expected = classifier_data.convert_single_example(example, {}, length, tokenizer, mode,
                                                        need_label=False)
      assert graph["%s-%s-%d" % (mode, pair, length)][i] == expected.input_ids, (mode, pair,
                                                                                length, i)


def test_pair_budgets_closed_form_equals_the_stock_loop():
  pairs = [(a, b, s) for a in range(0, 30) for b in range(0, 30) for s in (1, 5, 16, 17)]
  graph = _graph_values(lambda: dict(zip(("a", "b"), graph_features.pair_budgets(
      tf.constant([p[0] for p in pairs], tf.int64), tf.constant([p[1] for p in pairs], tf.int64),
      tf.constant([p[2] for p in pairs], tf.int64)))))
  assert list(zip(graph["a"], graph["b"])) == [
      tokenization.pair_budgets(a, b, s) for a, b, s in pairs]


# The one input class where the graph and Python differ (docs/serving.md, "Known differences").
_SPACING_MARKS_WITH_CLASS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and
                             unicodedata.combining(chr(c)) and
                             unicodedata.category(chr(c)) != "Mn"]


def test_documented_difference_reordered_spacing_marks_never_reaches_bundled_vocabs():
  """NFD reorders spacing marks (Mc) of different combining classes; the graph does not.

  The words then differ, but neither bundled vocabulary holds any of these characters, so
  the ids are the same ([UNK]).
  """
  assert len(_SPACING_MARKS_WITH_CLASS) == 25
  text = "x\U0001D16D\u0301\U0001D165"  # classes 226, 230 (Mn), 216
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  graph = _graph_values(lambda: {"words": graph_tokenizer.GraphTokenizer(
      ENGLISH_VOCAB, True).basic_tokenize(tf.constant([text]))})
  assert basic.tokenize(text) == ["x\U0001D165\U0001D16D"]
  assert [w.decode("utf-8") for w in graph["words"][0]] == ["x\U0001D16D\U0001D165"]
  for vocab_file in (CHINESE_VOCAB, ENGLISH_VOCAB):
    vocab_chars = set("".join(tokenization.load_vocab(vocab_file)))
    assert not vocab_chars & set(map(chr, _SPACING_MARKS_WITH_CLASS))
