"""Bad inputs and faults run through the real scripts, for tests/test_faults.py and the table of
scripts/fault_table.sh.

A `World` builds tiny shared fixtures once: a vocabulary, a model config, data for every script,
and a trained output_dir per run script (the "good state" that faults must not damage). Each
`Case` runs one script as a process of its own, in a directory of its own (copying a trained
output_dir when it needs one), optionally with a trigger that acts when the run reaches a stage
(send a signal, kill -9, fill the disk), and then checks what is left. Every run of a script
that imports TensorFlow (the cases, the runs of the checks, the world's trainings) is forked
from the world's script host (tests/script_host.py), which has imported TensorFlow once, so a
bad flag costs 0.1 s instead of 2 s of imports: still a process of its own, with its own pid,
session, exit status, stderr and `__main__`. That holds for the cases with a signal, kill -9 or
a full or read-only disk too: the run has a fresh `python`'s signal dispositions and mask
(script_host._fresh_signals) and installs its SIGINT and SIGTERM handlers itself
(engine/cli.py), SIGKILL is SIGKILL to any process, and the case's tmpfs is mounted (before the
run starts) in the mount namespace the host and its children share. Only
create_pretraining_data.py, which imports no TensorFlow, starts as a fresh `python` (0.2 s).
`run_case` classifies the outcome:

  clear error  exit 2 (or 130/143 for an interrupt) and a single last line `error: ...` naming
               what the case expects, no traceback
  handled      the run succeeds (or a rerun after the fault succeeds), as the case expects
  traceback    a Python traceback reached the user
  hang         no exit within the case's time limit (the process is then killed)
  silent       success, or a wrong result, where an error was due
  damaged      the previous good state of output_dir is broken or blocked afterwards
  unclear      any other exit (several error lines, a wrong exit code, a wrong message)
  skipped      the case needs root (mounts) and this is not root
"""

import collections
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import script_host
import script_runner

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PYTHON = sys.executable

CHARS = list("甲乙丙丁戊己庚辛壬癸子丑")
POS, NEG = list("好赞优美"), list("差坏烂丑")
WORDS = list("酒店服务房间")
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
VOCAB = SPECIAL + sorted(set(CHARS + POS + NEG + WORDS))
CONFIG = {"vocab_size": len(VOCAB), "hidden_size": 16, "num_hidden_layers": 1,
          "num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
          "max_position_embeddings": 32, "type_vocab_size": 2, "initializer_range": 0.02}
CLF_STEPS = 8  # 32 rows / batch 4, one epoch; checkpoints at 2, 4, 6 and 8.
RW_STEPS = 4
PT_STEPS = 4


def _env():
  env = dict(os.environ)
  env.update({"CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2",
              "TF_ENABLE_ONEDNN_OPTS": "0", "PYTHONPATH": REPO_ROOT})
  env.pop("BERT_MGPU_TRACEBACK", None)
  return env


def command(script, *args):
  return [PYTHON, os.path.join(REPO_ROOT, script)] + [str(a) for a in args]


def run(script, *args, timeout=300):
  """Runs a script to the end in a fresh subprocess; CompletedProcess."""
  return subprocess.run(command(script, *args), cwd=REPO_ROOT, env=_env(), capture_output=True,
                        text=True, timeout=timeout)


def _write(path, text):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return path


def clf_rows(n, offset=0):
  """`text<TAB>label` rows of a two-label task."""
  rows = []
  for i in range(n):
    good = (i + offset) % 2 == 0
    words = POS if good else NEG
    rows.append("%s%s%s%s\t%s\n" % (WORDS[i % 6], words[i % 4], WORDS[(i + 1) % 6],
                                    words[(i + 1) % 4], "pos" if good else "neg"))
  return "".join(rows)


def rewrite(source):
  mapping = {c: CHARS[(i * 5 + 3) % len(CHARS)] for i, c in enumerate(CHARS)}
  return "".join(mapping[c] for c in reversed(source))


def rw_rows(n, with_target=True, offset=0):
  rows = []
  for i in range(n):
    s = "".join(CHARS[(i * 7 + k + offset) % len(CHARS)] for k in range(2 + i % 4))
    rows.append(s + ("\t" + rewrite(s) if with_target else "") + "\n")
  return "".join(rows)


class World(object):
  """The shared fixtures: files under `root` and three trained output_dirs."""

  def __init__(self, root):
    self.root = root
    self.mounts = []
    self.vocab = _write(os.path.join(root, "vocab.txt"), "\n".join(VOCAB) + "\n")
    self.config = _write(os.path.join(root, "bert_config.json"), json.dumps(CONFIG))
    self.clf_data = os.path.join(root, "clf_data")
    _write(os.path.join(self.clf_data, "train.tsv"), clf_rows(32))
    _write(os.path.join(self.clf_data, "dev.tsv"), clf_rows(8, 1))
    _write(os.path.join(self.clf_data, "test.tsv"), "qid\ttext_a\n" + "".join(
        "%d\t%s\n" % (i, row.split("\t")[0]) for i, row in enumerate(clf_rows(5).splitlines())))
    self.rw_data = os.path.join(root, "rw_data")
    _write(os.path.join(self.rw_data, "train.tsv"), rw_rows(32))
    _write(os.path.join(self.rw_data, "dev.tsv"), rw_rows(6, offset=1))
    _write(os.path.join(self.rw_data, "test.tsv"), rw_rows(5, with_target=False, offset=2))
    text = "".join("".join(CHARS[(d + k) % 12] for k in range(6 + d % 5)) + "。\n" +
                   ("\n" if d % 3 == 2 else "") for d in range(60))
    self.corpus = _write(os.path.join(root, "corpus.txt"), text)
    # 64 times the corpus: 20 chunks of corpus.CHUNK_DOCUMENTS documents, so a run at
    # --dupe_factor=30 logs its first example within about 2 s and is still writing 15 s later,
    # ample time for a signal or a full disk to land mid-run.
    self.long_corpus = _write(os.path.join(root, "long_corpus.txt"), text * 64)
    self.records = os.path.join(root, "pt.tfrecord")
    self.clf_out = os.path.join(root, "clf_out")
    self.rw_out = os.path.join(root, "rw_out")
    self.pt_out = os.path.join(root, "pt_out")
    self.host = None

  def build(self, parallel=2):
    """Starts the script host, makes the records, then trains the three good output_dirs
    (`parallel` at a time)."""
    self.host = script_host.ScriptHost(HOSTED_SCRIPTS, _env())
    done = run("create_pretraining_data.py", *self.cpd_args(self.corpus, self.records))
    _check_ok(done, "create_pretraining_data.py")
    jobs = [("run_classifier_mgpu.py", self.clf_args(self.clf_out, "--do_train", "--do_eval",
                                                     "--do_predict")),
            ("run_rewrite_finetune.py", self.rw_args(self.rw_out, "--do_train",
                                                     "--num_train_steps=%d" % RW_STEPS)),
            ("run_pretraining_mgpu.py", self.pt_args(self.pt_out, "--do_train", "--do_eval"))]
    for start in range(0, len(jobs), parallel):
      procs = [self.start(script, args) for script, args in jobs[start:start + parallel]]
      for (script, _), proc in zip(jobs[start:start + parallel], procs):
        _, err = proc.communicate(timeout=300)
        _check_ok(subprocess.CompletedProcess(proc.args, proc.returncode, "", err), script)
    return self

  def start(self, script, args):
    """Starts a run of `script` in a session of its own, stdout on /dev/null and stderr a text
    pipe: forked from the script host, or (a script the host does not hold) a new `python
    script ...` subprocess. Popen-like: pid, stderr, poll(), wait(), communicate()."""
    if self.host and script in self.host.scripts:
      return self.host.start(script, args)
    return subprocess.Popen(command(script, *args), cwd=REPO_ROOT, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True)

  def run(self, script, *args, timeout=300):
    """Runs a script to the end (see start); CompletedProcess with its stderr."""
    proc = self.start(script, [str(a) for a in args])
    _, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", err)

  def clf_args(self, out, *extra, data=None, vocab=None, config=None):
    return ["--task_name=tsv", "--data_dir=%s" % (data or self.clf_data),
            "--vocab_file=%s" % (vocab or self.vocab),
            "--bert_config_file=%s" % (config or self.config), "--output_dir=%s" % out,
            "--max_seq_length=16", "--train_batch_size=4", "--eval_batch_size=4",
            "--predict_batch_size=4", "--learning_rate=1e-3", "--num_train_epochs=1",
            "--save_checkpoints_steps=2", "--keep_checkpoint_max=10",
            "--log_every_n_steps=1"] + list(extra)

  def rw_args(self, out, *extra, data=None, vocab=None):
    return ["--data_dir=%s" % (data or self.rw_data), "--vocab_file=%s" % (vocab or self.vocab),
            "--bert_config_file=%s" % self.config, "--output_dir=%s" % out,
            "--max_seq_length=16", "--max_target_length=6", "--train_batch_size=4",
            "--eval_batch_size=4", "--predict_batch_size=4", "--learning_rate=1e-3",
            "--beam_size=2", "--save_checkpoints_steps=2", "--log_every_n_steps=1"] + list(extra)

  def pt_args(self, out, *extra, records=None):
    return ["--input_file=%s" % (records or self.records), "--output_dir=%s" % out,
            "--bert_config_file=%s" % self.config, "--vocab_file=%s" % self.vocab,
            "--train_batch_size=4", "--eval_batch_size=4", "--learning_rate=1e-3",
            "--num_train_steps=%d" % PT_STEPS, "--num_warmup_steps=1",
            "--save_checkpoints_steps=2", "--log_every_n_steps=1",
            "--max_eval_steps=2"] + list(extra)

  def cpd_args(self, corpus, output, *extra, vocab=None):
    return ["--input_file=%s" % corpus, "--output_file=%s" % output,
            "--vocab_file=%s" % (vocab or self.vocab), "--max_seq_length=16",
            "--max_predictions_per_seq=3", "--dupe_factor=1", "--num_workers=1"] + list(extra)

  def mount_tmpfs(self, path, size_kb, read_only=False):
    """Mounts a tmpfs of size_kb KB at `path` (root only); unmounted by unmount_all."""
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dk" % size_kb, "tmpfs", path],
                   check=True)
    self.mounts.append(path)
    if read_only:
      subprocess.run(["mount", "-o", "remount,ro", path], check=True)
    return path

  def unmount_all(self):
    for path in reversed(self.mounts):
      subprocess.run(["umount", "-l", path], check=False)
    self.mounts = []

  def close(self):
    """Unmounts the case mounts and ends the script host."""
    self.unmount_all()
    if self.host:
      self.host.close()
      self.host = None


def _check_ok(proc, what):
  if proc.returncode != 0:
    raise RuntimeError("%s failed while building the fault fixtures:\n%s" %
                       (what, proc.stderr[-3000:]))


# ---------------------------------------------------------------------------------------------
# Cases.

Case = collections.namedtuple("Case", [
    "name",  # short id
    "script",
    "args",  # callable(world, case_dir) -> argv after the script
    "expect",  # "error", "interrupt" or "ok"
    "fragments",  # strings the error line must contain (expect "error"/"interrupt")
    "prepare",  # callable(world, case_dir) or None: set up files, mounts
    "trigger",  # Trigger or None
    "check",  # callable(world, case_dir, stderr) -> None or (class, why): state afterwards
    "needs_root",
    "timeout",
])
Trigger = collections.namedtuple("Trigger", [
    "pattern",  # regex on stderr lines, or "glob:<pattern under case_dir>" for a file appearing
    "action",  # a signal number, or callable(world, case_dir, pid)
])
Result = collections.namedtuple("Result", ["outcome", "returncode", "error_line", "why",
                                           "seconds", "stderr"])


def case(name, script, args, expect="error", fragments=(), prepare=None, trigger=None,
         check=None, needs_root=False, timeout=120):
  return Case(name, script, args, expect, tuple(fragments), prepare, trigger, check,
              needs_root, timeout)


def copy_of(attr):
  """prepare: copies one of the world's trained output_dirs to case_dir/out."""

  def prepare(world, d):
    shutil.copytree(getattr(world, attr), os.path.join(d, "out"))

  return prepare


def data_dir_with(source_attr, **files):
  """prepare: case_dir/data = a copy of the world's data dir with `files` (name -> text/bytes)."""

  def prepare(world, d):
    shutil.copytree(getattr(world, source_attr), os.path.join(d, "data"))
    for name, content in files.items():
      path = os.path.join(d, "data", name.replace("__", "."))
      with open(path, "wb") as f:
        f.write(content if isinstance(content, bytes) else content.encode("utf-8"))

  return prepare


def both(*prepares):
  def prepare(world, d):
    for p in prepares:
      p(world, d)
  return prepare


def out(d):
  return os.path.join(d, "out")


def data(d):
  return os.path.join(d, "data")


def snapshot(directory):
  """{name: bytes} of the regular files of a directory (for 'left intact' checks)."""
  result = {}
  for name in sorted(os.listdir(directory)):
    path = os.path.join(directory, name)
    if os.path.isfile(path):
      with open(path, "rb") as f:
        result[name] = f.read()
  return result


def leftovers(directory):
  """Temporary files a failed run must not leave behind."""
  names = []
  for pattern in ("*.tmp*", "*tempstate*", "*_temp*", ".write-test-*"):
    names += [os.path.basename(p) for p in glob.glob(os.path.join(directory, pattern))]
  return sorted(names)


def checkpoint_steps(directory):
  return sorted(int(m.group(1)) for m in (re.match(r"model\.ckpt-(\d+)\.index$", n)
                                          for n in os.listdir(directory)) if m)


def still_predicts(script_args_attr, lines, script="run_classifier_mgpu.py"):
  """check: the copied output_dir still predicts `lines` rows (its good state is usable)."""

  def check(world, d, stderr):
    problem = no_leftovers(world, d, stderr)
    if problem:
      return problem
    proc = world.run(script, *getattr(world, script_args_attr)(out(d), "--do_predict"))
    if proc.returncode != 0:
      return "damaged", "the old model no longer predicts: %s" % _last_line(proc.stderr)
    with open(os.path.join(out(d), "predict.txt"), encoding="utf-8") as f:
      got = len(f.read().splitlines())
    if got != lines:
      return "damaged", "predict.txt has %d lines, expected %d" % (got, lines)
    return None

  return check


def no_leftovers(world, d, stderr):
  """check: no temporary file is left in case_dir/out (if it exists)."""
  del world, stderr
  if os.path.isdir(out(d)) and leftovers(out(d)):
    return "damaged", "left temporary files %s" % leftovers(out(d))
  return None


def nothing_written(world, d, stderr):
  """check: a fresh output_dir holds no checkpoint and no feature cache (failed early)."""
  del world, stderr
  if not os.path.isdir(out(d)):
    return None
  written = [n for n in os.listdir(out(d)) if n.startswith("model.ckpt") or ".tf_record" in n]
  if written:
    return "unclear", "failed late: it wrote %s before the error" % written
  return None


def _last_line(text):
  lines = [l for l in text.strip().splitlines() if l.strip()]
  return lines[-1] if lines else ""


# ---------------------------------------------------------------------------------------------
# Running a case.


def run_case(world, c, case_dir):
  """Runs Case `c` in case_dir (created); returns a Result."""
  if c.needs_root and os.geteuid() != 0:
    return Result("skipped", None, None, "needs root for mounts", 0.0, "")
  os.makedirs(case_dir, exist_ok=True)
  if c.prepare:
    c.prepare(world, case_dir)
  start = time.time()
  # Signals, kill -9 and full or read-only disks hit a forked run as they would a fresh process
  # (the module docstring says why).
  proc = world.start(c.script, c.args(world, case_dir))
  lines = []
  fired = threading.Event()

  def fire():
    if fired.is_set():
      return
    fired.set()
    action = c.trigger.action
    if callable(action):
      action(world, case_dir, proc.pid)
    else:
      os.kill(proc.pid, action)

  def read_stderr():
    for line in proc.stderr:
      lines.append(line)
      if c.trigger and not c.trigger.pattern.startswith("glob:") and re.search(
          c.trigger.pattern, line):
        fire()

  reader = threading.Thread(target=read_stderr, daemon=True)
  reader.start()
  hung = False
  while proc.poll() is None:
    if time.time() - start > c.timeout:
      hung = True
      os.killpg(proc.pid, signal.SIGKILL)  # The case's own session: its workers too.
      break
    if c.trigger and c.trigger.pattern.startswith("glob:") and glob.glob(
        os.path.join(case_dir, c.trigger.pattern[5:])):
      fire()
    time.sleep(0.002 if c.trigger else 0.05)
  proc.wait()
  reader.join(10)
  stderr = "".join(lines)
  seconds = time.time() - start
  outcome, why = _classify(c, proc.returncode, stderr, hung, fired.is_set())
  error_line = _last_line(stderr) if _last_line(stderr).startswith("error: ") else None
  if outcome in ("clear error", "handled") and c.check:
    problem = c.check(world, case_dir, stderr)
    if problem:
      outcome, why = problem
  return Result(outcome, proc.returncode, error_line, why, seconds, stderr)


def _classify(c, returncode, stderr, hung, fired):
  """(outcome, why) from the exit of the case's process."""
  if hung:
    return "hang", "no exit within %d s" % c.timeout
  if "Traceback (most recent call last)" in stderr:
    return "traceback", _last_line(stderr)
  if c.trigger and not fired:
    return "unclear", "the run ended before the trigger %r" % (c.trigger.pattern,)
  error_lines = [l for l in stderr.splitlines() if l.startswith("error: ")]
  if c.expect == "ok":
    if returncode == 0 or (c.trigger and c.trigger.action == signal.SIGKILL and
                           returncode == -signal.SIGKILL):
      return "handled", None
    return "unclear", "exit %s: %s" % (returncode, _last_line(stderr))
  if returncode == 0:
    return "silent", "exit 0 where an error was due"
  want = 2
  if c.expect == "interrupt":
    want = 128 + (c.trigger.action if isinstance(c.trigger.action, int) else signal.SIGINT)
  if returncode != want:
    return "unclear", "exit %s (expected %d): %s" % (returncode, want, _last_line(stderr))
  if len(error_lines) != 1 or _last_line(stderr) != error_lines[0]:
    return "unclear", "%d error lines, last line %r" % (len(error_lines), _last_line(stderr))
  missing = [f for f in c.fragments if f not in error_lines[0]]
  if missing:
    return "unclear", "the error line lacks %s: %s" % (missing, error_lines[0])
  return "clear error", None


def run_cases(world, cases, root, parallel=2, on_result=None):
  """Runs `cases` (each in root/<name>), `parallel` at a time; returns {name: Result}."""
  from concurrent import futures  # pylint: disable=g-import-not-at-top
  results = {}
  with futures.ThreadPoolExecutor(parallel) as pool:
    jobs = {pool.submit(run_case, world, c, os.path.join(root, c.name)): c for c in cases}
    for job in futures.as_completed(jobs):
      c = jobs[job]
      results[c.name] = job.result()
      if on_result:
        on_result(c, results[c.name])
  return results


# ---------------------------------------------------------------------------------------------
# The table.

CLF, RW, PT, CPD = ("run_classifier_mgpu.py", "run_rewrite_finetune.py", "run_pretraining_mgpu.py",
                    "create_pretraining_data.py")
TO_HF, FROM_HF = "convert_to_hf.py", "convert_hf_checkpoint.py"
# The scripts whose runs the script host forks (create_pretraining_data.py imports no
# TensorFlow: it starts in 0.2 s, and its cases run as it does, without TensorFlow loaded).
HOSTED_SCRIPTS = (CLF, RW, PT, TO_HF, FROM_HF)
BIG = 20000  # rows of the data sets that keep a stage busy long enough to be interrupted


def _config_file(d, **changes):
  return _write(os.path.join(d, "config.json"), json.dumps(dict(CONFIG, **changes)))


def _raw_config(text):
  def prepare(world, d):
    del world
    _write(os.path.join(d, "config.json"), text)
  return prepare


def _vocab_file(d, replace=None, swap=False, drop=None):
  vocab = list(VOCAB)
  if replace:
    vocab[vocab.index(replace[0])] = replace[1]
  if swap:
    vocab[-1], vocab[-2] = vocab[-2], vocab[-1]
  if drop:
    vocab.remove(drop)
  return _write(os.path.join(d, "vocab.txt"), "\n".join(vocab) + "\n")


def _clf(*extra, data_dir=None, **kw):
  """args: the classifier on case_dir/out (data_dir: "case" = case_dir/data)."""
  def args(world, d):
    return world.clf_args(out(d), *extra, data=data(d) if data_dir == "case" else data_dir,
                          **{k: v(d) if callable(v) else v for k, v in kw.items()})
  return args


def _rw(*extra, data_dir=None, **kw):
  def args(world, d):
    return world.rw_args(out(d), *extra, data=data(d) if data_dir == "case" else data_dir,
                         **{k: v(d) if callable(v) else v for k, v in kw.items()})
  return args


def _pt(*extra, records=None):
  def args(world, d):
    return world.pt_args(out(d), *extra, records=records(d) if callable(records) else records)
  return args


def _cpd(*extra, corpus=None, output=None, vocab=None, long_corpus=False):
  def args(world, d):
    return world.cpd_args(corpus(d) if corpus else (world.long_corpus if long_corpus else
                                                    world.corpus),
                          output(d) if output else os.path.join(d, "out.tfrecord"), *extra,
                          vocab=vocab(d) if vocab else None)
  return args


def _free_disk(world, d, stderr):
  """check step: removes the filler of _fill_disk (the user frees space)."""
  del world, stderr
  os.remove(os.path.join(out(d), "filler"))


def _ctrl_c(world, d, pid):
  """Trigger action: SIGINT to the whole process group, as a terminal's Ctrl-C sends it."""
  del world, d
  os.killpg(os.getpgid(pid), signal.SIGINT)


def _fill_disk(world, d, pid):
  """Trigger action: fills the tmpfs at case_dir/out to the last byte."""
  del world, pid
  _fill_leaving(out(d))


def _resumes(rerun_args, script=CLF, expect_files=(), max_lost=None):
  """check: after the fault, rerunning resumes from the latest intact checkpoint and succeeds.

  With max_lost, the rerun must resume from the last checkpoint the faulted run saved, and lose
  at most max_lost steps (the steps it ran past that checkpoint); the figures go into the
  result's `why`.
  """

  def check(world, d, stderr):
    left_before = leftovers(out(d))
    proc = world.run(script, *rerun_args(world, d))
    if proc.returncode != 0:
      return "damaged", "the rerun failed: %s" % _last_line(proc.stderr)
    if leftovers(out(d)):
      return "damaged", "the rerun left %s" % leftovers(out(d))
    for name in expect_files:
      if not os.path.exists(os.path.join(out(d), name)):
        return "damaged", "the rerun did not write %s" % name
    if max_lost is None:
      return ("handled", "the rerun removed %s and succeeded" % left_before) if left_before \
          else None
    reached = max([int(s) for s in re.findall(r"step (\d+)/", stderr)] or [0])
    saved = [int(s) for s in re.findall(r"Saved .*model\.ckpt-(\d+)$", stderr, re.M)]
    resumed = re.findall(r"Resuming from .*model\.ckpt-(\d+)", proc.stderr)
    resumed = int(resumed[0]) if resumed else 0
    figures = ("killed after step %d was logged; last completed save step %s; the rerun resumed "
               "from step %d: %d step(s) lost" % (reached, saved[-1] if saved else "none",
                                                  resumed, reached - resumed))
    # A save may complete after its "Saved" line was the last one logged before SIGKILL, so the
    # rerun may resume from a later step than the log shows, never from beyond the step reached.
    last_logged = saved[-1] if saved else 0
    if not last_logged <= resumed <= reached or reached - resumed > max_lost:
      return "damaged", figures
    return "handled", figures

  return check


def _stderr_has(*fragments):
  def check(world, d, stderr):
    del world, d
    missing = [f for f in fragments if not re.search(f, stderr)]
    return ("silent", "the log lacks %s" % missing) if missing else None
  return check


def _recorded_flags(**changes):
  """prepare: the copied out/run_info.json records other flags of the training run."""
  def prepare(world, d):
    del world
    path = os.path.join(out(d), "run_info.json")
    with open(path, encoding="utf-8") as f:
      info = json.load(f)
    info["flags"].update(changes)
    _write(path, json.dumps(info))
  return prepare


def _logged_once(pattern):
  """check: exactly one line of the log matches `pattern`."""
  def check(world, d, stderr):
    del world, d
    lines = [l for l in stderr.splitlines() if re.search(pattern, l)]
    return None if len(lines) == 1 else ("unclear", "%d lines match %r: %s" % (
        len(lines), pattern, lines[:3]))
  return check


def _all(*checks):
  def check(world, d, stderr):
    for c in checks:
      problem = c(world, d, stderr)
      if problem:
        return problem
    return None
  return check


def _truncate(name, keep=0.5):
  def prepare(world, d):
    path = os.path.join(out(d), name)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
      f.truncate(int(size * keep))
  return prepare


def _flip_byte(name):
  def prepare(world, d):
    path = os.path.join(out(d), name)
    with open(path, "r+b") as f:
      f.seek(os.path.getsize(path) // 2)
      byte = f.read(1)
      f.seek(-1, 1)
      f.write(bytes([byte[0] ^ 0xFF]))
  return prepare


def _labels_intact(world, d, stderr):
  with open(os.path.join(out(d), "labels.txt"), encoding="utf-8") as f:
    if f.read() != "neg\npos\n":
      return "damaged", "labels.txt was overwritten"
  return still_predicts("clf_args", 5)(world, d, stderr)


def _two_caches(world, d, stderr):
  del world, stderr
  caches = [n for n in os.listdir(out(d)) if n.startswith("train-")]
  return None if len(caches) == 2 else ("silent", "the column swap reused a cache: %s" % caches)


def _first_run(script_args):
  """prepare: runs a command once before the case (e.g. a good run with other columns)."""
  def prepare(world, d):
    _check_ok(world.run(CLF, *script_args(world, d)), "the case's first run")
  return prepare


def _latest_finite_step(step):
  def check(world, d, stderr):
    del world, stderr
    steps = checkpoint_steps(out(d))
    return None if steps and steps[-1] == step else ("damaged", "checkpoints now %s" % steps)
  return check


def _interrupt_saved(world, d, stderr):
  """check: the checkpoint named in the interrupt line exists and is named by its global_step."""
  del world
  match = re.search(r"stopped at step (\d+).*latest checkpoint is (\S+) \(step (\d+)\)", stderr)
  if not match:
    return "unclear", "the interrupt line names no checkpoint"
  path, step = match.group(2), int(match.group(3))
  if int(match.group(1)) != step or not os.path.exists(path + ".index"):
    return "damaged", "saved %s for step %s" % (path, match.group(1))
  if not path.endswith("-%d" % step):
    return "damaged", "checkpoint name %s is not its step %d" % (path, step)
  return no_leftovers(None, d, stderr)


def _no_output(name):
  def check(world, d, stderr):
    del world, stderr
    left = [n for n in os.listdir(d) if n.startswith(name)]
    return ("damaged", "left %s" % left) if left else None
  return check


def _mount_out(size_kb, read_only=False):
  def prepare(world, d):
    world.mount_tmpfs(out(d), size_kb, read_only=read_only)
  return prepare


def all_cases():
  """Every case of the fault table."""
  bad_utf8 = clf_rows(6).encode("utf-8") + b"\xe4\xbd\tpos\n" + clf_rows(3).encode("utf-8")
  long_test = "qid\ttext_a\n0\t" + "好" * 350000 + "\n1\t差\n"
  big_train = clf_rows(BIG)
  cases = [
      # --- classifier: flags
      case("clf_no_mode", CLF, _clf(), fragments=["--do_train"]),
      case("clf_no_output_dir", CLF, lambda w, d: [a for a in w.clf_args(out(d), "--do_train")
                                                  if not a.startswith("--output_dir")],
           fragments=["--output_dir"]),
      case("clf_neg_learning_rate", CLF, _clf("--do_train", "--learning_rate=-1e-3"),
           fragments=["--learning_rate=-0.001", "> 0"], check=nothing_written),
      case("clf_zero_epochs", CLF, _clf("--do_train", "--num_train_epochs=0"),
           fragments=["--num_train_epochs"]),
      case("clf_warmup_above_1", CLF, _clf("--do_train", "--warmup_proportion=1.5"),
           fragments=["--warmup_proportion"]),
      case("clf_zero_towers", CLF, _clf("--do_train", "--n_gpus=0"), fragments=["--n_gpus"]),
      case("clf_1f1b_fewer_micro_batches_than_stages", CLF,
           _clf("--do_train", "--n_gpus=2", "--pipeline_stages=2", "--pipeline_schedule=1f1b",
                "--num_micro_batches=1"),
           fragments=["--num_micro_batches=1 < --pipeline_stages=2"], check=nothing_written),
      case("clf_unknown_pipeline_schedule", CLF,
           _clf("--do_train", "--pipeline_schedule=zigzag"),
           fragments=["--pipeline_schedule", "zigzag"], check=nothing_written),
      case("clf_zero_batch", CLF, _clf("--do_train", "--train_batch_size=0"),
           fragments=["--train_batch_size"]),
      case("clf_seq_above_positions", CLF, _clf("--do_train", "--max_seq_length=64"),
           fragments=["--max_seq_length=64", "max_position_embeddings"]),
      case("clf_fp16_and_bf16", CLF, _clf("--do_train", "--use_fp16", "--use_bf16"),
           fragments=["--use_fp16"]),
      case("clf_malformed_float", CLF, _clf("--do_train", "--learning_rate=abc"),
           fragments=["--learning_rate=abc", "float"], check=nothing_written),
      case("clf_unknown_best_metric", CLF, _clf("--do_train", "--eval_every_n_steps=2",
                                                "--best_metric=accuracy"),
           fragments=["--best_metric=accuracy", "eval_accuracy"], check=nothing_written),
      case("clf_misspelt_flag", CLF, _clf("--do_trian"), fragments=["do_trian", "do_train"]),
      case("clf_bad_task", CLF, lambda w, d: w.clf_args(out(d), "--do_train") +
           ["--task_name=nope"], fragments=["--task_name=nope"]),
      # --- classifier: output_dir and the machine
      case("clf_output_dir_is_file", CLF, _clf("--do_train"),
           prepare=lambda w, d: _write(out(d), "x"), fragments=["--output_dir", "is a file"]),
      case("clf_output_dir_readonly_fs", CLF, _clf("--do_train"),
           prepare=_mount_out(64, read_only=True), needs_root=True,
           fragments=["--output_dir", "Read-only file system"]),
      case("clf_output_dir_readonly_parent", CLF,
           lambda w, d: w.clf_args(os.path.join(out(d), "sub"), "--do_train"),
           prepare=_mount_out(64, read_only=True), needs_root=True,
           fragments=["sub", "Read-only file system"]),
      case("clf_disk_full_features", CLF, _clf("--do_train", data_dir="case"),
           prepare=both(data_dir_with("clf_data", train__tsv=big_train), _mount_out(256)),
           needs_root=True, fragments=["No space left on device", "train-"],
           check=no_leftovers),
      case("clf_disk_full_checkpoint", CLF, _clf("--do_train", "--num_train_epochs=100"),
           prepare=_mount_out(16384), needs_root=True,
           trigger=Trigger(r"Saved .*model\.ckpt-2$", _fill_disk),
           # The next write after the fill is a checkpoint's or (on a busy machine) the event
           # file's flush: either names its file and the flag.
           fragments=["No space left on device", "choose another --output_dir"],
           check=_all(no_leftovers, _latest_finite_step_at_least(2), _free_disk,
                      _resumes(_clf("--do_train", "--num_train_epochs=2")))),
      # --- classifier: data
      case("clf_no_data_dir", CLF, _clf("--do_train", data_dir="/nonexistent"),
           fragments=["--data_dir=/nonexistent"]),
      case("clf_missing_train", CLF, _clf("--do_train", data_dir="case"),
           prepare=lambda w, d: os.makedirs(data(d)), fragments=["train.tsv", "no such file"]),
      case("clf_empty_train", CLF, _clf("--do_train", data_dir="case"),
           prepare=data_dir_with("clf_data", train__tsv=""), fragments=["train.tsv", "empty"]),
      case("clf_header_only_train", CLF, _clf("--do_train", data_dir="case"),
           prepare=data_dir_with("clf_data", train__tsv="text\tlabel\n"),
           fragments=["train.tsv", "no examples"]),
      case("clf_bad_utf8_line7", CLF, _clf("--do_train", data_dir="case"),
           prepare=data_dir_with("clf_data", train__tsv=bad_utf8),
           fragments=["train.tsv:7", "utf-8"]),
      case("clf_one_column_line5", CLF, _clf("--do_train", data_dir="case"),
           prepare=data_dir_with("clf_data", train__tsv=clf_rows(4) + "只有文本\n" +
                                 clf_rows(3)), fragments=["train.tsv:5"]),
      case("clf_unknown_dev_label", CLF, _clf("--do_train", "--do_eval", data_dir="case"),
           prepare=data_dir_with("clf_data", dev__tsv=clf_rows(3) + "好\tneutral\n"),
           fragments=["dev.tsv", "line 4", "neutral"], check=nothing_written),
      case("clf_empty_test_before_training", CLF, _clf("--do_train", "--do_predict",
                                                       data_dir="case"),
           prepare=data_dir_with("clf_data", test__tsv=""), fragments=["test.tsv", "empty"],
           check=nothing_written),
      case("clf_missing_test_before_training", CLF, _clf("--do_train", "--do_predict",
                                                         data_dir="case"),
           prepare=lambda w, d: (data_dir_with("clf_data")(w, d),
                                 os.remove(os.path.join(data(d), "test.tsv"))),
           fragments=["test.tsv", "no such file"], check=nothing_written),
      case("clf_1mb_test_line", CLF, _clf("--do_predict", data_dir="case"),
           prepare=both(copy_of("clf_out"), data_dir_with("clf_data", test__tsv=long_test)),
           expect="ok", check=_line_count("predict.txt", 2)),
      case("clf_predict_without_model", CLF, _clf("--do_predict"),
           fragments=["labels.txt", "--do_train"]),
      # --- classifier: config, vocabulary, checkpoints
      case("clf_config_hidden_size_string", CLF, _clf("--do_train", config=_config_path),
           prepare=_raw_config(json.dumps(dict(CONFIG, hidden_size="16"))),
           fragments=["config.json", "hidden_size", "integer"], check=nothing_written),
      case("clf_config_layers_float", CLF, _clf("--do_train", config=_config_path),
           prepare=_raw_config(json.dumps(dict(CONFIG, num_hidden_layers=2.5))),
           fragments=["num_hidden_layers", "2.5"]),
      case("clf_config_heads_not_dividing", CLF, _clf("--do_train", config=_config_path),
           prepare=_raw_config(json.dumps(dict(CONFIG, num_attention_heads=3))),
           fragments=["num_attention_heads=3"]),
      case("clf_config_not_json", CLF, _clf("--do_train", config=_config_path),
           prepare=_raw_config("{vocab_size: 40"), fragments=["config.json", "JSON"]),
      case("clf_config_missing_key", CLF, _clf("--do_train", config=_config_path),
           prepare=_raw_config(json.dumps({"vocab_size": 40})), fragments=["hidden_size"]),
      case("clf_config_bad_activation", CLF, _clf("--do_train", config=_config_path),
           prepare=_raw_config(json.dumps(dict(CONFIG, hidden_act="swishy"))),
           fragments=["hidden_act", "swishy"]),
      case("clf_config_negative_dropout", CLF, _clf("--do_train", config=_config_path),
           prepare=_raw_config(json.dumps(dict(CONFIG, hidden_dropout_prob=-0.1))),
           fragments=["hidden_dropout_prob"]),
      case("clf_missing_config", CLF, _clf("--do_train", config="/nonexistent.json"),
           fragments=["/nonexistent.json"]),
      case("clf_missing_vocab", CLF, _clf("--do_train", vocab="/nonexistent.txt"),
           fragments=["/nonexistent.txt"]),
      case("clf_vocab_cls_renamed", CLF, _clf("--do_train", vocab=_vocab_path),
           prepare=lambda w, d: _vocab_file(d, replace=("[CLS]", "[CLX]")),
           fragments=["[CLS]", "vocab.txt"], check=nothing_written),
      case("clf_vocab_size_mismatch", CLF, _clf("--do_train", vocab=_vocab_path),
           prepare=lambda w, d: _vocab_file(d, drop="丑"), fragments=["vocab_size"]),
      case("clf_missing_init_checkpoint", CLF, _clf("--do_train", "--init_checkpoint=/no/ckpt"),
           fragments=["--init_checkpoint=/no/ckpt"]),
      case("clf_init_checkpoint_other_shape", CLF,
           lambda w, d: w.clf_args(out(d), "--do_train", config=_config_path(d)) +
           ["--init_checkpoint=%s" % os.path.join(w.clf_out, "model.ckpt-%d" % CLF_STEPS)],
           prepare=lambda w, d: _config_file(d, intermediate_size=48),
           fragments=["--init_checkpoint", "intermediate"], check=nothing_written),
      case("clf_pairs_with_one_segment_type", CLF,
           lambda w, d: w.clf_args(out(d), "--do_train", config=_config_path(d),
                                   data=data(d)) + ["--text_b_column=1", "--label_column=2"],
           prepare=both(lambda w, d: _config_file(d, type_vocab_size=1), data_dir_with(
               "clf_data", train__tsv="".join("%s\t%s" % (r.split("\t")[0], r)
                                              for r in clf_rows(32).splitlines(True)))),
           fragments=["type_vocab_size=1", "pairs"], check=nothing_written),
      case("clf_label_column_out_of_range", CLF, _clf("--do_train", "--label_column=7"),
           fragments=["--label_column=7", "train.tsv has 2 column(s)"], check=nothing_written),
      case("clf_text_b_column_alone", CLF,
           lambda w, d: w.clf_args(out(d), "--do_train", data=data(d)) + [
               "--text_b_column=1", "--label_column=2"],
           prepare=data_dir_with("clf_data", train__tsv="".join(
               "%s\t%s" % (r.split("\t")[0], r) for r in clf_rows(32).splitlines(True))),
           expect="ok"),
      case("clf_one_class_in_train", CLF, _clf("--do_train", data_dir="case"),
           prepare=data_dir_with("clf_data", train__tsv=clf_rows(32).replace("\tneg", "\tpos")),
           fragments=["train.tsv", "every example has the label pos", "two classes"],
           check=nothing_written),
      case("clf_predict_output_in_missing_folder", CLF, lambda w, d: w.clf_args(
          out(d), "--do_predict", "--predict_output=%s" % os.path.join(d, "new", "p.txt")),
           prepare=copy_of("clf_out"), expect="ok",
           check=_file_lines(lambda d: os.path.join(d, "new", "p.txt"), 5)),
      case("clf_stray_tab_in_one_train_row", CLF, _clf("--do_train", data_dir="case"),
           prepare=data_dir_with("clf_data", train__tsv=clf_rows(32).replace(
               "\tneg\n", "\t多\tneg\n", 1)),
           fragments=["train.tsv:2: 3 tab-separated", "line 1 has 2", "a tab inside a text"],
           check=nothing_written),
      case("clf_test_column_that_is_no_label", CLF,
           _clf("--do_train", "--do_predict", data_dir="case"),
           prepare=data_dir_with("clf_data", test__tsv=clf_rows(5).replace(
               "\tpos", "\t五星").replace("\tneg", "\t一星")),
           fragments=["test.tsv hold(s) text pairs", "train.tsv single texts"],
           check=nothing_written),
      case("clf_utf16_train", CLF, _clf("--do_train", data_dir="case"),
           prepare=data_dir_with("clf_data", train__tsv=clf_rows(32).encode("utf-16")),
           fragments=["train.tsv:1", "looks UTF-16", "iconv -f utf-16"], check=nothing_written),
      case("clf_predict_file_with_the_output_dir_alone", CLF,
           lambda w, d: ["--task_name=tsv", "--output_dir=%s" % out(d),
                         "--predict_file=%s" % _write(os.path.join(d, "t.txt"), "酒店好\n差\n"),
                         "--predict_format=text",
                         "--predict_output=%s" % os.path.join(d, "p.txt")],
           prepare=copy_of("clf_out"), expect="ok"),
      case("clf_predict_pairs_with_a_single_text_model", CLF,
           lambda w, d: ["--task_name=tsv", "--output_dir=%s" % out(d),
                         "--predict_file=%s" % _write(os.path.join(d, "t.tsv"),
                                                      "text_a\ttext_b\n好\t差\n"),
                         "--predict_output=%s" % os.path.join(d, "p.txt")],
           prepare=copy_of("clf_out"), fragments=["different input layout", "single texts"]),
      case("clf_class_weights_for_three_labels", CLF, _clf("--do_train", "--class_weights=1,2,3"),
           fragments=["--class_weights: 3 weight(s) given for 2 labels"], check=nothing_written),
      case("clf_class_weights_negative", CLF, _clf("--do_train", "--class_weights=1,-1"),
           fragments=["--class_weights=1,-1", ">= 0"], check=nothing_written),
      case("clf_doc_stride_without_sliding", CLF, _clf("--do_train", "--doc_stride=4"),
           fragments=["--doc_stride=4 needs --long_text=sliding"], check=nothing_written),
      case("clf_doc_stride_beyond_a_window", CLF,
           _clf("--do_train", "--long_text=sliding", "--doc_stride=500"),
           fragments=["--doc_stride=500"], check=nothing_written),
      case("clf_layerwise_decay_above_1", CLF, _clf("--do_train", "--layerwise_lr_decay=1.5"),
           fragments=["--layerwise_lr_decay=1.5"], check=nothing_written),
      case("clf_export_after_a_killed_export", CLF, _clf("--do_export"),
           prepare=both(copy_of("clf_out"), _killed_export), expect="ok",
           check=_export_recovered),
      case("clf_kill9_exporting", CLF, _clf("--do_export"), prepare=copy_of("clf_out"),
           expect="ok", trigger=Trigger("glob:out/saved_model.tmp-*", signal.SIGKILL),
           check=_builder_died_with_the_run),
      # Checks of flags that run_info.json supplies run after it is adopted.
      case("clf_export_tflite_of_a_sliding_run", CLF,
           lambda w, d: ["--output_dir=%s" % out(d), "--do_export", "--export_tflite"],
           prepare=both(copy_of("clf_out"), _recorded_flags(long_text="sliding")),
           fragments=["--export_tflite: needs --long_text=truncate (got sliding"],
           check=lambda w, d, e: ("damaged", "exported") if os.path.exists(
               os.path.join(out(d), "saved_model")) else None),
      case("clf_head_tail_below_its_length", CLF, _clf("--do_train", "--truncation=head_tail"),
           fragments=["--truncation=head_tail: needs --max_seq_length >= 131 (got 16)"],
           check=nothing_written),
      # A pair needs 2 tokens more (a second [SEP], a token of the other text): at 131-132
      # every text of a pair was cut as head while the log said head_tail.
      case("clf_head_tail_pairs_below_their_length", CLF,
           lambda w, d: w.clf_args(out(d), "--do_train", "--truncation=head_tail",
                                   "--max_seq_length=132", config=_config_path(d),
                                   data=data(d)) + ["--text_b_column=1", "--label_column=2"],
           prepare=both(lambda w, d: _config_file(d, max_position_embeddings=132),
                        data_dir_with("clf_data", train__tsv="".join(
                            "%s\t%s" % (r.split("\t")[0], r)
                            for r in clf_rows(32).splitlines(True)))),
           fragments=["--truncation=head_tail: needs --max_seq_length >= 133 for text pairs "
                      "(got 132)"], check=nothing_written),
      case("clf_rerun_other_labels", CLF, _clf("--do_train", data_dir="case"),
           prepare=both(copy_of("clf_out"), data_dir_with(
               "clf_data", train__tsv=clf_rows(32).replace("\tneg", "\tbad"))),
           fragments=["label set", "neg"], check=_labels_intact),
      case("clf_rerun_other_vocab", CLF, _clf("--do_eval", vocab=_vocab_path),
           prepare=both(copy_of("clf_out"), lambda w, d: _vocab_file(d, swap=True)),
           fragments=["vocabulary", "run_info.json"], check=still_predicts("clf_args", 5)),
      case("clf_rerun_other_config", CLF, _clf("--do_train", config=_config_path),
           prepare=both(copy_of("clf_out"), lambda w, d: _config_file(d, intermediate_size=48)),
           fragments=["intermediate"], check=still_predicts("clf_args", 5)),
      case("clf_swapped_columns_new_cache", CLF,
           _clf("--do_train", "--text_a_column=1", "--text_b_column=0", "--label_column=2",
                data_dir="case"),
           prepare=both(data_dir_with("clf_data", train__tsv="".join(
               "%s\t%s" % (r.split("\t")[0][::-1], r) for r in clf_rows(32).splitlines(True))),
                        _first_run(_clf("--do_train", "--text_a_column=0", "--text_b_column=1",
                                        "--label_column=2", data_dir="case"))),
           expect="ok", check=_two_caches),
      case("clf_nan_keeps_last_finite", CLF, _clf("--do_train", "--learning_rate=1e30",
                                                   "--num_train_epochs=3"),
           prepare=copy_of("clf_out"), fragments=["nan", "model.ckpt-8", "--learning_rate"],
           check=_all(_latest_finite_step(CLF_STEPS), _resumes(
               _clf("--do_train", "--do_predict", "--num_train_epochs=2"),
               expect_files=["model.ckpt-16.index"]))),
      # A fast divergence from the first updates: every checkpoint holds ruined weights, so
      # they are set aside and the advised rerun (a sane learning rate) starts afresh.
      case("clf_diverges_fast_rerun_starts_afresh", CLF,
           _clf("--do_train", "--learning_rate=1e6", "--num_train_epochs=2"),
           fragments=["left its normal range at step 3", "diverged-step-", "starts again"],
           check=_all(_stderr_has(r"step 3: the loss .* left its normal range"), _resumes(
               _clf("--do_train", "--num_train_epochs=1"), expect_files=["model.ckpt-8.index"]))),
      # A stride the user never passed (the training run's) that does not fit the window of
      # another --max_seq_length gives way to the default instead of an error about it.
      case("clf_eval_at_another_length_after_sliding_training", CLF, lambda w, d: [
          "--output_dir=%s" % out(d), "--data_dir=%s" % w.clf_data, "--do_eval",
          "--max_seq_length=8"], prepare=both(copy_of("clf_out"), _recorded_flags(
              long_text="sliding", doc_stride=12, task_name="tsv")), expect="ok",
           check=_stderr_has(r"--doc_stride=12 does not fit a window of 6 tokens")),
      # TensorFlow's lines print once, in absl's format (not also as INFO:tensorflow:...).
      case("clf_train_then_eval_logs_each_restore_once", CLF,
           _clf("--do_train", "--do_eval", "--num_train_epochs=2"), prepare=copy_of("clf_out"),
           expect="ok", check=_logged_once(r"Restoring parameters from \S*model\.ckpt-16\b")),
      case("clf_truncated_latest_checkpoint", CLF, _clf("--do_predict"),
           prepare=both(copy_of("clf_out"),
                        _truncate("model.ckpt-8.data-00000-of-00001")), expect="ok",
           check=_stderr_has(r"model\.ckpt-8 is broken", r"Restoring parameters from .*ckpt-6")),
      case("clf_corrupt_latest_checkpoint_resume", CLF, _clf("--do_train",
                                                             "--num_train_epochs=2"),
           prepare=both(copy_of("clf_out"), _flip_byte("model.ckpt-8.data-00000-of-00001")),
           expect="ok", check=_stderr_has(r"model\.ckpt-8 is broken",
                                          r"Resuming from .*model\.ckpt-6")),
      case("clf_damaged_state_file", CLF, _clf("--do_eval"),
           prepare=both(copy_of("clf_out"), lambda w, d: _write(
               os.path.join(out(d), "checkpoint"), "garbage {{{")), expect="ok",
           check=_stderr_has(r"Restoring parameters from .*ckpt-8")),
      case("clf_stale_temporaries_removed", CLF, _clf("--do_train", "--num_train_epochs=2"),
           prepare=both(copy_of("clf_out"), lambda w, d: [
               _write(os.path.join(out(d), n), "partial") for n in (
                   "model.ckpt-10.data-00000-of-00001.tempstate123",
                   "train-0123456789abcdef.tf_record.tmp-999999999")]),
           expect="ok", check=no_leftovers),
      # --- classifier: interrupts and kill -9
      case("clf_sigint_training", CLF, _clf("--do_train", "--num_train_epochs=200"),
           expect="interrupt", trigger=Trigger(r"step 5/", signal.SIGINT),
           fragments=["SIGINT", "model.ckpt-"], check=_interrupt_saved),
      case("clf_sigterm_training", CLF, _clf("--do_train", "--num_train_epochs=200"),
           expect="interrupt", trigger=Trigger(r"step 3/", signal.SIGTERM),
           fragments=["SIGTERM", "model.ckpt-"], check=_interrupt_saved),
      case("clf_sigterm_converting", CLF, _clf("--do_train", data_dir="case"),
           prepare=data_dir_with("clf_data", train__tsv=big_train), expect="interrupt",
           trigger=Trigger(r"Learned 2 labels", signal.SIGTERM), fragments=["SIGTERM"],
           check=_all(no_leftovers, nothing_written)),
      case("clf_sigint_predicting", CLF, _clf("--do_predict", data_dir="case"),
           prepare=both(copy_of("clf_out"), data_dir_with("clf_data", test__tsv="".join(
               r.split("\t")[0] + "\n" for r in big_train.splitlines()))),
           expect="interrupt", trigger=Trigger(r"Restoring parameters", signal.SIGINT),
           fragments=["SIGINT"], check=still_predicts("clf_args", 5)),
      case("clf_kill9_training", CLF, _clf("--do_train", "--num_train_epochs=200"),
           expect="ok", trigger=Trigger(r"step 7/", signal.SIGKILL),
           check=_resumes(_clf("--do_train", "--num_train_epochs=2"), max_lost=2)),
      case("clf_kill9_writing_features", CLF, _clf("--do_train", "--num_train_epochs=0.01",
                                                   data_dir="case"),
           prepare=data_dir_with("clf_data", train__tsv=big_train), expect="ok",
           trigger=Trigger("glob:out/train-*.tf_record.tmp-*", signal.SIGKILL),
           check=_resumes(_clf("--do_train", "--num_train_epochs=0.01", data_dir="case"))),
      case("clf_kill9_saving", CLF, _clf("--do_train", "--num_train_epochs=200",
                                         "--save_checkpoints_steps=1", config=_config_path),
           prepare=lambda w, d: _config_file(d, hidden_size=256, intermediate_size=1024,
                                             num_hidden_layers=2, num_attention_heads=4),
           # Any save of steps 2-9: one save's temporary file lives a few ms, and the poll of a
           # loaded machine can miss it (CI did, and the run trained on to the timeout).
           expect="ok", trigger=Trigger("glob:out/model.ckpt-[2-9].*tempstate*", signal.SIGKILL),
           check=_resumes(_clf("--do_train", "--num_train_epochs=2", config=_config_path),
                          max_lost=2)),
      # --- rewrite
      case("rw_unknown_best_metric", RW, _rw("--do_train", "--eval_every_n_steps=2",
                                             "--best_metric=eval_accuracy"),
           fragments=["--best_metric=eval_accuracy", "bleu4"], check=nothing_written),
      case("rw_keep_best_without_eval", RW, _rw("--do_train", "--keep_best"),
           fragments=["--keep_best", "--eval_every_n_steps"]),
      case("rw_empty_train", RW, _rw("--do_train", data_dir="case"),
           prepare=data_dir_with("rw_data", train__tsv=""), fragments=["train.tsv", "empty"]),
      case("rw_blank_corpus", RW, lambda w, d: w.rw_args(out(d), "--do_pretrain_rewrite",
                                                         "--corpus_file=%s" % _write(
                                                             os.path.join(d, "c.txt"),
                                                             "\n  \n\n"), "--num_train_steps=2"),
           fragments=["--corpus_file", "no text"]),
      case("rw_empty_corpus", RW, lambda w, d: w.rw_args(out(d), "--do_pretrain_rewrite",
                                                         "--corpus_file=%s" % _write(
                                                             os.path.join(d, "c.txt"), ""),
                                                         "--num_train_steps=2"),
           fragments=["--corpus_file", "no text"]),
      case("rw_corpus_no_match", RW, _rw("--do_pretrain_rewrite", "--corpus_file=/no/*.txt"),
           fragments=["/no/*.txt"]),
      case("rw_three_columns_line2", RW, _rw("--do_train", data_dir="case"),
           prepare=data_dir_with("rw_data", train__tsv=rw_rows(1) + "甲\t乙\t丙\n"),
           fragments=["train.tsv:2"]),
      case("rw_bad_utf8_dev_line3", RW, _rw("--do_train", "--do_eval", data_dir="case"),
           prepare=data_dir_with("rw_data", dev__tsv=rw_rows(2).encode("utf-8") +
                                 b"\xff\xfe\t\xe7\x94\xb2\n"),
           fragments=["dev.tsv:3", "utf-8"], check=nothing_written),
      case("rw_target_too_long", RW, _rw("--do_train", "--max_target_length=20"),
           fragments=["--max_target_length=20"]),
      case("rw_zero_beam", RW, _rw("--do_predict", "--beam_size=0"), fragments=["--beam_size"]),
      case("rw_vocab_without_mask", RW, _rw("--do_train", vocab=_vocab_path),
           prepare=lambda w, d: _vocab_file(d, replace=("[MASK]", "[MASQ]")),
           fragments=["[MASK]"]),
      case("rw_empty_test_before_training", RW, _rw("--do_train", "--do_predict",
                                                    data_dir="case"),
           prepare=data_dir_with("rw_data", test__tsv=""), fragments=["test.tsv", "empty"],
           check=nothing_written),
      case("rw_missing_rank_file", RW, _rw("--do_rank", "--rank_file=/no/rank.tsv"),
           fragments=["--rank_file=/no/rank.tsv"]),
      case("rw_pretrain_and_train", RW, _rw("--do_train", "--do_pretrain_rewrite"),
           fragments=["--do_pretrain_rewrite"]),
      case("rw_rerun_other_vocab", RW, _rw("--do_predict", vocab=_vocab_path),
           prepare=both(copy_of("rw_out"), lambda w, d: _vocab_file(d, swap=True)),
           fragments=["vocabulary"]),
      case("rw_sigint_decoding", RW, _rw("--do_predict", data_dir="case"),
           prepare=both(copy_of("rw_out"), data_dir_with("rw_data", test__tsv=rw_rows(
               3000, with_target=False))),
           expect="interrupt", trigger=Trigger(r"test: 3000 examples", signal.SIGINT),
           fragments=["SIGINT"]),
      case("rw_sigterm_training", RW, _rw("--do_train", "--num_train_steps=2000"),
           expect="interrupt", trigger=Trigger(r"step 3/", signal.SIGTERM),
           fragments=["SIGTERM", "model.ckpt-"], check=_interrupt_saved),
      # --- pretraining
      case("pt_no_input_match", PT, _pt("--do_train", records="/no/*.tfrecord"),
           fragments=["--input_file=/no/*.tfrecord"]),
      case("pt_empty_records", PT, _pt("--do_train", records=lambda d: _write(
          os.path.join(d, "empty.tfrecord"), "")), fragments=["empty.tfrecord"]),
      case("pt_truncated_records", PT, _pt("--do_train", "--num_train_steps=200",
                                           records=lambda d: os.path.join(d, "cut.tfrecord")),
           prepare=_cut_records, fragments=["cut.tfrecord", "cut short"]),
      case("pt_zero_steps", PT, _pt("--do_train", "--num_train_steps=0"),
           fragments=["--num_train_steps"]),
      case("pt_negative_warmup", PT, _pt("--do_train", "--num_warmup_steps=-5"),
           fragments=["--num_warmup_steps"]),
      case("pt_seq_flag_disagrees", PT, _pt("--do_train", "--max_seq_length=32"),
           fragments=["--max_seq_length=32"]),
      case("pt_malformed_int", PT, _pt("--do_train", "--num_train_steps=ten"),
           fragments=["--num_train_steps=ten", "int"]),
      case("pt_missing_eval_file_before_training", PT, _pt("--do_train", "--do_eval",
                                                           "--eval_input_file=/no/eval.rec"),
           fragments=["--eval_input_file=/no/eval.rec"], check=nothing_written),
      case("pt_nsp_records_with_one_segment_type", PT, lambda w, d: w.pt_args(
          out(d), "--do_train") + ["--bert_config_file=%s" % _config_file(d, type_vocab_size=1)],
           fragments=["segment id 1", "type_vocab_size=1"], check=nothing_written),
      case("pt_rerun_other_config", PT, lambda w, d: w.pt_args(out(d), "--do_train") + [
          "--bert_config_file=%s" % _config_file(d, intermediate_size=48)],
           prepare=copy_of("pt_out"), fragments=["intermediate"]),
      case("pt_sigterm_training", PT, _pt("--do_train", "--num_train_steps=2000"),
           expect="interrupt", trigger=Trigger(r"step 3/", signal.SIGTERM),
           fragments=["SIGTERM", "model.ckpt-"], check=_interrupt_saved),
      # --- create_pretraining_data.py
      case("cpd_no_input", CPD, _cpd(corpus=lambda d: "/no/corpus.txt"),
           fragments=["/no/corpus.txt"]),
      case("cpd_empty_input", CPD, _cpd(corpus=lambda d: _write(os.path.join(d, "e.txt"), "")),
           fragments=["e.txt", "empty"]),
      case("cpd_bad_utf8_line5", CPD, _cpd(corpus=lambda d: os.path.join(d, "bad.txt")),
           prepare=lambda w, d: _write_bytes(os.path.join(d, "bad.txt"),
                                             "甲乙丙丁。\n".encode("utf-8") * 4 + b"\xff\n"),
           fragments=["bad.txt:5", "utf-8"], check=_no_output("out.tfrecord")),
      # README's --output_file=data/train-0.tfrecord: the folder is made, as --output_dir is.
      case("cpd_output_dir_missing", CPD, _cpd(output=lambda d: os.path.join(d, "data",
                                                                             "out.tfrecord")),
           expect="ok", check=lambda w, d, e: None if os.path.getsize(os.path.join(
               d, "data", "out.tfrecord")) else ("silent", "data/out.tfrecord is empty")),
      case("cpd_output_is_dir", CPD, _cpd(output=lambda d: d), fragments=["is a directory"]),
      case("cpd_output_under_a_file", CPD,
           _cpd(output=lambda d: os.path.join(_write(os.path.join(d, "f"), "x"), "o.tfrecord")),
           fragments=["--output_file=", "is a file, not a folder"]),
      case("cpd_output_is_its_input", CPD,
           _cpd(corpus=lambda d: _write(os.path.join(d, "c.txt"), "今天天气很好。\n我们去公园。\n"),
                output=lambda d: os.path.join(d, "c.txt")),
           fragments=["also an --input_file", "c.txt"]),
      case("cpd_output_under_proc", CPD, _cpd(output=lambda d: "/proc/out.tfrecord"),
           fragments=["--output_file=/proc/out.tfrecord", "cannot write in /proc"]),
      case("cpd_text_the_vocab_cannot_read", CPD, _cpd(corpus=lambda d: _write(
          os.path.join(d, "pua.txt"), "".join("\ue000\ue001\ue002 \ue003\ue004\n" * 3 + "\n"
                                              for _ in range(20)))),
           fragments=["% of the tokens are [UNK]", "--vocab_file"]),
      case("cpd_vocab_without_mask", CPD, _cpd(vocab=lambda d: _vocab_file(d, drop="[MASK]")),
           fragments=["[MASK]"]),
      case("cpd_sigint", CPD, _cpd("--dupe_factor=30", "--log_every_docs=1", long_corpus=True),
           expect="interrupt", trigger=Trigger(r"\*\*\* Example \*\*\*", signal.SIGINT),
           fragments=["SIGINT"], check=_no_output("out.tfrecord")),
      case("cpd_ctrl_c_with_workers", CPD, _cpd("--dupe_factor=30", "--num_workers=2",
                                                "--log_every_docs=1", long_corpus=True),
           expect="interrupt", trigger=Trigger(r"\*\*\* Example \*\*\*", _ctrl_c),
           fragments=["SIGINT"], check=_no_output("out.tfrecord")),
      case("cpd_disk_full", CPD, _cpd("--dupe_factor=30", long_corpus=True,
                                      output=lambda d: os.path.join(out(d), "o.tfrecord")),
           prepare=_mount_out(64), needs_root=True,
           fragments=["No space left on device", "--output_file"],
           check=lambda w, d, e: ("damaged", "left %s" % os.listdir(out(d)))
           if os.listdir(out(d)) else None),
  ] + output_cases() + electra_cases() + help_cases()
  cases += trained_dir_cases() + dropped_input_cases() + drift_cases() + damaged_file_cases()
  names = [c.name for c in cases]
  assert len(names) == len(set(names)), "duplicate case names"
  return cases


def _killed_export(world, d):
  """prepare: what `kill -9` during --do_export leaves: a half-built SavedModel of a dead pid."""
  del world
  os.makedirs(os.path.join(out(d), "saved_model.tmp-999999", "variables"))


def _builders_of(d):
  """The pids of the build_saved_model.py processes whose spec names case_dir d."""
  pids = []
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open("/proc/%s/cmdline" % pid, "rb") as f:
        args = f.read().decode("utf-8", "replace")
    except OSError:
      continue
    if "build_saved_model.py" in args and d in args:
      pids.append(int(pid))
  return pids


def _builder_died_with_the_run(world, d, stderr):
  """check: the killed run's build_saved_model.py died with it: it is gone a few seconds later,
  and wrote no whole SavedModel beside the one the next run builds."""
  del world, stderr
  deadline = time.time() + 5
  while _builders_of(d) and time.time() < deadline:
    time.sleep(0.05)
  left = _builders_of(d)
  for pid in left:
    os.kill(pid, signal.SIGKILL)
  if left:
    return "damaged", "build_saved_model.py outlived the killed run: pid %s" % left
  built = glob.glob(os.path.join(out(d), "saved_model.tmp-*", "saved_model.pb"))
  if built:
    return "damaged", "the killed run's builder went on to write %s" % built
  return None


def _export_recovered(world, d, stderr):
  del world
  names = os.listdir(out(d))
  if [n for n in names if n.startswith("saved_model.")]:
    return "damaged", "left %s" % [n for n in names if n.startswith("saved_model.")]
  if not os.path.isfile(os.path.join(out(d), "saved_model", "saved_model.pb")):
    return "damaged", "no saved_model/saved_model.pb: %s" % _last_line(stderr)
  return None


def _config_path(d):
  return os.path.join(d, "config.json")


def _vocab_path(d):
  return os.path.join(d, "vocab.txt")


def _write_bytes(path, content):
  with open(path, "wb") as f:
    f.write(content)


def _cut_records(world, d):
  with open(world.records, "rb") as f:
    content = f.read()
  with open(os.path.join(d, "cut.tfrecord"), "wb") as f:
    f.write(content[:len(content) * 2 // 3])


def _line_count(name, lines):
  def check(world, d, stderr):
    del world, stderr
    with open(os.path.join(out(d), name), encoding="utf-8") as f:
      got = len(f.read().splitlines())
    return None if got == lines else ("silent", "%s has %d lines, expected %d" % (name, got,
                                                                                 lines))
  return check


def _file_lines(path, lines):
  """check: the file path(case_dir) holds `lines` lines."""
  def check(world, d, stderr):
    del world, stderr
    if not os.path.isfile(path(d)):
      return "silent", "%s was not written" % path(d)
    with open(path(d), encoding="utf-8") as f:
      got = len(f.read().splitlines())
    return None if got == lines else ("silent", "%s has %d lines, expected %d" % (path(d), got,
                                                                                 lines))
  return check


def _latest_finite_step_at_least(step):
  def check(world, d, stderr):
    del world, stderr
    steps = checkpoint_steps(out(d))
    if not steps or steps[-1] < step:
      return "damaged", "checkpoints now %s" % steps
    return None
  return check


# ---------------------------------------------------------------------------------------------
# Outputs written whole (issue 30): a disk that fills up while a script writes its outputs
# leaves the files it was replacing as they were (a set of files that belong together never
# mixes new and old), no temporary file, and one line naming the flag whose path failed.

PAGE = 4096  # tmpfs counts whole pages


def _fill_leaving(folder, free_bytes=0):
  """Fills the tmpfs at `folder` with a file `filler`, then frees the whole pages that a file of
  `free_bytes` takes (0: full to the last byte)."""
  filler = os.path.join(folder, "filler")
  try:
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
  except OSError:  # Full already (the run filled it): nothing to free either.
    return
  try:
    while True:
      os.write(fd, b"\0" * (1 << 16))
  except OSError:
    pass
  finally:
    os.close(fd)
  pages = -(-os.path.getsize(filler) // PAGE) - -(-free_bytes // PAGE)
  os.truncate(filler, max(pages, 0) * PAGE)


def _tree(folder):
  """{relative path: bytes} of the files under `folder`, a full disk's filler left out."""
  files = {}
  for top, _, names in os.walk(folder):
    for name in names:
      path = os.path.join(top, name)
      if name != "filler":
        with open(path, "rb") as f:
          files[os.path.relpath(path, folder)] = f.read()
  return files


def _full_disk(folder, populate, free_bytes=0, size_kb=1024):
  """prepare: mounts a tmpfs at case_dir/<folder>, fills it with populate(world, d, path) (the
  good state), keeps a copy for _unchanged, then fills the disk up but for free_bytes (a number,
  or callable(world, d); None leaves the filling to a trigger: _fill(folder)). size_kb: a
  number or callable(world)."""

  def prepare(world, d):
    path = world.mount_tmpfs(os.path.join(d, folder),
                             size_kb(world) if callable(size_kb) else size_kb)
    populate(world, d, path)
    shutil.copytree(path, os.path.join(d, "before-" + folder))
    if free_bytes is not None:
      _fill_leaving(path, free_bytes(world, d) if callable(free_bytes) else free_bytes)

  return prepare


def _fill(folder):
  """Trigger action: fills the tmpfs at case_dir/<folder> to the last byte."""
  return lambda world, d, pid: _fill_leaving(os.path.join(d, folder))


def _unchanged(folder):
  """check: case_dir/<folder> holds what it held before the run, byte for byte: no output
  replaced (or cut), none mixed with the old ones, no temporary file left."""

  def check(world, d, stderr):
    del world, stderr
    before, after = _tree(os.path.join(d, "before-" + folder)), _tree(os.path.join(d, folder))
    changed = sorted(set(before) ^ set(after) |
                     {n for n in before if n in after and before[n] != after[n]})
    return ("damaged", "%s changed: %s" % (folder, changed)) if changed else None

  return check


def _room_for(attr, extra_kb=64):
  """size_kb: the size of one of the world's output_dirs, plus extra_kb (a trigger then fills
  the rest at once)."""
  def size_kb(world):
    return sum(len(v) for v in _tree(getattr(world, attr)).values()) // 1024 + 4 * len(
        _tree(getattr(world, attr))) + extra_kb
  return size_kb


def _old_files(*names):
  """populate: files `names` holding "old" (the previous good outputs)."""
  def populate(world, d, path):
    del world, d
    for name in names:
      _write(os.path.join(path, name), "old\n")
  return populate


def _copy_into(attr):
  """populate: a copy of one of the world's trained output_dirs."""
  return lambda world, d, path: shutil.copytree(getattr(world, attr), path, dirs_exist_ok=True)


def _convert_to_hf(world, checkpoint, output_dir):
  _check_ok(world.run(TO_HF, "--checkpoint=%s" % checkpoint, "--bert_config_file=%s" % world.config,
                      "--vocab_file=%s" % world.vocab, "--output_dir=%s" % output_dir),
            "the case's conversion")
  return output_dir


def _size_of_new(name, make):
  """free_bytes: the size of the file `name` that make(world, d, scratch folder) writes (what
  the case's run writes first), so that file fits and the next one does not."""
  def free_bytes(world, d):
    scratch = os.path.join(d, "scratch")
    make(world, d, scratch)
    return os.path.getsize(os.path.join(scratch, name))
  return free_bytes


def _train_electra(world, d):
  """A 4-step ELECTRA run in case_dir/electra, checkpoints at steps 2 and 4."""
  _check_ok(world.run(PT, *world.pt_args(os.path.join(d, "electra"), "--do_train",
                                         "--objective=electra")), "the case's ELECTRA run")


def output_cases():
  """Damaged output on a full disk, one case per script that writes predictions or models."""
  electra = lambda d, step: os.path.join(d, "electra", "model.ckpt-%d" % step)
  return [
      # Predictions and their scores belong together: one free page lets p.txt be written
      # whole, and p_probabilities.tsv not; neither may replace the old pair.
      case("clf_disk_full_predict_output_pair", CLF, lambda w, d: w.clf_args(
          out(d), "--do_predict", "--predict_output=%s" % os.path.join(d, "full", "p.txt")),
           prepare=both(copy_of("clf_out"), _full_disk(
               "full", _old_files("p.txt", "p_probabilities.tsv"), free_bytes=PAGE,
               size_kb=256)), needs_root=True,
           fragments=["p_probabilities.tsv", "No space left on device", "--predict_output"],
           check=_unchanged("full")),
      case("clf_disk_full_test_results_pair", CLF, _clf("--do_predict"),
           prepare=_full_disk("out", _copy_into("clf_out"), free_bytes=PAGE,
                              size_kb=_room_for("clf_out")),
           needs_root=True,
           fragments=["test_results.tsv", "No space left on device", "--output_dir"],
           check=_unchanged("out")),
      case("rw_disk_full_predict_output", RW, lambda w, d: w.rw_args(
          out(d), "--do_predict", "--predict_output=%s" % os.path.join(d, "full", "p.txt")),
           prepare=both(copy_of("rw_out"), _full_disk("full", _old_files("p.txt"),
                                                      free_bytes=None, size_kb=64)),
           needs_root=True, trigger=Trigger(r"Restoring parameters", _fill("full")),
           fragments=["p.txt", "No space left on device", "--predict_output"],
           check=_unchanged("full")),
      case("pt_disk_full_eval_and_predict", PT, _pt("--do_eval", "--do_predict"),
           prepare=_full_disk("out", _copy_into("pt_out"), free_bytes=None,
                              size_kb=_room_for("pt_out")),
           needs_root=True, trigger=Trigger(r"Restoring parameters", _fill("out")),
           fragments=["eval_results.txt", "No space left on device", "--output_dir"],
           check=_unchanged("out")),
      # A model folder: the new model.safetensors fits, its config.json does not; the old
      # model (a classifier) must stay whole, not get the new weights beside its old config.
      case("cth_disk_full_model_folder", TO_HF, lambda w, d: [
          "--checkpoint=%s" % w.pt_out, "--bert_config_file=%s" % w.config,
          "--vocab_file=%s" % w.vocab, "--output_dir=%s" % os.path.join(d, "hf")],
           prepare=_full_disk(
               "hf", lambda w, d, path: _convert_to_hf(w, w.clf_out, path),
               free_bytes=_size_of_new("model.safetensors",
                                       lambda w, d, to: _convert_to_hf(w, w.pt_out, to))),
           needs_root=True, fragments=["No space left on device", "--output_dir"],
           check=_unchanged("hf")),
      # ELECTRA's two folders: the new discriminator/model.safetensors fits, nothing more.
      case("cth_electra_disk_full_both_folders", TO_HF, lambda w, d: [
          "--checkpoint=%s" % electra(d, 4), "--bert_config_file=%s" % w.config,
          "--vocab_file=%s" % w.vocab, "--output_dir=%s" % os.path.join(d, "hf")],
           prepare=_full_disk(
               "hf", lambda w, d, path: (_train_electra(w, d),
                                         _convert_to_hf(w, electra(d, 2), path)),
               free_bytes=_size_of_new("discriminator/model.safetensors",
                                       lambda w, d, to: _convert_to_hf(w, electra(d, 4), to))),
           needs_root=True, fragments=["No space left on device", "--output_dir"],
           check=_unchanged("hf"), timeout=240),
      # bert_config.json and vocab.txt fit (two pages), the checkpoint does not.
      case("chc_disk_full_checkpoint_folder", FROM_HF, lambda w, d: [
          "--hf_model_dir=%s" % os.path.join(d, "hf_pt"), "--output_dir=%s" % os.path.join(
              d, "tf")],
           prepare=_full_disk(
               "tf", lambda w, d, path: (
                   _convert_to_hf(w, w.pt_out, os.path.join(d, "hf_pt")),
                   _check_ok(w.run(FROM_HF, "--hf_model_dir=%s" % _convert_to_hf(
                       w, w.clf_out, os.path.join(d, "hf_clf")), "--output_dir=%s" % path),
                             "the case's first conversion")),
               free_bytes=2 * PAGE),
           needs_root=True, fragments=["No space left on device", "--output_dir"],
           check=_unchanged("tf")),
  ]


def _warns_worse_than_prior(world, d, stderr):
  """check: the log and export/WARNING.txt say the discriminator does worse than the prior."""
  del world
  path = os.path.join(out(d), "export", "WARNING.txt")
  if "discriminator does worse than the prior" not in stderr:
    return "silent", "the log does not say the discriminator does worse than the prior"
  if not os.path.isfile(path):
    return "silent", "no export/WARNING.txt"
  with open(path, encoding="utf-8") as f:
    text = f.read()
  return None if "lower --learning_rate" in text else ("unclear", "WARNING.txt: %s" % text[:200])


def electra_cases():
  """ELECTRA fails as the masked LM does: non-finite weights are a divergence (exit 2), on one
  tower, on towers and on stages, and a discriminator worse than the prior is flagged."""
  nan = ("--do_train", "--learning_rate=1e4", "--num_train_steps=20")
  return [
      case("pt_electra_nonfinite_one_tower", PT, _pt(*nan + ("--objective=electra",)),
           fragments=["--learning_rate", "diverged"], check=no_leftovers),
      case("pt_electra_nonfinite_towers", PT, _pt(*nan + ("--objective=electra", "--n_gpus=2")),
           fragments=["--learning_rate", "diverged"], check=no_leftovers),
      case("pt_electra_nonfinite_stages", PT, _pt(*nan + (
          "--objective=electra", "--n_gpus=2", "--pipeline_stages=2")),
           fragments=["--learning_rate", "diverged"], check=no_leftovers),
      case("pt_mlm_nonfinite", PT, _pt(*nan), fragments=["--learning_rate"],
           check=no_leftovers),
      case("rw_nonfinite", RW, _rw(*nan), fragments=["--learning_rate"], check=no_leftovers),
      case("pt_electra_worse_than_prior", PT, _pt("--do_train", "--objective=electra",
                                                  "--learning_rate=50"),
           expect="ok", check=_warns_worse_than_prior),
  ]


def help_cases():
  """--help exits 0 for every script (absl's own exit status is 1)."""
  return [case("%s_help" % prefix, script, lambda w, d: ["--help"], expect="ok")
          for prefix, script in (("clf", CLF), ("rw", RW), ("pt", PT), ("cpd", CPD),
                                 ("cth", TO_HF), ("chc", FROM_HF))]

# Runs that read a trained directory: they check what they are given against its run_info.json
# (or say that there is no training run there, and what the folder holds).

_PREDICT_TEXT = "甲乙丙\n丁戊\n"


def _predict_args(script, world, d, folder):
  """A run that does not train on `folder` (predict with the script's least flags)."""
  text = _write(os.path.join(d, "p.txt"), _PREDICT_TEXT)
  if script == PT:
    return ["--output_dir=%s" % folder, "--do_eval", "--input_file=%s" % world.records]
  return ["--output_dir=%s" % folder, "--predict_file=%s" % text]


def _on_folder(script, folder):
  """args: predict (eval for pretraining) on folder(world, case_dir)."""
  return lambda w, d: _predict_args(script, w, d, folder(w, d))


def _fake_hf_folder(world, d):
  """prepare: case_dir/out looks like a Hugging Face model folder (convert_to_hf.py's)."""
  del world
  _write(os.path.join(out(d), "config.json"), json.dumps(dict(CONFIG, model_type="bert")))
  _write(os.path.join(out(d), "model.safetensors"), "")


def _drop_run_info(world, d):
  del world
  os.remove(os.path.join(out(d), "run_info.json"))


def _electra_pair_folder(world, d):
  """prepare: case_dir/hf holds discriminator/ and generator/ as convert_to_hf.py writes an
  ELECTRA."""
  del world
  for model in ("discriminator", "generator"):
    _write(os.path.join(d, "hf", model, "config.json"), json.dumps(dict(CONFIG,
                                                                         model_type="electra")))
    _write(os.path.join(d, "hf", model, "model.safetensors"), "")


def _to_hf(*extra, checkpoint="clf_out"):
  def args(world, d):
    return ["--checkpoint=%s" % getattr(world, checkpoint),
            "--output_dir=%s" % os.path.join(d, "hf")] + [
                e(world, d) if callable(e) else e for e in extra]
  return args


def _hf_written(world, d, stderr):
  del world, stderr
  names = sorted(os.listdir(os.path.join(d, "hf")))
  return None if "model.safetensors" in names and "config.json" in names else (
      "silent", "hf/ holds %s" % names)


def trained_dir_cases():
  """Runs that read a trained directory: no run there, another script's run, a folder where a
  checkpoint is expected, a config or vocabulary other than the run's."""
  cases = []
  scripts = ((CLF, "clf"), (RW, "rw"), (PT, "pt"))
  others = {CLF: "pt_out", RW: "clf_out", PT: "rw_out"}
  for script, short in scripts:
    cases += [
        case("%s_predict_in_an_empty_dir" % short, script,
             _on_folder(script, lambda w, d: out(d)), prepare=lambda w, d: os.makedirs(out(d)),
             fragments=["no training run", "the folder is empty"]),
        case("%s_predict_in_a_hugging_face_folder" % short, script,
             _on_folder(script, lambda w, d: out(d)), prepare=_fake_hf_folder,
             fragments=["no training run", "Hugging Face model", "convert_hf_checkpoint.py"]),
        case("%s_predict_without_run_info" % short, script,
             _on_folder(script, lambda w, d: out(d)),
             prepare=both(copy_of(short + "_out"), _drop_run_info),
             fragments=["no run_info.json", "checkpoints (the latest is"]),
        case("%s_predict_in_another_scripts_dir" % short, script,
             _on_folder(script, lambda w, d: out(d)), prepare=copy_of(others[script]),
             fragments=["holds a training run of", "not of %s" % script]),
        case("%s_init_checkpoint_is_a_run_dir" % short, script,
             lambda w, d, s=script: _train_args(w, d, s) + ["--init_checkpoint=%s" % w.pt_out],
             fragments=["not a folder", os.path.join("export", "bert_model.ckpt")],
             check=nothing_written),
        case("%s_init_checkpoint_is_a_hugging_face_folder" % short, script,
             lambda w, d, s=script: _train_args(w, d, s) + [
                 "--init_checkpoint=%s" % os.path.join(d, "out")],
             prepare=_fake_hf_folder, fragments=["not a folder", "convert_hf_checkpoint.py"]),
    ]
  cases += [
      case("to_hf_run_dir_alone", TO_HF, _to_hf(), expect="ok", check=_hf_written),
      case("to_hf_config_of_other_heads", TO_HF, _to_hf(lambda w, d: "--bert_config_file=%s" %
                                                        _config_file(d, num_attention_heads=4)),
           fragments=["different model config", "num_attention_heads=2 there"]),
      case("to_hf_config_of_another_activation", TO_HF,
           _to_hf(lambda w, d: "--bert_config_file=%s" % _config_file(d, hidden_act="relu")),
           fragments=["different model config", 'hidden_act="gelu" there']),
      case("to_hf_other_vocabulary", TO_HF, _to_hf(lambda w, d: "--vocab_file=%s" %
                                                    _vocab_file(d, swap=True)),
           fragments=["different vocabulary"]),
      case("to_hf_other_casing", TO_HF, _to_hf("--nodo_lower_case", checkpoint="pt_out"),
           fragments=["different vocabulary", "do_lower_case=true"]),
      case("to_hf_labels_of_another_order", TO_HF, _to_hf(lambda w, d: "--labels_file=%s" %
                                                           _write(os.path.join(d, "l.txt"),
                                                                  "pos\nneg\n")),
           fragments=["l.txt holds the labels ['pos', 'neg']", "trained with ['neg', 'pos']"]),
      case("to_hf_hugging_face_folder", TO_HF, lambda w, d: [
          "--checkpoint=%s" % out(d), "--output_dir=%s" % os.path.join(d, "hf")],
           prepare=_fake_hf_folder, fragments=["no checkpoint there", "Hugging Face model"]),
      case("from_hf_electra_pair_folder", FROM_HF, lambda w, d: [
          "--hf_model_dir=%s" % os.path.join(d, "hf"), "--output_dir=%s" % out(d)],
           prepare=_electra_pair_folder,
           fragments=["discriminator", "--hf_generator_dir=", "generator"]),
      case("from_hf_run_dir", FROM_HF, lambda w, d: [
          "--hf_model_dir=%s" % w.clf_out, "--output_dir=%s" % out(d)],
           fragments=["no Hugging Face model there", "training run of run_classifier_mgpu.py"]),
      # config.json read through core/json_files: a list was an AttributeError (internal).
      case("from_hf_config_not_an_object", FROM_HF, lambda w, d: [
          "--hf_model_dir=%s" % out(d), "--output_dir=%s" % os.path.join(d, "stock")],
           prepare=both(_fake_hf_folder, lambda w, d: _write(
               os.path.join(out(d), "config.json"), '["bert"]')),
           fragments=["config.json: expected a JSON object, got [\"bert\"]"]),
      case("clf_vocab_with_a_repeated_line", CLF, _clf("--do_train", vocab=_vocab_path),
           prepare=lambda w, d: _write(os.path.join(d, "vocab.txt"), "\n".join(
               VOCAB[:-1] + [VOCAB[7]]) + "\n"),
           fragments=["line %d repeats line 8" % len(VOCAB), "vocab_size=%d" % len(VOCAB)]),
  ]
  return cases


def _train_args(world, d, script):
  """A training run of `script` in case_dir/out."""
  if script == CLF:
    return world.clf_args(out(d), "--do_train")
  if script == RW:
    return world.rw_args(out(d), "--do_train")
  return world.pt_args(out(d), "--do_train")


# ---------------------------------------------------------------------------------------------
# Input dropped or cut: the run says how much, and why (a warning above 10%).


def _long_rows(rows, times=12):
  """The rows of `rows` with their first column repeated `times` times (past 16 tokens)."""
  return "".join("\t".join([r.split("\t")[0] * times] + r.split("\t")[1:])
                 for r in rows.splitlines(True))


def dropped_input_cases():
  """Text cut to fit max_seq_length, a corpus on one line."""
  return [
      # The corpus: 1 MB of text on one line made 3 instances, and said nothing.
      case("cpd_corpus_on_one_line", CPD, _cpd(corpus=lambda d: _write(
          os.path.join(d, "one_line.txt"), "".join(CHARS) * 30000 + "\n")), expect="ok",
           check=_stderr_has(r"\(99\.\d\d%\) are in no instance", "one_line.txt:1, has "
                             "360000 tokens", "one sentence per line")),
      case("clf_long_texts_truncated", CLF, _clf("--do_train", "--do_eval", data_dir="case"),
           prepare=data_dir_with("clf_data", train__tsv=_long_rows(clf_rows(32)),
                                 dev__tsv=_long_rows(clf_rows(8, 1))),
           expect="ok", check=_stderr_has(
               r"train\.tsv: \d+ of \d+ tokens \(\d\d\.\d\d%\) cut by --max_seq_length=16 in 32 "
               r"of 32 examples", "--long_text=sliding")),
      case("clf_predict_file_of_long_lines", CLF, lambda w, d: [
          "--output_dir=%s" % out(d), "--predict_file=%s" % _write(
              os.path.join(d, "p.txt"), "".join(CHARS) * 3 + "\n")],
           prepare=copy_of("clf_out"), expect="ok", check=_stderr_has(
               r"--predict_file=\S+p\.txt: 22 of 36 tokens \(61\.11%\) cut")),
      case("rw_long_sources_and_targets_truncated", RW, _rw("--do_train", data_dir="case"),
           prepare=data_dir_with("rw_data", train__tsv="".join(
               "%s\t%s\n" % (s * 6, t * 3) for s, t in (
                   r.split("\t") for r in rw_rows(32).splitlines()))),
           expect="ok", check=_stderr_has(r"train sources: \d+ of \d+ tokens \(\d\d\.\d\d%\) cut",
                                          r"train targets: \d+ of \d+ tokens .* cut",
                                          "--max_target_length=6")),
  ]


# ---------------------------------------------------------------------------------------------
# Settings that drift: a resume with another flag of the model or loss, an evaluation given
# one, the processes of a run started with different ones.

_OTHER_PROCESSES = {}  # case_dir -> the case's second process (task 1; World.start)


def _two_processes(script, args, *differ):
  """(prepare, args) of a run of two processes on localhost: prepare starts task 1 with `args`
  and `differ`; the case's own command is the chief, task 0, with `args`."""
  cluster = ["--collective_timeout_s=60"]

  def prepare(world, d):
    hosts = ",".join("localhost:%d" % port for port in script_runner.free_ports(2))
    _write(os.path.join(d, "hosts"), hosts)
    # Forked from the script host, as the chief is (tests/multiworker_case.py's processes are
    # too): a process of its own, with its own session, pid and stderr.
    _OTHER_PROCESSES[d] = world.start(script, [str(a) for a in args(world, d) + cluster + list(
        differ) + ["--worker_hosts=%s" % hosts, "--task_index=1"]])

  def chief_args(world, d):
    with open(os.path.join(d, "hosts")) as f:
      hosts = f.read()
    return args(world, d) + cluster + ["--worker_hosts=%s" % hosts, "--task_index=0"]

  return prepare, chief_args


def _other_process_refused(fragment):
  """check: the case's second process ended as the chief did, one error line naming
  `fragment` (it is killed, by its pid, if it has not ended within 120 s)."""
  def check(world, d, stderr):
    del world, stderr
    proc = _OTHER_PROCESSES.pop(d)
    try:
      _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # A hosted run is killed (its session) by communicate.
      if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
      return "hang", "the other process did not end"
    if proc.returncode != 2 or fragment not in _last_line(err):
      return "unclear", "the other process: exit %s, %s" % (proc.returncode, _last_line(err))
    saved = [n for n in os.listdir(out(d)) if n.startswith("model.ckpt")] if os.path.isdir(
        out(d)) else []
    return ("damaged", "the refused run saved %s" % saved) if saved else None
  return check


def drift_cases():
  """A flag of the model or loss that differs from the training run's, or between processes."""
  cases = [
      case("clf_resume_with_other_truncation", CLF, _clf("--do_train", "--num_train_epochs=2",
                                                         "--truncation=tail"),
           prepare=copy_of("clf_out"), check=_latest_finite_step(CLF_STEPS),
           fragments=["trained with --truncation=head", "resume it with --truncation=tail",
                      "changes the model or its loss"]),
      case("rw_resume_with_other_max_target_length", RW,
           _rw("--do_train", "--num_train_steps=%d" % (2 * RW_STEPS), "--max_target_length=5"),
           prepare=copy_of("rw_out"), check=_latest_finite_step(RW_STEPS),
           fragments=["--max_target_length=6", "--max_target_length=5"]),
      case("pt_resume_with_other_layerwise_lr_decay", PT,
           _pt("--do_train", "--num_train_steps=%d" % (2 * PT_STEPS),
               "--layerwise_lr_decay=0.8"), prepare=copy_of("pt_out"),
           check=_latest_finite_step(PT_STEPS),
           fragments=["--layerwise_lr_decay=1.0", "--layerwise_lr_decay=0.8"]),
      case("pt_resume_with_other_learning_rate", PT,
           _pt("--do_train", "--num_train_steps=%d" % (2 * PT_STEPS), "--learning_rate=5e-4"),
           prepare=copy_of("pt_out"), expect="ok", check=_stderr_has(
               r"Resuming with --learning_rate=0\.0005; the checkpoints so far were trained "
               r"with --learning_rate=0\.001")),
      case("clf_eval_at_another_max_seq_length", CLF, lambda w, d: [
          "--output_dir=%s" % out(d), "--data_dir=%s" % w.clf_data, "--do_eval",
          "--max_seq_length=12"], prepare=copy_of("clf_out"), expect="ok",
           check=_stderr_has(r"--max_seq_length=12, but the model of \S+ was trained with "
                             r"--max_seq_length=16")),
      case("rw_predict_with_other_max_target_length", RW, lambda w, d: _predict_args(
          RW, w, d, out(d)) + ["--max_target_length=4"], prepare=copy_of("rw_out"),
           expect="ok", check=_stderr_has(r"--max_target_length=4, but the model of \S+ was "
                                          r"trained with --max_target_length=6")),
      case("pt_eval_with_other_layerwise_lr_decay", PT, lambda w, d: _predict_args(
          PT, w, d, out(d)) + ["--layerwise_lr_decay=0.5"], prepare=copy_of("pt_out"),
           expect="ok", check=_stderr_has(r"--layerwise_lr_decay=0\.5, but the model of \S+ "
                                          r"was trained with --layerwise_lr_decay=1\.0")),
  ]
  for name, script, args, differ, flag in (
      ("clf_processes_differ_in_class_weights", CLF, _clf("--do_train"),
       "--class_weights=balanced", "--class_weights"),
      ("rw_processes_differ_in_max_target_length", RW, _rw("--do_train"),
       "--max_target_length=5", "--max_target_length"),
      # ELECTRA's flags, which --objective=mlm leaves out (None), sort first but are not named.
      ("pt_processes_differ_in_objective", PT, _pt("--do_train"), "--objective=electra",
       "--objective")):
    prepare, chief_args = _two_processes(script, args, differ)
    fragment = "different %s than the chief" % flag
    cases.append(case(name, script, chief_args, prepare=prepare, fragments=["task 1", fragment],
                      check=_other_process_refused(fragment), timeout=180))
  return cases


# ---------------------------------------------------------------------------------------------
# Damaged files the product reads (issue 44): an --init_checkpoint cut short or without its data
# file, one of its files given for its prefix, a lock file or run_info.json of wrong content;
# and an --init_checkpoint that is gone when the run resumes from its own checkpoint.


def _init_copy(damage=None):
  """prepare: case_dir/init/bert_model.ckpt, a copy of the pretraining run's export, with its
  data file cut to half ("truncated") or removed ("without_data")."""
  def prepare(world, d):
    os.makedirs(os.path.join(d, "init"))
    for path in glob.glob(os.path.join(world.pt_out, "export", "bert_model.ckpt.*")):
      shutil.copy(path, os.path.join(d, "init"))
    data_file = os.path.join(d, "init", "bert_model.ckpt.data-00000-of-00001")
    if damage == "truncated":
      os.truncate(data_file, os.path.getsize(data_file) // 2)
    elif damage == "without_data":
      os.remove(data_file)
  return prepare


def _train_again(world, d, script):
  """A training run of `script` in case_dir/out as long as the world's (in a copy of its
  output_dir, nothing is left to train)."""
  steps = ["--num_train_steps=%d" % RW_STEPS] if script == RW else []
  return _train_args(world, d, script) + steps


def _with_init(script, checkpoint):
  """args: _train_again of `script` from --init_checkpoint=checkpoint(d)."""
  return lambda w, d: _train_again(w, d, script) + ["--init_checkpoint=%s" % checkpoint(d)]


def _error_ends_with(suffix):
  def check(world, d, stderr):
    del world, d
    line = _last_line(stderr)
    return None if line.endswith(suffix) else ("unclear", "the line does not end with %s: %s"
                                               % (suffix, line))
  return check


def _lock_of_other_bytes(world, d):
  del world
  with open(os.path.join(out(d), ".training.lock"), "wb") as f:
    f.write(b"pid \xff\xfe 12 on \xe4\xbd")


def damaged_file_cases():
  """Per run script: a damaged --init_checkpoint (cut short, no data file, a file of it for its
  prefix), a gone one on resume (not needed), a lock file that is not UTF-8, run_info.json with
  a flag of the wrong type."""
  cases = []
  init = lambda d: os.path.join(d, "init", "bert_model.ckpt")
  for script, short in ((CLF, "clf"), (RW, "rw"), (PT, "pt")):
    cases += [
        case("%s_init_checkpoint_truncated" % short, script, _with_init(script, init),
             prepare=_init_copy("truncated"), check=nothing_written,
             fragments=["bert_model.ckpt.data-00000-of-00001 is cut short (reading bert/"]),
        case("%s_init_checkpoint_without_data_file" % short, script, _with_init(script, init),
             prepare=_init_copy("without_data"), check=nothing_written,
             fragments=["its data file is missing", "bert_model.ckpt.data-* beside"]),
        case("%s_init_checkpoint_index_file" % short, script,
             _with_init(script, lambda d: init(d) + ".index"), prepare=_init_copy(),
             fragments=["expected the checkpoint's prefix, not one of its files"],
             check=_error_ends_with(os.path.join("", "init", "bert_model.ckpt"))),
        # The same command again once the init checkpoint is gone: nothing left to train.
        case("%s_resume_without_init_checkpoint" % short, script,
             _with_init(script, lambda d: os.path.join(d, "gone", "bert_model.ckpt")),
             prepare=copy_of(short + "_out"), expect="ok",
             check=_stderr_has(r"gone/bert_model\.ckpt: no checkpoint there .* Not needed: the "
                               r"run continues from \S+model\.ckpt-\d+")),
        case("%s_training_lock_not_utf8" % short, script,
             lambda w, d, s=script: _train_again(w, d, s),
             prepare=both(copy_of(short + "_out"), _lock_of_other_bytes), expect="ok",
             check=_stderr_has(r"Took over the lock of --output_dir=\S+ left by a run that "
                               r"ended \(pid \ufffd\ufffd 12")),
        case("%s_run_info_flag_of_wrong_type" % short, script,
             _on_folder(script, lambda w, d: out(d)),
             prepare=both(copy_of(short + "_out"), _recorded_flags(max_seq_length="abc")),
             fragments=["run_info.json: flags.max_seq_length is \"abc\", not a value of "
                        "--max_seq_length"]),
    ]
  return cases
