"""The timing harness the benchmarks share: a multi-step loop timed call by call."""

from __future__ import annotations

import time

import tensorflow as tf


class Runner:
  """One variant: a multi-step tf.function over a repeated in-memory batch; times calls."""

  def __init__(self, name: str, loop, iterator, batch_size: int):
    self.name, self._loop, self._iterator, self._batch = name, loop, iterator, batch_size
    self.rates: list[float] = []

  def warm_up(self) -> float:
    """Two steps: the first call also builds the loop body, which the first step skips."""
    start = time.perf_counter()
    tf.nest.map_structure(lambda t: t.numpy(), self._loop(self._iterator, tf.constant(2)))
    return time.perf_counter() - start

  def timed(self, steps: int) -> None:
    start = time.perf_counter()
    out = self._loop(self._iterator, tf.constant(steps))
    tf.nest.map_structure(lambda t: t.numpy(), out)  # wait for the device
    self.rates.append(steps * self._batch / (time.perf_counter() - start))
