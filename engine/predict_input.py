"""--predict_file and --predict_output: predict any file (TSV, plain text or stdin) into any file.

A run script passes its own readers: `read_tsv(path)` for its test layout and `make_example(
line_number, text)` for one line of plain text. The file is a path or `-` (standard input,
copied once into a temporary file so that the readers and their messages work as for a path;
messages name it `<stdin>`).
"""

import atexit
import os
import shutil
import sys
import tempfile

from absl import logging

from core import atomic_files
from core.errors import InputError
from engine import cli

FORMATS = ("auto", "tsv", "text")
STDIN = "-"
STDIN_NAME = "<stdin>"


def read(path, fmt, read_tsv, make_example, stdin=None):
  """The examples of --predict_file, in input order.

  Args:
    path: a file, or "-" for `stdin`.
    fmt: "tsv" (read_tsv: the script's test layout), "text" (one example per line; every line,
      an empty one too, is an example, so the output has one line per input line) or "auto"
      (tsv when some line holds a tab, else text).
    read_tsv: callable(path) -> list of examples.
    make_example: callable(line_number, text) -> one example of a plain-text line.
    stdin: binary stream read when path is "-" (default sys.stdin.buffer).

  Raises:
    InputError naming the file (`<stdin>`), line and what was expected.
  """
  if fmt not in FORMATS:
    raise InputError("--predict_format=%s: expected one of %s" % (fmt, ", ".join(FORMATS)))
  if path != STDIN:
    cli.require_file(path, "predict_file")
    return _read_path(path, fmt, read_tsv, make_example, path)
  data = (stdin or sys.stdin.buffer).read()
  with tempfile.TemporaryDirectory(prefix="bert-mgpu-stdin-") as tmp:
    tmp_path = os.path.join(tmp, "stdin")
    with open(tmp_path, "wb") as f:
      f.write(data)
    try:
      return _read_path(tmp_path, fmt, read_tsv, make_example, STDIN_NAME)
    except InputError as e:
      raise InputError(str(e).replace(tmp_path, STDIN_NAME))


def _read_path(path, fmt, read_tsv, make_example, name):
  if fmt == "auto":
    with open(path, "rb") as f:
      fmt = "tsv" if b"\t" in f.read() else "text"
    logging.info("--predict_file=%s: read as %s", name,
                 "TSV in the test file's layout" if fmt == "tsv" else
                 "plain text, one example per line")
  if fmt == "tsv":
    return read_tsv(path)
  examples = [make_example(line_number, text) for line_number, text in cli.text_lines(path)]
  if not examples:
    raise InputError("%s: empty file: no lines to predict" % name)
  return examples


def write_lines(path, lines, flag="output_dir"):
  """Writes one line per item to `path` ("-": standard output); see write_line_files."""
  if path == STDIN:
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()
    return
  write_line_files([(path, lines)], flag)


def write_line_files(files, flag="output_dir"):
  """Writes files of one line per item that belong together (predictions beside their scores):
  each whole, and none replaced unless all were written (atomic_files.write_all_atomically).

  Args:
    files: list of (path, list of str lines without newline).
    flag: the flag that chose the paths ("predict_output", "output_dir"), named by the error
      when the disk is full or read-only.
  """
  with cli.writing(flag):
    atomic_files.write_all_atomically([
        (path, atomic_files.text_writer("".join(line + "\n" for line in lines)))
        for path, lines in files])
  for path, lines in files:
    logging.info("Wrote %d lines to %s", len(lines), path)


def probabilities_path(output):
  """Where the scores that go with the predictions in `output` are written."""
  return os.path.splitext(output)[0] + "_probabilities.tsv"


_SCRATCH = []


def scratch_dir():
  """A private directory for the records of --predict_file, removed when the process exits (a
  one-off file is not cached in --output_dir)."""
  if not _SCRATCH:
    _SCRATCH.append(tempfile.mkdtemp(prefix="bert-mgpu-predict-"))
    atexit.register(shutil.rmtree, _SCRATCH[0], True)
  return _SCRATCH[0]
