"""A lost worker leaves no other worker hanging. Two real run_pretraining.py processes over
loopback (MultiWorkerMirroredStrategy, TF_CONFIG) on real TFRecords: worker 1 SIGKILLed mid-run,
worker 0 ends within --lost_worker_secs with one line naming worker 1 and the latest
checkpoint; the same command on both resumes from it; then worker 1 frozen (SIGSTOP, as a
machine gone: no connection breaks) is noticed by its missing heartbeats, after the flag's
timeout. Fast: the abort messages TensorFlow 2.20 was seen to raise, parsed."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf
from helpers import ports, pretrain_data, procs
from helpers.paths import GOLDEN, REPO_ROOT

from electra_tf import training
from electra_tf.training import lost_worker

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1"}
STEPS = 40
TINY = {"model_hparam_overrides": {"hidden_size": 64, "num_hidden_layers": 2},
        "embedding_size": 64, "max_seq_length": 32, "train_batch_size": 8,
        "num_train_steps": STEPS, "iterations_per_loop": 1, "save_checkpoints_steps": 5,
        "num_warmup_steps": 1, "seed": 3,
        "vocab_size": pretrain_data.vocab_size(GOLDEN / "vocab.txt")}  # the vocab_file fixture's
# TensorFlow's own heartbeat timeout is 10 s: a loss noticed after more than 12 s shows that
# the flag reached the coordination service (the heartbeats come every LOST_SECS / 2).
LOST_SECS = 30
START_SECONDS = 600  # start-up, tracing and a few steps of two workers on 2 busy cores


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory, data_dir, vocab_file) -> pathlib.Path:
  return pretrain_data.build_data_dir(
      tmp_path_factory.mktemp("lost_worker"), vocab_file,
      {"emma.txt": (data_dir / "gutenberg" / "austen-emma.txt", 30000)}, num_out_files=2)


def _workers(root: pathlib.Path, log_dir: pathlib.Path) -> list[subprocess.Popen]:
  """Worker 0 (output piped) and worker 1 (output to worker1.log, read once it is over)."""
  command = [sys.executable, str(REPO_ROOT / "run_pretraining.py"), "--data_dir", str(root),
             "--model_name", "mw", "--distribution_strategy=multi_worker_mirrored",
             "--check_data=false", f"--lost_worker_secs={LOST_SECS}", "--hparams",
             json.dumps(TINY)]
  configs = ports.two_worker_tf_configs()
  runs = [subprocess.Popen(command, cwd=REPO_ROOT, env={**ENV, "TF_CONFIG": configs[0]},
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
  with open(log_dir / "worker1.log", "w") as out:  # the child keeps its own descriptor
    runs.append(subprocess.Popen(command, cwd=REPO_ROOT, env={**ENV, "TF_CONFIG": configs[1]},
                                 stdout=out, stderr=subprocess.STDOUT))
  return runs


def _past_step(proc: subprocess.Popen, step: int, deadline: float) -> str:
  """Worker 0's output until its progress line of a step >= `step`."""
  seen = ""
  while True:
    m, more = procs.wait_for_line(proc, rf"^(\d+)/{STEPS} = ", deadline - time.time())
    seen += more
    if int(m.group(1)) >= step:
      return seen


def _stop_worker_1(runs: list[subprocess.Popen], signum: int) -> tuple[str, float]:
  """Sends `signum` to worker 1; (worker 0's output to its exit, seconds from signal to exit).
  Both processes are gone afterwards."""
  try:
    runs[1].send_signal(signum)
    sent = time.time()
    log = procs.finish(runs[0], timeout=LOST_SECS + 60)
    return log, time.time() - sent
  finally:
    for p in runs:
      if p.poll() is None:
        p.kill()
        p.wait()


def _said(log: str) -> str:
  """Worker 0's one line; a test failure unless it is the only and last line of the program."""
  said = [line for line in log.splitlines() if line.startswith("run_pretraining.py:")]
  no_traceback = "Traceback" not in log
  assert no_traceback and len(said) == 1 and said[0] == log.rstrip().splitlines()[-1], log[-3000:]
  return said[0]


LINE = (r"run_pretraining\.py: error: WorkerLostError: stopped at step (\d+): worker 1 {}; "
        r"latest checkpoint: (\S+); rerun every worker to resume from it")


@pytest.mark.slow
def test_a_lost_worker_stops_the_other_with_one_line_and_both_resume(two_shards, tmp_path):
  model_dir = two_shards / "models" / "mw"
  # 1. SIGKILL of worker 1 (on a live host: its connections reset, or its heartbeats stop)
  runs = _workers(two_shards, tmp_path)
  before = _past_step(runs[0], 7, time.time() + START_SECONDS)
  log, seconds = _stop_worker_1(runs, signal.SIGKILL)
  print(f"SIGKILL: worker 0 exited {seconds:.1f} s after worker 1 was killed")
  log = before + log
  assert runs[0].returncode == 1, log[-3000:]
  latest = training.latest_checkpoint(str(model_dir))
  m = re.fullmatch(LINE.format(r"(?:stopped sending heartbeats|stopped answering \(its "
                               r"connection failed\))"), _said(log))
  assert m and m.group(2) == latest and int(m.group(1)) >= 7, log[-3000:]
  assert seconds < LOST_SECS + 30

  # 2. the same command on both resumes; then worker 1 freezes (SIGSTOP: as a machine that
  # vanished, no connection resets) and only its missing heartbeats tell
  runs = _workers(two_shards, tmp_path)
  step = int(latest.rsplit("-", 1)[1])
  before = _past_step(runs[0], step + 7, time.time() + START_SECONDS)
  log, seconds = _stop_worker_1(runs, signal.SIGSTOP)
  print(f"SIGSTOP: worker 0 exited {seconds:.1f} s after worker 1 was stopped")
  log, log1 = before + log, (tmp_path / "worker1.log").read_text()
  assert all(f"Restored {latest} at step {step}" in text for text in (log, log1)), log[-3000:]
  latest = training.latest_checkpoint(str(model_dir))
  m = re.fullmatch(LINE.format("stopped sending heartbeats"), _said(log))
  assert m and m.group(2) == latest and int(m.group(1)) >= step + 7, log[-3000:]
  assert 12 < seconds < LOST_SECS + 30  # the flag's timeout, not TensorFlow's 10 s


# The abort messages TensorFlow 2.20 raised in the measured cases (docs/stopping.md), trimmed.
SERVICE = ("Graph execution error:\n\nDetected at node while/cond_1/CollectiveReduceV2\n"
           "Collective ops is aborted by: Error reported from /job:worker/task:1: The following "
           "tasks are unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:1\n"
           "The tasks have crashed. Check the task logs for an earlier error.\n")
RESET = ("Graph execution error:\n\nCollective ops is aborted by: recvmsg:Connection reset by "
         "peer\nAdditional GRPC error information from remote target "
         "/job:worker/replica:0/task:0 while calling /tensorflow.WorkerService/CompleteInstance:\n")
LEADER = ("Graph execution error:\n\nCollective ops is aborted by: Deadline Exceeded\n\n"
          "RPC: /tensorflow.CoordinationService/Heartbeat\n")


BARRIER = ("Barrier failed because: task is set to ERROR: UNAVAILABLE: Task "
           "/job:worker/replica:0/task:1 heartbeat timeout. This indicates that the remote task "
           "has failed, got preempted, or crashed unexpectedly. [type.googleapis.com/tensorflow."
           "CoordinationServiceError='']. Barrier Id: electra_every_worker_0::0, Task: "
           "/job:worker/replica:0/task:0")


@pytest.mark.parametrize("me, message, said", [
    (0, SERVICE, "worker 1 stopped sending heartbeats"),
    (0, BARRIER, "worker 1 stopped sending heartbeats"),
    (1, RESET, "worker 0 stopped answering (its connection failed)"),
    (1, LEADER, "the coordination service on worker 0 stopped answering this worker's heartbeats"),
    (0, "Graph execution error:\n\nread of gs://bucket/data failed: connection reset", None),
])
def test_abort_messages_name_the_lost_worker(monkeypatch, me, message, said):
  monkeypatch.setenv("TF_CONFIG", json.dumps(
      {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
       "task": {"type": "worker", "index": me}}))
  assert lost_worker.lost_peer(message) == said


def test_a_lost_peer_becomes_one_line_and_other_errors_pass(monkeypatch):
  monkeypatch.setenv("TF_CONFIG", json.dumps(
      {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker",
                                                                        "index": 0}}))
  aborted = tf.errors.UnavailableError(None, None, SERVICE)
  with pytest.raises(lost_worker.WorkerLostError) as raised:
    with lost_worker.reported(True, lambda: None):
      raise aborted
  assert str(raised.value) == ("stopped: worker 1 stopped sending heartbeats; no checkpoint yet; "
                               "rerun every worker to start again")
  assert raised.value.exit_at_once
  with pytest.raises(lost_worker.WorkerLostError, match=r"^stopped at step 7: .*; latest "
                     r"checkpoint: m/ckpt-5; rerun every worker to resume from it$"):
    with lost_worker.reported(True, lambda: "m/ckpt-5", tf.Variable(7, dtype=tf.int64)):
      raise aborted
  with pytest.raises(lost_worker.WorkerLostError, match="^stopped: worker 1 stopped sending "):
    with lost_worker.reported(True, lambda: None):  # the barrier after the restore's gather
      raise tf.errors.InternalError(None, None, BARRIER)
  with pytest.raises(tf.errors.UnavailableError):  # one worker: not about a peer
    with lost_worker.reported(False, lambda: None):
      raise aborted
  other = tf.errors.UnavailableError(None, None, "read of gs://bucket/data failed")
  with pytest.raises(tf.errors.UnavailableError):
    with lost_worker.reported(True, lambda: None):
      raise other
