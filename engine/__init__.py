"""The engine every feature shares: flags, the run setup, the training and inference loops, input.

- `cli.py`: the boundary where failures become one `error:` line and an exit status; the one
  file-glob helper (`expand_files`).
- `tf_env.py`: environment TensorFlow reads on import; entry scripts import it first.
- `common_flags.py`: the flags the run scripts share (stock google-research/bert names): their
  definitions, effects and value checks.
- `run_helpers.py`: what the run scripts build from the flags and their RunSetup: config and
  tokenizer, run identity, train spec, input functions, eval checkpoint, outputs.
- `run_setup.py`: the RunSetup built once from the flags at start-up (parallel spec, chief or
  not, where this process writes, what it restores, precision, global batch).
- `training.py`: the training loop (towers, accumulation, resume, divergence, early stop).
- `head_first.py`: --head_first_steps, the parts a checkpoint lacks trained first.
- `divergence.py`: when the loss left its normal range; the checkpoint safe to resume.
- `checkpoints.py`: the newest intact checkpoint, restore, finite-only saves, export/.
- `inference.py`: eval and predict over every tower, outputs back in input order.
- `input_data.py`: TFRecord datasets, length-aware batching, cache keys.
- `periodic_eval.py`: evaluation during training, the best checkpoint, early stopping.
- `predict_input.py`: --predict_file / --predict_output for any file or stdin.
- `run_info.py`: output_dir/run_info.json, what produced a run directory.

The engine imports the model layer (modeling, optimization, tokenization, tower_utils,
parallel/, heads/) and core/, never a feature (classifier/, pretraining/, rewrite/, serving/).
"""
