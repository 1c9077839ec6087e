"""Training throughput of Hugging Face transformers (PyTorch) on a BERT config, for train_bench.py.

Trains BertForSequenceClassification (2 labels, dropout as in the config) with torch.optim.AdamW,
gradient clipping to norm 1.0, on one fixed random batch, with transformers' default attention
implementation, as a user of the library would: in float32, or with --precision=bf16 under
torch.autocast("cpu", bfloat16) (PyTorch's mixed precision: matmuls in bfloat16, float32
weights and optimizer); eager, or with --compile through torch.compile.

Three ways to run it:
  * alone: prints one JSON line, examples/sec (the mean of the faster half of --rounds x
    --steps steps, each timed on its own, as train_bench.py does for TensorFlow) and the
    versions and thread settings used;
  * --interactive: prints a JSON line {"ready": true, ...versions} after the warm-up, then
    times one step per line "step" read from stdin and answers {"seconds": s} (train_bench.py
    interleaves these steps with its own runs' so both share the machine's conditions), until
    "quit" or the end of stdin;
  * --peak=fp32|bf16: prints {"peak_gflops": best GFLOP/s} of chains of square matmuls in that
    dtype (the probe of train_bench.measure_peak, on PyTorch's side).

Usage: python benchmarks/hf_bench.py --config_json='{"hidden_size": 768, ...}' --seq=128 \
  --batch=8 --steps=3 --rounds=3 --warmup=2 --threads=2 [--precision=bf16] [--compile]
"""

import argparse
import json
import sys
import time

CHAIN = 8  # matmuls of 1024^2 per timed call of the peak probe (as in train_bench.py)


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--config_json", default=None,
                 help="BERT config as JSON (bert_config.json keys); required but for --peak.")
  p.add_argument("--seq", type=int, default=128, help="Sequence length.")
  p.add_argument("--batch", type=int, default=8, help="Examples per step.")
  p.add_argument("--steps", type=int, default=3, help="Timed steps per round.")
  p.add_argument("--rounds", type=int, default=3,
                 help="Timed rounds; the mean of the faster half of all timed steps counts.")
  p.add_argument("--warmup", type=int, default=2, help="Untimed steps first.")
  p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (intra-op).")
  p.add_argument("--interop_threads", type=int, default=1, help="torch.set_num_interop_threads.")
  p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                 help="fp32, or bf16: autocast to bfloat16 on the CPU (float32 weights).")
  p.add_argument("--compile", action="store_true", help="torch.compile the model.")
  p.add_argument("--interactive", action="store_true",
                 help="Time one step per 'step' line on stdin (see the module docstring).")
  p.add_argument("--peak", choices=["fp32", "bf16"], default=None,
                 help="Only print the best GFLOP/s of square matmuls in this dtype.")
  args = p.parse_args(argv)
  if args.peak is None and args.config_json is None:
    p.error("--config_json is required (except with --peak)")
  return args


def matmul_peak(torch, dtype, sizes=(1024, 2048, 4096), repeats=4):
  """Best GFLOP/s of chains of size x size matmuls (c = c @ b) in `dtype`: CHAIN of them at
  1024, fewer for larger sizes (at least 1), as train_bench.chain_length."""
  best = 0.0
  for size in sizes:
    length = max(1, int(round(CHAIN * (1024.0 / size) ** 3)))
    a = torch.randn(size, size).to(dtype)
    b = (torch.randn(size, size) / size ** 0.5).to(dtype)  # keeps the chain's values bounded

    def chain():
      c = a
      for _ in range(length):
        c = torch.mm(c, b)
      return c

    chain()
    for _ in range(repeats):
      start = time.perf_counter()
      chain()
      best = max(best, length * 2.0 * size ** 3 / (time.perf_counter() - start) / 1e9)
  return best


def build_step(torch, transformers, args):
  """(step function, model) of one training step of BERT on a fixed batch."""
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
  forward = torch.compile(model) if args.compile else model
  input_ids = torch.randint(1, config.vocab_size, (args.batch, args.seq))
  batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
           "token_type_ids": torch.zeros_like(input_ids),
           "labels": torch.randint(0, 2, (args.batch,))}

  def step():
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
      loss = forward(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

  return step, model


def timed(step):
  start = time.perf_counter()
  step()
  return time.perf_counter() - start


def main(argv=None):
  args = parse_args(argv)
  import torch  # pylint: disable=g-import-not-at-top

  torch.set_num_threads(args.threads)
  torch.set_num_interop_threads(args.interop_threads)
  if args.peak:
    dtype = torch.bfloat16 if args.peak == "bf16" else torch.float32
    print(json.dumps({"peak_gflops": matmul_peak(torch, dtype), "torch": torch.__version__,
                      "threads": torch.get_num_threads()}))
    return
  import transformers  # pylint: disable=g-import-not-at-top

  torch.manual_seed(0)
  step, model = build_step(torch, transformers, args)
  for _ in range(args.warmup):
    step()
  about = {"torch": torch.__version__, "transformers": transformers.__version__,
           "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
           "attention": getattr(model.config, "_attn_implementation", "default"),
           "precision": args.precision, "compile": args.compile}
  if args.interactive:
    print(json.dumps(dict(about, ready=True)), flush=True)
    for line in sys.stdin:
      if line.strip() != "step":
        break
      print(json.dumps({"seconds": timed(step)}), flush=True)
    return
  seconds = [timed(step) for _ in range(args.rounds * args.steps)]
  fast = sorted(seconds)[:(len(seconds) + 1) // 2]
  print(json.dumps(dict(about, examples_per_sec=len(fast) * args.batch / sum(fast))))


if __name__ == "__main__":
  main()
