# coding=utf-8
"""Tests for create_pretraining_data.py and pretraining/records.py, on small generated corpora."""

import collections
import os
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from core.errors import InputError
import create_pretraining_data as cpd
from pretraining import corpus
from pretraining import masking
from pretraining import record_writer
from pretraining import records as pretraining_records
import tokenization
from script_runner import assert_one_line_error, run_script

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHINESE_VOCAB = os.path.join(_REPO, "vocab", "chinese_vocab.txt")
_ENGLISH_VOCAB = os.path.join(_REPO, "vocab", "english_uncased_vocab.txt")
_CLS, _SEP, _MASK = 101, 102, 103

_ENGLISH_WORDS = (
    "the a of and to in is was for on with as by at from that this it he she they we "
    "river mountain village morning evening stranger letter doctor teacher garden "
    "unbelievably internationalization misunderstanding photosynthesis bureaucracies "
    "reproducibility thermodynamics characterization overcomplicated questioning "
    "walked carried remembered whispered disappeared quickly slowly never always").split()

# Stock run_pretraining.py's feature spec, written out literally (L=64, P=10).
_STOCK_SPEC = {
    "input_ids": tf.io.FixedLenFeature([64], tf.int64),
    "input_mask": tf.io.FixedLenFeature([64], tf.int64),
    "segment_ids": tf.io.FixedLenFeature([64], tf.int64),
    "masked_lm_positions": tf.io.FixedLenFeature([10], tf.int64),
    "masked_lm_ids": tf.io.FixedLenFeature([10], tf.int64),
    "masked_lm_weights": tf.io.FixedLenFeature([10], tf.float32),
    "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
}


def _english_corpus(path, num_docs, seed=0):
  """Documents of 2-8 sentences of 4-16 words, blank lines between them."""
  rng = np.random.default_rng(seed)
  docs = []
  for _ in range(num_docs):
    sentences = [" ".join(rng.choice(_ENGLISH_WORDS, size=rng.integers(4, 17))) + "."
                 for _ in range(rng.integers(2, 9))]
    docs.append("\n".join(sentences))
  path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
  return str(path)


def _chinese_words():
  """40 'words' of 1-4 CJK characters; every character belongs to exactly one word, at a
  known offset, so a token sequence tells where words start."""
  chars = [t for t in tokenization.load_vocab(_CHINESE_VOCAB)
           if len(t) == 1 and u"\u4e00" <= t <= u"\u9fff"][200:300]
  words, i = [], 0
  for n in [1, 2, 3, 4] * 10:
    words.append("".join(chars[i:i + n]))
    i += n
  return words


def _presegmented_corpus(path, num_docs, seed=0):
  """Chinese documents whose words are separated by spaces."""
  rng = np.random.default_rng(seed)
  words = _chinese_words()
  docs = ["\n".join(" ".join(rng.choice(words, size=rng.integers(5, 15))) + " 。"
                    for _ in range(rng.integers(2, 7))) for _ in range(num_docs)]
  path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
  return str(path)


def _run(tmp_path, input_file, name="out", num_shards=1, **kwargs):
  """Runs the tool; returns (summary, output paths)."""
  outputs = [str(tmp_path / ("%s-%d.tfrecord" % (name, i))) for i in range(num_shards)]
  kwargs.setdefault("vocab_file", _CHINESE_VOCAB)
  kwargs.setdefault("max_seq_length", 64)
  kwargs.setdefault("max_predictions_per_seq", 10)
  kwargs.setdefault("dupe_factor", 2)
  opts = cpd.Options(input_file=input_file, output_file=",".join(outputs), **kwargs)
  return cpd.run(opts), outputs


def _examples(paths):
  """All records of `paths` as dicts name -> list of values."""
  examples = []
  for path in paths:
    for record in tf.io.tf_record_iterator(path):
      feature = tf.train.Example.FromString(record).features.feature
      examples.append({name: list(f.int64_list.value or f.float_list.value)
                       for name, f in feature.items()})
  return examples


def _original_ids(example):
  """input_ids with the masked positions restored to their labels."""
  ids = list(example["input_ids"])
  for position, label, weight in zip(example["masked_lm_positions"], example["masked_lm_ids"],
                                     example["masked_lm_weights"]):
    if weight > 0:
      ids[position] = label
  return ids


def test_static_records_parse_with_stock_spec(tmp_path):
  corpus = _english_corpus(tmp_path / "en.txt", 60)
  summary, outputs = _run(tmp_path, corpus, vocab_file=_ENGLISH_VOCAB, num_shards=2)
  assert summary["instances"] == sum(count for _, count in summary["per_file"]) > 100
  assert pretraining_records.inspect_records(outputs[0]) == dict(
      dynamic=False, has_nsp=True, max_seq_length=64, max_predictions_per_seq=10)
  assert pretraining_records.name_to_features(64, 10).keys() == _STOCK_SPEC.keys()
  records = list(tf.io.tf_record_iterator(outputs[1]))[:50]
  serialized = tf.placeholder(tf.string, [])
  parsed = tf.io.parse_single_example(serialized, _STOCK_SPEC)
  labels = set()
  with tf.Session() as sess:
    for record in records:
      ex = sess.run(parsed, {serialized: record})
      length = int(ex["input_mask"].sum())
      assert list(ex["input_mask"]) == [1] * length + [0] * (64 - length)
      assert ex["input_ids"][0] == _CLS and ex["input_ids"][length - 1] == _SEP
      assert not ex["input_ids"][length:].any() and not ex["segment_ids"][length:].any()
      count = int(ex["masked_lm_weights"].sum())
      assert 1 <= count <= 10
      assert all(0 < p < length for p in ex["masked_lm_positions"][:count])
      assert not ex["masked_lm_positions"][count:].any()
      labels.add(int(ex["next_sentence_labels"][0]))
  assert labels == {0, 1}


def test_masked_share_and_replacement_split(tmp_path):
  corpus = _english_corpus(tmp_path / "en.txt", 150)
  summary, outputs = _run(tmp_path, corpus, vocab_file=_ENGLISH_VOCAB, max_seq_length=128,
                          max_predictions_per_seq=20, dupe_factor=4)
  assert abs(summary["masked_share"] - 0.15) <= 0.01
  counts = collections.Counter()
  for ex in _examples(outputs):
    original = _original_ids(ex)
    for p, w in zip(ex["masked_lm_positions"], ex["masked_lm_weights"]):
      if w > 0:
        counts["mask" if ex["input_ids"][p] == _MASK else
               "keep" if ex["input_ids"][p] == original[p] else "random"] += 1
  total = sum(counts.values())
  assert total > 5000
  assert abs(counts["mask"] / total - 0.8) <= 0.02
  assert abs(counts["keep"] / total - 0.1) <= 0.02
  assert abs(counts["random"] / total - 0.1) <= 0.02


def test_byte_identical_for_1_and_3_workers(tmp_path):
  corpus = _english_corpus(tmp_path / "en.txt", 200)  # 4 chunks of <= 64 documents.
  kwargs = dict(vocab_file=_ENGLISH_VOCAB, num_shards=2, shuffle_window=500)
  summary_1, out_1 = _run(tmp_path, corpus, name="w1", num_workers=1, **kwargs)
  summary_3, out_3 = _run(tmp_path, corpus, name="w3", num_workers=3, **kwargs)
  _, out_seed = _run(tmp_path, corpus, name="seed", random_seed=7, **kwargs)
  assert summary_1["documents"] == 200 and summary_1["instances"] == summary_3["instances"]
  for a, b, c in zip(out_1, out_3, out_seed):
    with open(a, "rb") as fa, open(b, "rb") as fb, open(c, "rb") as fc:
      data = fa.read()
      assert data == fb.read()
      assert data != fc.read()


def test_presegmented_whole_word_and_ngram_never_split_words(tmp_path):
  corpus = _presegmented_corpus(tmp_path / "zh.txt", 80)
  vocab = tokenization.load_vocab(_CHINESE_VOCAB)
  # Each character's offset inside its word: offset 0 starts a word.
  offset = {vocab[c]: k for word in _chinese_words() for k, c in enumerate(word)}
  for strategy in ("whole_word", "ngram"):
    _, outputs = _run(tmp_path, corpus, name=strategy, masking=strategy,
                      chinese_word_segmenter="presegmented")
    multi_char_masked = 0
    for ex in _examples(outputs):
      ids = _original_ids(ex)
      chosen = {p for p, w in zip(ex["masked_lm_positions"], ex["masked_lm_weights"]) if w}
      for p in chosen:
        # Walk back to the word's first character (or a truncation point at a special).
        head = p
        while offset.get(ids[head], 0) > 0 and ids[head - 1] in offset:
          head -= 1
        end = p + 1
        while end < len(ids) and offset.get(ids[end], 0) > 0:
          end += 1
        assert set(range(head, end)) <= chosen, (strategy, ids, sorted(chosen))
        multi_char_masked += end - head > 1
    assert multi_char_masked > 100


def test_jieba_word_starts_follow_jieba_words(tmp_path):
  import jieba  # pylint: disable=g-import-not-at-top
  lines = [u"中华人民共和国最高人民法院再审决定书", u"原审被告人张某某犯挪用资金罪，上诉被驳回。",
           u"这款水喷一下就会缓解很多，以后都在考拉上买。"]
  featurizer = corpus.Featurizer(cpd.Options(vocab_file=_CHINESE_VOCAB, masking="whole_word",
                                          chinese_word_segmenter="jieba"))
  for line in lines:
    ids, starts = featurizer.sentence(line)
    expected = []
    for word in jieba.lcut(line):
      expected += [1] + [0] * (len(word) - 1)  # One token per character in these lines.
    assert len(ids) == len(expected)
    assert starts == expected, (line, jieba.lcut(line))
  # The same boundaries reach dynamic records.
  corpus_file = tmp_path / "zh.txt"
  corpus_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
  _, outputs = _run(tmp_path, str(corpus_file), dynamic_masking=True, dupe_factor=1,
                    chinese_word_segmenter="jieba", short_seq_prob=0.0)
  example = _examples(outputs)[0]
  assert example["word_starts"][0] == 1 and sum(example["word_starts"]) < sum(
      example["input_mask"]) - 5


def test_dynamic_records_mask_differently_per_pass(tmp_path):
  corpus = _english_corpus(tmp_path / "en.txt", 60)
  summary, outputs = _run(tmp_path, corpus, vocab_file=_ENGLISH_VOCAB, dynamic_masking=True,
                          max_seq_length=128)
  assert summary["masked_share"] is None
  info = pretraining_records.inspect_records(outputs[0])
  assert info == dict(dynamic=True, has_nsp=True, max_seq_length=128,
                      max_predictions_per_seq=None)
  assert set(pretraining_records.name_to_features(128, 20, dynamic=True)) == set(
      _examples(outputs)[0])
  inv_vocab = tokenization.FullTokenizer(_ENGLISH_VOCAB).inv_vocab
  examples = _examples(outputs)
  ids = np.array([ex["input_ids"] for ex in examples])
  word_starts = np.array([ex["word_starts"] for ex in examples])
  assert not (ids == _MASK).any()  # Unmasked.
  for row_ids, row_starts, ex in zip(ids, word_starts, examples):
    length = sum(ex["input_mask"])
    for token_id, start, position in zip(row_ids, row_starts, range(128)):
      if position >= length:
        assert start == 0  # [PAD]
      elif token_id in (_CLS, _SEP):
        assert start == 1
      elif inv_vocab[token_id].startswith("##") and row_ids[position - 1] not in (_CLS, _SEP):
        assert start == 0
  config = masking.MaskingConfig.from_vocab(tokenization.load_vocab(_ENGLISH_VOCAB),
                                            strategy="whole_word")
  pass_1 = masking.mask_batch(ids, word_starts, [12345, 1], config)
  pass_2 = masking.mask_batch(ids, word_starts, [12345, 2], config)
  assert (pass_1[1] != pass_2[1]).any(axis=1).mean() > 0.95
  maskable = (ids != 0) & (ids != _CLS) & (ids != _SEP)
  for masked in (pass_1, pass_2):
    assert abs(masked[3].sum() / maskable.sum() - 0.15) <= 0.01


@pytest.mark.parametrize("dynamic", [False, True])
def test_no_nsp_instances_fill_max_seq_length(tmp_path, dynamic):
  corpus = _english_corpus(tmp_path / "en.txt", 40)
  summary, outputs = _run(tmp_path, corpus, vocab_file=_ENGLISH_VOCAB, no_nsp=True,
                          dynamic_masking=dynamic, dupe_factor=2, shuffle_window=1)
  info = pretraining_records.inspect_records(outputs[0])
  assert not info["has_nsp"] and info["dynamic"] == dynamic
  examples = _examples(outputs)
  lengths = [sum(ex["input_mask"]) for ex in examples]
  assert all("next_sentence_labels" not in ex for ex in examples)
  # One chunk, two dupes, no shuffling: only the last instance of each dupe pass may be short.
  assert len(lengths) > 20 and len(lengths) % 2 == 0
  short = [i for i, length in enumerate(lengths) if length < 64]
  assert set(short) <= {len(lengths) // 2 - 1, len(lengths) - 1}
  assert all(set(ex["segment_ids"]) == {0} for ex in examples)
  # Documents follow each other inside a sequence, separated by [SEP].
  assert any(ex["input_ids"][1:sum(ex["input_mask"]) - 1].count(_SEP) for ex in examples)


def test_short_documents_are_counted_not_silently_dropped(tmp_path):
  corpus = tmp_path / "mixed.txt"
  corpus.write_text(u"hello\n\n" + open(_english_corpus(tmp_path / "en.txt", 5)).read() +
                    u"\n\nbye\n", encoding="utf-8")
  summary, _ = _run(tmp_path, str(corpus), vocab_file=_ENGLISH_VOCAB)
  assert summary["short_documents"] == 2 and summary["documents"] == 7


def _own_tokens(example):
  """The tokens of an NSP instance taken from its own document: A, and B unless it is a random
  next."""
  length = sum(example["input_mask"])
  b_tokens = sum(example["segment_ids"][:length]) - 1
  return length - 3 - (b_tokens if example["next_sentence_labels"][0] else 0)


def test_the_share_of_the_corpus_in_no_instance_is_counted_and_warned_about(tmp_path, caplog):
  """Every token read is counted once per dupe; kept_tokens are those the records hold (A, and
  B when it is the actual next); a corpus on one line loses almost all of it, with a warning
  naming the line; --no_nsp keeps every token."""
  good = _english_corpus(tmp_path / "en.txt", 30)
  summary, outputs = _run(tmp_path, good, vocab_file=_ENGLISH_VOCAB)
  assert summary["kept_tokens"] == sum(_own_tokens(ex) for ex in _examples(outputs))
  tokenizer = tokenization.FullTokenizer(_ENGLISH_VOCAB)
  with open(good, encoding="utf-8") as f:
    read = sum(len(tokenizer.tokenize(line)) for line in f)
  assert summary["input_tokens"] == 2 * read
  assert 0 < summary["input_tokens"] - summary["kept_tokens"] < 0.1 * summary["input_tokens"]

  one_line = tmp_path / "one_line.txt"
  one_line.write_text(" ".join(np.random.default_rng(1).choice(_ENGLISH_WORDS, 20000)) + "\n",
                      encoding="utf-8")
  caplog.clear()
  summary, outputs = _run(tmp_path, str(one_line), vocab_file=_ENGLISH_VOCAB, name="one")
  assert summary["instances"] == 2 and summary["kept_tokens"] < 130
  warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and
              "are in no instance" in r.getMessage()]
  assert len(warnings) == 1, warnings
  assert "%d of %d tokens (99." % (summary["input_tokens"] - summary["kept_tokens"],
                                   summary["input_tokens"]) in warnings[0]
  assert "the longest line, %s:1, has" % one_line in warnings[0]
  assert "one sentence per line" in warnings[0]
  summary, _ = _run(tmp_path, str(one_line), vocab_file=_ENGLISH_VOCAB, name="packed",
                    no_nsp=True)
  assert summary["kept_tokens"] == summary["input_tokens"] > 2 * 20000


def _write(tmp_path, name, text):
  path = tmp_path / name
  path.write_text(text, encoding="utf-8")
  return str(path)


def test_bad_inputs_raise_input_error(tmp_path, monkeypatch):
  good = _english_corpus(tmp_path / "en.txt", 3)
  cases = [
      (dict(input_file=_write(tmp_path, "empty.txt", "\n\n  \n")), r"empty\.txt: empty corpus"),
      (dict(input_file=str(tmp_path / "nothing*.txt")), r"--input_file=.*: no file matches .*nothing\*\.txt"),
      (dict(input_file=_write(tmp_path, "tiny.txt", u"好\n")),
       r"tiny\.txt: no document is long enough to make an instance: 1 document\(s\), the "
       r"longest has 1 token\(s\), an instance needs a document of at least 2"),
      (dict(input_file=good, max_predictions_per_seq=80),
       r"--max_predictions_per_seq=80 exceeds --max_seq_length=64"),
      (dict(input_file=good, masking="span"), r"--masking=span: expected one of"),
      (dict(input_file=good, vocab_file=str(tmp_path / "none.txt")), r"none\.txt: no such"),
      # 5000 started 5000 processes on 2 cores (interrupted after 2 minutes, still starting).
      (dict(input_file=good, num_workers=5000),
       r"--num_workers=5000: this machine gives the run \d+ CPU\(s\); more than \d+ workers"),
  ]
  vocab_lines = open(_ENGLISH_VOCAB, encoding="utf-8").read().split("\n")
  no_mask = _write(tmp_path, "no_mask_vocab.txt",
                   "\n".join(t for t in vocab_lines if t != "[MASK]"))
  cases.append((dict(input_file=good, vocab_file=no_mask),
                r"no_mask_vocab\.txt: missing special token\(s\) \[MASK\]"))
  bad_utf8 = tmp_path / "gbk.txt"
  bad_utf8.write_bytes(u"first line\n第二行\n".encode("gbk"))
  cases.append((dict(input_file=str(bad_utf8)), r"gbk\.txt:2: not valid utf-8"))
  for kwargs, message in cases:
    kwargs.setdefault("vocab_file", _ENGLISH_VOCAB)
    with pytest.raises(InputError, match=message):
      _run(tmp_path, **kwargs)
  assert not os.path.exists(tmp_path / "out-0.tfrecord")  # Failed runs leave no output.
  monkeypatch.setitem(sys.modules, "jieba", None)  # Makes `import jieba` fail.
  with pytest.raises(InputError, match="pip install jieba"):
    _run(tmp_path, good, masking="whole_word", chinese_word_segmenter="jieba")


def test_cli_error_is_one_line_with_exit_code_2(tmp_path):
  empty = _write(tmp_path, "empty.txt", "")
  result = run_script("create_pretraining_data.py", "--input_file=" + empty,
                      "--output_file=" + str(tmp_path / "out.tfrecord"),
                      "--vocab_file=" + _CHINESE_VOCAB, timeout=120)
  line = assert_one_line_error(result)
  assert line == ("error: %s: empty corpus: no text (expected utf-8 text, one sentence per "
                  "line, blank lines between documents)" % empty)


def test_tfrecord_framing_is_read_back_by_tensorflow(tmp_path):
  crc32c = record_writer.Crc32c()
  assert crc32c(b"123456789") == 0xE3069283  # The CRC-32C check value.
  rng = np.random.default_rng(0)
  records = [rng.bytes(n) for n in (0, 1, 3, 4, 5, 900, 4095, 4096, 4097, 4099, 10000)]
  path = str(tmp_path / "framing.tfrecord")
  writer = record_writer.TFRecordFile(path, crc32c)
  for record in records:
    writer.write(record)
  writer.close()
  assert list(tf.io.tf_record_iterator(path)) == records
  # TensorFlow does verify the data CRCs, so the check above is meaningful.
  data = bytearray(open(path, "rb").read())
  data[16 + 12] ^= 1  # The data byte of the second record (the first takes 16 bytes).
  open(path, "wb").write(bytes(data))
  with pytest.raises(tf.errors.DataLossError):
    list(tf.io.tf_record_iterator(path))


def test_inspect_records_rejects_other_files(tmp_path):
  text = _write(tmp_path, "text.txt", "not a tfrecord\n" * 10)
  with pytest.raises(InputError, match="text.txt: not a TFRecord file"):
    pretraining_records.inspect_records(text)
  other = str(tmp_path / "other.tfrecord")
  with tf.io.TFRecordWriter(other) as writer:
    feature = tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))
    writer.write(tf.train.Example(features=tf.train.Features(
        feature={"label": feature})).SerializeToString())
  with pytest.raises(InputError, match="not a BERT pretraining TFRecord"):
    pretraining_records.inspect_records(other)
  with pytest.raises(InputError, match="no such file"):
    pretraining_records.inspect_records(str(tmp_path / "missing.tfrecord"))
