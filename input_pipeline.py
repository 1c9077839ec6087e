"""TFRecord input pipelines and cache keys shared by all run scripts."""

import collections
import hashlib
import os
import struct

import tensorflow.compat.v1 as tf

from cli import InputError


def decode_record(record, name_to_features):
  """Parses one serialized tf.train.Example; int64 features become int32 (cheaper on GPUs)."""
  return _int64_to_int32(tf.io.parse_single_example(record, name_to_features))


def decode_batch(records, name_to_features):
  """Parses a batch of serialized tf.train.Examples [batch] at once (one vectorized op).

  Returns:
    dict name -> Tensor [batch, ...], int64 features as int32; the same as decode_record on each
    record, then batched.
  """
  return _int64_to_int32(tf.io.parse_example(records, name_to_features))


def _int64_to_int32(example):
  return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
          for name, t in example.items()}


# Which part of the training data a process reads: shard `index` of `count` (one per process).
Shard = collections.namedtuple("Shard", ["index", "count"])
WHOLE = Shard(0, 1)


def record_dataset(input_files, name_to_features, batch_size, is_training, seed=0,
                   shuffle_buffer=10000, num_parallel_calls=None, shard=WHOLE):
  """A batched dataset of feature dicts read from TFRecord files.

  Args:
    input_files: list of TFRecord paths.
    name_to_features: dict of feature name -> tf.io.FixedLenFeature.
    batch_size: rows per batch (the global batch: all towers together).
    is_training: repeat forever, shuffle (files and records) and drop the last partial batch, so
      every batch splits evenly over the towers. Otherwise one pass in file order, keeping the
      last partial batch (training.run_inference pads it).
    seed: shuffle seed; training passes a different one after a resume.
    shuffle_buffer: records held for shuffling.
    num_parallel_calls: batches parsed in parallel (default: tf.data autotune).
    shard: training only: the Shard of the data to read. The shards of the processes of a run
      are disjoint and together hold every record once per epoch, whatever the seed: with a
      multiple of `count` files each process reads its own files, otherwise every process reads
      all files in the same order and keeps every count-th record.

  Returns:
    tf.data.Dataset of dicts name -> Tensor [batch_size, ...].
  """
  if num_parallel_calls is None:
    num_parallel_calls = tf.data.experimental.AUTOTUNE
  files = list(input_files)
  if is_training:
    require_records(files)
  if is_training and len(files) % shard.count:
    d = tf.data.Dataset.from_tensor_slices(tf.constant(files)).flat_map(tf.data.TFRecordDataset)
    d = d.shard(shard.count, shard.index).shuffle(buffer_size=shuffle_buffer, seed=seed).repeat()
  elif is_training:
    files = files[shard.index::shard.count]
    d = tf.data.Dataset.from_tensor_slices(tf.constant(files))
    d = d.shuffle(buffer_size=len(files), seed=seed).repeat()
    d = d.interleave(tf.data.TFRecordDataset, cycle_length=min(4, len(files)),
                     num_parallel_calls=num_parallel_calls, deterministic=True)
    d = d.shuffle(buffer_size=shuffle_buffer, seed=seed)
  else:
    d = tf.data.Dataset.from_tensor_slices(tf.constant(files)).flat_map(tf.data.TFRecordDataset)
  # Batch the serialized records first and parse each batch with one vectorized parse_example:
  # several times cheaper than one parse_single_example per record, so the input thread stays
  # ahead of the towers; batches are parsed in parallel and prefetched.
  d = d.batch(batch_size, drop_remainder=is_training)
  d = d.map(lambda records: decode_batch(records, name_to_features),
            num_parallel_calls=num_parallel_calls, deterministic=True)
  return d.prefetch(tf.data.experimental.AUTOTUNE)


def require_records(files):
  """Raises InputError unless some file of `files` holds a record.

  Training repeats its dataset forever; over zero records that loop would spin inside
  TensorFlow without ever yielding a batch.
  """
  if not any(tf.io.gfile.stat(path).length for path in files):
    raise InputError("%s: no training examples (the data the records were made from is empty)"
                     % ", ".join(files))


def check_framing(path):
  """Raises InputError when `path` is not a TFRecord file, or ends inside a record (it is cut
  short: a copy or a writer that died), instead of a failure when reading reaches its end.

  Checks the first record's length against its CRC (so a text file is named as such), then walks
  the 12-byte record headers, seeking over the data: one small read per record, not a read of
  the file.
  """
  size = tf.io.gfile.stat(path).length
  position, count = 0, 0
  with tf.io.gfile.GFile(path, "rb") as f:
    while position < size:
      header = f.read(12)
      if count == 0 and (len(header) < 12 or
                         struct.unpack("<I", header[8:])[0] != _masked_crc32c(header[:8])):
        raise InputError("%s: not a TFRecord file (its first record header does not check "
                         "out)" % path)
      if len(header) == 12:
        position += 12 + struct.unpack("<Q", header[:8])[0] + 4
      if len(header) < 12 or position > size:
        raise InputError("%s: cut short inside record %d (the file has %d bytes); it is "
                         "incomplete: recreate it" % (path, count + 1, size))
      f.seek(position)
      count += 1


def _masked_crc32c(data):
  """TFRecord's masked CRC-32C of a few bytes (bitwise: meant for 8-byte headers)."""
  crc = 0xFFFFFFFF
  for byte in data:
    crc ^= byte
    for _ in range(8):
      crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
  crc ^= 0xFFFFFFFF
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def file_digest(path, chunk_size=1 << 20):
  """sha1 hex digest of a file's bytes."""
  h = hashlib.sha1()
  with open(path, "rb") as f:
    while True:
      chunk = f.read(chunk_size)
      if not chunk:
        break
      h.update(chunk)
  return h.hexdigest()


def cache_key(*parts):
  """A short key naming everything that produced a cached file (hash of the parts' reprs).

  Pass file digests (not paths) for data and vocab files, so an edited file never reuses a
  stale cache.
  """
  h = hashlib.sha1()
  for part in parts:
    h.update(repr(part).encode("utf-8"))
    h.update(b"\0")
  return h.hexdigest()[:16]


def cached_record_path(output_dir, split, key):
  """Where the TFRecord of `split` built under `key` is cached: output_dir/<split>-<key>.tf_record."""
  return os.path.join(output_dir, "%s-%s.tf_record" % (split, key))
