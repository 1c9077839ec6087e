"""The safetensors format, read and written here: no torch and no safetensors package needed.

A .safetensors file is an 8-byte little-endian header length, a JSON header (per tensor: dtype,
shape, data offsets; plus "__metadata__"), padded with spaces to 8 bytes, then the raw
little-endian tensor data. Hugging Face model folders keep their weights in model.safetensors;
hf_bert.py and hf_electra.py convert them, this module only reads and writes the file.
"""

import json
import struct

import numpy as np

from core.errors import InputError
from core import atomic_files

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32, "BF16": None}
_NAMES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int64): "I64",
          np.dtype(np.int32): "I32"}


def read(path):
  """Returns {name: numpy array} for every tensor of a .safetensors file.

  Floating-point tensors (F32, F16, BF16) come back as float32, integers as they are stored.

  Raises:
    InputError: a tensor of a dtype other than F32, F16, BF16, I64 or I32 (named).
  """
  with open(path, "rb") as f:
    header_len = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(header_len))
    data = f.read()
  tensors = {}
  for name, info in header.items():
    if name == "__metadata__":
      continue
    start, end = info["data_offsets"]
    raw = data[start:end]
    if info["dtype"] == "BF16":
      # bfloat16 is the top half of a float32.
      as_u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
      array = as_u16.view(np.float32)
    elif info["dtype"] in _DTYPES:
      array = np.frombuffer(raw, dtype=np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<"))
    else:
      raise InputError("%s: tensor %s has unsupported dtype %s" % (path, name, info["dtype"]))
    tensors[name] = array.reshape(info["shape"]).astype(
        np.float32 if array.dtype.kind == "f" else array.dtype)
  return tensors


def encode(tensors):
  """{name: numpy array (float32, float16, int64 or int32)} as the bytes of a .safetensors file,
  tensors in name order: a list of bytes objects (header length, header, then each tensor)."""
  header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
  for name in sorted(tensors):
    array = np.ascontiguousarray(tensors[name])
    data = array.astype(array.dtype.newbyteorder("<")).tobytes()
    header[name] = {"dtype": _NAMES[array.dtype], "shape": list(array.shape),
                    "data_offsets": [offset, offset + len(data)]}
    chunks.append(data)
    offset += len(data)
  header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
  header_bytes += b" " * (-len(header_bytes) % 8)
  return [struct.pack("<Q", len(header_bytes)), header_bytes] + chunks


def writer(tensors):
  """The atomic_files write_fn of a .safetensors file holding `tensors` (see encode)."""
  return atomic_files.bytes_writer(encode(tensors))
