"""parallel/cluster.py: where a run's processes come from (flags, TF_CONFIG, Slurm)."""

import collections
import json

import pytest

from core.errors import InputError
from parallel import cluster


def test_no_source_is_one_process():
  single = cluster.resolve(None, None, environ={})
  assert single is cluster.SINGLE_PROCESS
  assert (single.num_processes, single.is_chief, single.device_prefix()) == (1, True, "")


def test_worker_hosts_and_task_index():
  c = cluster.resolve("h0:2222,h1:2222,h2:3333", 2, environ={"TF_CONFIG": "ignored"})
  assert (c.num_processes, c.rank, c.is_chief) == (3, 2, False)
  assert c.device_prefix() == "/job:worker/replica:0/task:2"
  assert c.device_prefix(0) == "/job:worker/replica:0/task:0"
  assert c.cluster_spec() == {"worker": ["h0:2222", "h1:2222", "h2:3333"]}
  assert c.describe() == "task 2 (worker:2 at h2:3333)"


def test_tf_config_with_a_chief_puts_it_first():
  env = {"TF_CONFIG": json.dumps({"cluster": {"worker": ["w0:1", "w1:1"], "chief": ["c:1"]},
                                  "task": {"type": "worker", "index": 1}})}
  c = cluster.resolve(None, None, environ=env)
  assert [t.address for t in c.tasks] == ["c:1", "w0:1", "w1:1"]
  assert c.rank == 2 and not c.is_chief
  assert c.device_prefix(0) == "/job:chief/replica:0/task:0"
  assert c.device_prefix() == "/job:worker/replica:0/task:1"
  env["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["w0:1"], "chief": ["c:1"]},
                                 "task": {"type": "chief", "index": 0}})
  assert cluster.resolve(None, None, environ=env).is_chief


def test_slurm_hostlists_and_tasks_per_node():
  assert cluster.expand_slurm_hostlist("node[01-03,07],gpu5") == [
      "node01", "node02", "node03", "node07", "gpu5"]
  assert cluster.expand_slurm_hostlist("r[1-2]n[8-9]") == ["r1n8", "r1n9", "r2n8", "r2n9"]
  env = {"SLURM_NTASKS": "5", "SLURM_PROCID": "3", "SLURM_STEP_NODELIST": "n[1-2],m7",
         "SLURM_STEP_TASKS_PER_NODE": "2(x2),1"}
  c = cluster.resolve(None, None, worker_port=4000, environ=env)
  assert [t.address for t in c.tasks] == ["n1:4000", "n1:4001", "n2:4000", "n2:4001", "m7:4000"]
  assert c.rank == 3 and c.source.startswith("Slurm")
  # One Slurm task, or no SLURM_PROCID (inside salloc, outside srun): one process.
  assert cluster.resolve(None, None, environ={"SLURM_NTASKS": "1", "SLURM_PROCID": "0"}) is \
      cluster.SINGLE_PROCESS
  assert cluster.resolve(None, None, environ={"SLURM_NTASKS": "4"}) is cluster.SINGLE_PROCESS


@pytest.mark.parametrize("hosts,index,environ,message", [
    ("h0:1,h1:1", 2, {}, "--task_index=2: expected 0 to 1"),
    ("h0:1,h1:1", None, {}, "--task_index=None"),
    ("h0:1,h0:1", 0, {}, "address h0:1 is given to more than one task"),
    ("h0:99999", 0, {}, "'h0:99999' is not host:port"),
    (None, None, {"TF_CONFIG": "[]"}, "TF_CONFIG: expected"),
    (None, None, {"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief"}}'},
     "task.type must be one of the cluster's jobs ['worker'], got 'chief'"),
    (None, None, {"TF_CONFIG": '{"cluster": {"worker": ["a:1"], "evaluator": ["b:1"]}}'},
     "job 'evaluator' is not supported"),
    (None, None, {"SLURM_NTASKS": "3", "SLURM_PROCID": "0", "SLURM_STEP_NODELIST": "n[1-2]",
                  "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}, "do not make SLURM_NTASKS=3"),
])
def test_bad_cluster_descriptions_name_what_is_wrong(hosts, index, environ, message):
  with pytest.raises(InputError, match=message.replace("[", r"\[").replace("(", r"\(")):
    cluster.resolve(hosts, index, environ=environ)


def test_an_in_graph_chief_names_what_holds_a_task_address_instead_of_waiting_without_end():
  """A Session spanning the tasks waits without end for an address that accepts connections
  but is not the task's TensorFlow server; wait_for_tasks asks each task for its devices first
  and names what it found: nothing, or another program. (Another run's server: in
  test_multiworker_scripts.py's bad cluster input.)"""
  import socket  # pylint: disable=g-import-not-at-top
  from script_runner import free_ports  # pylint: disable=g-import-not-at-top
  chief, empty, program = ["localhost:%d" % p for p in free_ports(3)]
  with socket.create_server(("localhost", int(program.split(":")[1])), backlog=128):
    assert cluster.server_devices(program, seconds=1) is None
    assert cluster.server_devices(empty, seconds=1) is None
    for address, message in [
        (empty, "task 1 (worker:1 at %s) not reachable: nothing listens there" % empty),
        (program, "task 1 (worker:1 at %s): something that is not a TensorFlow server "
                  "listens at %s" % (program, program))]:
      run = cluster.Cluster([cluster.Task("worker", 0, chief), cluster.Task("worker", 1, address)],
                            0, "--worker_hosts").in_graph_view()
      with pytest.raises(InputError) as raised:
        cluster.wait_for_tasks(run, timeout_s=1)
      assert str(raised.value) == message + (
          " (waited 1 s); start every process with the same --worker_hosts and --placement, "
          "or raise --collective_timeout_s")


def test_a_disagreement_names_the_flag_that_differs_not_one_it_switched_off():
  """An ELECTRA worker against an MLM chief: --disc_weight is None under --objective=mlm (it
  does nothing there) and sorts first, but the flag the user set differently is --objective."""
  run = cluster.Cluster([cluster.Task("worker", 0, "h0:1"), cluster.Task("worker", 1, "h1:1")],
                        0, "--worker_hosts")
  facts = {"mlm": [("--disc_weight", None), ("--n_gpus", 1), ("--objective", "mlm")],
           "electra": [("--disc_weight", repr(50.0)), ("--n_gpus", 1), ("--objective", "electra")]}
  # pylint: disable=protected-access
  rows = {rank: [cluster._fact_value(v) for _, v in facts[objective]]
          for rank, objective in enumerate(["mlm", "electra"])}
  message = cluster._first_disagreement(run, collections.OrderedDict(facts["mlm"]), rows)
  assert message.startswith("task 1 (worker:1 at h1:1) has a different --objective than the "
                            "chief, task 0 (worker:0 at h0:1): "), message
  # A flag that differs with a value on both sides is named as before, first in order.
  rows[1][1] = 2
  message = cluster._first_disagreement(run, collections.OrderedDict(facts["mlm"]), rows)
  assert "a different --n_gpus than the chief, task 0 (worker:0 at h0:1) (2 there, 1 on the " \
         "chief)" in message, message


def test_a_missing_worker_is_said_to_be_not_started_or_ended_and_why_it_may_have_ended():
  """A worker started without --do_train (with --do_eval only, say) ends at once, before it
  joins: its chief finds nothing at its address and says what that can mean."""
  from script_runner import free_ports  # pylint: disable=g-import-not-at-top
  chief, empty = ["localhost:%d" % p for p in free_ports(2)]
  run = cluster.Cluster([cluster.Task("worker", 0, chief), cluster.Task("worker", 1, empty)], 0,
                        "--worker_hosts")
  with pytest.raises(InputError) as raised:
    cluster.wait_for_tasks(run, timeout_s=1)
  assert str(raised.value).startswith(
      "task 1 (worker:1 at %s) not reachable: nothing listens there, so it was never started or "
      "has ended (with an error, or at once: without --do_train a process other than the chief "
      "has nothing to do) (waited 1 s); " % empty), str(raised.value)


def test_a_worker_of_a_run_that_does_not_train_has_no_part(caplog):
  """Eval, predict and export are the chief's: a worker started with the chief's eval-only
  command ends at once, saying so (it used to fail on the chief's labels.txt, or end silently)."""
  from engine import run_setup  # pylint: disable=g-import-not-at-top
  import tower_utils  # pylint: disable=g-import-not-at-top
  tasks = [cluster.Task("worker", 0, "h0:1"), cluster.Task("worker", 1, "h1:1")]

  def setup(rank, trains):
    spec = tower_utils.parallel_spec(1, cluster=cluster.Cluster(tasks, rank, "test"))
    return run_setup.RunSetup(parallel=spec, output_dir="out", init_checkpoint=None,
                              precision="fp32", batch_size_per_tower=8, trains=trains)

  with caplog.at_level("INFO"):
    assert setup(1, False).has_no_part()
  assert "task 1 (worker:1 at h1:1) has nothing to do in a run that does not train" in caplog.text
  assert not setup(0, False).has_no_part() and not setup(1, True).has_no_part()


def test_a_killed_workers_private_folder_is_removed_by_the_next_worker(tmp_path):
  """A non-chief's data cache lives in a temp folder removed at exit; one left by a process
  killed with SIGKILL (no exit handler runs) is removed when the next worker starts."""
  import os  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  from engine import run_setup  # pylint: disable=g-import-not-at-top
  gone = subprocess.Popen([sys.executable, "-c", "pass"])
  gone.wait()
  orphan = tmp_path / ("bert-mgpu-task1-pid%d-abc" % gone.pid)
  (orphan / "cache").mkdir(parents=True)
  running = tmp_path / ("bert-mgpu-task2-pid%d-def" % os.getpid())  # A live worker's: kept.
  unnamed = tmp_path / "bert-mgpu-task3-ghi"  # No PID in the name: not ours to judge.
  running.mkdir()
  unnamed.mkdir()
  mine = run_setup.private_output_dir(1, parent=str(tmp_path))
  assert not orphan.exists() and running.exists() and unnamed.exists()
  assert os.path.isdir(mine)
  assert os.path.basename(mine).startswith("bert-mgpu-task1-pid%d-" % os.getpid())
