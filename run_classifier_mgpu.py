"""BERT fine-tuning for classification on several GPUs (stock run_classifier.py flags + --n_gpus).

  export CUDA_VISIBLE_DEVICES=0,1
  python run_classifier_mgpu.py --task_name=tsv --data_dir=my_data \
    --vocab_file=$BERT/vocab.txt --bert_config_file=$BERT/bert_config.json \
    --init_checkpoint=$BERT/bert_model.ckpt --output_dir=out \
    --do_train --do_eval --do_predict --n_gpus=2

Outputs in --output_dir: checkpoints (a re-run resumes from the latest), TensorBoard summaries,
eval_results.txt (stock keys plus per-class precision/recall/F1, macro F1 and Matthews
correlation `mcc`), test_results.tsv (class probabilities, stock) and predict.txt (the predicted
label string of each test example, one line per example, input order).

Long documents: --long_text=sliding trains on overlapping windows and pools each document's
window logits back into one row of eval_results.txt, predict.txt and test_results.tsv
(classifier/windows.py). Imbalanced labels: --class_weights (classifier/weighting.py).
"""

from core.errors import InputError
from engine import tf_env  # pylint: disable=unused-import  (first: TensorFlow reads it on import)

import os

from absl import flags
from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from classifier import data as classifier_data
from classifier import metrics as classifier_metrics
from classifier import model as classifier_model
from classifier import weighting
from classifier import windows
from engine import checkpoints
from engine import cli
from engine import common_flags
from engine import inference
from engine import predict_input
from engine import run_info
from engine import run_helpers
from engine import run_setup
from engine import training
from serving import saved_model_export
import tokenization

FLAGS = flags.FLAGS

common_flags.define_model_flags()
common_flags.define_mode_flags()
common_flags.define_training_flags(default_learning_rate=5e-5)
common_flags.define_tpu_flags_removed()
common_flags.define_epoch_flags()
common_flags.define_length_flags()
common_flags.define_periodic_eval_flags(
    "eval_accuracy", "eval_accuracy, macro_f1, f1_<label>, precision_<label>, recall_<label>, "
    "eval_loss")
common_flags.define_predict_flags()
saved_model_export.define_flags(precisions=("fp32", "bf16"), tflite=True)

flags.DEFINE_string("data_dir", None,
                    "The input data dir: train.tsv, dev.tsv, test.tsv (or the stock file names "
                    "of the xnli/mnli/mrpc/cola tasks).")
flags.DEFINE_string("task_name", None,
                    "The task: xnli, mnli, mrpc, cola (stock formats) or tsv (your own "
                    "text<TAB>label or text_a<TAB>text_b<TAB>label files).")
flags.DEFINE_enum("truncation", "head", list(tokenization.TRUNCATION_MODES),
                  "How to shorten texts longer than max_seq_length: head keeps the start, tail "
                  "the end, head_tail the first 128 and the last max_seq_length-130 tokens "
                  "(so it needs --max_seq_length >= 131, 133 for text pairs; a text of a pair "
                  "is cut to its share of the length, and a share of 128 or fewer is cut as "
                  "head: logged).")
flags.DEFINE_enum("long_text", "truncate", list(tokenization.LONG_TEXT_MODES),
                  "Texts longer than max_seq_length: truncate (cut by --truncation) or sliding "
                  "(overlapping windows of max_seq_length every --doc_stride tokens, each a "
                  "training example with the document's label; eval and predict pool the "
                  "windows' logits per document, --window_pooling, so outputs stay one row "
                  "per document). With text pairs the second text slides.")
flags.DEFINE_integer("doc_stride", 0,
                     "--long_text=sliding: tokens between the starts of two windows, at most "
                     "max_seq_length-2 (0: half a window).")
flags.DEFINE_enum("window_pooling", "mean", list(windows.POOLING_MODES),
                  "--long_text=sliding: how a document's window logits become its logits: "
                  "mean or max per class over its windows.")
flags.DEFINE_integer("text_a_column", None, "tsv task: 0-based column of the (first) text.")
flags.DEFINE_integer("text_b_column", None, "tsv task: 0-based column of the second text.")
flags.DEFINE_integer("label_column", None, "tsv task: 0-based column of the label.")
flags.DEFINE_enum("tsv_header", "auto", ["auto", "true", "false"],
                  "tsv task: whether files start with a header row (auto: a first row naming "
                  "columns such as text/text_a/label is a header).")
flags.DEFINE_string("xnli_language", "zh", "xnli task: the language to train and evaluate on.")
flags.DEFINE_string("class_weights", "none",
                    "Training loss for imbalanced labels: none (plain cross-entropy), balanced "
                    "(class c weighs n_train / (n_labels * count_c), from the training set, "
                    "logged) or w0,w1,... (one weight >= 0 per label, in label order: "
                    "labels.txt for the tsv task). The loss is sum w[y] ce / sum w[y] over the "
                    "global batch. eval_loss stays the plain cross-entropy.")

common_flags.declare_flag_effects(common_flags.MODEL, "task_name", "truncation", "long_text",
                                  "doc_stride", "class_weights")
common_flags.declare_flag_effects(common_flags.DATA, "data_dir", "text_a_column",
                                  "text_b_column", "label_column", "tsv_header", "xnli_language")
common_flags.declare_flag_effects(common_flags.OTHER, "window_pooling")


def get_processor(output_dir):
  """The DataProcessor for --task_name (the tsv task keeps its labels.txt in `output_dir`)."""
  task = (FLAGS.task_name or "").lower()
  if task == "tsv":
    return classifier_data.TsvProcessor(output_dir, FLAGS.text_a_column,
                                        FLAGS.text_b_column, FLAGS.label_column, FLAGS.tsv_header)
  processors = {
      "xnli": lambda: classifier_data.XnliProcessor(FLAGS.xnli_language),
      "mnli": classifier_data.MnliProcessor,
      "mrpc": classifier_data.MrpcProcessor,
      "cola": classifier_data.ColaProcessor,
  }
  if task not in processors:
    raise InputError("--task_name=%s: expected one of tsv, %s" %
                     (FLAGS.task_name, ", ".join(sorted(processors))))
  return processors[task]()


def make_input_fn(record_file, is_training):
  """input_fn(rows, seed, shard) reading classification records (length-aware batches)."""
  return run_helpers.record_input_fn(
      record_file, classifier_data.name_to_features(FLAGS.max_seq_length), is_training)


def write_predictions(setup, probabilities, label_list):
  """Writes the predicted labels (run_helpers.predict_output) and the class probabilities
  (output_dir/test_results.tsv, or next to --predict_output; none for standard output), both
  whole or neither."""
  output = run_helpers.predict_output(setup)
  labels = [label_list[int(np.argmax(row))] for row in probabilities]
  if output == predict_input.STDIN:
    predict_input.write_lines(output, labels)
    return
  scores = (predict_input.probabilities_path(output) if FLAGS.predict_output
            else os.path.join(setup.output_dir, "test_results.tsv"))
  predict_input.write_line_files(
      [(output, labels), (scores, ["\t".join(str(p) for p in row) for row in probabilities])],
      run_helpers.predict_output_flag())


def predicting():
  """Whether the run predicts: --do_predict, or --predict_file (which implies it)."""
  return FLAGS.do_predict or bool(FLAGS.predict_file)


def check_modes():
  """At least one mode, and the --data_dir the modes that read it need (InputError)."""
  if not (FLAGS.do_train or FLAGS.do_eval or predicting() or FLAGS.do_export):
    raise InputError("at least one of --do_train, --do_eval, --do_predict (or "
                     "--predict_file) or --do_export must be set")
  needs_data_dir = FLAGS.do_train or FLAGS.do_eval or (predicting() and not FLAGS.predict_file)
  if needs_data_dir and (not FLAGS.data_dir or not os.path.isdir(FLAGS.data_dir)):
    raise InputError("--data_dir=%s: no such directory" % FLAGS.data_dir)


class Task(object):
  """What the phases of a classification run share, read and checked before any training.

  Attributes: setup (run_setup.RunSetup), dev_metrics (checkpoint -> eval_results.txt's
  metrics on the dev set), bert_config, tokenizer, tokenizer_digest, processor,
  label_list, class_weights (None or a list, one weight per label), doc_stride, sliding
  (--long_text=sliding), input_layout, and per split ("train", "dev", "predict"): examples,
  record_files, rows (examples, or windows with --long_text=sliding) and, with sliding
  windows, doc_index (each window's document).
  """

  def __init__(self, setup):
    """Checks the task's flags and loads the model config and tokenizer (InputError).

    The flags a run that does not train takes from run_info.json (--long_text, --truncation,
    --max_seq_length ...) are checked here, once run_setup has adopted them.
    """
    self.setup = setup
    # The final --do_eval reuses the evaluation of the same checkpoint made during training.
    self.dev_metrics = run_helpers.reuse_last_evaluation(self._dev_metrics)
    common_flags.check_periodic_eval_flags()
    self.class_weights = weighting.parse(FLAGS.class_weights)
    self.doc_stride = check_long_text_flags()
    check_truncation()
    saved_model_export.check_tflite(FLAGS.export_tflite, FLAGS.do_export,
                                    FLAGS.export_precision, FLAGS.long_text)
    self.sliding = FLAGS.long_text == "sliding"
    self.bert_config, self.tokenizer, self.tokenizer_digest = (
        run_helpers.load_config_and_tokenizer(setup))
    self.processor = get_processor(setup.output_dir)
    self.label_list, self.input_layout = None, None
    self.examples, self.record_files, self.doc_index, self.rows = {}, {}, {}, {}

  def source(self, split):
    """The file a split ("train", "dev", "test") was read from, for cache keys and messages."""
    return self.processor.path(FLAGS.data_dir, split)

  def read_examples(self):
    """Reads the labels and the examples of every split the run's modes need."""
    if FLAGS.do_train:
      self.examples["train"] = self.processor.get_train_examples(FLAGS.data_dir)
    self.label_list = self.processor.get_labels()
    if common_flags.reads_dev_set():
      common_flags.check_best_metric(classifier_metrics.metric_names(self.label_list))
      self.examples["dev"] = self.processor.get_dev_examples(FLAGS.data_dir)
    classifier_data.check_classes(self.examples, self.label_list, self.source)
    if FLAGS.do_train:
      self.class_weights = weighting.resolve(self.class_weights, self.label_list,
                                             [e.label for e in self.examples["train"]])
    if FLAGS.predict_file:
      self.examples["predict"] = predict_input.read(
          FLAGS.predict_file, FLAGS.predict_format, self.processor.read_test_file,
          classifier_data.text_example)
    elif predicting():
      self.examples["predict"] = self.processor.get_test_examples(FLAGS.data_dir)

  def check_layout(self):
    """Finds whether the examples are single texts or pairs; InputError when the model or the
    export cannot read them."""
    self.input_layout = classifier_data.input_layout(
        self.examples, lambda split: (FLAGS.predict_file or self.source("test"))
        if split == "predict" else self.source(split))
    pairs = self.input_layout == classifier_data.TEXT_PAIRS
    check_truncation(self.input_layout)
    if pairs and self.sliding and FLAGS.do_export:
      raise InputError("--do_export with --long_text=sliding exports single-text tasks "
                       "only; these examples are text pairs: predict them with "
                       "--predict_file, or export a run with --long_text=truncate")
    if pairs and self.bert_config.type_vocab_size < 2:
      raise InputError(
          "the examples are text pairs (segment ids 0 and 1) but type_vocab_size=%d in %s: the "
          "model has no embedding for the second text's segment; use a config with "
          "type_vocab_size >= 2, or single texts" % (self.bert_config.type_vocab_size,
                                                 FLAGS.bert_config_file))

  def run_identity(self):
    """What run_info.json records of this run (run_helpers.run_identity)."""
    return run_helpers.run_identity(
        self.bert_config, self.tokenizer_digest,
        input_flags=("task_name", "truncation", "long_text", "doc_stride", "window_pooling"),
        task=FLAGS.task_name.lower(), labels=list(self.label_list),
        input_layout=self.input_layout)

  def write_records(self):
    """Converts every split to records (cached in output_dir; --predict_file's in a scratch
    directory); with sliding windows, reads each split's window-to-document index."""
    for split in sorted(set(self.examples) - {"predict"}):
      self.record_files[split] = self._cached_records(split, split)
    if FLAGS.predict_file:
      self.record_files["predict"] = predict_features(
          self.examples["predict"], self.label_list, self.tokenizer, self.doc_stride)
    elif predicting():
      self.record_files["predict"] = self._cached_records("predict", "test")
    if self.sliding:  # A split's records are its documents' windows, in document order.
      for split, path in sorted(self.record_files.items()):
        self.doc_index[split] = classifier_data.read_doc_index(path)
        windows.log_windows(split, self.doc_index[split], len(self.examples[split]))
    self.rows = {split: len(self.doc_index[split]) if self.sliding else len(self.examples[split])
                 for split in self.record_files}

  def _cached_records(self, split, file_split):
    """The records of split's examples, read from the file of `file_split`, cached in
    output_dir under a key of that file, the vocabulary and every option."""
    return classifier_data.cached_features_file(
        self.examples[split], file_split, self.source(file_split), self.label_list,
        self.tokenizer_digest, FLAGS.max_seq_length, FLAGS.truncation, self.setup.output_dir,
        self.tokenizer, FLAGS.task_name.lower(), FLAGS.long_text, self.doc_stride)

  def infer(self, split, checkpoint, batch_size_per_tower, what, label_ids=None):
    """The model's outputs, one row per example (document) of `split`, in input order."""
    outputs = inference.run_inference(
        classifier_model.make_tower_fn(self.bert_config, len(self.label_list), False),
        make_input_fn(self.record_files[split], False), checkpoint,
        self.setup.inference_parallel(), batch_size_per_tower, self.rows[split], what)
    if not self.sliding:
      return outputs
    return windows.document_outputs(outputs, self.doc_index[split], len(self.examples[split]),
                                    FLAGS.window_pooling, label_ids)

  def _dev_metrics(self, checkpoint):
    """eval_results.txt's metrics of `checkpoint` on the dev set."""
    label_map = {label: i for i, label in enumerate(self.label_list)}
    label_ids = np.array([label_map[e.label] for e in self.examples["dev"]])
    outputs = self.infer("dev", checkpoint, FLAGS.eval_batch_size, "eval", label_ids)
    results = classifier_metrics.classification_report(
        outputs["probabilities"], outputs["per_example_loss"], label_ids, self.label_list)
    results["global_step"] = checkpoints.checkpoint_step(checkpoint)
    return results


def read_data(setup):
  """The run's Task: every file it needs read, checked and converted before training, so a bad
  dev or test row, or a run that does not match the model already in --output_dir, stops it
  in seconds."""
  task = Task(setup)
  task.read_examples()
  task.check_layout()
  run_helpers.check_run_info(setup, task.run_identity(), will_train=FLAGS.do_train)
  if FLAGS.do_train and isinstance(task.processor, classifier_data.TsvProcessor):
    task.processor.save_labels()
  task.write_records()
  return task


def train(task):
  """Trains on the training split (training.train), evaluating during training with
  --eval_every_n_steps."""
  setup = task.setup
  num_train_steps, num_warmup_steps = run_helpers.epoch_schedule(task.rows["train"],
                                                                 setup.global_batch_size)
  training.train(classifier_model.make_tower_fn(task.bert_config, len(task.label_list),
                                                is_training=True,
                                                class_weights=task.class_weights),
                 make_input_fn(task.record_files["train"], is_training=True),
                 run_helpers.train_spec(setup, num_train_steps, num_warmup_steps,
                                        num_examples=task.rows["train"]),
                 run_helpers.periodic_eval(setup, task.dev_metrics))


def evaluate(task, checkpoint):
  """Writes eval_results.txt: the dev set's metrics under `checkpoint`."""
  run_helpers.write_results(os.path.join(task.setup.output_dir, "eval_results.txt"),
                            task.dev_metrics(checkpoint))


def predict(task, checkpoint):
  """Writes the predicted labels and class probabilities of the test set or --predict_file."""
  probabilities = task.infer("predict", checkpoint, FLAGS.predict_batch_size,
                             "predict")["probabilities"]
  if len(probabilities) != len(task.examples["predict"]):
    raise RuntimeError("predicted %d rows for %d examples" %
                       (len(probabilities), len(task.examples["predict"])))
  write_predictions(task.setup, probabilities, task.label_list)


def export(task):
  """--do_export: the SavedModel of the run (serving/saved_model_export.py)."""
  layout = task.input_layout or export_layout(task.setup, task.sliding)
  saved_model_export.export_classifier(
      task.setup.output_dir, run_helpers.model_files(task.setup), task.label_list,
      text_pairs=layout == classifier_data.TEXT_PAIRS, truncation=FLAGS.truncation,
      long_text=FLAGS.long_text, doc_stride=FLAGS.doc_stride,
      window_pooling=FLAGS.window_pooling, precision=FLAGS.export_precision,
      tflite=FLAGS.export_tflite)


def main(_):
  """Check, data, train, evaluate, predict, export; each process does its part."""
  setup = run_setup.start(check_modes, trains=FLAGS.do_train)
  if setup is None:  # It served the chief's graph, or has no part in this run.
    return
  task = read_data(setup)
  if FLAGS.do_train:
    train(task)
  if not setup.is_chief:  # The chief evaluates, predicts and exports.
    return
  if FLAGS.do_eval or predicting():
    checkpoint = run_helpers.eval_checkpoint(setup)
    logging.info("Evaluating and predicting with %s", checkpoint)
  if FLAGS.do_eval:
    evaluate(task, checkpoint)
  if predicting():
    predict(task, checkpoint)
  if FLAGS.do_export:
    export(task)


def export_layout(setup, sliding):
  """The input layout of an export-only run: the training run's (run_info.json), else that of
  the test or dev file of --data_dir. Pairs cannot be exported with sliding windows."""
  layout = (run_info.read(setup.output_dir) or {}).get("input_layout")
  if layout == classifier_data.TEXT_PAIRS and sliding:
    raise InputError("--do_export with --long_text=sliding exports single-text tasks only; "
                     "the model in %s reads text pairs" % setup.output_dir)
  if layout:
    return layout
  if not FLAGS.data_dir or not os.path.isdir(FLAGS.data_dir):
    raise InputError("--do_export: %s/%s does not say whether the model reads one text or "
                     "two (a run trained before this was recorded); pass the --data_dir it "
                     "was trained on" % (setup.output_dir, run_info.FILE_NAME))
  processor = get_processor(setup.output_dir)
  test_file = processor.path(FLAGS.data_dir, "test")
  return classifier_data.input_layout(
      {"test": processor.get_test_examples(FLAGS.data_dir) if os.path.isfile(test_file)
               else processor.get_dev_examples(FLAGS.data_dir)}, lambda _: FLAGS.data_dir)


def check_truncation(layout=classifier_data.SINGLE_TEXTS):
  """--truncation=head_tail needs a --max_seq_length that leaves tokens for the end of a text
  after its first HEAD_TAIL_HEAD_TOKENS (InputError): below that it is --truncation=head. Checked
  for single texts at the start, for pairs once the data says the task has them."""
  classifier_data.check_truncation(FLAGS.truncation, FLAGS.max_seq_length, layout)


def check_long_text_flags():
  """--doc_stride and --window_pooling need --long_text=sliding; the stride must fit a window
  (InputError, before any work). Returns the stride of the windows.

  A stride this run was not given (the training run's, from run_info.json) that does not fit
  the window of another --max_seq_length gives way to the default, half a window, with a log
  line: the user never passed it.
  """
  if FLAGS.long_text != "sliding":
    for name in ("doc_stride", "window_pooling"):
      if FLAGS[name].present:
        raise InputError("--%s=%s needs --long_text=sliding (now --long_text=%s)" %
                         (name, FLAGS[name].value, FLAGS.long_text))
    return FLAGS.doc_stride
  window = FLAGS.max_seq_length - 2
  if 0 <= FLAGS.doc_stride <= window:
    return FLAGS.doc_stride
  if not FLAGS["doc_stride"].present:
    logging.warning("The training run's --doc_stride=%d does not fit a window of %d tokens at "
                    "--max_seq_length=%d: the windows start every %d tokens (half a window)",
                    FLAGS.doc_stride, window, FLAGS.max_seq_length,
                    tokenization.default_doc_stride(window))
    return 0
  raise InputError("--doc_stride=%d: expected 0 (half a window) to %d, the tokens of a "
                   "window at --max_seq_length=%d (a larger stride skips tokens)" %
                   (FLAGS.doc_stride, window, FLAGS.max_seq_length))


def predict_features(examples, label_list, tokenizer, doc_stride):
  """Records of --predict_file's examples in a scratch directory (removed at exit): a one-off
  file is not cached in --output_dir."""
  path = os.path.join(predict_input.scratch_dir(), "predict.tf_record")
  counts = classifier_data.write_features(
      examples, {label: i for i, label in enumerate(label_list)}, FLAGS.max_seq_length,
      tokenizer, FLAGS.truncation, path, FLAGS.predict_file, need_label=False,
      long_text=FLAGS.long_text, doc_stride=doc_stride)
  classifier_data.report_truncation("--predict_file=%s" % FLAGS.predict_file, len(examples),
                                    counts, FLAGS.max_seq_length, FLAGS.truncation,
                                    FLAGS.long_text)
  return path


if __name__ == "__main__":
  tf.disable_v2_behavior()
  cli.run_main(main)
