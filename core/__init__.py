"""The bottom layer: what every other module may import; it imports nothing of ours but core.

- `errors.py`: `InputError` (the user can fix it: one `error:` line, exit 2) and `Interrupted`.
- `atomic_files.py`: files that appear whole or not at all (write to a temporary, then rename).
- `formatting.py`: durations as H:MM:SS for every progress line.
- `dropped_input.py`: the one line (a warning above 10%) saying how much input a run left out.
- `children.py`: the one way to start a child process; it dies with its parent (kill -9 too).
- `arguments.py`: argparse for the tools, a bad argument as one `error:` line.
- `json_files.py`: the one checked way to read a JSON file (run_info.json, export_config.json,
  configs): one `error:` line naming the file for anything wrong in it.
"""
