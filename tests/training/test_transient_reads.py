"""A checkpoint is set aside only on proof of damage: a transient read error (a bucket's 503,
a timeout, a short read) is retried, and if it persists the run stops in one line, moving
nothing; a permanent one (a permission, a read-only file system, a local disk's I/O error)
stops at once, naming the file and what to do. A partial index does not count as complete (an
index read that fails once is retried); workers agree on the step they restored; the
non-finite error says how to start afresh in each entry point.
"""

from __future__ import annotations

import errno
import hashlib
import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import ports, pretrain_data, procs, read_faults, rte_finetune, toy_train
from helpers.paths import GOLDEN, REPO_ROOT

from electra_tf import checkpoints, folder_lock, training
from electra_tf.training import checkpoint_files, checkpoint_restore, checkpointing

ENV = read_faults.quiet_env()


@pytest.fixture(autouse=True)
def no_waits(monkeypatch):
  read_faults.no_waits(monkeypatch)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> pathlib.Path:
  """A toy run's folder with ckpt-10 and ckpt-20 (copied by each test that changes it)."""
  folder = tmp_path_factory.mktemp("toy")
  toy_train.run(_one_device(), str(folder), 20, log_fn=lambda line: None)
  folder_lock.release(str(folder))  # this process trained it; the tests' runs use copies
  return folder


def _one_device():
  return training.get_strategy("one_device", num_gpus=0)


def _copy(trained: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
  folder = tmp_path / "run"
  shutil.copytree(trained, folder)
  return folder


def _digests(folder: pathlib.Path) -> dict[str, str]:
  return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
          for p in sorted(folder.rglob("*"))
          if p.is_file() and p.name != folder_lock.LOCK_NAME}  # a run's lock is not its work


def _failing_restore(monkeypatch, failures: int, error: tf.errors.OpError) -> list[str]:
  """tf.train.Checkpoint.restore raising `error` on its first `failures` calls (all if < 0)."""
  original, calls = tf.train.Checkpoint.restore, []

  def restore(self, save_path, *args, **kwargs):
    calls.append(str(save_path))
    if failures < 0 or len(calls) <= failures:
      raise error
    return original(self, save_path, *args, **kwargs)

  monkeypatch.setattr(tf.train.Checkpoint, "restore", restore)
  return calls


def _503() -> tf.errors.OpError:
  return tf.errors.UnavailableError(None, None, read_faults.MESSAGE)


def test_a_503_at_restore_is_retried_and_resumes_from_the_newest(trained, tmp_path, monkeypatch):
  folder = _copy(trained, tmp_path)
  calls = _failing_restore(monkeypatch, 2, _503())
  lines: list[str] = []
  summary = toy_train.run(_one_device(), str(folder), 30, log_fn=lines.append)
  assert calls == [str(folder / "ckpt-20")] * 3  # two 503s, then read
  assert f"Restored {folder}/ckpt-20 at step 20" in lines and summary["start_step"] == 20
  assert not [line for line in lines if "Warning" in line], lines
  assert not list(folder.glob("*.rejected*"))


@pytest.mark.parametrize("error", [
    _503(),
    tf.errors.DeadlineExceededError(None, None, "Deadline Exceeded"),
    tf.errors.NotFoundError(None, None, "ckpt-20.data-00000-of-00001; No such file or directory"),
    tf.errors.OpError(None, None, "Unable to read file (ckpt-20.index). Perhaps the file is "
                      "corrupt or was produced by a newer version of TensorFlow with format "
                      "changes (failed to read): HTTP 503", tf.errors.UNKNOWN),
], ids=lambda e: type(e).__name__)
def test_a_persistent_read_error_stops_in_one_line_and_moves_nothing(trained, tmp_path,
                                                                     monkeypatch, error):
  folder = _copy(trained, tmp_path)
  before = _digests(folder)
  calls = _failing_restore(monkeypatch, -1, error)
  with pytest.raises(checkpoints.CheckpointUnavailableError) as err:
    toy_train.run(_one_device(), str(folder), 30, log_fn=lambda line: None)
  message = str(err.value)
  assert message.startswith(f"checkpoint {folder}/ckpt-20 could not be read in 5 tries over "
                            "0 s (") and "\n" not in message, message
  assert message.endswith("; nothing was moved; rerun when the storage answers")
  assert calls == [str(folder / "ckpt-20")] * 5  # never an older checkpoint
  assert _digests(folder) == before  # state file, both checkpoints: all in place


@pytest.mark.parametrize(("error", "advice"), [
    (tf.errors.PermissionDeniedError(None, None, "ckpt-20.index; Permission denied"),
     "permission denied: make it readable by this account (chmod, chown), then rerun"),
    (PermissionError(errno.EACCES, "Permission denied"), "permission denied: make it readable"),
    (tf.errors.UnknownError(None, None, "ckpt-20.index; Input/output error"),  # a bad sector
     "the disk reported an I/O error (a bad sector?): copy what still reads elsewhere"),
    (OSError(errno.EROFS, "Read-only file system"), "the file system is read-only: remount"),
], ids=["PermissionDenied", "EACCES", "EIO", "EROFS"])
def test_a_permanent_read_error_stops_at_once_naming_the_file_and_what_to_do(
    trained, tmp_path, monkeypatch, error, advice):
  folder = _copy(trained, tmp_path)
  before = _digests(folder)
  calls = _failing_restore(monkeypatch, -1, error)
  with pytest.raises(checkpoints.CheckpointAccessError) as err:
    toy_train.run(_one_device(), str(folder), 30, log_fn=lambda line: None)
  message = str(err.value)
  assert message.startswith(f"checkpoint {folder}/ckpt-20 could not be read: ") and \
      "\n" not in message, message
  assert advice in message and message.endswith("; nothing was moved"), message
  assert "rerun when the storage answers" not in message
  assert calls == [str(folder / "ckpt-20")]  # not retried, never an older checkpoint
  assert _digests(folder) == before


def test_a_missing_parent_folder_is_permanent(tmp_path):
  prefix = str(tmp_path / "gone" / "ckpt-3")
  with pytest.raises(checkpoints.CheckpointAccessError,
                     match=f"the folder {tmp_path / 'gone'} does not exist"):
    checkpoints.read_retried(prefix, lambda: tf.train.load_checkpoint(prefix))


def test_a_short_read_is_retried_before_it_counts_as_damage(trained, tmp_path, monkeypatch):
  folder = _copy(trained, tmp_path)
  short = tf.errors.OutOfRangeError(None, None, "Read less bytes than requested")
  calls = _failing_restore(monkeypatch, 2, short)
  lines: list[str] = []
  summary = toy_train.run(_one_device(), str(folder), 30, log_fn=lines.append)
  assert calls[:3] == [str(folder / "ckpt-20")] * 3 and summary["start_step"] == 20, lines
  assert not list(folder.glob("*.rejected*"))  # a good checkpoint is not set aside
  monkeypatch.undo()
  read_faults.no_waits(monkeypatch)
  folder = _copy(trained, tmp_path / "always")
  calls = _failing_restore(monkeypatch, -1, IndexError("read less bytes"))
  with pytest.raises(checkpoints.CorruptCheckpointError, match="ckpt-20 is corrupt or truncated"):
    checkpoints.read_retried(str(folder / "ckpt-20"), lambda: tf.train.Checkpoint().restore(
        str(folder / "ckpt-20")))
  assert len(calls) == 5  # short every time: damage


@pytest.mark.parametrize("fault", ["not_found", "short_tail"])
def test_the_index_check_retries_a_missing_index_and_a_short_tail(trained, tmp_path,
                                                                  monkeypatch, fault):
  folder = _copy(trained, tmp_path)
  index, seen = str(folder / "ckpt-20.index"), []
  size, read = tf.io.gfile.GFile.size, tf.io.gfile.GFile.read

  def flaky_size(f):
    if f.name == index and fault == "not_found" and not seen:
      seen.append(f.name)
      raise tf.errors.NotFoundError(None, None, f"{index}; No such file or directory")
    return size(f)

  def flaky_read(f, n=-1):
    data = read(f, n)
    if f.name == index and fault == "short_tail" and not seen:
      seen.append(f.name)
      return data[:3]  # a network read cut short
    return data

  monkeypatch.setattr(tf.io.gfile.GFile, "size", flaky_size)
  monkeypatch.setattr(tf.io.gfile.GFile, "read", flaky_read)
  assert checkpoint_files.complete_checkpoints(str(folder))[0] == str(folder / "ckpt-20")
  assert seen == [index]
  monkeypatch.undo()
  (folder / "ckpt-20.index").unlink()  # gone for good: not complete, no error
  assert checkpoint_files.index_is_whole(index) is False


def test_the_error_names_the_cause():
  with pytest.raises(checkpoints.CheckpointUnavailableError) as err:
    checkpoints.read_retried("/b/ckpt-3", lambda: (_ for _ in ()).throw(_503()))
  assert str(err.value) == (
      "checkpoint /b/ckpt-3 could not be read in 5 tries over 0 s (UnavailableError: HTTP 503 "
      "Service Unavailable (simulated)); nothing was moved; rerun when the storage answers")


def test_retry_delays_from_the_environment(monkeypatch):
  monkeypatch.setenv(checkpoints.READ_RETRY_ENV, "1, 2.5")
  assert checkpoints.read_retry_delays() == (1.0, 2.5)
  monkeypatch.setenv(checkpoints.READ_RETRY_ENV, "soon")
  with pytest.raises(ValueError, match=f"^{checkpoints.READ_RETRY_ENV}='soon': expected"):
    checkpoints.read_retry_delays()


def _damaged_copies(trained: pathlib.Path, tmp_path: pathlib.Path) -> dict[str, str]:
  """Copies of ckpt-20, damaged each way a crash or a disk can damage it."""
  out = {}
  for kind in ("truncated_data", "flipped_data", "garbled_index", "empty_index"):
    folder = _copy(trained, tmp_path / kind)
    data, index = folder / "ckpt-20.data-00000-of-00001", folder / "ckpt-20.index"
    if kind == "truncated_data":
      data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])
    elif kind == "flipped_data":
      raw = bytearray(data.read_bytes())
      raw[len(raw) // 2] ^= 0xFF
      data.write_bytes(bytes(raw))
    elif kind == "garbled_index":
      raw = bytearray(index.read_bytes())
      raw[len(raw) // 3] ^= 0xFF  # the footer is intact: only a checksum tells
      index.write_bytes(bytes(raw))
    else:
      index.write_bytes(b"")
    out[kind] = str(folder / "ckpt-20")
  return out


def test_damage_is_still_proof_and_unusable_says_so(trained, tmp_path):
  for kind, prefix in _damaged_copies(trained, tmp_path).items():
    why = checkpoint_files.unusable(prefix)
    assert why is not None and why.startswith(f"checkpoint {prefix} is corrupt or truncated"), (
        kind, why)
  assert checkpoint_files.unusable(str(trained / "ckpt-20")) is None


def test_unusable_retries_and_raises_on_a_persistent_transient_error(trained, monkeypatch):
  original, calls = tf.train.load_checkpoint, []

  def flaky(prefix):
    calls.append(prefix)
    if len(calls) <= 2 or "persistent" in calls[0]:
      raise _503()
    return original(prefix)

  monkeypatch.setattr(tf.train, "load_checkpoint", flaky)
  prefix = str(trained / "ckpt-20")
  assert checkpoint_files.unusable(prefix) is None and len(calls) == 3
  calls[:] = ["persistent"]
  with pytest.raises(checkpoints.CheckpointUnavailableError, match="could not be read in 5 tries"):
    checkpoint_files.unusable(prefix)
  assert (trained / "ckpt-20.index").is_file()


# ----- 7b: a partial index --------------------------------------------------------------------


@pytest.mark.parametrize("cut", ["short", "empty", "zeroed_tail"])
def test_a_partial_index_does_not_count_as_complete(trained, tmp_path, cut):
  folder = _copy(trained, tmp_path)
  index = folder / "ckpt-20.index"
  raw = index.read_bytes()
  index.write_bytes({"short": raw[:-9], "empty": b"",
                     "zeroed_tail": raw[:-16] + bytes(16)}[cut])  # in place, same size
  assert checkpoint_files.complete_checkpoints(str(folder)) == [str(folder / "ckpt-10")]
  lines: list[str] = []
  summary = toy_train.run(_one_device(), str(folder), 20, log_fn=lines.append)
  assert summary["start_step"] == 10 and f"Restored {folder}/ckpt-10 at step 10" in lines
  assert checkpoint_files.complete_checkpoints(str(folder))[0] == str(folder / "ckpt-20")


# ----- 4: workers agree on the restored step ---------------------------------------------------


def _keeper(folder: pathlib.Path):
  model, optimizer = toy_train.build(_one_device(), 20)
  checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                   step=tf.Variable(0, dtype=tf.int64))
  variables = model.variables + optimizer.variables
  return (checkpointing.CheckpointKeeper(checkpoint, str(folder), 5),
          lambda: checkpoint_restore.non_finite_variable(variables))


def test_workers_that_restored_different_steps_all_stop_and_nothing_moves(trained, tmp_path):
  folder = _copy(trained, tmp_path)
  data = folder / "ckpt-20.data-00000-of-00001"  # damaged: alone, it would be moved aside
  data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])
  before = _digests(folder)
  keeper, non_finite = _keeper(folder)
  said: list[int] = []
  with pytest.raises(checkpoint_restore.RestoreDisagreementError) as err:
    keeper.restore(lambda line: None, non_finite,
                   agree=lambda step: said.append(step)
                   or [step, checkpoint_restore.RESTORE_FAILED])
  assert said == [10]
  assert str(err.value) == (
      f"the workers did not restore the same checkpoint of {folder} (worker 0: ckpt-10; "
      "worker 1: its restore failed (see its output)); every worker stopped before training, "
      "nothing was moved; rerun once every worker sees the same files")
  assert _digests(folder) == before
  lines: list[str] = []  # agreed: moved aside as before
  path, _ = keeper.restore(lines.append, non_finite, agree=lambda step: [step, step])
  assert path == str(folder / "ckpt-10") and "moved it to" in lines[0], lines


def test_every_worker_gathers_through_the_strategy():
  assert training.loop.every_worker(_one_device(), 7) == [7]
  mirrored = tf.distribute.MirroredStrategy(["CPU:0"])
  assert training.loop.every_worker(mirrored, checkpoint_restore.NO_CHECKPOINT) == [-1]


def test_two_workers_stop_when_one_cannot_read_the_checkpoint(trained, tmp_path):
  folder = _copy(trained, tmp_path)
  before = _digests(folder)
  runs = []
  for worker, tf_config in enumerate(_two_worker_tf_configs()):
    fault = ["-1"] if worker == 1 else ["0"]
    runs.append(subprocess.Popen(
        [sys.executable, read_faults.__file__, *fault, toy_train.__file__, "--strategy",
         "multi_worker_mirrored", "--model_dir", str(folder), "--num_train_steps", "30"],
        env={**ENV, "TF_CONFIG": tf_config}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True))
  chief, other = (procs.finish(p, timeout=300) for p in runs)
  assert [p.returncode for p in runs] == [1, 1], chief[-2000:] + other[-2000:]
  assert chief.strip().splitlines()[-1] == (
      f"toy_train.py: error: RestoreDisagreementError: the workers did not restore the same "
      f"checkpoint of {folder} (worker 0: ckpt-20; worker 1: its restore failed (see its "
      "output)); every worker stopped before training, nothing was moved; rerun once every "
      "worker sees the same files"), chief[-2000:]
  assert other.strip().splitlines()[-1] == (
      f"toy_train.py: error: CheckpointUnavailableError: checkpoint {folder}/ckpt-20 could not "
      f"be read in 5 tries over 0 s (UnavailableError: {read_faults.MESSAGE}); nothing was "
      "moved; rerun when the storage answers"), other[-2000:]
  assert "Traceback" not in chief + other
  assert {k: v for k, v in _digests(folder).items() if not k.startswith("worker_tmp")} == before


def _two_worker_tf_configs() -> list[str]:
  return ports.two_worker_tf_configs()


# ----- 7d: how to start afresh after non-finite checkpoints ------------------------------------


def test_the_non_finite_error_says_how_to_start_afresh(trained, tmp_path):
  folder = _copy(trained, tmp_path)
  for step in (10, 20):
    _poison(folder / f"ckpt-{step}")
  with pytest.raises(training.NonFiniteCheckpointError) as err:
    toy_train.run(_one_device(), str(folder), 30, log_fn=lambda line: None)
  assert str(err.value) == (
      f"checkpoint {folder}/ckpt-10 holds NaN or Inf values (variable toy/head/kernel:0), and "
      f"no older checkpoint is usable; to start afresh, move {folder} aside and rerun")
  assert str(err.value.with_advice("rerun with --restart")).endswith(
      "and no older checkpoint is usable; rerun with --restart")


def _poison(prefix: pathlib.Path) -> None:
  """Rewrites checkpoint `prefix` with NaN in the head's kernel."""
  model, optimizer = toy_train.build(_one_device(), 30)
  ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer,
                             step=tf.Variable(checkpoint_files.step_of(str(prefix)),
                                               dtype=tf.int64))
  ckpt.restore(str(prefix)).assert_existing_objects_matched()
  model.head.kernel.assign(model.head.kernel * float("nan"))
  ckpt.write(str(prefix))


# ----- the entry point, for real ---------------------------------------------------------------


@pytest.fixture(scope="module")
def pretrain_dir(tmp_path_factory, data_dir, vocab_file) -> pathlib.Path:
  """data_dir in the official layout: vocab.txt + pretrain_tfrecords/ from real text."""
  return pretrain_data.build_data_dir(
      tmp_path_factory.mktemp("transient"), vocab_file,
      {"emma.txt": (data_dir / "gutenberg" / "austen-emma.txt", 30000)})


def _pretrain(data_dir: pathlib.Path, faults: int) -> subprocess.Popen:
  hparams = {"model_hparam_overrides": {"hidden_size": 64, "num_hidden_layers": 2},
             "embedding_size": 64, "max_seq_length": 32, "train_batch_size": 8,
             "num_train_steps": 2, "save_checkpoints_steps": 1, "num_warmup_steps": 1,
             "seed": 3, "vocab_size": pretrain_data.vocab_size(GOLDEN / "vocab.txt")}
  return subprocess.Popen(
      [sys.executable, read_faults.__file__, str(faults), str(REPO_ROOT / "run_pretraining.py"),
       "--data_dir", str(data_dir), "--model_name", "m", "--hparams", json.dumps(hparams)],
      cwd=REPO_ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_run_pretraining_retries_a_503_and_stops_in_one_line_if_it_persists(pretrain_dir):
  model_dir = pretrain_dir / "models" / "m"
  first = _pretrain(pretrain_dir, 0)
  log = procs.finish(first, timeout=300)
  assert first.returncode == 0, log[-3000:]
  checkpoints_before = {k: v for k, v in _digests(model_dir).items()
                        if k.startswith("ckpt-") or k == "checkpoint"}
  assert "ckpt-2.index" in checkpoints_before

  stuck = _pretrain(pretrain_dir, -1)
  log = procs.finish(stuck, timeout=300)
  assert stuck.returncode == 1 and "Traceback" not in log, log[-3000:]
  assert log.strip().splitlines()[-1] == (
      f"run_pretraining.py: error: CheckpointUnavailableError: checkpoint {model_dir}/ckpt-2 "
      f"could not be read in 5 tries over 0 s (UnavailableError: {read_faults.MESSAGE}); "
      "nothing was moved; rerun when the storage answers")
  after = _digests(model_dir)
  assert {k: after.get(k) for k in checkpoints_before} == checkpoints_before
  assert not list(model_dir.glob("*.rejected*"))

  flaky = _pretrain(pretrain_dir, 2)  # two 503s, then the storage answers
  log = procs.finish(flaky, timeout=300)
  assert flaky.returncode == 0 and "Warning" not in log, log[-3000:]
  assert f"Restored {model_dir}/ckpt-2 at step 2" in log and "not training" in log
  assert not list(model_dir.glob("*.rejected*"))


def _poison_any(prefix: str) -> None:
  """Rewrites the TF2 checkpoint `prefix` (any model) with NaN in its first float tensor of
  more than one value, its checksums recomputed."""
  reader = tf.train.load_checkpoint(prefix)
  dtypes = reader.get_variable_to_dtype_map()
  names = sorted(dtypes)
  values = {n: reader.get_tensor(n) for n in names}
  target = next(n for n in names if dtypes[n].is_floating and np.size(values[n]) > 1)
  values[target] = values[target] * np.nan
  tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                    tensors=[tf.constant(values[n], dtype=dtypes[n]) for n in names])


@pytest.mark.slow
def test_run_finetuning_says_how_to_train_a_trial_afresh_and_that_works(data_dir, vocab_file,
                                                                        tmp_path):
  start = rte_finetune.rte_run(data_dir, vocab_file, tmp_path, ENV, iterations_per_loop=5)

  def finetune() -> tuple[int, str]:
    proc = start()
    log = procs.finish(proc, timeout=300)
    return proc.returncode, log

  code, log = finetune()
  assert code == 0, log[-3000:]
  models = tmp_path / "models" / "m" / "finetuning_models"
  trial, record = models / "rte_model_1", models / "rte_model_trials" / "trial_1.json"
  (final,) = checkpoint_files.complete_checkpoints(str(trial))
  _poison_any(final)
  record.rename(tmp_path / "record.json")  # as if killed before its record was written
  code, log = finetune()
  assert code == 1 and "Traceback" not in log, log[-3000:]
  line = log.strip().splitlines()[-1]
  assert line.startswith(f"run_finetuning.py: error: checkpoint {final} holds NaN or Inf "
                         "values (variable "), log[-3000:]
  assert line.endswith(f"and no older checkpoint is usable; to train this trial afresh, move its "
                       f"folder {trial} and its record {record} (if there is one) aside, then "
                       "rerun") and "--restart" not in line
  trial.rename(tmp_path / "aside")  # what it says
  code, log = finetune()
  assert code == 0 and f"Saved {trial}/ckpt-15\n" in log and record.is_file(), log[-3000:]
  assert "Restored" not in log  # trained afresh
