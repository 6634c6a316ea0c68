"""Progress reporting: averaged metrics to TensorBoard and one console line per log interval.

Every logged metric is the mean over all steps since the previous log line (each step's value is
itself the mean over replicas), not the last step's value. A step is one optimizer update: with
gradient accumulation it covers all its micro-batches, so steps/s, examples/s (the update's
global batch) and model FLOPs utilisation (the FLOPs of the whole update) need no correction.
Throughput (steps/s, examples/s, model FLOPs utilisation) is measured over the same interval,
wall clock on the host; the first interval of a process includes tracing and XLA compilation,
so the ETA uses the rate of later intervals once there is one.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Callable, Mapping

import tensorflow as tf

from electra_tf import atomic_io


def secs_to_str(secs: float) -> str:
  """3725 -> '1:02:05', 600 -> '10:00', 65 -> '1:05', 5 -> '5' (the official ETAHook's format)."""
  return re.sub(r"^[0:]+", "", str(datetime.timedelta(seconds=int(round(secs))))) or "0"


def learning_rate_of(optimizer) -> float:
  """The learning rate the optimizer applied at its latest step (schedules are evaluated)."""
  lr = optimizer.learning_rate
  if callable(lr) and not isinstance(lr, tf.Variable):
    lr = lr(optimizer.iterations)
  return float(tf.convert_to_tensor(lr))


class Progress:
  """Accumulates per-chunk metric sums and reports them every log interval.

  Args:
    total_steps: num_train_steps, for percent done and ETA.
    start_step: global step when this process started training.
    global_batch_size: examples per update across all replicas and micro-batches (examples/s).
    num_devices: replicas in sync (MFU divides by num_devices * peak_flops).
    flops_per_step: model FLOPs of one update (forward + backward of every example of the
      global batch, all micro-batches), or None.
    peak_flops: peak FLOP/s of ONE device at the training precision, or None.
    writer: tf.summary writer (a no-op writer on non-chief workers).
    log_fn: where console lines go.
  """

  def __init__(self, total_steps: int, start_step: int, global_batch_size: int, num_devices: int,
               flops_per_step: float | None, peak_flops: float | None,
               writer: tf.summary.SummaryWriter, log_fn: Callable[[str], None]):
    self.total_steps = total_steps
    self.global_batch_size = global_batch_size
    self.num_devices = num_devices
    self.flops_per_step = flops_per_step
    self.peak_flops = peak_flops
    self.writer = writer
    self.log_fn = log_fn
    self._start_time = self._interval_time = time.perf_counter()
    self._interval_step = start_step
    self._steady_time = self._steady_step = None  # end of the first interval
    self._sums: dict[str, float] = {}
    self._count = 0

  def add(self, sums: Mapping[str, float], num_steps: int) -> None:
    """Adds the metric sums of `num_steps` steps."""
    for k, v in sums.items():
      self._sums[k] = self._sums.get(k, 0.0) + float(v)
    self._count += num_steps

  def log(self, step: int, learning_rate: float | None = None,
          extra: Mapping[str, float] | None = None,
          notes: Callable[[dict[str, float]], list[str]] | None = None) -> dict[str, float]:
    """Writes the interval's averages at `step`, prints a line, resets; returns what it wrote.

    `extra`: values already aggregated over the interval (e.g. streaming metrics), logged as is.
    `notes(values)`: short texts appended to the line (e.g. a probe's scores); the time they
    take is in neither this interval's steps per second nor the next one's (ELAP and ETA keep
    it: it is part of the run).
    """
    now = time.perf_counter()
    steps = step - self._interval_step
    seconds = max(now - self._interval_time, 1e-9)
    values = {k: v / max(self._count, 1) for k, v in self._sums.items()}
    values.update(extra or {})
    if learning_rate is not None:
      values["learning_rate"] = learning_rate
    if steps > 0:
      values["steps_per_second"] = steps / seconds
      values["examples_per_second"] = steps * self.global_batch_size / seconds
      if self.flops_per_step and self.peak_flops:
        values["model_flops_utilization"] = (
            self.flops_per_step * steps / seconds / (self.peak_flops * self.num_devices))
    with self.writer.as_default():
      for name, value in values.items():
        tf.summary.scalar(name, value, step=step)
    self.writer.flush()

    if self._steady_time is None:
      self._steady_time, self._steady_step = now, step
      rate = steps / seconds
    else:
      rate = (step - self._steady_step) / max(now - self._steady_time, 1e-9) or steps / seconds
    eta = (self.total_steps - step) / rate if rate > 0 else float("nan")
    line = (f"{step}/{self.total_steps} = {100.0 * step / self.total_steps:.1f}%, "
            f"SPS: {steps / seconds:.2f}, ELAP: {secs_to_str(now - self._start_time)}, "
            f"ETA: {secs_to_str(eta) if eta == eta else '?'}")
    extras = {k: v for k, v in values.items() if k not in ("steps_per_second",)}
    line += "".join(f" - {k}: {v:.4g}" for k, v in extras.items())
    if notes is not None:
      line += "".join(f" - {note}" for note in notes(values))
      now = time.perf_counter()  # the next interval's rate starts after the notes
    self.log_fn(line)
    self._interval_time, self._interval_step = now, step
    self._sums, self._count = {}, 0
    return values


def write_results(path: str, results: Mapping[str, float]) -> None:
  """Writes eval results as sorted `key = value` lines, atomically (temp file + rename).

  The line format is what the official `train_or_eval` logs for `estimator.evaluate`; the
  official pre-training code names `results/unsup_results.txt` in its config but never writes it.
  """
  tf.io.gfile.makedirs(path.rsplit("/", 1)[0] if "/" in path else ".")
  atomic_io.write_text(path, "".join(f"{k} = {results[k]}\n" for k in sorted(results)))
