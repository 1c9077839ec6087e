# coding=utf-8
"""Speed and memory of create_pretraining_data.py against the stock algorithm.

Prints a table of documents/sec (wall clock, process start to exit) and peak RSS for
create_pretraining_data.py at 1 and 2 workers and for benchmarks/stock_pretraining_data.py, on
the corpus and on the corpus repeated 10 times: our peak RSS should stay flat (claim: growth
< 20%) while the stock algorithm's grows with the corpus. (The stock baseline imports
TensorFlow to write its records, as stock does; our tool writes TFRecords without it.)

Peak RSS is the ru_maxrss that os.wait4 reports for the child (what
resource.getrusage(RUSAGE_CHILDREN) would say for that child alone). Our tool's worker processes
are children of its forkserver, which wait4 does not see, so their peak RSS and CPU time are
taken from the tool's summary log line, which they report themselves. CPU seconds make runs
comparable on a busy machine, where wall clock depends on what else runs.

Usage: python benchmarks/pretraining_data_bench.py --corpus=/path/to/corpus.txt
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TOOL = os.path.join(_REPO, "create_pretraining_data.py")
_STOCK = os.path.join(_REPO, "benchmarks", "stock_pretraining_data.py")
sys.path.insert(0, _REPO)

from core import children  # pylint: disable=g-import-not-at-top,wrong-import-position


def count_documents(path):
  """Documents as both tools define them: runs of non-blank lines."""
  documents, in_document = 0, False
  with open(path, "rb") as reader:
    for line in reader:
      blank = not line.strip()
      documents += not blank and not in_document
      in_document = not blank
  return documents


def repeat_corpus(path, times, directory):
  """Writes `path` `times` times into one file (blank line between copies); returns its path."""
  with open(path, "rb") as reader:
    text = reader.read().rstrip(b"\n") + b"\n\n"
  repeated = os.path.join(directory, "corpus_x%d.txt" % times)
  with open(repeated, "wb") as writer:
    for _ in range(times):
      writer.write(text)
  return repeated


Result = collections.namedtuple("Result", ["seconds", "cpu_seconds", "instances", "peak_rss_mb",
                                           "all_processes_mb"])


def run_child(command, log_path):
  """Runs `command`; returns (seconds, CPU seconds, peak RSS in MB, captured output)."""
  start = time.time()
  with open(log_path, "w") as log:
    child = children.start(command, stdout=log, stderr=subprocess.STDOUT, cwd=_REPO)
    _, status, usage = os.wait4(child.pid, 0)
  seconds = time.time() - start
  with open(log_path) as log:
    output = log.read()
  if status != 0:
    raise RuntimeError("%s failed (status %d):\n%s" % (" ".join(command), status, output[-3000:]))
  return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, output


def common_args(args, corpus, output):
  return ["--input_file=" + corpus, "--output_file=" + output, "--vocab_file=" + args.vocab_file,
          "--dupe_factor=%d" % args.dupe_factor, "--max_seq_length=%d" % args.max_seq_length]


def run_ours(args, corpus, workers, directory, tag):
  """One run of create_pretraining_data.py; returns a Result.

  Its workers are children of a forkserver, invisible to os.wait4, so their CPU time and peak
  RSS come from the tool's own summary line.
  """
  command = [sys.executable, _TOOL] + common_args(
      args, corpus, os.path.join(directory, tag + ".tfrecord")) + [
          "--num_workers=%d" % workers, "--log_every_docs=100000000"]
  seconds, cpu, rss, output = run_child(command, os.path.join(directory, tag + ".log"))
  instances = int(re.search(r"documents/sec\), (\d+) instances", output).group(1))
  total = rss
  workers_line = re.search(r"at most (\d+) MB in each of (\d+) workers; workers used "
                           r"([\d.]+) CPU seconds", output)
  if workers_line:
    worker_rss, count, worker_cpu = workers_line.groups()
    cpu += float(worker_cpu)
    rss = max(rss, float(worker_rss))
    total += int(count) * float(worker_rss)
  return Result(seconds, cpu, instances, rss, total)


def run_stock(args, corpus, directory, tag):
  """One run of the stock baseline; returns a Result."""
  command = [sys.executable, _STOCK] + common_args(
      args, corpus, os.path.join(directory, tag + ".tfrecord"))
  seconds, cpu, rss, output = run_child(command, os.path.join(directory, tag + ".log"))
  instances = int(re.search(r"instances=(\d+)", output).group(1))
  return Result(seconds, cpu, instances, rss, rss)


def growth(small, large):
  return "%+.1f%%" % (100.0 * (large - small) / small)


def measure(args, corpus, label, directory, with_stock):
  """Runs the tools on `corpus`; returns rows (corpus label, tool, Result, docs/sec)."""
  documents = count_documents(corpus)
  runs = []
  if with_stock:
    runs.append(("stock algorithm (1 process)", run_stock(args, corpus, directory,
                                                          "stock_" + label)))
  for workers in (1, 2):
    runs.append(("create_pretraining_data, %d worker%s" % (workers, "s" * (workers > 1)),
                 run_ours(args, corpus, workers, directory, "ours%d_%s" % (workers, label))))
  return [(label, name, result, documents / result.seconds) for name, result in runs]


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--corpus", required=True, help="Text corpus to benchmark on.")
  parser.add_argument("--vocab_file", default=os.path.join(_REPO, "vocab", "chinese_vocab.txt"))
  parser.add_argument("--dupe_factor", type=int, default=10, help="Stock default: 10.")
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--repeat", type=int, default=10, help="Size of the large corpus.")
  parser.add_argument("--skip_stock_large", action="store_true",
                      help="Do not run the stock baseline on the large corpus (slow).")
  args = parser.parse_args()

  directory = tempfile.mkdtemp(prefix="pretraining_data_bench_")
  large = repeat_corpus(args.corpus, args.repeat, directory)
  print("corpus 1x: %s (%.0f KB, %d documents); %dx: the same repeated (%.1f MB)" %
        (args.corpus, os.path.getsize(args.corpus) / 1024.0, count_documents(args.corpus),
         args.repeat, os.path.getsize(large) / 2.0**20))
  print("dupe_factor=%d, max_seq_length=%d, %d CPU(s); seconds are wall clock, process start "
        "to exit" % (args.dupe_factor, args.max_seq_length, os.cpu_count()))
  rows = measure(args, args.corpus, "1x", directory, True)
  rows += measure(args, large, "%dx" % args.repeat, directory, not args.skip_stock_large)
  print()
  print("%-6s %-35s %8s %8s %9s %9s %8s %9s" % (
      "corpus", "tool", "wall s", "CPU s", "docs/sec", "instances", "RSS MB", "all procs"))
  for label, name, result, docs_per_second in rows:
    print("%-6s %-35s %8.1f %8.1f %9.1f %9d %8.0f %9.0f" % (
        label, name, result.seconds, result.cpu_seconds, docs_per_second, result.instances,
        result.peak_rss_mb, result.all_processes_mb))
  print("(RSS MB: peak of the largest process; all procs: the parent's plus every worker's "
        "peak)")
  print()
  print("peak RSS growth from 1x to %dx corpus:" % args.repeat)
  peaks = collections.OrderedDict()
  for _, name, result, _ in rows:
    peaks.setdefault(name, []).append(result)
  for name, (small, large) in ((n, r) for n, r in peaks.items() if len(r) == 2):
    line = "  %-35s largest process %4.0f -> %4.0f MB (%s)" % (
        name, small.peak_rss_mb, large.peak_rss_mb, growth(small.peak_rss_mb, large.peak_rss_mb))
    if small.all_processes_mb != small.peak_rss_mb:
      line += ", all processes %4.0f -> %4.0f MB (%s)" % (
          small.all_processes_mb, large.all_processes_mb,
          growth(small.all_processes_mb, large.all_processes_mb))
    print(line + ("  [claim: < +20%]" if name.startswith("create") else ""))
  print("(outputs and logs in %s)" % directory)


if __name__ == "__main__":
  main()
