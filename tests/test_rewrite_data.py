"""rewrite_data: TSV reading and its errors, packing, detokenization, pretraining pairs."""

import os
import random

import pytest

from core.errors import InputError
from rewrite import data as rewrite_data
import tokenization

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "今", "天", "好", "new", "york",
         "##er", "3", ".", "5", "，"]


@pytest.fixture
def tokenizer(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
  return tokenization.FullTokenizer(str(path), do_lower_case=True)


def _write(tmp_path, name, text):
  path = os.path.join(str(tmp_path), name)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return path


def test_read_rewrite_tsv_column_orders_and_test_rows(tmp_path):
  path = _write(tmp_path, "a.tsv", "s1\tt1\ns2\tt2\n")
  assert [(r.line_number, r.source, r.target) for r in rewrite_data.read_rewrite_tsv(path)] == [
      (1, "s1", "t1"), (2, "s2", "t2")]
  swapped = rewrite_data.read_rewrite_tsv(path, "target_source")
  assert [(r.source, r.target) for r in swapped] == [("t1", "s1"), ("t2", "s2")]
  test = _write(tmp_path, "test.tsv", "only source\nsrc\n")
  rows = rewrite_data.read_rewrite_tsv(test, need_target=False)
  assert [(r.source, r.target) for r in rows] == [("only source", None), ("src", None)]
  rows = rewrite_data.read_rewrite_tsv(path, need_target=False)
  assert [(r.source, r.target) for r in rows] == [("s1", "t1"), ("s2", "t2")]
  # A tab inside one test source would cut it and read its end as a target: refused.
  test = _write(tmp_path, "test.tsv", "only source\nsrc\ttail of the source\n")
  with pytest.raises(InputError, match=r"test.tsv:2: 2 tab-separated column\(s\), but line 1 "
                     r"has 1; a tab inside a text"):
    rewrite_data.read_rewrite_tsv(test, need_target=False)


@pytest.mark.parametrize("text, line, what", [
    ("a\tb\nno target here\n", 2, "expected source<TAB>target"),
    ("a\tb\nx\ty\tz\n", 2, "got 3"),
    ("a\tb\n\nc\td\n", 2, "empty column"),
    ("a\t \n", 1, "empty column"),
])
def test_malformed_rows_name_file_and_line(tmp_path, text, line, what):
  path = _write(tmp_path, "train.tsv", text)
  with pytest.raises(InputError) as e:
    rewrite_data.read_rewrite_tsv(path)
  assert "%s:%d:" % (path, line) in str(e.value)
  assert what in str(e.value)


def test_read_rank_tsv(tmp_path):
  path = _write(tmp_path, "rank.tsv", "src\tc1\tc2\tc3\nsrc2\tonly\n")
  rows = rewrite_data.read_rank_tsv(path)
  assert [(r.source, r.target) for r in rows] == [("src", ["c1", "c2", "c3"]),
                                                  ("src2", ["only"])]
  bad = _write(tmp_path, "bad.tsv", "src\tc1\nlonely\n")
  with pytest.raises(InputError, match="bad.tsv:2:"):
    rewrite_data.read_rank_tsv(bad)


def test_encode_pair_layout_and_truncation(tokenizer):
  ids = dict(zip(VOCAB, range(len(VOCAB))))
  # max_seq_length 10, max_target_length 3 -> 4 source tokens.
  features, source_cut, target_cut = rewrite_data.encode_pair(
      tokenizer, ["今", "天", "好"], ["好", "今"], 10, 3)
  assert features["input_ids"] == [ids[t] for t in
                                   ["[CLS]", "今", "天", "好", "[SEP]", "好", "今", "[SEP]"]] + [0, 0]
  assert features["segment_ids"] == [0] * 5 + [1] * 3 + [0, 0]
  assert features["input_mask"] == [1] * 8 + [0, 0]
  assert (source_cut, target_cut) == (False, False)
  # A cut target loses its [SEP]; a long source keeps its head.
  features, source_cut, target_cut = rewrite_data.encode_pair(
      tokenizer, ["今"] * 6, ["天"] * 5, 10, 3)
  assert features["input_ids"] == [ids[t] for t in ["[CLS]"] + ["今"] * 4 + ["[SEP]"] +
                                   ["天"] * 3] + [0]
  assert (source_cut, target_cut) == (True, True)
  # Test rows: the source part only.
  features, _, _ = rewrite_data.encode_pair(tokenizer, ["今"], None, 10, 3)
  assert features["input_mask"] == [1, 1, 1] + [0] * 7
  with pytest.raises(InputError, match="max_target_length"):
    rewrite_data.source_budget(10, 7)


def test_write_pairs_counts_truncations(tokenizer, tmp_path, caplog):
  path = os.path.join(str(tmp_path), "x.tf_record")
  pairs = [(["今"] * 6, ["天"]), (["今"], ["天"] * 9), (["今"], ["天"])]
  with caplog.at_level("INFO"):
    n = rewrite_data.write_pairs(path, pairs, tokenizer, 10, 3, "train")
  assert n == 3 and os.path.exists(path)
  assert "1 sources truncated to 4 tokens, 1 targets truncated to 3 tokens" in caplog.text
  # 2 of the 8 source tokens and 6 of the 11 target tokens are cut: both above 10%, warned.
  warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
  assert [w.split(" (")[0] for w in warnings] == [
      "train sources: 2 of 8 tokens", "train targets: 6 of 11 tokens"], warnings
  assert "raise --max_seq_length" in warnings[0] and "--max_target_length=3" in warnings[1]
  caplog.clear()
  with caplog.at_level("INFO"):
    rewrite_data.write_pairs(path, pairs[2:], tokenizer, 10, 3, "dev")
  assert "dev sources" not in caplog.text and "dev targets" not in caplog.text


def test_detokenize():
  assert tokenization.detokenize(["今", "天", "，", "好"]) == "今天，好"
  assert tokenization.detokenize(["new", "york", "##er", "今"]) == "new yorker今"
  assert tokenization.detokenize(["3", ".", "5"]) == "3.5"
  assert tokenization.detokenize(["\u2581new", "\u2581york", "er"]) == "new yorker"
  assert tokenization.detokenize([]) == ""


def test_ids_to_text(tokenizer):
  ids = [tokenizer.vocab[t] for t in ["今", "天", "[SEP]", "好"]]
  assert rewrite_data.ids_to_text(tokenizer, ids + [0, 0], tokenizer.vocab["[SEP]"]) == "今天"
  assert rewrite_data.ids_to_text(tokenizer, ids[:2] + [0], tokenizer.vocab["[SEP]"]) == "今天"


def test_read_passages_respects_documents_and_length(tokenizer, tmp_path):
  path = _write(tmp_path, "c.txt", "今天\n好\n\n今今今今今\n天\n")
  passages = rewrite_data.read_passages([path], tokenizer, max_tokens=4)
  # Document 1: 3 tokens in one passage; document 2: 5 + 1 tokens split at 4.
  assert passages == [["今", "天", "好"], ["今", "今", "今", "今"], ["今", "天"]]


def test_make_pretraining_pairs():
  passage = ["t%d" % i for i in range(30)]
  pairs = rewrite_data.make_pretraining_pairs([passage] * 20, random.Random(3), 8, 5,
                                              ["continue", "span"])
  assert len(pairs) == 40
  for source, target in pairs:
    assert 1 <= len(source) <= 8 and target
    if "[MASK]" in source:
      assert 1 <= len(target) <= 5
      start = passage.index(target[0])
      assert passage[start:start + len(target)] == target
      i = source.index("[MASK]")
      # The tokens around the [MASK] are the passage's tokens around the span.
      assert source[:i] == passage[start - i:start]
      tail = source[i + 1:]
      assert tail == passage[start + len(target):start + len(target) + len(tail)]
    else:
      # Continuation: the source ends where the target starts.
      start = passage.index(target[0])
      assert passage[start - len(source):start] == source
      assert target == passage[start:]
