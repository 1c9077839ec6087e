"""Files that appear whole or not at all: written under a temporary name, then renamed.

Used for every final file a script writes (feature caches, labels.txt, run_info.json,
eval_results.txt, predictions, export/, converted models, create_pretraining_data.py's
records); tests/test_writes_whole.py checks that no other module writes a file in place. Files
that belong together (predictions beside their scores, the files of a model folder) go through
one `write_all_atomically`: all are written under temporary names before any is renamed, so a
failure leaves the old set, never a new file beside a cut or an old one. A failed write (disk
full, Ctrl-C, a bad row) removes its temporary files; one left by a killed process is removed
by `remove_stale_temporaries` at the next start in that directory. This module does not import
TensorFlow (create_pretraining_data.py runs without it).
"""

import os
import re
import shutil

_TMP_SUFFIX = ".tmp-"


def temporary_path(path):
  """Where `path` is written before it is renamed into place: path.tmp-<pid>."""
  return "%s%s%d" % (path, _TMP_SUFFIX, os.getpid())


def final_path(path):
  """The file a temporary name (temporary_path, plus a checkpoint's suffix) stands for; other
  paths unchanged. For messages: a failed write names the file the user asked for."""
  head, suffix, rest = path.rpartition(_TMP_SUFFIX)
  pid, _, extension = rest.partition(".")
  if not (head and suffix and pid.isdigit()):
    return path
  return head + ("." + extension if extension else "")


def final_names(text):
  """`text` (a message) with each temporary name replaced by the file it stands for."""
  return re.sub(re.escape(_TMP_SUFFIX) + r"\d+", "", text)


def write_atomically(path, write_fn):
  """Runs write_fn(tmp_path) then renames tmp_path to `path`, so a crash leaves no half file."""
  write_all_atomically([(path, write_fn)])


def write_all_atomically(writes):
  """Writes files that belong together so that none is replaced unless all were written.

  Every write_fn(tmp_path) runs first; then every temporary is renamed into place. A failure
  (disk full, Ctrl-C) removes the temporaries and the folders this call made, and renames
  nothing, so the old files stay as they were.

  Args:
    writes: list of (path, write_fn). The folders of the paths are made when missing. A
      write_fn may also (or instead) write files named tmp_path + "." + suffix (a checkpoint's
      .index and .data-00000-of-00001); they become path + "." + suffix.
  """
  made = _make_folders(os.path.dirname(os.path.abspath(path)) for path, _ in writes)
  written = []
  try:
    for path, write_fn in writes:
      written.append((path, temporary_path(path)))
      write_fn(written[-1][1])
    for path, tmp_path in written:
      for name, suffix in _files_of(tmp_path):
        os.replace(name, path + suffix)
  except BaseException as e:
    for _, tmp_path in written:
      for name, _ in _files_of(tmp_path):
        remove_quietly(name)
    for folder in reversed(made):
      try:
        os.rmdir(folder)
      except OSError:
        pass
    if isinstance(e, OSError) and written:  # Name the file asked for, not its temporary.
      e.filename = final_path(e.filename) if isinstance(e.filename, str) else written[-1][0]
    raise


def _files_of(tmp_path):
  """(file, suffix) of what a write_fn wrote: tmp_path itself (suffix "") and any
  tmp_path + "." + suffix."""
  folder, base = os.path.split(tmp_path)
  if not os.path.isdir(folder):
    return []
  return [(os.path.join(folder, name), name[len(base):]) for name in sorted(os.listdir(folder))
          if name == base or name.startswith(base + ".")]


def _make_folders(folders):
  """Makes the missing folders (with their parents); returns those made, parents first."""
  made = []
  for folder in folders:
    missing = []
    while folder and not os.path.isdir(folder):
      missing.append(folder)
      parent = os.path.dirname(folder)
      if parent == folder:
        break
      folder = parent
    for path in reversed(missing):
      if not os.path.isdir(path):
        os.mkdir(path)
        made.append(path)
  return made


def text_writer(text):
  """A write_fn that writes `text` (utf-8)."""
  def write(tmp_path):
    with open(tmp_path, "w", encoding="utf-8") as f:
      f.write(text)
  return write


def bytes_writer(chunks):
  """A write_fn that writes the bytes objects of `chunks`, in order."""
  def write(tmp_path):
    with open(tmp_path, "wb") as f:
      for chunk in chunks:
        f.write(chunk)
  return write


def copy_writer(source):
  """A write_fn that copies the file `source`."""
  return lambda tmp_path: shutil.copyfile(source, tmp_path)


def write_text(path, text):
  """Writes `text` (utf-8) to `path`, whole or not at all."""
  write_atomically(path, text_writer(text))


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
    pid = pid.partition(".")[0]  # A checkpoint's temporary: out.tmp-<pid>.index
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
