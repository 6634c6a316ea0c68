"""A data error on one worker of a multi-worker run stops every worker after the same step.

Under MultiWorkerMirroredStrategy every step holds collectives, so a worker whose input
pipeline fails (a corrupt shard that only it reads) would leave the others waiting in one of
them forever. Instead, that worker's pipeline ends as if exhausted, keeps the error's line, and
raises the stop request the workers already agree on before each step (interrupt.py) to
``DATA_ERROR + its replica id``: all stop after the same step, save together and exit, the
failing worker naming the shard, the others naming that worker. Such a stop ends the process
right after its line (`exit_at_once`, see console.one_line_errors): the interpreter's normal
exit would tear this wrapped pipeline down while its prefetch thread waits for Python.
"""

from __future__ import annotations

from collections.abc import Iterator

import tensorflow as tf

from electra_tf.training import interrupt
from electra_tf.training.errors import data_error_line

DATA_ERROR = 1 << 16  # stop requests at or above this are data errors; below, signal numbers


def is_data_error(stopped: int) -> bool:
  return stopped >= DATA_ERROR


def replica_of(stopped: int) -> int:
  """The replica (global id) whose input failed, from an agreed stop request."""
  return stopped - DATA_ERROR


class InputErrorGuard:
  """Wraps one worker's input pipeline so a data error ends it and requests a stop."""

  def __init__(self, stop: interrupt.StopRequest):
    self._stop = stop
    self.message: str | None = None  # this worker's error line, once it failed

  def guard(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
    """`dataset`'s elements until it fails; then the end, with the stop requested first.

    The elements pass through Python (`from_generator`): tf.data cannot catch an error in
    the graph (`ignore_errors` would skip the bad batch and go on).
    """

    def elements() -> Iterator:
      iterator = iter(dataset)
      while True:
        try:
          element = next(iterator)
        except StopIteration:
          return
        except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as e:
          self.message = data_error_line(e)
          self._stop.requested.assign(DATA_ERROR)
          return
        yield element

    return tf.data.Dataset.from_generator(elements, output_signature=dataset.element_spec)
