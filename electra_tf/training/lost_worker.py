"""A worker of a multi-worker run dies: the others stop within a bounded time, with one line.

What TensorFlow 2.20 does (measured, two workers over loopback; docs/stopping.md): no worker
hangs in a collective when a peer dies. MultiWorkerMirroredStrategy starts a coordination
service (its leader is the chief, or worker 0) that expects a heartbeat from every worker. The
heartbeats come from a C++ thread, so a slow step, save or evaluation never delays them. When a
worker misses them for the heartbeat timeout, the service aborts the collectives of every
worker, and any collective started later fails at once (so a save in progress on the chief
finishes first). A worker whose leader dies sees its own heartbeat call fail, or the
connection reset. Python then gets an UnavailableError or DeadlineExceededError whose first
line is only "Graph execution error:".

`configure` sets the heartbeat timeout (TensorFlow's default is 10 s) before the strategy
starts the service; `reported` turns the error into one line naming the lost worker and the
latest checkpoint, ending the process right after it (`exit_at_once`: an aborted cluster can
block interpreter teardown). Nothing is saved then: a step cut by the abort may have updated
some variables and not others.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
from collections.abc import Callable, Iterator

import tensorflow as tf

# The coordination service's settings have no public API; MultiWorkerMirroredStrategy keeps a
# configuration made before it is created (it only fills in one when none is set).
from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
from tensorflow.python.distribute import multi_worker_util
from tensorflow.python.eager import context

DEFAULT_SECS = 60.0
COORDINATED_JOBS = ("chief", "worker")  # the jobs MultiWorkerMirroredStrategy coordinates
# Errors a collective, a heartbeat or a barrier (InternalError) fails with when a peer is gone.
PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
               tf.errors.AbortedError, tf.errors.CancelledError, tf.errors.InternalError)
_TASK = re.compile(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)")
_TIMED_OUT = re.compile(_TASK.pattern + " heartbeat timeout")
_CLUSTER_SIGNS = ("Collective ops is aborted", "CoordinationService", "stopped sending heartbeats")


class WorkerLostError(RuntimeError):
  """A peer worker died or stopped answering; this worker stops without saving."""

  exit_at_once = True  # console.one_line_errors: os._exit right after the line


def configure(timeout_secs: float = DEFAULT_SECS) -> None:
  """Sets the coordination service's heartbeat timeout from TF_CONFIG's cluster.

  Call before creating MultiWorkerMirroredStrategy; a no-op without a cluster, for tasks the
  strategy does not coordinate (e.g. an evaluator) or when the service is configured already.
  """
  if timeout_secs <= 0:
    raise ValueError(f"lost_worker_secs must be > 0; got {timeout_secs}")
  tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
  spec = tf.train.ClusterSpec(tf_config.get("cluster") or {})
  task_type = tf_config.get("task", {}).get("type")
  if (not spec.jobs or task_type not in COORDINATED_JOBS
      or context.context().coordination_service is not None):
    return
  jobs = [coordination_config_pb2.CoordinatedJob(name=job, num_tasks=spec.num_tasks(job))
          for job in COORDINATED_JOBS if job in spec.jobs]
  context.context().configure_coordination_service(
      service_type="standalone", service_leader=multi_worker_util.coordination_leader(spec),
      coordinated_jobs=jobs, heartbeat_timeout_in_ms=int(timeout_secs * 1000))


_barriers = itertools.count()


def wait_for_every_worker(timeout_secs: float = 300.0) -> None:
  """Returns once every worker got here, through the coordination service (a no-op when the
  process runs no cluster). After a collective, a worker that goes on to exit must wait here:
  a peer may still be fetching this worker's part of the collective, and fails with
  UnavailableError once the process is gone. The service answers both ends, so the exit is
  safe. Every worker makes the same calls in the same order (the ids count them)."""
  if not context.context().coordination_service:
    return
  context.context().wait_at_barrier(f"electra_every_worker_{next(_barriers)}",
                                    int(timeout_secs * 1000))


def _name(job: str, index: str) -> str:
  return "the chief" if job == "chief" else f"{job} {index}"


def _own_task() -> tuple[str, str] | None:
  task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task") or {}
  return (task.get("type"), str(task.get("index", 0))) if task else None


def _leader() -> str:
  tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
  return "the chief" if "chief" in (tf_config.get("cluster") or {}) else "worker 0"


def lost_peer(message: str) -> str | None:
  """What a collective-abort message says about the lost worker ("worker 1 stopped sending
  heartbeats"), or None when the message is not about a lost peer."""
  if not any(sign in message for sign in _CLUSTER_SIGNS):
    return None
  own = _own_task()
  _, found, listed = message.partition("stopped sending heartbeats):")
  if found:  # the service's verdict: one "/job:J/replica:0/task:N" line per silent task
    tasks = []
    for line in listed.strip().splitlines():
      m = _TASK.match(line.strip())
      if not m:
        break
      tasks.append(m.groups())
    names = [_name(*t) for t in tasks if t != own] or ["another worker"]
    return f"{', '.join(names)} stopped sending heartbeats"
  m = next((m for m in _TIMED_OUT.finditer(message) if m.groups() != own), None)
  if m is not None:  # a barrier's: "Task /job:J/replica:0/task:N heartbeat timeout"
    return f"{_name(*m.groups())} stopped sending heartbeats"
  if "CoordinationService/Heartbeat" in message:
    return f"the coordination service on {_leader()} stopped answering this worker's heartbeats"
  m = next((m for m in _TASK.finditer(message) if m.groups() != own), None)
  if m is not None:
    return f"{_name(*m.groups())} stopped answering (its connection failed)"
  return "another worker stopped answering"


@contextlib.contextmanager
def reported(enabled: bool, latest: Callable[[], str | None], step: tf.Variable | None = None
             ) -> Iterator[None]:
  """Inside: a collective failing on a lost peer raises WorkerLostError, one line naming the
  peer, the step reached (when `step` is given) and `latest()`, the checkpoint to resume from.
  `enabled`: several workers (otherwise errors pass unchanged)."""
  try:
    yield
  except PEER_ERRORS as e:
    peer = lost_peer(getattr(e, "message", None) or str(e)) if enabled else None
    if peer is None:
      raise
    at = "" if step is None else f" at step {int(step.numpy())}"
    path = latest()
    resume = (f"latest checkpoint: {path}; rerun every worker to resume from it" if path else
              "no checkpoint yet; rerun every worker to start again")
    raise WorkerLostError(f"stopped{at}: {peer}; {resume}") from None
