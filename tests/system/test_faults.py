"""Failure drills: bad data, bad checkpoints, killed or failed saves, stale exports.

Each case uses real files (truncated, corrupted, filled disks, SIGKILLed processes) and asserts
the exact one-line message and that nothing already saved changed.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys

import pytest
import tensorflow as tf
import tf_keras
from helpers import procs, toy_train
from helpers.paths import GOLDEN, HELPERS, REPO_ROOT

from data_prep import build_pretraining_dataset as bpd
from electra_tf import checkpoints, tokenization, training
from electra_tf.finetuning import features as ft_features
from electra_tf.pretraining import data, data_check

TOY = HELPERS / "toy_train.py"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1"}
_RECORD_OVERHEAD = 16


def _one_device():
  return training.get_strategy("one_device", num_gpus=0)


def _digests(folder: pathlib.Path, pattern: str = "*") -> dict[str, str]:
  """sha256 of every file under `folder` matching `pattern` (relative path -> digest)."""
  return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
          for p in sorted(folder.rglob(pattern)) if p.is_file()}


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, *args], cwd=REPO_ROOT, env=ENV, capture_output=True,
                        text=True, timeout=timeout)


# ----- data: corrupt shards, foreign vocabularies ----------------------------------------------


@pytest.fixture(scope="module")
def golden_shard(reference_dir) -> pathlib.Path:
  return reference_dir / "pretrain_data" / "tfrecords" / "pretrain_data.tfrecord-0-of-1"


@pytest.fixture(scope="module")
def seq(reference_dir) -> int:
  """max_seq_length of the lane's golden shard (128 extended, 64 golden)."""
  args = json.loads((reference_dir / "pretrain_data" / "build_args.json").read_text())
  return args["max_seq_length"]


@pytest.fixture(scope="module")
def vocab_size(reference_dir) -> int:
  """WordPieces of the lane's vocabulary, which built the golden shard."""
  return len(tokenization.vocab_lines(str(reference_dir / "vocab.txt")))


@pytest.fixture(scope="module")
def small_vocab(reference_dir) -> int:
  """A smaller vocab_size than the golden shard's ids need, its first example included (the
  golden lane's 1016 WordPieces: ids 1000+ are rare, 500+ are not)."""
  return 500 if reference_dir == GOLDEN else 1000


def _readable_bytes(data: bytes, cut: int) -> int:
  """Bytes of the whole records that lie before byte `cut` (what a reader gets through)."""
  total = offset = 0
  while offset + 12 <= len(data):
    length = int.from_bytes(data[offset:offset + 8], "little")
    end = offset + length + _RECORD_OVERHEAD
    if end > cut:
      break
    total, offset = end, end
  return total


def _remap_ids(src: pathlib.Path, dst: pathlib.Path, vocab_size: int) -> None:
  """Copies a shard with every input id taken modulo vocab_size (data of a smaller vocab)."""
  with tf.io.TFRecordWriter(str(dst)) as w:
    for record in tf.data.TFRecordDataset(str(src)):
      example = tf.train.Example.FromString(record.numpy())
      ids = example.features.feature["input_ids"].int64_list
      ids.value[:] = [i % vocab_size for i in ids.value]
      w.write(example.SerializeToString())


def _first_bad_id(path: pathlib.Path, vocab_size: int) -> int:
  for record in tf.data.TFRecordDataset(str(path)):
    ids = tf.train.Example.FromString(record.numpy()).features.feature["input_ids"].int64_list
    bad = [i for i in ids.value if i >= vocab_size]
    if bad:
      return bad[0]
  raise AssertionError("no id out of range")


class TinyModel(tf_keras.Model):
  """Embeds input_ids [B, T] -> [B, T, 4]; loss = mean squared embedding norm over the mask."""

  def __init__(self, vocab_size: int):
    super().__init__(name="tiny")
    self.embed = tf_keras.layers.Embedding(vocab_size, 4, name="embed")

  def call(self, features, training=False):
    x = self.embed(features["input_ids"])
    mask = tf.cast(features["input_mask"], tf.float32)
    return {"total_loss": tf.reduce_sum(tf.reduce_sum(x * x, -1) * mask) / tf.reduce_sum(mask)}


def _train_on(files: list[str], model_dir: pathlib.Path, vocab_size: int, lines: list[str],
              seq: int, num_train_steps: int = 1000) -> training.Trainer:
  strategy = _one_device()
  with strategy.scope():
    model = TinyModel(vocab_size)
    model({"input_ids": tf.zeros([1, seq], tf.int32), "input_mask": tf.ones([1, seq], tf.int32)})
    optimizer = tf_keras.optimizers.Adam(0.01)
  trainer = training.Trainer(
      strategy, model, optimizer,
      training.TrainSettings(model_dir=str(model_dir), num_train_steps=num_train_steps,
                             train_batch_size=8, iterations_per_loop=5,
                             save_checkpoints_steps=10),
      log_fn=lines.append)
  trainer.train(lambda ctx: data.pretraining_dataset(
      files, 8, seq, is_training=True, seed=3, input_context=ctx, vocab_size=vocab_size))
  return trainer


def test_truncated_shard_mid_run_saves_progress_and_names_shard(golden_shard, tmp_path, seq,
                                                               vocab_size):
  good, bad = tmp_path / "pretrain_data.tfrecord-0-of-2", tmp_path / "pretrain_data.tfrecord-1-of-2"
  content = golden_shard.read_bytes()
  good.write_bytes(content)
  cut = len(content) * 6 // 10
  bad.write_bytes(content[:cut])
  readable = _readable_bytes(content, cut)
  model_dir, lines = tmp_path / "run", []
  with pytest.raises(training.InputDataError) as err:
    _train_on([str(good), str(bad)], model_dir, vocab_size, lines, seq)
  step = int(training.latest_checkpoint(str(model_dir)).rsplit("-", 1)[1])
  assert step > 10 and step % 10  # mid-run, between two periodic saves
  assert str(err.value) == (
      f"pretraining_dataset: corrupt or truncated TFRecord shard {bad}: records readable up to "
      f"byte {readable} of {cut} (at step {step}; latest checkpoint: {model_dir}/ckpt-{step})")
  assert lines[-1] == f"Saved {model_dir}/ckpt-{step}"
  reader = tf.train.load_checkpoint(str(model_dir / f"ckpt-{step}"))
  assert reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE") == step
  assert good.read_bytes() == content  # the data is only read


def test_check_data_reports_every_bad_shard(golden_shard, tmp_path, monkeypatch, seq,
                                            small_vocab):
  shutil.copy(golden_shard, tmp_path / "a.tfrecord")  # ids of a larger vocabulary
  _remap_ids(golden_shard, tmp_path / "d.tfrecord", small_vocab)  # good
  content = (tmp_path / "d.tfrecord").read_bytes()
  cut = len(content) // 2
  (tmp_path / "b.tfrecord").write_bytes(content[:cut])  # truncated
  flipped = bytearray(content)
  flipped[len(content) // 2] ^= 0xFF  # a payload byte: its record's CRC no longer matches
  (tmp_path / "c.tfrecord").write_bytes(bytes(flipped))
  pattern = str(tmp_path / "*.tfrecord")
  lines: list[str] = []
  with pytest.raises(ValueError) as err:
    data_check.check_data(pattern, seq, vocab_size=small_vocab, log_fn=lines.append)
  first_bad = _first_bad_id(golden_shard, small_vocab)
  c_readable = _readable_bytes(content, len(content) // 2 + 1)  # records before the flip
  assert str(err.value) == (
      "3 of 4 data shard(s) are bad: "
      f"pretraining_dataset: shard {tmp_path}/a.tfrecord has token id {first_bad} but "
      f"vocab_size is {small_vocab} (built with a different vocab?); "
      f"pretraining_dataset: corrupt or truncated TFRecord shard {tmp_path}/b.tfrecord: records "
      f"readable up to byte {_readable_bytes(content, cut)} of {cut}; "
      f"pretraining_dataset: corrupt or truncated TFRecord shard {tmp_path}/c.tfrecord: records "
      f"readable up to byte {c_readable} of {len(content)}")
  assert "\n" not in str(err.value)

  good = [str(tmp_path / "d.tfrecord")]
  assert data_check.check_data(good, seq, vocab_size=small_vocab, log_fn=lines.append) == good
  assert lines[-1].startswith("Checked 1 data shard(s), 0.1 MiB, in ")
  assert lines[-1].endswith("s: all readable")
  assert data_check.check_data(pattern, seq, check=False) == []  # never
  monkeypatch.setattr(data_check, "AUTO_LIMIT_BYTES", 1000)  # auto: "large" data is skipped
  assert data_check.check_data(pattern, seq, vocab_size=small_vocab, log_fn=lines.append) == []
  assert lines[-1] == ("Not checking the 4 data shard(s) up front: 0.0 GiB (set check_data to "
                       "check them anyway)")
  with pytest.raises(ValueError, match="^3 of 4 data shard"):  # True: always
    data_check.check_data(pattern, seq, vocab_size=small_vocab, check=True)


def test_token_id_out_of_vocab(golden_shard, tmp_path, seq, small_vocab):
  small = tmp_path / "a.tfrecord"  # sorts first: the up-front check of one example passes
  _remap_ids(golden_shard, small, small_vocab)
  foreign = tmp_path / "b.tfrecord"
  shutil.copy(golden_shard, foreign)
  first_bad = _first_bad_id(golden_shard, small_vocab)
  with pytest.raises(ValueError) as err:
    data.pretraining_dataset([str(foreign)], 8, seq, vocab_size=small_vocab)
  assert str(err.value) == (f"pretraining_dataset: shard {foreign} has token id {first_bad} but "
                            f"vocab_size is {small_vocab} (built with a different vocab?)")

  model_dir, lines = tmp_path / "run", []
  with pytest.raises(training.InputDataError) as err:
    _train_on([str(small), str(foreign)], model_dir, small_vocab, lines, seq)
  latest = training.latest_checkpoint(str(model_dir))
  step = int(latest.rsplit("-", 1)[1]) if latest else 0
  assert str(err.value) == (
      f"pretraining_dataset: shard {foreign} has token id {first_bad} but vocab_size is "
      f"{small_vocab} (built with a different vocab?) (at step {step}; latest checkpoint: "
      f"{latest or 'none'})")


def test_finetuning_token_id_out_of_vocab(tmp_path):
  specs = ft_features.shared_feature_specs(8)
  path = str(tmp_path / "train.tfrecord")
  rows = [{"input_ids": [2, 5, 7, 0, 0, 0, 0, 0], "input_mask": [1] * 3 + [0] * 5,
           "segment_ids": [0] * 8, "task_id": 0},
          {"input_ids": [2, 40, 31000, 9, 0, 0, 0, 0], "input_mask": [1] * 4 + [0] * 4,
           "segment_ids": [0] * 8, "task_id": 0}]
  ft_features.write_tfrecord(rows, specs, path)
  ok = list(ft_features.input_dataset(path, specs, 1, is_training=False, vocab_size=40000))
  assert len(ok) == 2
  with pytest.raises(tf.errors.InvalidArgumentError) as err:
    list(ft_features.input_dataset(path, specs, 1, is_training=False, vocab_size=30522))
  assert training.errors.data_error_line(err.value) == (
      f"fine-tuning data {path} has token id 31000 but vocab_size is 30522 (built with a "
      "different vocab?)")


# ----- checkpoints: corrupt files, fallback on resume ------------------------------------------


def _copy_checkpoint(folder: pathlib.Path, dst: pathlib.Path) -> str:
  dst.mkdir()
  for f in folder.glob("model.ckpt.*"):
    shutil.copy(f, dst / f.name)
  return str(dst / "model.ckpt")


def _truncate_data(prefix: str) -> None:
  (data_file,) = tf.io.gfile.glob(prefix + ".data-*")
  with open(data_file, "r+b") as f:
    f.truncate(os.path.getsize(data_file) // 2)


def test_corrupt_checkpoint_is_one_line(reference_dir, tmp_path):
  from electra_tf.interop.conversion import convert

  folder = reference_dir / "electra_small_2l"
  truncated = _copy_checkpoint(folder, tmp_path / "truncated")
  _truncate_data(truncated)
  with pytest.raises(checkpoints.CorruptCheckpointError) as err:
    convert(truncated, str(folder / "hparams.json"), str(tmp_path / "out1"))
  assert str(err.value) == (f"checkpoint {truncated} is corrupt or truncated (TensorFlow: Read "
                            "less bytes than requested)")

  bad_index = _copy_checkpoint(folder, tmp_path / "bad_index")
  pathlib.Path(bad_index + ".index").write_bytes(b"not an index" * 20)
  want = (f"checkpoint {bad_index} is corrupt or truncated (TensorFlow: not an sstable (bad "
          "magic number))")
  with pytest.raises(checkpoints.CorruptCheckpointError) as err:
    convert(bad_index, str(folder / "hparams.json"), str(tmp_path / "out2"))
  assert str(err.value) == want

  # init_checkpoint (pre-training and fine-tuning both load TF1 checkpoints this way)
  shapes = dict(tf.train.list_variables(str(folder / "model.ckpt")))
  variables = {n: tf.Variable(tf.zeros(s)) for n, s in shapes.items()
               if not checkpoints.OPTIMIZER_STATE.search(n)}
  with pytest.raises(checkpoints.CorruptCheckpointError, match="^checkpoint .* is corrupt or "
                     r"truncated \(TensorFlow: Read less bytes than requested\)$"):
    checkpoints.load_tf1_checkpoint(variables, truncated)

  before = _digests(tmp_path / "truncated")
  proc = _cli("-m", "electra_tf.convert", f"--checkpoint={truncated}",
              f"--hparams={folder / 'hparams.json'}", f"--output_dir={tmp_path / 'out3'}")
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines() == [
      f"convert: error: checkpoint {truncated} is corrupt or truncated (TensorFlow: Read less "
      "bytes than requested)"]
  assert not (tmp_path / "out3").exists()
  assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out3")]
  assert _digests(tmp_path / "truncated") == before


def test_resume_falls_back_to_previous_complete_checkpoint(tmp_path):
  toy_train.run(_one_device(), str(tmp_path), 20, log_fn=lambda _: None)
  ckpt10 = _digests(tmp_path, "ckpt-10.*")
  _truncate_data(str(tmp_path / "ckpt-20"))
  lines: list[str] = []
  summary = toy_train.run(_one_device(), str(tmp_path), 30, log_fn=lines.append)
  assert lines[:2] == [
      f"Warning: checkpoint {tmp_path}/ckpt-20 is corrupt or truncated (TensorFlow: Read less "
      f"bytes than requested); moved it to {tmp_path}/ckpt-20.rejected; resuming from the "
      f"previous checkpoint {tmp_path}/ckpt-10",
      f"Restored {tmp_path}/ckpt-10 at step 10"]
  assert (summary["start_step"], summary["final_step"]) == (10, 30)
  assert _digests(tmp_path, "ckpt-10.*") == ckpt10

  for prefix in ("ckpt-10", "ckpt-20", "ckpt-30"):  # nothing readable left: a one-line error
    _truncate_data(str(tmp_path / prefix))
  with pytest.raises(checkpoints.CorruptCheckpointError) as err:
    toy_train.run(_one_device(), str(tmp_path), 40, log_fn=lambda _: None)
  assert str(err.value) == (f"checkpoint {tmp_path}/ckpt-10 is corrupt or truncated "
                            "(TensorFlow: Read less bytes than requested)")
  assert sorted(p.name for p in tmp_path.glob("ckpt-*.rejected*")) == [
      "ckpt-20.rejected", "ckpt-20.rejected-2", "ckpt-30.rejected"]  # the last one stays


# ----- saves: killed, failed for lack of space -------------------------------------------------


@pytest.mark.slow
def test_stale_temp_folder_of_a_killed_save_is_removed_at_start_up(tmp_path):
  model_dir = tmp_path / "run"
  proc = subprocess.Popen([sys.executable, str(TOY), "--model_dir", str(model_dir),
                           "--kill_at", "merge", "--kill_step", "20"], env=ENV,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  log = procs.finish(proc)
  assert proc.returncode == -signal.SIGKILL, log
  stale = model_dir / "ckpt-20_temp"
  assert stale.is_dir()
  # A temp folder is never resumable, so start-up removes it whatever its step (it
  # was kept while newer than the newest checkpoint); no run of this loop is saving there.
  saved = _digests(model_dir, "ckpt-*.*")
  lines: list[str] = []
  toy_train.run(_one_device(), str(model_dir), 30, save_checkpoints_steps=25,
                log_fn=lines.append)
  assert procs.took_over_lock(lines[0], model_dir), lines[0]  # the SIGKILLed run's lock
  assert lines[1:3] == [f"Removed {stale}, left by a save that was interrupted",
                        f"Restored {model_dir}/ckpt-10 at step 10"]
  assert not stale.exists()
  after = _digests(model_dir, "ckpt-*.*")
  assert {k: after[k] for k in saved} == saved  # every complete checkpoint untouched


def test_disk_full_during_a_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
  """ENOSPC injected where a full disk reports it for data already written (delayed
  allocation): the fsync that makes the new checkpoint durable, inside its save."""
  model_dir = tmp_path / "run"
  saved: dict[str, str] = {}
  real_fsync = os.fsync

  def fsync(fd):
    if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith("ckpt-20."):
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    real_fsync(fd)

  def fill_disk_after_first_save(line: str) -> None:
    if line == f"Saved {model_dir}/ckpt-10":
      saved.update(_digests(model_dir, "ckpt-10.*"))
      monkeypatch.setattr(os, "fsync", fsync)

  with pytest.raises(training.CheckpointSaveError) as err:
    toy_train.run(_one_device(), str(model_dir), 30, log_fn=fill_disk_after_first_save,
                  keep_checkpoint_max=1)
  assert str(err.value) == (
      f"saving the checkpoint for step 20 in {model_dir} failed (No space left on device); "
      f"its files were removed and the latest complete checkpoint is still ckpt-10")
  assert training.latest_checkpoint(str(model_dir)) == str(model_dir / "ckpt-10")
  assert tf.train.latest_checkpoint(str(model_dir)) == str(model_dir / "ckpt-10")  # state file
  assert _digests(model_dir, "ckpt-10.*") == saved  # not deleted for ckpt-20 (max_to_keep 1)
  assert not list(model_dir.glob("ckpt-20*"))  # the partial save was cleaned up
  monkeypatch.setattr(os, "fsync", real_fsync)
  summary = toy_train.run(_one_device(), str(model_dir), 30, log_fn=lambda _: None)
  assert (summary["start_step"], summary["final_step"]) == (10, 30)


def test_a_failed_state_file_write_keeps_the_complete_checkpoint(tmp_path, monkeypatch):
  """An error writing the state file after ckpt-20's files were made durable: the line says
  ckpt-20 is kept (not that the save left the previous one), and a rerun resumes from it."""
  from tensorflow.python.checkpoint import checkpoint_management

  model_dir = tmp_path / "run"
  real_write = checkpoint_management.update_checkpoint_state_internal

  def write_state(save_dir, model_checkpoint_path, *args, **kwargs):
    if model_checkpoint_path.endswith("ckpt-20"):
      raise tf.errors.UnavailableError(None, None, "injected state-file write error")
    return real_write(save_dir, model_checkpoint_path, *args, **kwargs)

  monkeypatch.setattr(checkpoint_management, "update_checkpoint_state_internal", write_state)
  with pytest.raises(training.CheckpointSaveError) as err:
    toy_train.run(_one_device(), str(model_dir), 30, log_fn=lambda _: None)
  assert str(err.value) == (
      f"saving the checkpoint for step 20 in {model_dir} failed (injected state-file write "
      "error) after its files were complete; ckpt-20 is kept and is the latest")
  assert training.latest_checkpoint(str(model_dir)) == str(model_dir / "ckpt-20")
  assert tf.train.latest_checkpoint(str(model_dir)) == str(model_dir / "ckpt-10")  # state file
  monkeypatch.setattr(checkpoint_management, "update_checkpoint_state_internal", real_write)
  summary = toy_train.run(_one_device(), str(model_dir), 30, log_fn=lambda _: None)
  assert (summary["start_step"], summary["final_step"]) == (20, 30)


# ----- exports, output folders, vocab files ---------------------------------------------------


@pytest.mark.slow
def test_convert_refuses_a_non_empty_output_dir_and_replaces_it_whole(reference_dir, tmp_path):
  folder = reference_dir / "electra_small_2l"
  out = tmp_path / "export"
  (out / "hf" / "discriminator").mkdir(parents=True)
  (out / "hf" / "discriminator" / "config.json").write_text('{"old": true}')
  (out / "notes.txt").write_text("an old export")
  before = _digests(out)
  args = ["-m", "electra_tf.convert", f"--checkpoint={folder / 'model.ckpt'}",
          f"--hparams={folder / 'hparams.json'}", f"--output_dir={out}", "--nohf"]
  proc = _cli(*args)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines() == [
      f"convert: error: output_dir {out} is not empty; pass --overwrite to replace it whole, "
      "or choose another folder"]
  assert _digests(out) == before

  proc = _cli(*args, "--overwrite")
  assert proc.returncode == 0, proc.stderr[-2000:]
  # the new export whole (with its hparams.json), nothing of the old one
  assert sorted(p.name for p in out.iterdir()) == ["encoder", "hparams.json", "saved_model",
                                                   "tf1", "tf2"]
  assert f"  tf1/          {out}/tf1/model.ckpt" in proc.stdout.splitlines()
  assert [p.name for p in tmp_path.iterdir()] == ["export"]  # no staging folder left


def test_data_builders_output_dir_under_a_file(reference_dir, tmp_path, vocab_file):
  blocker = tmp_path / "a_file"
  blocker.write_text("not a folder")
  out = blocker / "tfrecords"
  with pytest.raises(ValueError) as err:
    bpd.build(bpd.BuildArgs(corpus_dir=str(reference_dir / "pretrain_data" / "corpus"),
                            vocab_file=vocab_file, output_dir=str(out), max_seq_length=64,
                            num_out_files=1, seed=1))
  assert str(err.value) == f"output_dir {out} cannot be created: {blocker} is not a directory"
  proc = _cli("data_prep/build_pretraining_dataset.py",
              f"--corpus_dir={reference_dir / 'pretrain_data' / 'corpus'}",
              f"--vocab_file={vocab_file}", f"--output_dir={out}", "--max_seq_length=64",
              "--num_out_files=1", "--seed=1")
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1] == (
      f"build_pretraining_dataset: error: output_dir {out} cannot be created: {blocker} is not "
      "a directory")
  assert len([line for line in proc.stderr.splitlines() if "Traceback" in line]) == 0
  from data_prep import build_demo_corpus
  with pytest.raises(ValueError) as err:
    build_demo_corpus.build_demo_corpus(str(out), num_files=1, max_modules=2)
  assert str(err.value) == f"output_dir {out} cannot be created: Not a directory"
  assert blocker.read_text() == "not a folder"


def test_non_utf8_vocab_names_the_file(tmp_path, vocab_file):
  bad = tmp_path / "vocab.txt"
  bad.write_bytes(pathlib.Path(vocab_file).read_bytes()[:2000] + b"caf\xe9\n")
  want = f"vocab file {bad} is not UTF-8 text: byte 0xe9 cannot be decoded"
  for load in (tokenization.load_vocab, tokenization.vocab_lines, tokenization.FullTokenizer):
    with pytest.raises(ValueError) as err:
      load(str(bad))
    assert str(err.value) == want
  with pytest.raises(ValueError) as err:
    bpd.check_vocab(str(bad))
  assert str(err.value) == want
  assert len(tokenization.vocab_lines(vocab_file)) == 1016  # tests/golden/vocab.txt, whole


def test_staged_export_keeps_the_old_folder_when_writing_fails(tmp_path):
  from electra_tf.interop import staged_output as staging

  out = tmp_path / "out"
  out.mkdir()
  (out / "old.txt").write_text("old")
  with pytest.raises(RuntimeError, match="boom"), staging.staged_dir(str(out), True) as stage:
    pathlib.Path(stage, "new.txt").write_text("new")
    raise RuntimeError("boom")
  assert [p.name for p in tmp_path.iterdir()] == ["out"] and (out / "old.txt").exists()
  with staging.staged_dir(str(out), True) as stage:
    pathlib.Path(stage, "new.txt").write_text("new")
  assert [p.name for p in out.iterdir()] == ["new.txt"]
  assert staging.relocate({"a": [f"{stage}/x"]}, stage, str(out)) == {"a": [f"{out}/x"]}
