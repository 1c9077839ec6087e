"""The project's layers point down only, features never import each other, and nothing cycles.

Layers, bottom to top (README, "Project layout"):

  0 core/                      errors, atomic files, formatting: imports nothing of ours
  1 the model layer            modeling, tokenization, optimization, tower_utils, parallel/, heads/
  2 engine/                    flags, run setup, training, checkpoints, inference, input
  3 features                   classifier/, pretraining/, rewrite/, serving/ (never each other)
  4 the root scripts and tools run_*.py, create_pretraining_data.py, convert_*.py, build_*.py

Every import counts, also one inside a function: a local import that dodges a cycle is still one.
"""

import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_LAYER = ("modeling", "tokenization", "optimization", "tower_utils")
PACKAGE_LAYERS = {"core": 0, "parallel": 1, "heads": 1, "engine": 2, "classifier": 3,
                  "pretraining": 3, "rewrite": 3, "serving": 3}
# The root may hold only these modules (the stock names, the run scripts, the user tools).
ROOT_MODULES = set(MODEL_LAYER) | {
    "run_classifier_mgpu", "run_pretraining_mgpu", "run_rewrite_finetune",
    "create_pretraining_data", "convert_to_hf", "convert_hf_checkpoint", "build_saved_model",
    "build_similar_words"}


def project_modules():
  """dict module name ("engine.training", "modeling") -> file path, for every project module."""
  modules = {}
  for name in os.listdir(REPO):
    path = os.path.join(REPO, name)
    if name.endswith(".py"):
      modules[name[:-3]] = path
    elif os.path.isfile(os.path.join(path, "__init__.py")):
      for module in os.listdir(path):
        if module.endswith(".py") and module != "__init__.py":
          modules["%s.%s" % (name, module[:-3])] = os.path.join(path, module)
  return modules


def imports_of(path, modules):
  """The project modules `path` imports (anywhere in the file)."""
  found = set()
  for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
    if isinstance(node, ast.Import):
      names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names = [node.module] + ["%s.%s" % (node.module, alias.name) for alias in node.names]
    else:
      continue
    found.update(name for name in names if name in modules)
  return found


def layer(module):
  top = module.split(".")[0]
  if top in PACKAGE_LAYERS:
    return PACKAGE_LAYERS[top]
  return 1 if module in MODEL_LAYER else 4


def import_graph():
  modules = project_modules()
  return {module: imports_of(path, modules) - {module} for module, path in modules.items()}


def test_the_root_holds_only_the_stock_names_scripts_and_tools():
  root = {m for m in project_modules() if "." not in m}
  assert root == ROOT_MODULES, "move %s into a package (or list it here if users call it)" % (
      sorted(root - ROOT_MODULES))


def test_every_package_and_module_says_what_it_owns():
  for module, path in sorted(project_modules().items()):
    tree = ast.parse(open(path, encoding="utf-8").read())
    assert ast.get_docstring(tree), "%s has no opening docstring" % module
  for package in PACKAGE_LAYERS:
    init = os.path.join(REPO, package, "__init__.py")
    assert ast.get_docstring(ast.parse(open(init, encoding="utf-8").read())), init


def test_imports_point_down_and_features_stay_apart():
  upward, across = [], []
  for module, targets in sorted(import_graph().items()):
    for target in sorted(targets):
      if layer(target) > layer(module):
        upward.append("%s -> %s" % (module, target))
      elif layer(module) == layer(target) == 3 and module.split(".")[0] != target.split(".")[0]:
        across.append("%s -> %s" % (module, target))
  assert not upward, "imports that point up a layer: %s" % upward
  assert not across, "features importing each other: %s" % across


def test_no_import_cycles():
  graph = import_graph()
  state, cycles = {}, []

  def visit(module, stack):
    state[module] = "open"
    for target in sorted(graph[module]):
      if state.get(target) == "open":
        cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
      elif target not in state:
        visit(target, stack + [target])
    state[module] = "done"

  for module in sorted(graph):
    if module not in state:
      visit(module, [module])
  assert not cycles, cycles


def test_the_checks_see_a_violation():
  """The layer rule is not vacuous: the engine importing a feature would be caught."""
  assert layer("engine.training") < layer("classifier.data")
  assert layer("core.errors") < layer("modeling") < layer("engine.cli") < layer("serving.graph_features")
  assert "engine.cli" in imports_of(os.path.join(REPO, "create_pretraining_data.py"),
                                    project_modules())
