"""Which checkpoint a run resumes from: the newest one of model_dir whose files read and whose
values are finite (older ones tried in turn, the rejected ones listed), and the one-line errors
when none is usable or the workers did not restore the same step.

``checkpointing.CheckpointKeeper.restore`` moves the rejected ones aside and has the workers
agree; this module only reads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import tensorflow as tf

from electra_tf import checkpoints
from electra_tf.training.checkpoint_files import complete_checkpoints


def non_finite_variable(variables: list[tf.Variable]) -> str | None:
  """Name of the first floating-point variable holding NaN or Inf, or None."""
  for v in variables:
    if v.dtype.is_floating and not bool(tf.reduce_all(tf.math.is_finite(v))):
      return f"variable {v.name}"
  return None


class NonFiniteCheckpointError(ValueError):
  """Every checkpoint in model_dir holds NaN or Inf values (or the older ones do not read).

  ``problem`` says what is wrong with the oldest one, ``model_dir`` where they are; the
  message ends with how to start afresh, which an entry point may replace with its own
  (``with_advice``: e.g. a flag that does it).
  """

  def __init__(self, problem: str, model_dir: str, advice: str | None = None):
    self.problem, self.model_dir = problem, model_dir
    self.advice = advice or f"to start afresh, move {model_dir} aside and rerun"
    super().__init__(f"{problem}, and no older checkpoint is usable; {self.advice}")

  def with_advice(self, advice: str) -> NonFiniteCheckpointError:
    """The same error, ending with ``advice`` (how to start afresh) instead."""
    return NonFiniteCheckpointError(self.problem, self.model_dir, advice)


def restore_readable(checkpoint: tf.train.Checkpoint, model_dir: str,
                     non_finite: Callable[[], str | None] = lambda: None,
                     rejected: list[tuple[str, str, str]] | None = None):
  """Restores the newest checkpoint of model_dir whose files read and whose values are finite.

  Returns (prefix, load status), or (None, None) without a checkpoint. A corrupt one (proof of
  damage: a truncated data file, a damaged index, a checksum), or one after whose restore
  `non_finite()` names a variable holding NaN or Inf, is skipped for the next older one and
  appended to `rejected` as (prefix, what is wrong, the next older prefix);
  CorruptCheckpointError / NonFiniteCheckpointError if none is usable (the oldest is not
  appended). A read that fails without proof of damage (a 503, a timeout, a permission) is
  retried, then raises CheckpointUnavailableError (checkpoints.read_retried). Reads only.
  """
  rejected = [] if rejected is None else rejected
  candidates = complete_checkpoints(model_dir)
  for i, path in enumerate(candidates):
    last = i + 1 == len(candidates)
    try:
      status = checkpoints.read_retried(path, functools.partial(checkpoint.restore, path))
    except checkpoints.CorruptCheckpointError as e:
      if last:
        raise
      problem = str(e)
    else:
      bad = non_finite()
      if bad is None:
        return path, status
      problem = f"checkpoint {path} holds NaN or Inf values ({bad})"
      if last:
        raise NonFiniteCheckpointError(problem, model_dir)
    rejected.append((path, problem, candidates[i + 1]))
  return None, None


NO_CHECKPOINT, RESTORE_FAILED = -1, -2  # a worker's restored step when it is not a step


class RestoreDisagreementError(RuntimeError):
  """Workers restored different checkpoints (or some failed to): none of them may train."""

  def __init__(self, model_dir: str, steps: list[int]):
    def said(step: int) -> str:
      return ("no checkpoint" if step == NO_CHECKPOINT else "its restore failed (see its "
              "output)" if step == RESTORE_FAILED else f"ckpt-{step}")
    workers = "; ".join(f"worker {i}: {said(step)}" for i, step in enumerate(steps))
    super().__init__(f"the workers did not restore the same checkpoint of {model_dir} "
                     f"({workers}); every worker stopped before training, nothing was moved; "
                     "rerun once every worker sees the same files")
