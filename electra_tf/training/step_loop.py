"""The compiled multi-step loop: one `tf.function` call runs up to n steps through
`strategy.run`, so Python is entered once per log interval, not once per step.

Before each training step the loop reads the stop request (interrupt.StopRequest: Ctrl-C,
SIGTERM, or a worker's data error, see worker_data.py), agreed by all workers under
MultiWorkerMirroredStrategy (`agreed_stop`), and returns at once when one is set, so the
caller saves the last completed step. It also returns early after a non-finite total_loss
(training) or when the data runs out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import tensorflow as tf

from electra_tf.training import interrupt, worker_data

ReplicaFn = Callable[..., dict[str, tf.Tensor]]  # (features, index) -> scalar outputs


class LoopResult(NamedTuple):
  """What one call of the loop did."""

  sums: dict[str, float]  # each scalar output summed over the steps run
  done: int  # steps run
  finite: bool  # total_loss stayed finite (training)
  exhausted: bool  # the data ran out
  stopped: int  # the agreed stop request (a signal number, or a data error code) or 0


def agreed_stop(strategy: tf.distribute.Strategy, stop: interrupt.StopRequest,
                collective: bool, after: tf.Tensor) -> tf.Tensor:
  """The request to stop before the next step (0: none), agreed by all workers: a signal
  number, or worker_data.DATA_ERROR + the replica whose input failed. Read once `after` is
  computed (the batch fetch, where a worker's data error raises the request); called inside
  the loop's tf.function. `collective`: several workers, so the maximum over all replicas."""
  with tf.control_dependencies([after]):
    if not collective:
      return stop.requested.read_value()

    def mine():
      code = stop.requested.read_value()
      replica = tf.distribute.get_replica_context().replica_id_in_sync_group
      code += tf.where(code >= worker_data.DATA_ERROR, tf.cast(replica, tf.int32), 0)
      return tf.reshape(code, [1])

    per_replica = strategy.run(mine)
    return tf.reduce_max(strategy.gather(per_replica, axis=0))  # ReduceOp has no MAX


def make_loop(strategy: tf.distribute.Strategy, replica_fn: ReplicaFn,
              global_step: tf.Variable | None = None,
              stop_signal: Callable[[tf.Tensor], tf.Tensor] | None = None) -> Callable:
  """tf.function(iterator, num_steps) -> (sums, done, finite, exhausted, stopped) tensors.

  Training when `global_step` is given: step i runs `replica_fn(features, global_step)` then
  adds 1 to it, `stop_signal(after)` (see agreed_stop) is read before each step, and a
  non-finite total_loss ends the call. Evaluation otherwise: `replica_fn(features, batch
  number)`. The step exists once in the graph, inside the loop: its outputs' structure comes
  from a trace of it that never runs (a peeled first step doubled the graph, its compile time
  and about 0.5 GiB of resident memory at ELECTRA-Small shapes).
  """
  train = global_step is not None

  def one_step(features, index):
    per_replica = strategy.run(replica_fn, args=(features, index))
    out = {k: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None)
           for k, v in per_replica.items()}
    if train:
      global_step.assign_add(1)
    return out

  def zero_sums(iterator) -> dict[str, tf.Tensor]:
    """Zeros shaped like one step's outputs (traces the step; creates optimizer slots)."""
    traced = tf.function(one_step).get_concrete_function(
        iterator.element_spec, tf.TensorSpec([], tf.int64))
    return {k: tf.zeros(v.shape, v.dtype) for k, v in traced.structured_outputs.items()}

  def index_of(done):
    return tf.identity(global_step) if train else tf.cast(done, tf.int64)

  @tf.function
  def loop(iterator, num_steps):
    sums = zero_sums(iterator)
    done = tf.constant(0)
    finite = tf.constant(True)
    exhausted = tf.constant(False)
    stopped = tf.constant(0)
    for _ in tf.range(num_steps):
      if not finite:
        break
      optional = iterator.get_next_as_optional()
      if stop_signal is not None:
        stopped = stop_signal(optional.has_value())
        if stopped > 0:
          break
      if not optional.has_value():
        exhausted = tf.constant(True)
        break
      out = one_step(optional.get_value(), index_of(done))
      sums = {k: sums[k] + out[k] for k in sums}
      done += 1
      if train:
        finite = tf.math.is_finite(out["total_loss"])
    return sums, done, finite, exhausted, stopped

  return loop


def run(loop: Callable, iterator, num_steps: int) -> LoopResult:
  """Calls `loop` (make_loop) for up to num_steps steps; its results as Python values. The
  TensorFlow errors of the call (e.g. a data error of the input pipeline) propagate."""
  sums, done, finite, exhausted, stopped = loop(iterator, tf.constant(num_steps))
  if int(done) == 0:  # stopped or data ended exactly at a loop boundary: no sums to report
    return LoopResult({}, 0, True, bool(exhausted), int(stopped))
  return LoopResult({k: float(v) for k, v in sums.items()}, int(done), bool(finite),
                    bool(exhausted), int(stopped))
