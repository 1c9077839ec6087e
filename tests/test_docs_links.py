"""Every relative Markdown link of README.md, benchmarks/README.md and docs/**/*.md resolves.

A link `[text](path)` must name a file or folder that exists (relative to the page), and a
link with `#anchor` (`[text](page.md#anchor)`, `[text](#anchor)`) must name a heading of that
page, spelled as GitHub spells its anchors: lowercase, punctuation dropped, spaces to hyphens,
`-1`, `-2`, ... after a repeated heading. Links to web addresses, and anything inside code
(fenced blocks and `inline code`), are not checked.
"""

import glob
import os
import re

from test_layout import REPO

_LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)\)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def doc_pages():
  """The Markdown pages a reader lands on: README.md, benchmarks/README.md, docs/**/*.md."""
  pages = [os.path.join(REPO, "README.md"), os.path.join(REPO, "benchmarks", "README.md")]
  return pages + sorted(glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True))


def _prose_lines(text):
  """The page's lines outside fenced code blocks, with inline code spans blanked."""
  lines, fenced = [], False
  for line in text.split("\n"):
    if _FENCE.match(line):
      fenced = not fenced
      continue
    if not fenced:
      lines.append(re.sub(r"`+[^`]*`+", "``", line))
  return lines


def anchor_of(heading):
  """GitHub's anchor for a heading's text: `## Serving (fp32)` -> `serving-fp32`."""
  text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # A link keeps its text.
  text = re.sub(r"[^\w\- ]", "", text.lower())
  return text.replace(" ", "-")


def anchors(path):
  """The set of anchors of a Markdown page's headings (repeats get -1, -2, ...)."""
  seen, result = {}, set()
  with open(path, encoding="utf-8") as f:
    text = f.read()
  fenced = False
  for line in text.split("\n"):
    if _FENCE.match(line):
      fenced = not fenced
      continue
    match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
    if match and not fenced:
      anchor = anchor_of(match.group(1))
      count = seen.get(anchor, 0)
      seen[anchor] = count + 1
      result.add(anchor if count == 0 else "%s-%d" % (anchor, count))
  return result


def broken_links(path):
  """(line, link, why) for each relative link of the page at `path` that does not resolve."""
  with open(path, encoding="utf-8") as f:
    text = f.read()
  broken = []
  for number, line in enumerate(_prose_lines(text), 1):
    for target in _LINK.findall(line):
      if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
        continue
      file_part, _, anchor = target.partition("#")
      resolved = (os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                  if file_part else path)
      if not os.path.exists(resolved):
        broken.append((number, target, "no such file"))
      elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
        broken.append((number, target, "no such heading"))
  return broken


def test_every_relative_link_and_anchor_resolves():
  broken = {os.path.relpath(page, REPO): broken_links(page) for page in doc_pages()}
  broken = {page: links for page, links in broken.items() if links}
  assert not broken, broken


def test_the_check_finds_a_broken_file_and_a_broken_anchor(tmp_path):
  (tmp_path / "other.md").write_text(
      "# Other page\n\n## Speed: 2 GPUs (fp16)\n\n## Speed: 2 GPUs (fp16)\n")
  page = tmp_path / "page.md"
  page.write_text(
      "# Page\n\n## A `code` heading\n\n"
      "[ok](other.md#speed-2-gpus-fp16) [ok](other.md#speed-2-gpus-fp16-1) [ok](#a-code-heading)\n"
      "[web](https://example.com/x.md#nothing) `[in code](missing.md)`\n"
      "```\n[in a block](missing.md)\n```\n"
      "[gone](missing.md) [bad anchor](other.md#speed) [bad here](#nope)\n")
  assert [(link, why) for _, link, why in broken_links(str(page))] == [
      ("missing.md", "no such file"), ("other.md#speed", "no such heading"),
      ("#nope", "no such heading")]
