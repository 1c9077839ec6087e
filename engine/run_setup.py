"""The run's setup: built once from the flags at start-up, then passed down.

Nothing writes FLAGS, except one start-up step: a run that does not train (eval, predict,
--predict_file, export) in an --output_dir whose training run recorded its model input flags in
run_info.json (config, vocabulary, casing, max_seq_length, ...) takes those as the defaults of
the flags it was not given, and logs each one. So predicting after training needs only
--output_dir and the input, and never silently reads text at another length than the model
was trained on. Flags given on the command line win.

`start()` opens every run script's main: it checks the script's mode flags, then calls
`from_flags()`, and returns None to a process that has nothing more to do (it served the
chief's graph, or has no part in a run that does not train). `from_flags()` checks the shared
flags (one `error:` line for a bad value, before any expensive work), checks and creates
--output_dir, and asks the one question of a multi-process run -- "am I the chief?" -- through
the parallel spec. The answer is the process's role, which the script's main acts on in plain
view (`if not setup.is_chief: return` once training is done), and decides where this process
writes and what it restores:

  the chief       trains, then evaluates, predicts and exports: output_dir = --output_dir,
                  init_checkpoint = --init_checkpoint (None when it is missing or damaged and
                  --output_dir has a checkpoint to continue from: logged, see _init_checkpoint)
  another process trains on its shard of the data, then is done (main returns): output_dir =
                  a private scratch directory (its feature caches; removed at exit),
                  init_checkpoint = None (its weights come from the chief's broadcast)
  a server        under --placement=inter_first, a process other than the chief builds nothing:
                  its devices run the chief's one graph (`serves_chief_graph`; `start()`
                  calls `serve_chief_graph()`, main returns). Nothing else of its setup is
                  made.

Everything after start-up reads these fields (`setup.output_dir`, `setup.init_checkpoint`),
never FLAGS.output_dir, and never rebuilds the parallel spec. FLAGS.init_checkpoint is read
after start-up for one thing every process needs, not what it restores: run_pretraining_mgpu.py
takes ELECTRA's generator config from beside --init_checkpoint (the model's shape, which a
process other than the chief, whose init_checkpoint is None, builds too).

| field | what |
| --- | --- |
| parallel | tower_utils.ParallelSpec: towers, reduction, accumulation, processes, stages |
| output_dir | where this process writes (see above) |
| init_checkpoint | the checkpoint this process initialises from, or None |
| precision | "fp32", "fp16" or "bf16", from --use_fp16 / --use_bf16 |
| batch_size_per_tower | --train_batch_size: rows per tower per micro-step |
| trains | whether the run trains (writes checkpoints) |
"""

import atexit
import collections
import fcntl
import json
import os
import shutil
import socket
import sys
import tempfile
import time

from absl import flags
from absl import logging
import tensorflow.compat.v1 as tf

from core import atomic_files
from core.errors import InputError
from engine import checkpoints
from engine import cli
from engine import common_flags
from engine import run_info
from parallel import cluster
import tower_utils

FLAGS = flags.FLAGS


class RunSetup(collections.namedtuple("RunSetup", ["parallel", "output_dir", "init_checkpoint",
                                                   "precision", "batch_size_per_tower", "trains"],
                                      defaults=(False,))):
  """What a run learned from its flags at start-up (see the module docstring)."""

  @property
  def is_chief(self):
    """Whether this process writes the run's checkpoints, summaries and results."""
    return self.parallel.cluster.is_chief

  @property
  def serves_chief_graph(self):
    """Whether this process only serves its devices to the chief's graph (--placement=
    inter_first, not the chief): start() calls serve_chief_graph() and main returns."""
    return tower_utils.serves_chief_graph(self.parallel)

  def serve_chief_graph(self):
    """Runs the chief's graph on this process's devices until the chief is done with them."""
    tower_utils.serve_chief_graph(self.parallel)

  def has_no_part(self):
    """Whether this process has nothing to do in this run, said in the log: it is not the chief
    and the run does not train (evaluation, prediction and export are the chief's alone; a
    worker started with the chief's eval-only command used to fail on data it never needs)."""
    if self.is_chief or self.trains:
      return False
    cluster = self.parallel.cluster
    logging.info("%s has nothing to do in a run that does not train: the chief, %s, evaluates, "
                 "predicts and exports alone", cluster.describe(), cluster.describe(0))
    return True

  @property
  def global_batch_size(self):
    """Training examples per update: batch_size_per_tower * towers * processes * accumulation.

    Scripts that derive num_train_steps from epochs divide by this, so global_step counts
    updates of the effective batch.
    """
    return tower_utils.global_batch_size(self.parallel, self.batch_size_per_tower)

  def inference_parallel(self, n_towers=None):
    """The ParallelSpec of eval and predict: this process only, the same pipeline stages, and a
    copy of the weights on every device (`allreduce`'s replicas, filled from the checkpoint
    once): with one copy spread over the devices every batch would read every weight from its
    owner (2.4 GB per batch for BERT-base on 8 GPUs).

    Args:
      n_towers: towers to spread each batch over (default: all of this run's towers).
    """
    spec = self.parallel
    if spec.placement == "inter_first":  # The chief's graph spans the processes' devices.
      return spec._replace(n_towers=n_towers or spec.n_towers, accum_steps=1, num_micro_batches=1,
                           recompute="none", pipeline_schedule="gpipe")
    return tower_utils.parallel_spec(n_towers or spec.n_towers, reduction="allreduce",
                                     pipeline_stages=spec.pipeline_stages)


def start(check_modes, trains):
  """The opening every run script's main shares: INFO logging, the script's check of its mode
  flags (`check_modes()`, InputError), then from_flags(trains).

  Returns:
    The RunSetup, or None when this process has nothing more to do: under
    --placement=inter_first it served its devices to the chief's graph until the chief was done
    with them (serves_chief_graph), or it is not the chief of a run that does not train
    (has_no_part, logged). main returns then.
  """
  logging.set_verbosity(logging.INFO)
  check_modes()
  setup = from_flags(trains=trains)
  if setup.serves_chief_graph:  # --placement=inter_first: the chief's graph runs on our devices.
    setup.serve_chief_graph()
    return None
  if setup.has_no_part():
    return None
  return setup


def from_flags(trains=False):
  """The RunSetup of this process, from the flags; checks them first (InputError).

  A process that is not the chief of a multi-process run gets a scratch output_dir (removed at
  exit) and no init_checkpoint. Under --placement=inter_first, one that is not the chief gets
  a setup that only serves the chief's graph (serves_chief_graph: no output_dir, no lock).

  Args:
    trains: whether this run writes checkpoints; its chief then holds --output_dir's lock until
      it exits, so a second training run there stops with one line instead of interleaving
      its checkpoints with this one's.
  """
  if not FLAGS.output_dir:
    raise InputError("--output_dir is required")
  if not trains:
    _adopt_recorded_flags(FLAGS.output_dir)
  common_flags.check_shared_flags()
  spec = _parallel_spec()
  if tower_utils.serves_chief_graph(spec):
    return RunSetup(parallel=spec, output_dir=None, init_checkpoint=None,
                    precision=_precision(), batch_size_per_tower=FLAGS.train_batch_size)
  if spec.cluster.in_graph:
    tower_utils.start_chief_graph(spec)
  _require_output_dir(trains)
  if trains and spec.cluster.is_chief:
    _lock(FLAGS.output_dir)
  output_dir = FLAGS.output_dir
  if spec.cluster.is_chief:
    init_checkpoint = _init_checkpoint(output_dir)
  else:
    output_dir = private_output_dir(spec.cluster.rank)
    init_checkpoint = None
    logging.info("This process is %s of %d; the chief %s writes --output_dir=%s. This process "
                 "caches its data in %s and takes its weights from the chief",
                 spec.cluster.describe(), spec.cluster.num_processes, spec.cluster.describe(0),
                 FLAGS.output_dir, output_dir)
  return RunSetup(parallel=spec, output_dir=output_dir, init_checkpoint=init_checkpoint,
                  precision=_precision(), batch_size_per_tower=FLAGS.train_batch_size,
                  trains=trains)


PRIVATE_DIR_PREFIX = "bert-mgpu-task"


def private_output_dir(rank, parent=None):
  """A non-chief process's own folder (its data cache) under `parent` (the temp folder),
  removed when it exits. Its name carries the PID, so the folders of processes that were killed
  (SIGKILL runs no exit handler) are removed here by the next process: those of this user whose
  PID no longer runs."""
  parent = parent or tempfile.gettempdir()
  for name in os.listdir(parent):
    path = os.path.join(parent, name)
    pid = name.split("-pid", 1)[-1].split("-", 1)[0]
    if (name.startswith(PRIVATE_DIR_PREFIX) and "-pid" in name and pid.isdigit()
        and os.path.isdir(path) and os.stat(path).st_uid == os.getuid() and not _runs(int(pid))):
      shutil.rmtree(path, ignore_errors=True)
  output_dir = tempfile.mkdtemp(prefix="%s%d-pid%d-" % (PRIVATE_DIR_PREFIX, rank, os.getpid()),
                                dir=parent)
  atexit.register(shutil.rmtree, output_dir, True)
  return output_dir


def _runs(pid):
  """Whether process `pid` exists (signal 0 checks without sending)."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # Another user's process.
    return True
  return True


def _init_checkpoint(output_dir):
  """--init_checkpoint, checked whole (checkpoints.check_init_checkpoint: InputError), or None
  when it cannot be used but output_dir holds a checkpoint, which the run continues from: the
  init checkpoint is not needed then (logged). Under --head_first_steps it still is: which
  parts it lacks decides what stays frozen and when the schedule restarts."""
  try:
    checkpoints.check_init_checkpoint(FLAGS.init_checkpoint)
    checkpoints.check_vocab_beside(FLAGS.init_checkpoint, FLAGS.vocab_file)
    return FLAGS.init_checkpoint
  except InputError as e:
    latest = checkpoints.latest_checkpoint(output_dir)
    if not latest:
      raise
    if "head_first_steps" in FLAGS and FLAGS.head_first_steps:
      raise InputError("%s. --head_first_steps=%d needs it to continue from %s: which heads it "
                       "lacks decides what stays frozen" % (e, FLAGS.head_first_steps, latest))
    logging.warning("%s. Not needed: the run continues from %s, the checkpoint of --output_dir",
                    e, latest)
    return None


def _adopt_recorded_flags(output_dir):
  """Sets the defaults of the model input flags this run was not given to the values recorded
  by output_dir's training run (run_info.json; see the module docstring). A recorded file that
  no longer exists is not adopted (its flag is then required as usual)."""
  info = run_info.read(output_dir) or {}
  script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else None
  if info.get("script") not in (None, script) and checkpoints.has_checkpoint(output_dir):
    raise InputError("--output_dir=%s holds a training run of %s (%s), not of %s: its model "
                     "is another script's; point --output_dir at a run of %s" %
                     (output_dir, info["script"], run_info.FILE_NAME, script, script))
  recorded = info.get(run_info.FLAGS_KEY) or {}
  for name, value in sorted(recorded.items()):
    if name not in FLAGS or FLAGS[name].present or value == FLAGS[name].value:
      continue
    try:
      if value is not None:  # None: the flag's "not set", which every flag may hold.
        FLAGS[name].parser.parse(value)
    except (TypeError, ValueError) as e:
      raise InputError("%s: %s.%s is %s, not a value of --%s (%s); pass --%s, or delete the "
                       "file to adopt the run as it is now" % (
                           os.path.join(output_dir, run_info.FILE_NAME), run_info.FLAGS_KEY,
                           name, json.dumps(value, ensure_ascii=False)[:80], name, e, name))
    if name in ("bert_config_file", "vocab_file", "spm_model_file") and value and (
        not os.path.isfile(value)):
      logging.warning("%s/%s names --%s=%s, which no longer exists; pass --%s", output_dir,
                      run_info.FILE_NAME, name, value, name)
      continue
    FLAGS.set_default(name, value)
    logging.info("--%s=%s, from the training run of this --output_dir (%s)", name, value,
                 run_info.FILE_NAME)


def _precision():
  """"fp16", "bf16" or "fp32", from --use_fp16 / --use_bf16."""
  if FLAGS.use_fp16:
    return "fp16"
  return "bf16" if FLAGS.use_bf16 else "fp32"


# The modes that write in --output_dir besides training (a --predict_file run with
# --predict_output writes elsewhere: its records go to a scratch directory).
_WRITING_MODES = ("do_eval", "do_export", "do_rank", "do_pretrain_rewrite")


def _writes_in_output_dir(trains):
  """Whether the run writes in --output_dir: all but one that does not train and only predicts
  --predict_file to --predict_output, which serves from a read-only run directory."""
  only_predicts_elsewhere = (
      not trains and "predict_file" in FLAGS and FLAGS.predict_file and FLAGS.predict_output and
      not any(name in FLAGS and FLAGS[name].value for name in _WRITING_MODES))
  return not only_predicts_elsewhere


def _require_output_dir(trains):
  """--output_dir must be a writable directory (created) when the run writes there.

  A bad flag value, an output path that is a file, a read-only filesystem or a parent without
  write permission is a one-line error. Temporary files left by a killed run are removed.
  """
  path = FLAGS.output_dir
  if not _writes_in_output_dir(trains):
    if os.path.exists(path) and not os.path.isdir(path):
      cli.require_output_dir(path, "output_dir", create=False)  # its "is a file" line
    return  # Read only: what it lacks (no run there) is said where the model is read.
  if "://" in path:  # A remote filesystem (gs://...): TensorFlow's file system checks it.
    tf.io.gfile.makedirs(path)
    return
  cli.require_output_dir(path, "output_dir")
  atomic_files.remove_stale_temporaries(path)


LOCK_FILE = ".training.lock"
_HELD = {}  # path -> open file of a lock this process holds (released when it exits)


def _lock(output_dir):
  """Takes output_dir's training lock (an flock, which the kernel releases when its holder dies),
  or raises InputError naming the run that holds it. The lock file says who holds it."""
  if "://" in output_dir:  # Remote filesystems have no flock.
    return
  path = os.path.join(output_dir, LOCK_FILE)
  if path in _HELD:
    return
  handle = open(path, "a+b")
  try:
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError:
    holder = _lock_note(handle) or "another process"
    handle.close()
    raise InputError("--output_dir=%s is in use by another training run (%s): its checkpoints "
                     "would interleave with this run's. Wait for it to finish, or choose "
                     "another --output_dir" % (output_dir, holder))
  previous = _lock_note(handle)
  if previous:
    logging.info("Took over the lock of --output_dir=%s left by a run that ended (%s)",
                 output_dir, previous)
  handle.seek(0)
  handle.truncate()
  handle.write(("pid %d on %s since %s" % (os.getpid(), socket.gethostname(),
                                            time.strftime("%Y-%m-%d %H:%M:%S"))).encode("utf-8"))
  handle.flush()
  _HELD[path] = handle
  atexit.register(_release, path)


def _lock_note(handle):
  """What the lock file (opened in binary) says of its holder: a note for the log, never parsed,
  so bytes that are not UTF-8 (a damaged file) show as U+FFFD instead of stopping the run."""
  handle.seek(0)
  return handle.read(1000).decode("utf-8", errors="replace").strip()


def _release(path):
  """Empties and releases a lock this process holds (at exit)."""
  handle = _HELD.pop(path, None)
  if handle:
    handle.truncate(0)
    handle.close()


def _parallel_spec():
  """The run's tower_utils.ParallelSpec, checked, from --n_gpus (devices per process),
  --pipeline_stages (devices per tower), the speed and the cluster flags."""
  n_devices = cli.require_positive(FLAGS.n_gpus, "n_gpus")
  stages = cli.require_positive(FLAGS.pipeline_stages, "pipeline_stages")
  micro = _num_micro_batches(stages)
  if FLAGS.train_batch_size % micro:
    raise InputError("--train_batch_size=%d is not a multiple of --num_micro_batches=%d: "
                     "every micro-batch needs the same rows" % (FLAGS.train_batch_size, micro))
  run_cluster = cluster.resolve(FLAGS.worker_hosts, FLAGS.task_index, FLAGS.worker_port)
  options = dict(reduction=FLAGS.reduction, accum_steps=FLAGS.grad_accum_steps,
                 pack_mb=FLAGS.allreduce_pack_mb, collective_timeout_s=FLAGS.collective_timeout_s,
                 pipeline_stages=stages, num_micro_batches=micro, recompute=FLAGS.recompute,
                 pipeline_schedule=FLAGS.pipeline_schedule)
  if FLAGS.placement == "inter_first":
    return tower_utils.parallel_spec(_in_graph_towers(run_cluster, n_devices, stages),
                                     cluster=run_cluster.in_graph_view(),
                                     placement="inter_first", **options)
  if n_devices % stages:
    raise InputError("--n_gpus=%s is not a multiple of --pipeline_stages=%d: every tower "
                     "needs %d devices, one per stage" % (n_devices, stages, stages))
  return tower_utils.parallel_spec(n_devices // stages, cluster=run_cluster, **options)


def _num_micro_batches(stages):
  """--num_micro_batches, checked; under --pipeline_schedule=1f1b without it, the stage count
  (the fewest micro-batches 1F1B runs with; the default 1 would be refused)."""
  micro = cli.require_positive(FLAGS.num_micro_batches, "num_micro_batches")
  if (FLAGS.pipeline_schedule == "1f1b" and not FLAGS["num_micro_batches"].present and
      micro < stages):
    logging.info("--pipeline_schedule=1f1b without --num_micro_batches: %d micro-batches "
                 "(one per stage)", stages)
    return stages
  return micro


def _in_graph_towers(run_cluster, n_devices, stages):
  """The towers of --placement=inter_first: the chief's one graph holds every tower of the run,
  n_devices * processes / stages of them, so to the rest of the program it is one process with
  remote devices."""
  processes = len(run_cluster.tasks)
  if processes < 2 or stages < 2:
    raise InputError("--placement=inter_first: expected several processes (--worker_hosts, "
                     "TF_CONFIG or Slurm; found %d) and --pipeline_stages > 1 (found %d)" %
                     (processes, stages))
  if (n_devices * processes) % stages:
    raise InputError("--placement=inter_first: %d processes x --n_gpus=%d devices are not "
                     "a multiple of --pipeline_stages=%d" % (processes, n_devices, stages))
  return n_devices * processes // stages
