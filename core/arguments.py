"""The command line of the tools written with argparse (the run scripts use absl flags and
engine/cli.run_main).

argparse answers a bad argument with its usage and a message on two lines and exit code 2; the
project's rule is one `error: ...` line. `Parser` raises InputError instead, and `run` prints
it (and a Ctrl-C) as that line.
"""

import argparse
import sys

from core.errors import InputError


class Parser(argparse.ArgumentParser):
  """argparse.ArgumentParser whose errors are InputError (`--help` still prints and exits 0)."""

  def error(self, message):
    raise InputError(message)


def run(body):
  """body()'s exit code; an InputError is one `error:` line and exit 2, a Ctrl-C one line and
  exit 130 (the tools write nothing but whole files, so nothing is left half written)."""
  try:
    return body()
  except InputError as e:
    print("error: %s" % e, file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print("error: interrupted (Ctrl-C); nothing was left half written", file=sys.stderr)
    return 130
