"""Children the product starts die with their parent (core/children.py), and the export's child
builds on CPU only."""

import ast
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from core import atomic_files
from serving import saved_model_export

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _dead(pid):
  """Whether process `pid` is gone or a zombie (its new parent may not have reaped it yet)."""
  try:
    with open("/proc/%d/stat" % pid) as f:
      return f.read().rpartition(")")[2].split()[0] == "Z"
  except FileNotFoundError:
    return True


def test_a_child_dies_when_its_parent_is_killed_with_sigkill():
  parent = subprocess.Popen(
      [sys.executable, "-c", textwrap.dedent("""
          import sys, time
          from core import children
          child = children.start(["sleep", "60"])
          print(child.pid, flush=True)
          time.sleep(60)
          """)],
      stdout=subprocess.PIPE, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
  child = int(parent.stdout.readline())
  try:
    assert not _dead(child)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(10)
    deadline = time.time() + 5
    while not _dead(child) and time.time() < deadline:
      time.sleep(0.02)
    assert _dead(child), "the child outlived its parent's kill -9"
  finally:
    if not _dead(child):
      os.kill(child, signal.SIGKILL)


# Stands in for build_saved_model.py: writes what its process was given into the SavedModel
# folder (the GPUs it sees; the signal it gets when its parent dies, 0 for none).
_FAKE_BUILDER = """
import ctypes, json, os, sys
spec = json.loads(sys.argv[1][len("--spec="):])
os.makedirs(spec["export_dir"])
signum = ctypes.c_int(-1)
ctypes.CDLL(None).prctl(2, ctypes.byref(signum), 0, 0, 0)  # PR_GET_PDEATHSIG
with open(os.path.join(spec["export_dir"], "seen.json"), "w") as f:
  json.dump({"gpus": os.environ.get("CUDA_VISIBLE_DEVICES"), "deathsig": signum.value}, f)
"""


def test_the_export_child_sees_no_gpu_and_dies_with_the_run(tmp_path, monkeypatch):
  builder = tmp_path / "fake_builder.py"
  builder.write_text(_FAKE_BUILDER)
  monkeypatch.setattr(saved_model_export, "_BUILDER", str(builder))
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
  out = tmp_path / "out"
  out.mkdir()
  final = saved_model_export.build(str(out), {"checkpoint": "unused"})
  with open(os.path.join(final, "seen.json")) as f:
    seen = json.load(f)
  assert seen == {"gpus": "", "deathsig": signal.SIGKILL}
  assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"  # the run's own GPUs unchanged


def _descendants(pid):
  """The pids of every living descendant of process `pid`."""
  parents = {}
  for name in os.listdir("/proc"):
    if name.isdigit():
      try:
        with open("/proc/%s/stat" % name) as f:
          parents[int(name)] = int(f.read().rpartition(")")[2].split()[1])
      except (OSError, IndexError, ValueError):
        pass
  found, frontier = [], [pid]
  while frontier:
    kids = [p for p, parent in parents.items() if parent in frontier and not _dead(p)]
    found += kids
    frontier = kids
  return found


def test_the_pretraining_data_workers_die_with_a_killed_run_and_leave_no_output(tmp_path):
  """kill -9 of create_pretraining_data.py while its 3 workers (forked by multiprocessing's
  forkserver) make instances: every process it started is gone within seconds, no file is at
  --output_file, and the temporary it was writing is removed by the next start."""
  line = "".join(chr(0x4e00 + 37 * i % 2000) for i in range(40)) + "。\n"
  corpus = tmp_path / "corpus.txt"
  corpus.write_text((line * 5 + "\n") * 12000, encoding="utf-8")
  out = tmp_path / "data" / "train.tfrecord"
  run = subprocess.Popen(
      [sys.executable, os.path.join(REPO, "create_pretraining_data.py"),
       "--input_file=%s" % corpus, "--output_file=%s" % out, "--num_workers=3",
       "--vocab_file=%s" % os.path.join(REPO, "vocab", "chinese_vocab.txt")],
      cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), stdout=subprocess.DEVNULL,
      stderr=subprocess.PIPE)
  started = []
  try:
    deadline = time.time() + 60
    while time.time() < deadline and not (
        len(_descendants(run.pid)) >= 5 and  # resource tracker, forkserver, 3 workers
        any(name.startswith("train.tfrecord.tmp-") for name in os.listdir(out.parent))):
      assert run.poll() is None, run.stderr.read().decode()[-3000:]
      time.sleep(0.05)
    started = _descendants(run.pid)
    assert len(started) >= 5, started
    run.kill()
    run.wait(10)
    deadline = time.time() + 5
    while any(not _dead(p) for p in started) and time.time() < deadline:
      time.sleep(0.05)
    assert all(_dead(p) for p in started), "outlived the run: %s" % [
        p for p in started if not _dead(p)]
  finally:
    run.kill()
    run.stderr.close()
    for pid in started:
      if not _dead(pid):
        os.kill(pid, signal.SIGKILL)
  assert not out.exists()
  left = os.listdir(out.parent)
  assert len(left) == 1 and left[0].startswith("train.tfrecord.tmp-"), left
  assert atomic_files.remove_stale_temporaries(str(out.parent)) == left
  assert not os.listdir(out.parent)


_STARTERS = {("subprocess", name) for name in ("Popen", "run", "call", "check_call",
                                               "check_output", "getoutput", "getstatusoutput")}
_STARTERS |= {("os", name) for name in ("system", "popen", "fork", "forkpty", "posix_spawn",
                                        "posix_spawnp", "spawnv", "spawnl", "spawnvp")}


def test_every_child_of_the_product_is_started_through_core_children():
  """Outside tests/, only core/children.py starts processes (multiprocessing's pool workers
  call its `follow` from their initializer: pretraining/instances.py)."""
  found = []
  for folder, dirs, files in os.walk(REPO):
    dirs[:] = [d for d in dirs if not d.startswith(".") and d != "tests"]
    for name in files:
      path = os.path.join(folder, name)
      if not name.endswith(".py") or path == os.path.join(REPO, "core", "children.py"):
        continue
      with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
      for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and
            isinstance(node.func.value, ast.Name) and
            (node.func.value.id, node.func.attr) in _STARTERS):
          found.append("%s:%d" % (os.path.relpath(path, REPO), node.lineno))
  assert not found, "start these through core/children.py: %s" % found
