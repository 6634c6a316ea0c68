"""A data error on one worker of a multi-worker run stops every worker (none hangs in a
collective or at exit), with one line naming the bad shard. Two real run_pretraining.py
processes over loopback (TF_CONFIG), a real truncated TFRecord shard that only worker 1 reads."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from helpers import ports, pretrain_data
from helpers.paths import GOLDEN, REPO_ROOT

from electra_tf import training

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1"}
TINY = {"model_hparam_overrides": {"hidden_size": 64, "num_hidden_layers": 2},
        "embedding_size": 64, "max_seq_length": 32, "train_batch_size": 8,
        "num_train_steps": 10**6, "iterations_per_loop": 2, "save_checkpoints_steps": 10**5,
        "num_warmup_steps": 1, "seed": 3,
        "vocab_size": pretrain_data.vocab_size(GOLDEN / "vocab.txt")}  # the vocab_file fixture's
START_SECONDS = 900  # start-up, tracing and ~20 steps of two workers on 2 busy cores
EXIT_SECONDS = 60  # from a worker's last line to its exit (measured: under 2 s; was minutes)


@pytest.fixture(scope="module")
def data_with_a_bad_second_shard(tmp_path_factory, data_dir, vocab_file) -> pathlib.Path:
  """Two shards of real text; the second (read only by worker 1) cut in the middle of a
  record, as a copy interrupted mid-file leaves it."""
  root = pretrain_data.build_data_dir(
      tmp_path_factory.mktemp("worker_data_error"), vocab_file,
      {"emma.txt": (data_dir / "gutenberg" / "austen-emma.txt", 60000)}, num_out_files=2)
  bad = sorted((root / "pretrain_tfrecords").iterdir())[1]
  raw = bad.read_bytes()
  bad.write_bytes(raw[:len(raw) // 2 + 7])
  return root


class _Worker:
  """One run_pretraining.py worker; its output lines and the time of the last one."""

  def __init__(self, root: pathlib.Path, tf_config: str):
    self.proc = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "run_pretraining.py"), "--data_dir", str(root),
         "--model_name", "mw", "--distribution_strategy=multi_worker_mirrored",
         "--check_data=false", "--hparams", json.dumps(TINY)],
        cwd=REPO_ROOT, env={**ENV, "TF_CONFIG": tf_config}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    self.lines: list[str] = []
    self.last_line_at = time.time()
    self._reader = threading.Thread(target=self._read, daemon=True)
    self._reader.start()

  def _read(self) -> None:
    for line in self.proc.stdout:
      self.lines.append(line.rstrip("\n"))
      self.last_line_at = time.time()

  def wait(self, deadline: float) -> float | None:
    """Seconds from the last line to the exit, or None (killed) if it outlives `deadline` or
    stays EXIT_SECONDS after its last line."""
    while self.proc.poll() is None:
      now = time.time()
      if now > deadline or (self.lines and now - self.last_line_at > EXIT_SECONDS
                            and "error" in self.lines[-1]):
        self.proc.kill()
        self.proc.wait()
        self._reader.join()
        return None
      time.sleep(0.2)
    exited = time.time()
    self._reader.join()
    return exited - self.last_line_at


@pytest.mark.slow
def test_a_bad_shard_on_one_worker_stops_both_workers_with_one_line(
    data_with_a_bad_second_shard):
  root = data_with_a_bad_second_shard
  bad = sorted((root / "pretrain_tfrecords").iterdir())[1]
  workers = [_Worker(root, tf_config) for tf_config in ports.two_worker_tf_configs()]
  deadline = time.time() + START_SECONDS
  try:
    exit_seconds = [w.wait(deadline) for w in workers]
  finally:
    for w in workers:
      if w.proc.poll() is None:
        w.proc.kill()
        w.proc.wait()
  logs = ["\n".join(w.lines) for w in workers]
  joined = "\n=====\n".join(log[-3000:] for log in logs)
  # Plain booleans: pytest's explanation of `in` on long outputs takes minutes.
  print(f"seconds from each worker's last line to its exit: {exit_seconds}")
  no_hang = None not in exit_seconds
  assert no_hang, f"seconds from the last line to exit: {exit_seconds}\n{joined}"
  assert [w.proc.returncode for w in workers] == [1, 1], joined
  no_traceback = "Traceback" not in joined
  assert no_traceback, joined
  last = [w.lines[-1] for w in workers]
  names_the_shard = last[1].startswith(
      f"run_pretraining.py: error: InputDataError: pretraining_dataset: corrupt or truncated "
      f"TFRecord shard {bad}")
  assert names_the_shard, joined
  names_the_worker = "stopped at step" in last[0] and "data error on worker 1" in last[0]
  assert names_the_worker, joined
  said = [[line for line in w.lines if line.startswith("run_pretraining.py:")] for w in workers]
  assert [len(lines) for lines in said] == [1, 1], joined  # one line each, the last one
  # Both stopped after the same step, saved it together and name it.
  steps = {int(re.search(r"at step (\d+)", line).group(1)) for line in last}
  assert len(steps) == 1, joined
  step = steps.pop()
  model_dir = root / "models" / "mw"
  ckpt = model_dir / f"ckpt-{step}"
  assert all(f"latest checkpoint: {ckpt}" in line for line in last), joined
  assert step > 0 and training.latest_checkpoint(str(model_dir)) == str(ckpt), joined
  assert not list(model_dir.glob("worker_tmp_*")) and not list(model_dir.glob("*_temp"))
  reader = tf.train.load_checkpoint(str(ckpt))  # complete: every tensor reads, all finite
  shapes = reader.get_variable_to_shape_map()
  assert int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE")) == step
  assert len(shapes) > 50
  for name in shapes:
    value = np.asarray(reader.get_tensor(name))  # the object graph is a string
    if value.dtype.kind == "f":
      assert np.isfinite(value).all(), name
