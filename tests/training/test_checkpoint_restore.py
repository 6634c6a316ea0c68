"""Which checkpoint a run resumes from (``electra_tf.training.checkpoint_restore``): the newest
whose values are finite, the rejected ones listed with the next older one, and one-line errors
when none is usable or the workers disagree. Real checkpoints in a temp folder."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.training import checkpoint_restore


def _folder_of(tmp_path, values):
  """A model_dir with ``ckpt-1``.. holding a variable of each of ``values``, oldest first."""
  for step, value in enumerate(values, start=1):
    tf.train.Checkpoint(w=tf.Variable([value, 1.0])).write(str(tmp_path / f"ckpt-{step}"))
  return str(tmp_path)


def test_the_newest_finite_checkpoint_is_restored(tmp_path):
  model_dir = _folder_of(tmp_path, [1.0, 2.0, np.nan])
  w = tf.Variable([0.0, 0.0])
  rejected = []
  path, status = checkpoint_restore.restore_readable(
    tf.train.Checkpoint(w=w), model_dir,
    lambda: checkpoint_restore.non_finite_variable([w]), rejected)
  assert path == f"{model_dir}/ckpt-2" and status is not None
  assert w.numpy().tolist() == [2.0, 1.0]
  assert [(p, older) for p, _, older in rejected] == [(f"{model_dir}/ckpt-3",
                                                       f"{model_dir}/ckpt-2")]
  assert rejected[0][1].startswith(f"checkpoint {model_dir}/ckpt-3 holds NaN or Inf values")


def test_no_checkpoint_and_none_finite(tmp_path):
  w = tf.Variable([0.0, 0.0])
  check = lambda: checkpoint_restore.non_finite_variable([w])  # noqa: E731
  assert checkpoint_restore.restore_readable(
    tf.train.Checkpoint(w=w), str(tmp_path), check) == (None, None)
  model_dir = _folder_of(tmp_path, [np.inf])
  with pytest.raises(checkpoint_restore.NonFiniteCheckpointError) as err:
    checkpoint_restore.restore_readable(tf.train.Checkpoint(w=w), model_dir, check)
  message = str(err.value)
  assert "\n" not in message and "ckpt-1 holds NaN or Inf" in message
  assert message.endswith(f"to start afresh, move {model_dir} aside and rerun")
  assert str(err.value.with_advice("pass --restart")).endswith("; pass --restart")


def test_disagreeing_workers_are_named_in_one_line():
  error = checkpoint_restore.RestoreDisagreementError(
    "m", [7, checkpoint_restore.NO_CHECKPOINT, checkpoint_restore.RESTORE_FAILED])
  assert str(error) == (
    "the workers did not restore the same checkpoint of m (worker 0: ckpt-7; worker 1: no "
    "checkpoint; worker 2: its restore failed (see its output)); every worker stopped before "
    "training, nothing was moved; rerun once every worker sees the same files")
