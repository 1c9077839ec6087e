# coding=utf-8
"""README's continued-pretraining block, steps 0-2, as a shell script a measurement can run.

A user copies README.md's block under "### Continue pretraining on your domain text, then
fine-tune" and runs it. To measure what that user gets (scripts/rare_term_table.sh's `readme`
arm), this tool cuts the same bash block, up to its step 3 (fine-tuning, which the table runs
with its own flags and seeds), makes the paths of the project's scripts absolute so the block
runs in any folder, and prints it after `set -e`. Nothing else changes: flags, steps, rate, the
CUDA_VISIBLE_DEVICES line, the folders it writes (domain_start/, data/, domain_bert/).

  python benchmarks/readme_block.py [--readme=README.md] > block.sh
  (cd RUN_DIR && BERT_DIR=CHECKPOINT_DIR bash block.sh)   # RUN_DIR/corpus/*.txt: the text

A README without that heading, a fenced bash block under it, its step 3 or one of the block's
three commands (scripts/build_domain_vocab.py, create_pretraining_data.py,
run_pretraining_mgpu.py) is one `error:` line naming README's file (and the line, where
there is one) and what was expected, exit 2.
"""

import argparse
import os
import re
import shlex
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADING = "### Continue pretraining on your domain text, then fine-tune"
# The block's commands, in the order README runs them: steps 0, 1 and 2.
COMMANDS = ("scripts/build_domain_vocab.py", "create_pretraining_data.py",
            "run_pretraining_mgpu.py")
STEP_3 = "# 3."
_SCRIPT = re.compile(r"\bpython ((?:scripts/)?[a-z_]+\.py)\b")


def cut_block(lines, readme):
  """Lines of the bash block under HEADING, up to its step 3.

  Args:
    lines: README's lines, without their newlines.
    readme: README's path, for the error messages.

  Returns:
    list of str: the block's lines from its first to the one before STEP_3.

  Raises:
    ValueError: no HEADING, no ```bash block under it, no STEP_3 in the block.
  """
  if HEADING not in lines:
    raise ValueError("%s: no heading %r (the block to run sits under it)" % (readme, HEADING))
  start = lines.index(HEADING) + 1
  while start < len(lines) and not lines[start].startswith(("```", "#")):
    start += 1
  if start == len(lines) or lines[start].strip() != "```bash":
    raise ValueError("%s:%d: expected a ```bash block under %r" % (
        readme, min(start + 1, len(lines)), HEADING))
  block = []
  for number in range(start + 1, len(lines)):
    line = lines[number]
    if line.startswith(STEP_3):
      return block
    if line.startswith("```"):
      break
    block.append(line)
  raise ValueError("%s:%d: the block under %r has no line starting %r (fine-tuning, which the "
                   "measurement runs itself)" % (readme, start + 1, HEADING, STEP_3))


def runnable(block, readme, repo_root=REPO_ROOT):
  """The block as a script: `set -e`, then its lines with the project's scripts made absolute.

  Raises:
    ValueError: a command of COMMANDS is missing from the block.
  """
  text = "\n".join(block)
  found = _SCRIPT.findall(text)
  missing = [c for c in COMMANDS if c not in found]
  if missing:
    raise ValueError("%s: the block under %r runs no %s (expected steps 0-2: %s)" % (
        readme, HEADING, ", ".join(missing), ", ".join(COMMANDS)))
  absolute = _SCRIPT.sub(
      lambda m: "python " + shlex.quote(os.path.join(repo_root, m.group(1))), text)
  return "set -e\n" + absolute + "\n"


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--readme", default=os.path.join(REPO_ROOT, "README.md"),
                      help="The README to read (default: the project's).")
  args = parser.parse_args(argv)
  try:
    try:
      with open(args.readme, encoding="utf-8") as f:
        lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
      raise ValueError("--readme=%s: cannot read it as UTF-8 text (%s)" % (args.readme, e))
    sys.stdout.write(runnable(cut_block(lines, args.readme), args.readme))
  except ValueError as e:
    sys.stderr.write("error: readme_block.py: %s\n" % e)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
