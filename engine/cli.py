"""Command-line plumbing shared by every script: one line for every error a user can meet.

`run_main` is the one boundary where failures become what the user sees:

- `InputError` (bad data, flags, configs, vocabularies, output directories): `error: ...` on one
  line and exit status 2.
- Faults of the machine (disk full, permission denied, read-only filesystem, a file where a
  directory should be), as `OSError` or as the TensorFlow error of a file operation: one line
  naming the path and what to free or fix, exit status 2. Outputs chosen by another flag than
  --output_dir (--predict_output, --output_file) are written inside `writing(flag)`, so that
  the line names that flag.
- Ctrl-C (SIGINT) and SIGTERM: the running stage stops at its next safe point (training saves a
  checkpoint), then one line says what was saved, and the exit status is 128 + the signal
  number: 130 for SIGINT, 143 for SIGTERM. A process stuck inside one TensorFlow call that does
  not reach a safe point within `INTERRUPT_GRACE_S` seconds, or that gets a second signal, exits
  at once with the same status. An interrupt that C code swallowed is raised again
  (`_SignalWatch`); a run that finishes meanwhile still ends as interrupted.
- Anything else is a bug in this project: one `internal error` line naming the exception and a
  file holding the full traceback (exit status 1). Set BERT_MGPU_TRACEBACK=1 to see tracebacks
  on stderr instead.
"""

import contextlib
import errno
import glob
import os
import re
import select
import signal
import sys
import tempfile
import threading
import time
import traceback

from core import atomic_files
from core.errors import InputError
from core.errors import Interrupted


EXIT_INPUT_ERROR = 2
EXIT_INTERNAL_ERROR = 1
# How long the main thread may take to reach a safe point after a signal (see the docstring).
INTERRUPT_GRACE_S = 15.0
# How long the handler's Interrupted may take to reach this project's code before the watch
# takes it for swallowed by C code and raises it again.
LOST_INTERRUPT_S = 5.0
TRACEBACK_ENV = "BERT_MGPU_TRACEBACK"


def require_file(path, flag_name):
  """Raises InputError unless `path` names an existing file; returns `path`."""
  if not path:
    raise InputError("--%s is required" % flag_name)
  if os.path.isdir(path):
    raise InputError("--%s=%s: is a directory; expected a file" % (flag_name, path))
  if not os.path.isfile(path):
    raise InputError("--%s=%s: no such file" % (flag_name, path))
  return path


def _check_writable(directory, what):
  """Raises InputError unless a file can be created in `directory`; `what` names the flag."""
  probe = os.path.join(directory, ".write-test-%d" % os.getpid())
  try:
    with open(probe, "w") as f:
      f.write("ok")
    os.remove(probe)
  except OSError as e:
    try:
      os.remove(probe)
    except OSError:
      pass
    raise InputError("%s: cannot write in %s (%s); choose a writable folder" %
                     (what, directory, e.strerror))


def _existing_part(path):
  """The longest leading part of `path` that exists."""
  while path and not os.path.exists(path):
    parent = os.path.dirname(path)
    if parent == path:
      break
    path = parent
  return path


def require_output_dir(path, flag_name, create=True):
  """Checks, before any work, that the directory `path` of --flag_name can be written, and
  creates it (and its parents) unless `create` is False; returns `path`.

  Raises:
    InputError: a path that is a file, or lies under a file, or a folder that cannot be written
      (read-only filesystem, permissions).
  """
  what = "--%s=%s" % (flag_name, path)
  if os.path.exists(path) and not os.path.isdir(path):
    raise InputError("%s: is a file; expected a directory (or a path to create one)" % what)
  existing = _existing_part(os.path.abspath(path))
  if not os.path.isdir(existing):
    raise InputError("%s: %s is a file, so no directory can be made under it; choose another "
                     "path" % (what, existing))
  if not create:
    _check_writable(existing, what)
    return path
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    raise InputError("%s: cannot create it (%s); choose a writable directory" %
                     (what, e.strerror))
  _check_writable(path, what)
  return path


def require_output_file(path, flag_name):
  """Checks that the file `path` of --flag_name can be written, before any work, creating its
  folder (and the folder's parents) as the run scripts create --output_dir; returns `path`.

  Raises:
    InputError: a path that is a directory, a folder under a file, or a folder that cannot be
      created or written.
  """
  what = "--%s=%s" % (flag_name, path)
  if os.path.isdir(path):
    raise InputError("%s: is a directory; expected a file name" % what)
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    existing = _existing_part(folder)
    if not os.path.isdir(existing):
      raise InputError("%s: %s is a file, not a folder; choose another path" % (what, existing))
    try:
      os.makedirs(folder, exist_ok=True)
    except OSError as e:
      raise InputError("%s: cannot create the folder %s (%s); choose another path" %
                       (what, folder, e.strerror))
  _check_writable(folder, what)
  return path


def expand_files(spec, flag_name):
  """The files that a flag's comma-separated paths, glob patterns and directories name.

  A directory gives its files (not hidden ones, not sub-directories). Paths with "://" (gs://,
  hdfs://) go through TensorFlow's file system, imported only then. Each part's matches are
  sorted; the parts keep their order; a file named twice is kept once.

  Returns:
    list of file paths.

  Raises:
    InputError: an empty flag, or a part that matches no file (named with the flag).
  """
  files = []
  for part in [p.strip() for p in (spec or "").split(",") if p.strip()]:
    if "://" in part:
      import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
      isdir, listdir, glob_fn, isfile = (tf.io.gfile.isdir, tf.io.gfile.listdir,
                                         tf.io.gfile.glob, lambda p: not tf.io.gfile.isdir(p))
    else:
      isdir, listdir, glob_fn, isfile = os.path.isdir, os.listdir, glob.glob, os.path.isfile
    if isdir(part):
      matches = [os.path.join(part, name) for name in listdir(part)
                 if not name.startswith(".") and isfile(os.path.join(part, name))]
    else:
      matches = [path for path in glob_fn(part) if isfile(path)]
    if not matches:
      raise InputError("--%s=%s: no file matches %s" % (flag_name, spec, part))
    files.extend(path for path in sorted(matches) if path not in files)
  if not files:
    raise InputError("--%s is required" % flag_name)
  return files


def require_positive(value, flag_name):
  """Raises InputError unless `value` is an integer >= 1; returns it."""
  if value is None or int(value) < 1:
    raise InputError("--%s=%s: expected an integer >= 1" % (flag_name, value))
  return int(value)


def decode_line(raw, path, line_number):
  """utf-8 decodes one line of bytes; InputError naming the file, line and byte otherwise, with
  the conversion that most likely fits (UTF-16 by its byte order mark or NUL bytes, else GBK,
  the usual legacy encoding of Chinese text)."""
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError as e:
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in raw:
      encoding = "UTF-16"
      convert = "iconv -f utf-16 -t utf-8 %s > converted.txt" % path
    else:
      encoding = None
      convert = "iconv -f gbk -t utf-8 %s > converted.txt (if it is GBK)" % path
    raise InputError("%s:%d: not valid utf-8 (byte 0x%02x at column %d%s); convert the file "
                     "first, e.g. %s" %
                     (path, line_number, raw[e.start], e.start + 1,
                      "; the file looks %s" % encoding if encoding else "", convert))


def text_lines(path):
  """Yields (line_number, text without its line ending) of a utf-8 text file.

  Each line is decoded on its own, so a bad byte is reported at its own line; a byte order mark
  is skipped; lines of any length are accepted.
  """
  if not os.path.isfile(path):
    raise InputError("%s: no such file" % path)
  with open(path, "rb") as f:
    for line_number, raw in enumerate(f, 1):
      if line_number == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
      yield line_number, decode_line(raw, path, line_number).rstrip("\r\n")


def tsv_rows(path):
  """A tab-separated file as a list of (line_number, fields) pairs (see text_lines).

  As in stock BERT, a tab always separates fields and quotes are text; an empty line has no
  fields.
  """
  return [(line_number, text.split("\t") if text else [])
          for line_number, text in text_lines(path)]


def check_row_widths(path, rows, layout=None):
  """Every row of a file must have the tab-separated columns of its first row (InputError).

  A stray tab inside a text shifts that row's columns: a classifier would read its second text
  as the label (a made-up class), a rewriter the end of a source as its target. The error names
  the file, the line and both widths.

  Args:
    path: the file, for messages.
    rows: tsv_rows' (line_number, fields) pairs; the first one (header or data) sets the width.
    layout: the columns the reader expects, for messages (or None).

  Returns:
    the width of the file's rows (0 for no rows).
  """
  if not rows:
    return 0
  first_line, first = rows[0]
  for line_number, fields in rows[1:]:
    if len(fields) != len(first):
      raise InputError(
          "%s:%d: %d tab-separated column(s), but line %d has %d%s; a tab inside a text, or a "
          "missing one? Every row of a file must have the same columns" %
          (path, line_number, len(fields), first_line, len(first),
           " (%s)" % layout if layout else ""))
  return len(first)


# (errno, its strerror as OSError and TensorFlow messages spell it, what to do; %(flag)s is the
# flag whose path failed).
_MACHINE_FAULTS = [
    (errno.ENOSPC, "No space left on device",
     "free space there (df -h) or choose another --%(flag)s, then rerun the same command"),
    (errno.EDQUOT, "Disk quota exceeded",
     "free space there or choose another --%(flag)s, then rerun the same command"),
    (errno.EROFS, "Read-only file system", "choose a writable --%(flag)s"),
    (errno.EACCES, "Permission denied", "fix its permissions or choose another path"),
    (errno.EPERM, "Operation not permitted", "fix its permissions or choose another path"),
    (errno.ENOTDIR, "Not a directory", "a part of the path is a file; choose another path"),
    (errno.EISDIR, "Is a directory", "expected a file; choose another path"),
    (errno.EEXIST, "File exists", "move it or choose another path"),
    (errno.EFBIG, "File too large", "raise the file size limit (ulimit -f) or choose another "
     "--%(flag)s"),
    (errno.EIO, "Input/output error", "check the device or choose another --%(flag)s"),
]


def machine_fault(exc, flag="output_dir"):
  """One line for a fault of the machine (disk full, permissions, ...), or None for other errors.

  Args:
    exc: an OSError, or a TensorFlow OpError raised by a file operation.
    flag: the flag whose path was being written, named in the advice.
  """
  message = str(exc)
  if isinstance(exc, MemoryError) or "OOM when allocating" in message:
    return ("out of memory%s; lower --train_batch_size (or the eval/predict batch size) or "
            "--max_seq_length, or use more --n_gpus" %
            (" (%s)" % first_line(message, 200) if message else ""))
  if type(exc).__name__ == "DataLossError":
    return "%s: the file is truncated or corrupt; recreate it" % first_line(message)
  for number, text, fix in _MACHINE_FAULTS:
    fix %= {"flag": flag}
    if isinstance(exc, OSError) and exc.errno == number:
      path = exc.filename or "(no file named)"
      if exc.filename2:
        path += " -> %s" % exc.filename2
      return "%s: %s; %s" % (path, text, fix)
    if not isinstance(exc, OSError) and text in message:
      line = next(l for l in message.splitlines() if text in l)  # TF's first may be generic.
      line = re.sub(r"\.tempstate\d+", "", atomic_files.final_names(line.strip()))  # TF's own
      return "%s: %s" % (first_line(line), fix)
  return None


@contextlib.contextmanager
def writing(flag_name):
  """The block writes the outputs of --flag_name: a fault of the machine there (disk full,
  read-only, ulimit -f) becomes one InputError line naming the file and that flag."""
  try:
    yield
  except Exception as e:  # pylint: disable=broad-except
    fault = machine_fault(e, flag_name) if _is_file_error(e) else None
    if fault is None or isinstance(e, MemoryError):
      raise
    raise InputError(fault) from None


def first_line(message, limit=400):
  """The first line of `message`, at most `limit` characters."""
  line = message.strip().splitlines()[0] if message.strip() else message
  return line if len(line) <= limit else line[:limit] + "..."


def _report_internal_error(exc):
  """Writes the traceback of an unexpected exception to a file; returns the one-line message."""
  text = traceback.format_exc()
  try:
    fd, path = tempfile.mkstemp(prefix="bert-mgpu-traceback-", suffix=".txt")
    with os.fdopen(fd, "w") as f:
      f.write(text)
    where = "the traceback is in %s" % path
  except OSError:
    where = "set %s=1 to see the traceback" % TRACEBACK_ENV
  return ("internal error (%s: %s); this is a bug in bert-mgpu, not in your input: %s; please "
          "report it with that file" % (type(exc).__name__, first_line(str(exc), 300), where))


def _fail(message, status):
  _REPORTED.append(status)
  sys.stdout.flush()
  sys.stderr.write("error: %s\n" % message)
  sys.stderr.flush()
  sys.exit(status)


def interrupt_message(exc, output_flag="output_dir"):
  """`interrupted by SIGTERM ...` for an Interrupted (or a bare KeyboardInterrupt: SIGINT).

  output_flag: the flag naming what the script writes ("output_dir" or "output_file").
  """
  signum = getattr(exc, "signum", signal.SIGINT)
  return "interrupted by %s: %s" % (signal.Signals(signum).name,
                                    interrupt_detail(exc, output_flag))


def interrupt_detail(exc, output_flag="output_dir"):
  """What an interrupt line says after `interrupted by SIGNAL: `."""
  return getattr(exc, "detail", None) or (
      "stopped before this stage finished; its outputs were not written (%s); rerun the same "
      "command" % _what_stays(output_flag))


# Flags that may name a file a script writes besides its output flag's (common_flags registers
# --predict_output): an interrupt line names the ones given.
_OTHER_OUTPUT_FLAGS = []


def also_writes(flag_name):
  """Registers --flag_name as naming a file the script writes when given (not "-", standard
  output), besides what its output flag names: the interrupt line says it is intact too."""
  if flag_name not in _OTHER_OUTPUT_FLAGS:
    _OTHER_OUTPUT_FLAGS.append(flag_name)


def _intact(first):
  """`first` (what the output flag keeps), after the files of the other output flags given."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  given = [name for name in _OTHER_OUTPUT_FLAGS if name in flags.FLAGS and
           flags.FLAGS[name].value not in (None, "", "-")]
  parts = ["a file already at --%s" % name for name in given] + [first]
  return "%s %s intact" % (" and ".join(parts),
                           "are" if len(parts) > 1 or first.startswith("files") else "is")


def _what_stays(output_flag):
  """What an interrupt leaves intact, in the words of the script's output flags."""
  if output_flag == "output_dir":
    return _intact("files already in --output_dir")
  return _intact("a file already at --%s" % output_flag)


def _advice_after_exit(output_flag):
  """What stays, and what to do, after the watchdog ended a stuck process."""
  if output_flag == "output_dir":
    return ("%s; rerun the same command to resume from it" %
            _intact("the latest checkpoint in --output_dir"))
  return "%s; rerun the same command" % _what_stays(output_flag)


# The signal whose Interrupted the handler raised, once it has run (a process has one watch).
_HANDLED_SIGNAL = []
# Not empty once that interrupt reached this project's code (interrupt_behind saw it).
_CAUGHT = []
# Not empty while the watch's second delivery of a lost interrupt is pending or on its way.
_REDELIVERED = []
_INTERRUPT_LOCK = threading.Lock()
# The exit status of the error line _fail wrote, once it has written it.
_REPORTED = []


def interrupt_behind(exc):
  """The Interrupted that exception `exc` stands for, or None when it is not an interrupt.

  A KeyboardInterrupt (an Interrupted among them) is one. So is any other exception raised
  after the signal handler ran: the handler's Interrupted rose inside a C extension (e.g.
  TensorFlow's nest), which turned it into another exception. An InputError stays the user's
  error, whatever came meanwhile.
  """
  if isinstance(exc, KeyboardInterrupt):
    _mark_caught()
    return exc
  if _HANDLED_SIGNAL and not isinstance(exc, InputError):
    _mark_caught()
    return Interrupted(_HANDLED_SIGNAL[0])
  return None


def _mark_caught():
  """The interrupt reached this project's code: the watch stops timing it (a training run may
  now take its time to save), and a second delivery still pending is withdrawn."""
  with _INTERRUPT_LOCK:
    if not _CAUGHT:
      _CAUGHT.append(True)
      if _REDELIVERED:
        _set_async_exc(None)


class _Redelivered(Interrupted):
  """The interrupt again, raised in the main thread by the watch after C code swallowed it."""

  def __init__(self):
    super(_Redelivered, self).__init__(_HANDLED_SIGNAL[0] if _HANDLED_SIGNAL else
                                       signal.SIGINT)


def _set_async_exc(exc_class):
  """Raises `exc_class` in the main thread at its next Python instruction (None withdraws
  one not raised yet): CPython's PyThreadState_SetAsyncExc."""
  import ctypes  # pylint: disable=g-import-not-at-top
  set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
  set_async_exc.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
  set_async_exc(threading.main_thread().ident, None if exc_class is None else id(exc_class))


def _redeliver_if_lost():
  """Raises the interrupt once more in the main thread unless it reached this project's code
  meanwhile; True when it did so."""
  with _INTERRUPT_LOCK:
    if _CAUGHT or _REPORTED:  # It arrived, or the run is ending on another error's line.
      return False
    _REDELIVERED.append(True)
    _set_async_exc(_Redelivered)
    return True


class _SignalWatch(object):
  """SIGINT and SIGTERM raise Interrupted in the main thread; a watchdog bounds the wait.

  The Python handler only runs between bytecodes of the main thread. The C-level handler also
  writes the signal number into a wakeup pipe (signal.set_wakeup_fd), which a daemon thread
  reads: if the Python handler has not run INTERRUPT_GRACE_S seconds later (the main thread is
  stuck in one TensorFlow call), or a second signal comes, the process exits at once.

  The handler's Interrupted can also be lost: raised inside C code that calls back into Python
  and clears errors (a hasattr or an import inside TensorFlow), the run goes on as if no signal
  had come. When it has not reached this project's code (interrupt_behind) LOST_INTERRUPT_S
  after the handler ran, the watch raises it once more in the main thread; if that is lost too,
  the process exits INTERRUPT_GRACE_S later. Once it has arrived, saving may take its time.
  """

  def __init__(self, output_flag="output_dir"):
    self.handled = threading.Event()
    self.output_flag = output_flag

  def install(self):
    if threading.current_thread() is not threading.main_thread():
      return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    for signum in (signal.SIGINT, signal.SIGTERM):
      signal.signal(signum, self._handler)
    threading.Thread(target=self._watch, args=(read_fd,), daemon=True).start()

  def _handler(self, signum, frame):
    del frame
    if self.handled.is_set():  # A second signal: the user wants out now.
      self.exit_now(signum, "second signal; exiting at once")
    _HANDLED_SIGNAL.append(signum)
    self.handled.set()
    raise Interrupted(signum)

  def _watch(self, read_fd):
    first = os.read(read_fd, 1)[0]
    if not self._wait(read_fd, self.handled.is_set, INTERRUPT_GRACE_S):
      self.exit_now(first, "the running TensorFlow operation did not stop within %g s; "
                    "exited without saving (%s)" % (INTERRUPT_GRACE_S,
                                                    _advice_after_exit(self.output_flag)))
    # The handler raised Interrupted; it reaches this project's code at once unless C code
    # swallowed it (a failed hasattr or import inside TensorFlow): then it is raised again.
    if (not self._wait(read_fd, lambda: _CAUGHT, LOST_INTERRUPT_S) and _redeliver_if_lost()
        and not self._wait(read_fd, lambda: _CAUGHT, INTERRUPT_GRACE_S)):
      self.exit_now(first, "the interrupt was lost inside TensorFlow and the run did not stop "
                    "within %g s; exited without saving (%s)" % (
                        LOST_INTERRUPT_S + INTERRUPT_GRACE_S,
                        _advice_after_exit(self.output_flag)))
    self.exit_now(os.read(read_fd, 1)[0], "second signal; exiting at once")  # The only one now.

  def _wait(self, read_fd, done, seconds):
    """True once done() holds, False after `seconds`; a second signal exits at once."""
    deadline = time.monotonic() + seconds
    while not done():
      left = deadline - time.monotonic()
      if left <= 0:
        return False
      if select.select([read_fd], [], [], min(left, 0.2))[0]:
        self.exit_now(os.read(read_fd, 1)[0], "second signal; exiting at once")
    return True

  @staticmethod
  def exit_now(signum, why):
    name = signal.Signals(signum).name
    try:
      os.write(2, ("error: interrupted by %s: %s\n" % (name, why)).encode("utf-8"))
    except OSError:  # Nobody reads stderr any more (e.g. the parent died): exit all the same.
      pass
    os._exit(128 + signum)  # pylint: disable=protected-access


def run_tool(run_fn, flag_specs, output_flag="output_file"):
  """The entry point of a data tool (scripts/build_word_freq.py and the like): defines the
  flags of `flag_specs` ((kind, name, default, help) tuples), then runs
  run_fn(**their values) with INFO logging through run_main."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from absl import logging  # pylint: disable=g-import-not-at-top
  for kind, name, default, help_text in flag_specs:
    getattr(flags, "DEFINE_" + kind)(name, default, help_text)

  def main(_):
    logging.set_verbosity(logging.INFO)
    run_fn(**{name: getattr(flags.FLAGS, name) for _, name, _, _ in flag_specs})

  run_main(main, output_flag=output_flag)


def run_main(main_fn, argv=None, output_flag="output_dir"):
  """Runs `main_fn(argv)` through absl.app with the error reporting of the module docstring.

  output_flag: the flag naming what the script writes, for the interrupt line and a machine
  fault's advice ("output_dir" for the run scripts, "output_file" for the data tools).
  """
  from absl import app  # pylint: disable=g-import-not-at-top
  show_tracebacks = os.environ.get(TRACEBACK_ENV, "") not in ("", "0")

  _show_project_flags_in_help()

  def _guarded(args):
    watch = _SignalWatch(output_flag)
    watch.install()
    _quiet_thread_faults()
    _end_on_a_swallowed_interrupt(output_flag, show_tracebacks)
    _log_once()
    try:
      result = main_fn(args)
      _raise_if_lost_at_the_end()
      return result
    except InputError as e:
      _fail(str(e), EXIT_INPUT_ERROR)
    except (KeyboardInterrupt, Exception) as e:  # pylint: disable=broad-except
      interrupt = interrupt_behind(e)
      if interrupt is not None:
        _fail(interrupt_message(interrupt, output_flag),
              128 + getattr(interrupt, "signum", signal.SIGINT))
      fault = machine_fault(e, output_flag) if _is_file_error(e) else None
      if fault:
        _fail(fault, EXIT_INPUT_ERROR)
      if show_tracebacks:
        raise
      _fail(_report_internal_error(e), EXIT_INTERNAL_ERROR)

  app.run(_guarded, argv=argv, flags_parser=_parse_flags)


def _raise_if_lost_at_the_end():
  """The run finished although a signal came: C code swallowed its interrupt, and the watch
  had not raised it again yet. The run still ends as interrupted (128 + signal), so that a
  chain of commands (`step1 && step2`) stops where the user pressed Ctrl-C."""
  if _HANDLED_SIGNAL and not _CAUGHT:
    raise Interrupted(_HANDLED_SIGNAL[0], "it came as the run was finishing and did not stop "
                      "it; its outputs were written whole; exiting as interrupted so that "
                      "the commands after this one do not run")


def _log_once():
  """TensorFlow's logger prints through absl's handler only.

  TensorFlow gives its logger a handler of its own when it is imported before absl's logging
  starts (every script imports it first), so each of its lines ("Restoring parameters from
  ...") would print twice: once as `INFO:tensorflow:...`, once in absl's format.
  """
  import logging as python_logging  # pylint: disable=g-import-not-at-top
  tf_logger = python_logging.getLogger("tensorflow")
  if python_logging.getLogger().handlers:  # absl's: the lines still reach stderr.
    for handler in list(tf_logger.handlers):
      tf_logger.removeHandler(handler)


def _end_on_a_swallowed_interrupt(output_flag, show_tracebacks):
  """An interrupt that C code swallowed ends the process with the one interrupt line.

  The handler's Interrupted can rise inside C code that calls back into Python (TensorFlow's
  nest.flatten importing a module). pybind11 there may turn it into "SystemError: <built-in
  function __import__> returned a result with an exception set" and discard that as unraisable:
  sys.unraisablehook printed its traceback, and the run sometimes went on as if no signal had
  come. From the signal on, such an exception is the interrupt's: the process writes the
  interrupt line and exits (128 + signal), as the watchdog does; what it writes is written
  whole or not at all (core/atomic_files). Once _fail has written its line, they are dropped.
  With TRACEBACK_ENV set they print as before.
  """
  default_hook = sys.unraisablehook

  def hook(unraisable):
    if not _HANDLED_SIGNAL or show_tracebacks:
      default_hook(unraisable)
    elif not _REPORTED:
      _SignalWatch.exit_now(_HANDLED_SIGNAL[0], interrupt_detail(
          Interrupted(_HANDLED_SIGNAL[0]), output_flag))

  sys.unraisablehook = hook


def _quiet_thread_faults():
  """A machine fault in a background thread (TensorFlow's event-file writer) prints no
  traceback: the main thread meets the same error at its next write and reports it in one
  line."""
  default_hook = threading.excepthook

  def hook(args):
    if _is_file_error(args.exc_value) and machine_fault(args.exc_value):
      return
    default_hook(args)

  threading.excepthook = hook


def _parse_flags(argv):
  """absl's flag parsing, with a malformed or unknown flag reported as one `error:` line, exit 2,
  and --help / --helpshort / --helpfull exiting 0 once the help is printed (absl exits 1).

  absl's own parser prints "FATAL Flags parsing error" and exits 1; e.g. `--learning_rate=abc`
  becomes `error: flag --learning_rate=abc: could not convert string to float: 'abc' (see
  --helpshort)`.
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    message = " ".join(str(e).split())  # absl's multi-line messages (e.g. suggestions) on one line
    _fail("%s (see --helpshort)" % message, EXIT_INPUT_ERROR)
  except SystemExit as e:  # absl exits 1 after printing the help it was asked for: that is done
    if e.code == 1 and _asks_for_help(argv):
      sys.stdout.flush()
      sys.exit(0)
    raise


_HELP_FLAGS = ("help", "helpshort", "helpfull", "helpxml", "?")


def _asks_for_help(argv):
  """Whether the command line holds one of absl's help flags (before a `--`)."""
  for arg in argv[1:]:
    if arg == "--":
      return False
    if arg.startswith("-") and arg.lstrip("-").split("=")[0] in _HELP_FLAGS:
      return True
  return False


def _show_project_flags_in_help():
  """--help lists every flag this project defines (absl lists only the main module's own).

  The shared flags (engine/common_flags.py) become key flags of the script; TensorFlow's and absl's
  own flags stay out of --help (they are in --helpfull).
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  project_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  main_module = sys.argv[0]
  for module_name, module_flags in flags.FLAGS.flags_by_module_dict().items():
    module = sys.modules.get(module_name)
    path = os.path.abspath(getattr(module, "__file__", None) or "/")
    top = os.path.relpath(path, project_dir).split(os.sep)[0]  # A root module or our package.
    ours = top.endswith(".py") or os.path.isfile(os.path.join(project_dir, top, "__init__.py"))
    if module_name != main_module and ours:
      for flag in module_flags:
        flags.FLAGS.register_key_flag_for_module(main_module, flag)


def _is_file_error(exc):
  """Whether `exc` may be a fault of the machine: an OSError, a MemoryError, a TF OpError, or
  the IndexError or RuntimeError that TensorFlow's event-file writer raises for a failed write
  or flush ("<path>; File too large" past ulimit -f, "No space left on device")."""
  if isinstance(exc, (OSError, MemoryError)):
    return True
  if (isinstance(exc, (IndexError, RuntimeError)) and
      any(text in str(exc) for _, text, _ in _MACHINE_FAULTS)):
    return True
  return type(exc).__module__.startswith("tensorflow") and hasattr(exc, "error_code")
