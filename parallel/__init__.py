"""The parallel engine behind tower_utils.py: who takes part, how they talk, how gradients meet.

- `cluster.py`: the processes of a run (one per host), from `--worker_hosts`/`--task_index`,
  `TF_CONFIG` or Slurm; the TensorFlow server of this process and the start-up handshake.
- `collective.py`: collective keys, packed all-reduce and the broadcast from the chief, every
  collective with a timeout.
- `strategies.py`: one class per parallel mode behind one interface (where variables live, how
  device gradient sums are reduced, what runs after init/restore, what is saved, who is chief).

Run scripts and models never import this package; they go through tower_utils and training.
"""
