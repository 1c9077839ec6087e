# coding=utf-8
"""Speed and memory of create_pretraining_data.py against the stock algorithm.

Prints a table of documents/sec (wall clock, process start to exit) and peak RSS for
create_pretraining_data.py at 1 and 2 workers and for benchmarks/stock_pretraining_data.py, on
the corpus and on the corpus repeated 10 times: our peak RSS should stay flat (claim: growth
< 20%) while the stock algorithm's grows with the corpus. (The stock baseline imports
TensorFlow to write its records, as stock does; our tool writes TFRecords without it.)

Peak RSS is the ru_maxrss that os.wait4 reports for the child: the largest resident set of the
child process and of any of its own (waited-for) worker processes, i.e. what
resource.getrusage(RUSAGE_CHILDREN) would say for that child alone.

Usage: python benchmarks/pretraining_data_bench.py --corpus=/path/to/corpus.txt
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TOOL = os.path.join(_REPO, "create_pretraining_data.py")
_STOCK = os.path.join(_REPO, "benchmarks", "stock_pretraining_data.py")


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


def run_child(command, log_path):
  """Runs `command`; returns (seconds, peak RSS in MB, captured output)."""
  start = time.time()
  with open(log_path, "w") as log:
    child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=_REPO)
    _, status, usage = os.wait4(child.pid, 0)
  seconds = time.time() - start
  with open(log_path) as log:
    output = log.read()
  if status != 0:
    raise RuntimeError("%s failed (status %d):\n%s" % (" ".join(command), status, output[-3000:]))
  return seconds, usage.ru_maxrss / 1024.0, output


def common_args(args, corpus, output):
  return ["--input_file=" + corpus, "--output_file=" + output, "--vocab_file=" + args.vocab_file,
          "--dupe_factor=%d" % args.dupe_factor, "--max_seq_length=%d" % args.max_seq_length]


def run_ours(args, corpus, workers, directory, tag):
  """One run of create_pretraining_data.py; returns (seconds, rss_mb, instances)."""
  command = [sys.executable, _TOOL] + common_args(
      args, corpus, os.path.join(directory, tag + ".tfrecord")) + [
          "--num_workers=%d" % workers, "--log_every_docs=100000000"]
  seconds, rss, output = run_child(command, os.path.join(directory, tag + ".log"))
  return seconds, rss, int(re.search(r"documents/sec\), (\d+) instances", output).group(1))


def run_stock(args, corpus, directory, tag):
  """One run of the stock baseline; returns (seconds, rss_mb, instances)."""
  command = [sys.executable, _STOCK] + common_args(
      args, corpus, os.path.join(directory, tag + ".tfrecord"))
  seconds, rss, output = run_child(command, os.path.join(directory, tag + ".log"))
  return seconds, rss, int(re.search(r"instances=(\d+)", output).group(1))


def growth(small, large):
  return "%+.1f%%" % (100.0 * (large - small) / small)


def measure(args, corpus, label, directory, with_stock):
  """Runs the tools on `corpus`; returns rows (corpus label, tool, seconds, docs/sec,
  instances, peak RSS MB)."""
  documents = count_documents(corpus)
  runs = []
  if with_stock:
    runs.append(("stock algorithm (1 process)", run_stock(args, corpus, directory,
                                                          "stock_" + label)))
  for workers in (1, 2):
    runs.append(("create_pretraining_data, %d worker%s" % (workers, "s" * (workers > 1)),
                 run_ours(args, corpus, workers, directory, "ours%d_%s" % (workers, label))))
  return [(label, name, seconds, documents / seconds, instances, rss)
          for name, (seconds, rss, instances) in runs]


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
  print("%-6s %-36s %8s %10s %10s %12s" % ("corpus", "tool", "seconds", "docs/sec",
                                           "instances", "peak RSS MB"))
  for row in rows:
    print("%-6s %-36s %8.1f %10.1f %10d %12.0f" % row)
  print()
  print("peak RSS growth from 1x to %dx corpus:" % args.repeat)
  peaks = {}
  for label, name, _, _, _, rss in rows:
    peaks.setdefault(name, []).append(rss)
  for name, values in peaks.items():
    if len(values) == 2:
      claim = "  (claim: < +20%)" if name.startswith("create") else ""
      print("  %-36s %6.0f MB -> %6.0f MB  %s%s" % (name, values[0], values[1],
                                                   growth(*values), claim))
  print("(outputs and logs in %s)" % directory)


if __name__ == "__main__":
  main()
