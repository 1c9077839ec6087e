"""Ending a benchmark worker process: the one way serving_compare.py and train_bench.py stop the
worker processes they talk to over stdin/stdout (one JSON line per answer)."""

import subprocess


def end(proc, stderr_file):
  """Asks `proc` to quit ("quit" on its stdin), waits up to 60 s, else kills it; closes the
  temporary file that holds its stderr. proc may be None (never started)."""
  if proc is not None:
    try:
      proc.stdin.write("quit\n")
      proc.stdin.close()
      proc.wait(timeout=60)
    except (OSError, subprocess.TimeoutExpired):
      proc.kill()
      proc.wait()
  stderr_file.close()
