"""The command-line parser of the tools written with argparse (the run scripts use absl flags).

argparse answers a bad argument with its usage and a message on two lines and exit code 2; the
project's rule is one `error: ...` line. `Parser` raises InputError instead, which the tool's
main prints as that line.
"""

import argparse

from core.errors import InputError


class Parser(argparse.ArgumentParser):
  """argparse.ArgumentParser whose errors are InputError (`--help` still prints and exits 0)."""

  def error(self, message):
    raise InputError(message)
