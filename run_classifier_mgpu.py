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
saved_model_export.define_flags()

flags.DEFINE_string("data_dir", None,
                    "The input data dir: train.tsv, dev.tsv, test.tsv (or the stock file names "
                    "of the xnli/mnli/mrpc/cola tasks).")
flags.DEFINE_string("task_name", None,
                    "The task: xnli, mnli, mrpc, cola (stock formats) or tsv (your own "
                    "text<TAB>label or text_a<TAB>text_b<TAB>label files).")
flags.DEFINE_enum("truncation", "head", list(tokenization.TRUNCATION_MODES),
                  "How to shorten texts longer than max_seq_length: head keeps the start, tail "
                  "the end, head_tail the first 128 and the last max_seq_length-130 tokens.")
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
    raise cli.InputError("--task_name=%s: expected one of tsv, %s" %
                         (FLAGS.task_name, ", ".join(sorted(processors))))
  return processors[task]()


def make_input_fn(record_file, is_training):
  """input_fn(rows, seed, shard) reading classification records (length-aware batches)."""
  return common_flags.record_input_fn(
      record_file, classifier_data.name_to_features(FLAGS.max_seq_length), is_training)


def write_predictions(setup, probabilities, label_list):
  """Writes the predicted labels (common_flags.predict_output) and the class probabilities
  (output_dir/test_results.tsv, or next to --predict_output; none for standard output), both
  whole or neither."""
  output = common_flags.predict_output(setup)
  labels = [label_list[int(np.argmax(row))] for row in probabilities]
  if output == predict_input.STDIN:
    predict_input.write_lines(output, labels)
    return
  scores = (predict_input.probabilities_path(output) if FLAGS.predict_output
            else os.path.join(setup.output_dir, "test_results.tsv"))
  predict_input.write_line_files(
      [(output, labels), (scores, ["\t".join(str(p) for p in row) for row in probabilities])],
      common_flags.predict_output_flag())


def main(_):
  logging.set_verbosity(logging.INFO)
  predicting = FLAGS.do_predict or bool(FLAGS.predict_file)
  if not (FLAGS.do_train or FLAGS.do_eval or predicting or FLAGS.do_export):
    raise cli.InputError("at least one of --do_train, --do_eval, --do_predict (or "
                         "--predict_file) or --do_export must be set")
  needs_data_dir = (FLAGS.do_train or FLAGS.do_eval or (predicting and not FLAGS.predict_file))
  if needs_data_dir and (not FLAGS.data_dir or not os.path.isdir(FLAGS.data_dir)):
    raise cli.InputError("--data_dir=%s: no such directory" % FLAGS.data_dir)
  setup = run_setup.from_flags(trains=FLAGS.do_train)
  if setup.serves_chief_graph:  # --placement=inter_first: the chief's graph runs on our devices.
    setup.serve_chief_graph()
    return
  common_flags.check_periodic_eval_flags()
  class_weights = weighting.parse(FLAGS.class_weights)
  doc_stride = check_long_text_flags()
  sliding = FLAGS.long_text == "sliding"
  bert_config, tokenizer, tokenizer_digest = common_flags.load_config_and_tokenizer(setup)
  processor = get_processor(setup.output_dir)

  def features_file(split, examples, source_file, label_list):
    return classifier_data.cached_features_file(
        examples, split, source_file, label_list, tokenizer_digest, FLAGS.max_seq_length,
        FLAGS.truncation, setup.output_dir, tokenizer, FLAGS.task_name.lower(),
        FLAGS.long_text, doc_stride)

  def source(name):
    """The file a split was read from, for cache keys and messages."""
    names = {"mnli": {"dev": "dev_matched.tsv", "test": "test_matched.tsv"},
             "xnli": {"train": os.path.join("multinli", "multinli.train.%s.tsv" %
                                            FLAGS.xnli_language),
                      "dev": "xnli.dev.tsv", "test": "xnli.test.tsv"}}
    return os.path.join(FLAGS.data_dir,
                        names.get(FLAGS.task_name.lower(), {}).get(name, name + ".tsv"))

  # Every file this run needs is read and converted before training, so a bad dev or test row,
  # or a run that does not match the model already in --output_dir, stops it in seconds.
  examples = {}
  if FLAGS.do_train:
    examples["train"] = processor.get_train_examples(FLAGS.data_dir)
  label_list = processor.get_labels()
  evaluating = FLAGS.do_eval or FLAGS.eval_every_n_steps
  if evaluating:
    common_flags.check_best_metric(classifier_metrics.metric_names(label_list))
    examples["dev"] = processor.get_dev_examples(FLAGS.data_dir)
  classifier_data.check_classes(examples, label_list, source)
  if FLAGS.do_train:
    class_weights = weighting.resolve(class_weights, label_list,
                                      [e.label for e in examples["train"]])
  if FLAGS.predict_file:
    examples["predict"] = predict_input.read(FLAGS.predict_file, FLAGS.predict_format,
                                             processor.read_test_file,
                                             classifier_data.text_example)
  elif predicting:
    examples["predict"] = processor.get_test_examples(FLAGS.data_dir)
  input_layout = classifier_data.input_layout(
      examples, lambda split: (FLAGS.predict_file or source("test")) if split == "predict"
      else source(split))
  if input_layout == classifier_data.TEXT_PAIRS and sliding and FLAGS.do_export:
    raise cli.InputError("--do_export with --long_text=sliding exports single-text tasks only; "
                         "these examples are text pairs: predict them with --predict_file, or "
                         "export a run with --long_text=truncate")
  if bert_config.type_vocab_size < 2 and input_layout == classifier_data.TEXT_PAIRS:
    raise cli.InputError(
        "the examples are text pairs (segment ids 0 and 1) but type_vocab_size=%d in %s: the "
        "model has no embedding for the second text's segment; use a config with "
        "type_vocab_size >= 2, or single texts" % (bert_config.type_vocab_size,
                                                   FLAGS.bert_config_file))
  common_flags.check_run_info(
      setup, common_flags.run_identity(
          bert_config, tokenizer_digest,
          input_flags=("task_name", "truncation", "long_text", "doc_stride", "window_pooling"),
          task=FLAGS.task_name.lower(), labels=list(label_list), input_layout=input_layout),
      will_train=FLAGS.do_train)
  if FLAGS.do_train and isinstance(processor, classifier_data.TsvProcessor):
    processor.save_labels()
  record_files = {split: features_file(split, split_examples, source(split), label_list)
                  for split, split_examples in sorted(examples.items()) if split != "predict"}
  if FLAGS.predict_file:
    record_files["predict"] = predict_features(examples["predict"], label_list, tokenizer,
                                               doc_stride)
  elif predicting:
    record_files["predict"] = features_file("test", examples["predict"], source("test"),
                                            label_list)

  # With sliding windows a split's records are its documents' windows, in document order.
  doc_index = {}
  if sliding:
    for split, path in sorted(record_files.items()):
      doc_index[split] = classifier_data.read_doc_index(path)
      windows.log_windows(split, doc_index[split], len(examples[split]))
  rows = {split: len(doc_index[split]) if sliding else len(examples[split])
          for split in record_files}

  def infer(split, checkpoint, batch_size, what, label_ids=None):
    """The model's outputs, one row per example (document) of `split`, in input order."""
    outputs = inference.run_inference(
        classifier_model.make_tower_fn(bert_config, len(label_list), False),
        make_input_fn(record_files[split], False), checkpoint, setup.inference_parallel(),
        batch_size, rows[split], what)
    if not sliding:
      return outputs
    return windows.document_outputs(outputs, doc_index[split], len(examples[split]),
                                    FLAGS.window_pooling, label_ids)

  def evaluate(checkpoint):
    """eval_results.txt's metrics of `checkpoint` on the dev set."""
    label_map = {label: i for i, label in enumerate(label_list)}
    label_ids = np.array([label_map[e.label] for e in examples["dev"]])
    outputs = infer("dev", checkpoint, FLAGS.eval_batch_size, "eval", label_ids)
    results = classifier_metrics.classification_report(
        outputs["probabilities"], outputs["per_example_loss"], label_ids, label_list)
    results["global_step"] = checkpoints.checkpoint_step(checkpoint)
    return results

  if FLAGS.do_train:
    num_train_steps, num_warmup_steps = common_flags.epoch_schedule(rows["train"],
                                                                    setup.global_batch_size)
    setup.log_training_plan(rows["train"], num_train_steps)
    training.train(classifier_model.make_tower_fn(bert_config, len(label_list), is_training=True,
                                                  class_weights=class_weights),
                   make_input_fn(record_files["train"], is_training=True),
                   common_flags.train_spec(setup, num_train_steps, num_warmup_steps),
                   common_flags.periodic_eval(setup, evaluate))
  if not setup.is_chief:  # The chief evaluates, predicts and exports.
    return

  if FLAGS.do_eval or predicting:
    checkpoint = common_flags.eval_checkpoint(setup)
    logging.info("Evaluating and predicting with %s", checkpoint)

  if FLAGS.do_eval:
    common_flags.write_results(os.path.join(setup.output_dir, "eval_results.txt"),
                               evaluate(checkpoint))

  if predicting:
    probabilities = infer("predict", checkpoint, FLAGS.predict_batch_size,
                          "predict")["probabilities"]
    if len(probabilities) != len(examples["predict"]):
      raise RuntimeError("predicted %d rows for %d examples" %
                         (len(probabilities), len(examples["predict"])))
    write_predictions(setup, probabilities, label_list)

  if FLAGS.do_export:
    saved_model_export.export_classifier(
        setup, label_list,
        text_pairs=(input_layout or export_layout(setup, sliding)) == classifier_data.TEXT_PAIRS)


def export_layout(setup, sliding):
  """The input layout of an export-only run: the training run's (run_info.json), else that of
  the test or dev file of --data_dir. Pairs cannot be exported with sliding windows."""
  layout = (run_info.read(setup.output_dir) or {}).get("input_layout")
  if layout == classifier_data.TEXT_PAIRS and sliding:
    raise cli.InputError("--do_export with --long_text=sliding exports single-text tasks only; "
                         "the model in %s reads text pairs" % setup.output_dir)
  if layout:
    return layout
  if not FLAGS.data_dir or not os.path.isdir(FLAGS.data_dir):
    raise cli.InputError("--do_export: %s/%s does not say whether the model reads one text or "
                         "two (a run trained before this was recorded); pass the --data_dir it "
                         "was trained on" % (setup.output_dir, run_info.FILE_NAME))
  processor = get_processor(setup.output_dir)
  test_file = os.path.join(FLAGS.data_dir, processor.TEST_FILE)
  return classifier_data.input_layout(
      {"test": processor.get_test_examples(FLAGS.data_dir) if os.path.isfile(test_file)
               else processor.get_dev_examples(FLAGS.data_dir)}, lambda _: FLAGS.data_dir)


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
        raise cli.InputError("--%s=%s needs --long_text=sliding (now --long_text=%s)" %
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
  raise cli.InputError("--doc_stride=%d: expected 0 (half a window) to %d, the tokens of a "
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
