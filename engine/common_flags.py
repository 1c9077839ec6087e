"""The flags shared by the run_*_mgpu.py scripts, with the stock google-research/bert names.

This module owns the flag definitions and what each flag is: the `define_*` groups, each
flag's effect (MODEL, UPDATE, PARALLEL, DATA, OTHER; `declare_flag_effects`, `training_flags`)
and the checks of the values a flag accepts (`check_shared_flags`, `check_periodic_eval_flags`,
`check_best_metric`). What a run builds from the flags (config and tokenizer, run identity,
train spec, input functions, eval checkpoint, outputs) is engine/run_helpers.py.

Each script calls the `define_*` groups it needs, then its own script-specific flags. Defining is
idempotent, so several scripts can be imported into one process (as the tests do). The choice
lists come from the modules that implement them (tower_utils, optimization, parallel/).

The flags are read here, in run_helpers and in run_setup.from_flags, never written: what a
process learns at start-up (the parallel spec, where it writes, what it restores, the precision)
is a run_setup.RunSetup that the scripts pass to the helpers.
"""

import collections

from absl import flags

from core.errors import InputError
from engine import cli
from engine import predict_input
import optimization
from parallel import pipeline
from parallel import recompute
import tower_utils

FLAGS = flags.FLAGS


# What each flag changes. The processes of a multi-process run must agree on every MODEL and
# UPDATE flag (training.train compares them all in its handshake, with the run's identity:
# config, vocabulary, task and labels); a training run records them in run_info.json, and a
# rerun in the same --output_dir that resumes with another MODEL flag is refused, with another
# UPDATE flag is logged; a run that does not train says which MODEL flag it was given differs
# from its training run's. Every flag a script defines has an effect (tests/test_flag_effects.py
# fails on one without), so a new flag cannot be forgotten.
MODEL = "model"  # the model or its loss: variables, graph, what a step reads and computes
UPDATE = "update"  # how the weights move: the schedule, the precision (may change on a resume)
PARALLEL = "parallel"  # how the work is spread: compared as the parallel spec by
                       # tower_utils.join_processes; the global batch is checked on a resume
DATA = "data"  # which files are read and what is read of them: their contents count (the
               # run's identity, the number of steps), not the paths, which may differ by host
OTHER = "other"  # neither the model nor the loss: modes, outputs, logging, evaluation, speed
EFFECTS = (MODEL, UPDATE, PARALLEL, DATA, OTHER)
_FLAG_EFFECTS = {}


def declare_flag_effects(effect, *names):
  """Declares what the flags `names` change (one of EFFECTS); each script does for its own."""
  if effect not in EFFECTS:
    raise ValueError("effect %r: expected one of %s" % (effect, EFFECTS))
  for name in names:
    _FLAG_EFFECTS[name] = effect


def flag_effect(name):
  """The declared effect of flag `name`, or None."""
  return _FLAG_EFFECTS.get(name)


def training_flags(effective=None):
  """{name: value} of this script's MODEL and UPDATE flags, sorted by name: what the processes
  of a run must agree on and a resumed run is checked against (run_info.json).

  Args:
    effective: {name: value} for flags whose value the run takes from elsewhere (the records'
      max_seq_length in pretraining).
  """
  effective = effective or {}
  return collections.OrderedDict(
      (name, effective.get(name, FLAGS[name].value)) for name in sorted(_FLAG_EFFECTS)
      if _FLAG_EFFECTS[name] in (MODEL, UPDATE) and name in FLAGS)


declare_flag_effects(MODEL, "do_lower_case", "max_seq_length", "layerwise_lr_decay",
                     "optimizer")
declare_flag_effects(UPDATE, "learning_rate", "num_train_epochs", "num_train_steps",
                     "warmup_proportion", "use_fp16", "use_bf16")
declare_flag_effects(PARALLEL, "train_batch_size", "n_gpus", "grad_accum_steps", "reduction",
                     "allreduce_pack_mb", "pipeline_stages", "num_micro_batches",
                     "pipeline_schedule", "placement", "recompute", "worker_hosts",
                     "task_index", "worker_port", "collective_timeout_s")
declare_flag_effects(DATA, "bert_config_file", "vocab_file", "spm_model_file")
declare_flag_effects(
    OTHER, "output_dir", "init_checkpoint", "do_train", "do_eval", "do_predict",
    "eval_batch_size", "predict_batch_size", "save_checkpoints_steps", "keep_checkpoint_max",
    "log_every_n_steps", "random_seed", "use_xla", "pad_to_batch_max", "pad_to_multiple_of",
    "bucket_by_length", "bucket_window", "eval_every_n_steps", "best_metric", "keep_best",
    "early_stopping_patience", "use_best_checkpoint", "predict_file", "predict_format",
    "predict_output", "use_tpu", "tpu_name", "tpu_zone", "gcp_project", "master",
    "num_tpu_cores", "iterations_per_loop")


def _define(kind, name, default, help_text, **kwargs):
  """Defines flag `name` unless it already exists (e.g. another run script was imported).

  kwargs go to the DEFINE_<kind> function (e.g. enum_values for kind "enum").
  """
  if name in FLAGS:
    return
  getattr(flags, "DEFINE_" + kind)(name, default, help=help_text, **kwargs)


def define_model_flags():
  """Flags naming the model, its vocabulary and where checkpoints go."""
  _define("string", "bert_config_file", None,
          "The config json file of the pre-trained BERT model (bert_config.json): the model "
          "architecture.")
  _define("string", "vocab_file", None, "The WordPiece vocabulary the BERT model was trained on.")
  _define("string", "spm_model_file", None,
          "Optional SentencePiece model to use instead of --vocab_file; it must contain the "
          "[CLS], [SEP] and [MASK] pieces.")
  _define("bool", "do_lower_case", True,
          "Lower-case (and strip accents from) the input. True for uncased and Chinese models, "
          "False for cased models.")
  _define("string", "output_dir", None,
          "Where checkpoints, TensorBoard summaries, eval_results.txt and predict.txt are "
          "written. A re-run resumes from the latest checkpoint found here.")
  _define("string", "init_checkpoint", None,
          "Initial checkpoint, usually a pre-trained Google BERT model (e.g. "
          "chinese_L-12_H-768_A-12/bert_model.ckpt). Ignored when output_dir has a checkpoint "
          "(the run continues from that; a missing or damaged one is then only logged, except "
          "under --head_first_steps, which needs it).")
  _define("integer", "max_seq_length", 128,
          "Maximum total input length in WordPiece tokens after tokenization; longer inputs are "
          "truncated, shorter ones padded. At most the config's max_position_embeddings (512).")


def define_mode_flags():
  """--do_train / --do_eval / --do_predict."""
  _define("bool", "do_train", False, "Whether to train.")
  _define("bool", "do_eval", False, "Whether to evaluate on the dev set (eval_results.txt).")
  _define("bool", "do_predict", False,
          "Whether to predict on the test set; writes predict.txt (one line per input example, "
          "input order) into --output_dir.")


def define_training_flags(default_learning_rate=5e-5):
  """Batch sizes, learning rate, checkpointing, logging and the device count."""
  _define("integer", "n_gpus", 1,
          "Devices per process: device i is GPU i mod the number of GPUs in "
          "CUDA_VISIBLE_DEVICES (on CPU-only machines, virtual CPU device i). Each device runs "
          "one tower (model replica); with --pipeline_stages=K, K devices make one tower, so a "
          "process runs n_gpus / K towers. The global batch per update is train_batch_size * "
          "towers * processes * grad_accum_steps.")
  _define("integer", "train_batch_size", 32, "Training batch size per tower.")
  _define("integer", "eval_batch_size", 8, "Batch size for eval, per tower.")
  _define("integer", "predict_batch_size", 8, "Batch size for predict, per tower.")
  _define("float", "learning_rate", default_learning_rate, "The peak learning rate for Adam.")
  _define("float", "layerwise_lr_decay", 1.0,
          "Layer-wise learning-rate decay D in (0, 1] (ELECTRA's fine-tuning uses 0.8): with L "
          "transformer layers, layer k (0-based) learns at learning_rate * D^(L-k), the "
          "embeddings at D^(L+1), the pooler and task head at learning_rate. 1: one rate for "
          "all (stock).")
  _define("integer", "save_checkpoints_steps", 1000, "How often to save a checkpoint (steps).")
  _define("integer", "keep_checkpoint_max", 5, "How many recent checkpoints to keep.")
  _define("integer", "log_every_n_steps", 10,
          "How often to log step, loss, learning rate, examples/sec and ETA, and to write "
          "TensorBoard summaries.")
  _define("integer", "random_seed", 12345, "Seed for shuffling and initialisation.")
  define_speed_flags()
  define_cluster_flags()
  define_pipeline_flags()


def define_pipeline_flags():
  """Pipeline stages (one model replica cut over several devices, parallel/pipeline.py) and
  activation recomputation (parallel/recompute.py): what to turn on when a batch does not fit."""
  _define("enum", "recompute", "none",
          "Activation recomputation. none: the backward pass reads the activations the forward "
          "pass kept. layer: each encoder layer keeps only its input; its inside (attention "
          "probabilities, feed-forward activations) is computed again in the backward pass. "
          "About a third more compute for several times less activation memory (the first "
          "thing to turn on at --max_seq_length=512); the update is the same.",
          enum_values=list(recompute.MODES))
  _define("integer", "pipeline_stages", 1,
          "Cut the model into this many stages, each on its own device, for models (or "
          "batches) that do not fit one card: --n_gpus devices make n_gpus / pipeline_stages "
          "model replicas (towers), each tower's stages on consecutive devices. Data "
          "parallelism is faster when the model fits. --objective=electra: the generator's "
          "layers go to the stages of the model's layers of the same depth, so a micro-batch "
          "crosses the stages twice (generator, then discriminator).")
  _define("integer", "num_micro_batches", 1,
          "With --pipeline_stages: each tower's train_batch_size rows flow through its stages "
          "as this many micro-batches, so the stages work at the same time; the idle share is "
          "(stages-1)/(micro_batches+stages-1). Must divide --train_batch_size.")
  _define("enum", "pipeline_schedule", "gpipe",
          "With --pipeline_stages and --num_micro_batches: the order of the micro-batches' "
          "passes. gpipe: all forward passes, then all backward passes; a stage may hold the "
          "activations of every micro-batch. 1f1b: stage s runs stages-s forward passes, then "
          "alternates one backward and one forward; it holds at most stages-s micro-batches' "
          "activations, with the same idle share. Needs num_micro_batches >= pipeline_stages. "
          "Without --num_micro_batches, 1f1b uses one micro-batch per stage. The update is the same.",
          enum_values=list(pipeline.SCHEDULES))
  _define("enum", "placement", "intra_first",
          "Several processes with --pipeline_stages: which devices form a tower. intra_first: "
          "each process holds whole towers on its own devices and the processes reduce "
          "gradients across the network. inter_first: a tower's stages span the processes "
          "(stage s on process s, the same local device), so only activations cross the "
          "network and each stage's gradients are reduced inside one process; the chief "
          "builds the one graph and reads the data, the others serve their devices.",
          enum_values=list(tower_utils.PLACEMENTS))


def define_cluster_flags():
  """Multi-process training: which processes form the run (see parallel/cluster.py)."""
  _define("string", "worker_hosts", None,
          "Training on several machines: host:port of every process (one per machine, each "
          "with --n_gpus devices), comma-separated, the same list everywhere; with "
          "--task_index. Without it, TF_CONFIG (Kubernetes/Kubeflow, Vertex AI) or Slurm's srun "
          "environment are used when set; with none of them the run is one process. The global "
          "batch is train_batch_size * towers * processes * grad_accum_steps.")
  _define("integer", "task_index", None,
          "With --worker_hosts: this process's position in the list. Task 0 is the chief: it "
          "restores and writes checkpoints, summaries, eval_results.txt, predict.txt and "
          "exports; the others write nothing into --output_dir.")
  _define("integer", "worker_port", 2222,
          "Slurm: the port each task's server listens on (plus SLURM_LOCALID when a node runs "
          "several tasks).")
  _define("float", "collective_timeout_s", 300.0,
          "Several processes: how long one waits for the others, at start-up and in every "
          "gradient all-reduce, before stopping with an error naming the one that did not "
          "answer. Must exceed the slowest step, checkpoint save and start-up difference.")


def define_speed_flags():
  """Mixed precision, XLA, gradient reduction, accumulation and the optimizer (training only)."""
  _define("bool", "use_fp16", False,
          "Mixed precision with float16 compute (GPUs with tensor cores): float32 variables and "
          "checkpoints, layer norm, softmax cross-entropy and losses in float32, dynamic loss "
          "scaling. An update whose gradients are not finite is skipped (global_step does not "
          "advance) and logged, and the loss scale halves.")
  _define("bool", "use_bf16", False,
          "Mixed precision with bfloat16 compute (Ampere+ GPUs, CPUs with AVX512-BF16/AMX): "
          "like --use_fp16 but without loss scaling (bfloat16 has float32's range).")
  _define("bool", "use_xla", False,
          "Compile each tower's forward and backward pass with XLA (fuses the element-wise ops "
          "around the matmuls).")
  _define("enum", "reduction", "shared",
          "How tower gradients are reduced: shared = one copy of each variable, spread over the "
          "devices, gradients summed on the owning device (best on one host / few GPUs); "
          "allreduce = one copy per device kept identical by a packed NCCL (GPU) or ring (CPU) "
          "all-reduce (best on many GPUs or PCIe without peer-to-peer). See tower_utils.py.",
          enum_values=list(tower_utils.REDUCTIONS))
  _define("integer", "grad_accum_steps", 1,
          "Gradient accumulation: micro-batches per update. The effective batch per update is "
          "train_batch_size * towers * processes * grad_accum_steps, with one gradient "
          "reduction per update; global_step counts updates.")
  _define("enum", "optimizer", "adamw",
          "adamw = BERT's Adam with decoupled weight decay; lamb = LAMB (layer-wise trust "
          "ratio) for very large batches. Both use the stock slots adam_m/adam_v.",
          enum_values=list(optimization.OPTIMIZERS))
  _define("float", "allreduce_pack_mb", 32.0,
          "--reduction=allreduce: gradients are packed into buffers of about this many MB, "
          "one all-reduce per buffer.")


def define_length_flags():
  """Length-aware batches of the fine-tuning scripts (input_data.LengthOptions)."""
  _define("bool", "pad_to_batch_max", True,
          "Pad each batch only to its longest example (rounded up to --pad_to_multiple_of, at "
          "most --max_seq_length) instead of to --max_seq_length, in training, eval and "
          "predict; eval and predict also batch examples of similar length together "
          "(--bucket_window) and restore the input order. Predictions are the same within "
          "float rounding; short texts run much faster. With --use_xla each distinct length "
          "compiles once.")
  _define("integer", "pad_to_multiple_of", 8,
          "With --pad_to_batch_max: round each batch's length up to a multiple of this (8 suits "
          "GPU tensor cores and limits the number of shapes XLA compiles).")
  _define("bool", "bucket_by_length", False,
          "Training: put examples of similar length in the same batch, so batches carry less "
          "padding. Each window of --bucket_window batches of shuffled examples is sorted by "
          "length, cut into batches and the batches shuffled; every example is still seen once "
          "per epoch. Needs --pad_to_batch_max.")
  _define("integer", "bucket_window", 32,
          "Batches per sorting window of --bucket_by_length (larger: less padding, less random "
          "batches). With --pad_to_batch_max, eval and predict also sort each window of this "
          "many batches by length, and put the outputs back in input order.")


def define_periodic_eval_flags(default_metric, metric_examples):
  """Evaluation during training, the best checkpoint and early stopping (engine/periodic_eval.py).

  Args:
    default_metric: the script's --best_metric default, e.g. "eval_accuracy".
    metric_examples: the metrics the script's eval gives, for the help text.
  """
  _define("integer", "eval_every_n_steps", 0,
          "Evaluate on the dev set every this many steps during training (and at its end), "
          "saving a checkpoint there first; metrics go to TensorBoard (output_dir/eval) and "
          "output_dir/eval_history.tsv. 0: only --do_eval after training.")
  _define("string", "best_metric", default_metric,
          "The eval metric that picks the best checkpoint: a key of eval_results.txt (%s; "
          "metrics with 'loss' in their name: lower is better; others: higher)." %
          metric_examples)
  _define("bool", "keep_best", False,
          "With --eval_every_n_steps: keep the best checkpoint by --best_metric in "
          "output_dir/best/, apart from the rolling checkpoints (--keep_checkpoint_max never "
          "deletes it; a resumed run keeps comparing against it).")
  _define("integer", "early_stopping_patience", 0,
          "With --eval_every_n_steps: stop training after this many evaluations in a row "
          "without a better --best_metric (the checkpoint of the stop is saved). 0: never.")
  _define("bool", "use_best_checkpoint", False,
          "Evaluate, predict and export with the checkpoint kept by --keep_best "
          "(output_dir/best/) instead of the latest one.")


def check_periodic_eval_flags():
  """Raises InputError for evaluation-during-training flags that cannot work together."""
  for name in ("eval_every_n_steps", "early_stopping_patience"):
    if getattr(FLAGS, name) < 0:
      raise InputError("--%s=%d: expected an integer >= 0 (0: off)" %
                       (name, getattr(FLAGS, name)))
  for name in ("keep_best", "early_stopping_patience"):
    if getattr(FLAGS, name) and not FLAGS.eval_every_n_steps:
      raise InputError("--%s needs evaluation during training: set --eval_every_n_steps "
                       "(and provide the dev set)" % name)
  if FLAGS.use_best_checkpoint and FLAGS.do_train and not FLAGS.keep_best:
    raise InputError("--use_best_checkpoint with --do_train needs --keep_best (and "
                     "--eval_every_n_steps) to keep a best checkpoint")


def reads_dev_set():
  """Whether the run reads the dev set: --do_eval, or --eval_every_n_steps while it trains
  (without --do_eval it evaluates during training only, in every run script)."""
  return bool(FLAGS.do_eval or (FLAGS.eval_every_n_steps and FLAGS.do_train))


def check_best_metric(metrics):
  """Raises InputError unless --best_metric is one of `metrics` (what the script's eval gives)."""
  if FLAGS.best_metric not in metrics:
    raise InputError("--best_metric=%s: expected one of %s" %
                     (FLAGS.best_metric, ", ".join(metrics)))


def define_predict_flags():
  """--predict_file, --predict_format, --predict_output (engine/predict_input.py)."""
  _define("string", "predict_file", None,
          "Predict the examples of this file instead of data_dir's test set (implies "
          "--do_predict; needs no --data_dir): a TSV in the test file's layout, plain text "
          "with one example per line (every line, an empty one too, gets one output line), or "
          "- for standard input. See --predict_format.")
  _define("enum", "predict_format", "auto",
          "How to read --predict_file: tsv (the test file's layout, read as test.tsv is), "
          "text (one example per line) or auto (tsv when some line holds a tab, else text).",
          enum_values=list(predict_input.FORMATS))
  _define("string", "predict_output", None,
          "Where the predictions go, one line per example in input order (default "
          "output_dir/predict.txt; - for standard output). Scores go next to it as "
          "<name>_probabilities.tsv.")
  cli.also_writes("predict_output")


def define_epoch_flags():
  """--num_train_epochs, --num_train_steps and --warmup_proportion (the fine-tuning schedule)."""
  _define("float", "num_train_epochs", 3.0, "Total number of training epochs.")
  _define("float", "warmup_proportion", 0.1,
          "Proportion of training for linear learning rate warm-up (0.1 = 10%).")
  define_num_train_steps(0, "Train this many steps (updates of the global batch) instead of "
                            "--num_train_epochs (0: from the epochs).")


def define_num_train_steps(default, help_text):
  """--num_train_steps (defined once, whichever run script is imported first)."""
  _define("integer", "num_train_steps", default, help_text)


def define_tpu_flags_removed():
  """Stock TPU flags, accepted for drop-in compatibility of users' scripts and ignored."""
  _define("bool", "use_tpu", False, "Ignored: TPUs are not supported (multi-GPU towers are).")
  _define("string", "tpu_name", None, "Ignored (no TPU support).")
  _define("string", "tpu_zone", None, "Ignored (no TPU support).")
  _define("string", "gcp_project", None, "Ignored (no TPU support).")
  _define("string", "master", None, "Ignored (no TPU support).")
  _define("integer", "num_tpu_cores", 8, "Ignored (no TPU support).")
  _define("integer", "iterations_per_loop", 1000, "Ignored (no TPU support).")


# Flags whose value must lie in a range: name -> (lowest, highest, whether lowest is allowed).
_FLAG_RANGES = {
    "learning_rate": (0.0, float("inf"), False),
    "num_train_epochs": (0.0, float("inf"), False),
    "warmup_proportion": (0.0, 1.0, True),
    "layerwise_lr_decay": (0.0, 1.0, False),
    "num_warmup_steps": (0, float("inf"), True),
    "keep_checkpoint_max": (0, float("inf"), True),
    "collective_timeout_s": (0.0, float("inf"), False),
    "allreduce_pack_mb": (0.0, float("inf"), False),
}


def check_shared_flags():
  """Checks the batch sizes, learning rate, schedule, speed, cluster and output flags
  (InputError), before any work."""
  for name in ("train_batch_size", "eval_batch_size", "predict_batch_size",
               "save_checkpoints_steps", "log_every_n_steps", "pad_to_multiple_of",
               "bucket_window"):
    if name in FLAGS:
      cli.require_positive(getattr(FLAGS, name), name)
  if "bucket_by_length" in FLAGS and FLAGS.bucket_by_length and not FLAGS.pad_to_batch_max:
    raise InputError("--bucket_by_length needs --pad_to_batch_max (bucketing only saves "
                     "time when each batch is padded to its longest example)")
  # run_rewrite_finetune.py's default 0 means "from --num_train_epochs".
  if "num_train_steps" in FLAGS and (FLAGS.num_train_steps or FLAGS["num_train_steps"].default):
    cli.require_positive(FLAGS.num_train_steps, "num_train_steps")
  for name, (low, high, low_ok) in sorted(_FLAG_RANGES.items()):
    value = getattr(FLAGS, name) if name in FLAGS else None
    if value is not None and not ((value > low or (low_ok and value == low)) and value <= high):
      raise InputError("--%s=%s: expected a number %s %g%s" % (
          name, value, ">=" if low_ok else ">", low,
          "" if high == float("inf") else " and <= %g" % high))
  if "use_fp16" in FLAGS and FLAGS.use_fp16 and FLAGS.use_bf16:
    raise InputError("--use_fp16 and --use_bf16 exclude each other: choose one")
  if "predict_output" in FLAGS and FLAGS.predict_output:
    _check_predict_output(FLAGS.predict_output)


def _check_predict_output(path):
  """--predict_output must name a file that can be written (checked before any inference)."""
  if path != predict_input.STDIN:
    cli.require_output_file(path, "predict_output")