"""The processes of a run: one per host, each with its `--n_gpus`, joined by TensorFlow's runtime.

Where the cluster comes from (the first source present wins; with none, the run is one process,
exactly as without this module):

1. `--worker_hosts=host:port,host:port,... --task_index=i`.
2. `TF_CONFIG` (Kubeflow TFJob, Vertex AI): `{"cluster": {"chief": ["h0:p"], "worker": ["h1:p",
   ...]}, "task": {"type": "worker", "index": 0}}`. `chief` is optional; `ps` and `evaluator`
   tasks are refused (this project has no parameter servers; the chief evaluates).
3. Slurm (`srun`): `SLURM_PROCID`, `SLURM_NTASKS` > 1, `SLURM_STEP_NODELIST` and
   `SLURM_STEP_TASKS_PER_NODE` (block distribution); every task listens on `--worker_port` plus
   its `SLURM_LOCALID`.

Ranks. The chief job's task (if any) comes first, then the worker tasks in order; rank 0 is the
chief: it leads the collective groups, restores and writes checkpoints, summaries and results.

Each process starts one `tf.distribute.Server` (gRPC) for the cluster and runs its own Session
against it. Its device filters show it only its own devices, so processes never place ops on
each other; they meet only in collective ops. The exception is an in-graph run
(`--placement=inter_first`, `Cluster.in_graph_view`): the chief's one graph places pipeline
stages on every process's devices, and the other processes only serve them
(`serve_chief_graph`) until the chief releases them (`release_tasks`, at its exit). A Session
spanning the tasks would wait without end for an address that accepts connections but is not
that task's TensorFlow server, so the chief first asks each task's server for its devices
(`wait_for_tasks`, `server_devices`) and names what holds an address instead. Before
training, `handshake` gathers from every process the facts that must agree (tower count, batch,
model, steps...) and what only the chief knows (the step of its latest checkpoint); a mismatch
or a process that never joins is a one-line error naming the task (the other processes first
wait for the chief's server: their Session would ask a missing chief for step numbers without
end, whatever the collective's timeout). Processes about to end
after their last collective (a refused handshake, the end of training) first pass a barrier
together (`leave_together`), so that no one's exit cuts off another's last result.
"""

import collections
import contextlib
import hashlib
import json
import os
import re
import socket
import threading
import time

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf
from tensorflow.core.framework import device_attributes_pb2
from tensorflow.python.ops import collective_ops  # pylint: disable=g-direct-tensorflow-import

from core.errors import InputError
from parallel import collective

Task = collections.namedtuple("Task", ["job", "index", "address"])


# Which part of the training data a process reads: shard `index` of `count` (one per process).
Shard = collections.namedtuple("Shard", ["index", "count"])
WHOLE = Shard(0, 1)


class Cluster(object):
  """The tasks of a run in rank order, and which one this process is."""

  def __init__(self, tasks, rank, source, in_graph=False):
    """tasks: list of Task in rank order (empty: one process); rank: this process's position;
    in_graph: the chief's view of an in-graph run (see `in_graph_view`)."""
    self.tasks = tuple(tasks)
    self.rank = rank
    self.source = source
    self.in_graph = in_graph

  @property
  def num_processes(self):
    """Processes that build a graph and read data: every task, or 1 (one process, or an in-graph
    run, whose chief alone builds)."""
    return 1 if self.in_graph else max(len(self.tasks), 1)

  def in_graph_view(self):
    """This task's view of a run whose one graph spans every task (--placement=inter_first).

    The chief builds the only graph, reads all the data and places ops on the other tasks'
    devices; they only serve (`serve_chief_graph`). To the chief's engine this is one process
    whose devices carry task names: no handshake collectives, no broadcast, no per-process
    shards.
    """
    return Cluster(self.tasks, self.rank, self.source, in_graph=True)

  @property
  def is_chief(self):
    return self.rank == 0

  def device_prefix(self, rank=None):
    """'/job:worker/replica:0/task:1' for a task (this one by default); '' in one process."""
    if not self.tasks:
      return ""
    task = self.tasks[self.rank if rank is None else rank]
    return "/job:%s/replica:0/task:%d" % (task.job, task.index)

  def describe(self, rank=None):
    """'task 1 (worker:1 at host:port)', for logs and errors."""
    rank = self.rank if rank is None else rank
    if not self.tasks:
      return "the single process"
    task = self.tasks[rank]
    return "task %d (%s:%d at %s)" % (rank, task.job, task.index, task.address)

  def local_ranks(self):
    """The ranks of the tasks on this task's host (its own among them), in rank order: the
    processes that share this host's GPUs. [0] in one process."""
    if not self.tasks:
      return [0]
    host = host_of(self.tasks[self.rank].address)
    return [r for r, task in enumerate(self.tasks) if host_of(task.address) == host]

  def cluster_spec(self):
    """dict job -> list of addresses, as tf.train.ClusterSpec takes it."""
    jobs = collections.OrderedDict()
    for task in self.tasks:
      jobs.setdefault(task.job, []).append(task.address)
    return jobs


SINGLE_PROCESS = Cluster([], 0, "no cluster configured")

_LOOPBACK = frozenset(["localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0"])


def host_of(address):
  """The host part of 'host:port', loopback names (and this machine's own name) as 'localhost'."""
  host = address.rsplit(":", 1)[0].lower()
  if host in _LOOPBACK or host == socket.gethostname().lower():
    return "localhost"
  return host


def resolve(worker_hosts=None, task_index=None, worker_port=2222, environ=None):
  """The cluster of this run, from the flags, TF_CONFIG or Slurm (see the module docstring).

  Raises:
    InputError: a malformed source, a task outside the cluster, or a duplicate address.
  """
  environ = os.environ if environ is None else environ
  if worker_hosts:
    cluster = _from_flags(worker_hosts, task_index)
  elif environ.get("TF_CONFIG", "").strip():
    cluster = _from_tf_config(environ["TF_CONFIG"])
  elif int(environ.get("SLURM_NTASKS", "1") or 1) > 1 and "SLURM_PROCID" in environ:
    cluster = _from_slurm(environ, worker_port)
  else:
    return SINGLE_PROCESS
  addresses = [t.address for t in cluster.tasks]
  duplicates = sorted(set(a for a in addresses if addresses.count(a) > 1))
  if duplicates:
    raise InputError("%s: address %s is given to more than one task" %
                     (cluster.source, duplicates[0]))
  return cluster


def _check_address(address, source):
  if not re.match(r"^[^\s:,]+:\d{1,5}$", address) or not 0 < int(address.rsplit(":", 1)[1]) < 65536:
    raise InputError("%s: %r is not host:port" % (source, address))
  return address


def _from_flags(worker_hosts, task_index):
  source = "--worker_hosts=%s" % worker_hosts
  hosts = [_check_address(h.strip(), source) for h in worker_hosts.split(",") if h.strip()]
  if task_index is None or not 0 <= task_index < len(hosts):
    raise InputError("--task_index=%s: expected 0 to %d, this process's position in "
                     "--worker_hosts" % (task_index, len(hosts) - 1))
  return Cluster([Task("worker", i, h) for i, h in enumerate(hosts)], task_index,
                 "--worker_hosts")


def _from_tf_config(text):
  source = "TF_CONFIG"
  try:
    config = json.loads(text)
  except ValueError as e:
    raise InputError("TF_CONFIG is not valid JSON (%s): %.80s" % (e, text))
  if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict):
    raise InputError('TF_CONFIG: expected {"cluster": {"worker": ["host:port", ...]}, "task": '
                     '{"type": "worker", "index": i}}, got %.80s' % text)
  jobs = config["cluster"]
  unknown = sorted(set(jobs) - {"chief", "worker"})
  if unknown:
    raise InputError("TF_CONFIG: job %r is not supported (only chief and worker: there are no "
                     "parameter servers, and the chief evaluates)" % unknown[0])
  tasks = []
  for job in ("chief", "worker"):
    addresses = jobs.get(job) or []
    if not isinstance(addresses, list):
      raise InputError("TF_CONFIG: cluster.%s must be a list of host:port" % job)
    tasks += [Task(job, i, _check_address(str(a), source)) for i, a in enumerate(addresses)]
  if len(jobs.get("chief") or []) > 1:
    raise InputError("TF_CONFIG: cluster.chief must hold one address, got %d" %
                     len(jobs["chief"]))
  if not tasks:
    raise InputError("TF_CONFIG: cluster has no chief or worker addresses")
  task = config.get("task")
  if not isinstance(task, dict) or task.get("type") not in jobs:
    raise InputError("TF_CONFIG: task.type must be one of the cluster's jobs %s, got %r" %
                     (sorted(jobs), task.get("type") if isinstance(task, dict) else task))
  index = task.get("index", 0)
  if not isinstance(index, int) or not 0 <= index < len(jobs[task["type"]]):
    raise InputError("TF_CONFIG: task.index=%r is outside cluster.%s (%d tasks)" %
                     (index, task["type"], len(jobs[task["type"]])))
  rank = [(t.job, t.index) for t in tasks].index((task["type"], index))
  return Cluster(tasks, rank, source)


def expand_slurm_hostlist(hostlist):
  """'node[01-03,07],gpu5' -> ['node01', 'node02', 'node03', 'node07', 'gpu5'] (Slurm syntax)."""
  names = []
  for part in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", hostlist):
    match = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", part)
    if not match:
      names.append(part)
      continue
    prefix, ranges, rest = match.groups()
    for item in ranges.split(","):
      low, _, high = item.partition("-")
      width = len(low)
      for n in range(int(low), int(high or low) + 1):
        names += expand_slurm_hostlist("%s%0*d%s" % (prefix, width, n, rest))
  return names


def _expand_tasks_per_node(text):
  """'2(x3),1' -> [2, 2, 2, 1]."""
  counts = []
  for item in text.split(","):
    match = re.match(r"^(\d+)(?:\(x(\d+)\))?$", item.strip())
    if not match:
      raise InputError("SLURM_STEP_TASKS_PER_NODE=%s: not Slurm's N(xM),... form" % text)
    counts += [int(match.group(1))] * int(match.group(2) or 1)
  return counts


def _from_slurm(environ, worker_port):
  source = "Slurm (SLURM_STEP_NODELIST)"
  try:
    ntasks, rank = int(environ["SLURM_NTASKS"]), int(environ["SLURM_PROCID"])
    nodes = expand_slurm_hostlist(environ.get("SLURM_STEP_NODELIST") or
                                  environ["SLURM_JOB_NODELIST"])
    per_node = _expand_tasks_per_node(environ.get("SLURM_STEP_TASKS_PER_NODE") or
                                      environ.get("SLURM_TASKS_PER_NODE", "1"))
  except (KeyError, ValueError) as e:
    raise InputError("Slurm environment incomplete or malformed (%s): expected SLURM_PROCID, "
                     "SLURM_NTASKS, SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE" % e)
  if len(per_node) != len(nodes) or sum(per_node) != ntasks:
    raise InputError("Slurm: %d node(s) %s with %s tasks each do not make SLURM_NTASKS=%d" %
                     (len(nodes), nodes, per_node, ntasks))
  addresses = ["%s:%d" % (node, worker_port + local)
               for node, count in zip(nodes, per_node) for local in range(count)]
  return Cluster([Task("worker", i, a) for i, a in enumerate(addresses)], rank, source)


# One server per process, for the life of the process (TensorFlow cannot stop one).
_SERVER = {}


def session_config(cluster, config):
  """`config` plus what a Session of this task needs: the collective group leader, and device
  filters that show it only its own devices (all of them to the chief of an in-graph run)."""
  if not cluster.tasks:
    return config
  config = tf.ConfigProto.FromString(config.SerializeToString())
  config.experimental.collective_group_leader = cluster.device_prefix(0)
  del config.device_filters[:]
  if not (cluster.in_graph and cluster.is_chief):
    config.device_filters.append(cluster.device_prefix())
  return config


def session_target(cluster, config):
  """The Session target of this process: '' in one process, else its server (started once)."""
  if not cluster.tasks:
    return ""
  if "server" not in _SERVER:
    task = cluster.tasks[cluster.rank]
    try:
      _SERVER["server"] = tf.distribute.Server(
          tf.train.ClusterSpec(cluster.cluster_spec()), job_name=task.job,
          task_index=task.index, config=session_config(cluster, config), start=True)
    except (tf.errors.OpError, RuntimeError) as e:
      raise InputError("%s: cannot start this process's server at %s (%s); is the port free?" %
                       (cluster.source, task.address, str(e).splitlines()[0][:120]))
    logging.info("Joined the cluster as %s; chief: %s; %d processes (%s)", cluster.describe(),
                 cluster.describe(0), len(cluster.tasks), cluster.source)
  return _SERVER["server"].target


_RELEASE_QUEUE = "bert_mgpu_release"


def _release_queue(cluster, rank):
  """The queue on task `rank`'s CPU through which the chief releases that task (any graph)."""
  with tf.device(cluster.device_prefix(rank) + "/device:CPU:0"):
    return tf.FIFOQueue(1, [tf.int32], shapes=[[]], shared_name=_RELEASE_QUEUE,
                        name="release_task_%d" % rank)


def serve_chief_graph(cluster, config, timeout_s, poll_s=2.0):
  """Serves this task's devices to the chief's one graph until the chief is done with them.

  A task other than the chief of an in-graph run (--placement=inter_first) builds nothing: its
  server runs the pieces of the chief's graph placed on its devices. It waits for the chief's
  release (sent at the chief's exit, see `release_tasks`), and gives up, with a one-line error,
  when the chief has not shown up within `timeout_s` or disappears without releasing it.

  Args:
    cluster: Cluster of this (non-chief) task.
    config: ConfigProto of this task's server: its devices (device_count, GPUs).
    timeout_s: seconds to wait for the chief to listen.
    poll_s: how often to check that the chief is still there.

  Raises:
    InputError: the chief never came or dropped out.
  """
  target = session_target(cluster, config)
  logging.info("%s serves its devices to the chief's graph (--placement=inter_first); the "
               "chief %s reads the data and writes every output", cluster.describe(),
               cluster.describe(0))
  chief_address = cluster.tasks[0].address
  with tf.Graph().as_default():
    released = _release_queue(cluster, cluster.rank).dequeue()
    with tf.Session(target, config=session_config(cluster, config)) as sess:
      started, seen = time.time(), False
      answered = started
      while True:
        try:
          sess.run(released, options=tf.RunOptions(timeout_in_ms=int(poll_s * 1000)))
          logging.info("Released by the chief %s: done", cluster.describe(0))
          return
        except tf.errors.DeadlineExceededError:
          pass
        if not seen:  # Its server must answer: anything else at its address is not it.
          seen = _serves_as(cluster, 0, seconds=poll_s)
          if not seen and time.time() - started > timeout_s:
            raise InputError("the chief: %s (waited %d s); start it with the same "
                             "--worker_hosts, or raise --collective_timeout_s" %
                             (_why_not_serving(cluster, 0), timeout_s))
        elif _serves_as(cluster, 0, seconds=poll_s):
          answered = time.time()
        elif not _reachable(chief_address, seconds=poll_s) or time.time() - answered > timeout_s:
          raise InputError("the chief dropped out before releasing %s: %s (waited %d s); "
                           "relaunch every process to resume from its latest checkpoint" %
                           (cluster.describe(), _why_not_serving(cluster, 0, joined=True),
                            time.time() - answered))


def release_tasks(cluster, config, timeout_s=10.0):
  """The chief of an in-graph run lets every other task's `serve_chief_graph` return.

  Tasks whose server no longer answers need no release; the Session is shown only the others
  (a Session waits without end for a task it may see that does not answer).
  """
  ranks = [r for r in range(1, len(cluster.tasks)) if _serves_as(cluster, r, seconds=3.0)]
  if not ranks:
    return
  config = session_config(cluster, config)
  config.device_filters.extend([cluster.device_prefix(0)] + [cluster.device_prefix(r)
                                                             for r in ranks])

  def release():
    with tf.Graph().as_default():
      ops = [_release_queue(cluster, r).enqueue(0) for r in ranks]
      try:
        with tf.Session(session_target(cluster, config), config=config) as sess:
          sess.run(ops, options=tf.RunOptions(timeout_in_ms=int(timeout_s * 1000)))
      except tf.errors.OpError as e:
        logging.warning("Could not release every task (%s)", type(e).__name__)

  # The Session's close talks to the released tasks, which leave at once: once (in the suite,
  # under load) it waited for them without end, after the run had written everything. The
  # chief is exiting, so it waits a bounded time and leaves the close behind.
  worker = threading.Thread(target=release, daemon=True)
  worker.start()
  worker.join(timeout_s + 5.0)
  if worker.is_alive():
    logging.warning("Releasing tasks %s did not end within %d s; exiting without it", ranks,
                    timeout_s + 5)


def wait_for_tasks(cluster, timeout_s, ranks=None):
  """Waits until the servers of tasks `ranks` answer (default: every task but the chief).

  Before a Session of the chief of an in-graph run, and before a non-chief's first collective
  (ranks [0]): a Session whose graph spans the tasks waits without end for a task whose address
  accepts connections but does not answer as that task's TensorFlow server (another program, or
  another run's process, holds the port), and a non-chief's Session asks the chief, the leader
  of every collective group, for step numbers again and again without end, whatever the
  collective's timeout. So each task is asked for its devices first.

  Raises:
    InputError: naming the tasks that did not answer within timeout_s, and what is at their
      addresses instead.
  """
  missing = _unanswered(cluster, list(range(1, len(cluster.tasks)) if ranks is None else ranks),
                        timeout_s)
  if missing:
    raise InputError("%s (waited %d s); start every process with the same --worker_hosts "
                     "and --placement, or raise --collective_timeout_s" %
                     ("; ".join(_why_not_serving(cluster, r) for r in missing), timeout_s))


def _unanswered(cluster, ranks, timeout_s):
  """The tasks of `ranks` whose server has not answered within timeout_s (logged while it
  waits), or []."""
  deadline, told = time.time() + timeout_s, False
  while True:
    ranks = [r for r in ranks if not _serves_as(cluster, r, seconds=1.0)]
    if not ranks or time.time() > deadline:
      return ranks
    if not told:
      logging.info("Waiting up to %d s for %s to answer", timeout_s,
                   ", ".join(cluster.describe(r) for r in ranks))
      told = True
    time.sleep(0.5)


def _serves_as(cluster, rank, seconds):
  """Whether the TensorFlow server of task `rank` answers at its address within `seconds`."""
  devices = server_devices(cluster.tasks[rank].address, seconds)
  prefix = cluster.device_prefix(rank) + "/"
  return bool(devices) and all(d.startswith(prefix) for d in devices)


def _why_not_serving(cluster, rank, joined=False):
  """What is at task `rank`'s address instead of its server, for an error line; `joined`: the
  task's server answered there before (so a listener that does not answer is that server,
  stopped or stuck)."""
  address = cluster.tasks[rank].address
  error = _connect_error(address, seconds=2.0)
  if isinstance(error, ConnectionRefusedError):
    if rank == 0 or cluster.in_graph:
      return "%s not reachable: nothing listens there" % cluster.describe(rank)
    # Only training joins: such a process ends at once without --do_train (mode flags differ).
    return ("%s not reachable: nothing listens there, so it was never started or has ended "
            "(with an error, or at once: without --do_train a process other than the chief has "
            "nothing to do)" % cluster.describe(rank))
  if isinstance(error, TimeoutError):
    return ("%s not reachable: connections to it time out (host down, a firewall, or a "
            "program that does not accept them)" % cluster.describe(rank))
  if error:
    return "%s not reachable: %s" % (cluster.describe(rank), error.strerror or error)
  devices = server_devices(address, seconds=3.0)
  if not devices and joined:
    return ("%s: its server accepts connections at %s but does not answer (the process is "
            "stopped or stuck, or its host is overloaded)" % (cluster.describe(rank), address))
  if not devices:
    return ("%s: something that is not a TensorFlow server listens at %s" %
            (cluster.describe(rank), address))
  return ("%s: the TensorFlow server at %s is another run's (its devices are %s, expected "
          "%s/...)" % (cluster.describe(rank), address, devices[0].rsplit("/", 1)[0],
                       cluster.device_prefix(rank)))


_GET_STATUS = "/tensorflow.WorkerService/GetStatus"


def server_devices(address, seconds):
  """The device names of the TensorFlow server at host:port (its WorkerService.GetStatus), or
  None when nothing answers as one within `seconds`."""
  import grpc  # pylint: disable=g-import-not-at-top
  with grpc.insecure_channel(address) as channel:
    get_status = channel.unary_unary(_GET_STATUS, request_serializer=bytes,
                                     response_deserializer=bytes)
    try:
      reply = get_status(b"", timeout=seconds)  # A GetStatusRequest has no fields.
    except grpc.RpcError:
      return None
  # GetStatusResponse: field 1, repeated DeviceAttributes.
  return [device_attributes_pb2.DeviceAttributes.FromString(value).name
          for field, value in _length_delimited_fields(reply) if field == 1]


def _length_delimited_fields(data):
  """(field number, bytes) of each length-delimited field of a serialized protocol buffer."""
  def varint(i):
    value, shift = 0, 0
    while True:
      value |= (data[i] & 0x7F) << shift
      shift += 7
      i += 1
      if data[i - 1] < 0x80:
        return value, i
  i = 0
  while i < len(data):
    key, i = varint(i)
    wire_type = key & 7
    if wire_type == 2:
      length, i = varint(i)
      yield key >> 3, data[i:i + length]
      i += length
    elif wire_type == 0:
      _, i = varint(i)
    else:  # 64-bit (1) or 32-bit (5) scalars.
      i += 8 if wire_type == 1 else 4


def _fact_value(value):
  """An int64 for a fact: ints as they are, anything else hashed (62 bits)."""
  if isinstance(value, (bool, int, np.integer)):
    return int(value)
  digest = hashlib.sha1(repr(value).encode("utf-8")).hexdigest()
  return int(digest[:15], 16)


def handshake(cluster, config, must_agree, from_chief, timeout_s, cards=()):
  """Waits for every process, checks that `must_agree` is the same everywhere and that no two
  processes of one host use the same GPU, returns the chief's `from_chief`.

  Args:
    cluster: Cluster (with tasks).
    config: the ConfigProto of this run's sessions.
    must_agree: OrderedDict name -> int or str (a flag value, a digest of the model config...).
    from_chief: OrderedDict name -> int that only the chief's value counts for.
    timeout_s: how long to wait for the slowest process.
    cards: the GPUs this process uses, as CUDA_VISIBLE_DEVICES names them (at most
      MAX_CARDS).

  Returns:
    dict name -> the chief's int value of each `from_chief` entry.

  Raises:
    InputError: a process disagrees (naming it, the fact and both values), shares a GPU with
      another process of its host, or has not joined.
  """
  mine = [cluster.rank] + [_fact_value(v) for v in list(must_agree.values()) +
                           list(from_chief.values())] + _card_row(cards)
  target = session_target(cluster, config)
  if not cluster.is_chief:
    wait_for_tasks(cluster, timeout_s, ranks=[0])
  with tf.Graph().as_default():
    gathered = _all_gather_row(cluster, mine, timeout_s)
    parted = _all_gather_row(cluster, [cluster.rank], min(timeout_s, _PARTING_TIMEOUT_S))
    started, sess = time.time(), None
    try:
      sess = tf.Session(target, config=session_config(cluster, config))
      with peer_watch(cluster, timeout_s):
        by_rank = {int(row[0]): row[1:] for row in sess.run(gathered)}
      disagreement = (_first_disagreement(cluster, must_agree, by_rank) or
                      _shared_card(cluster, cards, by_rank))
      if disagreement:
        leave_together(sess, parted, cluster, timeout_s, disagreement)
        raise InputError(disagreement)
    except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError) as e:
      raise InputError(_why_not_joined(cluster, time.time() - started, e))
    finally:
      if sess is not None:
        sess.close()
  logging.info("All %d processes joined and agree on %s", cluster.num_processes,
               ", ".join(must_agree))
  chief = by_rank[0]
  return {name: int(chief[len(must_agree) + i]) for i, name in enumerate(from_chief)}


# How long a process that found a disagreement waits for the others to have read it too.
_PARTING_TIMEOUT_S = 30


def _all_gather_row(cluster, row, timeout_s):
  """An all-gather of one int64 row per process, on this process's CPU: [num_processes, len]."""
  with tf.device(cluster.device_prefix() + "/device:CPU:0"):
    return collective_ops.all_gather(
        tf.constant([row], tf.int64), cluster.num_processes,
        collective.group_key([cluster.device_prefix(r) for r in range(cluster.num_processes)]),
        collective.instance_key(), communication_hint="ring", timeout=timeout_s)


def _first_disagreement(cluster, must_agree, by_rank):
  """The one-line error for the first process and fact that differ from the chief's, or None.

  Every process holds the same rows, so every process finds the same disagreement. A fact that
  is None in one of the two (a flag that does nothing there, as ELECTRA's --disc_weight under
  --objective=mlm) differs because another one does: that other one is named first."""
  chief, unused = by_rank[0], _fact_value(None)
  for rank in sorted(by_rank):
    differ = [j for j in range(len(must_agree)) if by_rank[rank][j] != chief[j]]
    if differ:
      j = min(differ, key=lambda j: unused in (by_rank[rank][j], chief[j]))
      name = list(must_agree)[j]
      numeric = (isinstance(must_agree[name], (bool, int, np.integer)) and
                 unused not in (by_rank[rank][j], chief[j]))
      values = " (%d there, %d on the chief)" % (by_rank[rank][j], chief[j]) if numeric else ""
      return ("%s has a different %s than the chief, %s%s: start every process with the same "
              "flags, model and training data" %
              (cluster.describe(rank), name, cluster.describe(0), values))
  return None


MAX_CARDS = 16  # GPUs per process the handshake can compare


def _card_row(cards):
  """The handshake's columns for `cards`: each card's digest, padded with -1 to MAX_CARDS."""
  cards = list(cards)[:MAX_CARDS]
  return [_fact_value(c) for c in cards] + [-1] * (MAX_CARDS - len(cards))


def _shared_card(cluster, cards, by_rank):
  """The one-line error for two processes of one host that use the same GPU, or None.

  NCCL refuses such a pair ("Duplicate GPU detected") at the first all-reduce, which would
  otherwise look like a process that dropped out."""
  mine = dict(zip(_card_row(cards), cards))
  used = {}
  for rank in sorted(by_rank):
    host = host_of(cluster.tasks[rank].address)
    for card in by_rank[rank][-MAX_CARDS:]:
      if card == -1:
        continue
      other = used.setdefault((host, card), rank)
      if other != rank:
        name = "GPU %s" % mine[card] if card in mine else "a GPU"
        return ("%s and %s use the same card (%s of host %s): each process of a host needs "
                "its own GPUs; give every process of the host the same CUDA_VISIBLE_DEVICES "
                "with at least processes x --n_gpus cards (each then takes its own block), or "
                "each its own cards (CUDA_VISIBLE_DEVICES_<i> with "
                "scripts/launch_local_workers.sh, --gpus-per-task with Slurm)" %
                (cluster.describe(other), cluster.describe(rank), name, host))
  return None


def leave_together(sess, barrier, cluster, timeout_s, error=None):
  """Runs `barrier`, a collective of every process, before this process may end; ignores its
  failure.

  A process's server stops when it exits, while another process may still be receiving this
  one's part of the last collective they ran: TensorFlow counts a part as sent once its reply is
  ready, not once it has arrived. That process would then see this one gone instead of the
  result. No process passes `barrier` before every process has finished the collectives before
  it, so the first to leave after it leaves no one behind; whatever then fails the barrier
  itself (a process that left) is harmless.

  The barrier is a collective this process runs for the first time: a process other than the
  chief whose chief has gone would wait for it without end (peer_watch bounds that).

  Args:
    sess: a Session of this process.
    barrier: an op or tensor of a collective over all processes (run once, result unused).
    cluster: Cluster of this process.
    timeout_s: how long a process other than the chief waits for a silent chief.
    error: the line to end with then, when this process already knows what failed.
  """
  try:
    with peer_watch(cluster, timeout_s, error):
      sess.run(barrier)
  except tf.errors.OpError:
    pass


def _why_not_joined(cluster, waited_s, error):
  """The one-line reason for a failed handshake: which tasks do not answer, if we can tell."""
  absent = [r for r in range(len(cluster.tasks))
            if r != cluster.rank and not _serves_as(cluster, r, seconds=2.0)]
  if absent:
    return ("%s (waited %d s); start every process with the same --worker_hosts/TF_CONFIG, or "
            "raise --collective_timeout_s" %
            ("; ".join(_why_not_serving(cluster, r) for r in absent), waited_s))
  return ("the other processes did not all join within %d s (%s); start every process with "
          "the same cluster and flags, or raise --collective_timeout_s" %
          (waited_s, type(error).__name__))


def _reachable(address, seconds=2.0):
  """Whether something accepts TCP connections at host:port within `seconds`."""
  deadline = time.time() + seconds
  while time.time() < deadline:
    if _connect_error(address, seconds=0.5) is None:
      return True
    time.sleep(0.2)
  return False


def _connect_error(address, seconds):
  """None when a TCP connection to host:port opens within `seconds`, else the OSError."""
  host, port = address.rsplit(":", 1)
  try:
    socket.create_connection((host, int(port)), timeout=seconds).close()
    return None
  except OSError as e:
    return e


class _PeerWatch(object):
  """Ends this process (one `error:` line, exit 2) when the server of a task it waits for stops
  answering for `timeout_s` while this process waits inside TensorFlow.

  A non-chief's Session asks the chief for the step numbers of each collective it runs for the
  first time (a new set of fetches: the first update, the early-stopping vote, the barrier
  before the exit) and retries without end when the chief has gone or stopped, whatever the
  collective's timeout or the RunOptions' deadline: no exception ever reaches Python. The chief
  of an in-graph run waits without end for a stage on a task that stopped (no collective, no
  timeout). So a thread asks the servers of `ranks` for their devices every second, and one
  silent for `timeout_s` ends the process from that thread. A peer fault that TensorFlow
  reports itself comes first (its collective timeout starts no later); the watch stops before
  that error's line is printed, so one line is printed either way.
  """

  def __init__(self, cluster, ranks, timeout_s, error):
    self._cluster, self._ranks, self._timeout_s = cluster, ranks, timeout_s
    self._error = error
    self._lock, self._stopped = threading.Lock(), threading.Event()

  def __enter__(self):
    threading.Thread(target=self._watch, daemon=True).start()
    return self

  def __exit__(self, *unused):
    with self._lock:
      self._stopped.set()

  def _watch(self):
    answered = dict.fromkeys(self._ranks, time.time())
    silent = []
    while not silent and not self._stopped.wait(1.0):
      for rank in self._ranks:
        if _serves_as(self._cluster, rank, seconds=min(2.0, self._timeout_s)):
          answered[rank] = time.time()
      silent = [r for r in self._ranks if time.time() - answered[r] >= self._timeout_s]
    if not silent:
      return
    rank = silent[0]
    line = "error: %s\n" % (self._error or "%s stopped answering: %s (waited %d s); %s stops "
                             "too. %s" % ("the chief" if rank == 0 else "a process serving "
                                          "the chief's graph", _why_not_serving(
                                              self._cluster, rank, joined=True),
                                          time.time() - answered[rank],
                                          self._cluster.describe(), _RELAUNCH))
    with self._lock:
      if self._stopped.is_set():
        return
      try:
        os.write(2, line.encode("utf-8"))
      except OSError:
        pass
      os._exit(2)  # pylint: disable=protected-access


_RELAUNCH = "Relaunch every process to resume from the chief's latest checkpoint"


def peer_watch(cluster, timeout_s, error=None):
  """A context in which this process ends within `timeout_s` of the silence of a task it waits
  for, wherever TensorFlow waits (_PeerWatch), with `error` as its line if given (what this
  process already knows is wrong), else one naming that task: a non-chief watches the chief,
  the chief of an in-graph run every other task; nothing for the chief of another run (its
  collectives time out) or one process."""
  if not cluster.tasks or (cluster.is_chief and not cluster.in_graph):
    return contextlib.nullcontext()
  ranks = [0] if not cluster.is_chief else list(range(1, len(cluster.tasks)))
  return _PeerWatch(cluster, ranks, timeout_s, error)


@contextlib.contextmanager
def peer_faults(parallel):
  """Turns a lost or silent peer process into a one-line InputError (multi-process runs).

  A process other than the chief first checks that the chief's server still answers (within
  --collective_timeout_s): its Session asks the chief for the step numbers of every collective
  it runs for the first time, without end if the chief left after the processes joined (while
  building its graph, say), whatever the collective's timeout. Inside, the chief's silence ends
  it within the same timeout, and the silence of a serving task the chief of an in-graph run
  (peer_watch).
  """
  cluster = parallel.cluster
  if cluster.tasks and not cluster.is_chief:
    started = time.time()
    if _unanswered(cluster, [0], parallel.collective_timeout_s):
      raise InputError("the chief left after the processes joined: %s (waited %d s); %s stops "
                       "too. %s" % (_why_not_serving(cluster, 0, joined=True),
                                    time.time() - started, cluster.describe(), _RELAUNCH))
  try:
    with peer_watch(cluster, parallel.collective_timeout_s):
      yield
  except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.AbortedError,
          tf.errors.CancelledError, tf.errors.InternalError) as e:
    if not cluster.tasks:
      raise
    if isinstance(e, tf.errors.DeadlineExceededError):
      why = "did not answer within --collective_timeout_s=%g s" % parallel.collective_timeout_s
    else:
      why = "dropped out (%s)" % type(e).__name__
    raise InputError("%s %s; %s stops too. %s" % (_peer_named_in(str(e), cluster), why,
                                                  cluster.describe(), _RELAUNCH))


def _peer_named_in(message, cluster):
  """The other process a TensorFlow error message names ('task 1 (worker:1 at h:p)'); when it
  names none (a collective's timeout), the first other one whose server does not answer now
  (the chief first), else 'another process'."""
  tasks = [(t.job, t.index) for t in cluster.tasks]
  for job, index in re.findall(r"/job:(\w+)/replica:0/task:(\d+)", message):
    if (job, int(index)) in tasks and tasks.index((job, int(index))) != cluster.rank:
      return cluster.describe(tasks.index((job, int(index))))
  for rank in range(len(cluster.tasks)):
    if rank != cluster.rank and not _serves_as(cluster, rank, seconds=2.0):
      return cluster.describe(rank)
  return "another process"
