"""Text rewriting with BERT (UniLM-style seq2seq) on several GPUs.

Fine-tune, evaluate and predict (stock run_classifier.py flags + --n_gpus):

  export CUDA_VISIBLE_DEVICES=0,1
  python run_rewrite_finetune.py --data_dir=my_pairs --vocab_file=$BERT/vocab.txt \
    --bert_config_file=$BERT/bert_config.json --init_checkpoint=$BERT/bert_model.ckpt \
    --output_dir=out --do_train --do_eval --do_predict --n_gpus=2 \
    --max_seq_length=128 --max_target_length=32 --beam_size=4

--data_dir holds train.tsv, dev.tsv and test.tsv with rows `source<TAB>target`
(`--column_order=target_source` for files such as LCSTS's `summary<TAB>content`); test rows may
hold the source alone. The model is rewrite/model.py (one BERT, UniLM seq2seq attention mask,
stock MLM head); decoding is rewrite/decoding.py (in-graph greedy/beam search with a key/value
cache).

Outputs in --output_dir: checkpoints (a re-run resumes from the latest), TensorBoard summaries,
cached TFRecords, eval_results.txt (character-level bleu4, rouge_l_f, exact_match in percent,
plus eval_loss, the mean negative log-likelihood per target token under teacher forcing),
eval_predictions.tsv (source, reference, rewrite of each dev row), predict.txt (one rewrite per
test row, input order) and, with --do_rank, rank.txt.

Ranking (--do_rank --rank_file=f): rows `source<TAB>candidate_1<TAB>...<TAB>candidate_k`; each
candidate is scored by its mean log-probability per target token (its [SEP] included) and
rank.txt gets, per row, `candidate<TAB>score` pairs best first.

Rewrite pretraining (--do_pretrain_rewrite --corpus_file=a.txt,b.txt): self-supervised pairs
from plain text (continue a passage cut at a random point; regenerate a [MASK]ed span), trained
like fine-tuning. The result is exported as a Google-style checkpoint with the model variables
only, output_dir/export/bert_model.ckpt (+ bert_config.json, vocab.txt); fine-tune from it with
--init_checkpoint=output_dir/export/bert_model.ckpt.
"""

from core.errors import InputError
from engine import tf_env  # pylint: disable=unused-import  (first: TensorFlow reads it on import)

import os
import random

from absl import flags
from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from engine import checkpoints
from engine import cli
from engine import common_flags
from engine import inference
from engine import input_data
from engine import predict_input
from engine import run_helpers
from engine import run_setup
from engine import training
from rewrite import data as rewrite_data
from rewrite import decoding as rewrite_decoding
from rewrite import metrics as rewrite_metrics
from rewrite import model as rewrite_model
from serving import saved_model_export

FLAGS = flags.FLAGS

common_flags.define_model_flags()
common_flags.define_mode_flags()
common_flags.define_training_flags(default_learning_rate=5e-5)
common_flags.define_tpu_flags_removed()
common_flags.define_epoch_flags()
common_flags.define_length_flags()
common_flags.define_periodic_eval_flags("bleu4", ", ".join(rewrite_metrics.EVAL_METRICS))
common_flags.define_predict_flags()
saved_model_export.define_flags()

flags.DEFINE_string("data_dir", None,
                    "Directory with train.tsv, dev.tsv and test.tsv: UTF-8 rows "
                    "source<TAB>target (test rows may hold the source alone), no header.")
flags.DEFINE_enum("column_order", "source_target", list(rewrite_data.COLUMN_ORDERS),
                  "Which column holds the source: source_target (source<TAB>target) or "
                  "target_source (target<TAB>source, e.g. LCSTS's summary<TAB>content).")
flags.DEFINE_integer("max_target_length", 32,
                     "Longest target in WordPiece tokens (without the closing [SEP]); longer "
                     "training targets are cut, and decoding stops there. The source gets the "
                     "rest: max_seq_length - max_target_length - 3 tokens (longer sources are "
                     "truncated, keeping their head; the count is logged).")
flags.DEFINE_integer("min_target_length", 1,
                     "Shortest rewrite, in tokens, that decoding may produce (1: never empty).")
flags.DEFINE_integer("beam_size", 4, "Beam width for --do_eval/--do_predict; 1 = greedy search.")
flags.DEFINE_float("length_penalty", 1.0,
                   "Beam search ranks finished hypotheses by log P / ((5 + length) / 6) ** "
                   "length_penalty (GNMT); 0 = total log-probability (favours short outputs), "
                   "larger values favour longer ones.")
flags.DEFINE_integer("no_repeat_ngram_size", 0,
                     "If > 0, never generate an n-gram of this size twice in one output.")
flags.DEFINE_bool("do_rank", False,
                  "Score and sort the candidates of --rank_file; writes rank.txt.")
flags.DEFINE_string("rank_file", None,
                    "Ranking input: rows source<TAB>candidate_1<TAB>...<TAB>candidate_k.")
flags.DEFINE_bool("do_pretrain_rewrite", False,
                  "Rewrite pretraining on --corpus_file (self-supervised pairs from plain "
                  "text), then export output_dir/export/bert_model.ckpt for fine-tuning.")
flags.DEFINE_string("corpus_file", None,
                    "Plain-text corpus for --do_pretrain_rewrite: comma-separated files or glob "
                    "patterns; one paragraph per line, a blank line ends a document.")
flags.DEFINE_list("pretrain_tasks", list(rewrite_data.PRETRAIN_TASKS),
                  "Pair types for --do_pretrain_rewrite: continue (predict the text after a "
                  "random cut) and/or span (regenerate a span replaced by [MASK]).")
flags.DEFINE_integer("pretrain_dupe_factor", 2,
                     "Passes over the corpus with different random cuts and spans.")

# --column_order decides which way the model rewrites: a model, not a data, flag.
common_flags.declare_flag_effects(common_flags.MODEL, "max_target_length", "pretrain_tasks",
                                  "column_order")
common_flags.declare_flag_effects(common_flags.DATA, "data_dir", "corpus_file", "rank_file",
                                  "pretrain_dupe_factor")
common_flags.declare_flag_effects(common_flags.OTHER, "min_target_length", "beam_size",
                                  "length_penalty", "no_repeat_ngram_size", "do_rank",
                                  "do_pretrain_rewrite")

# Packing uses [CLS] and [SEP]; span pretraining and decoding's stop token need [MASK] and [SEP].
SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[MASK]")


def make_input_fn(record_file, is_training):
  """input_fn(rows, seed, shard) over packed rewrite records (length-aware batches)."""
  return run_helpers.record_input_fn(
      record_file, rewrite_data.name_to_features(FLAGS.max_seq_length), is_training)


class Rewriter(object):
  """The model config, tokenizer and record caching of one run."""

  def __init__(self, setup):
    rewrite_data.source_budget(FLAGS.max_seq_length, FLAGS.max_target_length)
    self.setup = setup
    self.bert_config, self.tokenizer, self.tokenizer_digest = (
        run_helpers.load_config_and_tokenizer(setup, special_tokens=SPECIAL_TOKENS))
    if self.bert_config.type_vocab_size < 2:
      raise InputError(
          "type_vocab_size=%d in %s: the rewriter puts the target in segment 1, for which the "
          "model has no embedding; use a config with type_vocab_size >= 2" %
          (self.bert_config.type_vocab_size, FLAGS.bert_config_file))

  def records(self, split, source_file, rows, with_targets=True, extra_key=()):
    """Cached TFRecords of TSV rows; the key covers the file's bytes and every option.

    The rows of --predict_file (a one-off file, or stdin) go to a scratch directory instead.
    """
    one_off = split == "test" and FLAGS.predict_file
    key = (input_data.file_digest(source_file) if not one_off else repr(rows),
           self.tokenizer_digest, FLAGS.column_order, with_targets) + tuple(extra_key)
    return rewrite_data.cached_records(
        predict_input.scratch_dir() if one_off else self.setup.output_dir, split, key,
        lambda: rewrite_data.tokenize_rows(self.tokenizer, rows, with_targets), self.tokenizer,
        FLAGS.max_seq_length, FLAGS.max_target_length)

  def train(self, record_file, num_examples, periodic_eval=None):
    """Trains on packed records with training.train (towers, checkpoints, resume; evaluation
    during training with a periodic_eval.PeriodicEval)."""
    num_train_steps, num_warmup_steps = run_helpers.epoch_schedule(
        num_examples, self.setup.global_batch_size)
    return training.train(
        rewrite_model.make_train_tower_fn(self.bert_config, FLAGS.max_target_length),
        make_input_fn(record_file, True),
        run_helpers.train_spec(self.setup, num_train_steps, num_warmup_steps,
                               num_examples=num_examples), periodic_eval)

  def decode(self, record_file, checkpoint, batch_size_per_tower):
    """Rewrites of every record (input order) as detokenized strings."""
    params = rewrite_decoding.decode_params_from_vocab(
        self.tokenizer.vocab, FLAGS.max_target_length, FLAGS.min_target_length,
        FLAGS.beam_size, FLAGS.length_penalty, FLAGS.no_repeat_ngram_size)
    outputs = inference.run_inference(
        rewrite_decoding.make_decode_tower_fn(self.bert_config, params),
        make_input_fn(record_file, False), checkpoint, self.setup.inference_parallel(),
        batch_size_per_tower)
    return [rewrite_data.ids_to_text(self.tokenizer, ids, params.sep_id)
            for ids in outputs["output_ids"]]

  def score(self, record_file, checkpoint, batch_size_per_tower):
    """(log-likelihood, number of target tokens) of every record's target, input order."""
    outputs = inference.run_inference(
        rewrite_model.make_score_tower_fn(self.bert_config, FLAGS.max_target_length),
        make_input_fn(record_file, False), checkpoint, self.setup.inference_parallel(),
        batch_size_per_tower)
    return outputs["log_likelihood"], outputs["num_tokens"]


def _check_count(outputs, rows, what):
  if len(outputs) != len(rows):
    raise RuntimeError("%s: got %d outputs for %d rows" % (what, len(outputs), len(rows)))


def _data_file(name):
  if not FLAGS.data_dir or not os.path.isdir(FLAGS.data_dir):
    raise InputError("--data_dir=%s: no such directory" % FLAGS.data_dir)
  return os.path.join(FLAGS.data_dir, name)


def read_inputs():
  """Reads every file the run's modes need (dict name -> (path, rows)), before any training."""
  inputs = {}
  if FLAGS.do_train:
    path = _data_file("train.tsv")
    inputs["train"] = (path, rewrite_data.read_rewrite_tsv(path, FLAGS.column_order))
  if common_flags.reads_dev_set():
    path = _data_file("dev.tsv")
    inputs["dev"] = (path, rewrite_data.read_rewrite_tsv(path, FLAGS.column_order))
  read_test = lambda path: rewrite_data.read_rewrite_tsv(path, FLAGS.column_order,
                                                         need_target=False)
  if FLAGS.predict_file:
    inputs["test"] = (FLAGS.predict_file, predict_input.read(
        FLAGS.predict_file, FLAGS.predict_format, read_test,
        lambda line_number, text: rewrite_data.RewriteRow(line_number, text, None)))
  elif FLAGS.do_predict:
    path = _data_file("test.tsv")
    inputs["test"] = (path, read_test(path))
  if FLAGS.do_rank:
    path = cli.require_file(FLAGS.rank_file, "rank_file")
    inputs["rank"] = (path, rewrite_data.read_rank_tsv(path))
  if FLAGS.do_pretrain_rewrite:
    if not FLAGS.corpus_file:
      raise InputError("--corpus_file is required with --do_pretrain_rewrite")
    inputs["corpus"] = (cli.expand_files(FLAGS.corpus_file, "corpus_file"), None)
  return inputs


def dev_scores(rewriter, checkpoint, path, rows):
  """(metrics dict, rewrites) of `checkpoint` on dev.tsv: rewrite_metrics.EVAL_METRICS,
  global_step and beam_size."""
  record_file = rewriter.records("dev", path, rows)
  rewrites = rewriter.decode(record_file, checkpoint, FLAGS.eval_batch_size)
  _check_count(rewrites, rows, path)
  results = rewrite_metrics.rewrite_scores(rewrites, [row.target for row in rows])
  log_likelihood, num_tokens = rewriter.score(record_file, checkpoint, FLAGS.eval_batch_size)
  results["eval_loss"] = float(-np.sum(log_likelihood) / max(np.sum(num_tokens), 1.0))
  step = checkpoints.checkpoint_step(checkpoint, missing=None)
  if step is not None:  # Google's releases hold none.
    results["global_step"] = step
  results["beam_size"] = FLAGS.beam_size
  return results, rewrites


def evaluate(rewriter, checkpoint, rows, scores):
  """Writes eval_results.txt and eval_predictions.tsv of dev.tsv's `rows` from
  `scores`(checkpoint) (dev_scores)."""
  results, rewrites = scores(checkpoint)
  output_dir = rewriter.setup.output_dir
  run_helpers.write_results(
      os.path.join(output_dir, "eval_results.txt"), results,
      beside=[(os.path.join(output_dir, "eval_predictions.tsv"),
               ["%s\t%s\t%s" % (row.source, row.target, rewrite)
                for row, rewrite in zip(rows, rewrites)])])
  return results


def predict(rewriter, checkpoint, path, rows):
  """Decodes test.tsv (or --predict_file) into predict.txt (or --predict_output), one line per
  row."""
  record_file = rewriter.records("test", path, rows, with_targets=False)
  rewrites = rewriter.decode(record_file, checkpoint, FLAGS.predict_batch_size)
  _check_count(rewrites, rows, path)
  predict_input.write_lines(run_helpers.predict_output(rewriter.setup), rewrites,
                            run_helpers.predict_output_flag())


def rank(rewriter, checkpoint, path, rows):
  """Scores every candidate of --rank_file and writes rank.txt, candidates best first."""
  pairs = [rewrite_data.RewriteRow(row.line_number, row.source, candidate)
           for row in rows for candidate in row.target]
  record_file = rewriter.records("rank", path, pairs)
  log_likelihood, num_tokens = rewriter.score(record_file, checkpoint, FLAGS.predict_batch_size)
  _check_count(log_likelihood, pairs, path)
  scores = log_likelihood / np.maximum(num_tokens, 1.0)
  lines, start = [], 0
  for row in rows:
    scored = list(zip(row.target, scores[start:start + len(row.target)]))
    start += len(row.target)
    scored.sort(key=lambda pair: -pair[1])
    lines.append("\t".join("%s\t%.4f" % (candidate, score) for candidate, score in scored))
  predict_input.write_lines(os.path.join(rewriter.setup.output_dir, "rank.txt"), lines)


def pretrain_rewrite(rewriter, files):
  """Rewrite pretraining on the --corpus_file files (export_pretrained exports it)."""
  tasks = [t.strip() for t in FLAGS.pretrain_tasks]
  unknown = sorted(set(tasks) - set(rewrite_data.PRETRAIN_TASKS))
  if unknown or not tasks:
    raise InputError("--pretrain_tasks=%s: expected some of %s" %
                     (",".join(FLAGS.pretrain_tasks), ",".join(rewrite_data.PRETRAIN_TASKS)))
  budget = rewrite_data.source_budget(FLAGS.max_seq_length, FLAGS.max_target_length)

  def make_pairs():
    passages = rewrite_data.read_passages(files, rewriter.tokenizer, FLAGS.max_seq_length - 3)
    logging.info("Rewrite pretraining: %d passages from %d file(s)", len(passages), len(files))
    rng = random.Random(FLAGS.random_seed)
    pairs = []
    for _ in range(cli.require_positive(FLAGS.pretrain_dupe_factor, "pretrain_dupe_factor")):
      pairs += rewrite_data.make_pretraining_pairs(passages, rng, budget,
                                                   FLAGS.max_target_length, tasks)
    return pairs

  key = tuple(input_data.file_digest(f) for f in files) + (
      rewriter.tokenizer_digest, tuple(tasks), FLAGS.pretrain_dupe_factor, FLAGS.random_seed)
  record_file = rewrite_data.cached_records(
      rewriter.setup.output_dir, "pretrain", key, make_pairs, rewriter.tokenizer,
      FLAGS.max_seq_length, FLAGS.max_target_length, targets_cut_by_design=True)
  num_examples = sum(1 for _ in tf.io.tf_record_iterator(record_file))
  rewriter.train(record_file, num_examples)


def export_pretrained(rewriter):
  """export/ after rewrite pretraining: the model variables only, the config and the
  vocabulary, to fine-tune from."""
  checkpoints.export_model(rewriter.setup.output_dir, rewriter.bert_config, FLAGS.vocab_file,
                           FLAGS.spm_model_file)


def trains():
  """Whether the run writes checkpoints: --do_train or --do_pretrain_rewrite."""
  return FLAGS.do_train or FLAGS.do_pretrain_rewrite


def check_modes():
  """At least one mode, the modes that exclude each other, --beam_size (InputError)."""
  if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict or FLAGS.predict_file or
          FLAGS.do_rank or FLAGS.do_pretrain_rewrite or FLAGS.do_export):
    raise InputError("at least one of --do_train, --do_eval, --do_predict (or "
                     "--predict_file), --do_rank, --do_pretrain_rewrite or --do_export "
                     "must be set")
  if FLAGS.do_pretrain_rewrite and FLAGS.do_train:
    raise InputError("--do_pretrain_rewrite and --do_train write checkpoints to the same "
                     "--output_dir: pretrain first, then fine-tune in another output_dir "
                     "with --init_checkpoint=<pretrain output_dir>/export/bert_model.ckpt")
  cli.require_positive(FLAGS.beam_size, "beam_size")


def read_data(setup):
  """(Rewriter, read_inputs()): every input the run needs, read before training, so a bad
  dev, test or rank row, or a run that does not match the model already in --output_dir,
  stops it in seconds."""
  common_flags.check_periodic_eval_flags()
  common_flags.check_best_metric(rewrite_metrics.EVAL_METRICS)
  rewriter = Rewriter(setup)
  inputs = read_inputs()
  run_helpers.check_run_info(setup, run_helpers.run_identity(
      rewriter.bert_config, rewriter.tokenizer_digest, input_flags=("max_target_length",)),
                             will_train=trains())
  return rewriter, inputs


def train(rewriter, inputs, scores):
  """Fine-tunes on train.tsv, evaluating on dev.tsv (`scores`: dev_scores) during training with
  --eval_every_n_steps."""
  path, rows = inputs["train"]
  rewriter.train(rewriter.records("train", path, rows), len(rows), run_helpers.periodic_eval(
      rewriter.setup, lambda checkpoint: scores(checkpoint)[0]))


def main(_):
  """Check, data, train (or rewrite pretraining and its export/), evaluate, predict, rank,
  export; each process does its part."""
  setup = run_setup.start(check_modes, trains=trains())
  if setup is None:  # It served the chief's graph, or has no part in this run.
    return
  rewriter, inputs = read_data(setup)
  # The final --do_eval reuses the evaluation of the same checkpoint made during training.
  scores = run_helpers.reuse_last_evaluation(
      lambda checkpoint: dev_scores(rewriter, checkpoint, *inputs["dev"]))
  if FLAGS.do_pretrain_rewrite:
    pretrain_rewrite(rewriter, inputs["corpus"][0])
  if FLAGS.do_train:
    train(rewriter, inputs, scores)
  if not setup.is_chief:  # The chief exports, evaluates, predicts and ranks.
    return
  if FLAGS.do_pretrain_rewrite:
    export_pretrained(rewriter)
  if FLAGS.do_eval or FLAGS.do_predict or FLAGS.predict_file or FLAGS.do_rank:
    checkpoint = run_helpers.eval_checkpoint(setup)
    logging.info("Decoding with %s", checkpoint)
    if FLAGS.do_eval:  # As the classifier: --eval_every_n_steps alone evaluates in training only.
      evaluate(rewriter, checkpoint, inputs["dev"][1], scores)
    if "test" in inputs:
      predict(rewriter, checkpoint, *inputs["test"])
    if "rank" in inputs:
      rank(rewriter, checkpoint, *inputs["rank"])
  if FLAGS.do_export:
    saved_model_export.export_rewriter(
        setup.output_dir, run_helpers.model_files(setup), FLAGS.max_target_length,
        FLAGS.min_target_length, FLAGS.beam_size, FLAGS.length_penalty,
        FLAGS.no_repeat_ngram_size)


if __name__ == "__main__":
  tf.disable_v2_behavior()
  cli.run_main(main)
