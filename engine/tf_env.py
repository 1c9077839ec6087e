"""Environment TensorFlow reads when it is imported; every script imports this module first.

On a machine without an NVIDIA driver, or with CUDA_VISIBLE_DEVICES set to the empty string
(the documented way to run on CPU) or to -1, TensorFlow still tries to start CUDA and logs
`failed call to cuInit: ...` at ERROR level, which reads like a failure of the run. There the
C++ log level is raised to 3 (errors that matter reach Python as exceptions, which cli.run_main
reports), unless the user set TF_CPP_MIN_LOG_LEVEL to 0 or 1. TensorFlow 2.21 also prints absl's lines
from before its logging starts ("Could not find cuda drivers", "oneDNN custom operations are
on", "All log messages before absl::InitializeLog()"), which no log level reaches: there
TensorFlow is imported here with the C-level stderr pointed at /dev/null (an import error still
reaches the script as an exception), as are tf.compat.v1's deprecation notices; a user who sets
TF_CPP_MIN_LOG_LEVEL=0 or 1 sees all of it. On a machine with GPUs nothing changes.
"""

import contextlib
import ctypes.util
import os
import sys


def gpus_hidden():
  """Whether CUDA_VISIBLE_DEVICES hides every GPU: empty, or a first entry CUDA cannot name
  (`-1`, the other common way; CUDA ignores the list from its first invalid entry on)."""
  visible = os.environ.get("CUDA_VISIBLE_DEVICES")
  if visible is None:
    return False
  first = visible.split(",")[0].strip()
  return not first or first.startswith("-")


def cpu_only():
  """Whether this process will run on CPU: GPUs hidden, or no CUDA driver library at all."""
  if gpus_hidden():
    return True
  return not os.path.exists("/dev/nvidiactl") and ctypes.util.find_library("cuda") is None


@contextlib.contextmanager
def native_stderr_silenced():
  """File descriptor 2 on /dev/null inside, then stderr back: for the lines C++ code prints
  where no log level reaches (failures still reach Python as exceptions)."""
  sys.stderr.flush()
  saved = os.dup(2)
  devnull = os.open(os.devnull, os.O_WRONLY)
  try:
    os.dup2(devnull, 2)
    yield
  finally:
    os.dup2(saved, 2)
    os.close(saved)
    os.close(devnull)


def _import_tensorflow_quietly():
  """Imports TensorFlow with its start-up lines silenced. Ctrl-C while it loads (seconds, before
  any script has its signal handlers) is the one line the scripts give, exit 130, not a
  traceback through TensorFlow's modules."""
  try:
    with native_stderr_silenced():
      import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  except KeyboardInterrupt:
    sys.stderr.write("error: interrupted by SIGINT while TensorFlow was loading: nothing was "
                     "written; rerun the same command\n")
    sys.exit(130)
  # tf.compat.v1's "X is deprecated and will be removed" lines are about this project's
  # internals (graph mode is the design), not about anything the user runs.
  from tensorflow.python.util import deprecation  # pylint: disable=g-import-not-at-top
  deprecation._PRINT_DEPRECATION_WARNINGS = False  # pylint: disable=protected-access


_LEVEL = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
# Whether TensorFlow's start-up lines are silenced here (0 or 1: the user wants the lines).
QUIET = cpu_only() and (_LEVEL is None or _LEVEL in ("2", "3"))
if QUIET:
  os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"  # 2 would still show cuInit's ERROR line
  _import_tensorflow_quietly()
