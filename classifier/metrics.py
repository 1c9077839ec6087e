"""The classifier's eval metrics: what eval_results.txt holds and --best_metric may watch.

numpy only, so the benchmarks' transformers side (benchmarks/hf_finetune.py) scores its
predictions with the same code.
"""

import numpy as np


def matthews_corrcoef(predictions, label_ids, num_classes):
  """Matthews correlation of predicted and true class ids (GLUE's CoLA metric), in [-1, 1].

  The multi-class form (Gorodkin's R_K, as sklearn computes it); for 2 classes it is the usual
  (tp * tn - fp * fn) / sqrt(...). 0 when every prediction (or every label) is one class.

  Args:
    predictions: int array [num_examples], predicted class ids.
    label_ids: int array [num_examples], true class ids.
    num_classes: the number of classes.
  """
  confusion = np.zeros((num_classes, num_classes), dtype=np.float64)
  np.add.at(confusion, (np.asarray(label_ids), np.asarray(predictions)), 1.0)
  true_counts, predicted_counts = confusion.sum(axis=1), confusion.sum(axis=0)
  n, correct = confusion.sum(), np.trace(confusion)
  covariance = correct * n - np.dot(predicted_counts, true_counts)
  denominator = np.sqrt((n * n - np.dot(predicted_counts, predicted_counts)) *
                        (n * n - np.dot(true_counts, true_counts)))
  return float(covariance / denominator) if denominator else 0.0


def classification_report(probabilities, per_example_loss, label_ids, label_list):
  """Accuracy, mean loss, per-class precision/recall/F1, macro F1 and Matthews correlation.

  Args:
    probabilities: float array [num_examples, num_labels].
    per_example_loss: float array [num_examples].
    label_ids: int array [num_examples], true class ids.
    label_list: the label strings, in class id order.
  Returns:
    dict metric name -> number (eval_results.txt's keys).
  """
  predictions = np.argmax(probabilities, axis=-1)
  results = {
      "eval_accuracy": float(np.mean(predictions == label_ids)),
      "eval_loss": float(np.mean(per_example_loss)),
      "eval_examples": int(len(label_ids)),
  }
  results["loss"] = results["eval_loss"]
  f1s = []
  for i, label in enumerate(label_list):
    tp = float(np.sum((predictions == i) & (label_ids == i)))
    precision = tp / max(float(np.sum(predictions == i)), 1.0)
    recall = tp / max(float(np.sum(label_ids == i)), 1.0)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    f1s.append(f1)
    results["precision_%s" % label] = precision
    results["recall_%s" % label] = recall
    results["f1_%s" % label] = f1
  results["macro_f1"] = float(np.mean(f1s))
  results["mcc"] = matthews_corrcoef(predictions, label_ids, len(label_list))
  return results


def metric_names(label_list):
  """The keys of classification_report (what --best_metric may watch)."""
  return (["eval_accuracy", "eval_loss", "loss", "macro_f1", "mcc"] +
          ["%s_%s" % (kind, label) for kind in ("precision", "recall", "f1")
           for label in label_list])
