"""Child processes that die with their parent: every process the product starts goes through here.

A child started with plain subprocess outlives a parent killed with SIGKILL (kill -9, the OOM
killer): an export's build_saved_model.py went on building and later wrote a whole SavedModel
beside the one a rerun was building, and a benchmark's worker kept its cores. `start` and `run`
are subprocess.Popen and subprocess.run whose child asks the kernel (Linux prctl
PR_SET_PDEATHSIG) for SIGKILL when its parent dies, then checks that the parent is still there
(it may have died between the fork and the request). A multiprocessing pool's workers call
`follow` from the pool's initializer. Elsewhere than Linux a child is started as
subprocess starts it.

The kernel sends the signal when the *thread* that started the child ends: start children from
a thread that lives as long as they do (the main thread).

What a killed child leaves (a build folder named by the parent's pid, say) is for the next run
to remove, as atomic_files does with the temporaries of a killed process.
"""

import ctypes
import os
import signal
import subprocess
import sys

from core import atomic_files

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _prctl():
  """libc's prctl, looked up in the parent: the forked child only calls it."""
  if not sys.platform.startswith("linux"):
    return None
  try:
    return ctypes.CDLL(None, use_errno=True).prctl
  except (OSError, AttributeError):
    return None


_PRCTL = _prctl()


def _arm(still_there):
  """Asks for SIGKILL when this process's parent dies; then, if `still_there()` is false (what
  it follows died before the request), follows it now."""
  if _PRCTL is not None:
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
  if not still_there():
    os.kill(os.getpid(), signal.SIGKILL)


def _dies_with(parent_pid):
  """The preexec_fn of a child of parent_pid: SIGKILL when the parent dies."""
  return lambda: _arm(lambda: os.getppid() == parent_pid)


def follow(run_pid):
  """For a process that this module did not start: a multiprocessing pool's worker, from its
  initializer. Its parent (the pool's forkserver, which ends when the run `run_pid` that
  started the pool closes its end of their pipe; or the run itself) dying kills it; if the run
  has already died, it dies now."""
  _arm(lambda: atomic_files.process_alive(run_pid))


def start(args, **kwargs):
  """subprocess.Popen(args, **kwargs), the child killed when this process dies."""
  return subprocess.Popen(args, preexec_fn=_dies_with(os.getpid()), **kwargs)


def run(args, **kwargs):
  """subprocess.run(args, **kwargs), the child killed when this process dies."""
  return subprocess.run(args, preexec_fn=_dies_with(os.getpid()), **kwargs)
