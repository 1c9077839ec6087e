"""Files that appear whole or not at all: written under a temporary name, then renamed.

Used for every file a script builds from the user's data (feature caches, labels.txt,
run_info.json, create_pretraining_data.py's records). A failed write (disk full, Ctrl-C, a bad
row) removes its temporary file; one left by a killed process is removed by
`remove_stale_temporaries` at the next start in that directory. This module does not import
TensorFlow (create_pretraining_data.py runs without it).
"""

import os
import shutil

_TMP_SUFFIX = ".tmp-"


def temporary_path(path):
  """Where `path` is written before it is renamed into place: path.tmp-<pid>."""
  return "%s%s%d" % (path, _TMP_SUFFIX, os.getpid())


def write_atomically(path, write_fn):
  """Runs write_fn(tmp_path) then renames tmp_path to `path`, so a crash leaves no half file."""
  tmp_path = temporary_path(path)
  try:
    write_fn(tmp_path)
    os.replace(tmp_path, path)
  except BaseException:
    remove_quietly(tmp_path)
    raise


def remove_quietly(path):
  """Removes `path` (a file, or a directory with its contents) if it exists; a failure to remove
  is ignored (we are already failing)."""
  try:
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path)
    else:
      os.remove(path)
  except OSError:
    pass


def remove_stale_temporaries(directory):
  """Removes the temporary files (and directories, e.g. a SavedModel being built) in `directory`
  whose writing process is gone; returns their names."""
  removed = []
  if not os.path.isdir(directory):
    return removed
  for name in os.listdir(directory):
    head, suffix, pid = name.rpartition(_TMP_SUFFIX)
    if head and suffix and pid.isdigit() and not process_alive(int(pid)):
      remove_quietly(os.path.join(directory, name))
      removed.append(name)
  return removed


def process_alive(pid):
  """Whether a process with this id exists."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True
