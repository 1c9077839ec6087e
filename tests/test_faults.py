"""Bad inputs, interruptions and faults through the real scripts: never a hang, never a traceback,
never a damaged run.

Every case of the fault table (tests/fault_cases.py, also printed by scripts/fault_table.sh) runs
as a subprocess on tiny data, two at a time, with a bounded wait. Each must end as a single
`error: ...` line naming what it names (exit 2, or 130/143 for SIGINT/SIGTERM) or be handled
(the run succeeds, or a rerun after the fault resumes), and must leave the previous good state of
its output_dir intact and usable. Disk-full and read-only cases mount a small tmpfs: as root only.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import tensorflow.compat.v1 as tf

from engine import cli
from engine import training
import fault_cases
import script_runner
from test_speed_features import _input_fn, _spec
from test_towers import _tower_fn

CASES = fault_cases.all_cases()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  """The shared fixtures: data, a config, a vocabulary and a trained output_dir per script."""
  world = fault_cases.World(str(tmp_path_factory.mktemp("faults"))).build()
  try:
    yield world
  finally:
    world.close()


@pytest.fixture(scope="module")
def results(world):
  """Runs every case once, two at a time."""
  return fault_cases.run_cases(world, CASES, os.path.join(world.root, "cases"))


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_case(results, name):
  result = results[name]
  if result.outcome == "skipped":
    pytest.skip(result.why)
  expected = {"error": "clear error", "interrupt": "clear error", "ok": "handled"}
  case = next(c for c in CASES if c.name == name)
  assert result.outcome == expected[case.expect], (result.outcome, result.why,
                                                   result.stderr[-3000:])


def test_the_table_is_large_and_covers_every_script():
  scripts = {c.script for c in CASES}
  assert len(CASES) >= 60
  assert scripts == {fault_cases.CLF, fault_cases.RW, fault_cases.PT, fault_cases.CPD,
                     fault_cases.TO_HF, fault_cases.FROM_HF}


def test_the_classes_of_issue_30_have_a_case_per_script():
  """Damaged output on a full disk (each script that writes predictions or a model), non-finite
  weights (each training script; ELECTRA on one tower, towers and stages), --help (all)."""
  def scripts_of(*fragments):
    return {c.script for c in CASES if all(f in c.name for f in fragments)}
  assert scripts_of("disk_full") == scripts_of("help")
  assert scripts_of("nonfinite") | scripts_of("nan") >= {fault_cases.CLF, fault_cases.RW,
                                                         fault_cases.PT}
  assert {c.name for c in CASES if c.name.startswith("pt_electra_nonfinite")} == {
      "pt_electra_nonfinite_one_tower", "pt_electra_nonfinite_towers",
      "pt_electra_nonfinite_stages"}


def test_list_names_every_case_without_building_anything(tmp_path):
  """scripts/fault_table.py --list prints every case, with no fixture built and no TensorFlow
  imported (a `tensorflow` that fails to import is first on the path)."""
  fake = tmp_path / "tensorflow"
  fake.mkdir()
  (fake / "__init__.py").write_text("raise ImportError('--list must not import TensorFlow')\n")
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), fault_cases.REPO_ROOT]),
             TMPDIR=str(tmp_path))
  proc = subprocess.run([sys.executable, os.path.join(fault_cases.REPO_ROOT, "scripts",
                                                      "fault_table.py"), "--list"],
                        env=env, capture_output=True, text=True, timeout=60)
  assert proc.returncode == 0, proc.stderr[-2000:]
  listed = [line.split()[0] for line in proc.stdout.splitlines()[:-1]]
  assert listed == [c.name for c in CASES]
  assert proc.stdout.splitlines()[-1] == "%d cases" % len(CASES)
  assert sorted(os.listdir(str(tmp_path))) == ["tensorflow"]  # nothing built


def test_kill9_during_training_loses_only_the_steps_since_the_last_checkpoint(results):
  """The rerun resumes from the last checkpoint saved before the kill (every 2 steps)."""
  stderr = results["clf_kill9_training"].stderr
  reached = max(int(s) for s in re.findall(r"step (\d+)/", stderr))
  saved = [int(s) for s in re.findall(r"Saved .*model\.ckpt-(\d+)", stderr)]
  assert reached >= 7 and saved and reached - saved[-1] <= 2, (reached, saved)


def _cli_script(tmp_path, main_body, run_main_args=""):
  """Writes a script whose main (run by cli.run_main) is `main_body`; returns (path, env)."""
  script = tmp_path / "main.py"
  script.write_text("from engine import cli\n"
                    "def main(_):\n"
                    "  %s\n"
                    "cli.run_main(main%s)\n" % (main_body, run_main_args))
  env = dict(os.environ, PYTHONPATH=fault_cases.REPO_ROOT)
  env.pop(cli.TRACEBACK_ENV, None)
  return str(script), env


def _run_cli_script(script, env):
  return subprocess.run([sys.executable, script], env=env, capture_output=True, text=True,
                        timeout=60)


def test_internal_errors_are_one_line_with_the_traceback_in_a_file(tmp_path):
  """A bug (not an input error) prints one `internal error` line naming a traceback file."""
  script, env = _cli_script(tmp_path, "return {}['no such key']")
  proc = _run_cli_script(script, env)
  assert proc.returncode == cli.EXIT_INTERNAL_ERROR
  assert "Traceback" not in proc.stderr
  line = proc.stderr.strip().splitlines()[-1]
  assert line.startswith("error: internal error (KeyError: 'no such key')"), line
  path = line.split("the traceback is in ")[1].split(";")[0]
  with open(path) as f:
    assert "KeyError" in f.read()
  os.remove(path)
  # Developers can ask for the traceback itself.
  env[cli.TRACEBACK_ENV] = "1"
  proc = _run_cli_script(script, env)
  assert "Traceback (most recent call last)" in proc.stderr and proc.returncode == 1


def test_a_full_disk_met_by_the_event_writers_flush_is_one_line(tmp_path):
  """TensorFlow's event-file writer reports a failed flush as a RuntimeError ("<path>; No
  space left on device" and a second line); what clf_disk_full_checkpoint meets when the disk
  fills at a summary rather than at the checkpoint. It is a fault of the machine: exit 2 and one
  line naming the file and the flag, as a full disk anywhere else."""
  proc = _run_cli_script(*_cli_script(
      tmp_path, "raise RuntimeError('/out/events.out.tfevents.1.vm; No space left on device"
      "\\n\\tFailed to flush 2 events to /out/events.out.tfevents.1.vm')"))
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2 and len(lines) == 1, proc.stderr
  assert lines[0] == ("error: /out/events.out.tfevents.1.vm; No space left on device: free "
                      "space there (df -h) or choose another --output_dir, then rerun the same "
                      "command"), lines[0]


def test_a_machine_fault_names_the_flag_the_script_writes(tmp_path):
  """A tool whose output flag is not --output_dir (serving_compare.py's --work_dir) is advised
  to choose another of its own flag, not of one it does not take."""
  proc = _run_cli_script(*_cli_script(
      tmp_path, "import errno; raise OSError(errno.ENOSPC, 'No space left on device', "
      "'/work/model.onnx')", ", output_flag='work_dir'"))
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2 and len(lines) == 1, proc.stderr
  assert lines[0] == ("error: /work/model.onnx: No space left on device; free space there "
                      "(df -h) or choose another --work_dir, then rerun the same command")


@pytest.mark.parametrize("run_main_args,intact", [
    ("", "files already in --output_dir are intact"),
    (", output_flag='output_file'", "a file already at --output_file is intact")])
def test_the_interrupt_line_names_the_flag_the_script_writes(tmp_path, run_main_args, intact):
  """Ctrl-C names what a run script (--output_dir) or a data tool (create_pretraining_data.py,
  build_similar_words.py: --output_file) leaves intact, not always --output_dir."""
  script, env = _cli_script(tmp_path, "raise KeyboardInterrupt()", run_main_args)
  proc = _run_cli_script(script, env)
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 130 and len(lines) == 1, proc.stderr
  assert lines[0] == ("error: interrupted by SIGINT: stopped before this stage finished; its "
                      "outputs were not written (%s); rerun the same command" % intact), lines[0]


def test_an_interrupt_that_c_code_discards_still_ends_the_run_with_its_line(tmp_path):
  """SIGINT's Interrupted rises inside C code (TensorFlow's nest.flatten importing a module),
  which turns it into a SystemError and discards that as unraisable (pybind11): seen as a
  traceback, and as a run that went on to exit 0. Here the same discard, made by hand."""
  script = tmp_path / "main.py"
  script.write_text(
      "import os, signal\n"
      "from engine import cli\n"
      "class Discards(object):  # its __del__'s exception is discarded as unraisable\n"
      "  def __del__(self):\n"
      "    raise SystemError('<built-in function __import__> returned a result with an '\n"
      "                      'exception set')\n"
      "def main(_):\n"
      "  try:\n"
      "    os.kill(os.getpid(), signal.SIGINT)\n"
      "    for _ in range(10 ** 6): pass  # the handler raises in here\n"
      "  except KeyboardInterrupt:\n"
      "    Discards()\n"
      "  print('went on', flush=True)\n"
      "cli.run_main(main)\n")
  env = dict(os.environ, PYTHONPATH=fault_cases.REPO_ROOT)
  env.pop(cli.TRACEBACK_ENV, None)
  proc = _run_cli_script(str(script), env)
  assert proc.returncode == 130 and proc.stdout == "", (proc.returncode, proc.stdout)
  assert proc.stderr == ("error: interrupted by SIGINT: stopped before this stage finished; its "
                         "outputs were not written (files already in --output_dir are intact); "
                         "rerun the same command\n"), proc.stderr


_SWALLOWS = (  # A main whose SIGINT is swallowed, as C code that clears errors does (hasattr).
    "import os, signal, sys, time\n"
    "from engine import cli\n"
    "cli.LOST_INTERRUPT_S, cli.INTERRUPT_GRACE_S = 1.0, 1.0\n"
    "def swallowed():\n"
    "  try:\n"
    "    os.kill(os.getpid(), signal.SIGINT)\n"
    "    for _ in range(10 ** 6): pass  # the handler raises in here\n"
    "  except KeyboardInterrupt:\n"
    "    pass\n"
    "  print('went on', flush=True)\n"
    "def main(_):\n"
    "  swallowed()\n"
    "  %s\n"
    "cli.run_main(main)\n")


@pytest.mark.parametrize("then,status,stdout,detail", [
    # The run goes on: the watch raises the interrupt again, and it stops the run.
    ("while True: time.sleep(0.01)", 130, "went on\n", "stopped before this stage finished; its "
     "outputs were not written (files already in --output_dir are intact); rerun the same "
     "command"),
    # The run finishes before that: it still ends as interrupted, so `a && b` stops at a.
    ("print('finished', flush=True)", 130, "went on\nfinished\n", "it came as the run was "
     "finishing and did not stop it; its outputs were written whole; exiting as interrupted so "
     "that the commands after this one do not run"),
    # The second delivery is swallowed too: the process exits INTERRUPT_GRACE_S later.
    ("while True:\n    try:\n      time.sleep(0.01)\n    except KeyboardInterrupt:\n"
     "      pass", 130, "went on\n", "the interrupt was lost inside TensorFlow and the run did "
     "not stop within 2 s; exited without saving (the latest checkpoint in --output_dir is "
     "intact; rerun the same command to resume from it)"),
])
def test_an_interrupt_that_c_code_swallows_is_raised_again(tmp_path, then, status, stdout,
                                                           detail):
  """SIGINT's Interrupted can vanish inside C code that calls back into Python and clears
  errors: a fault case's run then went on and exited 0 with no line (3 in 120 stressed
  runs). The watch raises the interrupt again; whatever happens next, one line and 130."""
  script = tmp_path / "main.py"
  script.write_text(_SWALLOWS % then)
  env = dict(os.environ, PYTHONPATH=fault_cases.REPO_ROOT)
  env.pop(cli.TRACEBACK_ENV, None)
  proc = _run_cli_script(str(script), env)
  assert (proc.returncode, proc.stdout) == (status, stdout), (proc.returncode, proc.stdout)
  assert proc.stderr == "error: interrupted by SIGINT: %s\n" % detail, proc.stderr


def test_an_interrupt_that_arrived_is_not_timed_while_the_run_saves(tmp_path):
  """Once the interrupt reached the project's code (a training run saves its checkpoint then),
  the watch's bounds stop: a save longer than both still finishes."""
  script, env = _cli_script(tmp_path, "\n  ".join([
      "import os, signal, time",
      "cli.LOST_INTERRUPT_S, cli.INTERRUPT_GRACE_S = 0.5, 0.5",
      "try:",
      "  os.kill(os.getpid(), signal.SIGINT)",
      "  for _ in range(10 ** 6): pass",
      "except KeyboardInterrupt as e:",
      "  interrupt = cli.interrupt_behind(e)",
      "  time.sleep(2.5)  # a slow save",
      "  print('saved', flush=True)",
      "  raise interrupt"]))
  proc = _run_cli_script(script, env)
  assert (proc.returncode, proc.stdout) == (130, "saved\n"), (proc.returncode, proc.stdout,
                                                              proc.stderr)
  assert proc.stderr.startswith("error: interrupted by SIGINT: stopped before"), proc.stderr


def test_the_interrupt_line_names_predict_output_when_given(tmp_path):
  """A --predict_file run writing to --predict_output elsewhere: the interrupt line says the
  file there is intact (it named only --output_dir's files)."""
  script = tmp_path / "main.py"
  script.write_text("from absl import flags\n"
                    "from engine import cli\n"
                    "flags.DEFINE_string('predict_output', None, '')\n"
                    "cli.also_writes('predict_output')  # as common_flags does\n"
                    "def main(_):\n"
                    "  raise KeyboardInterrupt()\n"
                    "cli.run_main(main)\n")
  env = dict(os.environ, PYTHONPATH=fault_cases.REPO_ROOT)
  for args, intact in (([], "files already in --output_dir are intact"),
                       (["--predict_output=out/p.txt"], "a file already at --predict_output and "
                        "files already in --output_dir are intact"),
                       (["--predict_output=-"], "files already in --output_dir are intact")):
    proc = subprocess.run([sys.executable, str(script)] + args, env=env, capture_output=True,
                          text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 130 and len(lines) == 1, proc.stderr
    assert lines[0] == ("error: interrupted by SIGINT: stopped before this stage finished; its "
                        "outputs were not written (%s); rerun the same command" % intact)


def test_a_stuck_call_still_exits_on_sigterm(tmp_path):
  """The watchdog ends a process whose main thread is stuck inside one TensorFlow call (here:
  an endlessly repeated empty record file, the old hang of an empty training set; Python runs
  no signal handler until the call returns) with exit 143 once the grace period is over, and
  at once on a second signal."""
  empty = tmp_path / "empty.tfrecord"
  empty.write_bytes(b"")
  script = tmp_path / "stuck.py"
  script.write_text(
      "from engine import cli\n"
      "import tensorflow.compat.v1 as tf\n"
      "cli.INTERRUPT_GRACE_S = 1.0\n"
      "def main(_):\n"
      "  tf.disable_v2_behavior()\n"
      "  files = tf.data.Dataset.from_tensor_slices([%r]).repeat()\n"
      "  records = files.interleave(tf.data.TFRecordDataset, cycle_length=1)\n"
      "  batch = tf.data.make_one_shot_iterator(records).get_next()\n"
      "  with tf.Session() as sess:\n"
      "    print('ready', flush=True)\n"
      "    sess.run(batch)\n"
      "cli.run_main(main)\n" % str(empty))
  env = dict(os.environ, PYTHONPATH=fault_cases.REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="3")
  for signals in ([signal.SIGTERM], [signal.SIGINT, signal.SIGINT]):
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
      assert proc.stdout.readline().strip() == "ready"
      time.sleep(0.5)  # Inside sess.run.
      for signum in signals:
        proc.send_signal(signum)
        time.sleep(0.1)
      _, err = proc.communicate(timeout=30)
    finally:  # A failed check must not leave the stuck process spinning.
      if proc.poll() is None:
        proc.kill()
        proc.communicate()
    assert proc.returncode == 128 + signals[0], err[-2000:]
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: interrupted by %s" % signals[0].name), line
    assert ("did not stop within 1 s" if len(signals) == 1 else "second signal") in line, line


@pytest.mark.parametrize("script", [fault_cases.CLF, fault_cases.RW, fault_cases.PT])
def test_help_lists_the_shared_flags_and_not_tensorflows(script):
  # Forked from the script host (tests/script_runner.py): --help needs no fresh start (the
  # quiet start of a user's process is test_cpu_only_runs_print_no_cuda_error's).
  proc = script_runner.run_script(script, "--help")
  assert proc.returncode == 0, proc.stderr[-2000:]
  for flag in ("--output_dir", "--learning_rate", "--n_gpus", "--bert_config_file",
               "--vocab_file", "--do_train", "--worker_hosts", "--use_fp16"):
    assert flag in proc.stdout, flag
  assert "--logtostderr" not in proc.stdout  # absl's and TensorFlow's flags are in --helpfull


def test_cpu_only_runs_print_no_cuda_error(world, tmp_path):
  """With CUDA_VISIBLE_DEVICES empty and TF_CPP_MIN_LOG_LEVEL=2, as scripts used to set it, a run
  that creates sessions (here: eval of the trained classifier) is as quiet as with it unset
  (tests/test_quiet_scripts.py runs every script that way, the classifier's eval too): no cuInit
  error line, none of absl's pre-init lines, no tf.compat.v1 deprecation notice."""
  shutil.copytree(world.clf_out, str(tmp_path / "out"))
  env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=fault_cases.REPO_ROOT,
             TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run(fault_cases.command(fault_cases.CLF, *world.clf_args(
      str(tmp_path / "out"), "--do_eval")), env=env, capture_output=True, text=True,
                        timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "eval_accuracy" in proc.stderr
  for noise in ("cuInit", "cuda_platform", "Could not find cuda drivers", "absl::InitializeLog",
                "is deprecated and will be removed"):
    assert noise not in proc.stderr, noise


_CONVERTED_INTERRUPT = """
import os, signal, sys, time
sys.path.insert(0, %r)
from engine import cli

def main(argv):
  del argv
  try:  # As TensorFlow's C++ nest does: the KeyboardInterrupt comes out as another exception.
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
  except KeyboardInterrupt:
    raise TypeError()

cli.run_main(main)
"""


def test_an_interrupt_that_a_c_extension_turns_into_another_exception_is_still_an_interrupt():
  """A SIGINT whose KeyboardInterrupt rises inside C code (TensorFlow's pywrap nest turned one
  into a bare TypeError in rw_sigint_decoding) ends as the interrupt, exit 130, not as an
  internal error."""
  proc = subprocess.run([sys.executable, "-c", _CONVERTED_INTERRUPT % fault_cases.REPO_ROOT],
                        capture_output=True, text=True, timeout=120)
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 130, proc.stderr[-2000:]
  assert lines[-1].startswith("error: interrupted by SIGINT"), lines[-1]
  assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr


def test_training_saves_when_the_interrupt_comes_out_of_tensorflow_as_another_exception(
    tmp_path, monkeypatch):
  """The training loop, too, takes an exception raised after the signal handler ran for the
  interrupt, and saves the step it reached: clf_sigterm_training once exited without a
  checkpoint when the SIGTERM's Interrupted rose inside a Session.run and came out as another
  exception. Here the third update's run meets the real handler and turns its Interrupted into
  a TypeError, as TensorFlow's C code does."""
  monkeypatch.setattr(cli, "_HANDLED_SIGNAL", [])
  real_run = tf.Session.run
  updates = []

  def run(self, fetches, *args, **kwargs):
    if isinstance(fetches, dict) and "grad_norm" in fetches:
      updates.append(len(updates) + 1)
      if len(updates) == 3:
        try:
          cli._SignalWatch()._handler(signal.SIGTERM, None)  # pylint: disable=protected-access
        except KeyboardInterrupt:  # pylint: disable=raise-missing-from
          raise TypeError("an exception the C code made of the interrupt")
    return real_run(self, fetches, *args, **kwargs)

  monkeypatch.setattr(tf.Session, "run", run)
  with pytest.raises(cli.Interrupted) as raised:
    training.train(_tower_fn, _input_fn(), _spec(output_dir=str(tmp_path)))
  assert raised.value.signum == signal.SIGTERM
  assert "stopped at step 2;" in raised.value.detail, raised.value.detail
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-2")
  # An exception with no signal behind it is still what it is.
  monkeypatch.setattr(cli, "_HANDLED_SIGNAL", [])
  assert cli.interrupt_behind(TypeError()) is None
