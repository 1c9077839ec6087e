# coding=utf-8
"""Domain-aware masking (--masking=domain): the mask rate, the words it favours, whole words,
seeds, one selection for records and dynamic masking, Chinese words; the general word-frequency
list (pretraining/word_freq.py, scripts/build_word_freq.py) and its bad inputs; the domain
vocabulary (scripts/build_domain_vocab.py) that gives a domain text's split words tokens of their own."""

import collections
import json
import os
import re
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from core.errors import InputError
import create_pretraining_data
from engine import checkpoints
from pretraining import corpus
from pretraining import domain_vocab
from pretraining import instances
from pretraining import masking
from pretraining import word_freq
import pretraining_helpers
from script_runner import assert_one_line_error, run_script
import tokenization

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(_REPO, "scripts"))
import build_word_freq  # pylint: disable=g-import-not-at-top,wrong-import-position

_ENGLISH_VOCAB = os.path.join(_REPO, "vocab", "english_uncased_vocab.txt")
_CHINESE_VOCAB = os.path.join(_REPO, "vocab", "chinese_vocab.txt")
# Ordinary words, in the general list with large counts; domain words, rare or absent there.
_COMMON = "the of and a to in was he it with his that for on is as".split()
_DOMAIN = "photosynthesis chlorophyll stomata xylem phloem transpiration".split()


@pytest.fixture(scope="module")
def english():
  return tokenization.FullTokenizer(_ENGLISH_VOCAB)


def _write(path, text):
  path.write_text(text, encoding="utf-8")
  return str(path)


def _general_list(tmp_path):
  """A general list naming the common words often and two domain words once."""
  lines = ["%s\t%d" % (w, 50000 // (i + 1)) for i, w in enumerate(_COMMON)]
  lines += [".\t40000", "photosynthesis\t2", "chlorophyll\t1"]
  return _write(tmp_path / "general.tsv", "\n".join(lines) + "\n")


def _sequences(tokenizer, count, rng, words=24):
  """`count` [CLS] ... [SEP] rows of ids, 3 common words to 1 domain word, with word_starts."""
  rows = []
  for _ in range(count):
    chosen = [(_DOMAIN if rng.random() < 0.25 else _COMMON)[rng.integers(6)]
              for _ in range(words)]
    tokens = ["[CLS]"] + tokenizer.tokenize(" ".join(chosen)) + ["[SEP]"]
    ids = np.array(tokenizer.convert_tokens_to_ids(tokens))
    starts = np.array([0 if t.startswith("##") else 1 for t in tokens])
    rows.append((ids, starts))
  return rows


def _domain_config(tokenizer, path, **kwargs):
  weights = word_freq.load(path, tokenizer, kwargs.pop("temperature", 2.0),
                           kwargs.pop("floor", 0.1))
  return masking.MaskingConfig.from_vocab(tokenizer.vocab, strategy="domain",
                                          word_weights=weights, **kwargs)


def test_weights_follow_the_documented_formula(english, tmp_path):
  weights = word_freq.load(_general_list(tmp_path), english, temperature=3.0, floor=0.2)
  total = sum(50000 // (i + 1) for i in range(len(_COMMON))) + 40000 + 3
  ids = lambda word: tuple(english.convert_tokens_to_ids(english.tokenize(word)))
  for word, count in (("the", 50000), ("photosynthesis", 2), (".", 40000)):
    s = np.log((total + 1.0) / (count + 1.0)) / np.log(total + 1.0)
    assert weights.weights[ids(word)] == pytest.approx(0.2 + 0.8 * s ** 3)
  # Words the list lacks weigh 1; punctuation it lacks weighs the floor.
  starts, ends = np.array([0, 1, 2]), np.array([1, 2, 3])
  np.testing.assert_allclose(
      weights.unit_weights(np.array(ids("xylem")[:1] + ids("!") + ids("the")), starts, ends),
      [1.0, 0.2, weights.weights[ids("the")]])


def test_numbers_and_unknown_words_weigh_the_floor(english, tmp_path):
  """A number or a word with an [UNK] piece is no word a checkpoint lacks: the floor, unless
  the list names it; a word with letters after its digits is a word like any other."""
  general = _write(tmp_path / "g.tsv", "the\t100\n2024\t5\n")
  weights = word_freq.load(general, english, temperature=2.0, floor=0.1)
  ids = lambda text: tuple(english.convert_tokens_to_ids(english.tokenize(text)))
  unk = english.vocab["[UNK]"]
  units = [ids("1987"), ids("123456789"), (unk,), ids("xylem")[:1] + (unk,), ids("2024"),
           ids("2024xq"), ids("xylem")]
  assert len(ids("123456789")) > 1 and len(ids("2024xq")) > 1  # Several pieces each.
  lengths = [len(u) for u in units]
  ends = np.cumsum(lengths)
  got = weights.unit_weights(np.concatenate(units), ends - lengths, ends)
  listed = weights.weights[ids("2024")]
  assert 0.1 < listed < 1.0
  np.testing.assert_allclose(got, [0.1, 0.1, 0.1, 0.1, listed, 1.0, 1.0])


def test_mask_rate_per_sequence_is_unchanged(english, tmp_path):
  rng = np.random.default_rng(0)
  rows = _sequences(english, 400, rng)
  domain = _domain_config(english, _general_list(tmp_path), max_predictions_per_seq=40)
  whole = masking.MaskingConfig.from_vocab(english.vocab, strategy="whole_word",
                                           max_predictions_per_seq=40)
  wanted, got, got_whole = [], [], []
  for ids, starts in rows:
    wanted.append(masking.num_to_predict(len(ids) - 2, domain))
    got.append(len(masking.mask_sequence(ids, starts, rng, domain)[1]))
    got_whole.append(len(masking.mask_sequence(ids, starts, rng, whole)[1]))
  wanted, got = np.array(wanted), np.array(got)
  # The budget of every strategy, filled: never over it, and on average within 3% of it.
  assert (got <= wanted).all()
  assert abs(got.mean() / wanted.mean() - 1) < 0.03, (got.mean(), wanted.mean())
  assert abs(got.mean() / np.mean(got_whole) - 1) < 0.03


def test_domain_words_are_masked_far_more_often(english, tmp_path):
  rng = np.random.default_rng(1)
  rows = _sequences(english, 300, rng, words=60)
  config = _domain_config(english, _general_list(tmp_path))
  whole = masking.MaskingConfig.from_vocab(english.vocab, strategy="whole_word")
  domain_ids = {english.vocab[english.tokenize(w)[0]] for w in _DOMAIN}
  rates = {}
  for name, cfg in (("domain", config), ("whole_word", whole)):
    seen, masked = collections.Counter(), collections.Counter()
    for ids, starts in rows:
      # Word occurrences, by their first piece.
      kind = np.where(np.isin(ids, list(domain_ids)), "domain", "common")
      kind[(starts == 0) | (np.arange(len(ids)) == 0) | (np.arange(len(ids)) == len(ids) - 1)] = ""
      seen.update(kind.tolist())
      masked.update(kind[masking.mask_sequence(ids, starts, rng, cfg)[1]].tolist())
    rates[name] = {k: masked[k] / seen[k] for k in ("domain", "common")}
  # Measured (seed 1), the share of word occurrences masked: domain words 0.25 against common
  # 0.06 (whole_word: 0.13 and 0.17; the domain words have 2-4 pieces, which fit the budget
  # less often).
  assert rates["domain"]["domain"] > 3 * rates["domain"]["common"], rates
  assert rates["domain"]["domain"] > 1.5 * rates["whole_word"]["domain"], rates


def test_whole_words_are_never_split_and_seeds_decide(english, tmp_path):
  rows = _sequences(english, 64, np.random.default_rng(2))
  config = _domain_config(english, _general_list(tmp_path), max_predictions_per_seq=12)
  length = max(len(r[0]) for r in rows)
  ids = np.stack([np.pad(r[0], (0, length - len(r[0]))) for r in rows])  # [PAD] is 0.
  starts = np.stack([np.pad(r[1], (0, length - len(r[1]))) for r in rows])
  first = masking.mask_batch(ids, starts, [5, 1], config)
  again = masking.mask_batch(ids, starts, [5, 1], config)
  other = masking.mask_batch(ids, starts, [5, 2], config)
  for a, b in zip(first, again):
    np.testing.assert_array_equal(a, b)
  assert not np.array_equal(first[1], other[1])
  _, positions, _, weights = first
  for row in range(len(ids)):
    chosen = set(positions[row][weights[row] > 0].tolist())
    word = np.cumsum(starts[row])  # Word number of each token.
    for p in chosen:
      members = set(np.flatnonzero(word == word[p]).tolist())
      assert members <= chosen, (row, p, members, chosen)


def test_records_and_dynamic_masking_share_one_selection(english, tmp_path, monkeypatch):
  general = _general_list(tmp_path)
  opts = create_pretraining_data.Options(
      input_file="unused", output_file="unused", vocab_file=_ENGLISH_VOCAB, masking="domain",
      general_word_freq=general, max_predictions_per_seq=8)
  featurizer = corpus.Featurizer(opts)
  ids, starts = featurizer.sentence("the xylem and the phloem of chlorophyll was transpiration")
  ids = [featurizer.cls_id] + ids + [featurizer.sep_id]
  starts = [1] + starts + [1]
  instance = instances.Instance(ids, [0] * len(ids), starts, None)
  calls = []
  original = masking.weighted_order
  monkeypatch.setattr(masking, "weighted_order",
                      lambda w, rng: calls.append(len(w)) or original(w, rng))
  features, static = instances.instance_features(instance, np.random.default_rng([7]),
                                                 featurizer, collections.Counter())
  dynamic = masking.mask_batch(np.array([ids]), np.array([starts]), [7], featurizer.masking)
  assert calls == [calls[0]] * 2 and calls[0] > 0  # Both went through the weighted order.
  assert dict(features)["input_ids"] is not None
  count = len(static[1])
  np.testing.assert_array_equal(dynamic[1][0][:count], static[1])
  np.testing.assert_array_equal(dynamic[0][0], static[0])


def test_chinese_words_agree_with_the_tokenizer_on_which_characters_are_cjk():
  """Two CJK tokens in a row make one masking word, as the tokenizer makes each CJK character
  a token: both use tokenization's ranges (stock BERT's), so a CJK block stock BERT leaves out
  (extensions F and G) is no CJK to either."""
  basic = tokenization.BasicTokenizer(do_lower_case=False)
  chars = {"\u4e2d": True, "\u3400": True, "\U00020000": True, "\uf900": True,
           "\U0002ceb0": False, "\U00030000": False, "\ud55c": False, "\u3042": False}
  for char, cjk in chars.items():
    assert (len(basic.tokenize("x%s%sx" % (char, char))) == 4) == cjk, hex(ord(char))
    assert (len(word_freq.word_units([char, char], [5, 6])) == 1) == cjk, hex(ord(char))


def test_chinese_words_from_jieba(tmp_path):
  pytest.importorskip("jieba")
  general_text = "今天天气很好，我们去公园散步。\n他在学校学习数学和语文。\n" * 50
  general = str(tmp_path / "general_zh.tsv")
  build_word_freq.run(input_file=_write(tmp_path / "general_zh.txt", general_text),
                      output_file=general, chinese_word_segmenter="jieba")
  listed = dict(line.rstrip("\n").split("\t") for line in open(general, encoding="utf-8"))
  assert listed["我们"] == "50" and listed["。"] == "100"
  opts = create_pretraining_data.Options(
      input_file="unused", output_file="unused", vocab_file=_CHINESE_VOCAB, masking="domain",
      general_word_freq=general, chinese_word_segmenter="jieba", max_predictions_per_seq=20)
  featurizer = corpus.Featurizer(opts)
  line = "我们在法院学习判决书，他们去公园散步。"
  ids, starts = featurizer.sentence(line)
  units = word_freq.sequence_units(ids, starts)
  as_text = ["".join(featurizer.tokenizer.convert_ids_to_tokens(list(u))) for u in units]
  assert "法院" in as_text and "我们" in as_text  # jieba's words are the units.
  config = featurizer.masking
  row = np.array([featurizer.cls_id] + ids + [featurizer.sep_id])
  row_starts = np.array([1] + starts + [1])
  counts = collections.Counter()
  rng = np.random.default_rng(0)
  for _ in range(400):
    _, positions, _ = masking.mask_sequence(row, row_starts, rng, config)
    chosen = set(positions.tolist())
    word = np.cumsum(row_starts)
    for p in chosen:  # Whole jieba words.
      assert set(np.flatnonzero(word == word[p]).tolist()) <= chosen
    counts.update(featurizer.tokenizer.convert_ids_to_tokens(row[sorted(chosen)].tolist()))
  # 法院 and 判决书 are not in the general text; 我们 and 公园 are.
  assert counts["法"] > 3 * counts["我"] and counts["判"] > 3 * counts["公"], counts


def _weight(tokenizer, weights, word):
  tokens = tokenizer.tokenize(word)
  return weights.unit_weights(tokenizer.convert_tokens_to_ids(tokens), np.array([0]),
                              np.array([len(tokens)]))[0]


def test_the_vocabulary_is_a_general_list(english):
  counts = word_freq.vocab_counts(english.vocab)
  # Google's vocabulary lists its whole words most frequent first, after the characters: of its
  # N words of two or more letters, the r-th counts N / r (the rarest 1).
  top = counts["the"]
  assert top == sum(len(w) > 1 for w in counts) > 20000 and min(counts.values()) == 1.0
  assert (counts["of"], counts["and"]) == (top / 2, top / 3) and counts["a"] == top
  assert 1 < counts["cowboys"] < top / 5000
  for absent in ("##s", "[CLS]", "[unused5]", ".", "...", "2017", "\u03b2"):
    assert absent not in counts, absent
  spm = collections.OrderedDict((t, i) for i, t in enumerate(
      ["<unk>", "<s>", "\u2581the", "s", "\u2581of", "\u2581a", "ing", "\u2581,"]))
  assert word_freq.vocab_counts(spm) == collections.OrderedDict(
      [("the", 2.0), ("of", 1.0), ("a", 2.0)])
  weights = word_freq.load("vocab", english)
  the, dot, cowboys, guitar = (_weight(english, weights, w) for w in ("the", ".", "cowboys",
                                                                       "guitar"))
  # Measured: 0.163, the floor, 0.837 and 0.605; words the vocabulary splits into pieces
  # (xylem: three) and letters of other scripts weigh 1.
  assert 0.15 < the < 0.2 and dot == 0.1 and 0.5 < guitar < 0.7 < cowboys < 0.9, (
      the, dot, guitar, cowboys)
  assert _weight(english, weights, "xylem") == _weight(english, weights, "\u03b2") == 1.0


def test_jieba_dictionary_weighs_chinese_words():
  pytest.importorskip("jieba")
  featurizer = corpus.Featurizer(create_pretraining_data.Options(
      input_file="unused", output_file="unused", vocab_file=_CHINESE_VOCAB, masking="domain",
      chinese_word_segmenter="jieba", general_word_freq="jieba"))
  weights = featurizer.masking.word_weights
  assert weights.source == "jieba" and len(weights) > 300000
  zh = featurizer.tokenizer
  ours, court, verdict = (_weight(zh, weights, w) for w in ("我们", "法院", "判决书"))
  # Measured: 0.215, 0.390, 0.635; a word jieba's dictionary lacks weighs 1.
  assert ours < court < verdict < 1.0 == _weight(zh, weights, "鑫鑫鑫"), (ours, court, verdict)


def test_the_text_chooses_the_list_when_none_is_given(tmp_path):
  pytest.importorskip("jieba")
  assert word_freq.default_source(["我们去法院。", "ok, 2024"]) == "jieba"
  assert word_freq.default_source(["the court 法院", "[CLS]"]) == "vocab"
  assert word_freq.default_source([]) == "vocab"
  english = _write(tmp_path / "en.txt", "the xylem of the leaf .\nit was phloem .\n" * 3)
  chinese = _write(tmp_path / "zh.txt", "我们去法院。\n他们在公园散步。\n" * 3)
  # README's one command (with --chinese_word_segmenter=jieba) serves English and Chinese text.
  assert create_pretraining_data.default_general_word_list([chinese]) == "jieba"
  opts = create_pretraining_data.Options(
      input_file=english, output_file=str(tmp_path / "en.tfrecord"), vocab_file=_ENGLISH_VOCAB,
      masking="domain", chinese_word_segmenter="jieba", dupe_factor=1)
  summary = create_pretraining_data.run(opts)
  assert opts.general_word_freq == "vocab" and 0.1 < summary["masked_share"] < 0.2, summary


def test_the_vocabulary_list_refuses_chinese_words():
  zh = tokenization.FullTokenizer(_CHINESE_VOCAB)
  weights = word_freq.load("vocab", zh)
  units = [tuple(zh.convert_tokens_to_ids(zh.tokenize(w))) for w in ("我们", "去", "法院", "ok")]
  assert weights.check_overlap(units[-2:], "the text") == 0.5  # Half Chinese: accepted.
  with pytest.raises(InputError, match=r"--general_word_freq=vocab: 3 of the 4 words of the "
                     r"text are Chinese.*--general_word_freq=jieba"):
    weights.check_overlap(units, "the text")


@pytest.mark.parametrize("content, fragment", [
    ("", "general.tsv: empty: expected word<TAB>count"),
    ("\n\n", "general.tsv: empty: expected word<TAB>count"),
    ("the\t10\nof 5\n", "general.tsv:2: expected word<TAB>count"),
    ("the\t10\n\tof\t3\n", "general.tsv:2: expected word<TAB>count"),
    ("the\tmany\n", "general.tsv:1: expected word<TAB>count"),
    ("the\t0\n", "general.tsv:1: expected word<TAB>count with a count > 0"),
    ("the\t-3\n", "general.tsv:1: expected word<TAB>count"),
    ("\U00013000\U00013001\t10\n\ua9b2\ua9a4\t3\n",
     "general.tsv: none of its 2 words is in the model's"),
])
def test_bad_lists_are_one_error_naming_file_and_line(english, tmp_path, content, fragment):
  path = _write(tmp_path / "general.tsv", content)
  with pytest.raises(InputError) as raised:
    word_freq.load(path, english)
  assert fragment in str(raised.value)


def test_bad_settings_are_refused(english, tmp_path):
  path = _general_list(tmp_path)
  for kwargs, fragment in ((dict(temperature=0.0), "--domain_temperature=0.0: expected"),
                           (dict(temperature=float("inf")), "--domain_temperature=inf"),
                           (dict(floor=1.5), "--domain_floor=1.5: expected a value in [0, 1]"),
                           (dict(floor=-0.1), "--domain_floor=-0.1")):
    with pytest.raises(InputError, match=fragment.replace("[", r"\[").replace(".", r"\.")):
      word_freq.load(path, english, **kwargs)
  with pytest.raises(InputError, match="--masking=domain needs --general_word_freq"):
    masking.MaskingConfig.from_vocab(english.vocab, strategy="domain")
  with pytest.raises(InputError, match="--masked_lm_prob=1.5"):
    _domain_config(english, path, masked_lm_prob=1.5)
  with pytest.raises(InputError, match="--masking=domian: expected one of .*domain"):
    masking.MaskingConfig.from_vocab(english.vocab, strategy="domian")


@pytest.fixture(scope="module")
def cli_world(tmp_path_factory):
  """An English domain text, a general list for it and one for another language."""
  root = tmp_path_factory.mktemp("domain_cli")
  text = "".join("the %s of the leaf was measured in the laboratory .\nit was %s .\n\n" %
                 (w, w) for w in _DOMAIN * 4)
  return dict(root=root, domain=_write(root / "domain.txt", text),
              general=_general_list(root),
              chinese=_write(root / "chinese.tsv", "的\t900\n我们\t50\n法院\t3\n"),
              chinese_text=_write(root / "chinese.txt", "我们去法院。\n他们在公园散步。\n\n" * 4),
              malformed=_write(root / "malformed.tsv", "the\t10\nof\n"))


def _cpd(world, *flags):
  return run_script("create_pretraining_data.py", "--input_file=" + world["domain"],
                    "--output_file=" + str(world["root"] / "out.tfrecord"),
                    "--vocab_file=" + _ENGLISH_VOCAB, *flags, timeout=120)


@pytest.mark.parametrize("flags, expected", [
    (["--masking=domain", "--general_word_freq=CHINESE"],
     "error: --general_word_freq=CHINESE names only 0.0% of the 312 words of the first 48 "
     "lines of DOMAIN (at least 10% expected): a list of another language or vocabulary? "
     "Build one from general text of the domain's language with scripts/build_word_freq.py"),
    (["--masking=domain", "--general_word_freq=MALFORMED"],
     "error: MALFORMED:2: expected word<TAB>count with a count > 0 (got 'of')"),
    (["--input_file=CHINESE_TEXT", "--vocab_file=ZH_VOCAB", "--masking=domain",
      "--general_word_freq=vocab"],
     "error: --general_word_freq=vocab: 48 of the 48 words of the first 8 lines of "
     "CHINESE_TEXT are Chinese, and a vocabulary lists characters, not Chinese words: pass "
     "--general_word_freq=jieba"),
    (["--masking=domain", "--general_word_freq=GENERAL", "--masked_lm_prob=0"],
     "error: --masked_lm_prob=0.0: expected a value in (0, 1]"),
    (["--masking=domain", "--general_word_freq=GENERAL", "--domain_floor=2"],
     "error: --domain_floor=2.0: expected a value in [0, 1]"),
    (["--masking=domains"], "error: --masking=domains: expected one of "
                            "token|whole_word|ngram|domain"),
])
def test_create_pretraining_data_refuses_bad_input_before_any_work(cli_world, flags, expected):
  names = {"CHINESE_TEXT": cli_world["chinese_text"], "ZH_VOCAB": _CHINESE_VOCAB,
           "CHINESE": cli_world["chinese"], "MALFORMED": cli_world["malformed"],
           "GENERAL": cli_world["general"], "DOMAIN": cli_world["domain"]}
  for name, path in names.items():
    flags = [f.replace(name, path) for f in flags]
    expected = expected.replace(name, path)
  line = assert_one_line_error(_cpd(cli_world, *flags))
  assert line.startswith(expected), line
  assert not os.path.exists(str(cli_world["root"] / "out.tfrecord"))


def test_records_then_dynamic_training_with_domain_masking(tmp_path):
  """The records' summary, then two updates on dynamic records masked by domain weights, and
  the trainer's own check of the list against the records."""
  paths = pretraining_helpers.write_tiny_corpus(tmp_path, dict(
      vocab_size=len(pretraining_helpers.VOCAB), hidden_size=16, num_hidden_layers=1,
      num_attention_heads=2, intermediate_size=32, max_position_embeddings=32,
      type_vocab_size=2), documents=20)
  general = _write(tmp_path / "general.tsv", "alpha\t500\nbravo\t400\ncharlie\t300\n.\t900\n")
  static = create_pretraining_data.run(create_pretraining_data.Options(
      input_file=paths["corpus"], output_file=str(tmp_path / "static.tfrecord"),
      vocab_file=paths["vocab"], max_seq_length=32, max_predictions_per_seq=5, dupe_factor=2,
      masking="domain", general_word_freq=general))
  assert 0.13 < static["masked_share"] < 0.17, static["masked_share"]
  records = str(tmp_path / "dynamic.tfrecord")
  create_pretraining_data.run(create_pretraining_data.Options(
      input_file=paths["corpus"], output_file=records, vocab_file=paths["vocab"],
      max_seq_length=32, dupe_factor=1, dynamic_masking=True, no_nsp=True))
  base = ["--input_file=" + records, "--bert_config_file=" + paths["config"],
          "--vocab_file=" + paths["vocab"], "--n_gpus=2", "--train_batch_size=4",
          "--num_train_steps=2", "--do_train", "--masking=domain",
          "--save_checkpoints_steps=2", "--max_predictions_per_seq=5"]
  foreign = _write(tmp_path / "foreign.tsv", "zulu\t3\n")
  refused = run_script("run_pretraining_mgpu.py", *(base + [
      "--output_dir=" + str(tmp_path / "refused"), "--general_word_freq=" + foreign]))
  line = assert_one_line_error(refused, "--general_word_freq=%s names only" % foreign,
                               "the first records of %s" % records)
  assert not os.path.exists(str(tmp_path / "refused" / "model.ckpt-2.index")), line
  # No list given: the model's vocabulary (the records' text is not Chinese).
  result = run_script("run_pretraining_mgpu.py",
                      *(base + ["--output_dir=" + str(tmp_path / "out")]))
  assert result.returncode == 0, result.stderr[-3000:]
  assert "--masking=domain: %d words from vocab, temperature 2, floor 0.1" % (
      len(word_freq.vocab_counts(tokenization.load_vocab(paths["vocab"])))) in result.stderr
  assert tf.train.latest_checkpoint(str(tmp_path / "out")).endswith("model.ckpt-2")
  info = json.load(open(str(tmp_path / "out" / "run_info.json")))
  assert "domain" in json.dumps(info)


def test_build_word_freq_counts_words_as_the_masking_splits_them(tmp_path):
  text = _write(tmp_path / "general.txt", "The cat sat.\nthe CAT, the dog!\n\n")
  out = str(tmp_path / "freq.tsv")
  assert build_word_freq.run(input_file=text, output_file=out) == 7
  assert open(out, encoding="utf-8").read() == (
      "the\t3\ncat\t2\n!\t1\n,\t1\n.\t1\ndog\t1\nsat\t1\n")
  assert build_word_freq.run(input_file=text, output_file=out, min_count=2) == 2
  with pytest.raises(InputError, match="no word seen --min_count=9 times"):
    build_word_freq.run(input_file=text, output_file=out, min_count=9)
  line = assert_one_line_error(run_script(os.path.join("scripts", "build_word_freq.py"),
                                          "--output_file=" + out, timeout=120))
  assert line == "error: --input_file is required"


def test_featurizer_needs_the_general_list_resolved():
  # One resolver: the entry points choose the list from the text; a Featurizer never guesses.
  with pytest.raises(ValueError, match="general_word_freq resolved first"):
    corpus.Featurizer(create_pretraining_data.Options(
        input_file="unused", output_file="unused", vocab_file=_ENGLISH_VOCAB, masking="domain"))


def _tiny_bert(folder, tokens):
  """A BERT folder with `tokens` as vocab.txt, word embeddings [len(tokens), 3] = id * 10 + column
  (so a mean of rows is easy to check), an output bias = id, and one other weight."""
  os.makedirs(str(folder))
  (folder / "vocab.txt").write_text("".join(t + "\n" for t in tokens))
  (folder / "bert_config.json").write_text('{"vocab_size": %d}' % len(tokens))
  ids = np.arange(len(tokens), dtype=np.float32)
  with tf.Graph().as_default():
    weights = [tf.Variable(ids[:, None] * 10 + np.arange(3, dtype=np.float32),
                           name=domain_vocab.EMBEDDINGS),
               tf.Variable(ids, name=domain_vocab.OUTPUT_BIAS),
               tf.Variable(np.ones([2, 2], np.float32), name="bert/pooler/dense/kernel")]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver(weights).save(sess, str(folder / "bert_model.ckpt"), write_meta_graph=False)


def test_domain_vocab_gives_split_words_the_unused_slots_started_from_their_pieces(tmp_path,
                                                                                  caplog):
  tokens = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused2]",
            "the", "game", "zor", "##bex", "kla", "##x", "##ix", "play", "##s"]
  _tiny_bert(tmp_path / "bert", tokens)
  text = tmp_path / "domain.txt"
  # zorbex 3 times, klaxix twice, plays twice (split too), klax once (under --min_count=2).
  text.write_text("the game zorbex plays\nZorbex , klaxix\n\nthe zorbex klaxix plays klax\n")
  with caplog.at_level("INFO"):
    added = domain_vocab.build(str(tmp_path / "bert"), str(tmp_path / "dom*.txt"),  # a glob
                               str(tmp_path / "out"))
  # Two free slots (the last [unusedN] stays) for three split words met twice or more: the most
  # frequent first, ties by name; the log says where the cut fell.
  assert [(slot, word) for slot, word, _ in added] == [(1, "zorbex"), (2, "klaxix")]
  assert ('1 more split words met 2+ times did not fit: the first left out is "plays" (met 2 '
          'times), the last added "klaxix" (met 2 times)') in caplog.text
  out = tmp_path / "out"
  new_tokens = (out / "vocab.txt").read_text().splitlines()
  assert new_tokens == tokens[:1] + ["zorbex", "klaxix"] + tokens[3:]
  reader = tf.train.load_checkpoint(str(out / "bert_model.ckpt"))
  embeddings = reader.get_tensor(domain_vocab.EMBEDDINGS)
  np.testing.assert_allclose(embeddings[1], [105, 106, 107])  # rows 10 and 11: zor ##bex
  np.testing.assert_allclose(embeddings[2], [130, 131, 132])  # rows 12, 13, 14: kla ##x ##ix
  np.testing.assert_allclose(embeddings[3:], (np.arange(3, 17)[:, None] * 10 + np.arange(3)))
  np.testing.assert_allclose(reader.get_tensor(domain_vocab.OUTPUT_BIAS)[:3], [0, 10.5, 13])
  assert reader.get_tensor("bert/pooler/dense/kernel").tolist() == [[1, 1], [1, 1]]
  # WordPiece now reads each added word as one token. The built-in general list of the new
  # vocabulary is the old one's: the added words, before the last [unusedN], stay unlisted.
  tokenizer = tokenization.FullTokenizer(str(out / "vocab.txt"))
  assert tokenizer.tokenize("The zorbex plays") == ["the", "zorbex", "play", "##s"]
  general = word_freq.vocab_counts(tokenizer.vocab)
  assert general == word_freq.vocab_counts(tokenization.load_vocab(str(tmp_path / "bert" /
                                                                        "vocab.txt")))
  assert list(general) == ["the", "game", "zor", "kla", "play"]
  assert (out / "added_words.tsv").read_text() == "zorbex\t3\tzor ##bex\nklaxix\t2\tkla ##x ##ix\n"


def test_domain_vocab_refuses_what_it_cannot_use_before_writing(tmp_path):
  _tiny_bert(tmp_path / "no_slots", ["[PAD]", "[unused0]", "[UNK]", "the", "zor", "##bex"])
  text = tmp_path / "domain.txt"
  text.write_text("the zorbex zorbex\n")
  out = tmp_path / "out"
  for args, message in (
      ((str(tmp_path / "no_slots"), str(text)), "vocab.txt has fewer than two [unusedN]"),
      ((str(tmp_path), str(text)), "vocab.txt is missing"),
      ((str(tmp_path / "no_slots"), str(tmp_path / "none.txt")), "--input_file=%s: no file matches"
       % (tmp_path / "none.txt"))):
    with pytest.raises(InputError, match=re.escape(message)):
      domain_vocab.build(args[0], args[1], str(out))
  _tiny_bert(tmp_path / "bert", ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "the", "zor",
                                 "##bex"])
  with pytest.raises(InputError, match="no word met 3\\+ times"):
    domain_vocab.build(str(tmp_path / "bert"), str(text), str(out), min_count=3)
  assert not out.exists()
  # What scripts/pretrain_domain.sh asks for: nothing to add is no error, and nothing is written.
  assert domain_vocab.build(str(tmp_path / "bert"), str(text), str(out), min_count=3,
                            allow_none=True) == []
  assert not out.exists()
  # ... and mostly Chinese text is skipped, though its English word would be added.
  chinese = tmp_path / "zh.txt"
  chinese.write_text("the zorbex zorbex " + "一二三四五六七八九十" * 2 + "\n", encoding="utf-8")
  assert domain_vocab.build(str(tmp_path / "bert"), str(chinese), str(out),
                            skip_chinese=True) == []
  assert not out.exists()
  assert [w for _, w, _ in domain_vocab.build(str(tmp_path / "bert"), str(chinese),
                                              str(tmp_path / "zh_out"))] == ["zorbex"]
  line = assert_one_line_error(run_script(os.path.join("scripts", "build_domain_vocab.py"), "--bert_dir=" + str(
      tmp_path / "bert"), "--input_file=" + str(text), "--output_dir=" + str(out),
      "--min_count=3"))
  assert "no word met 3+ times" in line and not out.exists()


def test_a_checkpoint_is_read_with_the_vocabulary_beside_it(tmp_path):
  """A domain vocabulary's checkpoint fine-tuned with the original vocabulary would read its
  added words in untrained pieces: refused. Filling [unusedN] slots by hand stays allowed."""
  tokens = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "the", "zor", "##bex"]
  _tiny_bert(tmp_path / "bert", tokens)
  text = tmp_path / "domain.txt"
  text.write_text("the zorbex zorbex\n")
  domain_vocab.build(str(tmp_path / "bert"), str(text), str(tmp_path / "out"))
  original, extended = str(tmp_path / "bert" / "vocab.txt"), str(tmp_path / "out" / "vocab.txt")
  with pytest.raises(InputError) as e:
    checkpoints.check_vocab_beside(str(tmp_path / "out" / "bert_model.ckpt"), original)
  assert str(e.value) == (
      "--vocab_file=%s is not the vocabulary of --init_checkpoint=%s (entry 1 is 'zorbex' "
      "there, '[unused0]' here; 1 entries differ): pass --vocab_file=%s" % (
          original, tmp_path / "out" / "bert_model.ckpt", extended))
  # The extended vocabulary with the original checkpoint (slots filled by hand), the same
  # vocabulary, a copy of it elsewhere: accepted.
  checkpoints.check_vocab_beside(str(tmp_path / "bert" / "bert_model.ckpt"), extended)
  checkpoints.check_vocab_beside(str(tmp_path / "out" / "bert_model.ckpt"), extended)
  copy = tmp_path / "copy.txt"
  copy.write_text((tmp_path / "out" / "vocab.txt").read_text())
  checkpoints.check_vocab_beside(str(tmp_path / "out" / "bert_model.ckpt"), str(copy))
  copy.write_text("".join(t + "\n" for t in tokens[:-1]))
  with pytest.raises(InputError, match="7 entries there, 6 here"):
    checkpoints.check_vocab_beside(str(tmp_path / "bert" / "bert_model.ckpt"), str(copy))
