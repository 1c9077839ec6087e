"""--do_export: a run's checkpoint as a SavedModel for serving, <output_dir>/saved_model/.

The checkpoint is the one eval and predict use (run_helpers.eval_checkpoint): the best one kept
by --keep_best with --use_best_checkpoint, else the latest in --output_dir.

The run scripts call `export_classifier` / `export_rewriter` at the end of main, passing what
serving needs to process raw text exactly as the run did (the checkpoint, vocabulary, casing,
max_seq_length: run_helpers.model_files; truncation, labels; the decoding flags of the
rewriter) as arguments: this module reads no flag, and defines only its own (`define_flags`).
The export collects them into a spec, and build_saved_model.py writes the SavedModel from it in
a process of its own (TF2, eager; the run scripts are in graph mode), on CPU, and killed with
the run (core/children.py).

The SavedModel is built in a temporary directory beside the final one and renamed into place
only once it is complete, so a failed export never damages an existing good one.
"""

import json
import os
import shutil
import sys

from absl import flags
from absl import logging

from core.errors import InputError
from core import atomic_files
from core import children
from engine import common_flags

FLAGS = flags.FLAGS

EXPORT_DIR = "saved_model"
_BUILDER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "build_saved_model.py")


def define_flags(precisions=("fp32",), tflite=False):
  """--do_export, --export_precision when `precisions` offers more than fp32, and
  --export_tflite when `tflite` (idempotent, like common_flags). The rewriter keeps fp32: its
  beam search ranks candidates by scores that bfloat16 rounding reorders."""
  if "do_export" not in FLAGS:
    flags.DEFINE_bool(
        "do_export", False,
        "Export the checkpoint that eval and predict use (the latest in --output_dir, after "
        "training with --do_train; the best with --use_best_checkpoint) as a "
        "TF2 SavedModel for serving, output_dir/saved_model/: signatures serving_default "
        "(raw text in, tokenized in the graph like this run), serve_ids (token ids in) and "
        "tokenize. Vocab, bert_config and labels travel in its assets.")
  if len(precisions) > 1 and "export_precision" not in FLAGS:
    flags.DEFINE_enum(
        "export_precision", "fp32", list(precisions),
        "Precision of the --do_export SavedModel. fp32: float32 throughout, logits as "
        "predict.txt's. bf16 (classifier): the encoder computes in bfloat16 from dense kernels "
        "stored in bfloat16 (the SavedModel 40% smaller, no per-call casts), for CPUs with AMX "
        "or AVX512-BF16: measured on an AMX Xeon, 1.4-1.5x fp32's examples/sec at batch 1 and "
        "2.3-2.9x at batch 32, with oneDNN's weight cache (docs/serving.md); logits differ "
        "from fp32's in the third significant digit. Without bfloat16 hardware it is emulated "
        "and slower: keep fp32.")
    common_flags.declare_flag_effects(common_flags.OTHER, "export_precision")
  if tflite and "export_tflite" not in FLAGS:
    flags.DEFINE_bool(
        "export_tflite", False,
        "With --do_export, also put the model (token ids in, logits out, any batch and length) "
        "in the SavedModel as assets/model.tflite, for batch-1 traffic on CPUs: TensorFlow "
        "Lite's XNNPACK kernels served one MiniLM-sized request at a time 2.2x faster than the "
        "SavedModel on 2 cores (BERT-base: 1.1x; docs/serving.md); serve it with "
        "serving/tflite_classifier.py. fp32 and --long_text=truncate only; adds the weights' "
        "size again.")
    common_flags.declare_flag_effects(common_flags.OTHER, "export_tflite")
  common_flags.declare_flag_effects(common_flags.OTHER, "do_export")


def _common_spec(model, task, precision="fp32"):
  """The spec fields of both tasks: checkpoint, model files and tokenization (`model`: see
  export_classifier)."""
  if model.spm_model_file:
    raise InputError("--do_export supports WordPiece vocabularies (--vocab_file) only; "
                     "models tokenized with --spm_model_file cannot be exported")
  return {
      "task": task,
      "checkpoint": os.path.abspath(model.checkpoint),
      "bert_config_file": os.path.abspath(model.bert_config_file),
      "vocab_file": os.path.abspath(model.vocab_file),
      "do_lower_case": model.do_lower_case,
      "max_seq_length": model.max_seq_length,
      "precision": precision,
  }


def export_classifier(output_dir, model, label_list, text_pairs, truncation, long_text,
                      doc_stride, window_pooling, precision="fp32", tflite=False):
  """Exports run_classifier_mgpu.py's model; returns the SavedModel directory.

  Args:
    output_dir: the run's output directory; the SavedModel goes to output_dir/saved_model.
    model: the model and how it reads text (run_helpers.ModelFiles: checkpoint,
      bert_config_file, vocab_file, spm_model_file, do_lower_case, max_seq_length).
    label_list: the task's labels (labels.txt order).
    text_pairs: whether the model reads text pairs: serving_default then takes text_a and
      text_b, else text_a alone.
    truncation, long_text, doc_stride, window_pooling: how the run cut and pooled long texts
      (--truncation, --long_text, --doc_stride, --window_pooling).
    precision: --export_precision.
    tflite: --export_tflite: also write assets/model.tflite.
  """
  spec = _common_spec(model, "classifier", precision)
  spec.update(labels=list(label_list), truncation=truncation, text_b=bool(text_pairs),
              long_text=long_text, doc_stride=doc_stride, window_pooling=window_pooling,
              tflite=bool(tflite))
  return build(output_dir, spec)


def check_tflite(tflite, do_export, precision, long_text):
  """Raises InputError when --export_tflite is set with what the TFLite model cannot do (the
  values of --export_tflite, --do_export, --export_precision and --long_text)."""
  if not tflite:
    return
  if not do_export:
    raise InputError("--export_tflite: needs --do_export (the TFLite model is written into "
                     "the SavedModel's assets)")
  if precision != "fp32":
    raise InputError("--export_tflite: needs --export_precision=fp32 (got %s)" % precision)
  if long_text != "truncate":
    raise InputError("--export_tflite: needs --long_text=truncate (got %s: the TFLite "
                     "model scores one window per text)" % long_text)


def export_rewriter(output_dir, model, max_target_length, min_target_length, beam_size,
                    length_penalty, no_repeat_ngram_size):
  """Exports run_rewrite_finetune.py's model (`model`: see export_classifier) with its decoding
  settings (the flags of the same names); returns the directory."""
  spec = _common_spec(model, "rewriter")
  spec.update(max_target_length=max_target_length, min_target_length=min_target_length,
              beam_size=beam_size, length_penalty=length_penalty,
              no_repeat_ngram_size=no_repeat_ngram_size)
  return build(output_dir, spec)


def build(output_dir, spec):
  """Runs build_saved_model.py on `spec`, then moves the result to output_dir/saved_model.

  A build stopped by bad input (the builder printed its `error:` line) exits with status 2.
  """
  final_dir = os.path.join(output_dir, EXPORT_DIR)
  _recover(final_dir)
  building_dir = "%s.tmp-%d" % (final_dir, os.getpid())
  shutil.rmtree(building_dir, ignore_errors=True)
  spec = dict(spec, export_dir=building_dir)
  logging.info("Exporting %s as a SavedModel: %s", spec["checkpoint"], final_dir)
  # The build is a CPU job: the child sees no GPU, so it opens no context on the cards whose
  # memory this process still holds.
  returncode = children.run([sys.executable, _BUILDER, "--spec=" + json.dumps(spec)],
                            env=dict(os.environ, CUDA_VISIBLE_DEVICES="")).returncode
  if returncode != 0:
    shutil.rmtree(building_dir, ignore_errors=True)
    if returncode == 2:
      sys.exit(2)
    raise RuntimeError("building the SavedModel failed (exit status %d; see the log above); "
                       "%s is unchanged" % (returncode, final_dir))
  _replace_dir(building_dir, final_dir)
  logging.info("Exported %s", final_dir)
  return final_dir


def _recover(final_dir):
  """Undoes what an export killed mid-way left: a SavedModel moved aside (final_dir.old-<pid>)
  returns when final_dir is missing; stale build directories are removed."""
  parent, name = os.path.split(final_dir)
  for entry in sorted(os.listdir(parent)):
    head, _, pid = entry.rpartition("-")
    if head not in (name + ".old", name + ".tmp") or not pid.isdigit() or (
        atomic_files.process_alive(int(pid))):
      continue
    path = os.path.join(parent, entry)
    if head == name + ".old" and not os.path.exists(final_dir):
      logging.info("Restoring %s, moved aside by an export that did not finish", final_dir)
      os.rename(path, final_dir)
    else:
      logging.info("Removing %s, left by an export that did not finish", path)
      shutil.rmtree(path, ignore_errors=True)


def _replace_dir(new_dir, final_dir):
  """Renames new_dir to final_dir, moving an existing final_dir out of the way first."""
  old_dir = "%s.old-%d" % (final_dir, os.getpid())
  if os.path.exists(final_dir):
    os.rename(final_dir, old_dir)
  os.rename(new_dir, final_dir)
  shutil.rmtree(old_dir, ignore_errors=True)
