"""TFRecord input (datasets, length-aware batches) and cache keys shared by all run scripts."""

import collections
import hashlib
import os
import struct

import tensorflow.compat.v1 as tf

from core.errors import InputError
from parallel import cluster


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


Shard = cluster.Shard  # Re-exported: the data shard of one process.
WHOLE = cluster.WHOLE


def plain_map(dataset, fn, **kwargs):
  """`dataset.map(fn, **kwargs)` without AutoGraph's conversion of `fn`.

  Our map functions hold no Python control flow that depends on a tensor (their loops run over
  feature names), so AutoGraph has nothing to convert, yet converting costs about 0.1 s per
  function at every start: a tenth of a small run's CPU. (A function that needed conversion
  would fail at once, when the map is traced.)
  """
  return dataset.map(tf.autograph.experimental.do_not_convert(fn), **kwargs)


def record_dataset(input_files, name_to_features, batch_size, is_training, seed=0,
                   shuffle_buffer=10000, num_parallel_calls=None, shard=WHOLE,
                   lengths=None):
  """A batched dataset of feature dicts read from TFRecord files.

  Args:
    input_files: list of TFRecord paths.
    name_to_features: dict of feature name -> tf.io.FixedLenFeature.
    batch_size: rows per batch (the global batch: all towers together).
    is_training: repeat forever, shuffle (files and records) and drop the last partial batch, so
      every batch splits evenly over the towers. Otherwise one pass in file order, keeping the
      last partial batch (inference.run_inference pads it).
    seed: shuffle seed; training passes a different one after a resume.
    shuffle_buffer: records held for shuffling.
    num_parallel_calls: batches parsed in parallel (default: tf.data autotune).
    shard: training only: the Shard of the data to read. The shards of the processes of a run
      are disjoint and together hold every record once per epoch, whatever the seed: with a
      multiple of `count` files each process reads its own files, otherwise every process reads
      all files in the same order and keeps every count-th record.
    lengths: a LengthOptions for length-aware batches (None: every batch keeps the records'
      full length). See trim_to_longest and bucket_windows.

  Returns:
    tf.data.Dataset of dicts name -> Tensor [batch_size, ...]; with `lengths.pad_to_multiple`
    the sequence features are [batch_size, length], length varying per batch.
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
    d = d.shuffle(buffer_size=len(files), seed=seed)
    d = d.interleave(tf.data.TFRecordDataset, cycle_length=min(4, len(files)),
                     num_parallel_calls=num_parallel_calls, deterministic=True)
    # Shuffled before the repeat: each pass holds every record once (a new order each pass).
    d = d.shuffle(buffer_size=shuffle_buffer, seed=seed).repeat()
  else:
    d = tf.data.Dataset.from_tensor_slices(tf.constant(files)).flat_map(tf.data.TFRecordDataset)
  # Batch the serialized records first and parse each batch with one vectorized parse_example:
  # several times cheaper than one parse_single_example per record, so the input thread stays
  # ahead of the towers; batches are parsed in parallel and prefetched.
  lengths = lengths or FIXED_LENGTH
  if is_training and lengths.bucket_window:
    d = bucket_windows(d, name_to_features, batch_size, lengths.bucket_window, seed,
                       num_parallel_calls)
  elif lengths.bucket_window:
    d = sorted_windows(d, name_to_features, batch_size, lengths.bucket_window,
                       num_parallel_calls)
  else:
    d = d.batch(batch_size, drop_remainder=is_training)
    d = plain_map(d, lambda records: decode_batch(records, name_to_features),
                  num_parallel_calls=num_parallel_calls, deterministic=True)
  if lengths.pad_to_multiple:
    d = plain_map(d, lambda features: trim_to_longest(features, name_to_features,
                                                      lengths.pad_to_multiple),
                  num_parallel_calls=num_parallel_calls, deterministic=True)
  return d.prefetch(tf.data.experimental.AUTOTUNE)


# Length-aware batches. pad_to_multiple: 0 keeps the records' full max_seq_length; m > 0 pads
# each batch only to its longest row, rounded up to a multiple of m (and at most max_seq_length).
# bucket_window: 0 = no sorting; k > 0 sorts each window of k batches' rows by length before
# cutting it into batches, so a batch holds rows of similar length (training: bucket_windows;
# eval and predict: sorted_windows, whose rows carry their input position).
LengthOptions = collections.namedtuple("LengthOptions", ["pad_to_multiple", "bucket_window"])
FIXED_LENGTH = LengthOptions(0, 0)
# The feature whose 1s mark the real tokens of a row (padding is 0).
MASK_FEATURE = "input_mask"
# sorted_windows adds it: int64 [rows], each row's position in the input (0-based).
INDEX_FEATURE = "_input_index"


def _sequence_names(name_to_features):
  """Names of the features that run along the sequence (the input mask's length)."""
  length = name_to_features[MASK_FEATURE].shape
  return [name for name, spec in name_to_features.items() if spec.shape == length]


def row_lengths(input_mask):
  """int32 [rows]: each row's real length, 1 + the position of its last real token (0: none).

  Args:
    input_mask: int Tensor [rows, seq_length], 1 on real tokens.
  """
  seq_length = tf.shape(input_mask)[1]
  positions = tf.range(1, seq_length + 1)[tf.newaxis, :]
  return tf.reduce_max(tf.cast(tf.not_equal(input_mask, 0), tf.int32) * positions, axis=1)


def padded_length(longest, multiple, max_length):
  """`longest` rounded up to a multiple of `multiple`, at most max_length, at least 1."""
  rounded = (longest + multiple - 1) // multiple * multiple
  return tf.maximum(tf.minimum(rounded, max_length), 1)


def trim_to_longest(features, name_to_features, multiple):
  """Cuts the padding columns that no row of the batch uses.

  Every token after a row's last real one is padding, which BERT's attention mask ignores, so
  the outputs of the real tokens (and of [CLS]) are the same, up to float rounding, as with the
  full length. Rounding to a multiple keeps the number of distinct shapes small (XLA compiles
  each one) and the matrix sizes friendly to GPU kernels.

  Args:
    features: dict name -> Tensor [rows, max_seq_length] (sequence features) or [rows, ...].
    name_to_features: the record spec: which features are sequence features.
    multiple: round the length up to a multiple of this.

  Returns:
    the same dict, sequence features cut to [rows, length] (static length unknown).
  """
  names = _sequence_names(name_to_features)
  max_length = name_to_features[MASK_FEATURE].shape[0]
  longest = tf.reduce_max(row_lengths(features[MASK_FEATURE]))
  length = padded_length(longest, multiple, max_length)
  trimmed = dict(features)
  for name in names:
    trimmed[name] = features[name][:, :length]
  return trimmed


def bucket_windows(records, name_to_features, batch_size, window, seed, num_parallel_calls):
  """Batches an endless training stream of records so that each batch holds similar lengths.

  The stream is cut into windows of `window * batch_size` consecutive records; each window's
  rows are sorted by length, cut into `window` full batches, and those batches are shuffled.
  A window holds exactly the records the stream brought, so the rows of every epoch are all
  there, each once, in the windows that cover it; every batch has exactly batch_size rows (so
  it splits evenly over the towers).

  Args:
    records: endless dataset of serialized tf.train.Examples (already shuffled).
    name_to_features: the record spec.
    batch_size: rows per batch.
    window: batches per window (more: more similar lengths in a batch, less randomness).
    seed: the shuffle seed of the batch order.
    num_parallel_calls: windows parsed in parallel.

  Returns:
    dataset of dicts name -> Tensor [batch_size, ...] at the records' full length.
  """

  def sort_window(index, serialized):
    features = decode_batch(serialized, name_to_features)
    order = tf.argsort(row_lengths(features[MASK_FEATURE]), stable=True)
    # A stateless draw per window: the same seed gives the same batches, however the windows
    # are scheduled over the parallel calls.
    batch_order = tf.argsort(tf.random.stateless_uniform(
        [window], seed=tf.stack([tf.cast(seed, tf.int64), index])))
    out = {}
    for name, t in features.items():
      t = tf.gather(t, order)
      t = tf.reshape(t, tf.concat([[window, batch_size], tf.shape(t)[1:]], axis=0))
      out[name] = tf.gather(t, batch_order)
    return out

  d = records.batch(window * batch_size, drop_remainder=True).enumerate()
  d = plain_map(d, sort_window, num_parallel_calls=num_parallel_calls, deterministic=True)
  return d.unbatch()  # [window, batch_size, ...] -> `window` batches [batch_size, ...]


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


def sorted_windows(records, name_to_features, batch_size, window, num_parallel_calls):
  """Batches a finite stream (eval, predict) so that each batch holds rows of similar length.

  Each window of `window * batch_size` consecutive records is sorted by length and cut into
  batches; the last batch may be short. Every row carries its position in the input as
  INDEX_FEATURE, so the caller puts the outputs back in input order
  (inference.run_inference does).

  Returns:
    dataset of dicts name -> Tensor [rows, ...] at the records' full length, plus
    INDEX_FEATURE int64 [rows].
  """

  def sort_window(index, serialized):
    features = decode_batch(serialized, name_to_features)
    order = tf.argsort(row_lengths(features[MASK_FEATURE]), stable=True)
    out = {name: tf.gather(t, order) for name, t in features.items()}
    out[INDEX_FEATURE] = index * window * batch_size + tf.cast(order, tf.int64)
    return out

  d = records.batch(window * batch_size).enumerate()
  d = plain_map(d, sort_window, num_parallel_calls=num_parallel_calls, deterministic=True)
  return d.unbatch().batch(batch_size)
