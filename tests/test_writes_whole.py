"""Every file the product writes is written whole: under a temporary name, then renamed.

Two checks, one static and one at run time:

- `test_no_module_writes_a_final_file_in_place` reads every module of the project (the layers of
  docs/development.md "Project layout": the root scripts and tools and their packages; not
  tests/, benchmarks/ or the demo helpers of scripts/) and finds every call that opens or
  creates a file for writing: open/io.open/os.fdopen/os.open in a write mode, TensorFlow's
  GFile, tf.io.gfile.copy, shutil's copies, TFRecordWriter, numpy's save functions,
  Path.write_text. Each must write a temporary name (its path argument names a `tmp_...` or
  `temporary_path(...)`: the write_fn of core/atomic_files, which renames it into place), or be
  one of ALLOWED, each with its reason. TensorFlow's own checkpoint and event-file writers are
  not listed: TF writes checkpoint files under `.tempstate` names and renames them itself.
- The runs of tests/test_quiet_scripts.py record every Python-level open() for writing (an audit
  hook, sitecustomize.py in a folder put first on PYTHONPATH) and fail on a final name written
  in place: what a static reading misses (a write inside a library, a helper passed the final
  path).
"""

import ast
import os
import re

import test_layout

# (module path, function): why it may write a file in place.
ALLOWED = {
    ("engine/cli.py", "_check_writable"):
        "the probe that --output_dir is writable, `.write-test-<pid>`, removed at once",
    ("engine/cli.py", "_report_internal_error"):
        "the traceback of an internal error, to a new file of tempfile.mkstemp",
    ("engine/run_setup.py", "_lock"):
        "the flock file of a training run; what it says (the holder) is for messages only",
    ("engine/predict_input.py", "read"):
        "standard input copied into a private tempfile.TemporaryDirectory",
    ("engine/tf_env.py", "native_stderr_silenced"):
        "os.devnull, opened to silence TensorFlow's C-level start-up lines",
    ("build_saved_model.py", "add_asset"):
        "scratch assets in a private tempfile.mkdtemp folder; TensorFlow copies them into the "
        "SavedModel, which is built in a temporary folder and renamed into place",
}

_WRITE_MODE = re.compile(r"[wax+]")
_TEMPORARY = re.compile(r"tmp|temporary", re.IGNORECASE)


def _name(func):
  """`a.b.c` of a call's function expression (the last parts that are names)."""
  parts = []
  while isinstance(func, ast.Attribute):
    parts.append(func.attr)
    func = func.value
  if isinstance(func, ast.Name):
    parts.append(func.id)
  return ".".join(reversed(parts))


def _arg(call, index, keyword):
  if len(call.args) > index:
    return call.args[index]
  return next((k.value for k in call.keywords if k.arg == keyword), None)


def _writes(call):
  """(kind, path expression) when `call` writes a file, else None."""
  name = _name(call.func)
  last = name.split(".")[-1]
  if name in ("open", "io.open", "codecs.open", "os.fdopen") or (
      last in ("GFile", "Open") and "gfile" in name.lower() + last):
    mode = _arg(call, 1, "mode")
    if mode is None:
      return None  # read
    if isinstance(mode, ast.Constant) and not _WRITE_MODE.search(str(mode.value)):
      return None
    return name, _arg(call, 0, "file")
  if name == "os.open":
    flags = ast.unparse(_arg(call, 1, "flags"))
    return (name, _arg(call, 0, "path")) if re.search("O_WRONLY|O_RDWR|O_CREAT", flags) else None
  if name.startswith("shutil.") and last in ("copy", "copy2", "copyfile", "copytree", "move"):
    return name, _arg(call, 1, "dst")
  if last == "copy" and "gfile" in name:
    return name, _arg(call, 1, "dst")
  if last in ("TFRecordWriter", "savetxt", "save", "savez", "savez_compressed") and (
      last == "TFRecordWriter" or name.startswith(("np.", "numpy."))):
    return name, _arg(call, 0, "path")
  if last in ("write_text", "write_bytes") and not name.startswith("atomic_files."):
    return name, call.func
  return None


def in_place_writes(path, relative):
  """[(line, function, call text)] of the calls in `path` that write a final name in place."""
  tree = ast.parse(open(path, encoding="utf-8").read())
  found = []

  def visit(node, function):
    for child in ast.iter_child_nodes(node):
      scope = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
      if isinstance(child, ast.Call):
        write = _writes(child)
        if write and not _TEMPORARY.search(ast.unparse(write[1]) if write[1] else "") and (
            (relative, scope) not in ALLOWED):
          found.append((child.lineno, scope, ast.unparse(child)[:120]))
      visit(child, scope)

  visit(tree, "<module>")
  return found


def test_no_module_writes_a_final_file_in_place():
  problems = []
  for module, path in sorted(test_layout.project_modules().items()):
    relative = os.path.relpath(path, test_layout.REPO)
    problems += ["%s:%d (%s): %s" % (relative, line, function, text)
                 for line, function, text in in_place_writes(path, relative)]
  assert not problems, (
      "these calls write a final file in place; write through core/atomic_files "
      "(write_text, write_atomically, write_all_atomically) or, if there is a real reason, add "
      "the function to ALLOWED with it:\n  " + "\n  ".join(problems))


def test_every_allowed_exception_still_exists():
  """An entry of ALLOWED whose function no longer writes is removed (it would hide a new one)."""
  stale = []
  for (relative, function), _ in sorted(ALLOWED.items()):
    tree = ast.parse(open(os.path.join(test_layout.REPO, relative), encoding="utf-8").read())
    functions = [n for n in ast.walk(tree)
                 if isinstance(n, ast.FunctionDef) and n.name == function]
    if not any(_writes(c) for f in functions for c in ast.walk(f) if isinstance(c, ast.Call)):
      stale.append((relative, function))
  assert not stale, stale


def test_the_check_finds_writes_in_place(tmp_path):
  """The checker itself: in-place writes of each kind are found, temporaries are not."""
  source = tmp_path / "sample.py"
  source.write_text(
      "import shutil\n"
      "def bad(path, out):\n"
      "  with open(path, 'w') as f: pass\n"
      "  with tf.io.gfile.GFile(out, mode='wb') as f: pass\n"
      "  shutil.copyfile(path, out)\n"
      "  tf.io.gfile.copy(path, out, overwrite=True)\n"
      "  np.save(out, x)\n"
      "  with open(path, 'a+') as f: pass\n"
      "def good(tmp_path, path):\n"
      "  with open(tmp_path, 'w') as f: pass\n"
      "  with open(path) as f: pass\n"
      "  with open(path, 'rb') as f: pass\n"
      "  shutil.copyfile(path, tmp_path)\n"
      "  with open(atomic_files.temporary_path(path), 'wb') as f: pass\n")
  found = in_place_writes(str(source), "sample.py")
  assert [line for line, _, _ in found] == [3, 4, 5, 6, 7, 8], found
  assert {function for _, function, _ in found} == {"bad"}


def test_files_that_belong_together_are_replaced_all_or_none(tmp_path):
  """A failure in the second file of a set (here: a full disk) leaves the old pair, no
  temporary file and no folder this write made; the error names the file asked for."""
  import errno  # pylint: disable=g-import-not-at-top
  from core import atomic_files  # pylint: disable=g-import-not-at-top
  p, scores = str(tmp_path / "p.txt"), str(tmp_path / "p_probabilities.tsv")
  atomic_files.write_all_atomically([(p, atomic_files.text_writer("old p\n")),
                                     (scores, atomic_files.text_writer("old scores\n"))])

  def disk_full(tmp):
    with open(tmp, "w") as f:
      f.write("0.5\t0.")
    raise OSError(errno.ENOSPC, "No space left on device")

  new_folder = str(tmp_path / "new" / "sub" / "x.txt")
  try:
    atomic_files.write_all_atomically([(p, atomic_files.text_writer("new p\n")),
                                       (new_folder, atomic_files.text_writer("x")),
                                       (scores, disk_full)])
  except OSError as e:
    assert e.errno == errno.ENOSPC and e.filename == scores, e
  else:
    raise AssertionError("no error")
  assert sorted(os.listdir(str(tmp_path))) == ["p.txt", "p_probabilities.tsv"]
  assert open(p).read() == "old p\n" and open(scores).read() == "old scores\n"

  # A write_fn may write several files under its temporary prefix (a checkpoint).
  def checkpoint(tmp_prefix):
    for suffix in (".index", ".data-00000-of-00001"):
      with open(tmp_prefix + suffix, "w") as f:
        f.write(suffix)

  prefix = str(tmp_path / "new" / "bert_model.ckpt")
  atomic_files.write_all_atomically([(prefix, checkpoint), (p, atomic_files.text_writer("p\n"))])
  assert sorted(os.listdir(str(tmp_path / "new"))) == ["bert_model.ckpt.data-00000-of-00001",
                                                       "bert_model.ckpt.index"]
  assert atomic_files.final_path(atomic_files.temporary_path(prefix) + ".index") == (
      prefix + ".index")


def test_a_failed_write_names_the_flag_of_its_path(tmp_path):
  import errno  # pylint: disable=g-import-not-at-top
  from engine import cli  # pylint: disable=g-import-not-at-top
  from core.errors import InputError  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / "p.txt")
  try:
    with cli.writing("predict_output"):
      raise OSError(errno.ENOSPC, "No space left on device", path)
  except InputError as e:
    assert str(e) == ("%s: No space left on device; free space there (df -h) or choose another "
                      "--predict_output, then rerun the same command" % path), str(e)
  else:
    raise AssertionError("no InputError")
  try:
    with cli.writing("predict_output"):
      raise KeyError("not a fault of the machine")
  except KeyError:
    pass
