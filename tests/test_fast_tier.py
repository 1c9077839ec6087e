"""The fast tier (`bash scripts/test.sh --fast`) reaches every module of the project.

A module counts as reached when a test file with fast tests imports it, runs it as a script
(names it as "<script>.py"), or imports or runs something that imports it. A new module that no
fast test file reaches fails here: give it a fast test (tests/conftest.py, FAST_TESTS).
"""

import ast
import os
import re

import conftest
from test_layout import REPO, import_graph, project_modules


def _reached():
  modules = project_modules()
  graph = import_graph()
  start = set()
  for name in conftest.FAST_TESTS:
    path = os.path.join(REPO, "tests", name)
    text = open(path, encoding="utf-8").read()
    for node in ast.walk(ast.parse(text)):
      if isinstance(node, ast.Import):
        start.update(alias.name for alias in node.names)
      elif isinstance(node, ast.ImportFrom) and node.module:
        start.add(node.module)
        start.update("%s.%s" % (node.module, alias.name) for alias in node.names)
    start.update(m for m in re.findall(r"([a-z_]+)\.py\b", text) if m in modules)
  reached, todo = set(), [m for m in start if m in modules]
  while todo:
    module = todo.pop()
    if module not in reached:
      reached.add(module)
      todo.extend(graph[module])
  return reached


def test_every_module_is_reached_by_a_fast_test():
  missing = sorted(set(project_modules()) - _reached())
  assert not missing, "no fast test reaches %s (tests/conftest.py, FAST_TESTS)" % missing


def test_every_fast_entry_names_a_file_that_exists():
  for name, chosen in conftest.FAST_TESTS.items():
    path = os.path.join(REPO, "tests", name)
    assert os.path.isfile(path), name
    text = open(path, encoding="utf-8").read()
    for prefix in ([] if chosen == "*" else chosen):
      assert re.search(r"^def %s" % re.escape(prefix), text, re.M), (name, prefix)
