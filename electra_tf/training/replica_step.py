"""One replica's part of a training update, run inside `strategy.run`: forward and backward of
the step function on the replica's batch, then one optimizer update.

The step function is `step_fn(features, seed) -> {"total_loss": scalar, other metrics...}`, run
in replica context on one replica's batch. `seed` is an int64 `[2]` tensor
`[settings.seed, index * num_replicas_in_sync + replica_id]` (index = global step before the
update when training, batch number when evaluating), different for every step and replica and
the same after a resume, so `tf.random.stateless_*` ops that use it make a run reproducible
across restarts.

Gradients: each replica differentiates `total_loss / num_replicas_in_sync`; the optimizer sums
gradients over replicas, so the update uses the mean of the per-replica losses, which is the
global-batch loss when replicas get equal batches (the official TPU CrossShardOptimizer also
averages per-shard losses). Scalar outputs are averaged over replicas (then over steps for the
logs, see monitoring.py); non-scalar outputs are ignored by the loop.

Gradient accumulation (k = `gradient_accumulation_steps` > 1): a step is still one optimizer
update on one global batch of `train_batch_size` examples, so the step counter, the
learning-rate schedule, checkpoints, logs and FLOPs count updates. Each replica splits its batch
into k micro-batches, runs step_fn on each with its own seed (`index` above becomes
`update * k + micro-batch`), sums the gradients in float32 (accumulation.sum_micro_batches)
and applies them once (clipped once, by the optimizer). Embedding lookups by gather give
tf.IndexedSlices; their rows from all k micro-batches reach the optimizer unmerged, so the
clipping norm counts the same rows as for one batch, as the official CPU/GPU graph's norm does
for any k. `micro_batch_losses` says how micro-batch losses combine; the logged `total_loss` is
the update's (their mean or sum), other scalars are means over micro-batches.
`batch_totals_fn(micro-batch, its seed)`, when given, gives each micro-batch's loss
denominators with the seed its step_fn gets (so they count what that step will draw); their sum
over the k micro-batches is passed to every micro-batch's step_fn as
`features[accumulation.BATCH_TOTALS]`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import tensorflow as tf
import tf_keras

from electra_tf.training import accumulation

Features = Mapping[str, tf.Tensor]
StepFn = Callable[[Features, tf.Tensor], Mapping[str, tf.Tensor]]
BatchTotalsFn = Callable[[Features, tf.Tensor], Mapping[str, tf.Tensor]]


def scalars(outputs: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
  """The scalar entries of a step's outputs as float32 (what gets averaged and logged)."""
  if not isinstance(outputs, Mapping):
    raise TypeError(f"the step function must return a dict of tensors; got {type(outputs)}")
  return {k: tf.cast(v, tf.float32) for k, v in outputs.items()
          if tf.is_tensor(v) and v.shape.rank == 0}


def step_seed(seed: int, index: tf.Tensor, num_replicas: int) -> tf.Tensor:
  """The int64 [2] seed of step or batch `index` on this replica (replica context)."""
  replica = tf.distribute.get_replica_context().replica_id_in_sync_group
  return tf.stack([tf.constant(seed, tf.int64),
                   tf.cast(index, tf.int64) * num_replicas + tf.cast(replica, tf.int64)])


class ReplicaStep:
  """`replica_step(features, index) -> scalar outputs`: one replica's update `index` (the
  global step before it): gradients of its batch (k micro-batches), then apply_gradients."""

  def __init__(self, model: tf_keras.Model, optimizer: tf_keras.optimizers.Optimizer,
               step_fn: StepFn, seed: int, num_replicas: int, micro_batches: int,
               loss_weight: float, jit_compile: bool = False,
               batch_totals_fn: BatchTotalsFn | None = None):
    self.model, self.optimizer, self.step_fn = model, optimizer, step_fn
    self.seed, self.num_replicas = seed, num_replicas
    self.micro_batches, self.loss_weight = micro_batches, loss_weight
    self.batch_totals_fn = batch_totals_fn
    self.loss_scaling = isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer)
    self._grad_fn = (tf.function(self.forward_backward, jit_compile=True) if jit_compile
                     else self.forward_backward)

  def __call__(self, features: Features, index: tf.Tensor) -> dict[str, tf.Tensor]:
    grads, outputs = self.gradients(features, index)
    self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))
    return outputs

  def forward_backward(self, features: Features, seed: tf.Tensor):
    """Gradients of total_loss / num_replicas (loss-scaled for float16) and scalar outputs."""
    with tf.GradientTape() as tape:
      outputs = scalars(self.step_fn(features, seed))
      if "total_loss" not in outputs:
        raise ValueError("the step function must return a scalar 'total_loss'; got "
                         f"scalar outputs {sorted(outputs)}")
      loss = outputs["total_loss"]
      if self.loss_weight != 1.0:
        loss = loss * self.loss_weight
      loss = loss / self.num_replicas
      if self.loss_scaling:
        loss = self.optimizer.get_scaled_loss(loss)
    grads = tape.gradient(loss, self.model.trainable_variables)
    if self.loss_scaling:
      grads = self.optimizer.get_unscaled_gradients(grads)
    return grads, outputs

  def gradients(self, features: Features, index: tf.Tensor):
    """Float32 gradients and scalar outputs of update `index`: k = 1 runs the replica's batch
    as is; k > 1 sums those of its k micro-batches (accumulation.sum_micro_batches)."""
    k = self.micro_batches
    if k == 1:
      grads, outputs = self._grad_fn(features, step_seed(self.seed, index, self.num_replicas))
      return accumulation.float32_grads(grads), outputs
    split = accumulation.split_batch(features, k)
    first = tf.cast(index, tf.int64) * k

    def seed(j):
      return step_seed(self.seed, first + j, self.num_replicas)

    totals = None if self.batch_totals_fn is None else accumulation.sum_over_micro_batches(
        lambda j: self.batch_totals_fn(accumulation.micro_batch(split, j), seed(j)), k)

    def run(j):
      micro = accumulation.micro_batch(split, j)
      if totals is not None:
        micro[accumulation.BATCH_TOTALS] = totals
      grads, outputs = self._grad_fn(micro, seed(j))
      return accumulation.float32_grads(grads), outputs

    return accumulation.sum_micro_batches(run, k, losses_summed=self.loss_weight == 1.0)
