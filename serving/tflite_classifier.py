"""Batch-1 serving on CPUs: a classifier export's assets/model.tflite (--export_tflite).

TensorFlow's own runtime hands each kernel of a small call to its second thread at a cost of
30-40 µs and runs small matmuls on one thread (docs/results/serving.md, "Serving against ONNX
Runtime"), so a SavedModel serves one request at a time slower than ONNX Runtime. TensorFlow Lite runs the
same model with XNNPACK's kernels, whose thread pool hands work over cheaply: on 2 cores, 2.2x
the SavedModel's batch-1 examples/sec for MiniLM, 1.1x for BERT-base, where XNNPACK's matmuls are
the limit (docs/serving.md). It is part of the tensorflow package; nothing else to install.

    classifier = TfliteClassifier("out/mrpc/saved_model", num_threads=2)
    classifier.classify(["The cat sat."], ["A cat was sitting."])
    # {"logits": [[...]], "probabilities": [[...]], "label": ["1"]}

Texts are tokenized in Python exactly as the run script tokenized them (tokenization's
FullTokenizer and classifier_features, with the export's vocabulary, casing, max_seq_length and
truncation from assets/export_config.json), each batch padded to its longest row; the model
takes any batch size and length. The SavedModel's own signatures are untouched: use them for
batches (faster there) and for raw text inside a TensorFlow graph.
"""

import contextlib
import os
import warnings

from engine import tf_env  # (first: TensorFlow reads it on import)

import numpy as np
import tensorflow as tf

from core import json_files
from core.errors import InputError
import tokenization

TFLITE_ASSET = "model.tflite"  # where build_saved_model puts it in the assets
EXPORT_CONFIG = "export_config.json"  # the export's spec (build_saved_model.py's --spec)
# The JSON type of each field of an export spec that its readers use (serving/
# saved_model_export.py writes them).
EXPORT_CONFIG_TYPES = {
    "task": str, "checkpoint": str, "bert_config_file": str, "vocab_file": str,
    "do_lower_case": bool, "max_seq_length": int, "precision": str, "labels": list,
    "truncation": str, "text_b": bool, "long_text": str, "doc_stride": int,
    "window_pooling": str, "tflite": bool, "max_target_length": int, "min_target_length": int,
    "beam_size": int, "length_penalty": float, "no_repeat_ngram_size": int,
}
# What TfliteClassifier reads from it.
_SERVED_FIELDS = ("labels", "text_b", "max_seq_length", "truncation", "do_lower_case")


def read_export_config(saved_model_dir, required=()):
  """The export spec of a SavedModel (assets/export_config.json) as a dict, read through
  core/json_files with EXPORT_CONFIG_TYPES and the `required` fields.

  Raises:
    InputError: naming the file and what is wrong with it (missing, not UTF-8 or JSON, a
      missing field, a value of another type, labels that are not strings, an unknown
      truncation or a max_seq_length below 3).
  """
  path = os.path.join(saved_model_dir, "assets", EXPORT_CONFIG)
  advice = "export the model again with --do_export"
  spec = json_files.read_object(path, EXPORT_CONFIG_TYPES, required, advice=advice)
  problem = None
  if any(not isinstance(label, str) for label in spec.get("labels") or []):
    problem = "labels must be strings, got %s" % spec["labels"]
  elif spec.get("truncation") not in (None,) + tokenization.TRUNCATION_MODES:
    problem = "truncation is %r: expected one of %s" % (spec["truncation"],
                                                       ", ".join(tokenization.TRUNCATION_MODES))
  elif spec.get("max_seq_length") is not None and spec["max_seq_length"] < 3:
    problem = "max_seq_length is %d: expected at least 3" % spec["max_seq_length"]
  if problem:
    raise InputError("%s: %s; %s" % (path, problem, advice))
  return spec
_INPUTS = ("input_ids", "input_mask", "segment_ids")


class TfliteClassifier(object):
  """A classifier export served through TensorFlow Lite; `classify` texts to labels."""

  def __init__(self, saved_model_dir, num_threads=None):
    """saved_model_dir: a --do_export --export_tflite SavedModel; num_threads: the interpreter's
    threads (default: every core)."""
    assets = os.path.join(saved_model_dir, "assets")
    model_file = os.path.join(assets, TFLITE_ASSET)
    if not os.path.isfile(model_file):
      raise InputError("%s: no assets/%s (export with --do_export --export_tflite)" % (
          saved_model_dir, TFLITE_ASSET))
    spec = read_export_config(saved_model_dir, _SERVED_FIELDS)
    if spec.get("long_text", "truncate") != "truncate":
      raise InputError("%s: exported with --long_text=%s, whose texts are pooled over windows "
                       "that this class does not make; serve its SavedModel signatures" % (
                           saved_model_dir, spec["long_text"]))
    self.labels = list(spec["labels"])
    self.text_b = spec["text_b"]
    self.max_seq_length = spec["max_seq_length"]
    self.truncation = spec["truncation"]
    self.tokenizer = tokenization.FullTokenizer(os.path.join(assets, "vocab.txt"),
                                                do_lower_case=spec["do_lower_case"])
    try:
      self.interpreter = _interpreter(model_file, num_threads or os.cpu_count())
      # The first allocation creates XNNPACK's delegate, which TensorFlow Lite announces with an
      # INFO line on stderr that no log level reaches: made here, silenced where tf_env
      # silences TensorFlow's own start-up lines.
      with tf_env.native_stderr_silenced() if tf_env.QUIET else contextlib.nullcontext():
        self.interpreter.allocate_tensors()
      runner = self.interpreter.get_signature_runner()
    except (ValueError, RuntimeError) as e:  # What TensorFlow Lite raises for a damaged model.
      raise InputError("%s: not a TensorFlow Lite model that runs (%s); a file cut short or "
                       "damaged? Export it again with --do_export --export_tflite" % (
                           model_file, str(e).strip().splitlines()[0][:200] if str(e).strip()
                           else type(e).__name__))
    self._inputs = {name: d["index"] for name, d in runner.get_input_details().items()}
    self._outputs = {name: d["index"] for name, d in runner.get_output_details().items()}
    self._shape = None

  def features(self, texts_a, texts_b=None):
    """int32 arrays [batch, longest row] per model input, as the run script makes them."""
    for name, texts in (("texts_a", texts_a), ("texts_b", texts_b)):
      if isinstance(texts, (str, bytes)):  # Else each of its characters would be a text.
        raise InputError("%s: expected a list of texts, got one %s; pass [text] for one text"
                         % (name, type(texts).__name__))
    if self.text_b != (texts_b is not None):
      raise InputError("this model reads %s; got %s" % (
          "text pairs (text_a and text_b)" if self.text_b else "one text (text_a)",
          "pairs" if texts_b is not None else "one text"))
    if texts_b is not None and len(texts_b) != len(texts_a):
      raise InputError("text_b: expected one text per text_a, got %d for %d" % (
          len(texts_b), len(texts_a)))
    rows = []
    for i, text_a in enumerate(texts_a):
      tokens_b = self.tokenizer.tokenize(texts_b[i]) if texts_b is not None else None
      rows.append(tokenization.classifier_features(
          self.tokenizer.tokenize(text_a), tokens_b, self.max_seq_length, self.truncation,
          self.tokenizer)[:3])
    length = max((sum(mask) for _, mask, _ in rows), default=0)
    return {name: np.array([row[k][:length] for row in rows], dtype=np.int32)
            for k, name in enumerate(_INPUTS)}

  def run(self, features):
    """The model's outputs ({"logits", "probabilities"}: float32 [batch, labels]) for
    `features` (see features); resizes the interpreter only when the shape changes."""
    shape = features["input_ids"].shape
    if shape != self._shape:
      for name in _INPUTS:
        self.interpreter.resize_tensor_input(self._inputs[name], shape)
      self.interpreter.allocate_tensors()
      self._shape = shape
    for name in _INPUTS:
      self.interpreter.set_tensor(self._inputs[name], features[name])
    self.interpreter.invoke()
    return {name: self.interpreter.get_tensor(index) for name, index in self._outputs.items()}

  def classify(self, texts_a, texts_b=None):
    """Texts (lists of str; one str is refused, not read as its characters) ->
    {"logits", "probabilities": [batch, labels], "label": [batch]}; an empty batch gives empty
    outputs, as the SavedModel's serving_default does."""
    features = self.features(texts_a, texts_b)
    if not len(texts_a):
      empty = np.zeros([0, len(self.labels)], dtype=np.float32)
      return {"logits": empty, "probabilities": empty.copy(), "label": []}
    outputs = self.run(features)
    outputs["label"] = [self.labels[i] for i in np.argmax(outputs["logits"], axis=-1)]
    return outputs


def _interpreter(model_file, num_threads):
  """LiteRT's interpreter (the ai_edge_litert package) when installed, else TensorFlow's own
  tf.lite.Interpreter (the same API; deprecated for LiteRT, still in TensorFlow 2.21), whose
  deprecation warning is not repeated to every user of this class."""
  try:
    from ai_edge_litert import interpreter as litert  # pylint: disable=g-import-not-at-top
    return litert.Interpreter(model_path=model_file, num_threads=num_threads)
  except ImportError:
    pass
  with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*tf.lite.Interpreter is deprecated")
    return tf.lite.Interpreter(model_path=model_file, num_threads=num_threads)
