"""Class weights for imbalanced labels: --class_weights parsed, and the `balanced` weights.

A weight list is checked in two steps: its form (numbers, none negative, not all zero) as soon
as the run starts (`parse`), and its length against the task's labels once they are known
(`resolve`), both before any feature is written or any step trained.

`balanced` gives class c the weight n_examples / (n_classes * count_c) over the training
documents (sklearn's class_weight="balanced"), so every class carries the same total weight.
The weighted loss itself is classifier/model.py's.
"""

import math

from absl import logging

from core.errors import InputError

NONE = "none"
BALANCED = "balanced"


def parse(text):
  """--class_weights as NONE, BALANCED or a list of floats (InputError if malformed).

  Args:
    text: the flag's value: "none", "balanced" or "w0,w1,..." (one weight per label, in the
      order of the task's labels: labels.txt for the tsv task).
  """
  value = (text or NONE).strip()
  if value.lower() in (NONE, BALANCED):
    return value.lower()
  weights = []
  for i, part in enumerate(value.split(",")):
    try:
      weight = float(part)
    except ValueError:
      raise InputError("--class_weights=%s: item %d (%r) is not a number; expected none, "
                       "balanced or one weight >= 0 per label, comma-separated" %
                       (text, i + 1, part.strip()))
    if not math.isfinite(weight) or weight < 0:
      raise InputError("--class_weights=%s: item %d (%s) must be a finite number >= 0" %
                       (text, i + 1, part.strip()))
    weights.append(weight)
  if not any(weights):
    raise InputError("--class_weights=%s: every weight is 0; at least one class must count" %
                     text)
  return weights


def resolve(parsed, label_list, train_labels=None):
  """The weight of each label (list of floats, label order), or None for plain cross-entropy.

  Args:
    parsed: what `parse` returned.
    label_list: the task's labels, in class id order.
    train_labels: the training examples' labels (needed by BALANCED).

  Raises:
    InputError: a list whose length is not the number of labels, or BALANCED with a label that
      has no training example.
  """
  if parsed == NONE:
    return None
  if parsed == BALANCED:
    weights = balanced(train_labels or [], label_list)
  elif len(parsed) != len(label_list):
    raise InputError("--class_weights: %d weight(s) given for %d labels (%s, in this order)" %
                     (len(parsed), len(label_list), ", ".join(label_list)))
  else:
    weights = list(parsed)
  logging.info("Class weights (--class_weights): %s", ", ".join(
      "%s=%.4g" % (label, w) for label, w in zip(label_list, weights)))
  return weights


def balanced(train_labels, label_list):
  """n_examples / (n_classes * count_c) per label of label_list (InputError for a count of 0)."""
  counts = {label: 0 for label in label_list}
  for label in train_labels:
    counts[label] = counts.get(label, 0) + 1
  missing = [label for label in label_list if not counts[label]]
  if missing:
    raise InputError("--class_weights=balanced: no training example has the label(s) %s, so "
                     "their weight would be infinite; give the weights as a list instead" %
                     ", ".join(missing))
  n = float(len(train_labels))
  logging.info("Training label counts: %s", ", ".join(
      "%s=%d" % (label, counts[label]) for label in label_list))
  return [n / (len(label_list) * counts[label]) for label in label_list]
