"""benchmarks/placement_audit.py and the placement it checks: the training and inference graphs
built as on a machine with N GPUs leave no op of a step for TensorFlow to put on GPU:0, ask no
GPU for an op it has no kernel for, and load GPU:0's links no more than any other GPU's.

Nothing here runs a step: the graph is read (each op's requested device, colocation, static
shapes), which is what a GPU machine would place; virtual CPU devices would hide both an
unplaced op (free on one CPU) and a copy between devices (shared memory).
"""

import os
import sys

import pytest
import tensorflow.compat.v1 as tf

from core import arguments
from core.errors import InputError
from engine import inference
from engine import training
from heads import pretraining as pretraining_heads
import modeling
import tower_utils
from test_speed_features import _input_fn, _spec
from test_towers import CONFIG, _data, _tower_fn, classifier_tower_fn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
import placement_audit  # pylint: disable=g-import-not-at-top,wrong-import-position

N_GPUS = 4
# Per mode: the run's spec, and whether its devices are peers (the same work and traffic each;
# a pipeline's stages are not).
MODES = {
    "shared": (dict(n_towers=4), True),
    "fp16 accumulation": (dict(n_towers=4, accum_steps=3, precision="fp16"), True),
    "bf16 allreduce": (dict(n_towers=4, precision="bf16", reduction="allreduce"), True),
    "1f1b": (dict(n_towers=2, pipeline_stages=2, num_micro_batches=2,
                  pipeline_schedule="1f1b"), False),
}


def _train_spec(tmp_path, n_towers, reduction="shared", accum_steps=1, pipeline_stages=1,
                num_micro_batches=1, pipeline_schedule="gpipe", **fields):
  parallel = tower_utils.parallel_spec(
      n_towers, reduction=reduction, accum_steps=accum_steps, pipeline_stages=pipeline_stages,
      num_micro_batches=num_micro_batches, pipeline_schedule=pipeline_schedule)
  return _spec(output_dir=str(tmp_path), parallel=parallel, batch_size_per_tower=2, **fields)


def _audit_training(tmp_path, **mode):
  spec = _train_spec(tmp_path, **mode)
  graph, parallel = placement_audit.capture(
      lambda: training.train(_tower_fn, _input_fn(), spec), N_GPUS)
  return placement_audit.audit(graph, parallel)


def _gpus(report):
  return {d: r for d, r in report.devices.items() if "/GPU:" in d}


@pytest.mark.parametrize("name", sorted(MODES))
def test_no_gpu_is_special_in_the_training_graph(tmp_path, name):
  mode, peers = MODES[name]
  report = _audit_training(tmp_path, **mode)
  gpus = _gpus(report)
  assert sorted(gpus) == ["/GPU:%d" % i for i in range(N_GPUS)]
  # Every GPU does work and exchanges gradients or activations with the others.
  assert all(r.ops > 100 and r.bytes_in > 0 and r.bytes_out > 0 for r in gpus.values()), gpus
  # No op of the step was left for the placer (which would put it on GPU:0 and copy its
  # inputs there), and no GPU is asked for an op it has no kernel for.
  assert sum(r.unplaced_readers for r in report.devices.values()) == 0, (
      report.unplaced_examples)
  assert sum(r.no_gpu_kernel for r in report.devices.values()) == 0, (
      report.no_gpu_kernel_examples)
  if peers:  # docs/results/placement-and-scaling.md has the figures at BERT-base shape (within
    # 10%); this tiny model's variables balance less evenly (the same code gave 2.0 and more
    # before f84b7c7).
    assert placement_audit.gpu0_ratio(report) <= 1.15, placement_audit.format_report(report)
  if name == "fp16 accumulation":
    assert report.runs == {"update": 1, "accumulate": 2}


def _tied_mlm_tower_fn(features, global_batch):
  """A masked-LM tower whose output layer is the word-embedding table (tied, as pretraining)."""
  del global_batch
  model = modeling.BertModel(CONFIG, True, features["input_ids"], features["input_mask"],
                             tied_output=True)
  positions = tf.zeros_like(features["input_ids"][:, :2])
  loss = pretraining_heads.get_masked_lm_output(
      CONFIG, model.get_sequence_output(), model.get_embedding_table(), positions,
      features["input_ids"][:, :2], tf.ones_like(positions, tf.float32))[0]
  return loss, {}


def test_a_tied_table_gets_one_dense_gradient_per_tower(tmp_path):
  """The masked-LM head reads the whole table in every tower: the tower gathers its words from
  that copy, and sends the table's owner one dense [vocab, hidden] gradient, not that plus its
  gathered rows (before: both crossed, and the owner, GPU:0, took 1.19x the bytes of any other
  GPU at BERT-base shape)."""
  spec = _train_spec(tmp_path, n_towers=N_GPUS)
  graph, parallel = placement_audit.capture(
      lambda: training.train(_tied_mlm_tower_fn, _input_fn(), spec), N_GPUS)
  table = graph.get_tensor_by_name("bert/embeddings/word_embeddings:0")
  placement = placement_audit.Placement(graph, placement_audit.home_device(parallel))
  owner = placement.device(table.op)
  ops = placement_audit.step_ops(graph, graph.get_collection(tower_utils.step_collection(
      "update")))
  into_owner = [c for c in placement_audit.crossings(ops, placement)
                if c.dest == owner and "gradients" in c.tensor.name]
  table_sized = [c for c in into_owner if c.tensor.shape.as_list() == table.shape.as_list()]
  rows_sized = [c for c in into_owner if c.tensor.shape.as_list()[-1:] == [CONFIG.hidden_size]
                and c not in table_sized and c.tensor.shape.as_list()[0] != CONFIG.hidden_size]
  assert len(table_sized) == N_GPUS - 1, [c.tensor.name for c in table_sized]
  assert not rows_sized, [c.tensor.name for c in rows_sized]
  # And each tower gathers its words on its own GPU (it has the whole table already).
  gathers = {op.name.split("/")[0]: placement.device(op) for op in ops
             if op.type == "GatherV2" and op.name.endswith("embeddings/GatherV2")}
  assert gathers == {"tower_%d" % i: "/GPU:%d" % i for i in range(N_GPUS)}, gathers


def test_the_inference_graph_gathers_outputs_on_the_host_not_on_gpu0(tmp_path):
  spec = tower_utils.parallel_spec(N_GPUS)
  data = _data()
  # Two encoder layers: with test_towers' one, the few large variables split unevenly over the
  # GPUs that own them (GPU:0 received 1.31 times the busiest other's bytes), whatever the host.
  tower_fn = classifier_tower_fn(modeling.BertConfig(**dict(CONFIG.to_dict(),
                                                            num_hidden_layers=2)))

  def input_fn(rows, seed, shard):
    del seed, shard
    return tf.data.Dataset.from_tensor_slices(data).batch(rows)

  graph, parallel = placement_audit.capture(
      lambda: inference.run_inference(tower_fn, input_fn, "unused", spec, 2), N_GPUS)
  report = placement_audit.audit(graph, parallel)
  assert sum(r.unplaced_readers for r in report.devices.values()) == 0, report.unplaced_examples
  # Each GPU sends its rows' outputs to the host (joined there, not on GPU:0), and receives
  # the weights the others own, as GPU:0 does.
  assert report.devices["/CPU:0"].bytes_in >= N_GPUS * 2 * 3 * 4  # 2 rows x 3 logits, float32
  assert placement_audit.gpu0_ratio(report) <= 1.15, placement_audit.format_report(report)


def test_the_audit_finds_an_unplaced_reader_and_counts_what_crosses():
  """The audit itself: a hand-made graph with one op of each kind, bytes as computed by hand."""
  with tf.Graph().as_default() as graph:
    with tf.device("/device:GPU:1"):
      big = tf.zeros([256, 1024], tf.float32, name="big")  # 1 MiB on GPU:1
      ids = tf.zeros([3], tf.int32)
    total = tf.reduce_sum(big, name="unplaced_sum")  # no device: GPU:0, reading 1 MiB
    with tf.device("/device:GPU:2"):
      ok = tf.identity(big, name="placed_copy")  # a placed reader: bytes, not a finding
      strings = tf.strings.as_string(ids, name="no_gpu_kernel")  # GPU asked, CPU kernel only
    with tf.device("/device:GPU:3"):
      product = tf.matmul(tf.zeros([4, 8]), tf.zeros([16, 8]), transpose_b=True)  # 2*4*16*8
      rows = tf.placeholder(tf.float32, [4, None])  # unknown inner size: no FLOP count
      unknown = tf.matmul(rows, tf.placeholder(tf.float32, [None, 5]))
    tower_utils.mark_step("update", [total, ok, strings, product, unknown])
  report = placement_audit.audit(graph, tower_utils.parallel_spec(3))
  devices = report.devices
  assert devices["/GPU:0"].unplaced_readers == 1 and devices["/GPU:0"].bytes_in == 1 << 20
  assert report.unplaced_examples == ["unplaced_sum (Sum)"]
  assert devices["/GPU:2"].bytes_in == 1 << 20 and devices["/GPU:2"].unplaced_readers == 0
  assert devices["/GPU:1"].bytes_out == (2 << 20) + 12  # to GPU:0 and GPU:2, ids to the CPU
  assert devices["/CPU:0"].no_gpu_kernel == 1
  assert report.no_gpu_kernel_examples == ["no_gpu_kernel (AsString)"]
  assert placement_audit.gpu0_ratio(report) == 1.0
  assert devices["/GPU:3"].flops == 1024 and devices["/GPU:2"].flops == 0


def test_an_all_reduce_moves_twice_its_share_through_each_member():
  with tf.Graph().as_default() as graph:
    from parallel import collective  # pylint: disable=g-import-not-at-top
    members = ["/device:GPU:%d" % i for i in range(4)]
    reducer = collective.PackedAllReduce([tf.TensorShape([1000])], members, 32.0, 10.0)
    outs = []
    for d in members:
      with tf.device(d):
        outs.append(reducer([tf.zeros([1000])], d)[0])
    tower_utils.mark_step("update", outs)
  report = placement_audit.audit(graph, tower_utils.parallel_spec(4))
  for d in members:
    assert report.devices[d.replace("/device:", "/")].bytes_in == 2 * 3 * 4000 // 4


def test_a_gpu_kernel_is_looked_up_per_dtype():
  with tf.Graph().as_default():
    f32 = tf.nn.l2_loss(tf.zeros([2], tf.float32)).op
    i32 = tf.raw_ops.VarHandleOp(dtype=tf.int32, shape=[]).op
    i64 = tf.raw_ops.VarHandleOp(dtype=tf.int64, shape=[]).op
  assert placement_audit.has_gpu_kernel(f32)
  assert not placement_audit.has_gpu_kernel(i32)  # int32 resources live on the host
  assert placement_audit.has_gpu_kernel(i64)


@pytest.mark.parametrize("argv, fragment", [
    (["--fake_gpus=2", "run_classifier_mgpu.py"], "the -- and a run script are missing"),
    (["--fake_gpus=0", "--", "run_classifier_mgpu.py"], "--fake_gpus=0: expected"),
    (["--fake_gpus=two", "--", "run_classifier_mgpu.py"], "--fake_gpus: invalid int value"),
    (["--fake_gpus=2", "--"], "no run script after --"),
    (["--fake_gpus=2", "--", "train.py"], "train.py: expected one of"),
    (["--fake_gpus=2", "--graph_out=/no/such/dir/g.pbtxt", "--", "run_classifier_mgpu.py"],
     "--graph_out=/no/such/dir/g.pbtxt: its folder does not exist"),
    (["--fake_gpus=2", "--graph_out=/", "--", "run_classifier_mgpu.py"],
     "--graph_out=/: is a folder; expected a file name (e.g. /graph.pbtxt)"),
])
def test_bad_arguments_are_one_error_line(capsys, argv, fragment):
  assert placement_audit.main(argv) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], err


def test_help_prints_the_usage_and_exits_0(capsys):
  """--help (also without the -- and a script) was the one error line of a missing --."""
  for argv in (["--help"], ["--fake_gpus=2", "-h", "--", "run_classifier_mgpu.py"]):
    with pytest.raises(SystemExit) as ended:
      placement_audit.main(argv)
    assert ended.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: placement_audit.py --fake_gpus=N") and "--graph_out" in out


@pytest.mark.parametrize("env,line", [
    ({"N_GPUS": "abc"}, "N_GPUS=abc: expected an integer >= 1"),
    ({"ONLY": "("}, "ONLY=(: not a regular expression (bash =~)"),
    ({"ONLY": "zzz"}, "ONLY=zzz matches no row name (e.g. 'GPipe|predict')"),
    ({"REPO": "/nonexistent"}, "REPO=/nonexistent: no benchmarks/placement_audit.py there"),
])
def test_placement_table_checks_its_settings_before_any_work(env, line):
  """A bad N_GPUS failed every row after the data was built; ONLY matching nothing (or not a
  regular expression) printed an empty table and exited 0 (or 1 with nothing said)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  script = os.path.join(os.path.dirname(placement_audit.__file__), "..", "scripts",
                        "placement_table.sh")
  proc = subprocess.run(["bash", script], capture_output=True, text=True, timeout=60,
                        env=dict(os.environ, **env))
  assert (proc.returncode, proc.stderr.strip().splitlines()) == (
      2, ["error: placement_table.sh: " + line]), proc.stderr
  assert not proc.stdout


def test_the_script_ending_before_a_session_is_one_error_line(tmp_path):
  """As a user runs it: a process of its own (a run script defines its flags once per
  process), forked from the suite's script host."""
  import script_runner  # pylint: disable=g-import-not-at-top
  proc = script_runner.run_script(os.path.join("benchmarks", "placement_audit.py"),
                                  "--fake_gpus=2", "--", "run_classifier_mgpu.py",
                                  "--output_dir=%s" % tmp_path, timeout=120)
  assert proc.returncode == 2, proc.stderr[-2000:]
  # The script's own line alone (the audit added a second: "... ended (exit code 2) ...").
  errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
  assert len(errors) == 1 and errors[0].startswith("error: at least one of --do_train"), \
      proc.stderr[-2000:]
  proc = script_runner.run_script(os.path.join("benchmarks", "placement_audit.py"),
                                  "--fake_gpus=2", "--", "run_classifier_mgpu.py", "--helpshort",
                                  timeout=120)
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1].startswith(
      "error: run_classifier_mgpu.py ended (exit code 0) before it built a graph"), proc.stderr


def test_the_tools_parser_raises_one_input_error():
  """core.arguments.Parser: argparse's two lines (usage, message) become one InputError."""
  parser = arguments.Parser()
  parser.add_argument("--n", type=int)
  assert parser.parse_args(["--n=3"]).n == 3
  with pytest.raises(InputError, match="argument --n: invalid int value: 'x'"):
    parser.parse_args(["--n=x"])
  with pytest.raises(InputError, match="unrecognized arguments: --m"):
    parser.parse_args(["--m=1"])


def test_a_tool_run_is_one_error_line_on_bad_input_or_ctrl_c(capsys):
  """core.arguments.run: the tools' InputError and Ctrl-C as one line each, exit 2 and 130."""
  def bad():
    raise InputError("--x=1: expected 2")

  def interrupted():
    raise KeyboardInterrupt()

  assert arguments.run(lambda: 0) == 0
  assert arguments.run(bad) == 2
  assert arguments.run(interrupted) == 130
  assert capsys.readouterr().err.splitlines() == [
      "error: --x=1: expected 2",
      "error: interrupted (Ctrl-C); nothing was left half written"]
