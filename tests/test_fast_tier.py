"""The fast tier (`bash scripts/test.sh --fast`) reaches every module of the project.

A module counts as reached when a test file with fast tests imports it or runs it as a script
(a string "<script>.py" in its code, not in a docstring), or when a module so reached imports or
runs it (saved_model_export runs build_saved_model.py). A new module that no
fast test file reaches fails here: give it a fast test (tests/conftest.py, FAST_TESTS).
"""

import ast
import os
import re

import conftest
from test_layout import REPO, import_graph, project_modules


def _scripts_named(path, modules):
  """Project modules that `path` runs as scripts: a string constant "<module>.py" in its code."""
  tree = ast.parse(open(path, encoding="utf-8").read())
  docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
                and isinstance(node.body[0], ast.Expr)
                and isinstance(node.body[0].value, ast.Constant)}
  named = set()
  for node in ast.walk(tree):
    if (isinstance(node, ast.Constant) and isinstance(node.value, str) and
        id(node) not in docstrings):
      name = os.path.basename(node.value)
      if name.endswith(".py") and name[:-3] in modules:
        named.add(name[:-3])
  return named


def _reached():
  """The modules that the fast test files import or run, and what those import or run."""
  modules = project_modules()
  graph = import_graph()
  todo = []
  for name in conftest.FAST_TESTS:
    path = os.path.join(REPO, "tests", name)
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
      if isinstance(node, ast.Import):
        todo.extend(alias.name for alias in node.names)
      elif isinstance(node, ast.ImportFrom) and node.module:
        todo.append(node.module)
        todo.extend("%s.%s" % (node.module, alias.name) for alias in node.names)
    todo.extend(_scripts_named(path, modules))
  reached = set()
  while todo:
    module = todo.pop()
    if module in modules and module not in reached:
      reached.add(module)
      todo.extend(graph[module])
      todo.extend(_scripts_named(modules[module], modules))
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
