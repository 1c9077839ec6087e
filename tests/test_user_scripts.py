"""The shell scripts the README and docs tell users to run: `--help` says how to use each.

Each prints its opening comment (scripts/help.sh) and exits 0 before any set-up: the command
line (`bash scripts/<name>`), its arguments or environment variables, what it prints and about
how long it takes. rare_term_table.sh runs its default arms without the optional gensim.
"""

import glob
import os
import re
import subprocess

import pytest

from script_runner import REPO_ROOT

_DOCS = [os.path.join(REPO_ROOT, "README.md"), os.path.join(REPO_ROOT, "benchmarks", "README.md")
         ] + glob.glob(os.path.join(REPO_ROOT, "docs", "**", "*.md"), recursive=True)


def documented_scripts():
  """The scripts/*.sh that the README and docs name, but setup_env.sh (sourced, not run)."""
  named = set()
  for path in _DOCS:
    with open(path, encoding="utf-8") as f:
      named.update(re.findall(r"scripts/(\w+\.sh)", f.read()))
  return sorted(named - {"setup_env.sh"})


# How long a run takes, as the help says it: "~40 min", "3 s", "a few minutes", "2 hours".
_DURATION = re.compile(r"\d+(\.\d+)? ?(s|min|h)\b|\b(seconds?|minutes?|hours?)\b")


@pytest.mark.parametrize("script", documented_scripts())
def test_every_documented_script_says_how_to_use_it(script, tmp_path):
  proc = subprocess.run(["bash", os.path.join(REPO_ROOT, "scripts", script), "--help"],
                        cwd=str(tmp_path), capture_output=True, text=True, timeout=30,
                        env=dict(os.environ, PATH="/usr/bin:/bin"))
  assert proc.returncode == 0 and not proc.stderr, proc.stderr
  assert "bash scripts/%s" % script in proc.stdout, proc.stdout
  assert _DURATION.search(proc.stdout), ("say about how long it takes", proc.stdout)
  assert not os.listdir(str(tmp_path))  # nothing set up, nothing written


def _rare_term_table(**env):
  """rare_term_table.sh stopped by a bad TOPIC_SET (unless `env` names another), checked after
  the arms are chosen."""
  return subprocess.run(["bash", os.path.join(REPO_ROOT, "scripts", "rare_term_table.sh")],
                        capture_output=True, text=True, timeout=60,
                        env=dict(os.environ, **dict(dict(TOPIC_SET="nope"), **env)))


def test_rare_term_table_runs_its_default_arms_without_gensim():
  """The README's command in the installed venv: no gensim, so the macbert arm is left out with
  a note saying how to add it; asking for it by name stays an error."""
  try:
    import gensim  # pylint: disable=g-import-not-at-top,unused-import
    pytest.skip("gensim is installed: every default arm runs")
  except ImportError:
    pass
  proc = _rare_term_table()
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2 and len(lines) == 2, proc.stderr
  assert lines[0] == ("note: rare_term_table.sh: the macbert arm needs gensim, which is not "
                      "installed: running mlm and electra (pip install gensim to add it)")
  assert lines[1] == ("error: rare_term_table.sh: TOPIC_SET takes default, alternate or "
                      "zh_reviews, got 'nope'")
  proc = _rare_term_table(ARMS="mlm macbert")
  assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
      "error: rare_term_table.sh: ARMS=macbert needs gensim for build_similar_words.py (pip "
      "install gensim), or leave macbert out of ARMS"], proc.stderr


def test_rare_term_table_checks_its_seed_and_domain_knobs():
  """PRETRAIN_SEEDS, DOMAIN_TEMPERATURE, DOMAIN_FLOOR and the domain_loss arm's needs are
  checked before any work."""
  for env, expected in (
      (dict(PRETRAIN_SEEDS="1 x"), "error: rare_term_table.sh: SEEDS, PRETRAIN_SEEDS, TASK_SEED "
                                   "and TERM_SENTENCES take positive integers, got 'x'"),
      (dict(TOPIC_SET="alternate", ARMS="domain", DOMAIN_FLOOR="2"),
       "error: rare_term_table.sh: DOMAIN_FLOOR takes a number in [0, 1], got '2'"),
      (dict(TOPIC_SET="alternate", ARMS="domain_dyn", DOMAIN_TEMPERATURE="0"),
       "error: rare_term_table.sh: DOMAIN_TEMPERATURE takes a number > 0, got '0'"),
      (dict(TOPIC_SET="alternate", ARMS="domain", GENERAL_WORD_FREQ="/nonexistent.tsv"),
       "error: rare_term_table.sh: GENERAL_WORD_FREQ=/nonexistent.tsv: expected vocab, jieba or a "
       "word<TAB>count file"),
      (dict(TOPIC_SET="alternate", ARMS="domain_loss"),
       "error: rare_term_table.sh: ARMS=domain_loss needs BERT_DIR=a BERT folder with its "
       "masked-LM head (MiniLM is converted without one)"),
      (dict(TOPIC_SET="alternate", ARMS="domain_loss", WORD_LOSS_REPLACEMENT="similar"),
       "error: rare_term_table.sh: WORD_LOSS_REPLACEMENT takes mask or random, got 'similar'")):
    proc = _rare_term_table(**env)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [expected], proc.stderr


def test_rare_term_table_checks_the_chinese_task_and_its_checkpoint(tmp_path):
  """The Chinese task needs a Chinese checkpoint folder and no English-only arm; a task folder
  built from one checkpoint is not reused with another. All before any work."""
  bert = tmp_path / "bert"
  bert.mkdir()
  for name in ("vocab.txt", "bert_config.json", "bert_model.ckpt.index"):
    (bert / name).write_text("")
  for env, expected in (
      (dict(TOPIC_SET="zh_reviews"), "error: rare_term_table.sh: TOPIC_SET=zh_reviews needs "
       "BERT_DIR=a Chinese BERT folder (MiniLM's vocabulary is English)"),
      (dict(TOPIC_SET="zh_reviews", BERT_DIR=str(bert), ARMS="mlm domain_vocab"),
       "error: rare_term_table.sh: ARMS: domain_vocab is for English text; drop it for "
       "TOPIC_SET=zh_reviews"),
      (dict(TOPIC_SET="zh_reviews", BERT_DIR=str(bert), ARMS="token_vocab"),
       "error: rare_term_table.sh: ARMS: token_vocab is for English text; drop it for "
       "TOPIC_SET=zh_reviews"),
      (dict(TOPIC_SET="zh_reviews", BERT_DIR=str(bert), ARMS="readme"),
       "error: rare_term_table.sh: ARMS: readme is for English text; drop it for "
       "TOPIC_SET=zh_reviews"),
      (dict(TOPIC_SET="zh_reviews", BERT_DIR=str(tmp_path)),
       "error: rare_term_table.sh: BERT_DIR=%s: no vocab.txt there (expected a folder laid out "
       "like a Google release)" % tmp_path)):
    proc = _rare_term_table(**env)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [expected], proc.stderr
  task = tmp_path / "work" / "task_default_seed1"
  task.mkdir(parents=True)
  (task / "bert_dir.txt").write_text("/elsewhere\n")
  proc = subprocess.run(
      ["bash", os.path.join(REPO_ROOT, "scripts", "rare_term_table.sh"), str(tmp_path / "work")],
      capture_output=True, text=True, timeout=60,
      env=dict(os.environ, BERT_DIR=str(bert), ARMS="mlm"))
  assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
      "error: rare_term_table.sh: %s was built for the checkpoint in /elsewhere, not %s: give "
      "this BERT_DIR another work_dir" % (task, bert)], proc.stderr
  assert sorted(os.listdir(str(task))) == ["bert_dir.txt"]


def test_continued_pretraining_table_checks_its_arms_before_any_work(tmp_path):
  """The domain arm's general list, an unknown arm, the Chinese task without a Chinese
  checkpoint and a checkpoint folder without one, refused before anything is written."""
  for env, expected in (
      (dict(ARMS="mlm domain", GENERAL_WORD_FREQ="/nonexistent.tsv"),
       "error: continued_pretraining_table.sh: GENERAL_WORD_FREQ=/nonexistent.tsv: expected "
       "vocab, jieba or a word<TAB>count file"),
      (dict(ARMS="mlm whole_word"),
       "error: continued_pretraining_table.sh: ARMS takes mlm, macbert, electra, domain, "
       "domain_vocab, got 'whole_word'"),
      (dict(TASK="chnsenticorp"),
       "error: continued_pretraining_table.sh: TASK=chnsenticorp needs BERT_DIR=a Chinese BERT "
       "folder (MiniLM's vocabulary is English)"),
      (dict(BERT_DIR=str(tmp_path)),
       "error: continued_pretraining_table.sh: BERT_DIR=%s: no vocab.txt there (expected a "
       "folder laid out like a Google release)" % tmp_path)):
    proc = subprocess.run(
        ["bash", os.path.join(REPO_ROOT, "scripts", "continued_pretraining_table.sh"),
         str(tmp_path / "work")], capture_output=True, text=True, timeout=60,
        env=dict(os.environ, **env))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [expected], proc.stderr
    assert not os.path.exists(str(tmp_path / "work"))


def test_a_measuring_step_that_fails_ends_the_script_with_one_error_line(tmp_path):
  """measure_helpers.sh's `logged`: a failed step shows its log's last lines, then one error line
  with the step's own error: line when it has one, and exit 2. A crash has no error: line and
  must end the same way (under pipefail it ended the table scripts with exit 1 after the log's
  lines, and no error line)."""
  log = str(tmp_path / "step.log")
  script = 'source "$1"; logged "$2" python3 -c "$3"; echo not reached'
  for code, expected in (
      ("raise RuntimeError('boom')", "python3 -c failed (exit 1); the whole log: " + log),
      ("import sys; sys.exit('note: warming up\\nerror: --vocab_file=v.txt: not found')",
       "python3 -c failed (exit 1): --vocab_file=v.txt: not found; the whole log: " + log)):
    proc = subprocess.run(
        ["bash", "-c", "set -euo pipefail; " + script, "table.sh",
         os.path.join(REPO_ROOT, "scripts", "measure_helpers.sh"), log, code],
        capture_output=True, text=True, timeout=30)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout, lines)
    assert lines[-1] == "error: table.sh: " + expected, lines
    assert lines[:-1] and all(line.startswith("  | ") for line in lines[:-1]), lines


def test_no_script_cuts_a_pipe_short_under_pipefail():
  """setup_env.sh sets pipefail. `cmd | head` (or `| grep -q`) closes the pipe at its first
  lines; cmd then dies of SIGPIPE once its output passes the pipe's buffer, and the script stops
  without a word (continued_pretraining_table.sh did, on MRPC's dev text). `sed -n 1,Np` reads
  to the end."""
  early = re.compile(r"\|\s*(head\b|grep\s+(-\w*q|--quiet))")
  found = []
  for path in sorted(glob.glob(os.path.join(REPO_ROOT, "scripts", "*.sh"))):
    with open(path, encoding="utf-8") as f:
      text = f.read()
    if "setup_env.sh" in text or "pipefail" in text:
      found += ["%s:%d" % (os.path.basename(path), n) for n, line in
                enumerate(text.splitlines(), 1) if early.search(line.split("#", 1)[0])]
  assert not found, found


def test_pretrain_domain_checks_its_inputs_before_any_work(tmp_path):
  """Each knob and path gets one error line and exit 2, and the work folder is never made."""
  corpus = tmp_path / "short.txt"
  corpus.write_text("one document.\n\nanother one.\n", encoding="utf-8")
  for env, expected in (
      (dict(N_GPUS="two"), "N_GPUS takes a positive integer, got 'two'"),
      (dict(PRETRAIN_STEPS="0"), "PRETRAIN_STEPS takes a positive integer, got '0'"),
      (dict(PRETRAIN_LR="-1e-4"), "PRETRAIN_LR takes a number > 0, got '-1e-4'"),
      (dict(MASKING="wwm"), "MASKING takes token, whole_word, ngram or domain, got 'wwm'"),
      (dict(DOMAIN_VOCAB="yes"), "DOMAIN_VOCAB takes 0 or 1, got 'yes'"),
      (dict(DOMAIN_VOCAB="1"), "DOMAIN_VOCAB=1 needs BERT_DIR (a checkpoint whose [unusedN] "
       "slots take the words)"),
      (dict(BERT_DIR=str(tmp_path)),
       "BERT_DIR=%s: no bert_config.json (expected a Google release's layout: "
       "bert_config.json, vocab.txt, bert_model.ckpt.*)" % tmp_path),
      (dict(CORPUS=str(tmp_path / "missing.txt")),
       "CORPUS=%s: expected a non-empty utf-8 text file" % (tmp_path / "missing.txt")),
      (dict(CORPUS=str(corpus)),
       "CORPUS=%s: 2 documents (blank-line separated); every 10th is held out, so 10 or more "
       "are needed" % corpus),
      (dict(DATA_DIR=str(tmp_path)),
       "DATA_DIR=%s: no train.tsv (expected train.tsv and dev.tsv, text<TAB>label)" % tmp_path)):
    proc = subprocess.run(
        ["bash", os.path.join(REPO_ROOT, "scripts", "pretrain_domain.sh"), str(tmp_path / "work")],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, **env))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: pretrain_domain.sh: " + expected], (env, proc.stderr)
    assert not os.path.exists(str(tmp_path / "work"))
