"""--long_text=sliding: windows over long documents, pooled back to one row per document."""

import numpy as np
import pytest

from classifier import data as classifier_data
from classifier import windows
import tokenization
from script_runner import CHINESE_VOCAB, assert_one_line_error, run_script, \
    write_tiny_bert_config

# Neutral filler characters (each one token of the Chinese vocabulary); the label is decided by
# one character, 好 (pos) or 差 (neg), placed after the first window of max_seq_length=16.
FILLER = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工"
POS, NEG = "好", "差"
DOC_CHARS, FIRST_KEY, LAST_KEY = 40, 20, 32


def _documents(n, seed):
  """n (text, label) pairs: 40 random filler characters, the deciding one at 20..32."""
  rng = np.random.RandomState(seed)
  docs = []
  for i in range(n):
    chars = [FILLER[j] for j in rng.randint(0, len(FILLER), DOC_CHARS)]
    label = "pos" if i % 2 == 0 else "neg"
    chars[rng.randint(FIRST_KEY, LAST_KEY + 1)] = POS if label == "pos" else NEG
    docs.append(("".join(chars), label))
  return docs


def _write_task(root, n_train=96, n_dev=60, n_test=21):
  root.mkdir(parents=True, exist_ok=True)
  for name, n, seed in (("train", n_train, 1), ("dev", n_dev, 2), ("test", n_test, 3)):
    rows = ["text_a\tlabel"] + ["%s\t%s" % doc for doc in _documents(n, seed)]
    (root / ("%s.tsv" % name)).write_text("\n".join(rows) + "\n", encoding="utf-8")
  return root


def _args(data_dir, out, config, *extra):
  return ["--task_name=tsv", "--data_dir=%s" % data_dir, "--vocab_file=%s" % CHINESE_VOCAB,
          "--bert_config_file=%s" % config, "--output_dir=%s" % out, "--max_seq_length=16",
          "--train_batch_size=16", "--eval_batch_size=8", "--predict_batch_size=5",
          "--learning_rate=3e-3", "--warmup_proportion=0.05", "--log_every_n_steps=50",
          "--save_checkpoints_steps=1000"] + list(extra)


def _results(out):
  return dict(line.split(" = ") for line in (out / "eval_results.txt").read_text().splitlines())


# ------------------------------------------------------------------------------------ units


def test_the_tokens_cut_are_counted_and_warned_about_unless_the_windows_slide(tmp_path, caplog):
  """40-token documents at max_seq_length=16 lose 26 of their 40 tokens each when truncated
  (a warning with the count and the flags that keep them); sliding windows lose none; a pair
  whose second text slides keeps at most half a window of its first."""
  tokenizer = tokenization.FullTokenizer(CHINESE_VOCAB)
  examples = [classifier_data.InputExample("t-%d" % i, text, label=label)
              for i, (text, label) in enumerate(_documents(4, 1))]
  examples.append(classifier_data.InputExample("t-4", FILLER[:10], label="pos"))
  labels = {"pos": 0, "neg": 1}
  path = str(tmp_path / "f.tf_record")
  counts = classifier_data.write_features(examples, labels, 16, tokenizer, "head", path, "x",
                                          True)
  assert (counts["truncated"], counts["cut_tokens"], counts["text_tokens"]) == (4, 104, 170)
  with caplog.at_level("INFO"):
    classifier_data.report_truncation("train.tsv", 5, counts, 16, "head", "truncate")
  warning = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
  assert len(warning) == 1 and warning[0].startswith(
      "train.tsv: 104 of 170 tokens (61.17%) cut by --max_seq_length=16 in 4 of 5 examples")
  assert "--long_text=sliding" in warning[0]
  counts = classifier_data.write_features(examples, labels, 16, tokenizer, "head", path, "x",
                                          True, long_text="sliding")
  assert (counts["truncated"], counts["cut_tokens"], counts["text_tokens"]) == (0, 0, 170)
  pair = classifier_data.InputExample("p", FILLER[:20], FILLER[:30], label="pos")
  counts = classifier_data.write_features([pair], labels, 16, tokenizer, "head", path, "x", True,
                                          long_text="sliding")
  assert (counts["truncated"], counts["cut_tokens"], counts["text_tokens"]) == (1, 14, 50)


def test_window_starts_cover_every_token():
  assert tokenization.window_starts(10, 14, 7) == [0]
  assert tokenization.window_starts(14, 14, 7) == [0]
  assert tokenization.window_starts(15, 14, 7) == [0, 7]
  assert tokenization.window_starts(40, 14, 7) == [0, 7, 14, 21, 28]  # 28 + 14 >= 40
  assert tokenization.window_starts(40, 14, 14) == [0, 14, 28]
  for n in range(1, 60):
    for stride in (1, 5, 14):
      starts = tokenization.window_starts(n, 14, stride)
      covered = set(i for s in starts for i in range(s, min(s + 14, n)))
      assert covered == set(range(n))
      assert starts[-1] + 14 >= n and (len(starts) == 1 or starts[-2] + 14 < n)


def test_a_long_text_becomes_overlapping_windows_with_its_label():
  tokenizer = tokenization.FullTokenizer(CHINESE_VOCAB)
  text = FILLER[:30]
  example = classifier_data.InputExample("train-1", text, label="pos")
  rows = classifier_data.convert_example_windows(example, {"neg": 0, "pos": 1}, 16, tokenizer,
                                                 doc_stride=7)
  ids = tokenizer.convert_tokens_to_ids(list(text))
  cls, sep = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
  assert len(rows) == 4  # starts 0, 7, 14, 21
  for row, start in zip(rows, (0, 7, 14, 21)):
    piece = ids[start:start + 14]
    assert row.input_ids == [cls] + piece + [sep] + [0] * (14 - len(piece))
    assert row.input_mask == [1] * (len(piece) + 2) + [0] * (14 - len(piece))
    assert row.label_id == 1
  # A text that fits is one window, the same as truncation gives.
  short = classifier_data.InputExample("train-2", text[:10], label="neg")
  one = classifier_data.convert_example_windows(short, {"neg": 0, "pos": 1}, 16, tokenizer)
  same = classifier_data.convert_single_example(short, {"neg": 0, "pos": 1}, 16, tokenizer)
  assert len(one) == 1 and one[0].input_ids == same.input_ids
  # A pair keeps its first text and slides over the second.
  pair = classifier_data.InputExample("train-3", text[:3], text, label="neg")
  rows = classifier_data.convert_example_windows(pair, {"neg": 0, "pos": 1}, 16, tokenizer,
                                                 doc_stride=6)
  assert [r.input_ids[1:4] for r in rows] == [ids[:3]] * len(rows)
  assert [r.input_ids[5:15] for r in rows[:-1]] == [ids[s:s + 10] for s in (0, 6, 12, 18)]
  assert len(rows) == 5 and rows[-1].segment_ids[5] == 1
  # A long first text with an empty second one: one window, the first text cut to the room.
  empty_b = classifier_data.InputExample("train-4", text, "", label="neg")
  rows = classifier_data.convert_example_windows(empty_b, {"neg": 0, "pos": 1}, 16, tokenizer)
  assert len(rows) == 1 and rows[0].input_ids[1:14] == ids[:13] and rows[0].input_ids[14] == sep


def test_window_logits_pool_back_to_one_row_per_document_in_order():
  logits = np.array([[1.0, 0.0], [3.0, -2.0], [0.0, 5.0], [-1.0, 1.0], [2.0, 2.0], [0.0, 0.0]])
  doc_index = np.array([0, 0, 1, 2, 2, 2])
  mean = windows.pool_logits(logits, doc_index, 3, "mean")
  np.testing.assert_allclose(mean, [[2.0, -1.0], [0.0, 5.0], [1.0 / 3, 1.0]])
  np.testing.assert_allclose(windows.pool_logits(logits, doc_index, 3, "max"),
                             [[3.0, 0.0], [0.0, 5.0], [2.0, 2.0]])
  out = windows.document_outputs({"logits": logits}, doc_index, 3, "mean", np.array([0, 1, 0]))
  expected = np.exp(mean) / np.exp(mean).sum(axis=1, keepdims=True)
  np.testing.assert_allclose(out["probabilities"], expected)
  np.testing.assert_allclose(out["per_example_loss"],
                             -np.log(expected[[0, 1, 2], [0, 1, 0]]))
  with pytest.raises(RuntimeError, match="documents without a window: \\[1\\]"):
    windows.pool_logits(logits, np.array([0, 0, 2, 2, 2, 2]), 3, "mean")


# ------------------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def task(tmp_path_factory):
  root = tmp_path_factory.mktemp("long")
  return root, _write_task(root / "data"), write_tiny_bert_config(root / "bert_config.json",
                                                                  21128)


def test_truncation_stays_at_chance_where_sliding_windows_learn(task):
  root, data_dir, config = task
  accuracy = {}
  for mode, extra in (("truncate", ["--n_gpus=1"]),
                      ("sliding", ["--long_text=sliding", "--doc_stride=7", "--n_gpus=2",
                                   "--bucket_by_length", "--layerwise_lr_decay=0.9",
                                   "--do_export"])):
    out = root / mode
    # lr 1e-3 for 250 updates: at 3e-3 for 150 (an earlier version) the sliding model
    # collapsed to chance for about one --random_seed in three.
    proc = run_script("run_classifier_mgpu.py", *_args(
        data_dir, out, config, "--do_train", "--do_eval", "--do_predict",
        "--num_train_steps=250", "--learning_rate=1e-3", *extra))
    assert proc.returncode == 0, proc.stderr[-4000:]
    accuracy[mode] = float(_results(out)["eval_accuracy"])
    assert int(_results(out)["eval_examples"]) == 60  # documents, not windows
    predictions = (out / "predict.txt").read_text().splitlines()
    gold = [label for _, label in _documents(21, 3)]
    assert len(predictions) == 21 and len((out / "test_results.tsv").read_text().splitlines()) == 21
    accuracy[mode + "_test"] = np.mean([p == g for p, g in zip(predictions, gold)])
  # 40 characters: windows start at 0, 7, 14, 21, 28 (5 per document).
  assert ("train: 96 documents -> 480 windows; 96 documents longer than one window were split "
          "into 480 windows" in proc.stderr), proc.stderr[-3000:]
  assert "Layer-wise learning-rate decay 0.9: x0.81 (bert/embeddings" in proc.stderr
  assert "480 examples, global batch 32" in proc.stderr
  assert accuracy["truncate"] < 0.75 and accuracy["truncate_test"] < 0.8, accuracy
  # Chance is 0.5; over 5 seeds the sliding model reached 0.88-1.0 on dev at these settings.
  assert accuracy["sliding"] >= 0.85 and accuracy["sliding_test"] >= 0.85, accuracy


def test_predict_file_pools_windows_in_input_order(task):
  """Predict the test documents again, reversed, from a plain-text file with 3 towers."""
  root, data_dir, config = task
  out = root / "sliding"
  if not (out / "predict.txt").exists():
    pytest.skip("needs the trained sliding run")
  texts = [text for text, _ in _documents(21, 3)][::-1]
  (root / "reversed.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
  # --long_text and --doc_stride come from the training run's run_info.json.
  proc = run_script("run_classifier_mgpu.py", *_args(
      data_dir, out, config, "--n_gpus=3",
      "--predict_file=%s" % (root / "reversed.txt"), "--predict_output=%s" % (root / "rev.txt")))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "--long_text=sliding, from the training run of this --output_dir" in proc.stderr
  assert "--doc_stride=7, from the training run" in proc.stderr
  assert "predict: 21 documents -> 105 windows" in proc.stderr
  before = (out / "predict.txt").read_text().splitlines()
  assert (root / "rev.txt").read_text().splitlines() == before[::-1]
  probs = [[float(p) for p in l.split("\t")] for l in
           (root / "rev_probabilities.tsv").read_text().splitlines()]
  first = [[float(p) for p in l.split("\t")] for l in
           (out / "test_results.tsv").read_text().splitlines()]
  np.testing.assert_allclose(probs, first[::-1], atol=1e-5)


def test_the_exported_model_pools_windows_like_the_run_script(task):
  """serving_default: one text in, one prediction out, equal to test_results.tsv."""
  from test_export import _probe  # pylint: disable=g-import-not-at-top
  root, _, _ = task
  out = root / "sliding"
  if not (out / "saved_model").exists():
    pytest.skip("needs the trained sliding run")
  texts = [text for text, _ in _documents(21, 3)] + ["", FILLER[:5]]
  served, tokenized = _probe(str(out / "saved_model"), [
      ["serving_default", {"text_a": texts}], ["tokenize", {"text_a": texts[:2]}]])
  expected = np.loadtxt(str(out / "test_results.tsv"), delimiter="\t")
  np.testing.assert_allclose(np.array(served["probabilities"])[:21], expected, atol=1e-5)
  assert served["label"][:21] == (out / "predict.txt").read_text().splitlines()
  assert len(served["label"]) == 23  # a short and an empty text: one window each
  # The windows of a 40-character text at stride 7, as the run script cut them.
  tokenizer = tokenization.FullTokenizer(CHINESE_VOCAB)
  python = [row.input_ids for text in texts[:2] for row in classifier_data.convert_example_windows(
      classifier_data.InputExample("t", text), {}, 16, tokenizer, doc_stride=7, need_label=False)]
  assert tokenized["input_ids"] == python
  assert tokenized["doc_index"] == [0] * 5 + [1] * 5


@pytest.mark.parametrize("extra,fragment", [
    (["--long_text=sliding", "--doc_stride=15"], "--doc_stride=15: expected 0 (half a window) "
                                                 "to 14"),
    (["--doc_stride=4"], "--doc_stride=4 needs --long_text=sliding"),
    (["--long_text=sliding", "--do_export", "--pairs"],
     "--do_export with --long_text=sliding exports single-text tasks only"),
    (["--layerwise_lr_decay=1.5"], "--layerwise_lr_decay=1.5: expected a number > 0 and <= 1"),
])
def test_bad_long_text_flags_are_one_line_errors(tmp_path, extra, fragment):
  data_dir = _write_task(tmp_path / "data", 8, 4, 2)
  if "--pairs" in extra:
    extra = [e for e in extra if e != "--pairs"]
    for name in ("train.tsv", "dev.tsv"):
      rows = (data_dir / name).read_text(encoding="utf-8").splitlines()
      rows = ["text_a\ttext_b\tlabel"] + [r.replace("\t", "\t问题\t", 1) for r in rows[1:]]
      (data_dir / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
  config = write_tiny_bert_config(tmp_path / "bert_config.json", 21128)
  proc = run_script("run_classifier_mgpu.py", *_args(
      data_dir, tmp_path / "out", config, "--do_train", "--num_train_steps=2", *extra))
  assert_one_line_error(proc, fragment)


def test_two_processes_train_on_windows_and_the_chief_pools_them(tmp_path):
  from script_runner import free_ports, run_processes, script_command  # pylint: disable=g-import-not-at-top
  data_dir = _write_task(tmp_path / "data", 24, 10, 7)
  config = write_tiny_bert_config(tmp_path / "bert_config.json", 21128)
  hosts = ",".join("localhost:%d" % p for p in free_ports(2))
  out = tmp_path / "out"
  commands = [script_command("run_classifier_mgpu.py", *_args(
      data_dir, out, config, "--do_train", "--do_eval", "--do_predict", "--num_train_epochs=1",
      "--long_text=sliding", "--worker_hosts=%s" % hosts, "--task_index=%d" % i, "--collective_timeout_s=120"))
              for i in range(2)]
  chief, worker = run_processes(commands, timeout=300)
  assert chief.returncode == 0, chief.stderr[-3000:]
  assert worker.returncode == 0, worker.stderr[-3000:]
  # 24 documents x 5 windows (default stride 7) = 120 windows, global batch 16 x 2 processes.
  for log in (chief.stderr, worker.stderr):
    assert "train: 24 documents -> 120 windows" in log
    assert "Weights identical in all 2 processes at the end of training" in log
  assert "120 examples, global batch 32 (16 x 1 towers x 2 processes" in chief.stderr
  assert int(_results(out)["eval_examples"]) == 10
  assert len((out / "predict.txt").read_text().splitlines()) == 7
