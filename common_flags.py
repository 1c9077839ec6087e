"""Flags shared by the run_*_mgpu.py scripts, with the stock google-research/bert names.

Each script calls the `define_*` groups it needs, then its own script-specific flags. Defining is
idempotent, so several scripts can be imported into one process (as the tests do).
"""

from absl import flags

FLAGS = flags.FLAGS


def _define(kind, name, default, help_text):
  """Defines flag `name` unless it already exists (e.g. another run script was imported)."""
  if name in FLAGS:
    return
  getattr(flags, "DEFINE_" + kind)(name, default, help_text)


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
          "chinese_L-12_H-768_A-12/bert_model.ckpt). Ignored when output_dir has a checkpoint.")
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
  """Batch sizes, learning rate, checkpointing, logging and the tower count."""
  _define("integer", "n_gpus", 1,
          "Number of towers (model replicas). Tower i runs on GPU i mod the number of GPUs in "
          "CUDA_VISIBLE_DEVICES (on CPU-only machines, on virtual CPU device i). The global "
          "batch per step is train_batch_size * n_gpus.")
  _define("integer", "train_batch_size", 32, "Training batch size per tower.")
  _define("integer", "eval_batch_size", 8, "Batch size for eval.")
  _define("integer", "predict_batch_size", 8, "Batch size for predict, per tower.")
  _define("float", "learning_rate", default_learning_rate, "The peak learning rate for Adam.")
  _define("integer", "save_checkpoints_steps", 1000, "How often to save a checkpoint (steps).")
  _define("integer", "keep_checkpoint_max", 5, "How many recent checkpoints to keep.")
  _define("integer", "log_every_n_steps", 10,
          "How often to log step, loss, learning rate, examples/sec and ETA, and to write "
          "TensorBoard summaries.")
  _define("integer", "random_seed", 12345, "Seed for shuffling and initialisation.")


def define_tpu_flags_removed():
  """Stock TPU flags, accepted for drop-in compatibility of users' scripts and ignored."""
  _define("bool", "use_tpu", False, "Ignored: TPUs are not supported (multi-GPU towers are).")
  _define("string", "tpu_name", None, "Ignored (no TPU support).")
  _define("string", "tpu_zone", None, "Ignored (no TPU support).")
  _define("string", "gcp_project", None, "Ignored (no TPU support).")
  _define("string", "master", None, "Ignored (no TPU support).")
  _define("integer", "num_tpu_cores", 8, "Ignored (no TPU support).")
  _define("integer", "iterations_per_loop", 1000, "Ignored (no TPU support).")
