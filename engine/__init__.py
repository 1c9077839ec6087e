"""The engine every feature shares: flags, the training and inference loops, input, run files.

- `cli.py`: the boundary where failures become one `error:` line and an exit status.
- `tf_env.py`: environment TensorFlow reads on import; entry scripts import it first.
- `common_flags.py`: the flags the run scripts share (stock google-research/bert names).
- `training.py`: the training loop (towers, accumulation, checkpoints, resume, early stop).
- `input_pipeline.py`: TFRecord datasets, length-aware batching, cache keys.
- `periodic_eval.py`: evaluation during training, the best checkpoint, early stopping.
- `predict_input.py`: --predict_file / --predict_output for any file or stdin.
- `run_info.py`: output_dir/run_info.json, what produced a run directory.

The engine imports the model layer (modeling, optimization, tokenization, tower_utils,
parallel/, heads/) and core/, never a feature (classifier/, pretraining/, rewrite/, serving/).
"""
