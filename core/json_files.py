"""JSON files the product reads, through one checked path.

run_info.json, a SavedModel's assets/export_config.json, bert_config.json and a Hugging Face
config.json are read by `read_object`: the file must exist, be UTF-8, hold JSON, hold an object,
name every key its reader needs, and give each key it types a value of that type. Anything else
is one InputError naming the file and what is wrong with it, never a KeyError or TypeError deep
inside the reader.
"""

import json
import os

from core.errors import InputError

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
               list: "a list", dict: "an object"}


def type_problem(name, value, expected):
  """Why `value` (of key `name`) is not of the JSON type `expected`, or None.

  expected: str, int, float (an integer is a number too), bool, list or dict; None takes any
  value. A null value is "not recorded" and passes; true and false are not numbers.
  """
  if value is None or expected is None:
    return None
  if expected is bool:
    fits = isinstance(value, bool)
  else:
    fits = not isinstance(value, bool) and isinstance(
        value, (int, float) if expected is float else expected)
  if fits:
    return None
  return "%s is %s: expected %s" % (name, json.dumps(value, ensure_ascii=False)[:80],
                                    _TYPE_NAMES[expected])


def read_object(path, types=None, required=(), advice=None, name=None):
  """The JSON object in file `path`, checked.

  Args:
    path: the file.
    types: dict key -> its expected type (see type_problem), checked where the key is present.
    required: keys that must be present and not null.
    advice: what to do about a damaged file; it ends every error line.
    name: how error lines name the file (default: its path).

  Raises:
    InputError: the file is missing, not UTF-8, not JSON, not an object, lacks a required key,
      or holds a value of another type.
  """
  def fail(problem):
    raise InputError("%s: %s%s" % (name or path, problem, "; %s" % advice if advice else ""))

  if os.path.isdir(path):
    fail("is a folder; expected a JSON file")
  if not os.path.isfile(path):
    fail("no such file")
  with open(path, "rb") as f:
    data = f.read()
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    fail("not valid utf-8 (byte 0x%02x at offset %d)" % (data[e.start], e.start))
  try:
    value = json.loads(text)
  except ValueError as e:
    fail("not valid JSON (%s)" % e)
  if not isinstance(value, dict):
    fail("expected a JSON object, got %s" % json.dumps(value, ensure_ascii=False)[:80])
  missing = [key for key in required if value.get(key) is None]
  if missing:
    fail("no %s" % ", ".join('"%s"' % key for key in missing))
  for key, expected in sorted((types or {}).items()):
    problem = type_problem(key, value.get(key), expected)
    if problem:
      fail(problem)
  return value
