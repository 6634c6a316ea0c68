"""Gradient accumulation: the pieces the Trainer uses to make one update from k micro-batches.

Each replica's batch [B, ...] is reshaped to [k, B / k, ...] and micro-batch j is row j, so
the input pipeline, its batch size and its resume position are those of one optimizer update.
Dense gradients are added in float32 accumulators; ``tf.IndexedSlices`` gradients (embedding
lookups by gather) keep every micro-batch's rows, concatenated, so global-norm clipping counts
the same unmerged rows as for one batch (the official CPU/GPU graph's norm). A tf.while_loop
carries them (no Python loop, static shapes), then the update is applied once.

How a micro-batch's loss is weighted (``MICRO_BATCH_LOSSES``), so that the k micro-batches
give exactly the one-batch update:
- ``"mean"``: the step's ``total_loss`` is a mean over a fixed number of examples per batch
  (equal for every micro-batch); each micro-batch loss is weighted 1 / k.
- ``"sum"``: ``total_loss`` is a sum over the batch (fine-tuning), or a micro-batch's share
  of the batch loss (pre-training, which normalises by the batch totals the Trainer hands the
  step function in ``features[BATCH_TOTALS]``); micro-batch losses are added.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import tensorflow as tf

MICRO_BATCH_LOSSES = ("mean", "sum")
# Feature key under which a micro-batch's step function receives its batch's totals.
BATCH_TOTALS = "batch_totals"


def prepare(k: int) -> int:
  """Returns ``k``; for k > 1 first turns off grappler's arithmetic optimizer in this process.

  Inside the micro-batch tf.while_loop of a full-size model its AddOpsRewrite makes
  TemporaryVariable ops whose names collide from one update to the next (AlreadyExistsError,
  tensorflow/tensorflow#23780). The rewrite only regroups additions; the step is as fast
  without it (``benchmarks/bench_pretrain.py --variants=ours,ours_accum``).
  """
  if k > 1:
    tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False})
  return k


def split_batch(features: Mapping[str, tf.Tensor], k: int) -> dict[str, tf.Tensor]:
  """Every feature [B, ...] -> [k, B / k, ...] (micro-batch j is ``[j]``); one-line error
  when the replica batch B is not a multiple of k."""
  out = {}
  for name, value in features.items():
    batch = value.shape[0] if value.shape.rank else None
    if batch is not None and batch % k:
      raise ValueError(f"the per-replica batch of {batch} examples (feature {name!r}) is not "
                       f"divisible by gradient_accumulation_steps {k}")
    out[name] = tf.reshape(value, tf.concat([[k, -1], tf.shape(value)[1:]], 0))
  return out


def micro_batch(split: Mapping[str, tf.Tensor], index: tf.Tensor) -> dict[str, tf.Tensor]:
  """Micro-batch ``index`` of ``split_batch``'s output: every feature [B / k, ...]."""
  return {name: tf.gather(value, index) for name, value in split.items()}


def float32_grads(grads: Sequence[tf.Tensor | tf.IndexedSlices | None]) -> list:
  """Gradients in float32, ``tf.IndexedSlices`` kept as they are (None stays None).

  Embedding lookups by gather give ``IndexedSlices`` with one row per position; clipping by
  global norm counts those rows unmerged, as the official CPU/GPU graph does.
  """
  out = []
  for g in grads:
    if isinstance(g, tf.IndexedSlices):
      g = tf.IndexedSlices(tf.cast(g.values, tf.float32), g.indices, g.dense_shape)
    elif g is not None:
      g = tf.cast(g, tf.float32)
    out.append(g)
  return out


def accumulator_bytes(variables: Sequence[tf.Variable]) -> int:
  """Bytes of float32 accumulators for ``variables`` (one copy per replica)."""
  return sum(v.shape.num_elements() * 4 for v in variables)


def micro_batch_weight(micro_batch_losses: str, k: int) -> float:
  """What each micro-batch's total_loss is multiplied by (see the module docstring)."""
  if micro_batch_losses not in MICRO_BATCH_LOSSES:
    raise ValueError(f"micro_batch_losses must be one of {', '.join(MICRO_BATCH_LOSSES)}; "
                     f"got {micro_batch_losses!r}")
  return 1.0 / k if micro_batch_losses == "mean" else 1.0
