"""Fixed-length model features: specs, ``tf.train.Example`` records, TFRecord files and caching.

A multi-task record carries every feature of every task in the run (the official layout):
the shared ``input_ids``/``input_mask``/``segment_ids`` [max_seq_length] and ``task_id`` [],
plus each task's ``<task>_*`` features, zeros where a record belongs to another task.
Integer features are stored as int64 and decoded to int32 (official ``_decode_tfrecord``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from electra_tf import atomic_io


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
  """One fixed-length feature: ``shape`` () for scalars, (max_seq_length,) for sequences."""

  name: str
  shape: tuple[int, ...] = ()
  is_int: bool = True

  def parsing_spec(self) -> tf.io.FixedLenFeature:
    return tf.io.FixedLenFeature(list(self.shape), tf.int64 if self.is_int else tf.float32)

  def default(self) -> np.ndarray:
    return np.zeros(self.shape, np.int64 if self.is_int else np.float32)


def shared_feature_specs(max_seq_length: int) -> list[FeatureSpec]:
  """Inputs every task has: token ids, attention mask, segment ids [max_seq_length], task id []."""
  return [
      FeatureSpec("input_ids", (max_seq_length,)),
      FeatureSpec("input_mask", (max_seq_length,)),
      FeatureSpec("segment_ids", (max_seq_length,)),
      FeatureSpec("task_id", ()),
  ]


def all_feature_specs(tasks: Sequence[Any], max_seq_length: int) -> list[FeatureSpec]:
  """Shared specs, then each task's ``feature_specs()`` in task order; names must be unique."""
  specs = shared_feature_specs(max_seq_length)
  for task in tasks:
    specs += task.feature_specs()
  names = [s.name for s in specs]
  dupes = sorted({n for n in names if names.count(n) > 1})
  if dupes:
    raise ValueError(f"Duplicate feature name(s) across tasks: {', '.join(dupes)}")
  return specs


def to_tf_example(features: Mapping[str, Any], specs: Sequence[FeatureSpec]) -> tf.train.Example:
  """Builds one record; features missing from ``features`` get the spec's zeros."""
  by_name = {s.name: s for s in specs}
  unknown = sorted(set(features) - set(by_name))
  if unknown:
    raise ValueError(f"Unknown feature(s) {', '.join(unknown)}; known: {', '.join(by_name)}")
  feature_map = {}
  for spec in specs:
    values = np.asarray(features.get(spec.name, spec.default())).reshape(-1)
    expected = int(np.prod(spec.shape)) if spec.shape else 1
    if values.size != expected:
      raise ValueError(f"Feature {spec.name} has {values.size} values, expected {expected}")
    if spec.is_int:
      feature_map[spec.name] = tf.train.Feature(
          int64_list=tf.train.Int64List(value=[int(v) for v in values]))
    else:
      feature_map[spec.name] = tf.train.Feature(
          float_list=tf.train.FloatList(value=[float(v) for v in values]))
  return tf.train.Example(features=tf.train.Features(feature=feature_map))


def parsing_spec(specs: Sequence[FeatureSpec]) -> dict[str, tf.io.FixedLenFeature]:
  return {s.name: s.parsing_spec() for s in specs}


def decode_record(record: tf.Tensor, specs: Sequence[FeatureSpec]) -> dict[str, tf.Tensor]:
  """Serialized ``tf.train.Example`` -> dict of tensors, int64 cast to int32 (TPU-friendly)."""
  example = tf.io.parse_single_example(record, parsing_spec(specs))
  return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in example.items()}


def write_tfrecord(feature_dicts: Iterable[Mapping[str, Any]], specs: Sequence[FeatureSpec],
                   path: str, pad_to_multiple_of: int = 1, padding_task_id: int = 0) -> int:
  """Writes records; pads with all-zero records of ``task_id=padding_task_id`` up to a multiple.

  The official pads with ``task_id = len(task_names)`` so padding matches no task's head.
  Returns the number of records written (padding included).
  """
  tf.io.gfile.makedirs(os.path.dirname(path) or ".")
  n = 0
  with tf.io.TFRecordWriter(path) as writer:
    for features in feature_dicts:
      writer.write(to_tf_example(features, specs).SerializeToString())
      n += 1
    while n % max(1, pad_to_multiple_of):
      writer.write(to_tf_example({"task_id": padding_task_id}, specs).SerializeToString())
      n += 1
  return n


def read_tfrecord(path: str, specs: Sequence[FeatureSpec]) -> tf.data.Dataset:
  """Dataset of decoded feature dicts (unbatched) from one TFRecord file."""
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(f"TFRecord file not found: {path}")
  return tf.data.TFRecordDataset(path).map(lambda r: decode_record(r, specs))


def check_token_ids(features: dict[str, tf.Tensor], path: str,
                    vocab_size: int) -> dict[str, tf.Tensor]:
  """`features` unchanged, after asserting every ``input_ids`` value lies in [0, vocab_size).

  An id past the embedding table fails on CPU with a long traceback and on GPU silently embeds
  as zeros; this names the file instead (one vectorised check per batch).
  """
  ids = tf.reshape(features["input_ids"], [-1])
  bad = tf.logical_or(ids < 0, ids >= vocab_size)
  first = tf.gather(ids, tf.argmax(tf.cast(bad, tf.int32), output_type=tf.int32))
  check = tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad)), [tf.strings.join([
    f"fine-tuning data {path} has token id ", tf.strings.as_string(first),
    f" but vocab_size is {vocab_size} (built with a different vocab?)"])])
  with tf.control_dependencies([check]):
    return {k: tf.identity(v) for k, v in features.items()}


def input_dataset(path: str, specs: Sequence[FeatureSpec], batch_size: int, is_training: bool,
                  shuffle_buffer: int = 100, seed: int | None = None,
                  vocab_size: int | None = None, skip_examples: int = 0) -> tf.data.Dataset:
  """Batches of decoded features (official ``input_fn``): training repeats and shuffles.

  Every batch is full (``drop_remainder``); the writer pads files to a batch multiple.
  With ``vocab_size``, a token id outside [0, vocab_size) stops the pipeline with an error
  naming the file (a cache built with another vocabulary).
  ``skip_examples``: records of the (seeded) stream already consumed, dropped before decoding
  (a resume continues the uninterrupted stream; skipping serialized records is cheap).
  """
  dataset = tf.data.TFRecordDataset(path)
  if is_training:
    dataset = dataset.repeat().shuffle(shuffle_buffer, seed=seed)
  if skip_examples:
    dataset = dataset.skip(skip_examples)
  dataset = dataset.map(lambda r: decode_record(r, specs), num_parallel_calls=tf.data.AUTOTUNE)
  dataset = dataset.batch(batch_size, drop_remainder=True)
  if vocab_size is not None:
    dataset = dataset.map(lambda f: check_token_ids(f, path, vocab_size))
  return dataset


def cache_prefix(preprocessed_dir: str, task_names: Sequence[str], split: str) -> str:
  """``<dir>/<sorted task names joined by _>_<split>`` (official file naming)."""
  return os.path.join(preprocessed_dir, "_".join(sorted(task_names)) + "_" + split)


def file_fingerprint(path: str, chunk: int = 1 << 20) -> dict[str, Any]:
  """What identifies a source file's content: size and SHA-256 of the whole file when it is at
  most two ``chunk``s, else of its first and last ``chunk`` plus the mtime (an edit in the
  middle of a large file that keeps its size is caught by the mtime)."""
  size = os.path.getsize(path)
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    if size <= 2 * chunk:
      digest.update(f.read())
      return {"size": size, "sha256": digest.hexdigest()}
    digest.update(f.read(chunk))
    f.seek(size - chunk)
    digest.update(f.read(chunk))
  return {"size": size, "sha256": digest.hexdigest(), "mtime_ns": os.stat(path).st_mtime_ns}


def _short(value: Any) -> str:
  text = json.dumps(value, sort_keys=True)
  return text if len(text) <= 40 else text[:37] + "..."


def key_changes(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
  """Readable differences between two cache keys, e.g. ``rte/train.tsv changed`` or
  ``max_seq_length changed (128 -> 64)``. File fingerprints (entries under ``files``, dicts
  with a ``sha256``) are reported as changed / added / removed without their values."""
  changes = []
  for name in sorted(set(old) | set(new)):
    a, b = old.get(name), new.get(name)
    if a == b:
      continue
    if name == "files" and isinstance(a, Mapping) and isinstance(b, Mapping):
      for f in sorted(set(a) | set(b)):
        if f not in a:
          changes.append(f"{f} added")
        elif f not in b:
          changes.append(f"{f} removed")
        elif a[f] != b[f]:
          changes.append(f"{f} changed")
    elif isinstance(a, Mapping) and isinstance(b, Mapping) and "sha256" in {*a, *b}:
      changes.append(f"{prefix}{name} changed")  # a file fingerprint
    elif isinstance(a, Mapping) and isinstance(b, Mapping):
      changes += key_changes(a, b, f"{prefix}{name}.")
    elif name in old and name in new:
      changes.append(f"{prefix}{name} changed ({_short(a)} -> {_short(b)})")
    else:
      changes.append(f"{prefix}{name} {'added' if name in new else 'removed'}")
  return changes


def _write_json_atomically(path: str, value: Any, indent: int | None = None) -> None:
  atomic_io.write_text(path, json.dumps(value, indent=indent, sort_keys=True))


def _read_json(path: str) -> Any:
  try:
    with tf.io.gfile.GFile(path) as f:
      return json.load(f)
  except (tf.errors.NotFoundError, json.JSONDecodeError, UnicodeDecodeError):
    return None


def read_cached_json(path: str | None, log_fn: Callable[[str], None] | None = None) -> Any:
  """The JSON value of a cache file, or None when it is missing, empty, short or does not
  parse (a power cut can leave any of these): the cache is derived data, so the caller rebuilds
  it; ``log_fn`` gets one line naming the file."""
  if not path or not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path) as f:
      text = f.read()
    return json.loads(text)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    if log_fn is not None:
      what = "is empty" if not text.strip() else f"does not parse ({e})"
      log_fn(f"Rebuilding {path}: the file {what}")
    return None


def _cached_count(metadata_path: str, tfrecord_path: str,
                  log_fn: Callable[[str], None] | None) -> int | None:
  """``n_examples`` of a complete cache, or None (rebuild, one ``log_fn`` line) when the
  metadata is empty or unreadable, or the records file is not the size it was written with
  (empty, or short: what a power cut can leave)."""
  metadata = read_cached_json(metadata_path, log_fn)
  if metadata is None:
    return None
  try:
    n = int(metadata["n_examples"])
  except (TypeError, KeyError, ValueError):
    if log_fn is not None:
      log_fn(f"Rebuilding {metadata_path}: no n_examples in it")
    return None
  size, want = tf.io.gfile.stat(tfrecord_path).length, metadata.get("tfrecord_bytes")
  if (n > 0 and size == 0) or (isinstance(want, int) and size != want):
    if log_fn is not None:
      log_fn(f"Rebuilding {tfrecord_path}: it has {size} bytes, {metadata_path} says "
             f"{want if isinstance(want, int) else f'{n} records'}")
    return None
  return n


def build_or_load_cached(prefix: str, make_feature_dicts, specs: Sequence[FeatureSpec],
                         pad_to_multiple_of: int = 1, padding_task_id: int = 0,
                         use_existing: bool = True, key: Mapping[str, Any] | None = None,
                         log_fn: Callable[[str], None] | None = None) -> tuple[str, int]:
  """Returns ``(<prefix>.tfrecord, n_records)``, writing the file unless an up-to-date one exists.

  ``make_feature_dicts`` is a zero-argument callable yielding feature dicts, so nothing is
  read or tokenized on a cache hit. ``<prefix>.metadata`` holds ``{"n_examples": n}`` (the
  official file) and the records file's size; a cache file left empty or short is rebuilt.
  ``key`` (JSON-able) describes everything the records were made from; it is stored as
  ``<prefix>.key.json``, written last and atomically, and a cache whose stored key differs is
  rebuilt, with one ``log_fn`` line naming what changed. Without ``key`` any
  complete cache is reused (the official behaviour).
  """
  tfrecord_path, metadata_path = prefix + ".tfrecord", prefix + ".metadata"
  key_path = prefix + ".key.json"
  key = None if key is None else json.loads(json.dumps(key))  # as it reads back from disk
  complete = tf.io.gfile.exists(metadata_path) and tf.io.gfile.exists(tfrecord_path)
  n_cached = _cached_count(metadata_path, tfrecord_path, log_fn) if use_existing and complete \
      else None
  if n_cached is not None:
    stored = _read_json(key_path) if key is not None else None
    if key is None or stored == key:
      return tfrecord_path, n_cached
    if log_fn is not None:
      why = (", ".join(key_changes(stored, key)) if isinstance(stored, dict)
             else "no cache key (written by an older version)")
      log_fn(f"Rebuilding cache {os.path.basename(prefix)}: {why}")
  for path in (key_path, metadata_path):  # an interrupted rebuild must not look complete
    if tf.io.gfile.exists(path):
      tf.io.gfile.remove(path)
  with atomic_io.temp_path(tfrecord_path) as tmp:
    n = write_tfrecord(make_feature_dicts(), specs, tmp, pad_to_multiple_of, padding_task_id)
  _write_json_atomically(metadata_path, {  # the size lets a short (cut) file be told apart
      "n_examples": n, "tfrecord_bytes": tf.io.gfile.stat(tfrecord_path).length})
  if key is not None:
    _write_json_atomically(key_path, key, indent=1)
  return tfrecord_path, n
