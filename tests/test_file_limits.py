"""A file-size limit (ulimit -f) or a full disk met by a background writer is one error line."""

import os
import resource
import subprocess
import sys

from script_runner import CHINESE_VOCAB, REPO_ROOT, write_tiny_bert_config
from test_classifier import _make_task


def test_the_event_file_hitting_ulimit_f_is_one_error_line(tmp_path):
  data_dir = _make_task(tmp_path / "data")
  config = write_tiny_bert_config(tmp_path / "bert_config.json", 21128)
  out = tmp_path / "out"
  limit = 400 * 1024  # The graph in the first event file alone is larger.

  def limit_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

  env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO_ROOT)
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, "run_classifier_mgpu.py"), "--task_name=tsv",
       "--data_dir=%s" % data_dir, "--vocab_file=%s" % CHINESE_VOCAB,
       "--bert_config_file=%s" % config, "--output_dir=%s" % out, "--max_seq_length=16",
       "--train_batch_size=4", "--learning_rate=1e-3", "--do_train", "--num_train_steps=30"],
      cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
      preexec_fn=limit_file_size)
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
  errors = [l for l in proc.stderr.splitlines() if l.startswith("error: ")]
  assert len(errors) == 1 and "File too large" in errors[0] and "ulimit -f" in errors[0], errors
