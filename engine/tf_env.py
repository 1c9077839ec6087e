"""Environment TensorFlow reads when it is imported; every script imports this module first.

On a machine without an NVIDIA driver, or with CUDA_VISIBLE_DEVICES set to the empty string
(the documented way to run on CPU), TensorFlow still tries to start CUDA and logs
`failed call to cuInit: ...` at ERROR level, which reads like a failure of the run. There the
C++ log level is raised to 3 (errors that matter reach Python as exceptions, which cli.run_main
reports), unless the user set TF_CPP_MIN_LOG_LEVEL. On a machine with GPUs nothing changes.
"""

import ctypes.util
import os


def cpu_only():
  """Whether this process will run on CPU: GPUs hidden, or no CUDA driver library at all."""
  if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
    return True
  return not os.path.exists("/dev/nvidiactl") and ctypes.util.find_library("cuda") is None


if "TF_CPP_MIN_LOG_LEVEL" not in os.environ and cpu_only():
  os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
