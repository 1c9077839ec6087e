"""Prints the fault table: each case of tests/fault_cases.py, its outcome class and its line.

Run through scripts/fault_table.sh. Exit status 0 when every case ended as expected (a clear
error, or handled), 1 otherwise. `--list` names every case (script, expected end) without
building or running anything (and without importing TensorFlow).
"""

import argparse
import collections
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import fault_cases  # pylint: disable=g-import-not-at-top,wrong-import-position

GOOD = ("clear error", "handled", "skipped")
CLASSES = ("clear error", "handled", "traceback", "hang", "silent", "damaged", "unclear",
           "skipped")


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("names", nargs="*", help="run only cases whose name contains one of these")
  parser.add_argument("--keep", help="build and keep everything in this directory")
  parser.add_argument("--parallel", type=int, default=2, help="cases run at once")
  parser.add_argument("--list", action="store_true",
                      help="print the cases (name, script, expected end) and exit")
  args = parser.parse_args()
  cases = [c for c in fault_cases.all_cases()
           if not args.names or any(n in c.name for n in args.names)]
  if args.list:
    for c in cases:
      print("%-46s %-28s %s%s" % (c.name, c.script, c.expect, " (root)" if c.needs_root else ""))
    print("%d cases" % len(cases))
    return 0
  root = args.keep or tempfile.mkdtemp(prefix="fault-table-")
  start = time.time()
  print("Building the fixtures in %s ..." % root, flush=True)
  world = fault_cases.World(os.path.join(root, "world")).build(args.parallel)
  print("%-42s %-5s %-12s %6s  %s" % ("case", "exit", "outcome", "secs", "error line / why"))

  def show(case, result):
    text = result.why if result.outcome not in ("clear error",) else result.error_line
    if result.outcome == "handled" and not text:
      text = "ok"
    print("%-42s %-5s %-12s %6.1f  %s" % (case.name, result.returncode, result.outcome,
                                         result.seconds, (text or "")[:300]), flush=True)

  try:
    results = fault_cases.run_cases(world, cases, os.path.join(root, "cases"), args.parallel,
                                    on_result=show)
  finally:
    world.close()
  totals = collections.Counter(r.outcome for r in results.values())
  print("\n%d cases in %.0f s: %s" % (len(results), time.time() - start, ", ".join(
      "%d %s" % (totals[c], c) for c in CLASSES if totals[c] or c in GOOD[:2])))
  print("target: 0 traceback, 0 hang, 0 silent, 0 damaged, 0 unclear")
  if not args.keep:
    shutil.rmtree(root, ignore_errors=True)
  return 0 if all(r.outcome in GOOD for r in results.values()) else 1


if __name__ == "__main__":
  sys.exit(main())
