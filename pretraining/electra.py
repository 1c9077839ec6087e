"""run_pretraining_mgpu.py --objective=electra: the tower function, eval metrics and predict.txt.

The model is electra_model.Electra. ElectraObjective implements pretraining/objective.py's
Objective, as the masked LM (mlm.MaskedLmObjective) does: a tower_fn for training.train and
inference.run_inference, the eval_results.txt metrics, the predict.txt lines, and beyond the
defaults the generator restored from beside --init_checkpoint and exported to export/generator/.

It also says when the discriminator sits at the prior: it has learned only how often a token is
replaced (its loss is the binary entropy of the replaced share, it catches no replaced token),
while its 50x loss pulls every token's final-layer vector to one point. Such an encoder can
fine-tune worse than a random start; eval_results.txt, the log and export/WARNING.txt say so.
They say so too when it does worse than the prior (a loss above the prior's with no replaced
token caught: untrained, or pushed off by too high a learning rate; or an encoder that gives
every token the same vector).
"""

import os

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from core import atomic_files
from engine import checkpoints
from engine import training
from heads import pretraining as pretraining_model
from pretraining import electra_model
from pretraining import mlm
from pretraining import objective
import modeling

GENERATOR_EXPORT_DIR = os.path.join(checkpoints.EXPORT_DIR, "generator")
EXPORT_WARNING = checkpoints.EXPORT_WARNING  # written while the discriminator is not past the prior

# At the prior: the discriminator loss within PRIOR_LOSS_MARGIN (relative) of the binary entropy
# of the replaced share, and under PRIOR_RECALL of the replaced tokens caught.
PRIOR_LOSS_MARGIN = 0.03
PRIOR_RECALL = 0.05
# Collapsed: the spread of the final-layer token vectors (output_spread) below this; a random
# BERT gives about 0.8 (tests/test_electra_prior.py), ELECTRA at the prior about 0.005.
COLLAPSED_SPREAD = 0.1
# Dead: a spread below this, every token's vector the same (lr 50 gave 0.000); whatever the loss.
DEAD_SPREAD = 0.001
DIAGNOSTIC_EXAMPLES = 256  # how many training examples the check after training scores


class ElectraObjective(objective.Objective):
  """Replaced-token detection with a generator of `hidden_ratio` of the width."""

  name = "electra"
  diagnose_after_training = True  # run_pretraining_mgpu.py then calls check_trained
  diagnostic_examples = DIAGNOSTIC_EXAMPLES
  uses_nsp = False  # ELECTRA has no next-sentence task; records' NSP labels are ignored.
  # export/bert_model.ckpt: the discriminator, stock bert/ names (the classifier fine-tunes it
  # and ignores the rest), with its replaced-token head (convert_to_hf.py writes both as
  # transformers' ElectraForPreTraining).
  export_scopes = ("bert/", "discriminator_predictions/")

  def __init__(self, bert_config, hidden_ratio=electra_model.DEFAULT_GENERATOR_HIDDEN_RATIO,
               disc_weight=electra_model.DEFAULT_DISC_WEIGHT, eval_seed=0,
               sample_fn=None, generator_config=None):
    """Args:
      bert_config: the discriminator's BertConfig.
      hidden_ratio: generator width / discriminator width.
      generator_config: the generator's BertConfig (e.g. that of a converted google/electra-*
        generator, see companion_generator); None: electra_model.generator_config(bert_config,
        hidden_ratio).
      disc_weight: weight of the discriminator loss.
      eval_seed: int; evaluation samples with a stateless draw from it, so every eval of a
        checkpoint scores the same replacements (for a given batch size).
      sample_fn: None (sample from the generator), or callable(log_probs [N, V]) -> int32 [N]
        used in training and inference (e.g. electra_model.most_likely_tokens in tests).
    """
    super(ElectraObjective, self).__init__(bert_config)
    self.generator_config = generator_config or electra_model.generator_config(
        bert_config, hidden_ratio)
    self.disc_weight = float(disc_weight)
    self.eval_seed = int(eval_seed)
    self.sample_fn = sample_fn

  def run_identity(self):
    """What run_info.json records of the objective (a resume must not change it)."""
    return {"objective": self.name, "generator_config": self.generator_config.to_dict(),
            "disc_weight": self.disc_weight}

  def export_writes(self, output_dir):
    """The generator beside the discriminator's export/, as atomic_files' (path, write_fn)
    pairs for checkpoints.export_model: export/generator/ holds generator.ckpt (generator/...
    plus the shared bert/embeddings/...) and generator_config.json. export/ itself holds the
    discriminator: its stock bert/ names and discriminator_predictions/.
    """
    export_dir = os.path.join(output_dir, GENERATOR_EXPORT_DIR)
    checkpoint = checkpoints.latest_checkpoint(output_dir)
    return [(os.path.join(export_dir, "generator.ckpt"),
             lambda tmp: checkpoints.write_model_weights(
                 checkpoint, tmp, scopes=("generator/", "bert/embeddings/"))),
            (os.path.join(export_dir, "generator_config.json"),
             atomic_files.text_writer(self.generator_config.to_json_string()))]

  def tower_fn_builder(self, has_nsp, is_training):
    """tower_fn(features, global_batch) -> (loss, outputs); NSP labels are ignored.

    Training returns generator loss + disc_weight * discriminator loss, both normalised over
    the global batch (masked slots, real tokens). Inference returns, per example:
    masked_lm_log_prob / _predictions / _positions / _ids / _weights [rows, P] (the
    generator), and input_mask, original_ids, corrupted_ids, replaced (int32) and disc_prob
    (float32) [rows, L].
    """
    del has_nsp  # ELECTRA has no next-sentence task.
    sample_fn = self.sample_fn
    if sample_fn is None:
      seed = None if is_training else [self.eval_seed, 0]
      sample_fn = lambda log_probs: electra_model.sample_tokens(log_probs, seed)

    def tower_fn(features, global_batch):
      denominators = (None, None)
      if is_training:
        denominators = (global_batch.loss_denominator(pretraining_model.masked_token_count),
                        global_batch.loss_denominator(electra_model.real_token_count))
      model = electra_model.Electra(self.bert_config, self.generator_config, is_training,
                                    features, self.disc_weight, sample_fn, denominators)
      if is_training:
        return model.loss, training_metrics(model, features)
      slots = tf.shape(features["masked_lm_positions"])
      outputs = {
          "masked_lm_log_prob": tf.reshape(-model.masked_lm_example_loss, slots),
          "masked_lm_predictions": tf.reshape(
              tf.argmax(model.masked_lm_log_probs, axis=-1, output_type=tf.int32), slots),
          "masked_lm_positions": features["masked_lm_positions"],
          "masked_lm_ids": features["masked_lm_ids"],
          "masked_lm_weights": features["masked_lm_weights"],
          "input_mask": features["input_mask"],
          "original_ids": model.original_ids,
          "corrupted_ids": model.corrupted_ids,
          "replaced": tf.cast(model.replaced, tf.int32),
          "disc_prob": tf.sigmoid(model.disc_logits),
      }
      outputs.update(token_vector_sums(model.disc_sequence_output, features["input_mask"]))
      return None, outputs

    return tower_fn

  def init_companions(self, init_checkpoint):
    """((generator checkpoint, "generator/"),) when init_checkpoint has a generator beside it
    (companion_generator), else ()."""
    found = companion_generator(init_checkpoint)
    return ((found[0], "generator/"),) if found else ()

  def evaluation_metrics(self, outputs):
    """eval_results.txt: generator masked-LM accuracy/loss; discriminator accuracy, precision,
    recall and AUC on replaced tokens (threshold 0.5), its loss, and the total loss.

    Args:
      outputs: dict of numpy arrays from inference.run_inference.

    Returns:
      dict of metric name -> number.
    """
    generator = pretraining_model.masked_lm_metrics(outputs)
    real = outputs["input_mask"] > 0
    labels = outputs["replaced"][real] > 0
    probs = outputs["disc_prob"][real].astype(np.float64)
    caught = probs > 0.5
    eps = 1e-7
    bce = -(labels * np.log(np.clip(probs, eps, 1.0)) +
            (~labels) * np.log(np.clip(1.0 - probs, eps, 1.0)))
    results = {
        "generator_masked_lm_accuracy": generator["masked_lm_accuracy"],
        "generator_masked_lm_loss": generator["masked_lm_loss"],
        "discriminator_accuracy": float(np.mean(caught == labels)) if labels.size else 0.0,
        "discriminator_precision": _ratio(np.sum(caught & labels), np.sum(caught)),
        "discriminator_recall": _ratio(np.sum(caught & labels), np.sum(labels)),
        "discriminator_auc": roc_auc(labels, probs),
        "discriminator_loss": float(np.mean(bce)) if labels.size else 0.0,
        "replaced_tokens": int(np.sum(labels)),
        "real_tokens": int(labels.size),
        "masked_lm_predictions_count": generator["masked_lm_predictions_count"],
        "eval_examples": generator["eval_examples"],
    }
    results["loss"] = (results["generator_masked_lm_loss"] +
                       self.disc_weight * results["discriminator_loss"])
    share = _ratio(results["replaced_tokens"], results["real_tokens"])
    results["replaced_share"] = share
    results["discriminator_prior_loss"] = binary_entropy(share)
    results["encoder_output_spread"] = output_spread(outputs)
    results["discriminator_at_prior"] = int(at_prior(results))
    results["discriminator_worse_than_prior"] = int(worse_than_prior(results))
    if results["discriminator_at_prior"] or results["discriminator_worse_than_prior"]:
      results["warning"] = ("the discriminator %s; this encoder may fine-tune worse than a "
                            "random start (what to do: export/%s after training, "
                            "docs/pretraining.md#which-objective-for-which-budget)" %
                            (_standing(results), EXPORT_WARNING))
    return results

  def check_trained(self, results, output_dir, source):
    """After training: while the discriminator sits at the prior or does worse, logs a warning
    and writes export/WARNING.txt (prior_warning); otherwise removes a WARNING.txt left by an
    earlier part of the run.

    Args:
      results: evaluation_metrics of the trained model on a few examples.
      output_dir: the run's output_dir (export/ is in it).
      source: what the results were measured on, for the message.
    """
    path = os.path.join(output_dir, checkpoints.EXPORT_DIR, EXPORT_WARNING)
    text = prior_warning(results, source, self.disc_weight)
    if text is None:
      logging.info("The discriminator has left the prior on %s: recall %.3f, loss %.4f against "
                   "%.4f at the prior, encoder output spread %.3f", source,
                   results["discriminator_recall"], results["discriminator_loss"],
                   results["discriminator_prior_loss"], results["encoder_output_spread"])
      if tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)
      return
    for line in text.splitlines()[:3]:
      logging.warning("%s", line)
    atomic_files.write_text(path, text)
    logging.warning("Wrote %s", path)

  def prediction_lines(self, outputs, inv_vocab):
    """One line per example: what was replaced and what the discriminator flagged.

    Items, by position: `pos:original->replacement:caught` (replaced, flagged),
    `pos:original->replacement:missed` (replaced, not flagged), `pos:token:false_alarm`
    (original, flagged). A masked slot whose sample equals the original is not a replacement.
    An example with none of these gives an empty line.

    Yields:
      str lines without newline, e.g. "3:法->院:caught 9:的:false_alarm".
    """
    def token(i):
      return inv_vocab.get(int(i), "<%d>" % i)

    for i in range(len(outputs["replaced"])):
      items = []
      for pos in np.flatnonzero(outputs["input_mask"][i]).tolist():
        replaced = outputs["replaced"][i][pos] > 0
        flagged = outputs["disc_prob"][i][pos] > 0.5
        original = token(outputs["original_ids"][i][pos])
        if replaced:
          items.append("%d:%s->%s:%s" % (pos, original, token(outputs["corrupted_ids"][i][pos]),
                                         "caught" if flagged else "missed"))
        elif flagged:
          items.append("%d:%s:false_alarm" % (pos, original))
      yield " ".join(items)


def training_metrics(model, features):
  """The training metrics of a tower (training.metric): the generator's masked-LM accuracy, the
  discriminator's accuracy over real tokens and its recall of the replaced ones."""
  token_weights = tf.cast(features["input_mask"], tf.float32)
  says_replaced = tf.cast(model.disc_logits > 0.0, tf.float32)
  correct = tf.cast(tf.equal(says_replaced, model.replaced), tf.float32)
  prefix = training.METRIC_PREFIX
  return {
      prefix + "generator_masked_lm_accuracy": mlm.masked_lm_accuracy(
          model.masked_lm_log_probs, features["masked_lm_ids"], features["masked_lm_weights"]),
      prefix + "discriminator_accuracy": training.metric(
          tf.reduce_sum(correct * token_weights), tf.reduce_sum(token_weights)),
      prefix + "replaced_recall": training.metric(
          tf.reduce_sum(says_replaced * model.replaced * token_weights),
          tf.reduce_sum(model.replaced * token_weights)),
  }


def companion_generator(init_checkpoint):
  """The generator saved beside a discriminator checkpoint, or None.

  ELECTRA's export/ (ElectraObjective.export_writes) and convert_hf_checkpoint.py with
  --hf_generator_dir (a google/electra-* pair) both put it in generator/ next to
  bert_model.ckpt: generator.ckpt (generator/..., with the shared bert/embeddings/) and
  generator_config.json.

  Returns:
    (generator checkpoint prefix, its modeling.BertConfig), or None.

  Raises:
    InputError: the generator's checkpoint does not read back whole (checkpoints.check_whole).
  """
  if not init_checkpoint:
    return None
  folder = os.path.join(os.path.dirname(init_checkpoint), "generator")
  checkpoint = os.path.join(folder, "generator.ckpt")
  config_file = os.path.join(folder, "generator_config.json")
  if not (checkpoints.checkpoint_exists(checkpoint) and tf.io.gfile.exists(config_file)):
    return None
  checkpoints.check_whole(checkpoint, "--init_checkpoint=%s has its generator beside it, %s" %
                          (init_checkpoint, checkpoint))
  return checkpoint, modeling.BertConfig.from_json_file(config_file)


def token_vector_sums(sequence_output, input_mask):
  """Per-example sums over the real tokens' final-layer vectors, for output_spread.

  Args:
    sequence_output: float [B, L, H].
    input_mask: int32 [B, L].

  Returns:
    dict of float32 token_sum [B, H], token_sumsq [B, H] (of the squares) and token_rms_sum
    [B] (of each vector's root mean square).
  """
  weights = tf.cast(input_mask, tf.float32)[:, :, None]
  vectors = tf.cast(sequence_output, tf.float32) * weights
  squares = tf.square(vectors)
  return {"token_sum": tf.reduce_sum(vectors, axis=1),
          "token_sumsq": tf.reduce_sum(squares, axis=1),
          "token_rms_sum": tf.reduce_sum(tf.sqrt(tf.reduce_mean(squares, axis=-1)), axis=1)}


def output_spread(outputs):
  """How much the encoder's final-layer vectors differ from token to token.

  The mean over dimensions of the vectors' standard deviation across every real token,
  divided by their mean root mean square: 0 when every token gets the same vector; about 0.8
  for a random BERT.

  Args:
    outputs: dict with token_sum, token_sumsq [N, H], token_rms_sum [N] (token_vector_sums)
      and input_mask [N, L].

  Returns:
    float (0.0 without tokens).
  """
  count = float(np.sum(outputs["input_mask"] > 0))
  if not count:
    return 0.0
  mean = np.sum(outputs["token_sum"].astype(np.float64), axis=0) / count
  variance = np.sum(outputs["token_sumsq"].astype(np.float64), axis=0) / count - mean ** 2
  rms = np.sum(outputs["token_rms_sum"].astype(np.float64)) / count
  return float(np.mean(np.sqrt(np.maximum(variance, 0.0))) / rms) if rms else 0.0


def binary_entropy(share):
  """The loss (nats) of always predicting `share`, for labels of which `share` are positive."""
  if share <= 0.0 or share >= 1.0:
    return 0.0
  return float(-(share * np.log(share) + (1.0 - share) * np.log(1.0 - share)))


def at_prior(results):
  """Whether evaluation_metrics `results` say the discriminator has learned only the base rate:
  its loss within PRIOR_LOSS_MARGIN of the binary entropy of the replaced share and its recall
  under PRIOR_RECALL."""
  prior = results["discriminator_prior_loss"]
  return bool(prior and results["discriminator_recall"] < PRIOR_RECALL and
              abs(results["discriminator_loss"] - prior) <= PRIOR_LOSS_MARGIN * prior)


def worse_than_prior(results):
  """Whether evaluation_metrics `results` say the discriminator does worse than the prior: its
  loss more than PRIOR_LOSS_MARGIN above the binary entropy of the replaced share while it
  catches under PRIOR_RECALL of the replaced tokens (untrained, or pushed off by too high a
  learning rate), or its encoder output spread under DEAD_SPREAD (one vector for every token)."""
  prior = results["discriminator_prior_loss"]
  above = bool(prior and results["discriminator_recall"] < PRIOR_RECALL and
               results["discriminator_loss"] > (1.0 + PRIOR_LOSS_MARGIN) * prior)
  return above or results["encoder_output_spread"] < DEAD_SPREAD


def _standing(results):
  """"sits at the prior" or "does worse than the prior", for messages."""
  return "sits at the prior" if at_prior(results) else "does worse than the prior"


def prior_warning(results, source, disc_weight):
  """The text of export/WARNING.txt for `results` (evaluation_metrics), or None when the
  discriminator is neither at the prior nor worse."""
  if not (at_prior(results) or worse_than_prior(results)):
    return None
  spread = results["encoder_output_spread"]
  collapsed = spread < COLLAPSED_SPREAD
  loss, prior = results["discriminator_loss"], results["discriminator_prior_loss"]
  share, recall = 100.0 * results["replaced_share"], 100.0 * results["discriminator_recall"]
  if at_prior(results):
    measured = ("On %s its loss is %.4f, the binary entropy of the %.1f%% share of replaced "
                "tokens (%.4f): it has learned only how often a token is replaced, and it "
                "catches %.1f%% of them (recall)." % (source, loss, share, prior, recall))
  else:
    measured = ("On %s its loss is %.4f, %s the %.4f of always predicting the %.1f%% share of "
                "replaced tokens (the prior), and it catches %.1f%% of them (recall)." %
                (source, loss, "above" if loss > prior else "against", prior, share, recall))
  return "\n".join([
      "WARNING: this ELECTRA discriminator %s; as an encoder it may fine-tune worse than a "
      "random start." % _standing(results),
      measured,
      "The spread of its final-layer token vectors is %.3f (a random BERT: about 0.8)%s." % (
          spread, "; the %gx discriminator loss has pulled every token to nearly one vector" %
          disc_weight if collapsed else ""),
      "",
      "Measured (docs/pretraining.md, 'Which objective for which budget'): ELECTRA on a small "
      "model, 150 steps at lr 5e-4, left every run here, with a spread of 0.004-0.005 against "
      "0.77 at random init, and fine-tuning at chance (0.513) where a random start and MLM "
      "reached 1.0; by step 600 most runs had left it (spread about 0.55) and fine-tuned to "
      "1.0.",
      "",
      "What to do:",
  ] + ([
      "- a loss above the prior after training means the updates pushed the discriminator "
      "off: lower --learning_rate (and check the loss curve in TensorBoard);"
  ] if not at_prior(results) else []) + [
      "- train longer (more --num_train_steps), until eval_results.txt shows "
      "discriminator_at_prior = 0 and discriminator_worse_than_prior = 0 (a loss clearly under "
      "discriminator_prior_loss, an AUC above 0.5) and encoder_output_spread back near a "
      "random BERT's;",
      "- lower --disc_weight (%g now): it softens the collapse but does not end the plateau "
      "(on the tests' toy corpus after 30 steps, weights 50, 10 and 1 left spreads of 0.042, "
      "0.053 and 0.103, all at the prior; 300 steps at 50 left it, spread 0.39);" % disc_weight,
      "- or, for a short budget, use --objective=mlm, or MacBERT-style replacement "
      "(--masking_replacement=similar), the only objective that beat no pretraining in 600 s;",
      "- and before fine-tuning, compare this encoder with a random one: "
      "benchmarks/encoder_collapse.py.",
      ""])


def _ratio(numerator, denominator):
  return float(numerator) / float(denominator) if denominator else 0.0


def roc_auc(labels, scores):
  """Area under the ROC curve (Mann-Whitney U with average ranks for ties).

  Args:
    labels: bool array [N], True for the positive class.
    scores: float array [N].

  Returns:
    float in [0, 1]; 0.5 when either class is empty.
  """
  labels = np.asarray(labels, dtype=bool)
  positives = int(labels.sum())
  negatives = labels.size - positives
  if not positives or not negatives:
    return 0.5
  _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
  # Rank of a group of tied scores = the mean of the ranks it spans.
  ends = np.cumsum(counts)
  group_rank = ends - (counts - 1) / 2.0
  ranks = group_rank[inverse]
  u = ranks[labels].sum() - positives * (positives + 1) / 2.0
  return float(u / (positives * negatives))
