"""Gradient accumulation: how one update is made from k micro-batches (replica_step.py runs it).

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

from collections.abc import Callable, Mapping, Sequence

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


def sum_over_micro_batches(fn: Callable[[tf.Tensor], Mapping[str, tf.Tensor]], k: int
                           ) -> dict[str, tf.Tensor]:
  """``sum over j < k of fn(j)`` by name (``fn(j)``: scalars of micro-batch j, an int64
  scalar), in a tf.while_loop so the graph holds one copy of ``fn`` whatever k."""
  first = dict(fn(tf.constant(0, tf.int64)))

  def body(j, sums):
    more = fn(j)
    return j + 1, {name: sums[name] + more[name] for name in sums}

  _, sums = tf.while_loop(lambda j, _: j < k, body, (tf.constant(1, tf.int64), first))
  return sums


# run(j) -> (float32 gradients of micro-batch j, its scalar outputs); j is an int64 scalar
MicroBatchRun = Callable[[tf.Tensor], tuple[list, dict[str, tf.Tensor]]]


def sum_micro_batches(run: MicroBatchRun, k: int, losses_summed: bool
                      ) -> tuple[list, dict[str, tf.Tensor]]:
  """The update's gradients and scalar outputs from its k micro-batches, in a tf.while_loop.

  Dense gradients are added in float32; each ``tf.IndexedSlices`` gradient keeps every
  micro-batch's rows (micro-batch j's rows go to TensorArray slot j, concatenated at the end).
  Outputs are means over the micro-batches, but ``total_loss`` is their sum when
  ``losses_summed`` (``micro_batch_losses`` "sum", see the module docstring).
  """
  grads, sums = run(tf.constant(0, tf.int64))
  dense = [i for i, g in enumerate(grads) if isinstance(g, tf.Tensor)]
  sparse = [i for i, g in enumerate(grads) if isinstance(g, tf.IndexedSlices)]

  def rows(dtype, first_rows):  # micro-batch j's IndexedSlices rows go to slot j
    return tf.TensorArray(dtype, size=k, element_shape=first_rows.shape).write(0, first_rows)

  def body(j, acc, values, indices, sums):
    more, outputs, slot = *run(j), tf.cast(j, tf.int32)
    return (j + 1, [a + more[i] for a, i in zip(acc, dense, strict=True)],
            [ta.write(slot, more[i].values) for ta, i in zip(values, sparse, strict=True)],
            [ta.write(slot, more[i].indices) for ta, i in zip(indices, sparse, strict=True)],
            {name: sums[name] + outputs[name] for name in sums})

  # parallel_iterations=1: only one micro-batch's activations are alive at a time
  _, acc, values, indices, sums = tf.while_loop(
      lambda j, *_: j < k, body,
      (tf.constant(1, tf.int64), [grads[i] for i in dense],
       [rows(tf.float32, grads[i].values) for i in sparse],
       [rows(grads[i].indices.dtype, grads[i].indices) for i in sparse], sums),
      parallel_iterations=1)
  for i, a in zip(dense, acc, strict=True):
    grads[i] = a
  for i, v, n in zip(sparse, values, indices, strict=True):
    grads[i] = tf.IndexedSlices(v.concat(), n.concat(), grads[i].dense_shape)
  outputs = {name: value / k for name, value in sums.items()}
  if losses_summed:  # the update's loss is the sum of the micro-batch losses
    outputs["total_loss"] = sums["total_loss"]
  return grads, outputs


def plan_line(micro_batches: int, global_batch: int, replicas: int,
              variables: Sequence[tf.Variable]) -> str:
  """The line on the micro-batches of an update and the float32 accumulators' memory."""
  mib = accumulator_bytes(variables) / 2**20
  return (f"Gradient accumulation: {micro_batches} micro-batches of "
          f"{global_batch // (replicas * micro_batches)} examples per replica per update "
          f"(global batch {global_batch}); float32 gradient accumulators: {mib:.3g} MiB per "
          "replica")
