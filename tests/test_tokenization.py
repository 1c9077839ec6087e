# coding=utf-8
"""Tests for tokenization.py against the bundled Google vocabularies.

The expected ids below were read off the vocabulary files by line number
(id = zero-based line), e.g. `grep -nxF 我 vocab/chinese_vocab.txt` -> 2770.
"""

import os
import random
import subprocess
import sys
import unicodedata

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from core.errors import InputError  # pylint: disable=g-import-not-at-top,wrong-import-position
import tokenization  # pylint: disable=g-import-not-at-top,wrong-import-position

VOCAB_DIR = os.path.join(os.path.dirname(__file__), "..", "vocab")
CHINESE_VOCAB = os.path.join(VOCAB_DIR, "chinese_vocab.txt")
ENGLISH_VOCAB = os.path.join(VOCAB_DIR, "english_uncased_vocab.txt")

SPECIAL_IDS = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102,
               "[MASK]": 103}


@pytest.fixture(scope="module")
def zh():
  return tokenization.FullTokenizer(CHINESE_VOCAB, do_lower_case=True)


@pytest.fixture(scope="module")
def en():
  return tokenization.FullTokenizer(ENGLISH_VOCAB, do_lower_case=True)


@pytest.fixture(scope="module")
def en_cased():
  return tokenization.FullTokenizer(ENGLISH_VOCAB, do_lower_case=False)


def _write_vocab(tmp_path, tokens, name="vocab.txt"):
  path = tmp_path / name
  path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
  return str(path)


# ----------------------------------------------------------------------------
# Real vocabularies: exact ids.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("path,size", [(CHINESE_VOCAB, 21128),
                                       (ENGLISH_VOCAB, 30522)])
def test_real_vocab_sizes_and_special_ids(path, size):
  vocab = tokenization.load_vocab(path)
  assert len(vocab) == size
  for token, expected_id in SPECIAL_IDS.items():
    assert vocab[token] == expected_id
  assert list(vocab.values()) == list(range(size))


def test_chinese_vocab_u2028_lines_match_stock(zh):
  # Line 344 of the Chinese vocab is U+2028 and line 13503 is "##" + U+2028.
  # Stock BERT splits on "\n" only and strips each line, so they become ""
  # and "##"; keeping them on their own lines keeps every later id aligned.
  assert zh.vocab[""] == 343
  assert zh.vocab["##"] == 13502
  assert zh.vocab["[unused1]"] == 1
  assert zh.inv_vocab[21127] == "##😎"


def test_chinese_sentence(zh):
  tokens = zh.tokenize("我爱北京天安门。")
  assert tokens == ["我", "爱", "北", "京", "天", "安", "门", "。"]
  ids = zh.convert_tokens_to_ids(tokens)
  assert ids == [2769, 4263, 1266, 776, 1921, 2128, 7305, 511]
  assert zh.convert_ids_to_tokens(ids) == tokens


def test_chinese_sentence_with_full_width_punctuation(zh):
  tokens = zh.tokenize("今天天气很好，我们去公园玩吧！")
  assert tokens == ["今", "天", "天", "气", "很", "好", "，", "我", "们", "去",
                    "公", "园", "玩", "吧", "！"]
  assert zh.convert_tokens_to_ids(tokens) == [
      791, 1921, 1921, 3698, 2523, 1962, 8024, 2769, 812, 1343, 1062, 1736,
      4381, 1416, 8013]


def test_mixed_chinese_english_digits(zh):
  tokens = zh.tokenize("我用iPhone 12拍了3张照片，花了5999元。")
  assert tokens == ["我", "用", "iphone", "12", "拍", "了", "3", "张", "照",
                    "片", "，", "花", "了", "599", "##9", "元", "。"]
  assert zh.convert_tokens_to_ids(tokens) == [
      2769, 4500, 8210, 8110, 2864, 749, 124, 2476, 4212, 4275, 8024, 5709,
      749, 10713, 8160, 1039, 511]


def test_full_width_forms_and_curly_quotes(zh):
  # Full-width letters are lower-cased to full-width lower case and are not
  # split like CJK; the Google Chinese vocab has no curly quotes -> [UNK].
  tokens = zh.tokenize("ＡＢＣ，（全角）“引号”")
  assert tokens == ["ａ", "##ｂ", "##ｃ", "，", "（", "全", "角", "）", "[UNK]",
                    "引", "号", "[UNK]"]
  assert zh.convert_tokens_to_ids(tokens) == [
      8051, 12641, 10675, 8024, 8020, 1059, 6235, 8021, 100, 2471, 1384, 100]


def test_unknown_cjk_characters_are_single_unk_tokens(zh):
  # 龘 (U+9F98) and 𠀁 (U+20001, extension B) are CJK but not in the vocab.
  assert "龘" not in zh.vocab
  assert zh.tokenize("我龘你") == ["我", "[UNK]", "你"]
  assert zh.convert_tokens_to_ids(zh.tokenize("a\U00020001b")) == [
      143, 100, 144]


def test_chinese_vocab_english_words(zh):
  tokens = zh.tokenize("Hello World")
  assert tokens == ["hello", "world"]
  assert zh.convert_tokens_to_ids(tokens) == [8701, 8572]


def test_english_unwanted_running(en):
  tokens = en.tokenize("UNwant\u00E9d,running")
  assert tokens == ["unwanted", ",", "running"]
  assert en.convert_tokens_to_ids(tokens) == [18162, 1010, 2770]


def test_english_wordpiece_split(en):
  tokens = en.tokenize("unaffable")
  assert tokens == ["una", "##ffa", "##ble"]
  assert en.convert_tokens_to_ids(tokens) == [14477, 20961, 3468]


def test_english_sentence(en):
  tokens = en.tokenize("The quick brown fox jumps over the lazy dog.")
  assert tokens == ["the", "quick", "brown", "fox", "jumps", "over", "the",
                    "lazy", "dog", "."]
  ids = en.convert_tokens_to_ids(tokens)
  assert ids == [1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 1012]
  assert en.convert_ids_to_tokens(ids) == tokens


def test_english_punctuation_and_digits(en):
  tokens = en.tokenize("don't pay $5.00 for Python3.11!")
  assert tokens == ["don", "'", "t", "pay", "$", "5", ".", "00", "for",
                    "python", "##3", ".", "11", "!"]
  assert en.convert_tokens_to_ids(tokens) == [
      2123, 1005, 1056, 3477, 1002, 1019, 1012, 4002, 2005, 18750, 2509, 1012,
      2340, 999]


def test_accents_stripped_only_when_lower_casing(en, en_cased):
  text = "Héllo wörld naïve café"
  assert en.tokenize(text) == ["hello", "world", "naive", "cafe"]
  assert en.convert_tokens_to_ids(en.tokenize(text)) == [7592, 2088, 15743,
                                                         7668]
  basic = tokenization.BasicTokenizer(do_lower_case=False)
  assert basic.tokenize(text) == ["Héllo", "wörld", "naïve", "café"]
  # The uncased vocab has no capitalised or accented forms of these words.
  assert en_cased.tokenize(text) == ["[UNK]"] * 4


def test_control_characters_dropped(en):
  # NUL, zero-width space (Cf) and BEL (Cc) vanish without splitting the word;
  # a tab separates words.
  tokens = en.tokenize("hello\x00\u200bwor\x07ld\tfoo\ufffd")
  assert tokens == ["hello", "##world", "foo"]
  assert en.convert_tokens_to_ids(tokens) == [7592, 11108, 29379]


def test_word_longer_than_200_chars_is_unk(en):
  assert en.tokenize("a" * 201) == ["[UNK]"]
  assert en.convert_tokens_to_ids(en.tokenize("x " + "a" * 201)) == [1060, 100]
  tokens = en.tokenize("a" * 200)
  assert tokens == ["aaa"] + ["##aa"] * 98 + ["##a"]
  assert en.convert_tokens_to_ids(tokens)[:2] == [13360, 11057]
  assert en.convert_tokens_to_ids(tokens)[-1] == 2050


def test_english_vocab_on_chinese_text(en):
  tokens = en.tokenize("我爱 Python3.11!")
  assert tokens == ["我", "[UNK]", "python", "##3", ".", "11", "!"]
  assert en.convert_tokens_to_ids(tokens) == [1855, 100, 18750, 2509, 1012,
                                              2340, 999]


def test_bytes_input_and_unknown_token_ids(zh, en):
  assert zh.tokenize("北京".encode("utf-8")) == ["北", "京"]
  assert en.convert_tokens_to_ids(["[CLS]", "no-such-token", "[SEP]"]) == [
      101, 100, 102]
  assert en.convert_ids_to_tokens([0, 101, 102, 103]) == [
      "[PAD]", "[CLS]", "[SEP]", "[MASK]"]


# ----------------------------------------------------------------------------
# BasicTokenizer and WordpieceTokenizer on small inputs.
# ----------------------------------------------------------------------------


def test_basic_tokenizer_lower():
  tokenizer = tokenization.BasicTokenizer(do_lower_case=True)
  assert tokenizer.tokenize(" \tHeLLo!how  \n Are yoU?  ") == [
      "hello", "!", "how", "are", "you", "?"]
  assert tokenizer.tokenize("H\u00E9llo") == ["hello"]


def test_basic_tokenizer_no_lower():
  tokenizer = tokenization.BasicTokenizer(do_lower_case=False)
  assert tokenizer.tokenize(" \tHeLLo!how  \n Are yoU?  ") == [
      "HeLLo", "!", "how", "Are", "yoU", "?"]


def test_basic_tokenizer_chinese_and_other_scripts():
  tokenizer = tokenization.BasicTokenizer()
  assert tokenizer.tokenize("ah\u535A\u63A8zz") == ["ah", "\u535A", "\u63A8",
                                                   "zz"]
  # Hangul and Kana are not CJK ideographs, so they stay whole words.
  cased = tokenization.BasicTokenizer(do_lower_case=False)
  assert cased.tokenize("한국어 ひらがな") == ["한국어", "ひらがな"]
  # As in stock BERT, accent stripping leaves Hangul as NFD jamo and drops
  # the dakuten (a combining mark) from が.
  assert tokenizer.tokenize("한국어 ひらがな") == [
      unicodedata.normalize("NFD", "한국어"), "ひらかな"]
  # Extension E and the compatibility supplement are CJK too. (Lower-casing
  # would NFD-normalise U+2F800 to U+4E3D.)
  assert cased.tokenize("x\U0002B820y\U0002F800z") == [
      "x", "\U0002B820", "y", "\U0002F800", "z"]


def test_basic_tokenizer_punctuation():
  tokenizer = tokenization.BasicTokenizer()
  # ASCII symbols count as punctuation; so do Unicode P* characters.
  assert tokenizer.tokenize("a$b^c`d") == ["a", "$", "b", "^", "c", "`", "d"]
  assert tokenizer.tokenize("x—y¿z") == ["x", "—", "y", "¿", "z"]
  # Non-ASCII symbols (So/Sm) are not punctuation.
  assert tokenizer.tokenize("a©b") == ["a©b"]
  assert tokenizer.tokenize("...") == [".", ".", "."]


def test_basic_tokenizer_whitespace_and_empty():
  tokenizer = tokenization.BasicTokenizer()
  assert tokenizer.tokenize("") == []
  assert tokenizer.tokenize(" \u3000\u00a0\r\n") == []
  assert tokenizer.tokenize("a\u3000b\u00a0c") == ["a", "b", "c"]
  # A lone combining accent disappears entirely after stripping.
  assert tokenizer.tokenize("a \u0301 b") == ["a", "b"]


def test_wordpiece_tokenizer(tmp_path):
  vocab = tokenization.load_vocab(_write_vocab(
      tmp_path, ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa",
                 "un", "runn", "##ing"]))
  tokenizer = tokenization.WordpieceTokenizer(vocab=vocab)
  assert tokenizer.tokenize("") == []
  assert tokenizer.tokenize("unwanted running") == [
      "un", "##want", "##ed", "runn", "##ing"]
  assert tokenizer.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]


def test_wordpiece_tokenizer_longest_match_first_and_limits():
  vocab = {"a": 0, "ab": 1, "abc": 2, "##c": 3, "##d": 4, "##cd": 5, "<?>": 6}
  tokenizer = tokenization.WordpieceTokenizer(
      vocab, unk_token="<?>", max_input_chars_per_word=4)
  assert tokenizer.tokenize("abcd") == ["abc", "##d"]
  assert tokenizer.tokenize("abd") == ["ab", "##d"]
  assert tokenizer.tokenize("abcdc") == ["<?>"]  # 5 chars > 4
  assert tokenizer.tokenize("b") == ["<?>"]
  assert tokenizer.tokenize("a x") == ["a", "<?>"]


def test_full_tokenizer_small_vocab(tmp_path):
  path = _write_vocab(tmp_path, ["[UNK]", "[CLS]", "[SEP]", "want", "##want",
                                 "##ed", "wa", "un", "runn", "##ing", ","])
  tokenizer = tokenization.FullTokenizer(path)
  tokens = tokenizer.tokenize("UNwant\u00E9d,running")
  assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
  assert tokenizer.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]
  assert tokenizer.inv_vocab[7] == "un"


# ----------------------------------------------------------------------------
# Vocabulary loading and helper functions.
# ----------------------------------------------------------------------------


def test_load_vocab_strips_and_last_duplicate_wins(tmp_path):
  path = tmp_path / "dup.txt"
  path.write_text("[UNK]\r\n  a \nb\na\n", encoding="utf-8")
  vocab = tokenization.load_vocab(str(path))
  assert vocab == {"[UNK]": 0, "a": 3, "b": 2}
  # Insertion order is that of first appearance, as with stock's OrderedDict.
  assert list(vocab) == ["[UNK]", "a", "b"]


def test_a_vocabulary_of_the_wrong_size_names_its_repeated_lines(tmp_path):
  """A vocabulary of vocab_size lines, one of them repeated, has one entry too few: the message
  names the repeating line and the line it repeats."""
  path = tmp_path / "vocab.txt"
  path.write_text("[PAD]\n[UNK]\nfoo\nbar\nfoo\n", encoding="utf-8")
  vocab = tokenization.load_vocab(str(path))
  with pytest.raises(InputError) as info:
    tokenization.require_vocab_size(str(path), vocab, 5, "config.json")
  assert str(info.value) == (
      "%s has 4 entries (5 lines; line 5 repeats line 3, 'foo') but vocab_size=5 in "
      "config.json: the vocabulary must be the one the model was trained with" % path)
  tokenization.require_vocab_size(str(path), vocab, 4, "config.json")  # As stock: last wins.
  path.write_text("[PAD]\n[UNK]\nfoo\n", encoding="utf-8")
  with pytest.raises(InputError) as info:
    tokenization.require_vocab_size(str(path), tokenization.load_vocab(str(path)), 5, "c")
  assert "has 3 entries but vocab_size=5 in c" in str(info.value)


def test_load_vocab_missing_file(tmp_path):
  path = str(tmp_path / "nope" / "vocab.txt")
  with pytest.raises(InputError) as info:
    tokenization.load_vocab(path)
  assert path in str(info.value)
  with pytest.raises(InputError) as info:
    tokenization.FullTokenizer(path)
  assert path in str(info.value)
  assert "\n" not in str(info.value)


def test_load_vocab_empty_file(tmp_path):
  path = tmp_path / "empty.txt"
  path.write_text("", encoding="utf-8")
  with pytest.raises(InputError, match="empty") as info:
    tokenization.load_vocab(str(path))
  assert str(path) in str(info.value)
  path.write_text("\n \n", encoding="utf-8")
  with pytest.raises(InputError, match="empty"):
    tokenization.load_vocab(str(path))


def test_load_vocab_not_utf8(tmp_path):
  path = tmp_path / "latin1.txt"
  path.write_bytes("[UNK]\ncaf\u00e9\n".encode("latin-1"))
  with pytest.raises(InputError, match="utf-8"):
    tokenization.load_vocab(str(path))


def test_full_tokenizer_requires_unk(tmp_path):
  path = _write_vocab(tmp_path, ["[CLS]", "[SEP]", "hello"])
  with pytest.raises(InputError, match=r"\[UNK\]") as info:
    tokenization.FullTokenizer(path)
  assert path in str(info.value)


def test_full_tokenizer_requires_some_vocab():
  with pytest.raises(InputError):
    tokenization.FullTokenizer(None)


def test_convert_helpers():
  vocab = {"[UNK]": 0, "a": 1, "b": 2}
  inv = {v: k for k, v in vocab.items()}
  assert tokenization.convert_tokens_to_ids(vocab, ["b", "a", "zz"]) == [2, 1,
                                                                         0]
  assert tokenization.convert_ids_to_tokens(inv, [2, 1, 0]) == ["b", "a",
                                                                "[UNK]"]
  assert tokenization.convert_by_vocab(vocab, []) == []
  with pytest.raises(KeyError):
    tokenization.convert_by_vocab({"a": 1}, ["b"])


def test_text_helpers():
  assert tokenization.convert_to_unicode("北京") == "北京"
  assert tokenization.convert_to_unicode("北京".encode("utf-8")) == "北京"
  assert tokenization.convert_to_unicode(b"a\xffb") == "ab"
  assert tokenization.printable_text(b"caf\xc3\xa9") == "café"
  with pytest.raises(ValueError):
    tokenization.convert_to_unicode(3)
  assert tokenization.whitespace_tokenize("  a\tb \n c  ") == ["a", "b", "c"]
  assert tokenization.whitespace_tokenize(" \n ") == []


def test_character_classes():
  # pylint: disable=protected-access
  assert tokenization._is_whitespace(" ")
  assert tokenization._is_whitespace("\t")
  assert tokenization._is_whitespace("\u00A0")
  assert not tokenization._is_whitespace("A")
  assert not tokenization._is_whitespace("-")
  assert tokenization._is_control("\u0005")
  assert tokenization._is_control("\u200b")
  assert not tokenization._is_control("A")
  assert not tokenization._is_control(" ")
  assert not tokenization._is_control("\t")
  assert not tokenization._is_control("\r")
  assert tokenization._is_punctuation("-")
  assert tokenization._is_punctuation("$")
  assert tokenization._is_punctuation("`")
  assert tokenization._is_punctuation(".")
  assert tokenization._is_punctuation("。")
  assert not tokenization._is_punctuation("A")
  assert not tokenization._is_punctuation(" ")


def test_module_does_not_import_tensorflow():
  root = os.path.join(os.path.dirname(__file__), "..")
  code = ("import sys, tokenization; "
          "sys.exit(1 if 'tensorflow' in sys.modules else 0)")
  assert subprocess.call([sys.executable, "-c", code], cwd=root) == 0


# ----------------------------------------------------------------------------
# validate_case_matches_checkpoint.
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("do_lower_case,checkpoint", [
    (False, "uncased_L-12_H-768_A-12/bert_model.ckpt"),
    (False, "/models/chinese_L-12_H-768_A-12/bert_model.ckpt"),
    (False, "gs://b/multilingual_L-12_H-768_A-12/bert_model.ckpt-1000"),
    (True, "cased_L-12_H-768_A-12/bert_model.ckpt"),
    (True, "/x/multi_cased_L-12_H-768_A-12/bert_model.ckpt"),
])
def test_validate_case_mismatch_raises(do_lower_case, checkpoint):
  with pytest.raises(InputError) as info:
    tokenization.validate_case_matches_checkpoint(do_lower_case, checkpoint)
  assert isinstance(info.value, ValueError)
  assert checkpoint in str(info.value)
  assert "\n" not in str(info.value)


@pytest.mark.parametrize("do_lower_case,checkpoint", [
    (True, "uncased_L-12_H-768_A-12/bert_model.ckpt"),
    (True, "/models/chinese_L-12_H-768_A-12/bert_model.ckpt"),
    (False, "cased_L-24_H-1024_A-16/bert_model.ckpt"),
    (False, "my_finetuned_model/bert_model.ckpt"),
    (True, "my_finetuned_model/bert_model.ckpt"),
    (False, "/tmp/output/model.ckpt-500"),
    (False, ""),
    (True, None),
])
def test_validate_case_ok(do_lower_case, checkpoint):
  tokenization.validate_case_matches_checkpoint(do_lower_case, checkpoint)


# ----------------------------------------------------------------------------
# SentencePiece.
# ----------------------------------------------------------------------------


def _train_spm(directory, name, user_defined_symbols):
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  corpus = directory / ("%s.txt" % name)
  words = ("the a my our this that cat dog friend teacher neighbour student "
           "old young man woman small big bird fish reads likes sees finds "
           "wants brings makes writes quickly slowly book ball water apple "
           "garden flowers long short letter red blue green car house river "
           "mountain today every morning at night on sunday again because "
           "when while after before during playing running jumping swimming "
           "walking talking thinking beautiful wonderful terrible quiet loud "
           "and or but with without under over between among through").split()
  rng = random.Random(1234)
  lines = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) + "."
           for _ in range(300)]
  corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
  prefix = str(directory / name)
  kwargs = dict(input=str(corpus), model_prefix=prefix, vocab_size=100,
                model_type="unigram", num_threads=1, minloglevel=2,
                character_coverage=1.0)
  if user_defined_symbols:
    kwargs["user_defined_symbols"] = user_defined_symbols
  spm.SentencePieceTrainer.train(**kwargs)
  return prefix + ".model"


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
  return _train_spm(tmp_path_factory.mktemp("spm"), "bert_spm",
                    ["[CLS]", "[SEP]", "[MASK]", "[PAD]"])


def test_sentencepiece_tokenizer(spm_model):
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  sp = spm.SentencePieceProcessor(model_file=spm_model)
  tokenizer = tokenization.FullTokenizer(
      vocab_file=None, do_lower_case=True, spm_model_file=spm_model)

  assert len(tokenizer.vocab) == sp.get_piece_size() == 100
  for piece in ["[CLS]", "[SEP]", "[MASK]", "[PAD]"]:
    assert tokenizer.vocab[piece] == sp.piece_to_id(piece)
    assert tokenizer.inv_vocab[tokenizer.vocab[piece]] == piece
  # User-defined symbols follow <unk>, <s>, </s>.
  assert [tokenizer.vocab[p] for p in ["[CLS]", "[SEP]", "[MASK]"]] == [3, 4, 5]

  text = "The Teacher reads a long letter every Morning."
  tokens = tokenizer.tokenize(text)
  assert tokens == sp.encode(text.lower(), out_type=str)
  assert len(tokens) > 1
  assert "".join(tokens).replace("\u2581", " ").strip() == text.lower()
  ids = tokenizer.convert_tokens_to_ids(tokens)
  assert ids == sp.encode(text.lower())
  assert tokenizer.convert_ids_to_tokens(ids) == tokens
  assert sp.decode(ids) == text.lower()


def test_sentencepiece_case_and_special_symbols(spm_model):
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  sp = spm.SentencePieceProcessor(model_file=spm_model)
  cased = tokenization.FullTokenizer(None, do_lower_case=False,
                                     spm_model_file=spm_model)
  assert cased.tokenize("The cat") == sp.encode("The cat", out_type=str)
  lower = tokenization.FullTokenizer(None, do_lower_case=True,
                                     spm_model_file=spm_model)
  assert lower.tokenize("Every Morning") == sp.encode("every morning",
                                                      out_type=str)
  assert cased.tokenize("Every Morning") != lower.tokenize("Every Morning")
  # With do_lower_case=False a user-defined symbol in the text stays whole.
  assert "[MASK]" in cased.tokenize("the [MASK] reads")
  # Unknown pieces map to the model's unk id.
  assert cased.convert_tokens_to_ids(["no-such-piece"]) == [sp.unk_id()]


def test_sentencepiece_missing_model(tmp_path):
  path = str(tmp_path / "missing.model")
  with pytest.raises(InputError) as info:
    tokenization.FullTokenizer(None, spm_model_file=path)
  assert path in str(info.value)


def test_sentencepiece_corrupt_model(tmp_path):
  path = tmp_path / "bad.model"
  path.write_bytes(b"this is not a sentencepiece model")
  with pytest.raises(InputError) as info:
    tokenization.FullTokenizer(None, spm_model_file=str(path))
  assert str(path) in str(info.value)
  assert "\n" not in str(info.value)


def test_sentencepiece_model_without_mask(tmp_path):
  path = _train_spm(tmp_path, "no_mask", ["[CLS]", "[SEP]"])
  with pytest.raises(InputError, match=r"\[MASK\]") as info:
    tokenization.FullTokenizer(None, spm_model_file=path)
  assert path in str(info.value)
