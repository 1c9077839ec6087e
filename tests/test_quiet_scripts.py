"""Every entry script and tool, run once as a user runs it on a machine without a GPU: no noise
on the console, --help exits 0, and every file it writes is written whole.

Each script of the root (run_*_mgpu.py, run_rewrite_finetune.py, create_pretraining_data.py,
convert_*.py, build_*.py; tests/test_layout.py lists them) makes one tiny real run where that is
cheap (the fault table's fixtures: tests/fault_cases.py) and --help otherwise, with the
environment a user has: CUDA_VISIBLE_DEVICES empty as the docs advise, no TF_CPP_MIN_LOG_LEVEL.
Its stderr must hold no CUDA start-up line (cuInit, "Could not find cuda drivers"), none of
absl's lines from before its logging starts, no deprecation notice.

The same runs record every Python open() for writing (an audit hook in a sitecustomize.py put
first on PYTHONPATH, also loaded by worker processes): each path must be a temporary name of
core/atomic_files (`<name>.tmp-<pid>`, or a file inside a folder so named), or one of the
scratch and lock files of WRITE_ALLOWED. tests/test_writes_whole.py checks the same statically.
"""

import os
import re
import subprocess
import tempfile

import pytest

import fault_cases
import script_runner
import test_layout

HOOK = r'''
import os, sys
_log = os.environ.get("BERT_MGPU_WRITE_LOG")
if _log:
  _fd = os.open(_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
  _writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

  def _record(event, args):
    if event != "open" or isinstance(args[0], int) or args[0] is None:
      return
    path, mode, flags = args
    if (any(c in mode for c in "wax+") if isinstance(mode, str) else flags & _writing):
      os.write(_fd, ("%s\t%s\n" % (os.path.abspath(os.fsdecode(path)), mode)).encode(
          "utf-8", "replace"))

  sys.addaudithook(_record)
'''

NOISE = [
    ("a CUDA start-up line", re.compile(
        r"cuInit|cuda_platform|cuda_driver|Could not find cuda drivers|cudart_stub|"
        r"CUDA driver|libcuda|dso_loader", re.IGNORECASE)),
    ("absl's lines from before its logging starts", re.compile(r"absl::InitializeLog")),
    ("TensorFlow's C++ start-up lines", re.compile(r"oneDNN custom operations|cpu_feature_guard")),
    ("a deprecation notice", re.compile(r"deprecat", re.IGNORECASE)),
]

# Files a run may write in place, each with why.
WRITE_ALLOWED = [
    (r"/\.write-test-\d+$", "the probe that an output folder is writable, removed at once"),
    (r"/\.training\.lock$", "the flock of a training run (engine/run_setup.py)"),
    (r"/bert-mgpu-traceback-[^/]*\.txt$", "an internal error's traceback (none expected)"),
    (r"/bert-mgpu-stdin-[^/]*/", "standard input copied to a private temporary folder"),
    (r"/saved_model_assets-[^/]*/", "scratch assets TensorFlow copies into the SavedModel"),
    (r"/__pycache__/|\.pyc$", "Python's bytecode cache"),
    (r"^/dev/|^/proc/", "devices (/dev/null) and the kernel's files (a thread's name)"),
    ("^%s(/[^/]*)?$" % re.escape(tempfile.gettempdir()),
     "scratch files of Python and TensorFlow right in the system's temporary folder (tempfile's "
     "probe and unnamed files, autograph's generated code); every output of these runs is in a "
     "sub-folder"),
]
_TEMPORARY = re.compile(r"\.tmp-\d+(\.[^/]*)?(/|$)")

# The root's entry scripts and tools, and the user tools kept in scripts/.
SCRIPTS = sorted([m + ".py" for m in test_layout.ROOT_MODULES
                  if m.startswith(("run_", "create_", "convert_", "build_"))] +
                 [os.path.join("scripts", "build_word_freq.py"),
                  os.path.join("scripts", "build_domain_vocab.py"),
                  os.path.join("scripts", "build_word_loss.py")])
HELP_ONLY = {"build_saved_model.py": "a subprocess of --do_export (tests/test_export.py)",
             os.path.join("scripts", "build_domain_vocab.py"): "needs an English vocabulary with [unusedN] entries; its "
                                      "real runs: tests/test_domain_masking.py"}


def _env(log_path=None):
  """A user's environment on a machine without a GPU; with `log_path`, the audit hook records
  the files opened for writing there."""
  env = dict(os.environ, PYTHONPATH=fault_cases.REPO_ROOT, CUDA_VISIBLE_DEVICES="")
  for name in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS", "BERT_MGPU_TRACEBACK"):
    env.pop(name, None)
  if log_path:
    env.update(PYTHONPATH=os.pathsep.join([os.path.dirname(log_path), fault_cases.REPO_ROOT]),
               BERT_MGPU_WRITE_LOG=log_path)
  return env


def _runs(world, root):
  """{script: argv after the script} of each script's tiny real run, in dependency order."""
  pt_out, hf_out = os.path.join(root, "pt_out"), os.path.join(root, "hf")
  return [
      ("create_pretraining_data.py", world.cpd_args(world.corpus,
                                                    os.path.join(root, "pt.tfrecord"))),
      ("run_classifier_mgpu.py", world.clf_args(
          os.path.join(root, "clf_out"), "--do_train", "--do_eval", "--do_predict",
          "--num_train_steps=2")),
      ("run_rewrite_finetune.py", world.rw_args(
          os.path.join(root, "rw_out"), "--do_train", "--do_predict", "--num_train_steps=2")),
      ("run_pretraining_mgpu.py", world.pt_args(
          pt_out, "--do_train", "--do_eval", "--do_predict", "--num_train_steps=2",
          records=os.path.join(root, "pt.tfrecord"))),
      ("build_similar_words.py", ["--input_file=%s" % world.corpus, "--min_count=1",
                                  "--output_file=%s" % os.path.join(root, "similar.tsv"),
                                  "--vocab_file=%s" % world.vocab,
                                  "--init_checkpoint=%s" % os.path.join(pt_out, "export",
                                                                        "bert_model.ckpt")]),
      (os.path.join("scripts", "build_word_freq.py"), ["--input_file=%s" % world.corpus,
                              "--output_file=%s" % os.path.join(root, "word_freq.tsv")]),
      (os.path.join("scripts", "build_word_loss.py"), [
          "--bert_dir=%s" % os.path.join(pt_out, "export"), "--input_file=%s" % world.corpus,
          "--output_file=%s" % os.path.join(root, "word_loss.tsv"), "--max_seq_length=32"]),
      ("convert_to_hf.py", ["--checkpoint=%s" % pt_out, "--bert_config_file=%s" % world.config,
                            "--vocab_file=%s" % world.vocab, "--output_dir=%s" % hf_out]),
      ("convert_hf_checkpoint.py", ["--hf_model_dir=%s" % hf_out,
                                    "--output_dir=%s" % os.path.join(root, "tf_again")]),
  ] + [(script, ["--help"]) for script in sorted(HELP_ONLY)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """{script: (CompletedProcess, [(written path, mode)])} of one run of every script."""
  root = str(tmp_path_factory.mktemp("quiet"))
  world = fault_cases.World(os.path.join(root, "world"))
  hooks = os.path.join(root, "hooks")
  os.makedirs(hooks)
  with open(os.path.join(hooks, "sitecustomize.py"), "w") as f:
    f.write(HOOK)
  results = {}
  for script, args in _runs(world, root):
    log_path = os.path.join(hooks, os.path.basename(script) + ".writes")
    proc = subprocess.run(fault_cases.command(script, *args), cwd=root, env=_env(log_path),
                          capture_output=True, text=True, timeout=300)
    writes = []
    if os.path.exists(log_path):
      with open(log_path, encoding="utf-8") as f:
        writes = [tuple(line.rstrip("\n").split("\t", 1)) for line in f]
    results[script] = (proc, writes)
  return results


def test_every_entry_script_and_tool_is_run(runs):
  assert set(runs) == set(SCRIPTS), sorted(set(SCRIPTS) ^ set(runs))


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_run_prints_no_cuda_absl_or_deprecation_noise(runs, script):
  proc, _ = runs[script]
  assert proc.returncode == 0, proc.stderr[-3000:]
  for what, pattern in NOISE:
    lines = [l for l in (proc.stderr + proc.stdout).splitlines() if pattern.search(l)]
    assert not lines, "%s prints %s:\n%s" % (script, what, "\n".join(lines[:5]))


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_run_writes_every_file_whole(runs, script):
  proc, writes = runs[script]
  assert proc.returncode == 0, proc.stderr[-3000:]
  if script not in HELP_ONLY:
    assert writes, "the audit hook recorded no write (is sitecustomize.py loaded?)"
  in_place = sorted({path for path, _ in writes if not _TEMPORARY.search(path) and not any(
      re.search(pattern, path) for pattern, _ in WRITE_ALLOWED)})
  assert not in_place, "%s wrote these files in place (write them through core/atomic_files):" \
      "\n  %s" % (script, "\n  ".join(in_place))


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("flag", ["--help", "--helpshort"])
def test_help_exits_0_and_lists_the_scripts_flags(script, flag):
  """(Forked from the script host where it can: the fixture's runs above are the fresh
  processes in a user's environment.)"""
  proc = script_runner.run_script(script, flag, timeout=120)
  assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
  assert "flags:" in proc.stdout and "error:" not in proc.stderr, proc.stdout[-2000:]
