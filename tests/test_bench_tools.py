"""The benchmark helpers that need neither torch nor a quiet machine: ISA level and peak bound
(benchmarks/machine.py), and that the Hugging Face side of finetune_side_by_side.py reads each
task's files exactly as run_classifier_mgpu.py's processors do; memory_bench's tower modes,
serving_worker's batching and serving_compare's flag checks; readme_block's cut of README's
continued-pretraining block."""

import os
import re
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))

from classifier import data as classifier_data  # pylint: disable=g-import-not-at-top,wrong-import-position
import hf_finetune  # pylint: disable=g-import-not-at-top,wrong-import-position
import isa_profile  # pylint: disable=g-import-not-at-top,wrong-import-position
import machine  # pylint: disable=g-import-not-at-top,wrong-import-position
import rare_terms  # pylint: disable=g-import-not-at-top,wrong-import-position
import readme_block  # pylint: disable=g-import-not-at-top,wrong-import-position

_AVX512_BF16 = {"avx2", "fma", "avx512f", "avx512_bf16"}


def test_isa_level_follows_the_onednn_cap():
  assert machine.isa_level(_AVX512_BF16, environ={}) == "AVX-512 + BF16"
  assert machine.isa_level(_AVX512_BF16, environ={"ONEDNN_MAX_CPU_ISA": "avx2"}) == "AVX2"
  assert machine.isa_level(_AVX512_BF16, environ={"DNNL_MAX_CPU_ISA": "AVX512_CORE"}) == "AVX-512"
  # A cap above what the CPU has changes nothing.
  assert machine.isa_level({"avx2", "fma"}, environ={"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}) == "AVX2"
  assert machine.isa_level({"avx2", "amx_tile", "avx512f"}, environ={}) == "AMX"


def test_theoretical_peak_is_cores_times_clock_times_flops_per_cycle():
  gflops, how = machine.theoretical_peak("fp32", level="AVX2", cores=2, clock=(3.0, "test"))
  assert gflops == 2 * 3.0 * 32
  assert "2 cores x 3.00 GHz (test) x 32 fp32 FLOP/cycle (AVX2)" == how
  # bf16 dot products double the lanes' work on AVX512-BF16; without them bf16 runs as fp32.
  intel = ("GenuineIntel", 6)
  assert machine.theoretical_peak("bf16", "AVX-512 + BF16", 2, (3.0, ""), intel)[0] == 2 * 3.0 * 128
  assert machine.theoretical_peak("bf16", "AVX-512", 2, (3.0, ""), intel)[0] == 2 * 3.0 * 64


def test_zen4_runs_avx512_on_256_bit_halves():
  zen4, zen5 = ("AuthenticAMD", 25), ("AuthenticAMD", 26)
  gflops, how = machine.theoretical_peak("fp32", "AVX-512 + BF16", 2, (3.0, "test"), zen4)
  assert gflops == 2 * 3.0 * 32 and how.endswith("(AVX-512 + BF16 on 256-bit halves)")
  assert machine.theoretical_peak("bf16", "AVX-512 + BF16", 2, (3.0, ""), zen4)[0] == 2 * 3.0 * 64
  assert machine.theoretical_peak("fp32", "AVX-512", 2, (3.0, ""), zen5)[0] == 2 * 3.0 * 64
  # Capped to AVX2, Zen 4 is at AVX2's rate like every other CPU.
  assert machine.theoretical_peak("fp32", "AVX2", 2, (3.0, ""), zen4)[0] == 2 * 3.0 * 32


def test_isa_profile_sorts_traced_ops_into_kinds():
  kinds = {op: isa_profile.op_kind(op) for op in (
      "_MklNativeFusedMatMul", "BatchMatMulV2", "TanhGrad", "AddV2", "RandomUniform", "Mean",
      "_MklSoftmax", "_MklTranspose", "GatherV2", "ApplyAdam", "L2Loss", "_XlaRun", "Const")}
  assert kinds == {"_MklNativeFusedMatMul": "matmul", "BatchMatMulV2": "matmul",
                   "TanhGrad": "elementwise", "AddV2": "elementwise",
                   "RandomUniform": "dropout-rng", "Mean": "reduction",
                   "_MklSoftmax": "reduction", "_MklTranspose": "layout", "GatherV2": "layout",
                   "ApplyAdam": "optimizer", "L2Loss": "optimizer", "_XlaRun": "xla",
                   "Const": "other"}


def test_isa_profile_sums_op_time_per_step_by_kind():
  from tensorflow.core.framework import step_stats_pb2  # pylint: disable=g-import-not-at-top

  def step(*ops):
    stats = step_stats_pb2.StepStats()
    device = stats.dev_stats.add(device="/cpu:0")
    for name, op, micros in ops:
      device.node_stats.add(node_name=name, timeline_label="%s = %s(x)" % (name, op),
                            all_end_rel_micros=micros)
    return stats

  steps = [step(("a", "_MklMatMul", 3000), ("b", "Mul", 1000), ("c", "Mul", 500)),
           step(("a", "_MklMatMul", 5000), ("b", "Mul", 1500))]
  by_op = isa_profile.time_by_op(steps)
  assert by_op == {"_MklMatMul": 4.0, "Mul": 1.5}
  ms = isa_profile.time_by_kind(by_op)
  assert ms["matmul"] == 4.0 and ms["elementwise"] == 1.5 and ms["optimizer"] == 0.0
  top = isa_profile.format_top_ops("native", {"ops": by_op, "kinds": ms, "matmul_gflop": 2.0}, 1)
  assert len(top.splitlines()) == 3 and "_MklMatMul" in top and "72.7%" in top  # 4 of 5.5 ms
  assert "500 GFLOP/s" in top  # 2 GFLOP in 4 ms
  # Every base variant also runs capped to AVX2, with the cap's environment.
  table = isa_profile.variants()
  assert table["avx2_eigen"][0] == dict(machine.AVX2_CAP_ENV, TF_ENABLE_ONEDNN_OPTS="0")
  assert table["avx2"] == (machine.AVX2_CAP_ENV, [])


def test_max_clock_from_the_environment():
  assert machine.max_clock_ghz({"BENCH_MAX_CLOCK_GHZ": "3.7"}) == (3.7, "BENCH_MAX_CLOCK_GHZ")
  ghz, _ = machine.max_clock_ghz({})
  assert 0.5 < ghz <= machine.CLOCK_CEILING_GHZ


def _write(path, lines):
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in lines))


@pytest.mark.parametrize("task", sorted(hf_finetune.TASKS))
def test_hf_side_reads_what_our_processors_read(tmp_path, task):
  rows = [("1", "He said \"yes\".", "He said no."), ("0", "a\u00e9 b", "c d")]
  if task == "mrpc":
    _write(tmp_path / "train.tsv", ["\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"] +
           ["%s\t1\t2\t%s\t%s" % r for r in rows])
    _write(tmp_path / "test.tsv", ["index\t#1 ID\t#2 ID\t#1 String\t#2 String"] +
           ["%d\t1\t2\t%s\t%s" % (i, r[1], r[2]) for i, r in enumerate(rows)])
    processor = classifier_data.MrpcProcessor()
  elif task == "cola":
    _write(tmp_path / "train.tsv", ["src\t%s\t*\t%s" % (r[0], r[1]) for r in rows])
    processor = classifier_data.ColaProcessor()
  else:
    labels = {"1": "positive", "0": "negative"}
    _write(tmp_path / "train.tsv", ["%s\t%s" % (r[1], labels[r[0]]) for r in rows])
    _write(tmp_path / "test.tsv", ["qid\ttext_a"] + ["%d\t%s" % (i, r[1]) for i, r in
                                                     enumerate(rows)])
    processor = classifier_data.TsvProcessor(str(tmp_path))
  spec = hf_finetune.TASKS[task]
  ours = processor.get_train_examples(str(tmp_path))
  texts_a, texts_b, labels = hf_finetune.read_split(spec, str(tmp_path / "train.tsv"), False)
  assert texts_a == [e.text_a for e in ours]
  assert (texts_b or [None] * len(ours)) == [e.text_b for e in ours]
  assert labels == [e.label for e in ours]
  assert spec.labels == list(processor.get_labels())
  if spec.test_text_a is not None:
    ours_test = processor.get_test_examples(str(tmp_path))
    texts_a, texts_b, _ = hf_finetune.read_split(spec, str(tmp_path / "test.tsv"), True)
    assert texts_a == [e.text_a for e in ours_test]
    assert (texts_b or [None] * len(ours_test)) == [e.text_b for e in ours_test]


def test_side_by_side_table_gives_mean_accuracy_mcc_and_job_time():
  import finetune_side_by_side  # pylint: disable=g-import-not-at-top
  jobs = [{"side": "ours", "seed": 1, "eval_accuracy": 0.70, "mcc": 0.20, "wall_seconds": 400.0,
           "load": (0.5, 2.0)},
          {"side": "ours", "seed": 2, "eval_accuracy": 0.74, "mcc": 0.30, "wall_seconds": 420.0,
           "load": (2.0, 2.1)},
          {"side": "hf", "seed": 1, "eval_accuracy": 0.72, "wall_seconds": 500.0,
           "load": (2.0, 2.0)},  # a record from before MCC was reported
          {"side": "hf", "seed": 2, "eval_accuracy": 0.70, "mcc": 0.10, "wall_seconds": 520.0,
           "load": (2.0, 2.0)}]
  table = finetune_side_by_side.format_table(jobs, ["ours", "hf"], [1, 2]).splitlines()
  assert table[0].split()[-6:] == ["mean", "acc", "mean", "MCC", "mean", "job"]
  assert table[1].split()[-3:] == ["0.7200", "0.2500", "410.0s"]
  assert table[2].split()[-3:] == ["0.7100", "n/a", "510.0s"]
  assert finetune_side_by_side.job_line(jobs[0]) == (
      "dev accuracy 0.7000, MCC 0.200, job 400.0 s (load 0.50 -> 2.00)")


def test_update_parity_both_sides_make_the_same_updates(tmp_path, capsys):
  """A tiny random BERT (tanh GELU on both sides): 6 updates on the same batches agree."""
  transformers = pytest.importorskip("transformers")
  torch = pytest.importorskip("torch")
  import update_parity  # pylint: disable=g-import-not-at-top
  torch.manual_seed(0)
  words = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "is", "red"]
  model_dir = tmp_path / "hf"
  transformers.BertModel(transformers.BertConfig(
      vocab_size=5 + len(words), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
      intermediate_size=64, max_position_embeddings=32, hidden_act="gelu_new")).save_pretrained(
          str(model_dir))
  _write(model_dir / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words)
  rng = np.random.RandomState(1)
  data_dir = tmp_path / "cola"
  data_dir.mkdir()
  _write(data_dir / "train.tsv", ["src\t%d\t*\t%s" % (rng.randint(2), " ".join(
      rng.choice(words, rng.randint(2, 9)))) for _ in range(24)])
  update_parity.main(["--task=cola", "--data_dir=%s" % data_dir, "--model_dir=%s" % model_dir,
                      "--steps=6", "--batch_size=4", "--max_seq_length=12",
                      "--learning_rate=1e-3", "--num_train_steps=10", "--num_warmup_steps=2",
                      "--threads=1"])
  lines = capsys.readouterr().out.splitlines()
  rows = [[float(x) for x in line.split()[1:]] for line in lines[1:7]]
  assert len(rows) == 6 and rows[0][0] != rows[-1][0]  # it trained
  # Clipped updates too: their global norm counts each embedding row once, as torch's does.
  assert sum(norm > 1.0 for _, _, _, norm in rows) >= 1, lines
  assert max(abs(ours - hf) for ours, hf, _, _ in rows) < 1e-5, lines


def test_memory_bench_tower_modes_give_one_peak_per_tower_device():
  """memory_bench's tower modes: a peak for each tower's device; `allreduce` keeps a full replica
  of the variables and Adam slots on each device, `shared` one copy spread over them."""
  import memory_bench  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top
  import tower_utils  # pylint: disable=g-import-not-at-top
  config = modeling.BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=1,
                               num_attention_heads=4, intermediate_size=256,
                               max_position_embeddings=64)
  measured = {reduction: memory_bench.measure_spec(
      config, 32, 4, tower_utils.parallel_spec(2, reduction=reduction), timed_steps=0)
              for reduction in ("shared", "allreduce")}
  for m in measured.values():
    assert len(m.peaks) == 2 and min(m.peaks) > 100e3, m.peaks  # activations, not a stray tensor
  replica = measured["allreduce"].variable_bytes
  spread = measured["shared"].variable_bytes
  # 3 copies (weights, Adam m and v) of the BERT parameters, at least, on each replica.
  assert min(replica) > 3 * 4 * (100 * 64 + 12 * 64 * 64), replica  # words, one layer
  np.testing.assert_allclose(replica[0], replica[1], rtol=1e-3)
  np.testing.assert_allclose(sum(spread), replica[0], rtol=1e-3)
  assert min(spread) > 0.2 * replica[0], spread  # the balancer used both devices


def test_serving_worker_batches_keep_pairs_together_and_in_order():
  import serving_worker  # pylint: disable=g-import-not-at-top
  texts = {"text_a": ["a%d" % i for i in range(5)], "text_b": ["b%d" % i for i in range(5)]}
  assert list(serving_worker.batches(texts, 2)) == [
      (["a0", "a1"], ["b0", "b1"]), (["a2", "a3"], ["b2", "b3"]), (["a4"], ["b4"])]
  assert list(serving_worker.batches({"text_a": ["x", "y"], "text_b": None}, 32)) == [
      (["x", "y"], None)]


@pytest.mark.parametrize("args,message", [
    ([], "--run_dir is required (a classifier run with --do_export)"),
    (["--processes=0", "--threads=1"], "--processes=0, --threads=1: expected 1 or more of each"),
    (["--batch_sizes=1,abc"], "--batch_sizes=1,abc: expected integers >= 1 separated by commas"),
    (["--batch_sizes=0"], "--batch_sizes=0: expected integers >= 1"),
    (["--serve_rounds=0"], "--serve_rounds=0: expected an integer >= 1"),
    (["--inter_op_threads=0"], "--inter_op_threads=0: expected an integer >= 1"),
    (["--tolerance=0"], "--tolerance=0: expected a number > 0"),
    (["--precisions=fp16"], "--precisions=fp16: expected auto, or fp32 and/or bf16")])
def test_serving_compare_checks_every_flag_before_any_work(args, message):
  """main stops at the flag, before it reads --run_dir (here a folder that does not exist),
  converts or serves; these were checked after the conversions (10-35 s), or never. main's
  InputError is the one error: line of cli.run_main (tested with a failed step below)."""
  import run_classifier_mgpu  # pylint: disable=g-import-not-at-top,unused-import
  from core.errors import InputError  # pylint: disable=g-import-not-at-top
  from test_flags_doc import load_script, own_flags  # pylint: disable=g-import-not-at-top
  script = os.path.join(os.path.dirname(machine.__file__), "serving_compare.py")
  with own_flags() as fv:
    serving_compare = load_script(script)
    fv([script] + (["--run_dir=/nonexistent"] if args else []) + args)
    with pytest.raises(InputError, match="^" + re.escape(message)):
      serving_compare.main(None)


def test_serving_compare_rebuilds_each_contender_with_only_what_it_supports():
  """The bf16 export of a run exported with --export_tflite drops TFLite (its converter fails on
  bfloat16), the TFLite one of a bf16 run is fp32, and --long_text=sliding has no TFLite."""
  import run_classifier_mgpu  # pylint: disable=g-import-not-at-top,unused-import
  from test_flags_doc import load_script, own_flags  # pylint: disable=g-import-not-at-top
  with own_flags():
    plan = load_script(os.path.join(os.path.dirname(machine.__file__),
                                    "serving_compare.py")).export_plan
  tflite_run = {"checkpoint": "c", "precision": "fp32", "tflite": True}
  assert plan(tflite_run, ["fp32", "bf16"]) == {
      "fp32": None, "tflite": None, "bf16": dict(tflite_run, precision="bf16", tflite=False)}
  bf16_run = {"checkpoint": "c", "precision": "bf16", "tflite": False}
  assert plan(bf16_run, ["fp32", "bf16"]) == {
      "fp32": dict(bf16_run, precision="fp32"), "bf16": None,
      "tflite": dict(bf16_run, precision="fp32", tflite=True)}
  assert plan({"checkpoint": "c"}, ["fp32"]) == {  # an export from before the fields
      "fp32": None, "tflite": {"checkpoint": "c", "precision": "fp32", "tflite": True}}
  assert plan({"checkpoint": "c", "long_text": "sliding"}, ["fp32"]) == {"fp32": None}


def test_serving_compare_reports_a_failed_step_in_one_line_and_keeps_its_stderr(tmp_path):
  """A conversion that fails (here: the run's checkpoint is gone) ends the run with one line
  naming the step and its last stderr line; the whole stderr is kept in failed_step.log."""
  import json  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  assets = tmp_path / "run" / "saved_model" / "assets"
  assets.mkdir(parents=True)
  (assets / "export_config.json").write_text(json.dumps(
      {"checkpoint": str(tmp_path / "gone" / "model.ckpt-1"), "do_lower_case": True}))
  (tmp_path / "cola").mkdir()
  (tmp_path / "cola" / "dev.tsv").write_text("gj04\t1\t\tThe sailors rode the breeze.\n")
  script = os.path.join(os.path.dirname(machine.__file__), "serving_compare.py")
  work = tmp_path / "work"
  proc = subprocess.run([sys.executable, script, "--run_dir=%s" % (tmp_path / "run"),
                         "--work_dir=%s" % work, "--precisions=fp32", "--task_name=cola",
                         "--data_dir=%s" % (tmp_path / "cola")],
                        capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
  assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-2000:]
  assert errors[0].startswith("error: convert_to_hf.py failed: ")
  assert errors[0].endswith("(its whole stderr: %s)" % (work / "failed_step.log"))
  kept = (work / "failed_step.log").read_text()
  assert errors[0][len("error: convert_to_hf.py failed: "):].split(" (its whole")[0] in kept
  assert "Traceback" not in proc.stderr



_CHINESE_VOCAB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              "vocab", "chinese_vocab.txt")


def _chinese_sentences(path, per_topic=16):
  """A sentence file for the Chinese rare-term task: per topic `per_topic` usable sentences that
  name one of its nouns once, and sentences that must not become templates (two topics' nouns,
  a noun twice, too short, too long). Returns the usable sentences, by topic."""
  usable = {}
  lines = []
  for topic, nouns in rare_terms.TOPICS_ZH.items():
    usable[topic] = ["第%d次来这里，%s让我很满意。" % (i, nouns[i % 5]) for i in range(per_topic)]
    lines.append("".join(usable[topic][:4]))  # several sentences on one line
    lines += usable[topic][4:]
  lines += ["酒店的房间很好，键盘也不错。", "房间房间都很干净啊。", "房间好。", "书" * 50 + "作者。"]
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return usable


def test_chinese_rare_term_task_uses_real_sentences_and_unseen_names(tmp_path):
  usable = _chinese_sentences(tmp_path / "sentences.txt")
  task = rare_terms.build(str(tmp_path / "task"), _CHINESE_VOCAB, topic_set="zh_reviews",
                          term_sentences=3, sentence_files=[str(tmp_path / "sentences.txt")])
  assert task["topics"] == ["hotel", "laptop", "book", "skincare"]
  assert len(task["terms"]) == 32 and task["test_rows"] == {"term": 224, "control": 224}
  domain = (tmp_path / "task" / "domain.txt").read_text(encoding="utf-8")
  labeled = "".join((tmp_path / "task" / name).read_text(encoding="utf-8")
                    for name in ("train.tsv", "dev.tsv"))
  everything = (tmp_path / "sentences.txt").read_text(encoding="utf-8")
  for term, topic in task["terms"].items():
    assert len(term) == 3 and term not in everything and term not in labeled
    lines = [line for line in domain.splitlines() if term in line]
    assert len(lines) == 3
    for line in lines:  # the term stands where a noun of its topic stood in a real sentence
      assert any(line.replace(term, noun) in usable[topic] for noun in rare_terms.TOPICS_ZH[topic])
  for line in labeled.splitlines():
    text, topic = line.split("\t")
    nouns = [n for n in rare_terms.TOPICS_ZH[topic] if n in text]
    assert len(nouns) == 1
    assert (any(text.replace(nouns[0], n) in usable[topic] for n in rare_terms.TOPICS_ZH[topic])
            or text.replace(nouns[0], "{x}") in rare_terms.NEUTRAL_FRAMES_ZH[:rare_terms.TRAIN_FRAMES])
  for left_out in ("也不错", "都很干净", "好。", "书书书"):  # two topics, twice, short, long
    assert left_out not in domain + labeled
  again = rare_terms.build(str(tmp_path / "again"), _CHINESE_VOCAB, topic_set="zh_reviews",
                           term_sentences=3, sentence_files=[str(tmp_path / "sentences.txt")])
  assert again == task


def test_chinese_rare_term_task_refuses_too_few_sentences_in_one_line(tmp_path, capsys):
  _chinese_sentences(tmp_path / "few.txt", per_topic=rare_terms.ZH_MIN_TEMPLATES - 1)
  status = rare_terms.main(["build", "--output_dir=%s" % (tmp_path / "task"),
                            "--vocab_file=%s" % _CHINESE_VOCAB, "--topic_set=zh_reviews",
                            "--sentence_files=%s" % (tmp_path / "few.txt")])
  assert status == 2
  assert capsys.readouterr().err == (
      "error: rare_terms.py: --sentence_files: %d sentences name a hotel noun (酒店/房间/前台), "
      "%d are needed\n" % (rare_terms.ZH_MIN_TEMPLATES - 1, rare_terms.ZH_MIN_TEMPLATES))
  assert not os.path.exists(str(tmp_path / "task" / "domain.txt"))
  assert rare_terms.main(["build", "--output_dir=%s" % (tmp_path / "task"),
                          "--vocab_file=%s" % _CHINESE_VOCAB, "--topic_set=zh_reviews"]) == 2
  assert "needs --sentence_files" in capsys.readouterr().err
  english = os.path.join(os.path.dirname(_CHINESE_VOCAB), "english_uncased_vocab.txt")
  _chinese_sentences(tmp_path / "enough.txt")
  assert rare_terms.main(["build", "--output_dir=%s" % (tmp_path / "task"),
                          "--vocab_file=%s" % english, "--topic_set=zh_reviews",
                          "--sentence_files=%s" % (tmp_path / "enough.txt")]) == 2
  assert "expected a Chinese vocabulary" in capsys.readouterr().err


def test_readme_block_is_the_readmes_block_up_to_step_3_with_absolute_script_paths(capsys):
  """What rare_term_table.sh's readme arm runs: README's lines as they are, but for the paths
  of the three scripts, which exist."""
  assert readme_block.main([]) == 0
  script = capsys.readouterr().out.splitlines()
  assert script[0] == "set -e"
  with open(os.path.join(readme_block.REPO_ROOT, "README.md"), encoding="utf-8") as f:
    readme = f.read().splitlines()
  start = readme.index(readme_block.HEADING) + 2  # the heading, a blank line, ```bash
  assert readme[start] == "```bash"
  step_3 = next(i for i in range(start, len(readme)) if readme[i].startswith("# 3."))
  root = readme_block.REPO_ROOT + "/"
  assert [line.replace(root, "") for line in script[1:]] == readme[start + 1:step_3]
  for command in readme_block.COMMANDS:
    path = root + command
    assert os.path.isfile(path) and sum(("python %s " % path) in line for line in script) == 1


@pytest.mark.parametrize("text, expected", [
    ("# Title\n", "no heading '%s'" % readme_block.HEADING),
    ("%s\n\nSome prose.\n" % readme_block.HEADING, ":3: expected a ```bash block under"),
    ("%s\n\n```bash\npython run_pretraining_mgpu.py\n```\n" % readme_block.HEADING,
     "has no line starting '# 3.'"),
    ("%s\n\n```bash\npython create_pretraining_data.py\n# 3. fine-tune\n```\n" %
     readme_block.HEADING, "runs no scripts/build_domain_vocab.py, run_pretraining_mgpu.py"),
])
def test_a_readme_without_the_block_is_one_error_line(tmp_path, capsys, text, expected):
  readme = tmp_path / "README.md"
  readme.write_text(text, encoding="utf-8")
  assert readme_block.main(["--readme=%s" % readme]) == 2
  out, err = capsys.readouterr()
  assert out == "" and len(err.splitlines()) == 1 and err.startswith(
      "error: readme_block.py: %s" % readme) and expected in err, err
