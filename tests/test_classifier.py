"""run_classifier_mgpu.py end to end, its data readers, caching, truncation and input errors."""

import collections
import contextlib
import os
import re
import subprocess

import numpy as np
import pytest

from classifier import data as classifier_data
from classifier import metrics as classifier_metrics
from core.errors import InputError
import tokenization
from script_runner import CHINESE_VOCAB, assert_one_line_error, run_script, \
    write_tiny_bert_config

POS = ["好", "喜欢", "满意", "推荐"]
NEG = ["差", "讨厌", "失望", "后悔"]


def _write(path, rows):
  path.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
  return path


def _make_task(root, n_train=64, n_dev=10, n_test=13, test_header=True):
  """A tiny two-label Chinese task; the test set (13 rows) fits no batch or tower count."""
  root.mkdir(parents=True, exist_ok=True)

  def rows(n, offset):
    out = []
    for i in range(n):
      words = POS if (i + offset) % 2 == 0 else NEG
      out.append(["酒店%s服务%s" % (words[i % 4], words[(i + 1) % 4]),
                  "pos" if (i + offset) % 2 == 0 else "neg"])
    return out

  _write(root / "train.tsv", rows(n_train, 0))
  _write(root / "dev.tsv", rows(n_dev, 1))
  test = rows(n_test, 0)
  _write(root / "test.tsv", ([["qid", "text_a"]] if test_header else []) +
         [[str(i), t] for i, (t, _) in enumerate(test)])
  return root


def _common_args(data_dir, output_dir, config, *extra):
  return ["--task_name=tsv", "--data_dir=%s" % data_dir, "--vocab_file=%s" % CHINESE_VOCAB,
          "--bert_config_file=%s" % config, "--output_dir=%s" % output_dir,
          "--max_seq_length=16", "--train_batch_size=4", "--predict_batch_size=3",
          "--eval_batch_size=4", "--learning_rate=1e-3", "--log_every_n_steps=2"] + list(extra)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """One real training run with 2 towers shared by the end-to-end tests."""
  root = tmp_path_factory.mktemp("clf")
  data_dir = _make_task(root / "data")
  config = write_tiny_bert_config(root / "bert_config.json", 21128)
  out = root / "out"
  proc = run_script("run_classifier_mgpu.py",
                    *_common_args(data_dir, out, config, "--do_train", "--do_eval",
                                  "--do_predict", "--num_train_epochs=2", "--n_gpus=2",
                                  "--save_checkpoints_steps=4"))
  assert proc.returncode == 0, proc.stderr[-4000:]
  return root, data_dir, config, out, proc


def test_train_eval_predict_outputs(trained):
  _, _, _, out, proc = trained
  # 64 examples / (4 x 2 towers) x 2 epochs = 16 steps.
  assert "tower 1 -> /device:CPU:1" in proc.stderr
  assert re.search(r"step 16/16  loss [0-9.]+  lr [0-9.e+-]+  [0-9.]+ examples/sec  ETA",
                   proc.stderr)
  results = dict(line.split(" = ") for line in
                 (out / "eval_results.txt").read_text().splitlines())
  for key in ("eval_accuracy", "eval_loss", "global_step", "loss", "precision_pos",
              "recall_neg", "f1_pos", "macro_f1", "mcc"):
    assert key in results
  assert int(results["global_step"]) == 16
  assert int(results["eval_examples"]) == 10
  assert (out / "labels.txt").read_text() == "neg\npos\n"
  assert any(name.startswith("events.out.tfevents") for name in os.listdir(out))


def test_matthews_correlation_matches_the_formula():
  labels = np.array([1, 1, 1, 1, 0, 0, 0, 1, 0, 1])
  predictions = np.array([1, 1, 0, 1, 0, 1, 0, 1, 1, 1])
  tp, tn, fp, fn = 5.0, 2.0, 2.0, 1.0
  binary = (tp * tn - fp * fn) / np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  assert abs(classifier_metrics.matthews_corrcoef(predictions, labels, 2) - binary) < 1e-12
  assert classifier_metrics.matthews_corrcoef(labels, labels, 2) == 1.0
  assert classifier_metrics.matthews_corrcoef(1 - labels, labels, 2) == -1.0
  assert classifier_metrics.matthews_corrcoef(np.ones(10, int), labels, 2) == 0.0  # majority
  # Three classes (Gorodkin's R_K): 3 of 6 right; true counts t = (2, 3, 1), predicted
  # p = (3, 2, 1): (3 * 6 - p.t) / sqrt((36 - p.p) * (36 - t.t)) = (18 - 13) / 22.
  three = classifier_metrics.matthews_corrcoef(np.array([0, 2, 1, 0, 0, 1]),
                                               np.array([0, 1, 2, 0, 1, 1]), 3)
  assert abs(three - 5.0 / 22.0) < 1e-12


def test_predict_txt_has_one_label_per_test_row_in_order(trained):
  _, _, _, out, _ = trained
  lines = (out / "predict.txt").read_text().splitlines()
  assert len(lines) == 13  # neither a multiple of predict_batch_size=3 nor of 2 towers x 3
  assert set(lines) <= {"pos", "neg"}
  probs = (out / "test_results.tsv").read_text().splitlines()
  assert len(probs) == 13
  for line, row in zip(lines, probs):
    p = [float(x) for x in row.split("\t")]
    assert abs(sum(p) - 1.0) < 1e-4
    assert line == ["neg", "pos"][p.index(max(p))]


def test_rerun_resumes_from_latest_checkpoint_and_predicts_with_three_towers(trained, tmp_path):
  root, data_dir, config, out, _ = trained
  proc = run_script("run_classifier_mgpu.py",
                    *_common_args(data_dir, out, config, "--do_train", "--do_predict",
                                  "--num_train_epochs=3", "--n_gpus=2",
                                  "--save_checkpoints_steps=4"))
  assert proc.returncode == 0, proc.stderr[-4000:]
  # 3 epochs = 24 steps: the re-run starts at the saved step 16 instead of 0.
  assert "Resuming from" in proc.stderr and "model.ckpt-16" in proc.stderr
  assert "steps 16 -> 24" in proc.stderr
  assert "Using cached train features" in proc.stderr
  # Predict-only with 3 towers from the trained output_dir (labels come from labels.txt).
  proc = run_script("run_classifier_mgpu.py",
                    *_common_args(data_dir, out, config, "--do_predict", "--n_gpus=3"))
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert len((out / "predict.txt").read_text().splitlines()) == 13


# ------------------------------------------------------------------------------- input errors


def _run_error_case(tmp_path, mutate, *extra):
  data_dir = _make_task(tmp_path / "data", n_train=8, n_dev=4, n_test=3)
  config = write_tiny_bert_config(tmp_path / "bert_config.json", 21128)
  args = _common_args(data_dir, tmp_path / "out", config, "--do_train", "--do_eval",
                      "--num_train_epochs=1")
  args = mutate(data_dir, config, args) if mutate else args
  return run_script("run_classifier_mgpu.py", *(args + list(extra)))


def test_missing_data_file(tmp_path):
  proc = _run_error_case(tmp_path, lambda d, c, a: (os.remove(d / "train.tsv"), a)[1])
  assert_one_line_error(proc, "train.tsv", "no such file")


def test_malformed_row_names_file_and_line(tmp_path):
  def mutate(data_dir, config, args):
    lines = (data_dir / "train.tsv").read_text(encoding="utf-8").splitlines()
    lines[4] = "a row without a label"
    (data_dir / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return args
  proc = _run_error_case(tmp_path, mutate)
  assert_one_line_error(proc, "train.tsv:5: 1 tab-separated column(s), but line 1 has 2")


def test_unknown_label_in_dev(tmp_path):
  def mutate(data_dir, config, args):
    with open(data_dir / "dev.tsv", "a", encoding="utf-8") as f:
      f.write("服务很好\tneutral\n")
    return args
  proc = _run_error_case(tmp_path, mutate)
  assert_one_line_error(proc, "dev.tsv", "line 5", "'neutral'", "['neg', 'pos']")


def test_max_seq_length_above_max_position_embeddings(tmp_path):
  proc = _run_error_case(tmp_path, None, "--max_seq_length=100")
  assert_one_line_error(proc, "--max_seq_length=100 exceeds max_position_embeddings=64")


@pytest.mark.parametrize("value", ["0", "-2"])
def test_n_gpus_below_one(tmp_path, value):
  proc = _run_error_case(tmp_path, None, "--n_gpus=%s" % value)
  assert_one_line_error(proc, "--n_gpus=%s: expected an integer >= 1" % value)


def test_vocab_size_not_matching_config(tmp_path):
  def mutate(data_dir, config, args):
    write_tiny_bert_config(config, 30522)
    return args
  proc = _run_error_case(tmp_path, mutate)
  assert_one_line_error(proc, "chinese_vocab.txt has 21128 entries but vocab_size=30522")


def test_missing_init_checkpoint(tmp_path):
  proc = _run_error_case(tmp_path, None, "--init_checkpoint=%s" % (tmp_path / "nope.ckpt"))
  assert_one_line_error(proc, "--init_checkpoint=", "no checkpoint there")


# --------------------------------------------------------------------------- readers and cache


def test_stock_mrpc_and_cola_formats(tmp_path):
  mrpc = tmp_path / "mrpc"
  mrpc.mkdir()
  header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
  (mrpc / "train.tsv").write_text(
      "\ufeff" + "\n".join("\t".join(r) for r in [
          header, ["1", "1", "2", "He said so.", "So he said."],
          ["0", "3", "4", "It rains.", "The sun shines."]]) + "\n", encoding="utf-8")
  examples = classifier_data.MrpcProcessor().get_train_examples(str(mrpc))
  assert [(e.text_a, e.text_b, e.label) for e in examples] == [
      ("He said so.", "So he said.", "1"), ("It rains.", "The sun shines.", "0")]
  cola = tmp_path / "cola"
  cola.mkdir()
  _write(cola / "dev.tsv", [["gj04", "1", "", "The book was read."],
                            ["gj04", "0", "*", "Book the read was."]])
  examples = classifier_data.ColaProcessor().get_dev_examples(str(cola))
  assert [(e.text_a, e.text_b, e.label) for e in examples] == [
      ("The book was read.", None, "1"), ("Book the read was.", None, "0")]


def test_tsv_task_layouts(tmp_path):
  _write(tmp_path / "train.tsv", [["text_a", "text_b", "label"], ["甲", "乙", "x"],
                                  ["丙", "丁", "y"]])
  _write(tmp_path / "test.tsv", [["丙", "丁"]])
  processor = classifier_data.TsvProcessor(str(tmp_path / "out"))
  train = processor.get_train_examples(str(tmp_path))
  assert [(e.text_a, e.text_b, e.label) for e in train] == [("甲", "乙", "x"), ("丙", "丁", "y")]
  assert processor.get_labels() == ["x", "y"]
  test = processor.get_test_examples(str(tmp_path))
  assert [(e.text_a, e.text_b, e.label) for e in test] == [("丙", "丁", None)]
  # Explicit columns: label first.
  _write(tmp_path / "train.tsv", [["x", "甲"], ["y", "乙"]])
  processor = classifier_data.TsvProcessor(str(tmp_path / "out2"), text_a_column=1,
                                           label_column=0)
  assert [(e.text_a, e.label) for e in processor.get_train_examples(str(tmp_path))] == [
      ("甲", "x"), ("乙", "y")]


def test_a_stray_tab_in_one_row_is_refused_not_read_as_a_label(tmp_path):
  """A tab inside one text shifts that row's columns; it must not become a made-up class."""
  rows = [["服务很好", "pos"], ["房间很差", "neg"], ["早餐\t不错", "pos"], ["太吵", "neg"]]
  _write(tmp_path / "train.tsv", rows)
  processor = classifier_data.TsvProcessor(str(tmp_path / "out"))
  with pytest.raises(InputError, match=r"train.tsv:3: 3 tab-separated column\(s\), but line 1 "
                     r"has 2 \(text_a \(col 1\), label \(col 2\)\); a tab inside a text"):
    processor.get_train_examples(str(tmp_path))
  # The same in a header-ed file, a test file and a stock GLUE file.
  _write(tmp_path / "test.tsv", [["text"], ["好"], ["差\t极了"]])
  with pytest.raises(InputError, match=r"test.tsv:3: 2 tab-separated .* line 1 has 1"):
    classifier_data.TsvProcessor(str(tmp_path / "out")).read_test_file(
        str(tmp_path / "test.tsv"))
  _write(tmp_path / "dev.tsv", [["gj04", "1", "", "Fine."], ["gj04", "0", "*", "Bad", "tab."]])
  with pytest.raises(InputError, match=r"dev.tsv:2: 5 tab-separated .* line 1 has 4"):
    classifier_data.ColaProcessor().get_dev_examples(str(tmp_path))
  # Blank lines are not rows of the tsv task.
  _write(tmp_path / "train.tsv", [["好", "pos"], [""], ["差", "neg"], [""]])
  assert len(classifier_data.TsvProcessor(str(tmp_path / "o2")).get_train_examples(
      str(tmp_path))) == 2


def test_a_file_in_another_encoding_gets_the_conversion_that_fits(tmp_path):
  """UTF-16 (Windows' "Unicode" export: byte order mark, NUL bytes) and GBK are told apart."""
  (tmp_path / "train.tsv").write_bytes("好\tpos\n差\tneg\n".encode("utf-16"))
  processor = classifier_data.TsvProcessor(str(tmp_path / "out"))
  with pytest.raises(InputError, match=r"train.tsv:1: not valid utf-8 \(byte 0xff at column 1; "
                     r"the file looks UTF-16\); convert the file first, e.g. iconv -f utf-16 "):
    processor.get_train_examples(str(tmp_path))
  (tmp_path / "train.tsv").write_bytes("好\tpos\n差\tneg\n".encode("gbk"))
  with pytest.raises(InputError, match=r"train.tsv:1: not valid utf-8 \(byte 0xba at column 1\); "
                     r"convert the file first, e.g. iconv -f gbk -t utf-8 .* \(if it is GBK\)"):
    processor.get_train_examples(str(tmp_path))


def test_train_dev_and_test_must_share_one_layout(tmp_path):
  """Single texts in train and pairs in test (a second column that is not a label) would feed
  the model a layout it never saw."""
  _write(tmp_path / "train.tsv", [["好", "pos"], ["差", "neg"]])
  _write(tmp_path / "test.tsv", [["好", "五星"], ["差", "一星"]])
  processor = classifier_data.TsvProcessor(str(tmp_path / "out"))
  examples = {"train": processor.get_train_examples(str(tmp_path)),
              "test": processor.get_test_examples(str(tmp_path))}
  with pytest.raises(InputError, match=r"test.tsv hold\(s\) text pairs .* but train.tsv single "
                     "texts"):
    classifier_data.input_layout(examples, lambda split: split + ".tsv")
  # The test file's second column holding the task's labels is read as the label column.
  _write(tmp_path / "test.tsv", [["好", "pos"], ["差", "pos"]])
  examples["test"] = processor.get_test_examples(str(tmp_path))
  assert classifier_data.input_layout(examples, str) == classifier_data.SINGLE_TEXTS


@contextlib.contextmanager
def _read_only_view(folder, tmp_path):
  """A read-only bind mount of `folder` (root can write in any folder it owns), or `folder`
  itself where mounting is not allowed."""
  view = tmp_path / "read_only_view"
  view.mkdir()
  mounted = os.geteuid() == 0 and subprocess.run(
      ["mount", "--bind", str(folder), str(view)], capture_output=True).returncode == 0
  try:
    if mounted:
      subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], check=True,
                     capture_output=True)
      with pytest.raises(OSError):
        (view / "probe").write_text("")
    yield view if mounted else folder
  finally:
    if mounted:
      subprocess.run(["umount", "-l", str(view)], check=False)


def test_predict_after_training_needs_only_the_output_dir(trained, tmp_path):
  """--predict_file takes the config, vocabulary, casing, max_seq_length and truncation of the
  training run (run_info.json), and serves from a read-only run directory when --predict_output
  is elsewhere; a later run with another layout is refused."""
  _, data_dir, _, out, _ = trained
  test_rows = (data_dir / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]
  texts = tmp_path / "texts.txt"
  texts.write_text("".join(row.split("\t")[1] + "\n" for row in test_rows), encoding="utf-8")
  with _read_only_view(out, tmp_path) as run_dir:
    proc = run_script("run_classifier_mgpu.py", "--task_name=tsv", "--output_dir=%s" % run_dir,
                      "--predict_file=%s" % texts, "--predict_format=text",
                      "--predict_output=%s" % (tmp_path / "labels.txt"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "--max_seq_length=16, from the training run of this --output_dir" in proc.stderr
  assert "--bert_config_file=%s" % (out.parent / "bert_config.json") in proc.stderr
  # The same labels as the full run's predict.txt on the same texts.
  assert (tmp_path / "labels.txt").read_text() == (out / "predict.txt").read_text()
  pairs = tmp_path / "pairs.tsv"
  pairs.write_text("text_a\ttext_b\n好\t差\n", encoding="utf-8")
  proc = run_script("run_classifier_mgpu.py", "--task_name=tsv", "--output_dir=%s" % out,
                    "--predict_file=%s" % pairs, "--predict_output=%s" % (tmp_path / "p.txt"))
  assert_one_line_error(proc, "holds a model made with a different input layout",
                        '"single texts" there', '"text pairs (text_a, text_b)" in this run')


def test_predict_only_without_labels_file_is_a_clear_error(tmp_path):
  processor = classifier_data.TsvProcessor(str(tmp_path / "empty_out"))
  with pytest.raises(InputError, match="labels.txt: no such file"):
    processor.get_labels()


def test_truncation_modes():
  tokens = [str(i) for i in range(300)]
  assert tokenization.truncate_tokens(tokens, 10, "head") == (tokens[:10], True)
  assert tokenization.truncate_tokens(tokens, 10, "tail") == (tokens[-10:], True)
  kept, cut = tokenization.truncate_tokens(tokens, 510, "head")
  assert kept == tokens and not cut
  # max_seq_length=200: budget 198 = first 128 + last 70 (= max_seq_length - 130).
  kept, cut = tokenization.truncate_tokens(tokens, 198, "head_tail")
  assert cut and kept == tokens[:128] + tokens[-70:]


def test_head_tail_on_pairs_is_checked_and_its_head_only_cuts_are_counted(caplog):
  """A text of a pair is cut to its share of max_seq_length - 3; head_tail keeps an end only
  from a share above 128 tokens. Below 133 no text of a pair can have one (refused, as 131 is
  for single texts); above, the texts cut as head are counted and warned about instead of the
  log saying head_tail alone."""
  for layout, smallest in ((classifier_data.SINGLE_TEXTS, 131),
                           (classifier_data.TEXT_PAIRS, 133)):
    classifier_data.check_truncation("head_tail", smallest, layout)
    classifier_data.check_truncation("head", 16, layout)
    with pytest.raises(InputError, match=r"needs --max_seq_length >= %d%s \(got %d\)" % (
        smallest, " for text pairs" if layout == classifier_data.TEXT_PAIRS else "",
        smallest - 1)):
      classifier_data.check_truncation("head_tail", smallest - 1, layout)
  tokenizer = tokenization.FullTokenizer(CHINESE_VOCAB)
  long_text = "酒店" * 200  # 400 tokens
  example = classifier_data.InputExample("train-1", long_text, long_text, "pos")
  # 256: shares of 127 and 126, both cut as head; 512: 255 and 254, both keep an end.
  for max_seq_length, head_only in ((256, 2), (512, 0)):
    features = classifier_data.convert_single_example(
        example, {"pos": 0}, max_seq_length, tokenizer, "head_tail")
    assert features.head_only == head_only
  # A short first text leaves the second a share above 128 at 256.
  short_a = classifier_data.InputExample("train-2", "酒店", long_text, "pos")
  assert classifier_data.convert_single_example(
      short_a, {"pos": 0}, 256, tokenizer, "head_tail").head_only == 0
  with caplog.at_level("WARNING"):
    classifier_data.report_truncation("train.tsv", 1, collections.Counter(
        truncated=1, text_tokens=800, cut_tokens=547, head_only=2), 256, "head_tail",
                                      "truncate")
  assert ("train.tsv: --truncation=head_tail cut 2 text(s) as head does, to their first tokens "
          "only: a text of a pair gets its share of the 253 tokens") in caplog.text


def test_cache_is_keyed_on_vocab_and_max_seq_length(tmp_path):
  data_dir = _make_task(tmp_path / "data", n_train=4)
  processor = classifier_data.TsvProcessor(str(tmp_path / "out"))
  examples = processor.get_train_examples(str(data_dir))
  tokenizer = tokenization.FullTokenizer(CHINESE_VOCAB)

  def build(max_seq_length, digest):
    return classifier_data.cached_features_file(
        examples, "train", str(data_dir / "train.tsv"), ["neg", "pos"], digest, max_seq_length,
        "head", str(tmp_path / "out"), tokenizer, "tsv")

  a = build(16, "vocab-a")
  assert build(16, "vocab-a") == a
  assert build(32, "vocab-a") != a
  assert build(16, "vocab-b") != a
  # An edited data file is a new cache too.
  with open(data_dir / "train.tsv", "a", encoding="utf-8") as f:
    f.write("新的\tpos\n")
  assert build(16, "vocab-a") != a


def test_predict_from_a_checkpoint_without_the_classifier_is_a_clear_error(tmp_path):
  import json  # pylint: disable=g-import-not-at-top
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top
  data_dir = _make_task(tmp_path / "data", n_train=4, n_dev=2, n_test=2)
  config = write_tiny_bert_config(tmp_path / "bert_config.json", 21128)
  with tf.Graph().as_default():
    modeling.BertModel(modeling.BertConfig.from_dict(json.load(open(config))), False,
                       tf.zeros([1, 4], tf.int32))
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver().save(sess, str(tmp_path / "bert_model.ckpt"))
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "labels.txt").write_text("neg\npos\n")
  proc = run_script("run_classifier_mgpu.py", *_common_args(
      data_dir, tmp_path / "out", config, "--do_predict",
      "--init_checkpoint=%s" % (tmp_path / "bert_model.ckpt")))
  assert_one_line_error(proc, "bert_model.ckpt lacks 2 variable(s)", "output_weights")


def test_init_checkpoint_from_a_finished_run_restores_weights_not_step(trained, tmp_path):
  """Fine-tuning from one of our own checkpoints starts at step 0 with its weights."""
  _, data_dir, config, out, _ = trained
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  init = tf.train.latest_checkpoint(str(out))
  proc = run_script("run_classifier_mgpu.py", *_common_args(
      data_dir, tmp_path / "from_init", config, "--do_train", "--num_train_epochs=1",
      "--init_checkpoint=%s" % init))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "steps 0 -> 16" in proc.stderr
  assert re.search(r"Initialized \d+ of \d+ trainable variables", proc.stderr)
  assert "not in init_checkpoint" not in proc.stderr
  assert tf.train.load_variable(tf.train.latest_checkpoint(str(tmp_path / "from_init")),
                                "global_step") == 16


def test_script_runs_stay_hosted_after_a_test_sets_an_unrelated_variable(monkeypatch):
  """Importing torch sets TORCHINDUCTOR_CACHE_DIR for the rest of the session; the script host
  must still serve plain runs (else each imports TensorFlow again: seconds per run), but not a
  run whose environment changes what TensorFlow reads on import."""
  # pylint: disable=protected-access
  import script_runner  # pylint: disable=g-import-not-at-top
  command = script_runner.script_command("run_classifier_mgpu.py", "--help")
  assert script_runner._host_for(command, script_runner._env())[0]  # started, if not yet
  monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/set-by-torch")
  host, script = script_runner._host_for(command, script_runner._env())
  assert host is not None and script == "run_classifier_mgpu.py"
  monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
  assert script_runner._host_for(command, script_runner._env()) == (None, None)
  assert "--n_gpus" in run_script("run_classifier_mgpu.py", "--help").stdout
