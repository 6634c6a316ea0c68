"""How training saves a step and ends: periodic and final saves, the stop on a signal or a data
error (on one worker or several), a non-finite loss; each end is one error with one line.

A save is skipped only for a step whose checkpoint this run restored or wrote (a stop request
right after a periodic save), never because a file of that name exists: a damaged one is
replaced. No checkpoint holding NaN or Inf is ever written. After a stop under several workers,
every worker waits for the others (`barrier`) so the checkpoint is complete when any exits,
and the error is marked to end the process right after its line (`exit_at_once`).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import tensorflow as tf

from electra_tf.training import checkpoint_restore, checkpointing, interrupt, worker_data
from electra_tf.training.errors import InputDataError, NonFiniteLossError, data_error_line


class StepSaver:
  """Saves the step the loop reached through `keeper`, checking `variables` (model and
  optimizer) are finite first; builds the error each kind of stop ends with."""

  def __init__(self, keeper: checkpointing.CheckpointKeeper, variables: list[tf.Variable],
               strategy: tf.distribute.Strategy, collective: bool,
               log_fn: Callable[[str], None]):
    self.keeper, self.variables, self.strategy = keeper, variables, strategy
    self.collective, self.log_fn = collective, log_fn  # collective: several workers

  def save(self, step: int) -> None:
    """Saves the checkpoint of `step` unless this run restored or saved it (e.g. a stop
    request right after a periodic save); never one holding NaN or Inf."""
    if self.keeper.made_or_restored(step):
      return
    bad = checkpoint_restore.non_finite_variable(self.variables)
    if bad is not None:
      raise NonFiniteLossError(
          f"{bad} became NaN or Inf at step {step}; stopped without saving, the latest "
          f"checkpoint is {self.keeper.latest() or 'none'}")
    path = self.keeper.save(step)
    if self.keeper.is_chief:
      self.log_fn(f"Saved {path}")

  def non_finite_loss(self, step: int) -> NonFiniteLossError:
    return NonFiniteLossError(
        f"total_loss became NaN or Inf at step {step}; stopped without saving, the latest "
        f"checkpoint is {self.keeper.latest() or 'none'}")

  def data_error(self, error: tf.errors.OpError, step: int) -> InputDataError:
    """Saves the steps completed before the input pipeline failed; the error to raise.

    The failing batch was never applied (the loop fetches a batch before running its step),
    so the variables and global_step are those of the last completed step.
    """
    self.keeper.input = None  # the input iterator is past the failing batch: not saved
    if step > 0:
      self.save(step)
    return InputDataError(f"{data_error_line(error)} (at step {step}; latest checkpoint: "
                          f"{self.keeper.latest() or 'none'})")

  def stopped(self, step: int, stopped: int, data_message: str | None) -> Exception:
    """The error a run stopped by an agreed request (`step_loop.LoopResult.stopped`) ends with,
    once `step` is saved; every worker first waits for the others. `data_message`: this
    worker's data error line, if its input failed."""
    if self.collective:
      self.barrier()  # every worker's part of the save is written before any of them exits
    if worker_data.is_data_error(stopped):
      return self._at_once(self._worker_data_error(step, stopped, data_message))
    saved = os.path.join(self.keeper.model_dir, f"ckpt-{step}")
    return self._at_once(interrupt.Interrupted(
        f"interrupted at step {step}: saved {saved}; rerun to resume", stopped))

  def _worker_data_error(self, step: int, stopped: int,
                         data_message: str | None) -> InputDataError:
    """The error every worker stops with after one worker's input failed (all saved `step`)."""
    saved = os.path.join(self.keeper.model_dir, f"ckpt-{step}")  # all saved it together
    if data_message is not None:
      return InputDataError(f"{data_message} (at step {step}; latest checkpoint: {saved})")
    worker = worker_data.replica_of(stopped) // len(self.strategy.extended.worker_devices)
    return InputDataError(
        f"stopped at step {step} on a data error on worker {worker} (its output names the "
        f"shard); latest checkpoint: {saved}")

  def barrier(self) -> None:
    """Returns once every worker got here (an all-reduce of one number)."""
    ones = self.strategy.run(lambda: tf.constant(1))
    self.strategy.reduce(tf.distribute.ReduceOp.SUM, ones, axis=None).numpy()

  def _at_once(self, error: Exception) -> Exception:
    """`error`, marked to end the process right after its line when several workers run.

    Their input pipelines (worker_data.py) and TensorFlow's cluster services can block
    interpreter teardown for minutes; every worker has saved and passed the barrier by now.
    """
    error.exit_at_once = self.collective
    return error
