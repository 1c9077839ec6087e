"""What a GPU machine would get, proven without one: the GPU branch of the session config, the
NCCL hint of collectives on GPUs, fused GELU compiled on GPUs only under --use_xla, the weight
checksum next to each variable, CUDA_VISIBLE_DEVICES=-1 as no GPU, and XLA auto-clustering
(the ON_1 jit level that --use_xla sets, which TensorFlow applies to CPUs only when
TF_XLA_FLAGS=--tf_xla_cpu_global_jit)."""

import os
import subprocess
import sys
import textwrap

import pytest
import tensorflow.compat.v1 as tf

from engine import tf_env
import modeling
from parallel import cluster as cluster_lib
from parallel import collective
from parallel import strategies
import tower_utils
from test_towers import CONFIG, _data, classifier_tower_fn

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWO_TASKS = cluster_lib.Cluster([cluster_lib.Task("worker", 0, "localhost:1"),
                                 cluster_lib.Task("worker", 1, "localhost:2")], 0, "test")


def test_the_session_config_on_gpus(monkeypatch):
  monkeypatch.setattr(tower_utils, "num_visible_gpus", lambda: 4)
  config = tower_utils.session_config(4, use_xla=True)
  # Memory grows as needed (several processes may share a host), no virtual CPUs, soft
  # placement for the few int ops without GPU kernels, XLA auto-clustering on.
  assert config.gpu_options.allow_growth and config.allow_soft_placement
  assert "CPU" not in config.device_count
  assert config.graph_options.optimizer_options.global_jit_level == tf.OptimizerOptions.ON_1
  assert not config.experimental.collective_nccl  # one process: no collectives
  multi = tower_utils.session_config(4, cluster=TWO_TASKS)
  assert multi.experimental.collective_nccl
  assert multi.experimental.collective_group_leader == "/job:worker/replica:0/task:0"
  assert list(multi.device_filters) == ["/job:worker/replica:0/task:0"]
  monkeypatch.setattr(tower_utils, "num_visible_gpus", lambda: 0)
  cpu = tower_utils.session_config(4)
  assert cpu.device_count["CPU"] == 4 and not cpu.gpu_options.allow_growth


@pytest.mark.parametrize("device, hint", [("/job:worker/replica:0/task:0/device:GPU:1", "nccl"),
                                          ("/job:worker/replica:0/task:0/device:CPU:1", "ring")])
def test_collectives_on_gpus_ask_for_nccl(device, hint):
  members = [device, device.replace("task:0", "task:1")]
  with tf.Graph().as_default() as graph:
    reducer = collective.PackedAllReduce([tf.TensorShape([3])], members, 32.0, 5.0)
    with tf.device(device):
      reducer([tf.zeros([3])], device)
  ops = [op for op in graph.get_operations() if op.type.startswith("CollectiveReduce")]
  assert ops and all(op.get_attr("communication_hint").decode() == hint for op in ops)
  assert all(op.device == device for op in ops)


def _gelu_compiled(n_gpus, use_xla, monkeypatch):
  """Whether the fused GELU ops of a bf16 training tower are marked for XLA."""
  monkeypatch.setattr(tower_utils, "num_visible_gpus", lambda: n_gpus)
  tower_fn = classifier_tower_fn(CONFIG)

  def bf16_tower(features, global_batch):
    with modeling.compute_dtype_scope(tf.bfloat16):
      return tower_fn(features, global_batch)

  with tf.Graph().as_default() as graph:
    features = {k: tf.constant(v) for k, v in _data().items()}
    tower_utils.build_towers(bf16_tower, features, tower_utils.parallel_spec(2))
  tanh = [op for op in graph.get_operations()
          if op.type == "Tanh" and "intermediate" in op.name]
  assert tanh
  marks = {bool(op.get_attr("_XlaCompile")) if "_XlaCompile" in op.node_def.attr else False
           for op in tanh}
  assert len(marks) == 1
  return marks.pop()


def test_fused_gelu_is_compiled_on_gpus_only_under_use_xla(monkeypatch):
  assert _gelu_compiled(0, False, monkeypatch)  # CPUs: one fused loop (fused_gelu)
  assert not _gelu_compiled(2, False, monkeypatch)  # GPUs: no compile per new padded length


def test_the_weight_checksum_is_taken_next_to_each_variable():
  devices = ["/device:GPU:%d" % i for i in range(3)]
  with tf.Graph().as_default():
    strategy = strategies.SharedStrategy([[d] for d in devices], cluster_lib.SINGLE_PROCESS,
                                         32.0, 5.0)
    for i, d in enumerate(devices):
      with tf.device(d):
        tf.get_variable("v%d" % i, [1000, 10])
    low, _ = strategy.consistency_check()
    casts = [op for op in tf.get_default_graph().get_operations()
             if op.type == "Cast" and op.get_attr("DstT") == tf.float64]
  assert len(casts) == 3
  for cast in casts:  # each float64 copy is made where its variable lives
    assert cast.colocation_groups() == cast.inputs[0].op.colocation_groups()
  assert low.op.type == "AddN" and low.dtype == tf.float64


@pytest.mark.parametrize("value, hidden", [("", True), ("-1", True), ("-1,0", True),
                                           (" ", True), ("0", False), ("1,0", False),
                                           (None, False)])
def test_cuda_visible_devices_minus_one_hides_the_gpus(monkeypatch, value, hidden):
  if value is None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
  else:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
  monkeypatch.setattr(tf_env.os.path, "exists", lambda path: True)  # a driver is installed
  assert tf_env.gpus_hidden() == hidden
  assert tf_env.cpu_only() == hidden


_AUTO_CLUSTERED_STEP = textwrap.dedent("""
    import sys
    sys.path[:0] = [%(repo)r, %(tests)r]
    from engine import tf_env
    import tensorflow.compat.v1 as tf
    tf.disable_v2_behavior()
    import optimization, tower_utils
    from test_towers import _data, _tower_fn
    losses = []
    for use_xla in (False, True):
      with tf.Graph().as_default():
        tf.set_random_seed(0)
        features = {k: tf.constant(v) for k, v in _data().items()}
        result = tower_utils.build_towers(_tower_fn, features, tower_utils.parallel_spec(1),
                                          use_xla=use_xla)
        train_op, _ = optimization.create_train_op_from_grads(result.grads_and_vars, 1e-2, 10, 0)
        with tf.Session(config=tower_utils.session_config(1, use_xla=use_xla)) as sess:
          sess.run(tf.global_variables_initializer())
          meta = tf.RunMetadata()
          loss, _ = sess.run([result.loss, train_op], options=tf.RunOptions(
              trace_level=tf.RunOptions.FULL_TRACE), run_metadata=meta)
          losses.append(loss)
      ran = [n.node_name for d in meta.step_stats.dev_stats for n in d.node_stats]
    print("XLA_RUN_NODES", sum(1 for name in ran if name.startswith("cluster_")))
    print("LOSSES", float(losses[0]), float(losses[1]))
""")


def test_xla_auto_clustering_runs_a_step(tmp_path):
  """--use_xla's global jit level, with auto-clustering made to act on CPUs: the step runs
  XLA clusters and gives the loss of the uncompiled step."""
  script = tmp_path / "step.py"
  script.write_text(_AUTO_CLUSTERED_STEP % {"repo": REPO_ROOT,
                                            "tests": os.path.join(REPO_ROOT, "tests")})
  env = dict(os.environ, TF_XLA_FLAGS="--tf_xla_cpu_global_jit", CUDA_VISIBLE_DEVICES="",
             TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                        timeout=240)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
  assert int(lines["XLA_RUN_NODES"]) > 0, proc.stdout
  plain, compiled = (float(x) for x in lines["LOSSES"].split())
  assert abs(plain - compiled) < 1e-4 * abs(plain), (plain, compiled)


def _two_on_one_host(rank):
  return cluster_lib.Cluster([cluster_lib.Task("worker", 0, "localhost:1"),
                              cluster_lib.Task("worker", 1, "127.0.0.1:2"),
                              cluster_lib.Task("worker", 2, "host2:1")], rank, "test")


def test_processes_of_one_host_take_disjoint_blocks_of_its_gpus(monkeypatch):
  monkeypatch.setattr(tower_utils, "num_visible_gpus", lambda: 4)
  monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
  first, second, alone = (_two_on_one_host(r) for r in range(3))
  assert first.local_ranks() == second.local_ranks() == [0, 1] and alone.local_ranks() == [2]
  assert tower_utils.process_gpus(2, first) == [0, 1]
  assert tower_utils.process_gpus(2, second) == [2, 3]
  assert tower_utils.gpu_cards(2, second) == ["6", "7"]
  assert tower_utils.process_devices(2, second) == [
      "/job:worker/replica:0/task:1/device:GPU:0", "/job:worker/replica:0/task:1/device:GPU:1"]
  assert tower_utils.session_config(2, cluster=second).gpu_options.visible_device_list == "2,3"
  # The only process of its host keeps all of them (its devices share cards round robin).
  assert tower_utils.process_gpus(2, alone) == [0, 1, 2, 3]
  assert tower_utils.session_config(2, cluster=alone).gpu_options.visible_device_list == ""
  # Too few cards for a block each: each process uses what it sees (its own cards, or a
  # shared one, which the handshake refuses).
  assert tower_utils.process_gpus(3, second) == [0, 1, 2, 3]


_HANDSHAKE_WITH_FAKE_GPUS = textwrap.dedent("""
    import collections, sys
    sys.path.insert(0, %(repo)r)
    from engine import tf_env
    import tensorflow.compat.v1 as tf
    tf.disable_v2_behavior()
    from core.errors import InputError
    from parallel import cluster
    import tower_utils
    tower_utils.num_visible_gpus = lambda: 2  # as on a host with 2 GPUs
    run = cluster.resolve(sys.argv[1], int(sys.argv[2]))
    spec = tower_utils.parallel_spec(2, cluster=run, collective_timeout_s=60)
    try:
      tower_utils.join_processes(spec, collections.OrderedDict(),
                                 collections.OrderedDict([("start_step", 0)]))
    except InputError as e:
      print("error: %%s" %% e)
      sys.exit(2)
    print("joined, cards %%s" %% tower_utils.gpu_cards(2, run))
""")


def test_two_processes_on_one_card_are_refused_at_the_handshake(tmp_path):
  """Two processes of one host that see the same 2 GPUs and want 2 devices each would share
  both cards (NCCL refuses that at the first all-reduce, reported as a process that dropped
  out): both end at the handshake with one line naming the card. Given their own cards
  (CUDA_VISIBLE_DEVICES 0,1 and 2,3), two others join. The pairs run at the same time."""
  import script_runner  # pylint: disable=g-import-not-at-top
  script = tmp_path / "join.py"
  script.write_text(_HANDSHAKE_WITH_FAKE_GPUS % {"repo": REPO_ROOT})
  procs = {}
  for pair, second_cards in (("shared", "0,1"), ("own", "2,3")):
    hosts = ",".join("localhost:%d" % p for p in script_runner.free_ports(2))
    procs[pair] = [subprocess.Popen(
        [sys.executable, str(script), hosts, str(i)], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES="0,1" if i == 0 else second_cards,
                 TF_CPP_MIN_LOG_LEVEL="3")) for i in range(2)]
  outs = {}
  try:
    for pair, pair_procs in procs.items():
      outs[pair] = [(p.wait(timeout=120), p.stdout.read().strip()) for p in pair_procs]
  finally:
    for proc in sum(procs.values(), []):
      if proc.poll() is None:
        proc.kill()
  for code, out in outs["shared"]:
    assert code == 2 and out.startswith("error: task 0 (worker:0 at localhost:") and (
        "use the same card (GPU 0 of host localhost)" in out), out
  assert outs["own"] == [(0, "joined, cards ['0', '1']"), (0, "joined, cards ['2', '3']")], outs


def test_gpu_check_runs_its_cpu_path_and_every_op_runs_where_the_graph_asked(capsys):
  """scripts/gpu_check.sh's CPU path (virtual devices): the table, and no op that ran on
  another device than the placement audit predicts."""
  sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
  import gpu_check  # pylint: disable=g-import-not-at-top
  assert gpu_check.main(["--config=tiny", "--modes=shared", "--seq=8", "--rows=2",
                         "--steps=1"]) == 0
  rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
  assert [r.split(" | ")[0] for r in rows[2:]] == ["| shared, 1 device", "| shared"]
  for row in rows[2:]:
    cells = row.strip("| ").split(" | ")
    assert float(cells[2]) > 0  # examples/sec
    moved, ops = cells[6].split(" of ")
    assert moved == "0" and int(ops) > 500, row
    runtime, audit = (float(x) for x in cells[8].split(" / "))  # what crosses, both ways
    if row.startswith("| shared |"):
      assert audit > 0 and abs(runtime - audit) <= 0.01 * audit, row
  assert gpu_check.main(["--modes=gpipe,nope"]) == 2
  assert "error: --modes=gpipe,nope: expected some of" in capsys.readouterr().err
  assert gpu_check.main(["--modes=shared,gpipe", "--rows=2", "--n_devices=2"]) == 2
  assert capsys.readouterr().err.splitlines() == [
      "error: --rows=2: expected a multiple of 4 (the micro-batches of gpipe)"]
  # 3 devices for 2 stages: one tower ran on 2 of them and the table said 2, without a word.
  assert gpu_check.main(["--modes=gpipe", "--n_devices=3"]) == 2
  assert capsys.readouterr().err.splitlines() == [
      "error: --n_devices=3: --modes=gpipe needs a multiple of its 2 pipeline stages (every "
      "tower takes one device per stage)"]
