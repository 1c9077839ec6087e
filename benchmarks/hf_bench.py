"""Training throughput of Hugging Face transformers (PyTorch) on a BERT config, for train_bench.py.

Trains BertForSequenceClassification (2 labels, dropout as in the config) with torch.optim.AdamW,
gradient clipping to norm 1.0, on one fixed random batch, in float32, eager mode with
transformers' default attention implementation, as a user of the library would. Prints one JSON
line: examples/sec (the mean of the faster half of --rounds x --steps steps, each timed on its
own, as train_bench.py does for TensorFlow) and the versions and thread settings used.

Usage: python benchmarks/hf_bench.py --config_json='{"hidden_size": 768, ...}' --seq=128 \
  --batch=8 --steps=3 --rounds=3 --warmup=2 --threads=2
"""

import argparse
import json
import time


def parse_args():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--config_json", required=True, help="BERT config as JSON (bert_config.json keys).")
  p.add_argument("--seq", type=int, default=128, help="Sequence length.")
  p.add_argument("--batch", type=int, default=8, help="Examples per step.")
  p.add_argument("--steps", type=int, default=3, help="Timed steps per round.")
  p.add_argument("--rounds", type=int, default=3,
                 help="Timed rounds; the mean of the faster half of all timed steps counts.")
  p.add_argument("--warmup", type=int, default=2, help="Untimed steps first.")
  p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (intra-op).")
  p.add_argument("--interop_threads", type=int, default=1, help="torch.set_num_interop_threads.")
  return p.parse_args()


def main():
  args = parse_args()
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  torch.set_num_threads(args.threads)
  torch.set_num_interop_threads(args.interop_threads)
  torch.manual_seed(0)
  bert = json.loads(args.config_json)
  config = transformers.BertConfig(
      vocab_size=bert["vocab_size"], hidden_size=bert["hidden_size"],
      num_hidden_layers=bert["num_hidden_layers"],
      num_attention_heads=bert["num_attention_heads"],
      intermediate_size=bert["intermediate_size"], hidden_act="gelu_new",  # BERT's tanh GELU
      hidden_dropout_prob=bert["hidden_dropout_prob"],
      attention_probs_dropout_prob=bert["attention_probs_dropout_prob"],
      max_position_embeddings=bert["max_position_embeddings"],
      type_vocab_size=bert["type_vocab_size"], num_labels=2)
  model = transformers.BertForSequenceClassification(config)
  model.train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, eps=1e-6)
  input_ids = torch.randint(1, config.vocab_size, (args.batch, args.seq))
  batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
           "token_type_ids": torch.zeros_like(input_ids),
           "labels": torch.randint(0, 2, (args.batch,))}

  def step():
    loss = model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

  for _ in range(args.warmup):
    step()
  seconds = []
  for _ in range(args.rounds * args.steps):
    start = time.time()
    step()
    seconds.append(time.time() - start)
  fast = sorted(seconds)[:(len(seconds) + 1) // 2]
  print(json.dumps({
      "examples_per_sec": len(fast) * args.batch / sum(fast),
      "torch": torch.__version__, "transformers": transformers.__version__,
      "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
      "attention": getattr(model.config, "_attn_implementation", "default")}))


if __name__ == "__main__":
  main()
