"""TFRecord files of tf.train.Example, written without TensorFlow (create_pretraining_data.py).

The data tool's workers serialize Examples by hand (protobuf varints and length-delimited
fields) and the parent frames them as TFRecords (length, masked CRC-32C of the length, data,
masked CRC-32C of the data), so making pretraining data needs neither TensorFlow nor protobuf
and starts in a fraction of a second. The tests read the files back with TensorFlow.
"""

import os
import random
import struct

import numpy as np

from core import atomic_files


def _varint(value):
  """Protobuf base-128 varint of a non-negative int."""
  out = bytearray()
  while value > 0x7F:
    out.append((value & 0x7F) | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


_SMALL_VARINTS = [_varint(v) for v in range(1 << 15)]  # Covers the ids of common vocabularies.


def _length_delimited(tag, payload):
  """A protobuf length-delimited field: tag byte, varint length, payload."""
  size = len(payload)
  return tag + (_SMALL_VARINTS[size] if size < 32768 else _varint(size)) + payload


def int64_feature(values):
  """A serialized tf.train.Feature holding an Int64List (packed) of non-negative ints."""
  top = max(values)
  if top < 128:
    payload = bytes(values)  # One byte per varint: the common case of masks and segment ids.
  elif top < len(_SMALL_VARINTS):
    payload = b"".join(map(_SMALL_VARINTS.__getitem__, values))
  else:
    payload = b"".join(map(_varint, values))
  return _length_delimited(b"\x1a", _length_delimited(b"\x0a", payload))


def float_feature(values):
  """A serialized tf.train.Feature holding a FloatList (packed float32)."""
  payload = struct.pack("<%df" % len(values), *values)
  return _length_delimited(b"\x12", _length_delimited(b"\x0a", payload))


def serialize_example(features):
  """A serialized tf.train.Example from (name, serialized Feature) pairs."""
  entries = b"".join(
      _length_delimited(b"\x0a", _length_delimited(b"\x0a", name.encode("utf-8")) +
                        _length_delimited(b"\x12", feature))
      for name, feature in features)
  return _length_delimited(b"\x0a", entries)


class Crc32c(object):
  """CRC-32C (Castagnoli), as TFRecord framing needs, in numpy; no TensorFlow needed.

  CRC is linear over GF(2), so a block's CRC register is the XOR of per-byte contributions
  _by_distance[d][byte] (the register after that byte followed by d zero bytes), and the
  incoming register's effect is looked up the same way. That turns the byte loop into one
  numpy gather + XOR-reduce per block of up to _BLOCK bytes.
  """

  _POLY = 0x82F63B78  # Reflected Castagnoli polynomial.
  _BLOCK = 4096

  def __init__(self):
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
      table = np.where(table & 1, (table >> 1) ^ np.uint32(self._POLY), table >> 1)
    self._table = table.astype(np.uint32).tolist()
    self._by_distance = np.empty([self._BLOCK, 256], dtype=np.uint32)
    self._by_distance[0] = table
    for d in range(1, self._BLOCK):
      previous = self._by_distance[d - 1]
      self._by_distance[d] = table[previous & 0xFF] ^ (previous >> 8)
    self._distances = np.arange(self._BLOCK - 1, -1, -1)

  def __call__(self, data):
    """The CRC-32C of bytes `data`, as an int."""
    register = 0xFFFFFFFF
    view = np.frombuffer(data, dtype=np.uint8)
    for start in range(0, len(view), self._BLOCK):
      block = view[start:start + self._BLOCK]
      size = len(block)
      if size < 4:  # Too short for the register lookup below; a few plain steps instead.
        for byte in block.tolist():
          register = self._table[(register ^ byte) & 0xFF] ^ (register >> 8)
        break
      table = self._by_distance
      contribution = np.bitwise_xor.reduce(table[self._distances[-size:], block])
      carried = (table[size - 1, register & 0xFF] ^ table[size - 2, (register >> 8) & 0xFF] ^
                 table[size - 3, (register >> 16) & 0xFF] ^ table[size - 4, register >> 24])
      register = int(contribution ^ carried)
    return register ^ 0xFFFFFFFF

  def masked(self, data):
    """TFRecord's masked CRC of `data`."""
    crc = self(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class TFRecordFile(object):
  """Writes the TFRecord format (length, masked CRC, data, masked CRC) without TensorFlow.

  TensorFlow's import takes seconds and hundreds of MB, for what is a simple framing; the
  tests read these files back with TensorFlow, which checks every CRC.
  """

  def __init__(self, path, crc32c):
    self.path = path
    self._file = open(atomic_files.temporary_path(path), "wb")
    self._crc32c = crc32c

  def write(self, record):
    header = struct.pack("<Q", len(record))
    try:
      self._file.write(b"".join((header, struct.pack("<I", self._crc32c.masked(header)), record,
                                 struct.pack("<I", self._crc32c.masked(record)))))
    except OSError as e:  # e.g. disk full: name the file (a write error names none).
      raise OSError(e.errno, e.strerror, self.path)

  def flush(self):
    self._file.flush()

  def finish(self):
    """Writes the file out and closes it (under its temporary name)."""
    if not self._file.closed:
      try:
        self._file.close()
      except OSError as e:
        raise OSError(e.errno, e.strerror, self.path)

  def close(self, keep=True):
    """Closes the file; renames it into place if `keep`, else removes it."""
    if keep:
      self.finish()
      if os.path.exists(self._file.name):
        os.replace(self._file.name, self.path)
      return
    try:
      self.finish()
    except OSError:  # e.g. the disk is still full; the file goes anyway.
      pass
    atomic_files.remove_quietly(self._file.name)


class RecordWriter(object):
  """Shuffles serialized examples within a bounded window; writes them round-robin to files."""

  def __init__(self, output_files, shuffle_window, seed):
    crc32c = Crc32c()
    self._writers = [TFRecordFile(path, crc32c) for path in output_files]
    self.counts = [0] * len(output_files)
    self._window = shuffle_window
    self._buffer = []
    self._rng = random.Random(seed)
    self._next_writer = 0

  def add(self, record):
    """Queues a record; once the window is full, writes a random queued one."""
    if len(self._buffer) < self._window:
      self._buffer.append(record)
      return
    index = self._rng.randrange(self._window)
    self._write(self._buffer[index])
    self._buffer[index] = record

  def close(self):
    """Writes what is left in the window, shuffled, then puts every file in place."""
    self._rng.shuffle(self._buffer)
    for record in self._buffer:
      self._write(record)
    self._buffer = []
    for writer in self._writers:  # Every file whole before any is renamed into place.
      writer.finish()
    for writer in self._writers:
      writer.close(keep=True)

  def discard(self):
    """Removes the files being written (after a failure); earlier outputs stay as they were."""
    for writer in self._writers:
      writer.close(keep=False)

  def _write(self, record):
    self._writers[self._next_writer].write(record)
    self.counts[self._next_writer] += 1
    self._next_writer = (self._next_writer + 1) % len(self._writers)
