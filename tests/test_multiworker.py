"""Multi-process training on localhost: 2 processes x 2 towers == 1 process x 4 towers."""

import os
import re
import signal
import sys
import time

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import multiworker_case as case
from parallel import cluster as cluster_lib
import script_runner
import tower_utils


# Every case compares values: its Sessions, here and in the worker processes, run without
# Grappler (tests/graph_math.py; test_multiworker_scripts.py trains the same way with it).
pytestmark = pytest.mark.graph_math

_NOT_NUMBERS = ("checksums", "devices", "variable_devices")


@pytest.fixture(scope="module")
def init_values(tmp_path_factory):
  """The starting weights of every run: one initialization, saved for the worker processes."""
  with tf.Graph().as_default():
    tf.set_random_seed(7)
    features = {k: tf.constant(v[:case.ROWS_PER_UPDATE]) for k, v in case.data().items()}
    tower_utils.build_towers(case.tower_fn, features, tower_utils.parallel_spec(1))
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      values = sess.run({v.op.name: v for v in tf.trainable_variables()})
  path = str(tmp_path_factory.mktemp("init") / "init.npz")
  np.savez(path, **values)
  return path, values


@pytest.fixture(scope="module")
def worker_results(init_values, tmp_path_factory):
  """Every case of multiworker_case.CASES, run by 2 worker processes of 2 towers each."""
  out = str(tmp_path_factory.mktemp("workers"))
  hosts = ",".join("localhost:%d" % p for p in script_runner.free_ports(2))
  commands = [[sys.executable, os.path.join(script_runner.REPO_ROOT, "tests",
                                            "multiworker_case.py"),
               "--worker_hosts=" + hosts, "--task_index=%d" % i, "--init=" + init_values[0],
               "--out=" + out] for i in range(2)]
  for proc in script_runner.run_processes(commands, timeout=900):
    assert proc.returncode == 0, proc.stderr[-3000:]
  results = {(reduction, accum, stages, task): dict(np.load(os.path.join(
      out, "%s_%d_%d_task%d.npz" % (reduction, accum, stages, task))))
             for reduction, accum, stages in case.CASES for task in range(2)}
  results.update({(reduction, accum, stages, "inter_first"): dict(np.load(os.path.join(
      out, "%s_%d_%d_inter_first.npz" % (reduction, accum, stages))))
                  for reduction, accum, stages in case.INTER_FIRST_CASES})
  for reduction, accum, placement in case.ONE_F_ONE_B_CASES:
    names = (["%s_%d_2_inter_first_1f1b.npz" % (reduction, accum)] if placement == "inter_first"
             else ["%s_%d_1f1b_task%d.npz" % (reduction, accum, task) for task in range(2)])
    results[(reduction, accum, placement, "1f1b")] = [dict(np.load(os.path.join(out, name)))
                                                      for name in names]
  return results


@pytest.fixture(scope="module")
def references(init_values):
  """One process of 4 towers (no pipeline), per accumulation."""
  return {accum: case.run("shared", accum, cluster_lib.SINGLE_PROCESS, init_values[1])
          for accum in (1, 2)}


@pytest.mark.parametrize("reduction,accum,stages", case.CASES)
def test_two_processes_of_two_towers_equal_one_process_of_four(init_values, worker_results,
                                                               references, reduction, accum,
                                                               stages):
  """Two processes of 2 towers (or of 1 tower of 2 pipeline stages and 2 micro-batches)."""
  # The same accumulation in one process: a weighted loss is normalised per micro-batch.
  reference = references[accum]
  chief = worker_results[(reduction, accum, stages, 0)]
  other = worker_results[(reduction, accum, stages, 1)]
  # Loss of each update, the averaged gradients of update 1, and every variable and Adam slot
  # (global_step too) after both updates.
  assert set(chief) == set(reference)
  assert any(name.endswith("/adam_m") for name in reference)
  assert any(name.startswith("grad/") for name in reference)
  for name in reference:
    if name in _NOT_NUMBERS:
      continue
    np.testing.assert_allclose(chief[name], reference[name], atol=1e-5, rtol=0, err_msg=name)
    # Both processes hold the same values (each applies the same update to its own copy).
    np.testing.assert_allclose(other[name], chief[name], atol=1e-6, rtol=0, err_msg=name)
  # The processes' own check agrees: equal checksums everywhere.
  assert chief["checksums"][0] == chief["checksums"][1] == other["checksums"][1]
  # The updates moved the weights, so equality is not between two untouched states.
  moved = max(np.max(np.abs(reference[n] - init_values[1][n])) for n in init_values[1])
  assert moved > 1e-3


def _task_device(task, index):
  return "/job:worker/replica:0/task:%d/device:CPU:%d" % (task, index)


@pytest.mark.parametrize("reduction,accum,stages", case.INTER_FIRST_CASES)
def test_both_placements_equal_one_process_with_the_device_maps_they_promise(
    init_values, worker_results, references, reduction, accum, stages):
  """2 processes x 2 devices, 2 towers of 2 stages: intra_first (a process holds a whole tower)
  and inter_first (a tower's stages span the processes) give the one-process result."""
  reference = references[accum]
  inter = worker_results[(reduction, accum, stages, "inter_first")]
  intra = [worker_results[(reduction, accum, stages, task)] for task in range(2)]
  for name in reference:
    if name not in _NOT_NUMBERS:
      np.testing.assert_allclose(inter[name], reference[name], atol=1e-5, rtol=0, err_msg=name)
      np.testing.assert_allclose(inter[name], intra[0][name], atol=1e-5, rtol=0, err_msg=name)
  # inter_first: tower i's stage s is device i of process s.
  assert inter["devices"].tolist() == [[_task_device(0, 0), _task_device(1, 0)],
                                       [_task_device(0, 1), _task_device(1, 1)]]
  # intra_first: each process's tower has both stages on that process's devices.
  for task in range(2):
    assert intra[task]["devices"].tolist() == [[_task_device(task, 0), _task_device(task, 1)]]
  # The cut puts the embeddings on stage 0 and the one encoder layer (and the head) on stage 1:
  # in inter_first the variables themselves live in the other process.
  placed = dict(item.split("=") for item in inter["variable_devices"])
  assert placed["bert/embeddings/word_embeddings"] == _task_device(0, 0)
  assert placed["bert/encoder/layer_0/output/dense/kernel"] == _task_device(1, 0)
  assert placed["output_weights"] == _task_device(1, 0)


@pytest.mark.parametrize("reduction,accum,placement", case.ONE_F_ONE_B_CASES)
def test_1f1b_in_two_processes_equals_one_process(init_values, worker_results, references,
                                                  reduction, accum, placement):
  """--pipeline_schedule=1f1b, 2 stages x 2 micro-batches, both placements: the one-process
  4-tower update (losses, gradients, variables, Adam slots), the same in every process."""
  reference = references[accum]
  runs = worker_results[(reduction, accum, placement, "1f1b")]
  for name in reference:
    if name in _NOT_NUMBERS:
      continue
    for run in runs:
      np.testing.assert_allclose(run[name], reference[name], atol=1e-5, rtol=0, err_msg=name)
  if len(runs) == 2:
    assert runs[0]["checksums"][0] == runs[0]["checksums"][1] == runs[1]["checksums"][1]


def test_a_worker_whose_chief_left_ends_within_its_timeout_at_a_first_collective():
  """The chief exits, or stops (SIGSTOP), after the processes met: the other's barrier before
  the exit, a collective it runs for the first time, waited without end for the chief's step
  numbers, whatever the collective's timeout. It now ends within the timeout (plus the probes'
  seconds), naming the chief and what is at its address. So does the chief of an in-graph run
  whose serving task stops (its Session waited for that task without end)."""
  timeout_s = 3
  commands, addresses = [], []
  for how in ("exit", "stop"):
    hosts = ["localhost:%d" % p for p in script_runner.free_ports(2)]
    addresses.append(hosts[0])
    commands += [[sys.executable, os.path.join(script_runner.REPO_ROOT, "tests",
                                               "multiworker_case.py"),
                  "--worker_hosts=" + ",".join(hosts), "--task_index=%d" % i,
                  "--chief_leaves=" + how, "--timeout_s=%d" % timeout_s] for i in range(2)]
  # And the chief of an in-graph run whose serving task stops (the test sends SIGSTOP).
  hosts = ["localhost:%d" % p for p in script_runner.free_ports(2)]
  commands += [[sys.executable, os.path.join(script_runner.REPO_ROOT, "tests",
                                             "multiworker_case.py"),
                "--worker_hosts=" + ",".join(hosts), "--task_index=%d" % i,
                "--chief_leaves=serving_task_stops", "--timeout_s=%d" % timeout_s]
               for i in range(2)]
  procs = script_runner.start_processes(commands)
  started = time.time()
  try:
    in_graph_chief, serving = procs[4:]
    ran = in_graph_chief.stderr.readline()
    while ran and "ran on task 1" not in ran:
      ran = in_graph_chief.stderr.readline()
    serving.send_signal(signal.SIGSTOP)
    workers = script_runner.finish_processes(procs[1:4:2] + [in_graph_chief], timeout=60)
  finally:
    for proc in procs[::2] + [procs[5]]:
      if proc.poll() is None:
        proc.kill()  # The stopped ones (a SIGKILL ends a stopped process too).
    script_runner.finish_processes(procs[::2] + [procs[5]], timeout=10)
  assert time.time() - started < 45
  expected = ["task 0 (worker:0 at %s) not reachable: nothing listens there" % addresses[0],
              "task 0 (worker:0 at {0}): its server accepts connections at {0} but does not "
              "answer (the process is stopped or stuck".format(addresses[1])]
  for worker, fragment in zip(workers, expected):
    assert "the barrier starts" in worker.stderr, worker.stderr[-3000:]
    line = script_runner.assert_one_line_error(
        worker, "error: the chief stopped answering: " + fragment,
        "task 1 (worker:1 at ", "Relaunch every process")
    assert int(re.search(r"\(waited (\d+) s\)", line).group(1)) <= timeout_s + 3, line
  line = script_runner.assert_one_line_error(
      workers[2], "error: a process serving the chief's graph stopped answering: task 1 "
      "(worker:1 at {0}): its server accepts connections at {0} but does not answer".format(
          hosts[1]), "task 0 (worker:0 at ")
  assert int(re.search(r"\(waited (\d+) s\)", line).group(1)) <= timeout_s + 3, line


def test_each_process_feeds_a_disjoint_share_of_every_micro_batch():
  for accum in (1, 2):
    rows = [case.process_rows(r, 2, accum) for r in range(2)]
    assert not set(rows[0]) & set(rows[1])
    assert sorted(np.concatenate(rows)) == list(range(case.UPDATES * case.ROWS_PER_UPDATE))
