"""A diverged run sets its ruined checkpoints aside, and the advised rerun learns.

The loss of update k is computed from the weights after update k-1; a checkpoint whose weights
already gave an abnormal loss is not a resume point (engine/divergence.py).
"""

import json
import os
import re

import pytest

from engine import divergence
from script_runner import CHINESE_VOCAB, assert_one_line_error, run_script, \
    write_tiny_bert_config
from test_classifier import _make_task


def test_a_noisy_normal_curve_is_never_abnormal():
  watch = divergence.Watch()
  losses = [0.69, 0.70, 0.69, 0.73, 0.66, 0.52, 0.61, 0.35, 0.70, 0.21, 0.9, 0.05, 0.4, 0.02]
  assert not any(watch.observe(step, loss, 1.0 + (step % 3)) for step, loss in
                 enumerate(losses, 1))
  assert watch.onset is None


def test_the_onset_is_the_first_abnormal_update_and_survives_a_lucky_step():
  watch = divergence.Watch()
  curve = [0.69, 0.69, 0.6, 0.5, 8.0, 0.0, 400.0, 35.0, float("nan")]
  flags = [watch.observe(step, loss, 1.0) for step, loss in enumerate(curve, 1)]
  assert flags == [False, False, False, False, True, False, True, True, True]
  assert watch.onset == 5
  # Checkpoint 4's weights gave the abnormal loss of step 5: the first unsafe one.
  assert watch.first_unsafe_step(9) == 4


def test_the_gradient_norm_alone_can_mark_the_onset_and_calm_steps_end_it():
  watch = divergence.Watch()
  for step in range(1, 6):
    assert not watch.observe(step, 0.5, 2.0)
  assert watch.observe(6, 0.5, 2.0 * divergence.GRAD_FACTOR * 1.5)
  assert watch.onset == 6
  for step in range(7, 7 + divergence.CALM_STEPS):
    assert not watch.observe(step, 0.5, 2.0)
  assert watch.onset is None
  # A run that turns non-finite with no warning: only the checkpoint before it is suspect.
  assert watch.first_unsafe_step(30) == 29


def _args(data_dir, config, out, *extra):
  return ["--task_name=tsv", "--data_dir=%s" % data_dir, "--vocab_file=%s" % CHINESE_VOCAB,
          "--bert_config_file=%s" % config, "--output_dir=%s" % out, "--max_seq_length=16",
          "--train_batch_size=4", "--eval_batch_size=4", "--save_checkpoints_steps=2",
          "--log_every_n_steps=1", "--keep_checkpoint_max=50"] + list(extra)


def _divergences(out):
  with open(os.path.join(out, "run_info.json")) as f:
    return json.load(f)["divergences"]


def _last_train_loss(proc):
  """The loss of the last logged update of a training run."""
  return float(re.findall(r"step \d+/\d+  loss ([0-9.e+-]+)", proc.stderr)[-1])


def _eval_accuracy(out):
  results = dict(line.split(" = ") for line in open(os.path.join(out, "eval_results.txt")))
  return float(results["eval_accuracy"]), int(results["global_step"])


@pytest.fixture(scope="module")
def task(tmp_path_factory):
  root = tmp_path_factory.mktemp("diverge")
  return _make_task(root / "data"), write_tiny_bert_config(root / "bert_config.json", 21128)


@pytest.mark.parametrize("n_gpus", [1, 2])
def test_fast_divergence_restarts_from_scratch_and_the_rerun_learns(task, tmp_path, n_gpus):
  data_dir, config = task
  out = str(tmp_path / "out")
  tower = "--n_gpus=%d" % n_gpus
  proc = run_script("run_classifier_mgpu.py", *_args(data_dir, config, out, tower, "--do_train",
                                                      "--learning_rate=1e6",
                                                      "--num_train_steps=%d" % (32 // n_gpus)))
  line = assert_one_line_error(proc, "training diverged (the loss left its normal range at step",
                               "Rerun with a lower --learning_rate: it starts again")
  # The checkpoints saved while the loss was already off are out of the way, not deleted.
  record = _divergences(out)[-1]
  assert record["resume_from"] is None and record["moved_steps"]
  assert record["moved_steps"][0] >= record["onset_step"] - 1
  assert not [n for n in os.listdir(out) if n.startswith("model.ckpt-")]
  assert sorted(os.listdir(os.path.join(out, record["moved_to"])))[0].startswith("checkpoint")
  assert record["moved_to"] in line
  proc = run_script("run_classifier_mgpu.py", *_args(data_dir, config, out, tower, "--do_train",
                                                      "--do_eval", "--learning_rate=2e-3",
                                                      "--num_train_epochs=3"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "Resuming from" not in proc.stderr
  # It learns: the training loss falls from ln 2 = 0.69 to below 0.3, and dev beats chance (0.5).
  accuracy, step = _eval_accuracy(out)
  assert _last_train_loss(proc) < 0.3 and accuracy >= 0.7 and step == 48 // n_gpus
  assert _divergences(out) == [record]  # The rerun keeps the record.


def test_slow_divergence_resumes_from_the_last_sound_checkpoint_and_the_rerun_learns(
    task, tmp_path):
  """On 2 towers (the fast case above runs on 1 and 2: the watch sees the global loss)."""
  data_dir, config = task
  out = str(tmp_path / "out")
  tower = "--n_gpus=2"
  proc = run_script("run_classifier_mgpu.py", *_args(data_dir, config, out, tower, "--do_train",
                                                      "--learning_rate=2e-3",
                                                      "--num_train_steps=10"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  # More steps at a learning rate far too high: the loss climbs for several checkpoints first.
  proc = run_script("run_classifier_mgpu.py", *_args(data_dir, config, out, tower, "--do_train",
                                                      "--learning_rate=1e4",
                                                      "--num_train_steps=60"))
  line = assert_one_line_error(proc, "it resumes from %s" % os.path.join(out, "model.ckpt-10"))
  record = _divergences(out)[-1]
  assert record["resume_from"] == "model.ckpt-10" and record["onset_step"] == 12
  assert record["step"] > 14 and len(record["moved_steps"]) >= 2, line
  assert re.search(r"loss became (nan|inf) at step %d" % record["step"], line)
  proc = run_script("run_classifier_mgpu.py", *_args(data_dir, config, out, tower, "--do_train",
                                                      "--do_eval", "--learning_rate=3e-3",
                                                      "--num_train_steps=60"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "Resuming from %s" % os.path.join(out, "model.ckpt-10") in proc.stderr
  accuracy, step = _eval_accuracy(out)
  assert _last_train_loss(proc) < 0.3 and accuracy >= 0.7 and step == 60


def test_a_run_that_ends_far_off_but_finite_says_so(task, tmp_path):
  """lr 30: the loss climbs to hundreds and stays finite; the run finishes (exit 0) but its
  last line says the weights were trained outside the normal range and since when."""
  data_dir, config = task
  proc = run_script("run_classifier_mgpu.py", *_args(data_dir, config, str(tmp_path / "out"),
                                                      "--do_train", "--learning_rate=30",
                                                      "--num_train_steps=16"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert _last_train_loss(proc) > 10
  assert re.search(r"training ended at step 16 with the loss \([0-9.e+]+\) outside its normal "
                   r"range since step \d+ \(the lowest smoothed loss was 0\.\d+\)", proc.stderr)
  # A sound run ends without it.
  proc = run_script("run_classifier_mgpu.py", *_args(data_dir, config, str(tmp_path / "ok"),
                                                      "--do_train", "--learning_rate=2e-3",
                                                      "--num_train_steps=16"))
  assert proc.returncode == 0 and "outside its normal range" not in proc.stderr
