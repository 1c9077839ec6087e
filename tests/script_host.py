"""Runs the project's scripts as processes forked from one that has already imported TensorFlow.

Starting `python run_classifier_mgpu.py ...` costs about 2 s of CPU before the script does any
work, nearly all of it importing TensorFlow; most fault-table cases (tests/fault_cases.py) fail
on their input well before any TensorFlow work. A `ScriptHost` is one long-lived process that
imports the scripts' modules once (not the scripts themselves: their flags are not defined),
then forks a child for each run. The child is a process of its own, as a subprocess would be:
its own session and process group, its own pid to signal or kill -9 (with the signal
dispositions and mask of a fresh `python`: `_fresh_signals`), the host's mount namespace, umask
and resource limits (those of the caller that started the host), stdout and stderr on pipes
of the caller, the working directory and argv of `python script args...`; it runs the script
with runpy as `__main__` (its `if __name__ == "__main__":` block, so `cli.run_main` and absl's
flag parsing), and exits as the interpreter would (non-daemon threads joined, atexit handlers
run, streams flushed) with the script's exit status. Nothing a run changes reaches the next
one: each starts from the host's state after its imports.

  host = ScriptHost(["run_classifier_mgpu.py"], env)   # starts the host process
  proc = host.start("run_classifier_mgpu.py", ["--do_train", ...])  # like subprocess.Popen
  proc.wait(); proc.returncode; proc.stderr.read()
  host.close()

The host itself is this file run as a script: `python tests/script_host.py SOCKET SCRIPT...`.
"""

import atexit
import faulthandler
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


class HostedProcess(object):
  """A run forked by the host, with the parts of subprocess.Popen that the tests use."""

  def __init__(self, args, conn, stderr, stdout):
    self.args = args
    self._conn = conn
    self.stderr = stderr
    self.stdout = stdout
    self.returncode = None
    self._texts = {}  # "out", "err": what communicate read to the end.
    self.pid = int(self._read_line())

  def _read_line(self, timeout=None):
    """The next line the host sends about this run (its pid, then its exit status)."""
    self._conn.settimeout(timeout)
    data = b""
    while not data.endswith(b"\n"):
      chunk = self._conn.recv(64)
      if not chunk:
        raise RuntimeError("the script host ended before the run did")
      data += chunk
    return data.decode()

  def poll(self):
    if self.returncode is None and select.select([self._conn], [], [], 0)[0]:
      self.returncode = int(self._read_line())
      self._conn.close()
    return self.returncode

  def wait(self, timeout=None):
    if self.returncode is None:
      try:
        self.returncode = int(self._read_line(timeout))
      except socket.timeout:
        raise subprocess.TimeoutExpired("hosted process %d" % self.pid, timeout)
      self._conn.close()
    return self.returncode

  def send_signal(self, signum):
    if self.returncode is None:
      os.kill(self.pid, signum)

  def dump_stacks(self, seconds=2.0):
    """Has the run print every thread's Python stack to its stderr (faulthandler, registered
    for SIGUSR2 in `_become`), then waits `seconds` for it: what a run that must be killed
    at its bound was waiting for."""
    if self.returncode is None:
      os.kill(self.pid, signal.SIGUSR2)
      try:
        self.wait(seconds)
      except subprocess.TimeoutExpired:
        pass

  def kill(self):
    """SIGKILL to the run's process group (it is the leader of its own session)."""
    if self.returncode is None:
      os.killpg(self.pid, signal.SIGKILL)

  def communicate(self, input=None, timeout=None):  # pylint: disable=redefined-builtin
    """Reads stdout and stderr to the end and waits for the exit; (stdout, stderr) as text.
    Past `timeout` seconds the run is killed and subprocess.TimeoutExpired raised. (The run's
    stdin is given to ScriptHost.start: `input` must be None.)"""
    assert input is None, "give the run's stdin to ScriptHost.start"
    texts = self._texts  # Kept: after a timeout, the next call returns what the run printed.
    readers = [threading.Thread(target=lambda n=n, f=f: texts.update({n: f.read()}), daemon=True)
               for n, f in (("out", self.stdout), ("err", self.stderr)) if f and n not in texts]
    for reader in readers:
      reader.start()
    try:
      self.wait(timeout)
    except subprocess.TimeoutExpired:
      self.dump_stacks()
      self.kill()
      self.wait()
      raise
    finally:
      for reader in readers:
        reader.join()
    return texts.get("out"), texts.get("err")


class ScriptHost(object):
  """The host process (see the module docstring); `start` forks one run of a script."""

  def __init__(self, scripts, env, timeout=120):
    self._dir = tempfile.mkdtemp(prefix="script-host-")
    self._socket = os.path.join(self._dir, "socket")
    self._log = os.path.join(self._dir, "host.log")  # What importing TensorFlow prints.
    with open(self._log, "w") as log:
      self._proc = subprocess.Popen(
          [sys.executable, os.path.abspath(__file__), self._socket] + list(scripts),
          cwd=REPO_ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
          text=True)
    self._timeout = timeout
    self._ready = False
    self._lock = threading.Lock()
    self.scripts = set(scripts)
    self.env = dict(env)

  def _wait_until_ready(self):
    """The host imports for a few seconds after it starts; its first run waits for that."""
    with self._lock:
      if not self._ready:
        ready = select.select([self._proc.stdout], [], [], self._timeout)[0]
        if not ready or self._proc.stdout.readline().strip() != "ready":
          with open(self._log) as log:
            raise RuntimeError("the script host did not start within %d s:\n%s" %
                               (self._timeout, log.read()[-3000:]))
        self._ready = True

  def start(self, script, args, cwd=REPO_ROOT, env=None, stdin=None, stdout=False,
            errors="replace"):
    """Forks a run of `script` (a path relative to the repo root) with `args`.

    Args:
      script, args: as in `python script args...`.
      cwd: the run's working directory.
      env: the run's environment (default: the host's). What TensorFlow read when the host
        imported it stays the host's: callers give an env that differs from it only in
        variables read later (script_runner._READ_ON_IMPORT names those that must agree).
      stdin: text for the run's standard input (written by a thread), or None for /dev/null.
      stdout: whether to pipe the run's stdout (else /dev/null).
      errors: how undecodable bytes of stdout and stderr are read.

    Returns:
      a HostedProcess whose .stderr (and .stdout if asked) are text pipes.
    """
    assert script in self.scripts, script
    self._wait_until_ready()
    devnull = lambda mode: (None, os.open(os.devnull, mode))
    in_write, in_read = os.pipe()[::-1] if stdin is not None else devnull(os.O_RDONLY)
    out_read, out_write = os.pipe() if stdout else devnull(os.O_WRONLY)
    err_read, err_write = os.pipe()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
      conn.connect(self._socket)
      request = json.dumps({"script": script, "args": [str(a) for a in args], "cwd": str(cwd),
                            "env": dict(self.env if env is None else env)})
      socket.send_fds(conn, [request.encode()], [in_read, out_write, err_write])
    finally:
      for fd in (in_read, out_write, err_write):
        os.close(fd)
    if stdin is not None:
      threading.Thread(target=_write_and_close, args=(in_write, stdin), daemon=True).start()
    text = lambda fd: os.fdopen(fd, "r", encoding="utf-8", errors=errors) if fd else None
    return HostedProcess([script] + [str(a) for a in args], conn, text(err_read),
                         text(out_read))

  def close(self):
    """Ends the host (its runs still going are not touched) and removes its socket."""
    if self._proc.poll() is None:
      self._proc.stdin.close()  # The host ends at end of file on its stdin.
      try:
        self._proc.wait(30)
      except subprocess.TimeoutExpired:
        self._proc.kill()
        self._proc.wait()
    self._proc.stdout.close()
    shutil.rmtree(self._dir, ignore_errors=True)


def _write_and_close(fd, text):
  with os.fdopen(fd, "w", encoding="utf-8") as f:
    try:
      f.write(text)
    except BrokenPipeError:  # The run ended without reading it all, as a process may.
      pass


# ---------------------------------------------------------------------------------------------
# The host process.


def _preload(scripts):
  """Imports every module that the scripts import at their top level (not the scripts)."""
  import ast  # pylint: disable=g-import-not-at-top
  import importlib  # pylint: disable=g-import-not-at-top
  for script in scripts:
    with open(os.path.join(REPO_ROOT, script), encoding="utf-8") as f:
      tree = ast.parse(f.read())
    for node in tree.body:
      if isinstance(node, ast.Import):
        for alias in node.names:
          importlib.import_module(alias.name)
      elif isinstance(node, ast.ImportFrom) and not node.level:
        module = importlib.import_module(node.module)
        for alias in node.names:
          if not hasattr(module, alias.name):
            importlib.import_module("%s.%s" % (node.module, alias.name))


def _serve(listener):
  """Accepts runs until stdin closes. Returns the request in a forked child, None in the host."""
  runs = {}  # pid -> connection of the caller
  while True:
    readable = select.select([listener, sys.stdin], [], [], 0.01)[0]
    if sys.stdin in readable and not sys.stdin.buffer.read1(1):
      return None
    if listener in readable:
      conn, _ = listener.accept()
      message, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
      sys.stdout.flush()
      sys.stderr.flush()
      pid = os.fork()
      if pid == 0:
        listener.close()
        for other in list(runs.values()) + [conn]:
          other.close()
        return json.loads(message.decode()), fds
      for fd in fds:
        os.close(fd)
      conn.sendall(b"%d\n" % pid)
      runs[pid] = conn
    while runs:
      pid, status = os.waitpid(-1, os.WNOHANG)
      if pid == 0:
        break
      conn = runs.pop(pid)
      try:
        conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
      except OSError:  # The caller is gone.
        pass
      conn.close()


def _fresh_signals():
  """In the forked child: the signal state a fresh `python` started from a shell has, whatever
  the host inherited from whoever started it (a test runner that ignores SIGINT, say): no
  signal blocked, no wakeup fd, every disposition the default except those CPython sets at
  its start (SIGINT raises KeyboardInterrupt; SIGPIPE and SIGXFSZ are ignored, so that a
  write fails with an OSError instead). So a signal sent to a run (the fault table's SIGINT,
  SIGTERM and kill -9 cases) meets what it would meet in a process of its own: the handlers
  the script installs itself (engine/cli.py's), or these."""
  signal.pthread_sigmask(signal.SIG_SETMASK, [])
  signal.set_wakeup_fd(-1)
  ignored = (signal.SIGPIPE, signal.SIGXFSZ)
  for signum in signal.valid_signals():
    if signum in (signal.SIGKILL, signal.SIGSTOP):
      continue
    handler = (signal.default_int_handler if signum == signal.SIGINT else
               signal.SIG_IGN if signum in ignored else signal.SIG_DFL)
    try:
      signal.signal(signum, handler)
    except (OSError, ValueError):  # The C library's own (32, 33): not ours to set.
      pass


def _become(request, fds):
  """In the forked child: the process `python <script> <args>` would be, then runs it."""
  os.setsid()
  _fresh_signals()
  for target, fd in enumerate(fds):  # stdin, stdout, stderr
    if fd != target:
      os.dup2(fd, target)
      os.close(fd)
  faulthandler.register(signal.SIGUSR2, all_threads=True)  # HostedProcess.dump_stacks
  os.chdir(request["cwd"])
  os.environ.clear()
  os.environ.update(request["env"])
  script = os.path.join(REPO_ROOT, request["script"])
  sys.argv = [script] + request["args"]
  sys.path[0] = os.path.dirname(script)
  try:
    runpy.run_path(script, run_name="__main__")
    status = 0
  except SystemExit as e:
    status = _exit_status(e.code)
  except KeyboardInterrupt:
    status = -signal.SIGINT
  except BaseException:  # pylint: disable=broad-except
    sys.excepthook(*sys.exc_info())
    status = 1
  _exit(status)


def _exit_status(code):
  """The exit status the interpreter gives SystemExit(code)."""
  if code is None:
    return 0
  if isinstance(code, int):
    return code & 0xFF
  print(code, file=sys.stderr)
  return 1


def _exit(status):
  """Exits as the interpreter does (threads joined, atexit handlers run, streams flushed), but
  without tearing down every module: in a forked child that would copy each page of the host
  (copy on write), about 2 s of CPU. A negative status is death by that signal (an uncaught
  KeyboardInterrupt dies of SIGINT, as in Python)."""
  for thread in threading.enumerate():
    if thread is not threading.main_thread() and not thread.daemon:
      thread.join()
  atexit._run_exitfuncs()  # pylint: disable=protected-access
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):
      pass
  if status < 0:
    signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
  os._exit(status)  # pylint: disable=protected-access


def main():
  listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
  listener.bind(sys.argv[1])
  listener.listen(16)
  _preload(sys.argv[2:])
  print("ready", flush=True)
  job = _serve(listener)
  if job:
    _become(*job)


if __name__ == "__main__":
  main()
