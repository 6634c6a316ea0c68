"""electra_tf.pretraining.data: shapes, order, determinism, sharding, bad shards."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from data_prep import build_pretraining_dataset as bpd
from electra_tf.pretraining.data import pretraining_dataset

FIELDS = ("input_ids", "input_mask", "segment_ids")


@pytest.fixture(scope="module")
def golden(reference_dir):
  """(the official TFRecord, its examples, their length: 64 golden lane, 128 extended)."""
  d = reference_dir / "pretrain_data"
  examples = json.loads((d / "examples.json").read_text())
  return (str(d / "tfrecords" / "pretrain_data.tfrecord-0-of-1"), examples,
          len(examples[0]["input_ids"]))


@pytest.fixture(scope="module")
def shards(reference_dir, vocab_file, golden, tmp_path_factory):
  """The golden corpus written as 4 shards of half the golden length (real text): (files,
  number of examples, their length). The length differs from the golden file's on purpose."""
  length = golden[2] // 2
  out = tmp_path_factory.mktemp("shards")
  bpd.build(bpd.BuildArgs(corpus_dir=str(reference_dir / "pretrain_data" / "corpus"),
                          vocab_file=vocab_file, output_dir=str(out), max_seq_length=length,
                          num_out_files=4, seed=4))
  files = sorted(str(p) for p in out.iterdir())
  return files, sum(1 for f in files for _ in tf.data.TFRecordDataset(f)), length


def stack(batches):
  return {k: np.concatenate([b[k].numpy() for b in batches]) for k in FIELDS}


def test_eval_pass_shapes_and_values(golden):
  path, examples, length = golden
  ds = pretraining_dataset(path, batch_size=16, max_seq_length=length, is_training=False)
  for k in FIELDS:
    assert ds.element_spec[k] == tf.TensorSpec([16, length], tf.int32)
  got = stack(list(ds))
  n = len(examples) // 16 * 16  # the partial last batch is dropped
  for k in FIELDS:
    assert got[k].shape == (n, length)
    np.testing.assert_array_equal(got[k], np.array([e[k] for e in examples[:n]]))


def test_training_repeats_shuffles_and_is_seeded(shards):
  files, n_examples, length = shards
  take = 3 * n_examples // 8 + 1  # more than one pass over the data
  run = lambda seed: stack(list(
    pretraining_dataset(os.path.join(os.path.dirname(files[0]), "pretrain_data.tfrecord*"),
                        batch_size=8, max_seq_length=length, seed=seed).take(take)))
  a, b, c = run(1), run(1), run(2)
  assert a["input_ids"].shape == (8 * take, length)
  for k in FIELDS:
    np.testing.assert_array_equal(a[k], b[k])
  assert not np.array_equal(a["input_ids"], c["input_ids"])
  eval_order = stack(list(pretraining_dataset(files, 1, length, is_training=False)))["input_ids"]
  assert not np.array_equal(a["input_ids"][:len(eval_order)], eval_order)
  # Every example of the data shows up (and nothing else).
  rows = {tuple(r) for r in a["input_ids"]}
  assert rows == {tuple(r) for r in eval_order}


@pytest.mark.parametrize("n_files", [4, 1])  # file-level / record-level sharding
def test_input_context_splits_the_data(shards, golden, n_files):
  files = shards[0] if n_files == 4 else [golden[0]]
  length = shards[2] if n_files == 4 else golden[2]
  everything = stack(list(pretraining_dataset(files, 1, length, is_training=False)))
  parts = []
  for pipeline in range(2):
    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline,
                                     num_replicas_in_sync=2)
    ds = pretraining_dataset(files, batch_size=2, max_seq_length=length, is_training=False,
                             input_context=ctx)
    assert ds.element_spec["input_ids"].shape == (1, length)  # per-replica batch
    parts.append(stack(list(ds))["input_ids"])
  assert len(parts[0]) and len(parts[1])
  assert sorted(map(tuple, np.concatenate(parts))) == sorted(map(tuple,
                                                                everything["input_ids"]))


def test_comma_separated_patterns_and_lists(shards):
  files, n, length = shards
  one = pretraining_dataset(",".join(files[:2]) + "," + files[2], 1, length, is_training=False)
  two = pretraining_dataset(files[:3], 1, length, is_training=False)
  assert [b["input_ids"].numpy().tolist() for b in one] == \
    [b["input_ids"].numpy().tolist() for b in two]


def write_records(path, records):
  with tf.io.TFRecordWriter(str(path)) as w:
    for r in records:
      w.write(r)


def test_corrupt_shard_is_named(golden, tmp_path):
  path, _, length = golden
  data = bytearray(open(path, "rb").read())
  good = tmp_path / "pretrain_data.tfrecord-0-of-2"
  bad = tmp_path / "pretrain_data.tfrecord-1-of-2"
  good.write_bytes(bytes(data))
  flipped = bytearray(data)
  flipped[len(data) // 2] ^= 0xFF  # a payload byte in the middle: its CRC no longer matches
  bad.write_bytes(bytes(flipped))
  ds = pretraining_dataset(str(tmp_path / "*"), 8, length, is_training=False)
  with pytest.raises(tf.errors.InvalidArgumentError, match=f"corrupt or truncated TFRecord "
                     f"shard {bad}"):
    for _ in ds:
      pass

  bad.write_bytes(bytes(data[:-100]))  # truncated
  ds = pretraining_dataset([str(bad)], 8, length, is_training=False)
  with pytest.raises(tf.errors.InvalidArgumentError, match=str(bad)):
    for _ in ds:
      pass

  bad_header = bytearray(data)
  bad_header[3] ^= 0xFF  # the first record's length: caught when the dataset is made
  bad.write_bytes(bytes(bad_header))
  with pytest.raises(ValueError, match=f"corrupt TFRecord shard {bad}"):
    pretraining_dataset([str(bad)], 8, length)


def test_wrong_length_shards(golden, shards, tmp_path):
  path, _, length = golden
  short = shards[2]
  with pytest.raises(ValueError, match=f"has input_ids of length {length} but max_seq_length is "
                     f"{short}"):
    pretraining_dataset(path, 8, short)
  # A later shard of another length fails inside the pipeline, naming that shard. Files are
  # read in sorted order, so the golden-length copy gets a name that sorts after the good shard.
  first, late = tmp_path / "a.tfrecord", tmp_path / "b.tfrecord"
  first.write_bytes(open(shards[0][0], "rb").read())
  late.write_bytes(open(path, "rb").read())
  files = [str(late), str(first)]
  ds = pretraining_dataset(files, 8, short, is_training=False)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=f"shard {late}: input_ids of length {length} but max_seq_length is "
                     f"{short}"):
    for _ in ds:
      pass


def test_no_examples(tmp_path):
  with pytest.raises(ValueError, match="no files match"):
    pretraining_dataset(str(tmp_path / "pretrain_data.tfrecord*"), 8, 128)
  for i in range(2):
    write_records(tmp_path / f"pretrain_data.tfrecord-{i}-of-2", [])
  with pytest.raises(ValueError, match="no examples found: the 2 file"):
    pretraining_dataset(str(tmp_path / "pretrain_data.tfrecord*"), 8, 128)
  (tmp_path / "notes.txt").write_text("not a tfrecord")
  with pytest.raises(ValueError, match="notes.txt does not hold tf.train.Example records|"
                     "corrupt TFRecord shard .*notes.txt"):
    pretraining_dataset(str(tmp_path / "*"), 8, 128)


def test_other_features_are_reported(tmp_path):
  ex = tf.train.Example()
  ex.features.feature["input_ids"].int64_list.value.extend([1] * 16)
  write_records(tmp_path / "x.tfrecord", [ex.SerializeToString()])
  with pytest.raises(ValueError, match="has input_mask of length 0 but max_seq_length is 16"):
    pretraining_dataset(str(tmp_path / "x.tfrecord"), 1, 16)


def test_empty_shards_do_not_starve_a_pipeline(shards, tmp_path):
  """Pipeline 1 would get only the empty files if they were sharded too (and spin forever)."""
  files = shards[0]
  for i, name in enumerate(["a", "b", "c", "d"]):
    dst = tmp_path / f"{name}.tfrecord"
    if i % 2:
      write_records(dst, [])
    else:
      dst.symlink_to(files[i])
  for pipeline in range(2):
    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline,
                                     num_replicas_in_sync=2)
    ds = pretraining_dataset(str(tmp_path / "*.tfrecord"), 4, shards[2], seed=0,
                             input_context=ctx)
    take = shards[1] // 2 + 1  # more examples than all files hold: the pipeline repeats
    batches = list(ds.take(take))
    assert len(batches) == take and batches[0]["input_ids"].shape == (2, shards[2])
