"""run_pretraining_mgpu.py --objective=electra: the tower function, eval metrics and predict.txt.

The model is electra_model.Electra. This module gives it the interface of the trainer's other
objective (the masked LM of run_pretraining_mgpu.py): a tower_fn for training.train and
inference.run_inference, the eval_results.txt metrics, and the predict.txt lines.
"""

import os

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from engine import checkpoints
from heads import pretraining as pretraining_model
from pretraining import electra_model

GENERATOR_EXPORT_DIR = os.path.join(checkpoints.EXPORT_DIR, "generator")


class ElectraObjective(object):
  """Replaced-token detection with a generator of `hidden_ratio` of the width."""

  name = "electra"
  uses_nsp = False  # ELECTRA has no next-sentence task; records' NSP labels are ignored.
  # export/bert_model.ckpt: the discriminator, stock bert/ names (the classifier fine-tunes it
  # and ignores the rest), with its replaced-token head (convert_to_hf.py writes both as
  # transformers' ElectraForPreTraining).
  export_scopes = ("bert/", "discriminator_predictions/")

  def __init__(self, bert_config, hidden_ratio=electra_model.DEFAULT_GENERATOR_HIDDEN_RATIO,
               disc_weight=electra_model.DEFAULT_DISC_WEIGHT, eval_seed=0,
               sample_fn=None):
    """Args:
      bert_config: the discriminator's BertConfig.
      hidden_ratio: generator width / discriminator width.
      disc_weight: weight of the discriminator loss.
      eval_seed: int; evaluation samples with a stateless draw from it, so every eval of a
        checkpoint scores the same replacements (for a given batch size).
      sample_fn: None (sample from the generator), or callable(log_probs [N, V]) -> int32 [N]
        used in training and inference (e.g. electra_model.most_likely_tokens in tests).
    """
    self.bert_config = bert_config
    self.generator_config = electra_model.generator_config(bert_config, hidden_ratio)
    self.disc_weight = float(disc_weight)
    self.eval_seed = int(eval_seed)
    self.sample_fn = sample_fn

  def run_identity(self):
    """What run_info.json records of the objective (a resume must not change it)."""
    return {"objective": self.name, "generator_config": self.generator_config.to_dict(),
            "disc_weight": self.disc_weight}

  def export(self, output_dir):
    """Writes the generator beside the discriminator's export/: export/generator/ holds
    generator.ckpt (generator/... plus the shared bert/embeddings/...) and generator_config.json.
    export/ itself (checkpoints.export_model) holds the discriminator: its stock bert/ names and
    discriminator_predictions/.
    """
    export_dir = os.path.join(output_dir, GENERATOR_EXPORT_DIR)
    tf.io.gfile.makedirs(export_dir)
    checkpoints.write_model_weights(checkpoints.latest_checkpoint(output_dir),
                                 os.path.join(export_dir, "generator.ckpt"),
                                 scopes=("generator/", "bert/embeddings/"))
    with tf.io.gfile.GFile(os.path.join(export_dir, "generator_config.json"), "w") as writer:
      writer.write(self.generator_config.to_json_string())
    logging.info("Exported the generator to %s", export_dir)

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
        return model.loss, {}
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
      return None, outputs

    return tower_fn

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
    return results

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
