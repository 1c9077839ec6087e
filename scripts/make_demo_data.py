"""Writes a small generated Chinese sentiment task and a tiny BERT config for the demo.

  python scripts/make_demo_data.py --output_dir demo_output/data

train.tsv / dev.tsv hold `text<TAB>label` (positive/negative); test.tsv holds `qid<TAB>text_a`
with a header and no labels, like a real prediction job. A review's label follows from its
sentiment words (the majority of its clauses), so a small BERT learns it in a few hundred
steps, though not trivially.
"""

import argparse
import json
import os
import random

POSITIVE = ["很好", "满意", "喜欢", "干净", "方便", "推荐", "舒服", "漂亮", "实惠", "热情"]
NEGATIVE = ["很差", "失望", "讨厌", "脏乱", "麻烦", "后悔", "吵闹", "难看", "太贵", "冷淡"]
TOPICS = ["酒店", "房间", "服务", "早餐", "电脑", "键盘", "屏幕", "快递", "价格", "位置"]
FILLER = ["这个", "真的", "感觉", "我们", "还是", "有点", "非常", "总体", "这次", "以后"]


def make_review(rng, label):
  """A short review mixing both sentiments; `label` is the majority (2 of 3 or 3 of 4 clauses)."""
  agree = POSITIVE if label == "positive" else NEGATIVE
  disagree = NEGATIVE if label == "positive" else POSITIVE
  n_agree = rng.choice([2, 3])
  clauses = [rng.choice(agree) for _ in range(n_agree)] + [rng.choice(disagree)]
  rng.shuffle(clauses)
  return "，".join(rng.choice(TOPICS) + rng.choice(FILLER) + w for w in clauses) + "。"


def write_rows(path, rows):
  with open(path, "w", encoding="utf-8") as f:
    for row in rows:
      f.write("\t".join(row) + "\n")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--num_train", type=int, default=1200)
  parser.add_argument("--num_dev", type=int, default=203)
  parser.add_argument("--num_test", type=int, default=101)
  parser.add_argument("--vocab_size", type=int, default=21128)
  parser.add_argument("--seed", type=int, default=7)
  args = parser.parse_args()
  rng = random.Random(args.seed)
  os.makedirs(args.output_dir, exist_ok=True)

  def labeled(n):
    rows = []
    for _ in range(n):
      label = rng.choice(["positive", "negative"])
      rows.append([make_review(rng, label), label])
    return rows

  write_rows(os.path.join(args.output_dir, "train.tsv"), labeled(args.num_train))
  write_rows(os.path.join(args.output_dir, "dev.tsv"), labeled(args.num_dev))
  test = [["qid", "text_a"]] + [[str(i), text] for i, (text, _) in
                                enumerate(labeled(args.num_test))]
  write_rows(os.path.join(args.output_dir, "test.tsv"), test)

  config = {"vocab_size": args.vocab_size, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 128, "hidden_act": "gelu",
            "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
            "max_position_embeddings": 128, "type_vocab_size": 2, "initializer_range": 0.02}
  with open(os.path.join(args.output_dir, "bert_config.json"), "w") as f:
    json.dump(config, f, indent=2)
  print("wrote demo data to %s" % args.output_dir)


if __name__ == "__main__":
  main()
