# coding=utf-8
"""Speed and memory of create_pretraining_data.py against the stock algorithm.

Prints a table of documents/sec (wall clock, process start to exit, so TensorFlow's import is
included for both tools) for create_pretraining_data.py at 1 and 2 workers and for
benchmarks/stock_pretraining_data.py, and the peak RSS of each run. It then runs both tools on
the corpus repeated 10 times, to show that our peak RSS stays flat (claim: growth < 20%) while
the stock algorithm's grows with the corpus.

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
  documents = count_documents(args.corpus)
  size_kb = os.path.getsize(args.corpus) / 1024.0
  print("corpus: %s (%.0f KB, %d documents); dupe_factor=%d, max_seq_length=%d; %d CPU(s)" %
        (args.corpus, size_kb, documents, args.dupe_factor, args.max_seq_length,
         os.cpu_count()))
  rows = [("stock algorithm (1 process)",) + run_stock(args, args.corpus, directory, "stock"),
          ("create_pretraining_data, 1 worker",) + run_ours(args, args.corpus, 1, directory,
                                                            "ours1"),
          ("create_pretraining_data, 2 workers",) + run_ours(args, args.corpus, 2, directory,
                                                             "ours2")]
  print()
  print("%-36s %8s %10s %10s %12s" % ("tool", "seconds", "docs/sec", "instances", "peak RSS MB"))
  for name, seconds, rss, instances in rows:
    print("%-36s %8.1f %10.1f %10d %12.0f" % (name, seconds, documents / seconds, instances,
                                               rss))

  large = repeat_corpus(args.corpus, args.repeat, directory)
  print()
  print("peak RSS, corpus vs %dx corpus (%.1f MB):" % (args.repeat,
                                                        os.path.getsize(large) / 2.0**20))
  ours_rss = rows[2][2]
  _, ours_large_rss, _ = run_ours(args, large, 2, directory, "ours_large")
  print("  create_pretraining_data, 2 workers: %.0f MB -> %.0f MB (%s; claim: < +20%%)" %
        (ours_rss, ours_large_rss, growth(ours_rss, ours_large_rss)))
  if not args.skip_stock_large:
    stock_rss = rows[0][2]
    _, stock_large_rss, _ = run_stock(args, large, directory, "stock_large")
    print("  stock algorithm:                    %.0f MB -> %.0f MB (%s)" %
          (stock_rss, stock_large_rss, growth(stock_rss, stock_large_rss)))
  print("(outputs and logs in %s)" % directory)


if __name__ == "__main__":
  main()
