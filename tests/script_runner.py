"""Runs the project's scripts as processes of their own, as a user would, for end-to-end tests.

The scripts that import TensorFlow (HOSTED_SCRIPTS) run forked from one script host per test
session (tests/script_host.py), which has imported it once: each run is still a process of its
own running the script file as `__main__`, with its own exit status and output, but starts in
0.1 s instead of 2 s. A run in another environment (env_updates) starts a fresh `python`.
"""

import json
import os
import subprocess
import sys

import script_host

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CHINESE_VOCAB = os.path.join(REPO_ROOT, "vocab", "chinese_vocab.txt")
ENGLISH_VOCAB = os.path.join(REPO_ROOT, "vocab", "english_uncased_vocab.txt")
HOSTED_SCRIPTS = ("run_classifier_mgpu.py", "run_pretraining_mgpu.py", "run_rewrite_finetune.py",
                  "convert_to_hf.py", "convert_hf_checkpoint.py", "build_saved_model.py",
                  os.path.join("scripts", "build_word_loss.py"),
                  os.path.join("scripts", "build_domain_vocab.py"),
                  os.path.join("tests", "multiworker_case.py"),
                  os.path.join("benchmarks", "placement_audit.py"))
_HOST = []  # The session's ScriptHost, started by the first hosted run.


def _env(updates=None):
  """The environment of a script run: this one, on CPU, the repo on the path."""
  env = dict(os.environ)
  env.update({"CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2",
              "TF_ENABLE_ONEDNN_OPTS": "0", "PYTHONPATH": REPO_ROOT})
  env.update(updates or {})
  return env


# The variables the host's start and imports (Python's locale and temp folder, TensorFlow,
# oneDNN, OpenMP, numpy's BLAS, ours) may have read: a run whose environment differs in one of
# these needs a fresh process.
_READ_ON_IMPORT = ("PYTHON", "LANG", "LC_", "TMP", "TEMP", "TF_", "CUDA", "XLA", "OMP_", "KMP_",
                   "MKL", "OPENBLAS", "DNNL", "ONEDNN", "LD_", "BERT_MGPU")


# ... except these, which only a run reads (parallel/cluster.py's TF_CONFIG; TensorFlow reads it
# in its cluster resolvers, not on import): a run that sets them is still forked from the host.
_READ_BY_THE_RUN = ("TF_CONFIG",)


def _read_on_import(env):
  return {k: v for k, v in env.items()
          if k.startswith(_READ_ON_IMPORT) and k not in _READ_BY_THE_RUN}


def _host_for(command, env):
  """The script host and script if it can run argv `command` in `env`, else (None, None).

  A hosted run gets all of `env` (tests/script_host.py sets it in the forked child), but what
  the host's imports read stays the host's: so the host serves a run only when `env` agrees
  with the host's on the variables of _READ_ON_IMPORT. Others may differ: pytest's
  PYTEST_CURRENT_TEST changes for every test, and importing torch in a test sets
  TORCHINDUCTOR_CACHE_DIR for the rest of the session (with a strict comparison, every run
  after that imported TensorFlow afresh). The host starts with the plain `_env()`, whatever the
  run that starts it asks for (TF_CONFIG, say), so that the plain runs after it match.
  """
  script = os.path.relpath(command[1], REPO_ROOT) if len(command) > 1 else None
  if command[0] != sys.executable or script not in HOSTED_SCRIPTS:
    return None, None
  if not _HOST:
    _HOST.append(script_host.ScriptHost(HOSTED_SCRIPTS, _env()))
  if _read_on_import(_HOST[0].env) != _read_on_import(env):
    return None, None
  return _HOST[0], script


def close_host():
  """Ends the session's script host (tests/conftest.py, at the end of the session)."""
  if _HOST:
    _HOST.pop().close()


def _start(command, env, stdin=""):
  """Starts argv `command` from the repo root (forked from the host when it can) with the text
  `stdin` on its standard input, stdout and stderr piped as text; a Popen (whose stdin is still
  to be written by communicate) or a script_host.HostedProcess."""
  host, script = _host_for(command, env)
  if host:
    return host.start(script, command[2:], env=env, stdin=stdin, stdout=True, errors="strict")
  return subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_script(script, *args, timeout=600, input=""):  # pylint: disable=redefined-builtin
  """Runs `python script args...` from the repo root on CPU; returns CompletedProcess (text).

  `input`: text for the script's standard input (default: empty).
  """
  proc = _start(script_command(script, *args), _env(), input)
  try:
    out, err = proc.communicate(input if isinstance(proc, subprocess.Popen) else None, timeout)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.communicate()
    raise
  return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def assert_one_line_error(proc, *fragments):
  """The process failed with exit 2 and a single `error: ...` line containing `fragments`."""
  assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
  assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
  error_lines = [l for l in proc.stderr.splitlines() if l.startswith("error: ")]
  assert len(error_lines) == 1, proc.stderr[-3000:]
  for fragment in fragments:
    assert fragment in error_lines[0], (fragment, error_lines[0])
  return error_lines[0]


def write_tiny_bert_config(path, vocab_size, max_position_embeddings=64, hidden_size=32,
                           num_hidden_layers=1, **overrides):
  """Writes a small bert_config.json for fast end-to-end runs."""
  config = {"vocab_size": vocab_size, "hidden_size": hidden_size,
            "num_hidden_layers": num_hidden_layers, "num_attention_heads": 4,
            "intermediate_size": 2 * hidden_size, "hidden_act": "gelu",
            "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
            "max_position_embeddings": max_position_embeddings, "type_vocab_size": 2,
            "initializer_range": 0.02}
  config.update(overrides)
  with open(path, "w") as f:
    json.dump(config, f)
  return str(path)


# The ports of the tests' servers come from below the kernel's ephemeral range
# (net.ipv4.ip_local_port_range, 32768-60999 by default). The kernel hands that range out to
# bind(port 0) and to the local end of every outgoing connection: a port found free there could
# be taken by any other test's connection (the processes' probes and gRPC channels make many)
# before the server that was to listen on it starts, and the run would wait for a peer that
# failed. Below the range only the tests pick, each pytest worker from its own slice.
_PORT_SLICE = 1500
_PORTS_GIVEN = set()  # What this process handed out already.


def _port_slice():
  """range of ports this pytest process picks from (the whole suite: 8 slices below 32768)."""
  try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
      ephemeral_low = int(f.read().split()[0])
  except (OSError, ValueError, IndexError):
    ephemeral_low = 32768
  worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
  index = int(worker[2:]) % 8 if worker[2:].isdigit() else 0
  start = max(ephemeral_low, 1024 + 8 * _PORT_SLICE) - (8 - index) * _PORT_SLICE
  return range(start, start + _PORT_SLICE)


def _is_free(port):
  """Whether a server could listen on `port` on every interface, as TensorFlow's does."""
  import socket  # pylint: disable=g-import-not-at-top
  with socket.socket() as sock:
    try:
      sock.bind(("", port))
      return True
    except OSError:
      return False


def free_ports(n):
  """n TCP ports on localhost, free now and not ones the kernel gives out (see above)."""
  import random  # pylint: disable=g-import-not-at-top
  candidates = [p for p in _port_slice() if p not in _PORTS_GIVEN]
  random.Random().shuffle(candidates)  # Its own seed: tests may seed the module's generator.
  ports = []
  for port in candidates:
    if _is_free(port):
      ports.append(port)
      _PORTS_GIVEN.add(port)
      if len(ports) == n:
        return ports
  raise RuntimeError("no %d free ports left in %s" % (n, _port_slice()))


def start_processes(commands, env_updates=None):
  """Starts every command (argv lists) at once, from the repo root on CPU; returns the Popens
  (or HostedProcesses: see the module docstring)."""
  env = _env(env_updates)
  return [_start(cmd, env) for cmd in commands]


def finish_processes(procs, timeout):
  """Waits at most `timeout` seconds for all of `procs`; kills (by PID) those still running.

  Returns:
    list of subprocess.CompletedProcess (returncode None for a process that had to be killed).
  """
  import time  # pylint: disable=g-import-not-at-top
  deadline = time.time() + timeout
  results = []
  for proc in procs:
    try:
      out, err = proc.communicate(timeout=max(deadline - time.time(), 1))
      results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    except subprocess.TimeoutExpired:
      proc.kill()
      out, err = proc.communicate()
      results.append(subprocess.CompletedProcess(proc.args, None, out, err))
  return results


def run_processes(commands, timeout, env_updates=None):
  """start_processes, then finish_processes."""
  return finish_processes(start_processes(commands, env_updates), timeout)


def script_command(script, *args):
  """argv running one of the project's scripts with this Python."""
  return [sys.executable, os.path.join(REPO_ROOT, script)] + list(args)
