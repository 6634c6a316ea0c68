"""The featurised-data cache is keyed on what produced it: RTE-layout rows (tests/data) in tmp
folders, edited or re-configured between runs, must be re-featurised (one line says why) or
reused."""

import json
import os

import numpy as np
import pytest

from electra_tf.config import FinetuningConfig
from electra_tf.finetuning import features, preprocessing, registry
from electra_tf.finetuning.preprocessing import Preprocessor

HPARAMS = {"task_names": ["rte"], "max_seq_length": 64, "train_batch_size": 8,
           "eval_batch_size": 8, "init_checkpoint": None, "seed": 1}


def _rows(path, start, stop):
  with open(path, encoding="utf-8") as f:
    rows = f.read().split("\n")
  return "\n".join([rows[0]] + rows[start:stop]) + "\n"


@pytest.fixture
def root(data_dir, tmp_path):
  rte = tmp_path / "finetuning_data" / "rte"
  rte.mkdir(parents=True)
  (rte / "train.tsv").write_text(_rows(data_dir / "glue" / "RTE" / "train.tsv", 1, 17))
  (rte / "dev.tsv").write_text(_rows(data_dir / "glue" / "RTE" / "dev.tsv", 1, 9))
  return tmp_path


class Run:
  """One run's Preprocessor over fresh tasks, counting how often examples are read."""

  def __init__(self, root, vocab_file, **hparams):
    self.config = FinetuningConfig("m", str(root), **{**HPARAMS, "vocab_file": vocab_file,
                                                       **hparams})
    self.config.preprocessed_data_dir = str(root / "tfrecords")
    self.tasks = registry.build_tasks(self.config)
    self.reads = 0

    def examples_fn(task, split):
      self.reads += 1
      return task.get_examples(split)

    self.pre = Preprocessor(self.config, self.tasks, examples_fn, seed=self.config.seed)

  def train_records(self):
    path, n = self.pre.prepare(self.tasks, "train", is_training=True)
    batches = features.input_dataset(path, self.pre.specs, 8, is_training=False)
    return n, [{k: v.numpy() for k, v in b.items()} for b in batches]


def _rebuild_lines(out):
  return [line for line in out.splitlines() if line.startswith("Rebuilding cache")]


def _input_ids(tasks):
  """input_ids of every train feature made directly from the raw files, sorted."""
  feats = [f for ex in tasks[0].get_examples("train") for f in tasks[0].featurize(ex, True)]
  return sorted(tuple(f["input_ids"]) for f in feats)


def test_unchanged_cache_is_reused_without_featurising(root, vocab_file, capsys):
  first = Run(root, vocab_file)
  n, _ = first.train_records()
  assert first.reads == 1 and n == 16
  key_file = root / "tfrecords" / "rte_train.key.json"
  assert json.loads(key_file.read_text())["files"]["rte/train.tsv"]["size"] > 0
  again = Run(root, vocab_file)
  assert again.train_records()[0] == 16
  assert again.reads == 0
  assert _rebuild_lines(capsys.readouterr().out) == []


def test_edited_train_file_is_rebuilt_and_used(root, vocab_file, data_dir, capsys):
  Run(root, vocab_file).train_records()
  capsys.readouterr()
  # other rows, same count: same size class, same number of records
  (root / "finetuning_data" / "rte" / "train.tsv").write_text(
      _rows(data_dir / "glue" / "RTE" / "train.tsv", 101, 117))
  run = Run(root, vocab_file)
  n, batches = run.train_records()
  assert run.reads == 1
  assert _rebuild_lines(capsys.readouterr().out) == [
      "Rebuilding cache rte_train: rte/train.tsv changed"]
  assert all((b["task_id"] == 0).all() for b in batches)  # 16 rows: no padding records
  cached = sorted(tuple(ids) for b in batches for ids in b["input_ids"])
  assert len(cached) == n == 16
  assert cached == _input_ids(run.tasks)


def test_other_max_seq_length_is_rebuilt_not_a_parse_error(root, vocab_file, capsys):
  Run(root, vocab_file).train_records()
  capsys.readouterr()
  run = Run(root, vocab_file, max_seq_length=32)
  n, batches = run.train_records()
  assert run.reads == 1
  assert _rebuild_lines(capsys.readouterr().out) == [
      "Rebuilding cache rte_train: max_seq_length changed (64 -> 32)"]
  assert {b["input_ids"].shape for b in batches} == {(8, 32)}
  assert sorted(tuple(ids) for b in batches for ids in b["input_ids"]) == _input_ids(
      run.tasks)


def test_seed_vocab_and_batch_size_are_part_of_the_key(root, vocab_file, tmp_path, capsys):
  Run(root, vocab_file).train_records()
  capsys.readouterr()
  Run(root, vocab_file, seed=2).train_records()
  assert _rebuild_lines(capsys.readouterr().out) == [
      "Rebuilding cache rte_train: seed changed (1 -> 2)"]
  vocab = tmp_path / "vocab_copy.txt"
  with open(vocab_file, encoding="utf-8") as f:
    vocab.write_text(f.read() + "zzzznewtoken\n", encoding="utf-8")
  Run(root, str(vocab), seed=2).train_records()
  assert _rebuild_lines(capsys.readouterr().out) == [
      "Rebuilding cache rte_train: vocab changed"]
  Run(root, str(vocab), seed=2, train_batch_size=4).train_records()
  assert _rebuild_lines(capsys.readouterr().out) == [
      "Rebuilding cache rte_train: batch_size changed (8 -> 4)"]


def test_dev_cache_ignores_the_training_seed_but_not_its_file(root, vocab_file, capsys):
  run = Run(root, vocab_file)
  run.pre.prepare(run.tasks, "dev", is_training=False)
  other = Run(root, vocab_file, seed=5)
  other.pre.prepare(other.tasks, "dev", is_training=False)
  assert other.reads == 0
  with open(root / "finetuning_data" / "rte" / "dev.tsv", "a", encoding="utf-8") as f:
    f.write("99\tA new premise.\tA new hypothesis.\tentailment\n")
  third = Run(root, vocab_file)
  assert third.pre.prepare(third.tasks, "dev", is_training=False)[1] == 16  # 9 rows, padded
  assert _rebuild_lines(capsys.readouterr().out) == [
      "Rebuilding cache rte_dev: rte/dev.tsv changed"]


def test_cache_without_key_and_use_tfrecords_if_existing(root, vocab_file, capsys):
  Run(root, vocab_file).train_records()
  os.remove(root / "tfrecords" / "rte_train.key.json")  # as written by an older version
  run = Run(root, vocab_file)
  run.train_records()
  assert run.reads == 1
  assert _rebuild_lines(capsys.readouterr().out) == [
      "Rebuilding cache rte_train: no cache key (written by an older version)"]
  never = Run(root, vocab_file, use_tfrecords_if_existing=False)
  never.train_records()
  assert never.reads == 1  # the hparam still forces featurising an up-to-date cache


def test_key_changes_are_readable():
  old = {"max_seq_length": 128, "files": {"a/x": {"size": 1}, "a/y": {"size": 2}},
         "options": {"squad": {"doc_stride": 128, "max_query_length": 64}}, "seed": None}
  new = {"max_seq_length": 128, "files": {"a/x": {"size": 3}, "a/z": {"size": 2}},
         "options": {"squad": {"doc_stride": 32, "max_query_length": 64}}, "seed": 4}
  assert features.key_changes(old, new) == [
      "a/x changed", "a/y removed", "a/z added",
      "options.squad.doc_stride changed (128 -> 32)", "seed changed (null -> 4)"]


def test_file_fingerprint_small_and_large(tmp_path):
  small = tmp_path / "small.txt"
  small.write_bytes(b"abc")
  fp = features.file_fingerprint(str(small))
  assert set(fp) == {"size", "sha256"} and fp["size"] == 3
  os.utime(small, ns=(1, 1))
  assert features.file_fingerprint(str(small)) == fp  # content, not mtime, for small files
  large = tmp_path / "large.bin"
  data = bytearray(np.arange(5000, dtype=np.uint8).tobytes())
  large.write_bytes(bytes(data))
  fp = features.file_fingerprint(str(large), chunk=1000)
  assert set(fp) == {"size", "sha256", "mtime_ns"}
  data[2500] ^= 1  # a same-size edit in the middle: only the mtime can tell
  large.write_bytes(bytes(data))
  os.utime(large, ns=(fp["mtime_ns"] + 10**9, fp["mtime_ns"] + 10**9))
  changed = features.file_fingerprint(str(large), chunk=1000)
  assert changed["sha256"] == fp["sha256"] and changed != fp
  data[10] ^= 1
  large.write_bytes(bytes(data))
  assert features.file_fingerprint(str(large), chunk=1000)["sha256"] != fp["sha256"]


def test_a_cache_depends_on_its_own_split_files(root, vocab_file, data_dir, capsys):
  """Editing train.tsv rebuilds the train cache only; a tagging task's label ids come from
  every split, so its caches depend on all of its files."""
  run = Run(root, vocab_file)
  run.pre.prepare(run.tasks, "dev", is_training=False)
  with open(root / "finetuning_data" / "rte" / "train.tsv", "a", encoding="utf-8") as f:
    f.write("99\tA new premise.\tA new hypothesis.\tentailment\n")
  again = Run(root, vocab_file)
  again.pre.prepare(again.tasks, "dev", is_training=False)
  assert again.reads == 0 and _rebuild_lines(capsys.readouterr().out) == []
  chunk = root / "finetuning_data" / "chunk"
  chunk.mkdir()
  for split in ("train", "dev"):
    (chunk / f"{split}.txt").write_text("Confidence NN B-NP\nin IN B-PP\n\n")
  squad = root / "finetuning_data" / "squad"
  squad.mkdir()
  for split in ("train", "dev"):
    (squad / f"{split}.json").write_text('{"data": []}')
  tasks = {t.name: t for t in registry.build_tasks(
      FinetuningConfig("m", str(root), **{**HPARAMS, "task_names": ["rte", "chunk", "squad"],
                                           "vocab_file": vocab_file}))}
  assert [os.path.basename(p) for p in preprocessing.source_paths(tasks["rte"], "dev")] == [
      "dev.tsv"]
  assert [os.path.basename(p) for p in preprocessing.source_paths(tasks["squad"], "dev")] == [
      "dev.json"]
  assert [os.path.basename(p) for p in preprocessing.source_paths(tasks["chunk"], "dev")] == [
      "dev.txt", "train.txt"]
  assert preprocessing.source_paths(tasks["rte"], "test") == []  # reading it reports it
