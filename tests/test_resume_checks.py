"""What a rerun in an existing --output_dir is told: the lock of a training run in progress, a
global batch that changed (its steps would count other examples), a learning-rate schedule that
changed."""

import os
import signal
import subprocess
import sys
import time

import pytest

from engine import run_setup
from script_runner import CHINESE_VOCAB, REPO_ROOT, assert_one_line_error, run_script, \
    write_tiny_bert_config
from test_classifier import _make_task


@pytest.fixture(scope="module")
def task(tmp_path_factory):
  root = tmp_path_factory.mktemp("resume")
  return _make_task(root / "data"), write_tiny_bert_config(root / "bert_config.json", 21128)


def _args(task, out, *extra):
  data_dir, config = task
  return ["--task_name=tsv", "--data_dir=%s" % data_dir, "--vocab_file=%s" % CHINESE_VOCAB,
          "--bert_config_file=%s" % config, "--output_dir=%s" % out, "--max_seq_length=16",
          "--train_batch_size=4", "--learning_rate=2e-3", "--do_train"] + list(extra)


def test_a_second_training_run_in_the_same_output_dir_is_refused_until_the_first_ends(
    task, tmp_path):
  out = str(tmp_path / "out")
  env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO_ROOT)
  first = subprocess.Popen(
      [sys.executable, os.path.join(REPO_ROOT, "run_classifier_mgpu.py")] +
      _args(task, out, "--num_train_steps=100000", "--save_checkpoints_steps=1000000"),
      cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    lock = os.path.join(out, run_setup.LOCK_FILE)
    deadline = time.time() + 120
    while not (os.path.exists(lock) and open(lock).read().startswith("pid")):
      assert first.poll() is None and time.time() < deadline, "the first run never took the lock"
      time.sleep(0.2)
    second = run_script("run_classifier_mgpu.py", *_args(task, out, "--num_train_steps=4"))
    assert_one_line_error(second, "is in use by another training run (pid %d on " % first.pid,
                          "--output_dir")
    assert first.poll() is None  # Refused without touching the run in progress.
  finally:
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
  # The kernel released the dead run's lock: the next run takes it over and says so.
  third = run_script("run_classifier_mgpu.py", *_args(task, out, "--num_train_steps=4"))
  assert third.returncode == 0, third.stderr[-3000:]
  assert "Took over the lock of --output_dir=%s left by a run that ended (pid %d" % (
      out, first.pid) in third.stderr
  assert open(os.path.join(out, run_setup.LOCK_FILE)).read() == ""  # Released at exit.


def test_resuming_with_another_global_batch_says_what_to_pass(task, tmp_path):
  out = str(tmp_path / "out")
  proc = run_script("run_classifier_mgpu.py", *_args(task, out, "--num_train_epochs=1"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  # 2 towers double the global batch: 16 steps would already be the 2 epochs asked for.
  proc = run_script("run_classifier_mgpu.py", *_args(task, out, "--num_train_epochs=2",
                                                      "--n_gpus=2"))
  assert_one_line_error(proc, "different global batch", "4 there", "8 in this run",
                        "--n_gpus")


def test_resuming_under_another_schedule_says_how_the_rate_jumps(task, tmp_path):
  out = str(tmp_path / "out")
  proc = run_script("run_classifier_mgpu.py", *_args(task, out, "--num_train_epochs=1"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  proc = run_script("run_classifier_mgpu.py", *_args(task, out, "--num_train_epochs=2"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  # 16 of 16 steps (rate 0 at the end) become 16 of 32: 2e-3 * (1 - 16/32) = 1e-3.
  assert ("Resuming at step 16 under another learning-rate schedule: 16 steps (1 warm-up) at "
          "peak 0.002 before, 32 steps (3 warm-up) at peak 0.002 now, so the rate at step 16 "
          "jumps from 0 to 0.001") in proc.stderr


@pytest.mark.parametrize("key, value, problem", [
    ("flags", [1], "flags is [1]: expected an object"),
    ("schedule", {"num_train_steps": 8, "num_warmup_steps": 0, "learning_rate": "x"},
     'schedule.learning_rate is "x": expected a number'),
    ("global_batch_size", True, "global_batch_size is true: expected an integer"),
    ("labels", "negpos", 'labels is "negpos": expected a list'),
])
def test_run_info_of_the_wrong_types_is_one_error_naming_the_key(tmp_path, key, value, problem):
  """run_info.json's readers index its values (the schedule's numbers, the flags' object): a
  value of another type is an InputError naming the file and the key where it is read."""
  from core.errors import InputError  # pylint: disable=g-import-not-at-top
  from engine import run_info  # pylint: disable=g-import-not-at-top
  good = {"script": "run_classifier_mgpu.py", "flags": {"max_seq_length": 16},
          "schedule": {"num_train_steps": 8, "num_warmup_steps": 0, "learning_rate": 1e-3},
          "global_batch_size": 4, "labels": ["neg", "pos"]}
  run_info.write(str(tmp_path), good)
  assert run_info.read(str(tmp_path))["schedule"]["learning_rate"] == 1e-3
  run_info.write(str(tmp_path), dict(good, **{key: value}))
  with pytest.raises(InputError) as error:
    run_info.read(str(tmp_path))
  assert str(error.value).startswith(
      "%s: %s" % (os.path.join(str(tmp_path), run_info.FILE_NAME), problem)), error.value
