"""Builds the serving SavedModel of a trained classifier or rewriter (TF2, eager).

  python build_saved_model.py --spec='{"task": "classifier", ...}'

Run by saved_model_export (that is, by `--do_export` of run_classifier_mgpu.py and
run_rewrite_finetune.py) in a process of its own: the run scripts switch TensorFlow to graph
mode, and a TF2 SavedModel is written from eager mode. The model graph is the run scripts' own
graph code (classifier_model.create_model, rewrite_decoding.decode), traced once through
tf.compat.v1.wrap_function; its variables are then loaded from the checkpoint and held by a
tf.Module whose tf.functions become the signatures:

  classifier  serving_default  text_a [batch] (+ text_b [batch] for pair tasks) ->
                               label [batch], label_id [batch], probabilities and logits
                               [batch, num_labels]
              serve_ids        input_ids, input_mask, segment_ids [batch, seq] -> the same
              tokenize         the inputs of serving_default -> input_ids, input_mask,
                               segment_ids [batch, max_seq_length]
              With --long_text=sliding (single texts), serving_default runs every window of
              each text and pools their logits (mean or max) into one row per text;
              tokenize then gives one row per window plus doc_index [windows] (its text),
              and serve_ids classifies the rows it is given (windows) one by one.
  rewriter    serving_default  source [batch] -> rewrite [batch], output_ids
                               [batch, max_target_length + 1], scores [batch]
              serve_ids        input_ids, input_mask, segment_ids [batch, max_seq_length] ->
                               the same
              tokenize         source [batch] -> input_ids, input_mask, segment_ids

The assets hold vocab.txt, bert_config.json, export_config.json (the spec: how inputs are
tokenized, truncated and decoded) and, for the classifier, labels.txt.
"""

from engine import tf_env  # pylint: disable=unused-import  (first: TensorFlow reads it on import)

import json
import logging as pylogging
import os
import shutil
import tempfile

from absl import flags
from absl import logging
import tensorflow as tf

from core.errors import InputError
from core import atomic_files
from engine import cli
import modeling
from rewrite import data as rewrite_data
from rewrite import decoding as rewrite_decoding
from serving import graph_features
from serving import graph_tokenizer
from serving import tflite_classifier
import tokenization

FLAGS = flags.FLAGS

flags.DEFINE_string("spec", None,
                    "The export as JSON (written by saved_model_export): task (classifier or "
                    "rewriter), checkpoint, bert_config_file, vocab_file, do_lower_case, "
                    "max_seq_length, export_dir, and the task's own settings.")

_FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids")


def _text_spec(name):
  return tf.TensorSpec([None], tf.string, name=name)


def _ids_specs(seq_length):
  return [tf.TensorSpec([None, seq_length], tf.int32, name=name) for name in _FEATURE_NAMES]


def _function(python_function, input_signature):
  """tf.function of a signature. The graph code (tokenizer, model, decoding) writes its loops
  and branches as TensorFlow ops, so AutoGraph's conversion (seconds per export) is skipped."""
  return tf.function(python_function, input_signature=input_signature, autograph=False)


# The export precisions: the encoder's compute dtype, and the dtype its dense kernels are
# stored in (bf16 exports keep them bfloat16, so no call casts 85M float32 values again).
PRECISIONS = {"fp32": tf.float32, "bf16": tf.bfloat16}


def restore_variables(variables, checkpoint):
  """Loads each variable's value from `checkpoint` by its stock name (cast to its dtype).

  Raises:
    InputError: the checkpoint lacks a variable of the model (e.g. it has no classifier head),
      or holds it with another shape (the config does not belong to the checkpoint).
  """
  reader = tf.train.load_checkpoint(checkpoint)
  shapes = reader.get_variable_to_shape_map()
  names = [v.name.split(":")[0] for v in variables]
  missing = sorted(name for name in names if name not in shapes)
  if missing:
    raise InputError(
        "checkpoint %s lacks %d variable(s) of the model, e.g. %s: it was not trained for this "
        "task (train with --do_train first, or point --output_dir at a trained model)" %
        (checkpoint, len(missing), ", ".join(missing[:3])))
  for name, variable in zip(names, variables):
    if list(shapes[name]) != variable.shape.as_list():
      raise InputError(
          "checkpoint %s: variable %s has shape %s there but %s in the model; does "
          "--bert_config_file (or the label list) belong to this checkpoint?" %
          (checkpoint, name, shapes[name], variable.shape.as_list()))
    variable.assign(tf.cast(reader.get_tensor(name), variable.dtype))
  logging.info("Restored %d variables from %s", len(variables), checkpoint)


def _kernels_in(dtype):
  """A variable-scope custom getter that creates dense layers' kernels (`.../kernel`) in
  `dtype`; modeling.dense_layer casts a kernel to its input's dtype, a no-op then."""

  def custom_getter(getter, name, *args, **kwargs):
    if name.endswith("/kernel") and dtype != tf.float32:
      kwargs.update(dtype=dtype, initializer=tf.compat.v1.zeros_initializer())
    return getter(name, *args, **kwargs)

  return custom_getter


def wrap_model(model_fn, input_specs, checkpoint, precision="fp32"):
  """Traces graph-mode model code into a function whose variables hold `checkpoint`'s values.

  Args:
    model_fn: callable(*Tensors) -> dict of Tensors, building tf.compat.v1 graph code.
    input_specs: a TensorSpec per argument.
    checkpoint: checkpoint prefix.
    precision: a PRECISIONS key: "bf16" computes the encoder in bfloat16
      (modeling.compute_dtype_scope) from dense kernels stored in bfloat16.

  Returns:
    a tf.compat.v1 WrappedFunction (call it like a tf.function; `.variables` lists them).
  """
  dtype = PRECISIONS[precision]

  def traced(*inputs):
    with modeling.compute_dtype_scope(dtype), tf.compat.v1.variable_scope(
        tf.compat.v1.get_variable_scope(), custom_getter=_kernels_in(dtype)):
      return model_fn(*inputs)

  wrapped = tf.compat.v1.wrap_function(traced, input_specs)
  restore_variables(wrapped.variables, checkpoint)
  return wrapped


def _trim_padding(features):
  """Drops the padding columns that no row of the batch uses (the model ignores them); keeps
  at least the [CLS] column, so an empty batch gives empty outputs."""
  length = tf.maximum(tf.reduce_max(tf.reduce_sum(features["input_mask"], axis=1)), 1)
  return {name: t[:, :length] for name, t in features.items()}


def _check_batch_of_texts(**texts):
  """Fails a call whose texts are not a 1-D batch (a signature call does not check the shape:
  a [1, 2] input would otherwise be read as 2 texts, and one text, a scalar, failed deep inside
  with "slice index 0 of dimension 0 out of bounds"), or whose text_b is not one text per
  text_a."""
  checks = []
  for name, text in texts.items():
    if text is not None:
      # At run time: the static shape says [None] whatever was fed (so tf.rank is a constant
      # 1). A batch's size is its first dimension; a scalar's shape gives the -1 appended.
      checks.append(tf.debugging.assert_equal(
          tf.size(text), tf.concat([tf.shape(text), [-1]], axis=0)[0],
          message="%s: expected a 1-D batch of strings, one text per example (one text: "
          "[text])" % name))
  if texts.get("text_b") is not None:
    checks.append(tf.debugging.assert_equal(
        tf.size(texts["text_b"]), tf.size(texts["text_a"]),
        message="text_b: expected one text per text_a, as many texts as text_a"))
  return checks


class ServingModule(tf.Module):
  """What classifier and rewriter share: tokenizer, weights, assets."""

  def __init__(self, spec):
    super().__init__()
    self.tokenizer = graph_tokenizer.GraphTokenizer(spec["vocab_file"], spec["do_lower_case"])
    self.bert_config = modeling.BertConfig.from_json_file(spec["bert_config_file"])
    self.max_seq_length = spec["max_seq_length"]
    self.precision = spec.get("precision", "fp32")
    self._cls_id = self.tokenizer.vocab["[CLS]"]
    # Staged inside the build folder, so that a build killed with its run leaves nothing
    # elsewhere: the next export removes the folder (saved_model_export._recover).
    os.makedirs(spec["export_dir"], exist_ok=True)
    self._asset_dir = tempfile.mkdtemp(prefix=".assets-", dir=spec["export_dir"])
    self.assets = {}
    self.add_asset("vocab.txt", path=spec["vocab_file"])
    self.add_asset("bert_config.json", self.bert_config.to_json_string())
    self.add_asset("export_config.json", json.dumps(spec, indent=2, ensure_ascii=False))

  def add_asset(self, name, text=None, path=None):
    """Adds a file (a copy of `path`, or `text`) to the SavedModel's assets/ as `name`."""
    target = os.path.join(self._asset_dir, name)
    if path:
      shutil.copyfile(path, target)
    else:
      with open(target, "w", encoding="utf-8") as f:
        f.write(text)
    self.assets[name.replace(".", "_")] = tf.saved_model.Asset(target)

  def hold_weights(self, model_fn, input_specs, checkpoint):
    """Wraps model_fn (see wrap_model) and keeps its variables tracked for saving."""
    self._model = wrap_model(model_fn, input_specs, checkpoint, self.precision)
    self.model_variables = list(self._model.variables)

  def add_tflite_model(self):
    """Converts the held model (token ids [batch, seq] in, the model's outputs out; batch and
    seq free) to TensorFlow Lite as assets/model.tflite (see serving/tflite_classifier.py)."""
    model = _function(lambda input_ids, input_mask, segment_ids: self._model(
        input_ids, input_mask, segment_ids), _ids_specs(None))
    weights = tf.Module()  # the model's variables alone (not the tokenizer's tables)
    weights.model_variables = self.model_variables
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [model.get_concrete_function()], weights)  # a signature with the outputs' names
    target = os.path.join(self._asset_dir, tflite_classifier.TFLITE_ASSET)
    atomic_files.write_atomically(target, atomic_files.bytes_writer([converter.convert()]))
    self.assets[tflite_classifier.TFLITE_ASSET.replace(".", "_")] = tf.saved_model.Asset(target)

  def save(self, export_dir, signatures):
    tf.saved_model.save(self, export_dir, signatures=signatures)
    shutil.rmtree(self._asset_dir, ignore_errors=True)
    logging.info("Wrote SavedModel %s (signatures: %s)", export_dir, ", ".join(signatures))


class ClassifierModule(ServingModule):
  """The classifier of run_classifier_mgpu.py, from raw text or ids to labels."""

  def __init__(self, spec):
    super().__init__(spec)
    from classifier import model as classifier_model  # pylint: disable=g-import-not-at-top
    self.labels = tf.constant(spec["labels"])
    self.truncation = spec["truncation"]
    self.text_b = spec["text_b"]
    self.long_text = spec.get("long_text", "truncate")
    self.window_pooling = spec.get("window_pooling", "mean")
    budget = self.max_seq_length - 2
    self.doc_stride = min(spec.get("doc_stride") or tokenization.default_doc_stride(budget),
                          budget)
    self.add_asset("labels.txt", "".join(label + "\n" for label in spec["labels"]))

    def model_fn(input_ids, input_mask, segment_ids):
      _, _, logits, probabilities = classifier_model.create_model(
          self.bert_config, False, input_ids, input_mask, segment_ids,
          tf.zeros_like(input_ids[:, 0]), len(spec["labels"]))
      return {"logits": logits, "probabilities": probabilities}

    self.hold_weights(model_fn, _ids_specs(None), spec["checkpoint"])
    if spec.get("tflite"):
      self.add_tflite_model()
    text_specs = [_text_spec("text_a")] + ([_text_spec("text_b")] if self.text_b else [])
    self.classify_text = _function(self._classify_text, text_specs)
    self.classify_ids = _function(self._classify_ids, _ids_specs(None))
    self.tokenize = _function(self._tokenize, text_specs)

  def _tokenize(self, text_a, text_b=None):
    """Texts [batch] -> input_ids, input_mask, segment_ids int32 [batch, max_seq_length]
    (sliding windows: [windows, max_seq_length], and doc_index int32 [windows])."""
    if self.long_text == "sliding":
      windows, doc = graph_features.sliding_windows(
          self.tokenizer.tokenize(text_a), self.max_seq_length - 2, self.doc_stride)
      features = graph_features.classifier_inputs(windows, None, self._cls_id,
                                                  self.tokenizer.sep_id, self.max_seq_length,
                                                  "head")
      return dict(features, doc_index=tf.cast(doc, tf.int32))
    if text_b is None:
      ids_a, ids_b = self.tokenizer.tokenize(text_a), None
    else:  # One pass over both texts: the tokenizer's ops cost per call more than per text.
      ids = self.tokenizer.tokenize(tf.concat([text_a, text_b], axis=0))
      batch = tf.shape(text_a, out_type=tf.int64)[0]
      ids_a, ids_b = ids[:batch], ids[batch:]
    return graph_features.classifier_inputs(ids_a, ids_b, self._cls_id, self.tokenizer.sep_id,
                                            self.max_seq_length, self.truncation)

  def _classify_ids(self, input_ids, input_mask, segment_ids):
    """int32 [batch, seq] -> label (string), label_id [batch]; probabilities, logits."""
    outputs = self._model(input_ids, input_mask, segment_ids)
    label_id = tf.argmax(outputs["probabilities"], axis=-1, output_type=tf.int32)
    return {"label": tf.gather(self.labels, label_id), "label_id": label_id,
            "probabilities": outputs["probabilities"], "logits": outputs["logits"]}

  def _classify_text(self, text_a, text_b=None):
    with tf.control_dependencies(_check_batch_of_texts(text_a=text_a, text_b=text_b)):
      features = self._tokenize(text_a, text_b)
    doc_index = features.pop("doc_index", None)
    features = _trim_padding(features)
    outputs = self._classify_ids(*[features[name] for name in _FEATURE_NAMES])
    if doc_index is None:
      return outputs
    logits = graph_features.pool_windows(outputs["logits"], doc_index, tf.size(text_a),
                                         self.window_pooling)
    probabilities = tf.nn.softmax(logits, axis=-1)
    label_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
    return {"label": tf.gather(self.labels, label_id), "label_id": label_id,
            "probabilities": probabilities, "logits": logits}

  def signatures(self):
    return {"serving_default": self.classify_text, "serve_ids": self.classify_ids,
            "tokenize": self.tokenize}


class RewriterModule(ServingModule):
  """The rewriter of run_rewrite_finetune.py: beam search (or greedy) decoding in the graph."""

  def __init__(self, spec):
    super().__init__(spec)
    self.source_budget = rewrite_data.source_budget(spec["max_seq_length"],
                                                    spec["max_target_length"])
    params = rewrite_decoding.decode_params_from_vocab(
        self.tokenizer.vocab, spec["max_target_length"], spec["min_target_length"],
        spec["beam_size"], spec["length_penalty"], spec["no_repeat_ngram_size"])

    def model_fn(input_ids, input_mask, segment_ids):
      return rewrite_decoding.decode(self.bert_config, input_ids, input_mask, segment_ids,
                                     params)

    specs = _ids_specs(self.max_seq_length)
    self.hold_weights(model_fn, specs, spec["checkpoint"])
    self.rewrite_text = _function(self._rewrite_text, [_text_spec("source")])
    self.rewrite_ids = _function(self._rewrite_ids, specs)
    self.tokenize = _function(self._tokenize, [_text_spec("source")])

  def _tokenize(self, source):
    """source [batch] -> [CLS] source [SEP] as int32 [batch, max_seq_length] features."""
    return graph_features.rewrite_source_inputs(
        self.tokenizer.tokenize(source), self._cls_id, self.tokenizer.sep_id,
        self.max_seq_length, self.source_budget)

  def _rewrite_ids(self, input_ids, input_mask, segment_ids):
    """int32 [batch, max_seq_length] -> rewrite [batch], output_ids, scores."""
    outputs = self._model(input_ids, input_mask, segment_ids)
    return {"rewrite": self.tokenizer.detokenize(outputs["output_ids"]),
            "output_ids": outputs["output_ids"], "scores": outputs["scores"]}

  def _rewrite_text(self, source):
    with tf.control_dependencies(_check_batch_of_texts(source=source)):
      features = self._tokenize(source)
    return self._rewrite_ids(*[features[name] for name in _FEATURE_NAMES])

  def signatures(self):
    return {"serving_default": self.rewrite_text, "serve_ids": self.rewrite_ids,
            "tokenize": self.tokenize}


MODULES = {"classifier": ClassifierModule, "rewriter": RewriterModule}


def build(spec):
  """Writes the SavedModel of `spec` (a dict, see --spec) to spec["export_dir"]."""
  module = MODULES[spec["task"]](spec)
  module.save(spec["export_dir"], module.signatures())


class _DropRenamedInputNames(pylogging.Filter):
  """Drops TensorFlow's "Function `...` contains input name(s) 2161, 2163, ... with unsupported
  characters" lines (2 KB each): the names are those of the captured variables, internal to the
  SavedModel, and the signatures' own input names are kept."""

  def filter(self, record):
    return "contains input name(s)" not in str(record.msg)


def main(_):
  logging.set_verbosity(logging.INFO)
  pylogging.getLogger("absl").addFilter(_DropRenamedInputNames())
  if not FLAGS.spec:
    raise InputError("--spec is required (run --do_export of a run script instead)")
  build(json.loads(FLAGS.spec))


if __name__ == "__main__":
  cli.run_main(main)
