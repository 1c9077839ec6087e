# coding=utf-8
"""Words scored by the checkpoint's own masked-LM loss (pretraining/word_loss.py,
scripts/build_word_loss.py) and the scores file that --masking=domain reads
(pretraining/word_freq.py): what gets masked, the ranks, the file's vocabulary check and its
bad inputs."""

import os
import re
import shutil
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from core.errors import InputError
from pretraining import mlm
from pretraining import word_freq
from pretraining import word_loss
import modeling
import pretraining_helpers
from script_runner import assert_one_line_error, run_script, write_tiny_bert_config
import tokenization

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(_REPO, "scripts"))
import build_word_loss  # pylint: disable=g-import-not-at-top,wrong-import-position

_CHINESE_VOCAB = os.path.join(_REPO, "vocab", "chinese_vocab.txt")
VOCAB = pretraining_helpers.VOCAB


def _bert_dir(folder, predicts=None, head=True):
  """A tiny BERT folder over pretraining_helpers.VOCAB with random weights. predicts: a token
  whose masked-LM output bias is +40, so that the head predicts it at every position; head=False
  leaves the masked-LM head (cls/) out of the checkpoint."""
  os.makedirs(str(folder))
  (folder / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB))
  config_file = write_tiny_bert_config(folder / "bert_config.json", len(VOCAB), hidden_size=16)
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    features = {name: tf.placeholder(tf.int32, [None, None], name=name) for name in (
        "input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids")}
    features["masked_lm_weights"] = tf.placeholder(tf.float32, [None, None])
    mlm.tower_fn_builder(modeling.BertConfig.from_json_file(config_file), has_nsp=False,
                         is_training=False)(features, None)
    variables = tf.global_variables()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      if predicts:
        bias = [v for v in variables if v.op.name == "cls/predictions/output_bias"][0]
        sess.run(bias[VOCAB.index(predicts)].assign(40.0))
      saved = [v for v in variables if head or not v.op.name.startswith("cls/")]
      tf.train.Saver(saved).save(sess, str(folder / "bert_model.ckpt"), write_meta_graph=False)
  return str(folder)


def _rows(path):
  """The scores file's lines after its first, as (word, score, loss, occurrences)."""
  lines = open(path, encoding="utf-8").read().splitlines()
  assert lines[0].startswith(word_freq.SCORES_HEADER + "\tvocab=")
  return [(w, float(s), float(l), int(n)) for w, s, l, n in (x.split("\t") for x in lines[1:])]


def test_the_word_the_head_predicts_scores_lowest_whatever_the_batch(tmp_path):
  bert = _bert_dir(tmp_path / "bert", predicts="alpha")
  text = tmp_path / "domain.txt"
  text.write_text("alpha bravo charlie . alpha\n\nbravo alpha delta 2024\nalpha echo alpha\n")
  runs = {}
  for batch_size in (1, 64):
    out = str(tmp_path / ("scores%d.tsv" % batch_size))
    assert build_word_loss.run(bert_dir=bert, input_file=str(text), output_file=out,
                               max_seq_length=32, max_occurrences=4,
                               batch_size=batch_size) == 5
    runs[batch_size] = _rows(out)
  rows = runs[64]
  # alpha is met 6 times, scored on its first 4; the head puts nearly all its mass on alpha,
  # so alpha's loss is ~0 and every other word's ~40 nats; "." and "2024" ([UNK]) are not scored.
  assert rows[-1][0] == "alpha" and rows[-1][1] == 0.0 and rows[-1][3] == 4
  assert rows[-1][2] < 1e-3 and all(loss > 30 for _, _, loss, _ in rows[:-1])
  assert sorted(w for w, _, _, _ in rows) == ["alpha", "bravo", "charlie", "delta", "echo"]
  assert dict((w, n) for w, _, _, n in rows)["bravo"] == 2
  # One row per sequence or all in one padded batch: the same losses.
  for (w1, s1, l1, n1), (w64, s64, l64, n64) in zip(runs[1], rows):
    assert (w1, s1, n1) == (w64, s64, n64) and abs(l1 - l64) < 1e-3 * max(1.0, l64)
  # --masking=domain reads the file: alpha, the word the checkpoint knows, weighs the floor;
  # the worst-predicted word 1; a word the file does not name 1 (as a general list's).
  tokenizer = tokenization.FullTokenizer(os.path.join(bert, "vocab.txt"))
  weights = word_freq.load(str(tmp_path / "scores64.tsv"), tokenizer)
  weight = lambda word: weights.unit_weights(
      tokenizer.convert_tokens_to_ids([word]), np.array([0]), np.array([1]))[0]
  assert weight("alpha") == pytest.approx(0.1)
  assert weight(rows[0][0]) == pytest.approx(1.0)
  assert weight("zulu") == 1.0
  assert weights.total is None


def test_the_batch_masks_every_piece_of_the_word_and_labels_them():
  mask = lambda: 99
  features = word_loss._batch([([7, 8, 9, 10], 1, 3), ([11], 0, 1)], 2, 3, mask)
  assert features["input_ids"].tolist() == [[2, 7, 99, 99, 10, 3], [2, 99, 3, 0, 0, 0]]
  assert features["input_mask"].tolist() == [[1] * 6, [1, 1, 1, 0, 0, 0]]
  assert features["masked_lm_positions"].tolist() == [[2, 3], [1, 0]]
  assert features["masked_lm_ids"].tolist() == [[8, 9], [11, 0]]
  assert features["masked_lm_weights"].tolist() == [[1, 1], [1, 0]]
  # Random pieces: ordinary vocabulary entries, the same ones for the same seed.
  vocab = {token: i for i, token in enumerate(VOCAB)}
  drawn = []
  for _ in range(2):
    replace = word_loss.replacer(word_loss.RANDOM, vocab, 7)
    drawn.append([replace() for _ in range(200)])
  assert drawn[0] == drawn[1]
  assert min(drawn[0]) == VOCAB.index(".") and len(set(drawn[0])) == len(VOCAB) - 5


def test_a_long_line_keeps_the_pieces_around_the_word(tmp_path):
  bert = _bert_dir(tmp_path / "bert")
  from pretraining import corpus  # pylint: disable=g-import-not-at-top
  import create_pretraining_data  # pylint: disable=g-import-not-at-top
  featurizer = corpus.Featurizer(create_pretraining_data.Options(
      input_file="unused", output_file="unused", vocab_file=os.path.join(bert, "vocab.txt"),
      masking="whole_word"))
  line = " ".join(pretraining_helpers.WORDS)  # 26 words, one piece each
  found = word_loss.occurrences([line], featurizer, max_occurrences=5, max_seq_length=8)
  assert len(found) == 26
  for unit, places in found.items():
    (ids, start, end), = places
    assert len(ids) == 6 and ids[start:end] == list(unit)
  (ids, start, _), = found[(VOCAB.index("mike"),)]
  assert start == 2  # in the middle of its window, not at an edge
  # A word longer than the window keeps its first pieces.
  long_word = tuple(range(6, 16))
  featurizer.sentence = lambda line: ([5] + list(long_word) + [5], [1, 1] + [0] * 9 + [1])
  (ids, start, end), = word_loss.occurrences(["x"], featurizer, 1, 8)[long_word]
  assert (ids, start, end) == (list(long_word[:6]), 0, 6)


def test_ranks_share_ties():
  np.testing.assert_allclose(word_loss.loss_ranks([3.0, 1.0, 2.0, 2.0, 5.0]),
                             [0.75, 0.0, 0.375, 0.375, 1.0])
  assert word_loss.loss_ranks([4.0]).tolist() == [1.0]


def test_a_checkpoint_without_its_masked_lm_head_is_one_error_before_any_work(tmp_path):
  bert = _bert_dir(tmp_path / "encoder", head=False)
  text = tmp_path / "domain.txt"
  text.write_text("alpha bravo\n")
  out = tmp_path / "scores.tsv"
  line = assert_one_line_error(run_script(
      os.path.join("scripts", "build_word_loss.py"), "--bert_dir=" + bert,
      "--input_file=" + str(text), "--output_file=" + str(out), "--max_seq_length=32"))
  assert "it has no masked-LM head" in line and "cls/predictions/" in line
  assert not out.exists()
  for options, message in (
      (dict(replacement="bogus"), "--replacement=bogus: expected one of mask|random"),
      (dict(max_occurrences=0), "--max_occurrences"),
      (dict(max_seq_length=999), "--max_seq_length=999: expected 3 to 64"),
      (dict(bert_dir=str(tmp_path)), "vocab.txt is missing"),
      (dict(bert_dir=_other_config(tmp_path, bert)), "does its bert_config.json belong"),
      (dict(bert_dir=_longer_vocab(tmp_path, bert)),
       "has %d entries but vocab_size=%d" % (len(VOCAB) + 1, len(VOCAB)))):
    with pytest.raises(InputError, match=re.escape(message)):
      build_word_loss.run(**dict(dict(bert_dir=bert, input_file=str(text),
                                      output_file=str(out), max_seq_length=32), **options))
  assert not out.exists()


def _other_config(tmp_path, bert):
  """A copy of the folder `bert` whose config says hidden_size 32 (its weights have 16)."""
  folder = tmp_path / "other_config"
  shutil.copytree(bert, str(folder))
  write_tiny_bert_config(folder / "bert_config.json", len(VOCAB), hidden_size=32)
  return str(folder)


def _longer_vocab(tmp_path, bert):
  """A copy of the folder `bert` whose vocab.txt has one entry more than its config says."""
  folder = tmp_path / "longer_vocab"
  shutil.copytree(bert, str(folder))
  (folder / "vocab.txt").write_text("\n".join(VOCAB + ["extra"]) + "\n", encoding="utf-8")
  return str(folder)


def _scores_file(path, vocab, body):
  path.write_text(word_freq.scores_header(vocab, source="test") + "\n" + body,
                  encoding="utf-8")
  return str(path)


def test_a_scores_file_for_another_vocabulary_or_malformed_is_refused(tmp_path):
  english = tokenization.FullTokenizer(os.path.join(_REPO, "vocab",
                                                    "english_uncased_vocab.txt"))
  chinese = tokenization.load_vocab(_CHINESE_VOCAB)
  other = _scores_file(tmp_path / "other.tsv", chinese, "the\t0.5\n")
  with pytest.raises(InputError, match=re.escape("%s:1: scores for another vocabulary" % other)):
    word_freq.load(other, english)
  for body, fragment in (("the\t1.5\n", ":2: expected word<TAB>score with a score in [0, 1]"),
                         ("the\n", ":2: expected word<TAB>score"),
                         ("\n", ": no word<TAB>score line after its first line")):
    path = _scores_file(tmp_path / "bad.tsv", english.vocab, body)
    with pytest.raises(InputError, match=re.escape(fragment)):
      word_freq.load(path, english)
  # From the command line: one line and exit 2, no records.
  text = tmp_path / "domain.txt"
  text.write_text("the photosynthesis of the leaf\n")
  out = tmp_path / "records.tfrecord"
  line = assert_one_line_error(run_script(
      "create_pretraining_data.py", "--input_file=" + str(text), "--output_file=" + str(out),
      "--vocab_file=" + os.path.join(_REPO, "vocab", "english_uncased_vocab.txt"),
      "--masking=domain", "--general_word_freq=" + other))
  assert "scores for another vocabulary" in line and not out.exists()


def test_mask_shares_refuses_a_scores_file(tmp_path, capsys):
  """benchmarks/mask_shares.py counts shares by a list's counts, which a scores file lacks."""
  sys.path.insert(0, os.path.join(_REPO, "benchmarks"))
  import mask_shares  # pylint: disable=g-import-not-at-top
  vocab_file = os.path.join(_REPO, "vocab", "english_uncased_vocab.txt")
  scores = _scores_file(tmp_path / "scores.tsv", tokenization.load_vocab(vocab_file),
                        "the\t0.5\n")
  text = tmp_path / "domain.txt"
  text.write_text("the photosynthesis of the leaf\n")
  with pytest.raises(SystemExit) as e:
    mask_shares.main(["--input_file=%s" % text, "--vocab_file=%s" % vocab_file,
                      "--general_word_freq=%s" % scores])
  assert e.value.code == 2
  assert capsys.readouterr().err == (
      "error: mask_shares.py: --general_word_freq=%s is a scores file (build_word_loss.py): the "
      "shares are counted by a word-frequency list's counts; pass one\n" % scores)


def test_mask_shares_counts_the_named_words_occurrences_that_carry_a_mask(tmp_path, capsys):
  """--words_file: per strategy, how many of the named words' occurrences carry a mask; a word
  of the file the text never uses is counted as not met."""
  sys.path.insert(0, os.path.join(_REPO, "benchmarks"))
  import mask_shares  # pylint: disable=g-import-not-at-top
  vocab_file = os.path.join(_REPO, "vocab", "english_uncased_vocab.txt")
  text = tmp_path / "domain.txt"
  text.write_text("the zorblaxian feeds the leaf and the root .\n" * 40)
  words = tmp_path / "words.txt"
  words.write_text("Zorblaxian\nzebra\n")
  mask_shares.main(["--input_file=%s" % text, "--vocab_file=%s" % vocab_file,
                    "--words_file=%s" % words, "--strategies=whole_word,domain"])
  lines = [l for l in capsys.readouterr().out.splitlines() if "words of words.txt" in l]
  assert len(lines) == 2, lines
  counts = {}
  for line in lines:
    strategy, reached, occurrences = re.match(
        r"(\w+), the 2 words of words.txt: (\d+) of their (\d+) occurrences", line).groups()
    assert occurrences == "40" and line.endswith("; 1 not met"), line
    counts[strategy] = int(reached)
  # The domain strategy favours the word the built-in list lacks; whole-word masking does not.
  assert counts["domain"] > 2 * counts["whole_word"] > 0, counts
