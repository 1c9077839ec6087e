"""Long documents as sliding windows: the windows' outputs pooled back to one row per document.

With --long_text=sliding, classifier/data.py writes every window of a long document as a record
of its own (with the document's label and its `doc_index`); training sees the windows as
examples. Eval and predict run the model over the windows, then `document_outputs` pools each
document's window logits (mean or max over its windows, per class) into the document's logits,
whose softmax is the document's probabilities, so eval_results.txt, predict.txt and
test_results.tsv keep one row per document, in input order.

numpy only.
"""

from absl import logging
import numpy as np

POOLING_MODES = ("mean", "max")


def pool_logits(logits, doc_index, num_docs, mode):
  """Each document's logits: the mean or max of its windows' logits, per class.

  Args:
    logits: float array [num_windows, num_labels].
    doc_index: int array [num_windows], each window's document (0 .. num_docs-1).
    num_docs: the number of documents; every one must have a window.
    mode: "mean" or "max".

  Returns:
    float64 array [num_docs, num_labels], documents in order.
  """
  logits = np.asarray(logits, np.float64)
  doc_index = np.asarray(doc_index, np.int64)
  counts = np.bincount(doc_index, minlength=num_docs)
  if len(counts) != num_docs or not counts.all():
    raise RuntimeError("windows of %d documents for %d documents (documents without a window: "
                       "%s)" % (len(counts), num_docs, np.flatnonzero(counts == 0)[:5].tolist()))
  if mode == "max":
    pooled = np.full((num_docs, logits.shape[1]), -np.inf)
    np.maximum.at(pooled, doc_index, logits)
    return pooled
  if mode != "mean":
    raise ValueError("pooling %r: expected one of %s" % (mode, ", ".join(POOLING_MODES)))
  pooled = np.zeros((num_docs, logits.shape[1]))
  np.add.at(pooled, doc_index, logits)
  return pooled / counts[:, np.newaxis]


def document_outputs(outputs, doc_index, num_docs, mode, label_ids=None):
  """The per-document probabilities (and cross-entropy) of the windows' model outputs.

  Args:
    outputs: dict with "logits" [num_windows, num_labels] (run_inference's, input order).
    doc_index, num_docs, mode: see pool_logits.
    label_ids: optional int array [num_docs], the documents' classes.

  Returns:
    dict "probabilities" [num_docs, num_labels] and, with label_ids, "per_example_loss"
    [num_docs] (the cross-entropy of the pooled probabilities).
  """
  logits = pool_logits(outputs["logits"], doc_index, num_docs, mode)
  shifted = logits - logits.max(axis=1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
  result = {"probabilities": np.exp(log_probs)}
  if label_ids is not None:
    result["per_example_loss"] = -log_probs[np.arange(num_docs), np.asarray(label_ids)]
  return result


def log_windows(split, doc_index, num_docs):
  """Logs how many of a split's documents were split, and into how many windows."""
  counts = np.bincount(np.asarray(doc_index, np.int64), minlength=num_docs)
  split_docs = counts > 1
  logging.info("%s: %d documents -> %d windows; %d documents longer than one window were split "
               "into %d windows (at most %d for one document)", split, num_docs, len(doc_index),
               int(split_docs.sum()), int(counts[split_docs].sum()),
               int(counts.max()) if num_docs else 0)
