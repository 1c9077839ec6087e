"""Run scripts as several processes on localhost: outputs, a killed process, resume, bad input."""

import glob
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from script_runner import CHINESE_VOCAB, REPO_ROOT, assert_one_line_error, finish_processes, free_ports, \
    run_processes, script_command, start_processes, write_tiny_bert_config
from test_classifier import _make_task
from test_rewrite_script import _common_flags as rewrite_flags
from test_rewrite_script import _write_data as write_rewrite_data
from test_run_pretraining import _count_records, data  # pylint: disable=unused-import

STEPS_PER_EPOCH = 8  # 64 training rows, 4 rows x 1 tower x 2 processes per step


@pytest.fixture(scope="module")
def task(tmp_path_factory):
  root = tmp_path_factory.mktemp("mw_task")
  return _make_task(root / "data"), write_tiny_bert_config(root / "bert_config.json", 21128)


# How long a process waits for a peer (--collective_timeout_s): well within the tests' bounds
# (200-300 s), so that a peer that failed shows as the waiting process's error line, not as a
# test that killed it at its bound.
PEER_TIMEOUT_S = 120


def _commands(task, output_dir, hosts, *extra, n_gpus=(1, 1)):
  """The classifier command of each process of a run on `hosts`."""
  data_dir, config = task
  return [script_command(
      "run_classifier_mgpu.py", "--task_name=tsv", "--data_dir=%s" % data_dir,
      "--vocab_file=%s" % CHINESE_VOCAB, "--bert_config_file=%s" % config,
      "--output_dir=%s" % output_dir, "--max_seq_length=16", "--train_batch_size=4",
      "--predict_batch_size=3", "--eval_batch_size=4", "--learning_rate=1e-3",
      "--log_every_n_steps=4", "--n_gpus=%d" % n_gpus[i], "--worker_hosts=%s" % hosts,
      "--task_index=%d" % i, "--collective_timeout_s=%d" % PEER_TIMEOUT_S, *extra)
      for i in range(len(n_gpus))]


def _hosts(n=2):
  return ",".join("localhost:%d" % p for p in free_ports(n))


def test_two_processes_train_evaluate_predict_and_only_the_chief_writes(task, tmp_path):
  out = tmp_path / "out"
  results = run_processes(_commands(task, out, _hosts(), "--do_train", "--do_eval",
                                    "--do_predict", "--num_train_epochs=2"), timeout=300)
  chief, worker = results
  chief_log, worker_log = chief.stderr, worker.stderr
  assert chief.returncode == 0, chief_log[-3000:]
  assert worker.returncode == 0, worker_log[-3000:]
  assert "global batch 8 (4 x 1 towers x 2 processes x 1 accumulation steps), 16 steps" in \
      chief_log
  for log in (chief_log, worker_log):
    assert "Weights identical in all 2 processes at the end of training" in log
  assert "Training done at step 16; the chief (task 0" in worker_log
  # The worker cached its data in a scratch directory, removed when it ended.
  scratch = re.search(r"caches its data in (\S+)", worker_log).group(1)
  assert scratch != str(out) and not os.path.exists(scratch)
  # output_dir holds exactly what a one-process run writes: one summary file, one cache per
  # split, the chief's checkpoints and results.
  names = sorted(os.listdir(out))
  assert len([n for n in names if n.startswith("events.out.tfevents")]) == 1, names
  for split in ("train", "dev", "test"):
    assert len([n for n in names if n.startswith(split + "-")]) == 1, names
  assert {"checkpoint", "eval_results.txt", "predict.txt", "test_results.tsv",
          "labels.txt", "model.ckpt-16.index"} <= set(names)
  assert len((out / "predict.txt").read_text().splitlines()) == 13
  assert "global_step = 16" in (out / "eval_results.txt").read_text()


def test_the_readme_launcher_runs_two_local_processes(task, tmp_path):
  """README's `bash scripts/launch_local_workers.sh 2 run_classifier_mgpu.py ...`, as written."""
  data_dir, config = task
  out = tmp_path / "two_procs"
  env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2",
             VIRTUAL_ENV=sys.prefix, PYTHON=sys.executable)
  launcher = subprocess.Popen(
      ["bash", os.path.join(REPO_ROOT, "scripts", "launch_local_workers.sh"), "2",
       "run_classifier_mgpu.py", "--task_name=tsv", "--data_dir=%s" % data_dir,
       "--vocab_file=%s" % CHINESE_VOCAB, "--bert_config_file=%s" % config,
       "--output_dir=%s" % out, "--do_train", "--do_eval", "--do_predict",
       "--max_seq_length=16", "--train_batch_size=4", "--learning_rate=1e-3",
       "--num_train_epochs=1", "--n_gpus=1"],
      cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      start_new_session=True)
  try:
    _, stderr = launcher.communicate(timeout=300)
  except subprocess.TimeoutExpired:
    os.killpg(launcher.pid, signal.SIGKILL)  # The launcher's own session: its 2 processes.
    launcher.communicate()
    raise
  assert launcher.returncode == 0, stderr[-3000:]
  assert "[launch] 2 processes on localhost:" in stderr
  assert "[task 1] " in stderr and "global batch 8 (4 x 1 towers x 2 processes" in stderr
  assert len((out / "predict.txt").read_text().splitlines()) == 13
  assert "global_step = 8" in (out / "eval_results.txt").read_text()


def _wait_for(pattern, seconds):
  deadline = time.time() + seconds
  while time.time() < deadline:
    if glob.glob(pattern):
      return True
    time.sleep(0.2)
  return False


def _latest_step(out):
  text = (out / "checkpoint").read_text()
  return int(re.search(r'model_checkpoint_path: "model.ckpt-(\d+)"', text).group(1))


def test_a_killed_process_stops_the_other_and_a_relaunch_resumes(task, tmp_path):
  out = tmp_path / "out"
  hosts = _hosts()
  timeout = 20
  procs = start_processes(_commands(task, out, hosts, "--do_train", "--num_train_epochs=500",
                                    "--save_checkpoints_steps=10",
                                    "--collective_timeout_s=%d" % timeout))
  try:
    assert _wait_for(str(out / "model.ckpt-20.index"), 180), "no checkpoint at step 20"
  finally:
    procs[1].send_signal(signal.SIGKILL)
  killed = time.time()
  chief = finish_processes(procs, timeout=timeout + 60)[0]
  assert time.time() - killed < timeout + 30
  assert_one_line_error(chief, "task 1 (worker:1 at %s)" % hosts.split(",")[1],
                        "Relaunch every process")
  saved = _latest_step(out)
  assert 20 <= saved < 500 * STEPS_PER_EPOCH

  # Relaunched (on new ports) with a schedule ending 16 steps later: both continue from the
  # chief's checkpoint, and the worker learns the step from the chief.
  epochs = (saved + 16) / float(STEPS_PER_EPOCH)
  results = run_processes(_commands(task, out, _hosts(), "--do_train",
                                    "--num_train_epochs=%r" % epochs), timeout=300)
  chief_log, worker_log = results[0].stderr, results[1].stderr
  assert results[0].returncode == 0 and results[1].returncode == 0, (chief_log[-2000:],
                                                                     worker_log[-2000:])
  assert "Resuming from %s" % (out / ("model.ckpt-%d" % saved)) in chief_log
  for log in (chief_log, worker_log):
    assert "steps %d -> %d" % (saved, saved + 16) in log
  assert _latest_step(out) == saved + 16


def test_early_stopping_stops_every_process_at_the_chiefs_step(task, tmp_path):
  # 10 dev rows: accuracy has 11 values, so with patience 1 an evaluation without a strict
  # improvement comes within 12 evaluations (step 24), long before the 160 steps of 20 epochs.
  out = tmp_path / "out"
  args = ("--do_train", "--num_train_epochs=20", "--eval_every_n_steps=2", "--keep_best",
          "--best_metric=eval_accuracy", "--early_stopping_patience=1")
  chief, worker = run_processes(_commands(task, out, _hosts(), *args), timeout=300)
  assert chief.returncode == 0 and worker.returncode == 0, (chief.stderr[-2000:],
                                                            worker.stderr[-2000:])
  best_step = int(dict(line.split(" = ", 1) for line in
                       (out / "best_results.txt").read_text().splitlines())["global_step"])
  stop = best_step + 2
  assert stop <= 24 and "Early stopping at step %d" % stop in chief.stderr
  assert "Training done at step %d;" % stop in worker.stderr
  for log in (chief.stderr, worker.stderr):
    assert "Weights identical in all 2 processes at the end of training" in log
  assert _latest_step(out) == stop
  history = (out / "eval_history.tsv").read_text().splitlines()
  assert [int(line.split("\t")[0]) for line in history[1:]] == list(range(2, stop + 1, 2))

  # Relaunched: the chief's best_results.txt says stop, and every process learns it.
  chief, worker = run_processes(_commands(task, out, _hosts(), *args), timeout=300)
  assert chief.returncode == 0 and worker.returncode == 0, (chief.stderr[-2000:],
                                                            worker.stderr[-2000:])
  for log in (chief.stderr, worker.stderr):
    assert "Training stopped early at step %d" % stop in log
  assert _latest_step(out) == stop


def test_processes_started_with_different_flags_are_refused(task, tmp_path):
  results = run_processes(_commands(task, tmp_path / "out", _hosts(), "--do_train",
                                    n_gpus=(1, 2)), timeout=200)
  for proc in results:
    assert_one_line_error(proc, "task 1", "--n_gpus", "(2 there, 1 on the chief)")


def test_processes_that_differ_in_a_flag_of_the_loss_are_refused(task, tmp_path):
  """Every flag that changes the model or the loss is compared (common_flags' MODEL and UPDATE
  flags), not only the parallel ones: here --class_weights, which weighs the chief's share of
  the loss otherwise than the other's."""
  commands = _commands(task, tmp_path / "out", _hosts(), "--do_train")
  commands[1].append("--class_weights=balanced")
  for proc in run_processes(commands, timeout=200):
    assert_one_line_error(proc, "task 1", "different --class_weights than the chief")
  assert not glob.glob(str(tmp_path / "out" / "model.ckpt-*"))


def test_a_run_killed_at_the_tests_bound_leaves_its_output_and_its_stacks(task, tmp_path):
  """What a hosted run that the test had to kill printed is kept, and ends with every thread's
  Python stack at that moment: what the run was waiting for (here, after it joined the
  cluster: its missing peer)."""
  alone = _commands(task, tmp_path / "out", _hosts(), "--do_train",
                    "--collective_timeout_s=600")[0]
  started, = start_processes([alone])
  # Waits (at most 60 s) for the line that says it joined, then gives it 1 s to be waiting:
  # the test's bound is then met where the run waits for its peer, not at a fixed late time.
  before = []
  reader = threading.Thread(target=lambda: any(
      before.append(line) or "Joined the cluster as task 0" in line for line in started.stderr),
                            daemon=True)
  reader.start()
  reader.join(60)
  if reader.is_alive():  # No join line within 60 s: ended by its PID, and the checks below fail.
    started.kill()
    started.wait()
    reader.join(10)
  proc, = finish_processes([started], timeout=1)
  stderr = "".join(before) + proc.stderr
  assert proc.returncode is None, stderr[-3000:]
  assert "Joined the cluster as task 0" in stderr, stderr[-3000:]
  stacks = stderr[stderr.index("most recent call first"):]
  assert 'tests/script_host.py", line' in stacks and "in _become" in stacks, stacks


def test_bad_cluster_input_is_a_one_line_error(task, tmp_path):
  lone_hosts = _hosts()
  inter_hosts = [_hosts(), _hosts()]
  # Another program holds the other task's port: it accepts connections but is no TensorFlow
  # server (a Session spanning it would wait without end).
  held_hosts = [_hosts(), _hosts()]
  holders = [socket.create_server(("localhost", int(hosts.split(",")[1 - i].split(":")[1])),
                                  backlog=128) for i, hosts in enumerate(held_hosts)]
  cases = [
      ({"TF_CONFIG": '{"cluster": '}, ["--worker_hosts="], "TF_CONFIG is not valid JSON"),
      ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["localhost:1"], "ps": ["localhost:2"]},
                                 "task": {"type": "worker", "index": 0}})},
       ["--worker_hosts="], "job 'ps' is not supported"),
      ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["localhost:1", "localhost:2"]},
                                 "task": {"type": "worker", "index": 2}})},
       ["--worker_hosts="], "task.index=2 is outside cluster.worker (2 tasks)"),
      ({}, ["--worker_hosts=localhost:1,localhost:2", "--task_index=2"],
       "--task_index=2: expected 0 to 1"),
      ({}, ["--worker_hosts=localhost:1,localhost", "--task_index=0"],
       "'localhost' is not host:port"),
      # Only the chief is started: the other task never answers.
      ({}, ["--worker_hosts=%s" % lone_hosts, "--task_index=0", "--collective_timeout_s=5"],
       "task 1 (worker:1 at %s) not reachable" % lone_hosts.split(",")[1]),
      ({}, ["--worker_hosts=", "--placement=inter_first", "--pipeline_stages=2", "--n_gpus=2"],
       "--placement=inter_first: expected several processes"),
      ({}, ["--worker_hosts=localhost:1,localhost:2", "--task_index=0", "--n_gpus=1",
            "--placement=inter_first", "--pipeline_stages=3"],
       "2 processes x --n_gpus=1 devices are not a multiple of --pipeline_stages=3"),
      # inter_first, one process alone: the chief waits for the other, the other for the chief.
      # (10 s: its server must outlive the next case's 5 s probe of it; they start together.)
      ({}, ["--worker_hosts=%s" % inter_hosts[0], "--task_index=0", "--placement=inter_first",
            "--pipeline_stages=2", "--collective_timeout_s=10"],
       "task 1 (worker:1 at %s) not reachable" % inter_hosts[0].split(",")[1]),
      # ... and meanwhile its server is task 1's address of another run's chief.
      ({}, ["--worker_hosts=%s,%s" % (_hosts(1), inter_hosts[0].split(",")[0]), "--task_index=0",
            "--placement=inter_first", "--pipeline_stages=2", "--collective_timeout_s=5"],
       "task 1 (worker:1 at {0}): the TensorFlow server at {0} is another run's (its devices "
       "are /job:worker/replica:0/task:0, expected /job:worker/replica:0/task:1/...) (waited 5 "
       "s)".format(inter_hosts[0].split(",")[0])),
      ({}, ["--worker_hosts=%s" % inter_hosts[1], "--task_index=1", "--placement=inter_first",
            "--pipeline_stages=2", "--collective_timeout_s=5"],
       "the chief: task 0 (worker:0 at %s) not reachable: nothing listens there (waited 5 s)" %
       inter_hosts[1].split(",")[0]),
      ({}, ["--worker_hosts=%s" % held_hosts[0], "--task_index=0", "--placement=inter_first",
            "--pipeline_stages=2", "--collective_timeout_s=5"],
       "task 1 (worker:1 at {0}): something that is not a TensorFlow server listens at {0} "
       "(waited 5 s)".format(held_hosts[0].split(",")[1])),
      ({}, ["--worker_hosts=%s" % held_hosts[1], "--task_index=1", "--placement=inter_first",
            "--pipeline_stages=2", "--collective_timeout_s=5"],
       "the chief: task 0 (worker:0 at {0}): something that is not a TensorFlow server listens "
       "at {0} (waited 5 s)".format(held_hosts[1].split(",")[0])),
  ]
  procs = []
  for env, flags, _ in cases:
    command = _commands(task, tmp_path / ("out%d" % len(procs)), "x", "--do_train")[0]
    command = [a for a in command if not a.startswith(("--worker_hosts", "--task_index"))]
    procs += start_processes([command + flags], env_updates=env)
  try:
    for proc, (_, _, fragment) in zip(finish_processes(procs, 200), cases):
      assert_one_line_error(proc, fragment)
  finally:
    for holder in holders:
      holder.close()


def _accept_and_close(listener):
  """Accepts every connection to `listener` and closes it at once, until the listener closes."""
  while True:
    try:
      listener.accept()[0].close()
    except OSError:
      return


def test_a_worker_whose_chief_never_joins_stops_within_its_timeout(task, tmp_path):
  """Task 1 alone, its chief's address (a) free, (b) held by a plain listener, (c) a listener
  that closes every connection at once: each stops after --collective_timeout_s with a line
  naming the chief and what is at its address (it waited without end for the chief's step
  numbers, whatever its timeout)."""
  hosts = [_hosts() for _ in range(3)]
  chiefs = [h.split(",")[0] for h in hosts]
  held = socket.create_server(("localhost", int(chiefs[1].split(":")[1])), backlog=128)
  closing = socket.create_server(("localhost", int(chiefs[2].split(":")[1])), backlog=128)
  threading.Thread(target=_accept_and_close, args=(closing,), daemon=True).start()
  expected = ["task 0 (worker:0 at %s) not reachable: nothing listens there" % chiefs[0]] + [
      "task 0 (worker:0 at {0}): something that is not a TensorFlow server listens at {0}"
      .format(chief) for chief in chiefs[1:]]
  commands = [_commands(task, tmp_path / ("out%d" % i), h, "--do_train",
                        "--collective_timeout_s=3")[1] for i, h in enumerate(hosts)]
  started = time.time()
  try:
    results = finish_processes(start_processes(commands), 60)
  finally:
    held.close()
    closing.close()
  for proc, fragment in zip(results, expected):
    assert_one_line_error(proc, fragment + " (waited 3 s)")
  assert time.time() - started < 45


def _read_until(stream, text, seconds):
  """Reads lines of a process's `stream` until one holds `text`; False after `seconds`."""
  deadline = time.time() + seconds
  while time.time() < deadline:
    if select.select([stream], [], [], max(deadline - time.time(), 0))[0]:
      line = stream.readline()
      if text in line:
        return True
      if not line:
        return False
  return False


def test_a_worker_whose_chief_leaves_after_joining_stops_within_its_timeout(task, tmp_path):
  """The chief is killed right after the processes joined, while the worker builds its graph:
  the worker's first broadcast asked the missing chief for step numbers without end."""
  hosts = _hosts()
  chief, worker = start_processes(_commands(task, tmp_path / "out", hosts, "--do_train",
                                            "--collective_timeout_s=3"))
  try:
    assert _read_until(chief.stderr, "All 2 processes joined", 60)
  finally:
    chief.send_signal(signal.SIGKILL)
  killed = time.time()
  _, worker = finish_processes([chief, worker], 40)
  assert_one_line_error(worker, "the chief left after the processes joined: task 0 (worker:0 at "
                        "%s) not reachable: nothing listens there" % hosts.split(",")[0],
                        "Relaunch every process")
  assert time.time() - killed < 20


def _pretraining_commands(data, out, hosts, *extra):
  return [script_command(
      "run_pretraining_mgpu.py", "--bert_config_file=" + data["config"],
      "--vocab_file=" + data["vocab"], "--input_file=" + data["dynamic_mlm"],
      "--output_dir=%s" % out, "--n_gpus=1", "--train_batch_size=4", "--eval_batch_size=4",
      "--learning_rate=1e-3", "--num_warmup_steps=1", "--log_every_n_steps=1",
      "--masking=whole_word", "--worker_hosts=" + hosts, "--task_index=%d" % i, *extra)
          for i in range(2)]


def _rewrite_commands(data_dir, out, hosts, *extra):
  return [script_command(
      "run_rewrite_finetune.py", *rewrite_flags(data_dir, str(out)), "--n_gpus=1",
      "--train_batch_size=8", "--learning_rate=2e-3", "--predict_batch_size=4",
      "--beam_size=1", "--log_every_n_steps=1", "--worker_hosts=" + hosts,
      "--task_index=%d" % i, *extra) for i in range(2)]


@pytest.mark.parametrize("script", ["pretraining", "rewrite"])
def test_pretraining_and_rewrite_train_with_two_processes_and_resume(script, data, tmp_path):
  out = tmp_path / "out"
  if script == "pretraining":
    commands = lambda *extra: _pretraining_commands(data, out, _hosts(), *extra)
    final = ["--do_eval", "--do_predict", "--max_eval_steps=0"]
  else:
    data_dir = str(tmp_path / "rewrite_data")
    num_test = len(write_rewrite_data(data_dir, num_hidden_layers=1))
    commands = lambda *extra: _rewrite_commands(data_dir, out, _hosts(), *extra)
    final = ["--do_predict"]
  first = run_processes(commands("--do_train", "--num_train_steps=3"), timeout=300)
  assert [p.returncode for p in first] == [0, 0], first[0].stderr[-2000:] + first[1].stderr[-2000:]
  assert _latest_step(out) == 3
  second = run_processes(commands("--do_train", "--num_train_steps=6", *final), timeout=300)
  assert [p.returncode for p in second] == [0, 0], (second[0].stderr[-2000:] +
                                                     second[1].stderr[-2000:])
  assert "Resuming from %s" % (out / "model.ckpt-3") in second[0].stderr
  for proc in second:
    assert "steps 3 -> 6" in proc.stderr
    assert "Weights identical in all 2 processes at the end of training" in proc.stderr
  assert _latest_step(out) == 6
  predictions = (out / "predict.txt").read_text(encoding="utf-8").splitlines()
  if script == "pretraining":
    assert "global_step = 6" in (out / "eval_results.txt").read_text()
    assert (out / "export" / "bert_model.ckpt.index").exists()
    assert len(predictions) == _count_records(data["dynamic_mlm"])
  else:
    assert len(predictions) == num_test


def test_inter_first_tower_spans_the_processes_and_the_chief_writes_everything(task, tmp_path):
  """--placement=inter_first with 2 processes x 1 device and 2 stages: one tower whose stage s
  runs in process s; the chief trains, evaluates and predicts, the other only serves."""
  out = tmp_path / "out"
  chief, worker = run_processes(_commands(
      task, out, _hosts(), "--do_train", "--do_eval", "--do_predict", "--num_train_epochs=1",
      "--pipeline_stages=2", "--num_micro_batches=2", "--placement=inter_first"), timeout=300)
  assert chief.returncode == 0, chief.stderr[-3000:]
  assert worker.returncode == 0, worker.stderr[-3000:]
  log = chief.stderr
  assert "tower 0 stage 0 -> /job:worker/replica:0/task:0/device:CPU:0" in log
  assert "tower 0 stage 1 -> /job:worker/replica:0/task:1/device:CPU:0" in log
  # One graph reads all the data: the global batch is 4 rows x 1 tower, 64 rows in 16 steps.
  assert "global batch 4 (4 x 1 towers x 1 processes x 1 accumulation steps), 16 steps" in log
  assert "serves its devices to the chief's graph" in worker.stderr
  assert "Released by the chief" in worker.stderr
  assert len((out / "predict.txt").read_text().splitlines()) == 13
  assert "global_step = 16" in (out / "eval_results.txt").read_text()
