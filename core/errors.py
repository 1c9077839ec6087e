"""The project's error types: the bottom of the import graph, so every layer may raise them.

`InputError` is anything the user can fix (a flag, a file, a line, a config field); the one
boundary that turns it into `error: ...` and exit status 2 is engine.cli.run_main. `Interrupted`
is Ctrl-C or SIGTERM, raised at a safe point by the training loop.
"""


class InputError(ValueError):
  """Something the user can fix; the message names the file/line/flag/path and what was expected."""


class Interrupted(KeyboardInterrupt):
  """Ctrl-C or SIGTERM; `detail` says where the run stopped and what it saved."""

  def __init__(self, signum, detail=None):
    super(Interrupted, self).__init__(signum, detail)
    self.signum = signum
    self.detail = detail
