"""run_rewrite_finetune.py end to end (subprocess) on a synthetic rewrite rule.

The rule: map every character through a fixed permutation of a 12-character alphabet and
reverse the order ("甲乙丙" -> f(丙) f(乙) f(甲)). A tiny BERT learns it from 2,000 pairs; the
held-out rows must come out right at least 95% of the time. It learns on one tower (1000 steps
of 32 rows: 100% exact match on dev at --random_seed 12345, 1 and 2, 26 s of CPU; on 2 towers,
a global batch of 64, 39 s) and predicts from stdin on 2.
"""

import json
import os
import random

from script_runner import run_script

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CHARS = list("甲乙丙丁戊己庚辛壬癸子丑")
MAPPING = {c: CHARS[(i * 5 + 3) % len(CHARS)] for i, c in enumerate(CHARS)}
NUM_TEST = 37  # not a multiple of the predict batch (4)


def rewrite(source):
  return "".join(MAPPING[c] for c in reversed(source))


def _write_data(data_dir, num_hidden_layers=2):
  """train/dev/test TSVs, a vocabulary and a tiny bert_config.json; returns the test sources.

  The learning test's model has 2 encoder layers; tests that only run the script pass 1 (a
  smaller graph to build: less of the suite's time)."""
  os.makedirs(data_dir)
  with open(os.path.join(data_dir, "vocab.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + CHARS) + "\n")
  rng = random.Random(0)
  sources = {}
  for split, n in (("train", 2000), ("dev", 100), ("test", NUM_TEST)):
    sources[split] = ["".join(rng.choice(CHARS) for _ in range(rng.randint(2, 5)))
                      for _ in range(n)]
    with open(os.path.join(data_dir, split + ".tsv"), "w", encoding="utf-8") as f:
      for s in sources[split]:
        # Test rows carry the source only, as in a real test set.
        f.write(s + ("" if split == "test" else "\t" + rewrite(s)) + "\n")
  with open(os.path.join(data_dir, "bert_config.json"), "w") as f:
    json.dump({"vocab_size": 5 + len(CHARS), "hidden_size": 64,
               "num_hidden_layers": num_hidden_layers,
               "num_attention_heads": 4, "intermediate_size": 128,
               "max_position_embeddings": 16, "type_vocab_size": 2,
               "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}, f)
  return sources["test"]


def _run(args):
  return run_script("run_rewrite_finetune.py", *args)


def _common_flags(data_dir, output_dir):
  return ["--data_dir=" + data_dir, "--vocab_file=" + os.path.join(data_dir, "vocab.txt"),
          "--bert_config_file=" + os.path.join(data_dir, "bert_config.json"),
          "--output_dir=" + output_dir, "--max_seq_length=14", "--max_target_length=6"]


def _read_results(path):
  with open(path, encoding="utf-8") as f:
    return dict(line.strip().split(" = ") for line in f if " = " in line)


def test_learns_synthetic_rule_through_the_script(tmp_path):
  data_dir = os.path.join(str(tmp_path), "data")
  output_dir = os.path.join(str(tmp_path), "out")
  test_sources = _write_data(data_dir)
  rank_file = os.path.join(data_dir, "rank.tsv")
  rng = random.Random(1)
  with open(rank_file, "w", encoding="utf-8") as f:
    for s in test_sources[:10]:
      wrong = [s, rewrite(s)[::-1], "".join(rng.choice(CHARS) for _ in s)]
      f.write("\t".join([s] + wrong[:1] + [rewrite(s)] + wrong[1:]) + "\n")

  result = _run(_common_flags(data_dir, output_dir) + [
      "--do_train", "--do_eval", "--do_predict", "--do_rank", "--rank_file=" + rank_file,
      "--n_gpus=1", "--train_batch_size=32", "--learning_rate=2e-3", "--num_train_steps=1000",
      "--beam_size=2", "--eval_batch_size=16", "--predict_batch_size=4",
      "--log_every_n_steps=100", "--save_checkpoints_steps=10000",
      "--eval_every_n_steps=500", "--keep_best", "--best_metric=exact_match"])
  assert result.returncode == 0, result.stderr[-3000:]

  results = _read_results(os.path.join(output_dir, "eval_results.txt"))
  assert float(results["exact_match"]) >= 95.0, results
  assert int(results["global_step"]) == 1000
  # --do_eval reuses the evaluation of step 1000 made during training (no second decoding).
  assert "model.ckpt-1000: the one made during training" in result.stderr

  # Evaluation during training: the curve, and the best step's checkpoint kept apart.
  with open(os.path.join(output_dir, "eval_history.tsv"), encoding="utf-8") as f:
    history = [line.rstrip("\n").split("\t") for line in f]
  column = history[0].index("exact_match")
  curve = {int(row[0]): float(row[column]) for row in history[1:]}
  assert sorted(curve) == [500, 1000], history
  assert abs(curve[1000] - float(results["exact_match"])) < 1e-3 and curve[500] < curve[1000], curve
  best_step = max(sorted(curve), key=lambda step: curve[step])  # the first of equal bests
  best = _read_results(os.path.join(output_dir, "best_results.txt"))
  assert int(best["global_step"]) == best_step, (best, curve)
  assert os.path.exists(os.path.join(output_dir, "best", "model.ckpt-%d.index" % best_step))

  with open(os.path.join(output_dir, "predict.txt"), encoding="utf-8") as f:
    predictions = f.read().split("\n")
  assert predictions[-1] == "" and len(predictions) - 1 == NUM_TEST
  correct = sum(p == rewrite(s) for p, s in zip(predictions, test_sources))
  assert correct >= 0.95 * NUM_TEST, list(zip(test_sources, predictions))

  # --predict_file from stdin (plain text, an empty line too) to stdout, without --data_dir, on
  # 2 towers: the same rewrites as predict.txt's, in other batches.
  # --eval_every_n_steps without --do_eval evaluates during training only, as the classifier:
  # this run leaves the first run's eval_results.txt as it was.
  with open(os.path.join(output_dir, "eval_results.txt"), encoding="utf-8") as f:
    eval_results = f.read()
  flags = [f for f in _common_flags(data_dir, output_dir) if not f.startswith("--data_dir")]
  result = run_script("run_rewrite_finetune.py", *flags, "--beam_size=2", "--n_gpus=2",
                      "--predict_batch_size=3", "--predict_file=-", "--predict_output=-",
                      "--eval_every_n_steps=500", input="\n".join(test_sources[:5] + [""]) + "\n")
  assert result.returncode == 0, result.stderr[-3000:]
  assert "tower 1 -> /device:CPU:1" in result.stderr
  with open(os.path.join(output_dir, "eval_results.txt"), encoding="utf-8") as f:
    assert f.read() == eval_results
  lines = result.stdout.split("\n")
  assert len(lines) == 7 and lines[:5] == predictions[:5] and lines[6] == "", lines

  with open(os.path.join(output_dir, "rank.txt"), encoding="utf-8") as f:
    ranked = [line.rstrip("\n").split("\t") for line in f]
  assert len(ranked) == 10
  assert sum(row[0] == rewrite(s) for row, s in zip(ranked, test_sources)) >= 9
  for row in ranked:  # candidate, score pairs, best first
    scores = [float(x) for x in row[1::2]]
    assert len(row) == 8 and scores == sorted(scores, reverse=True)


def test_malformed_row_is_a_one_line_error(tmp_path):
  data_dir = os.path.join(str(tmp_path), "data")
  _write_data(data_dir)
  with open(os.path.join(data_dir, "train.tsv"), "a", encoding="utf-8") as f:
    f.write("甲乙\t乙\t丙\n")
  result = _run(_common_flags(data_dir, os.path.join(str(tmp_path), "out")) + ["--do_train"])
  assert result.returncode == 2
  assert "train.tsv:2001: expected source<TAB>target" in result.stderr
  assert "Traceback" not in result.stderr
