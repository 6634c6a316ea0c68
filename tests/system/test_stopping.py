"""Stopping safely: SIGINT / SIGTERM save the step in progress and say how to resume, a second
signal exits at once, no checkpoint holds NaN or Inf, a resume never starts over older
checkpoints. Real subprocesses, real signals, real TFRecords from tests/data.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from helpers import ports, pretrain_data, procs, rte_finetune, toy_train
from helpers.paths import GOLDEN, REPO_ROOT

from electra_tf import training
from electra_tf.training import checkpoint_files, checkpoint_restore, checkpointing

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1"}  # step lines arrive as printed
TINY = {"model_hparam_overrides": {"hidden_size": 64, "num_hidden_layers": 2},
        "embedding_size": 64, "max_seq_length": 32, "train_batch_size": 8,
        "num_train_steps": 10**6, "iterations_per_loop": 2, "save_checkpoints_steps": 10**5,
        "num_warmup_steps": 1, "seed": 3,
        "vocab_size": pretrain_data.vocab_size(GOLDEN / "vocab.txt")}  # the vocab_file fixture's
STEP_LINE = r"^(\d+)/\d+ = "
STOP_LINE = r"interrupted at step (\d+): saved (\S+); rerun to resume"


@pytest.fixture(scope="module")
def pretrain_dir(tmp_path_factory, data_dir, vocab_file) -> pathlib.Path:
  """data_dir in the official layout: vocab.txt + pretrain_tfrecords/ from real text."""
  return pretrain_data.build_data_dir(
      tmp_path_factory.mktemp("stopping"), vocab_file,
      {"emma.txt": (data_dir / "gutenberg" / "austen-emma.txt", 30000)})


def _pretrain(data_dir: pathlib.Path, name: str, hparams: dict, *flags: str
              ) -> subprocess.Popen:
  return subprocess.Popen(
      [sys.executable, str(REPO_ROOT / "run_pretraining.py"), "--data_dir", str(data_dir),
       "--model_name", name, "--hparams", json.dumps(hparams), *flags],
      cwd=REPO_ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _signal_after_a_step(proc: subprocess.Popen, signum: int) -> tuple[int, str]:
  """Sends `signum` once a progress line appears; returns (its step, the whole output)."""
  m, before = procs.wait_for_line(proc, STEP_LINE, timeout=300)
  proc.send_signal(signum)
  return int(m.group(1)), before + procs.finish(proc, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_the_step_in_progress_and_a_rerun_resumes(pretrain_dir, signum):
  name = f"stopped_{signum}"
  model_dir = pretrain_dir / "models" / name
  proc = _pretrain(pretrain_dir, name, TINY)
  seen, log = _signal_after_a_step(proc, signum)
  assert proc.returncode == 128 + signum and "Traceback" not in log, log[-3000:]
  m = re.search(STOP_LINE, log)
  assert m, log[-3000:]
  step, path = int(m.group(1)), m.group(2)
  assert step >= seen and path == str(model_dir / f"ckpt-{step}")
  assert training.latest_checkpoint(str(model_dir)) == path
  if signum == signal.SIGTERM:
    return
  rerun = _pretrain(pretrain_dir, name, {**TINY, "num_train_steps": step + 2})
  log = procs.finish(rerun, timeout=300)
  assert rerun.returncode == 0, log[-3000:]
  assert f"Restored {path} at step {step}" in log
  assert training.latest_checkpoint(str(model_dir)) == str(model_dir / f"ckpt-{step + 2}")


def test_a_second_signal_exits_at_once_without_saving(tmp_path):
  # one-second steps: the second SIGINT lands while the first waits for its step to end
  proc = subprocess.Popen(
      [sys.executable, str(pathlib.Path(toy_train.__file__)), "--model_dir", str(tmp_path),
       "--num_train_steps", "1000", "--iterations_per_loop", "1",
       "--save_checkpoints_steps", "1000", "--step_sleep", "1.0"],
      env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  procs.wait_for_line(proc, STEP_LINE, timeout=240)
  proc.send_signal(signal.SIGINT)
  time.sleep(0.3)  # signals of one kind do not queue: the first must be seen first
  proc.send_signal(signal.SIGINT)
  log = procs.finish(proc, timeout=10)
  assert proc.returncode == 130, log[-3000:]
  assert "SIGINT again: exiting at once without saving" in log
  assert "Traceback" not in log and "interrupted at step" not in log
  assert training.latest_checkpoint(str(tmp_path)) is None


# ----- no poisoned checkpoint ------------------------------------------------------------------


def test_ctrl_c_while_a_script_loads_is_one_line(tmp_path):
  """SIGINT at a random moment while each script imports its libraries (TensorFlow takes
  seconds): the one line and status 130, never a traceback from inside an import."""
  for script in ("run_pretraining.py", "run_finetuning.py"):
    moment = random.uniform(0.05, 1.0)
    proc = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / script), "--data_dir", str(tmp_path),
         "--model_name", "m"], cwd=REPO_ROOT, env=ENV, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal's
    time.sleep(moment)
    proc.send_signal(signal.SIGINT)
    out = procs.finish(proc, timeout=60)
    assert (proc.returncode, out.strip()) == (130, f"{script}: interrupted"), (
        f"SIGINT {moment:.2f} s after the start: {out[-2000:]}")


def test_a_second_ctrl_c_while_the_first_unwinds_is_still_one_line(tmp_path):
  """Outside training a Ctrl-C raises KeyboardInterrupt; a second one before its line is out
  (while it unwinds through TensorFlow, say) ends the process at once with the same line, not
  a traceback "during handling of the above exception"."""
  script = tmp_path / "cmd.py"
  script.write_text(
      "import signal, sys\n"
      "from electra_tf import console, early_interrupt\n"
      "class Stderr:  # the second Ctrl-C comes while the first one's line is being written\n"
      "  def __init__(self, stream):\n"
      "    self.stream, self.fired = stream, False\n"
      "  def write(self, text):\n"
      "    if not self.fired:\n"
      "      self.fired = True\n"
      "      signal.raise_signal(signal.SIGINT)\n"
      "    return self.stream.write(text)\n"
      "  def flush(self):\n"
      "    self.stream.flush()\n"
      "early_interrupt.install()\n"
      "with console.one_line_errors('cmd.py'):\n"
      "  sys.stderr = Stderr(sys.stderr)\n"
      "  signal.raise_signal(signal.SIGINT)\n")
  proc = subprocess.run([sys.executable, str(script)], cwd=REPO_ROOT, env=ENV, text=True,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60,
                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  assert (proc.returncode, proc.stdout.strip()) == (130, "cmd.py: interrupted"), proc.stdout


@pytest.mark.parametrize("then", [
    "console.log('a progress line after the Ctrl-C')",
    "with interrupt.StopRequest().watching():\n    print('trained after a Ctrl-C')"])
def test_a_ctrl_c_that_library_code_swallowed_still_stops_before_training(tmp_path, then):
  """TensorFlow's C++ op dispatch drops an exception raised inside its isinstance checks: a
  first Ctrl-C landing there (as a fine-tuning run builds its next trial's model) was lost and
  the run trained on to status 0 (found by benchmarks/chaos.py). It stops at the next check,
  before training starts, with the one line."""
  script = tmp_path / "stop.py"  # not cmd.py: TensorFlow imports the cmd module
  script.write_text(
      "import signal\n"
      "from electra_tf import console, early_interrupt\n"
      "from electra_tf.training import interrupt\n"
      "early_interrupt.install()\n"
      "with console.one_line_errors('stop.py'):\n"
      "  try:\n"
      "    signal.raise_signal(signal.SIGINT)  # the first Ctrl-C ...\n"
      "  except KeyboardInterrupt:\n"
      "    pass  # ... dropped, as that dispatch does\n"
      f"  {then}\n")
  proc = subprocess.run([sys.executable, str(script)], cwd=REPO_ROOT, env=ENV, text=True,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120,
                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  assert (proc.returncode, proc.stdout.strip()) == (130, "stop.py: interrupted"), proc.stdout


def test_a_sigterm_outside_training_still_ends_a_multi_worker_run(tmp_path):
  """A multi-worker strategy's coordination service installs TensorFlow's own SIGTERM handler
  (a preemption notice that only records it): a SIGTERM between creating the strategy and
  training was ignored and the run trained to status 0 (found by benchmarks/chaos.py). The
  handler the process had is put back, so the signal ends it as it ends a one-worker run."""
  script = tmp_path / "term.py"
  script.write_text(
      "import os, signal, time\n"
      "from electra_tf import training\n"
      "training.get_strategy('multi_worker_mirrored')\n"
      "os.kill(os.getpid(), signal.SIGTERM)\n"
      "time.sleep(5)\n"
      "print('went on after a SIGTERM')\n")
  tf_config = json.dumps({"cluster": {"worker": [f"127.0.0.1:{ports.free_port()}"]},
                          "task": {"type": "worker", "index": 0}})
  proc = subprocess.run([sys.executable, str(script)], cwd=REPO_ROOT, text=True,
                        env={**ENV, "TF_CONFIG": tf_config}, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, timeout=120)
  assert proc.returncode == -signal.SIGTERM, proc.stdout[-2000:]


def _sigterm_caught(pid: int) -> bool:
  """Whether process `pid` has a handler for SIGTERM (its bit in /proc/<pid>/status SigCgt)."""
  for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
    if line.startswith("SigCgt:"):
      return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
  return False


def test_a_sigterm_while_the_cluster_forms_still_ends_a_multi_worker_run(tmp_path):
  """A SIGTERM that comes while the workers form their cluster meets TensorFlow's handler
  (installed once this worker joined, before the others did), which only notes it: worker 0
  went on to train once worker 1 came (found by benchmarks/chaos.py, trial 39). The script
  leaves SIGTERM at its default, so a caught SIGTERM is TensorFlow's handler: the signal is
  sent then, worker 1 is started after it, and worker 0 must still end by the signal."""
  script = tmp_path / "term.py"
  script.write_text(
      "import time\n"
      "from electra_tf import training\n"
      "training.get_strategy('multi_worker_mirrored')\n"
      "time.sleep(10)\n"
      "print('went on after a SIGTERM')\n")
  cluster = {"worker": [f"127.0.0.1:{ports.free_port()}" for _ in range(2)]}

  def worker(index: int) -> subprocess.Popen:
    tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
    return subprocess.Popen([sys.executable, str(script)], cwd=REPO_ROOT, text=True,
                            env={**ENV, "TF_CONFIG": tf_config}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)

  first = worker(0)
  second = None
  try:
    deadline = time.monotonic() + 120
    while not _sigterm_caught(first.pid):
      assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0]
      time.sleep(0.05)
    first.send_signal(signal.SIGTERM)
    second = worker(1)
    out = procs.finish(first, timeout=120)
    assert (first.returncode, "went on" in out) == (-signal.SIGTERM, False), out[-2000:]
  finally:
    for proc in (first, second):
      if proc is not None and proc.poll() is None:
        proc.kill()
        proc.communicate()


def test_a_preemption_notice_is_sent_on_as_one_sigterm_however_often_the_strategy_is_made(
    tmp_path):
  """The notice TensorFlow's handler writes (this task's name under PREEMPTION_NOTICE_KEY,
  written here by hand) comes back as one SIGTERM to the process's handler, even when a script
  creates the strategy twice: one watcher a process, as a second SIGTERM would end a run at
  once, without saving (two signals sent at once may merge into one, so watchers are counted)."""
  script = tmp_path / "notice.py"
  script.write_text(
      "import signal, threading, time\n"
      "from tensorflow.python.eager import context\n"
      "from electra_tf import training\n"
      "from electra_tf.training import runtime\n"
      "got = []\n"
      "signal.signal(signal.SIGTERM, lambda *_: got.append(1))\n"
      "training.get_strategy('multi_worker_mirrored')\n"
      "training.get_strategy('multi_worker_mirrored')\n"
      "watchers = [t for t in threading.enumerate() if t.name == 'sigterm-notice']\n"
      "context.context().set_config_key_value(runtime.PREEMPTION_NOTICE_KEY,"
      " '/job:worker/task:0')\n"
      "time.sleep(3)\n"
      "print('watchers', len(watchers), 'SIGTERMs', len(got))\n")
  tf_config = json.dumps({"cluster": {"worker": [f"127.0.0.1:{ports.free_port()}"]},
                          "task": {"type": "worker", "index": 0}})
  proc = subprocess.run([sys.executable, str(script)], cwd=REPO_ROOT, text=True,
                        env={**ENV, "TF_CONFIG": tf_config}, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, timeout=120)
  assert (proc.returncode, proc.stdout.splitlines()[-1:]) == (0, ["watchers 1 SIGTERMs 1"]), \
      proc.stdout


@pytest.mark.slow
def test_a_huge_learning_rate_never_writes_a_non_finite_checkpoint(pretrain_dir):
  name = "poisoned"
  model_dir = pretrain_dir / "models" / name
  hparams = {**TINY, "num_train_steps": 40, "iterations_per_loop": 1,
             "save_checkpoints_steps": 1, "learning_rate": 1e6}
  proc = _pretrain(pretrain_dir, name, hparams)
  log = procs.finish(proc, timeout=300)
  assert proc.returncode == 1, log[-3000:]
  m = re.search(r"NaN or Inf at step (\d+); stopped without saving, the latest checkpoint is "
                r"(\S+)\n", log)
  assert m, log[-3000:]
  saved = sorted(model_dir.glob("ckpt-*.index"))
  assert saved and m.group(2) == training.latest_checkpoint(str(model_dir))
  for index in saved:
    reader = tf.train.load_checkpoint(str(index)[:-len(".index")])
    for key, dtype in reader.get_variable_to_dtype_map().items():
      if dtype.is_floating:
        assert np.isfinite(reader.get_tensor(key)).all(), (index.name, key)


def _poison(prefix: str) -> None:
  """Rewrites checkpoint `prefix` with NaN in its first float tensor (a poisoned old save)."""
  step = checkpoint_files.step_of(prefix)
  model, optimizer = toy_train.build(training.get_strategy("one_device", num_gpus=0), 30)
  ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer,
                             step=tf.Variable(step, dtype=tf.int64))
  ckpt.restore(prefix).assert_existing_objects_matched()
  model.head.kernel.assign(model.head.kernel * float("nan"))
  ckpt.write(prefix)


@pytest.mark.slow
def test_a_truncated_final_checkpoint_is_moved_aside_and_saved_again(pretrain_dir):
  name = "truncated"
  model_dir = pretrain_dir / "models" / name
  hparams = {**TINY, "num_train_steps": 6, "save_checkpoints_steps": 2}
  log = procs.finish(_pretrain(pretrain_dir, name, hparams), timeout=300)
  data = model_dir / "ckpt-6.data-00000-of-00001"
  damaged = data.read_bytes()[:data.stat().st_size // 2]
  data.write_bytes(damaged)
  rerun = _pretrain(pretrain_dir, name, hparams)  # the same command
  log = procs.finish(rerun, timeout=300)
  assert rerun.returncode == 0 and "Traceback" not in log, log[-3000:]
  rejected = model_dir / "ckpt-6.rejected"
  assert (f"Warning: checkpoint {model_dir}/ckpt-6 is corrupt or truncated (TensorFlow: Read "
          f"less bytes than requested); moved it to {rejected}; resuming from the previous "
          f"checkpoint {model_dir}/ckpt-4\n") in log, log[-3000:]
  assert f"Restored {model_dir}/ckpt-4 at step 4" in log
  assert f"Saved {model_dir}/ckpt-6\n" in log and "trained steps 4 -> 6 of 6" in log
  assert _finite(model_dir / "ckpt-6") and _state_file_names(model_dir) == (
      "ckpt-6", ["ckpt-2", "ckpt-4", "ckpt-6"])
  assert (rejected / data.name).read_bytes() == damaged and (rejected / "ckpt-6.index").is_file()
  assert sorted(p.name for p in (rejected / "input_state").iterdir()) == [
      "signature.json", "state.data-00000-of-00001", "state.index"]  # its input state went too
  assert (model_dir / "input_state" / "ckpt-6" / "signature.json").is_file()  # the new one's
  again = _pretrain(pretrain_dir, name, hparams)  # nothing left to reject or to train
  log = procs.finish(again, timeout=300)
  assert again.returncode == 0 and "Warning" not in log, log[-3000:]
  assert f"Restored {model_dir}/ckpt-6 at step 6" in log and "not training" in log


def _state_file_names(model_dir: pathlib.Path) -> tuple[str, list[str]]:
  """(latest, every listed checkpoint) by name, as model_dir's `checkpoint` file says."""
  state = tf.train.get_checkpoint_state(str(model_dir))
  return (os.path.basename(state.model_checkpoint_path),
          [os.path.basename(p) for p in state.all_model_checkpoint_paths])


def _finite(prefix: pathlib.Path) -> bool:
  reader = tf.train.load_checkpoint(str(prefix))
  return all(np.isfinite(reader.get_tensor(k)).all()
             for k, dtype in reader.get_variable_to_dtype_map().items() if dtype.is_floating)


def test_a_non_finite_checkpoint_is_moved_aside_and_replaced(tmp_path):
  strategy = training.get_strategy("one_device", num_gpus=0)
  toy_train.run(strategy, str(tmp_path), 20, log_fn=lambda line: None, keep_checkpoint_max=2)
  _poison(str(tmp_path / "ckpt-20"))
  poisoned = (tmp_path / "ckpt-20.data-00000-of-00001").read_bytes()
  lines: list[str] = []
  summary = toy_train.run(strategy, str(tmp_path), 20, log_fn=lines.append,
                          keep_checkpoint_max=2)
  warnings = [line for line in lines if "NaN or Inf" in line]
  assert warnings == [f"Warning: checkpoint {tmp_path}/ckpt-20 holds NaN or Inf values "
                      f"(variable toy/head/kernel:0); moved it to {tmp_path}/ckpt-20.rejected; "
                      f"resuming from the previous checkpoint {tmp_path}/ckpt-10"], lines
  assert summary["start_step"] == 10 and summary["final_step"] == 20
  assert lines[-1] == f"Saved {tmp_path}/ckpt-20"  # trained again and saved, not skipped
  assert _finite(tmp_path / "ckpt-20") and _state_file_names(tmp_path) == (
      "ckpt-20", ["ckpt-10", "ckpt-20"])
  rejected = tmp_path / "ckpt-20.rejected"  # kept for inspection, as it was
  assert (rejected / "ckpt-20.data-00000-of-00001").read_bytes() == poisoned
  assert (rejected / "ckpt-20.index").is_file()

  _poison(str(tmp_path / "ckpt-20"))  # again, then a shorter run: ckpt-10 must stay kept
  lines.clear()
  summary = toy_train.run(strategy, str(tmp_path), 15, log_fn=lines.append,
                          keep_checkpoint_max=2)
  assert f"moved it to {tmp_path}/ckpt-20.rejected-2; " in lines[0], lines
  assert summary["start_step"] == 10 and lines[-1] == f"Saved {tmp_path}/ckpt-15"
  # the checkpoint manager forgot the moved ckpt-20: keeping 2 keeps ckpt-10 and ckpt-15
  assert sorted(p.name for p in tmp_path.glob("ckpt-*.index")) == ["ckpt-10.index",
                                                                   "ckpt-15.index"]
  assert _state_file_names(tmp_path) == ("ckpt-15", ["ckpt-10", "ckpt-15"])
  assert (tmp_path / "ckpt-20.rejected" / "ckpt-20.index").is_file()  # the first, untouched


def test_a_rejected_checkpoint_that_cannot_be_moved_is_still_replaced(tmp_path, monkeypatch):
  strategy = training.get_strategy("one_device", num_gpus=0)
  toy_train.run(strategy, str(tmp_path), 20, log_fn=lambda line: None)
  _poison(str(tmp_path / "ckpt-20"))

  def unmovable(prefix):
    raise PermissionError(f"[Errno 13] Permission denied: '{prefix}.rejected'")

  monkeypatch.setattr(checkpoint_files, "reject", unmovable)
  lines: list[str] = []
  toy_train.run(strategy, str(tmp_path), 20, log_fn=lines.append)
  assert lines[0].endswith(f"(variable toy/head/kernel:0); could not move it aside ([Errno 13] "
                           f"Permission denied: '{tmp_path}/ckpt-20.rejected'); resuming from "
                           f"the previous checkpoint {tmp_path}/ckpt-10"), lines
  assert lines[-1] == f"Saved {tmp_path}/ckpt-20" and _finite(tmp_path / "ckpt-20")


def test_the_chief_moves_a_rejected_checkpoint_only_once_every_worker_has_read(tmp_path):
  """Another worker may still be reading a checkpoint the chief rejects: the move waits for
  the agreement on the restored step every worker takes part in after its restore (a move
  during a read failed the read)."""
  strategy = training.get_strategy("one_device", num_gpus=0)
  toy_train.run(strategy, str(tmp_path), 20, log_fn=lambda line: None)
  _poison(str(tmp_path / "ckpt-20"))
  model, optimizer = toy_train.build(strategy, 20)
  variables = model.variables + optimizer.variables
  checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                   step=tf.Variable(0, dtype=tf.int64))
  keeper = checkpointing.CheckpointKeeper(checkpoint, str(tmp_path), 5)
  at_barrier, lines = [], []
  path, _ = keeper.restore(
      lines.append, lambda: checkpoint_restore.non_finite_variable(variables),
      agree=lambda step: at_barrier.append((tmp_path / "ckpt-20.index").exists()) or [step])
  assert path == str(tmp_path / "ckpt-10") and at_barrier == [True]  # still there then
  assert not (tmp_path / "ckpt-20.index").exists() and "moved it to" in lines[0], lines


def _failing_at(batch_size: int, start: int, step: int):
  """toy_train's dataset_fn whose batch for global step `step` (1-based) fails to read."""
  inner = toy_train.dataset_fn(batch_size, start)

  def fn(ctx):
    def check(i, batch):
      ok = tf.debugging.Assert(start + i + 1 < step, ["toy shard: damaged record"])
      with tf.control_dependencies([ok]):
        return {k: tf.identity(v) for k, v in batch.items()}
    return inner(ctx).enumerate().map(check)

  return fn


def test_a_data_error_after_a_rejected_checkpoint_saves_and_names_the_real_latest(tmp_path):
  strategy = training.get_strategy("one_device", num_gpus=0)
  toy_train.run(strategy, str(tmp_path), 20, log_fn=lambda line: None)
  data = tmp_path / "ckpt-20.data-00000-of-00001"
  data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])  # truncated
  model, optimizer = toy_train.build(strategy, 20)
  lines: list[str] = []
  trainer = training.Trainer(
      strategy, model, optimizer, training.TrainSettings(str(tmp_path), 20, 8, 5, 10),
      step_fn=toy_train.toy_step_fn(model), log_fn=lines.append)
  start = trainer.restore_or_initialize()
  assert start == 10 and "moved it to" in lines[0], lines
  with pytest.raises(training.InputDataError) as err:
    trainer.train(_failing_at(8, start, 13))
  assert str(err.value) == ("toy shard: damaged record (at step 12; latest checkpoint: "
                            f"{tmp_path}/ckpt-12)")
  assert lines[-1] == f"Saved {tmp_path}/ckpt-12" and _finite(tmp_path / "ckpt-12")


# ----- resume from what is on disk -------------------------------------------------------------


def test_a_deleted_state_file_or_newest_checkpoint_resumes_from_the_newest_on_disk(tmp_path):
  quiet = training.get_strategy("one_device", num_gpus=0)
  toy_train.run(quiet, str(tmp_path), 30, log_fn=lambda line: None)
  for f in tmp_path.glob("ckpt-30.*"):
    f.unlink()
  (tmp_path / "checkpoint").unlink()
  lines: list[str] = []
  summary = toy_train.run(quiet, str(tmp_path), 40, log_fn=lines.append)
  assert (f"The checkpoint state file {tmp_path}/checkpoint is missing; resuming from "
          f"{tmp_path}/ckpt-20, the newest complete checkpoint") in lines
  assert summary["start_step"] == 20 and summary["final_step"] == 40
  for f in tmp_path.glob("ckpt-40.*"):  # the state file now names a checkpoint that is gone
    f.unlink()
  lines.clear()
  summary = toy_train.run(quiet, str(tmp_path), 40, log_fn=lines.append)
  assert (f"The checkpoint state file {tmp_path}/checkpoint names ckpt-40, which is not "
          f"complete; resuming from {tmp_path}/ckpt-30, the newest complete checkpoint") in lines
  assert summary["start_step"] == 30


@pytest.mark.slow
def test_restart_moves_the_old_run_aside(pretrain_dir):
  name = "restarted"
  model_dir = pretrain_dir / "models" / name
  hparams = {**TINY, "num_train_steps": 2, "save_checkpoints_steps": 1}
  for flags in ((), ("--restart",)):
    log = procs.finish(_pretrain(pretrain_dir, name, hparams, *flags), timeout=300)
  assert "Running training from step 0" in log, log[-3000:]
  aside = model_dir.parent / f"{name}.before-restart-1"
  assert f"--restart: moved {model_dir} to {aside}" in log
  assert sorted(p.name for p in aside.glob("*.index")) == ["ckpt-1.index", "ckpt-2.index"]
  assert sorted(p.name for p in model_dir.glob("*.index")) == ["ckpt-1.index", "ckpt-2.index"]


@pytest.mark.slow
def test_finetuning_sigint_saves_and_the_same_command_resumes_the_trial(data_dir, vocab_file,
                                                                        tmp_path):
  # tests/data's 120 rows: 15 steps, stopped after the first 2
  finetune = rte_finetune.rte_run(data_dir, vocab_file, tmp_path, ENV, iterations_per_loop=2,
                                  eval_batch_size=8)

  proc = finetune()
  _, log = _signal_after_a_step(proc, signal.SIGINT)
  m = re.search(STOP_LINE, log)
  assert proc.returncode == 130 and m and "Traceback" not in log, log[-3000:]
  rerun = finetune()  # the same command: the trial resumes where it stopped
  log = procs.finish(rerun, timeout=300)
  assert rerun.returncode == 0, log[-3000:]
  assert f"Restored {m.group(2)} at step {m.group(1)}" in log


@pytest.mark.slow
def test_a_signal_on_one_worker_stops_every_worker_at_the_same_step(tmp_path):
  model_dir = tmp_path / "mwms"
  runs = [subprocess.Popen(
      [sys.executable, str(pathlib.Path(toy_train.__file__)), "--strategy",
       "multi_worker_mirrored", "--model_dir", str(model_dir), "--num_train_steps", "1000",
       "--iterations_per_loop", "1", "--save_checkpoints_steps", "1000", "--step_sleep",
       "0.2"], env={**ENV, "TF_CONFIG": tf_config}, stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True) for tf_config in ports.two_worker_tf_configs()]
  procs.wait_for_line(runs[0], STEP_LINE, timeout=300)
  runs[1].send_signal(signal.SIGTERM)  # the other worker only
  logs = [procs.finish(p, timeout=120) for p in runs]
  assert [p.returncode for p in runs] == [143, 143], "\n".join(log[-2000:] for log in logs)
  steps = {int(re.search(STOP_LINE, log).group(1)) for log in logs}
  assert len(steps) == 1, logs
  step = steps.pop()
  assert training.latest_checkpoint(str(model_dir)) == str(model_dir / f"ckpt-{step}")
  assert not list(model_dir.glob("worker_tmp_*"))  # the other worker's scratch save is gone


@pytest.mark.slow
def test_two_workers_skip_a_rejected_checkpoint_and_only_the_chief_moves_it(tmp_path):
  model_dir = tmp_path / "mwms"

  def run_both() -> list[str]:
    runs = [subprocess.Popen(
        [sys.executable, str(pathlib.Path(toy_train.__file__)), "--strategy",
         "multi_worker_mirrored", "--model_dir", str(model_dir), "--num_train_steps", "20"],
        env={**ENV, "TF_CONFIG": tf_config}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True) for tf_config in ports.two_worker_tf_configs()]
    logs = [procs.finish(p, timeout=300) for p in runs]
    assert [p.returncode for p in runs] == [0, 0], "\n".join(log[-2000:] for log in logs)
    return logs

  run_both()
  _poison(str(model_dir / "ckpt-20"))
  chief, other = run_both()
  assert (f"holds NaN or Inf values (variable toy/head/kernel:0); moved it to "
          f"{model_dir}/ckpt-20.rejected; resuming from the previous checkpoint "
          f"{model_dir}/ckpt-10\n") in chief, chief[-3000:]
  # the other worker skipped it (or, listing after the move, never saw it): it moved nothing
  assert f"Restored {model_dir}/ckpt-10 at step 10" in other and "moved it" not in other, other
  assert f"Saved {model_dir}/ckpt-20\n" in chief and _finite(model_dir / "ckpt-20")
  assert _state_file_names(model_dir) == ("ckpt-20", ["ckpt-10", "ckpt-20"])
  assert sorted(p.name for p in model_dir.glob("ckpt-20.rejected*")) == ["ckpt-20.rejected"]
  assert not list(model_dir.glob("worker_tmp_*"))
