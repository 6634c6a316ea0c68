"""Pre-training TFRecords -> batched `tf.data` pipeline (official ``pretrain_data.get_input_fn``).

Each record is a `tf.train.Example` with int64 features ``input_ids``, ``input_mask``,
``segment_ids`` of length ``max_seq_length`` (``schema.py``, written by
``data_prep/build_pretraining_dataset.py``).
As in the official input function, training reads the shuffled file list repeatedly with a
parallel interleave over 4 files and shuffles examples in a 100-element buffer; batches drop
the remainder so shapes are static. Beyond the official code, problems name the shard: a
corrupt or truncated file, examples whose length is not ``max_seq_length``, or (given
``vocab_size``) token ids outside the vocabulary, which on GPU would silently embed as zeros.
``check_data`` reads every shard once up front and reports every bad one.
"""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Sequence

import tensorflow as tf
from absl import logging

from electra_tf.pretraining.schema import FEATURES, MODEL_DTYPE, parse_spec, stored_length

PIPELINE_VERSION = 1  # bump when the training pipeline's order or graph changes (saved states)
CYCLE_LENGTH = 4  # files read in parallel (official num_cpu_threads)
SHUFFLE_BUFFER = 100  # official example shuffle buffer
_RECORD_OVERHEAD = 16  # TFRecord framing per record: uint64 length + two uint32 CRCs
_READ_BATCH = 256  # records checked and parsed together per file
_SHARD_NAME_RE = re.compile(r"-(\d+)-of-(\d+)$")


def expand_file_pattern(file_pattern: str | Sequence[str]) -> list[str]:
  """Sorted files matching one pattern, a comma-separated string of them, or a list."""
  patterns = [file_pattern] if isinstance(file_pattern, str) else list(file_pattern)
  patterns = [p.strip() for item in patterns for p in item.split(",") if p.strip()]
  if not patterns:
    raise ValueError("pretraining_dataset: empty file_pattern")
  files = sorted({f for p in patterns for f in tf.io.gfile.glob(p)})
  if not files:
    raise ValueError(f"pretraining_dataset: no files match {', '.join(patterns)}")
  unfinished = [f for f in files if f.endswith(".tmp")]
  if unfinished:
    raise ValueError(f"pretraining_dataset: {unfinished[0]} is an unfinished shard of an "
                     "interrupted build; rebuild the data or narrow the file pattern")
  _warn_incomplete_shard_sets(files)
  return files


def _warn_incomplete_shard_sets(files: list[str]) -> None:
  """Warns when files named ``*-I-of-N`` cover fewer than N shards (a partial build?)."""
  seen = collections.defaultdict(set)
  for f in files:
    m = _SHARD_NAME_RE.search(os.path.basename(f))
    if m:
      seen[int(m.group(2))].add(int(m.group(1)))
  for n, indices in seen.items():
    if len(indices) < n:
      logging.warning("pretraining_dataset: only %d of the %d shards *-of-%d are present",
                      len(indices), n, n)


def _check_first_example(files: list[str], sizes: list[int], max_seq_length: int,
                         vocab_size: int | None = None) -> None:
  """Reads one record eagerly so the common mistakes fail now with a ValueError."""
  path = next(f for f, s in zip(files, sizes, strict=True) if s > 0)  # one exists
  try:
    record = next(iter(tf.data.TFRecordDataset(path).take(1))).numpy()
  except tf.errors.DataLossError as e:
    raise ValueError(f"pretraining_dataset: corrupt TFRecord shard {path}: {e.message}") from None
  try:
    example = tf.train.Example.FromString(record)
  except Exception:  # noqa: BLE001 - protobuf's DecodeError type depends on the backend
    raise ValueError(f"pretraining_dataset: {path} does not hold tf.train.Example records") \
      from None
  for name in FEATURES:
    n = stored_length(example, name)
    if n != max_seq_length:
      raise ValueError(f"pretraining_dataset: shard {path} has {name} of length {n} but "
                       f"max_seq_length is {max_seq_length}")
  if vocab_size is not None:
    ids = example.features.feature["input_ids"].int64_list.value
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
      raise ValueError(vocab_message(path, bad[0], vocab_size))


def vocab_message(path: str, token_id: int, vocab_size: int) -> str:
  """The one-line error for a token id outside [0, vocab_size)."""
  return (f"pretraining_dataset: shard {path} has token id {token_id} but vocab_size is "
          f"{vocab_size} (built with a different vocab?)")


def read_shard(path: tf.Tensor, size: tf.Tensor, max_seq_length: int,
               vocab_size: int | None = None) -> tf.data.Dataset:
  """Parsed examples {name: int32 [max_seq_length]} of one file, read in batches.

  Failures name the file. TFRecordDataset's own DataLossError does not, so read errors end the
  file quietly here and the bytes read (payloads + framing) must then add up to its size.
  """
  batches = tf.data.TFRecordDataset(path).ignore_errors().batch(_READ_BATCH)
  tagged = batches.map(lambda records: (records, tf.constant(False))).concatenate(
    tf.data.Dataset.from_tensors((tf.constant([], tf.string), tf.constant(True))))

  def count(total, elem):
    records, is_end = elem
    total += tf.reduce_sum(tf.cast(tf.strings.length(records), tf.int64) + _RECORD_OVERHEAD)
    check = tf.debugging.Assert(
      tf.logical_or(tf.logical_not(is_end), tf.equal(total, size)),
      [tf.strings.join(["pretraining_dataset: corrupt or truncated TFRecord shard ", path,
                        ": records readable up to byte ", tf.strings.as_string(total),
                        " of ", tf.strings.as_string(size)])])
    with tf.control_dependencies([check]):
      records = tf.identity(records)
    return total, (records, is_end)

  checked = tagged.scan(tf.constant(0, tf.int64), count).filter(
    lambda records, is_end: tf.logical_not(is_end))
  return checked.map(lambda records, _: _parse(records, path, max_seq_length, vocab_size)
                     ).unbatch()


def _parse(records: tf.Tensor, path: tf.Tensor, max_seq_length: int,
           vocab_size: int | None = None) -> dict[str, tf.Tensor]:
  """[n] serialized examples of `path` -> {name: int32 [n, max_seq_length]}; checks lengths
  and, given vocab_size, that every input id is in [0, vocab_size) (one vectorised test)."""
  parsed = tf.io.parse_example(records, parse_spec())
  out = {}
  for name in FEATURES:
    lengths = parsed[name].row_lengths()
    bad = tf.not_equal(lengths, max_seq_length)
    first_bad = tf.argmax(tf.cast(bad, tf.int32), output_type=tf.int32)
    check = tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad)), [tf.strings.join([
      "pretraining_dataset: shard ", path, f": {name} of length ",
      tf.strings.as_string(lengths[first_bad]), f" but max_seq_length is {max_seq_length}"])])
    with tf.control_dependencies([check]):
      values = tf.identity(parsed[name].values)
    out[name] = tf.cast(tf.reshape(values, [-1, max_seq_length]), MODEL_DTYPE)
  if vocab_size is not None:
    out["input_ids"] = _check_ids(out["input_ids"], path, vocab_size)
  return out


def _check_ids(ids: tf.Tensor, path: tf.Tensor, vocab_size: int) -> tf.Tensor:
  """ids [n, T] unchanged, after asserting all lie in [0, vocab_size)."""
  flat = tf.reshape(ids, [-1])
  bad = tf.logical_or(flat < 0, flat >= vocab_size)
  first = tf.gather(flat, tf.argmax(tf.cast(bad, tf.int32), output_type=tf.int32))
  message = tf.strings.join([
    "pretraining_dataset: shard ", path, " has token id ", tf.strings.as_string(first),
    f" but vocab_size is {vocab_size} (built with a different vocab?)"])
  check = tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad)), [message])
  with tf.control_dependencies([check]):
    return tf.identity(ids)


def pretraining_dataset(file_pattern: str | list[str], batch_size: int, max_seq_length: int,
                        is_training: bool = True, seed: int | None = None,
                        input_context: tf.distribute.InputContext | None = None,
                        vocab_size: int | None = None, skip_steps: int = 0) -> tf.data.Dataset:
  """Batches of pre-training examples: {input_ids, input_mask, segment_ids} int32 [batch, seq].

  Args:
    file_pattern: glob, comma-separated globs (the official ``pretrain_tfrecords``) or a list.
    batch_size: global batch size; with `input_context` each pipeline yields
      `input_context.get_per_replica_batch_size(batch_size)` examples per batch.
    max_seq_length: length every stored example must have.
    is_training: shuffle files and examples and repeat forever; otherwise one pass in file
      order (still dropping the last partial batch, for static shapes).
    seed: makes the order reproducible (also makes the interleave deterministic); None gives
      the official non-deterministic ("sloppy") order when training.
    input_context: from `strategy.distribute_datasets_from_function`: files are split between
      input pipelines (records, when there are fewer files than pipelines).
    vocab_size: if given, a token id outside [0, vocab_size) stops the pipeline with an error
      naming the shard (data built with another vocabulary).
    skip_steps: global batches already consumed (a resume at that step); with `seed` the
      stream then continues exactly where an uninterrupted run would be.
  """
  files = expand_file_pattern(file_pattern)
  sizes = [tf.io.gfile.stat(f).length for f in files]
  if not any(sizes):
    raise ValueError(f"pretraining_dataset: no examples found: the {len(files)} file(s) "
                     f"matching {file_pattern!r} are empty")
  _check_first_example(files, sizes, max_seq_length, vocab_size)
  # Empty shards (a small corpus split into many files) are dropped so that no input pipeline
  # is left with only empty files, which would make a repeated dataset spin forever.
  files, sizes = zip(*[(f, s) for f, s in zip(files, sizes, strict=True) if s > 0], strict=True)
  per_batch = batch_size
  num_pipelines, pipeline_id = 1, 0
  if input_context is not None:
    per_batch = input_context.get_per_replica_batch_size(batch_size)
    num_pipelines, pipeline_id = (input_context.num_input_pipelines,
                                  input_context.input_pipeline_id)
  deterministic = seed is not None or not is_training
  autotune = tf.data.AUTOTUNE

  ds = tf.data.Dataset.from_tensor_slices((list(files), tf.constant(sizes, tf.int64)))
  shard_files = len(files) >= num_pipelines
  if num_pipelines > 1 and shard_files:
    ds = ds.shard(num_pipelines, pipeline_id)
  if is_training:
    ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
  ds = ds.interleave(lambda path, size: read_shard(path, size, max_seq_length, vocab_size),
                     cycle_length=min(CYCLE_LENGTH, len(files)), num_parallel_calls=autotune,
                     deterministic=deterministic)
  if num_pipelines > 1 and not shard_files:
    ds = ds.shard(num_pipelines, pipeline_id)
  if is_training:
    ds = ds.shuffle(SHUFFLE_BUFFER, seed=seed)
  if skip_steps:
    # Resume-exact: replaying the seeded stream and dropping what was consumed is exact and
    # needs no iterator state in checkpoints; it costs reading and parsing the skipped examples
    # (see skip_steps in run_pretraining.py's docstring for the measured rate).
    ds = ds.skip(skip_steps * (batch_size // num_pipelines))
  return ds.batch(per_batch, drop_remainder=True).prefetch(autotune)
