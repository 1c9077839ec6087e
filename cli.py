"""Command-line plumbing shared by every script: one-line errors for bad input.

Scripts raise `InputError` for anything the user can fix (a missing file, a malformed row, a bad
flag). `run_main` turns it into a single line on stderr and exit status 2, so users never see a
stack trace from deep inside TensorFlow for a mistake in their own data or flags.
"""

import os
import sys


class InputError(ValueError):
  """A problem with user-supplied input; the message names the file/line/flag and what was expected."""


def require_file(path, flag_name):
  """Raises InputError unless `path` names an existing file; returns `path`."""
  if not path:
    raise InputError("--%s is required" % flag_name)
  if not os.path.isfile(path):
    raise InputError("--%s=%s: no such file" % (flag_name, path))
  return path


def require_positive(value, flag_name):
  """Raises InputError unless `value` is an integer >= 1; returns it."""
  if value is None or int(value) < 1:
    raise InputError("--%s=%s: expected an integer >= 1" % (flag_name, value))
  return int(value)


def run_main(main_fn, argv=None):
  """Runs `main_fn(argv)` through absl.app, reporting InputError as one line and exit code 2."""
  from absl import app  # pylint: disable=g-import-not-at-top

  def _guarded(args):
    try:
      return main_fn(args)
    except InputError as e:
      sys.stderr.write("error: %s\n" % e)
      sys.stderr.flush()
      sys.exit(2)

  app.run(_guarded, argv=argv)
