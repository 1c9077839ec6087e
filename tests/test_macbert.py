# coding=utf-8
"""MacBERT-style masking (--masking_replacement=similar): similar words of the same piece count,
never the original, in create_pretraining_data.py and dynamic masking; the similar-words file
and build_similar_words.py."""

import os
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import build_similar_words
from core.errors import InputError
import create_pretraining_data
from pretraining import masking
from pretraining import similar_words
import tokenization

# Word pieces: "un ##able" style English plus CJK characters, so words have 1 to 3 pieces.
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "un", "re", "##able", "##do",
         "##ing", "cat", "dog", "fish", "bird", "go", "run", "法", "院", "律", "师", "判", "决"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
  return tokenization.FullTokenizer(str(path), do_lower_case=True)


def _write(path, text):
  path.write_text(text, encoding="utf-8")
  return str(path)


def _ids(tokenizer, text):
  return tuple(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)))


def test_file_keeps_same_piece_neighbours_only(tokenizer, tmp_path):
  path = _write(tmp_path / "sim.tsv",
                "cat\tdog fish unable cat xyz\n\nunable\tredo reding cat\n法院\t律师 判决 判\n"
                "bird\tzzz\n")
  table = similar_words.load(path, tokenizer)
  ids = lambda text: _ids(tokenizer, text)
  # The word itself, another piece count and [UNK] words are dropped; order is kept.
  assert table.neighbours[ids("cat")] == [ids("dog"), ids("fish")]
  assert table.neighbours[ids("unable")] == [ids("redo")]
  assert table.neighbours[ids("法院")] == [ids("律师"), ids("判决")]
  assert ids("bird") not in table.neighbours  # Nothing usable left.
  assert sorted(table.words_by_length) == [1, 2]


@pytest.mark.parametrize("content, fragment", [
    ("cat dog\n", "sim.tsv:1: expected word<TAB>neighbour"),
    ("cat\tdog\n\tdog\n", "sim.tsv:2: expected word<TAB>neighbour"),
    ("xyz\tqqq\n", "sim.tsv: no usable pair"),
])
def test_bad_file_is_one_error_naming_file_and_line(tokenizer, tmp_path, content, fragment):
  path = _write(tmp_path / "sim.tsv", content)
  with pytest.raises(InputError, match=fragment.replace(".", r"\.")):
    similar_words.load(path, tokenizer)


def test_replace_keeps_piece_count_and_never_returns_the_original(tokenizer, tmp_path):
  path = _write(tmp_path / "sim.tsv", "cat\tdog\nunable\tredo\n法院\t律师 判决\n")
  table = similar_words.load(path, tokenizer)
  config = masking.MaskingConfig.from_vocab(tokenizer.vocab)
  rng = np.random.default_rng(0)
  ids = lambda text: np.array(_ids(tokenizer, text))
  # With neighbours: always one of them.
  for word, allowed in (("cat", {"dog"}), ("unable", {"redo"}), ("法院", {"律师", "判决"})):
    got = {tuple(table.replace(ids(word), rng, config.replacement_ids)) for _ in range(50)}
    assert got == {_ids(tokenizer, a) for a in allowed}, word
  # Without: a random word of the same piece count (from the file's words, then random
  # pieces), never the original, for every length including one no word in the file has.
  for word in ("dog", "redo", "判决", "律", "unredoing"):
    original = ids(word)
    for _ in range(100):
      got = table.replace(original, rng, config.replacement_ids)
      assert len(got) == len(original) and tuple(got) != tuple(original), word
      assert not set(got.tolist()) & (set(config.special_ids.tolist()) | {config.mask_id})


def _config(tokenizer, table, strategy):
  return masking.MaskingConfig.from_vocab(tokenizer.vocab, strategy=strategy,
                                          masked_lm_prob=0.3, max_predictions_per_seq=8,
                                          replacement="similar", similar_words=table)


@pytest.mark.parametrize("strategy", ["token", "whole_word", "ngram"])
def test_masking_puts_similar_words_where_mask_would_be(tokenizer, tmp_path, strategy):
  """Over many sequences: no [MASK]; every chosen word is kept, or replaced by a word of the
  same piece count that differs from it, and about 80% of them by a listed neighbour."""
  text = "un ##able cat 法 院 re ##do dog 律 师 fish un ##do ##ing 判 决 bird".split()
  words = [(0, 2), (2, 3), (3, 5), (5, 7), (7, 8), (8, 10), (10, 11), (11, 14), (14, 16),
           (16, 17)]
  starts = np.zeros(len(text), np.int64)
  starts[[w[0] for w in words]] = 1
  neighbours = {"unable": "redo", "cat": "dog", "法院": "律师", "redo": "unable", "dog": "fish",
                "律师": "判决", "fish": "bird", "undoing": "reding", "判决": "法院", "bird": "cat"}
  path = _write(tmp_path / "sim.tsv", "".join("%s\t%s\n" % kv for kv in neighbours.items()))
  table = similar_words.load(path, tokenizer)
  config = _config(tokenizer, table, strategy)
  ids = np.array([2] + tokenizer.convert_tokens_to_ids(text) + [3])
  word_starts = np.concatenate([[1], starts, [1]])
  rng = np.random.default_rng(1)
  counts = {"similar": 0, "kept": 0, "other": 0}
  for _ in range(400):
    masked, positions, labels = masking.mask_sequence(ids, word_starts, rng, config)
    assert config.mask_id not in masked
    np.testing.assert_array_equal(labels, ids[positions])
    changed = set(np.flatnonzero(masked != ids).tolist())
    assert changed <= set(positions.tolist())
    units = words if strategy != "token" else [(i, i + 1) for i in range(len(text))]
    for first, end in units:
      first, end = first + 1, end + 1  # after [CLS]
      if first not in positions:
        continue
      new, old = tuple(masked[first:end]), tuple(ids[first:end])
      if new == old:
        counts["kept"] += 1
      elif new in table.neighbours.get(old, []):
        counts["similar"] += 1
      else:
        counts["other"] += 1
  total = sum(counts.values())
  # 80% similar (or, for single pieces without a neighbour, a random word), 10% kept, 10% random.
  if strategy != "token":
    assert 0.72 < counts["similar"] / total < 0.88, counts
  assert 0.05 < counts["kept"] / total < 0.18, counts


def test_mask_replacement_output_is_unchanged_by_the_new_option(tokenizer):
  """--masking_replacement=mask draws exactly as before (same seed, same masks)."""
  ids = np.array([2] + list(range(5, 20)) + [3])
  default = masking.MaskingConfig.from_vocab(tokenizer.vocab, max_predictions_per_seq=5)
  explicit = masking.MaskingConfig.from_vocab(tokenizer.vocab, max_predictions_per_seq=5,
                                              replacement="mask")
  for seed in range(5):
    a = masking.mask_sequence(ids, None, np.random.default_rng(seed), default)
    b = masking.mask_sequence(ids, None, np.random.default_rng(seed), explicit)
    for x, y in zip(a, b):
      np.testing.assert_array_equal(x, y)
  with pytest.raises(InputError, match="needs --similar_words_file"):
    masking.MaskingConfig.from_vocab(tokenizer.vocab, replacement="similar")


def test_create_pretraining_data_and_dynamic_masking_use_similar_words(tokenizer, tmp_path):
  vocab = _write(tmp_path / "vocab.txt", "\n".join(VOCAB) + "\n")
  corpus = _write(tmp_path / "corpus.txt",
                  "".join("法院 判决 cat unable dog 律师 fish .\nbird redo 法院 cat .\n\n"
                          for _ in range(10)))
  sim = _write(tmp_path / "sim.tsv", "法院\t律师\n判决\t法院\ncat\tdog\nunable\tredo\n")
  common = dict(input_file=corpus, vocab_file=vocab, max_seq_length=24,
                max_predictions_per_seq=6, masked_lm_prob=0.3, dupe_factor=4, no_nsp=True,
                masking="whole_word", chinese_word_segmenter="presegmented")
  static = str(tmp_path / "static.tfrecord")
  create_pretraining_data.run(create_pretraining_data.Options(
      output_file=static, masking_replacement="similar", similar_words_file=sim, **common))
  mask_id = VOCAB.index("[MASK]")
  changed = 0
  for record in tf.io.tf_record_iterator(static):
    f = tf.train.Example.FromString(record).features.feature
    input_ids = np.array(f["input_ids"].int64_list.value)
    assert mask_id not in input_ids
    for pos, label, w in zip(f["masked_lm_positions"].int64_list.value,
                             f["masked_lm_ids"].int64_list.value,
                             f["masked_lm_weights"].float_list.value):
      changed += int(w > 0 and input_ids[pos] != label)
  assert changed > 0
  # Dynamic records: mask_batch with the same config, as the trainer does.
  dynamic = str(tmp_path / "dynamic.tfrecord")
  create_pretraining_data.run(create_pretraining_data.Options(
      output_file=dynamic, dynamic_masking=True, **common))
  records = [tf.train.Example.FromString(r).features.feature
             for r in tf.io.tf_record_iterator(dynamic)]
  ids = np.array([r["input_ids"].int64_list.value for r in records])
  starts = np.array([r["word_starts"].int64_list.value for r in records])
  table = similar_words.load(sim, tokenizer)
  config = masking.MaskingConfig.from_vocab(tokenizer.vocab, strategy="whole_word",
                                            max_predictions_per_seq=6,
                                            replacement="similar", similar_words=table)
  masked, positions, labels, weights = masking.mask_batch(ids, starts, [1, 2], config)
  assert mask_id not in masked and weights.sum() > 0
  at_slot = np.zeros(ids.shape, bool)
  for row in range(len(ids)):
    at_slot[row, positions[row][weights[row] > 0]] = True
  np.testing.assert_array_equal(masked[~at_slot], ids[~at_slot])
  assert (masked[at_slot] != ids[at_slot]).mean() > 0.5
  np.testing.assert_array_equal(np.take_along_axis(ids, positions, 1) * (weights > 0),
                                labels * (weights > 0))
  with pytest.raises(InputError, match="needs --similar_words_file"):
    create_pretraining_data.check_options(create_pretraining_data.Options(
        output_file=static, masking_replacement="similar", **common))


def test_build_similar_words_from_a_corpus(tmp_path):
  pytest.importorskip("gensim")
  rng = np.random.RandomState(0)
  # Two groups of words that share contexts: animals after "the", verbs after "to".
  lines = []
  for _ in range(300):
    lines.append("the %s is here ." % rng.choice(["cat", "dog", "fish", "bird"]))
    lines.append("we want to %s now ." % rng.choice(["go", "run", "redo"]))
  corpus = _write(tmp_path / "corpus.txt", "\n".join(lines) + "\n")
  vocab = _write(tmp_path / "vocab.txt", "\n".join(VOCAB) + "\n")
  out = str(tmp_path / "sim.tsv")
  build_similar_words.run(input_file=corpus, output_file=out, vocab_file=vocab,
                          chinese_word_segmenter="none", top_k=3, epochs=20, vector_size=16,
                          window=2)
  table = {}
  with open(out, encoding="utf-8") as f:
    for line in f:
      word, neighbours = line.rstrip("\n").split("\t")
      table[word] = neighbours.split()
  # "here", "we", "want", "the" ... are not in the vocabulary ([UNK]): dropped.
  assert set(table) <= {"cat", "dog", "fish", "bird", "go", "run", "redo", "is", "to", "now"}
  for word, neighbours in table.items():
    assert word not in neighbours and 0 < len(neighbours) <= 3
    assert not (word == "redo") or all(n == "redo" or len(n) > 0 for n in neighbours)
  # Same piece count only: "redo" (2 pieces) has no 2-piece neighbour, so it has no line.
  assert "redo" not in table
  animals = {"cat", "dog", "fish", "bird"}
  assert table["cat"][0] in animals and table["dog"][0] in animals


def test_build_similar_words_without_gensim_is_one_line(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "gensim", None)
  monkeypatch.setitem(sys.modules, "gensim.models", None)
  corpus = _write(tmp_path / "corpus.txt", "a b c\n")
  with pytest.raises(InputError, match="needs gensim, an optional dependency: pip install gensim"):
    build_similar_words.run(input_file=corpus, output_file=str(tmp_path / "o.tsv"))
  assert not os.path.exists(str(tmp_path / "o.tsv"))


def _embedding_checkpoint(path, rows):
  """Writes a checkpoint holding only bert/embeddings/word_embeddings = rows; returns its prefix."""
  with tf.Graph().as_default():
    table = tf.get_variable("bert/embeddings/word_embeddings", initializer=np.float32(rows))
    with tf.Session() as sess:
      sess.run(table.initializer)
      return tf.train.Saver([table]).save(sess, str(path / "model.ckpt"), write_meta_graph=False)


def test_build_similar_words_from_checkpoint_embeddings(tmp_path, monkeypatch):
  """Neighbours by cosine of the checkpoint's piece vectors (a word: the mean of its pieces),
  the corpus giving only the words; no gensim needed."""
  monkeypatch.setitem(sys.modules, "gensim", None)
  monkeypatch.setitem(sys.modules, "gensim.models", None)
  rng = np.random.RandomState(0)
  animal, verb, other = rng.randn(3, 8)
  rows = rng.randn(len(VOCAB), 8) * 0.01
  index = {piece: i for i, piece in enumerate(VOCAB)}
  for scale, word in enumerate(["cat", "dog", "fish", "bird"]):
    rows[index[word]] += animal * (1 + 0.1 * scale)
  rows[index["go"]] += verb
  rows[index["run"]] += verb + 0.3 * other
  rows[index["fish"]] += 0.5 * verb  # fish: an animal, then the verbs
  # 2-piece words: re ##do and un ##able point the same way; re ##ing another.
  rows[index["re"]] += other
  rows[index["##do"]] += verb
  rows[index["un"]] += other
  rows[index["##able"]] += verb
  rows[index["##ing"]] += -verb
  checkpoint = _embedding_checkpoint(tmp_path, rows)
  lines = ["the cat and the dog and the fish and the bird go run .",
           "redo unable reing redo unable reing"]
  corpus = _write(tmp_path / "corpus.txt", "\n".join(lines * 5) + "\n")
  vocab = _write(tmp_path / "vocab.txt", "\n".join(VOCAB) + "\n")
  out = str(tmp_path / "sim.tsv")
  build_similar_words.run(input_file=corpus, output_file=out, vocab_file=vocab,
                          init_checkpoint=checkpoint, chinese_word_segmenter="none", top_k=3)
  table = {}
  with open(out, encoding="utf-8") as f:
    for line in f:
      word, neighbours = line.rstrip("\n").split("\t")
      table[word] = neighbours.split()
  assert sorted(table) == sorted(["cat", "dog", "fish", "bird", "go", "run", "redo", "unable",
                                  "reing"])
  assert set(table["cat"][:2]) == {"dog", "bird"} and table["cat"][2] == "fish"
  assert table["go"][0] == "run" and table["run"][0] == "go"
  assert table["fish"][0] in {"cat", "dog", "bird"}
  assert table["redo"] == ["unable", "reing"] and table["unable"] == ["redo", "reing"]


@pytest.mark.parametrize("case, fragment", [
    ("no_vocab", "--init_checkpoint needs --vocab_file"),
    ("missing", "--init_checkpoint=%(dir)s/nothing.ckpt: no checkpoint there"),
    ("folder", "--init_checkpoint=%(dir)s: expected a checkpoint prefix, not a folder"),
    ("other_vocab", "has 5 word-piece rows but --vocab_file has 23 entries"),
    ("truncated", "model.ckpt.data-00000-of-00001 is cut short (reading "
                  "bert/embeddings/word_embeddings"),
    ("without_data", "its data file is missing (no %(dir)s/model.ckpt.data-*"),
    ("index_file", "not one of its files: --init_checkpoint=%(dir)s/model.ckpt"),
])
def test_build_similar_words_checkpoint_errors_name_the_flag(tmp_path, case, fragment):
  corpus = _write(tmp_path / "corpus.txt", "the cat and the dog\n" * 5)
  vocab = _write(tmp_path / "vocab.txt", "\n".join(VOCAB) + "\n")
  options = dict(input_file=corpus, output_file=str(tmp_path / "o.tsv"), vocab_file=vocab,
                 init_checkpoint=_embedding_checkpoint(tmp_path, np.zeros((5, 4))))
  if case == "no_vocab":
    options["vocab_file"] = None
  elif case == "missing":
    options["init_checkpoint"] = str(tmp_path / "nothing.ckpt")
  elif case == "folder":
    options["init_checkpoint"] = str(tmp_path)
  elif case == "truncated":
    os.truncate(str(tmp_path / "model.ckpt.data-00000-of-00001"), 40)
  elif case == "without_data":
    os.remove(str(tmp_path / "model.ckpt.data-00000-of-00001"))
  elif case == "index_file":
    options["init_checkpoint"] += ".index"
  with pytest.raises(InputError) as error:
    build_similar_words.run(**options)
  assert fragment % {"dir": tmp_path} in str(error.value)
  assert not os.path.exists(str(tmp_path / "o.tsv"))
