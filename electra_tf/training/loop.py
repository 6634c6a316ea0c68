"""The strategy-agnostic training loop: a `tf.function` running many steps through `strategy.run`.

    strategy = get_strategy(...)
    with strategy.scope():
      model = ...  # built (called once), so its variables exist
      optimizer = wrap_optimizer(create_optimizer(...), mixed_precision)
    trainer = Trainer(strategy, model, optimizer, TrainSettings(model_dir=..., ...),
                      init_fn=lambda: load_tf1_weights(model, init_checkpoint))  # -> step or None
    trainer.train(dataset_fn)            # resumes from model_dir if it holds a checkpoint
    trainer.evaluate(eval_dataset_fn, num_eval_steps, results_file=...)

The step function is `step_fn(features, seed) -> {"total_loss": scalar, other metrics...}`, run
in replica context on one replica's batch. `seed` is an int64 `[2]` tensor
`[settings.seed, index * num_replicas_in_sync + replica_id]` (index = global step before the
update when training, batch number when evaluating), different for every step and replica and
the same after a resume, so `tf.random.stateless_*` ops that use it make a run reproducible
across restarts. The default step function calls `model(features, training=...)` and ignores it.

Gradients: each replica differentiates `total_loss / num_replicas_in_sync`; the optimizer sums
gradients over replicas, so the update uses the mean of the per-replica losses, which is the
global-batch loss when replicas get equal batches (the official TPU CrossShardOptimizer also
averages per-shard losses). Scalar outputs are averaged over replicas (then over steps for the
logs, see monitoring.py); non-scalar outputs are ignored by the loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import tensorflow as tf
import tf_keras

from electra_tf.console import log
from electra_tf.training import checkpointing, monitoring, runtime

Features = Mapping[str, tf.Tensor]
StepFn = Callable[[Features, tf.Tensor], Mapping[str, tf.Tensor]]
DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


class NonFiniteLossError(RuntimeError):
  """The loss became NaN or Inf; nothing was saved after the last good checkpoint."""


@dataclasses.dataclass(frozen=True)
class TrainSettings:
  """What the loop needs from the run configuration (official names where there is one)."""

  model_dir: str
  num_train_steps: int
  train_batch_size: int  # global batch (all replicas); only used for examples/s
  iterations_per_loop: int = 200  # steps per tf.function call = steps per log line
  save_checkpoints_steps: int = 1000
  keep_checkpoint_max: int = 5  # 0 keeps every checkpoint
  seed: int = 0  # first component of the per-step seed (see module docstring)
  jit_compile: bool = False  # XLA-compile forward + backward of each step
  flops_per_step: float | None = None  # model FLOPs of one global-batch train step
  peak_flops: float | None = None  # peak FLOP/s of one device, for model FLOPs utilisation
  # False: total_loss drives the optimizer but is not logged (the step function returns the
  # scalar to show instead, e.g. a per-example mean when total_loss is a sum over the batch)
  log_total_loss: bool = True

  def __post_init__(self):
    for name in ("num_train_steps", "train_batch_size", "iterations_per_loop",
                 "save_checkpoints_steps"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")
    if self.keep_checkpoint_max < 0:
      raise ValueError(f"keep_checkpoint_max must be >= 0; got {self.keep_checkpoint_max}")


def model_step_fn(model: tf_keras.Model, training: bool) -> StepFn:
  """The default step function: `model(features, training=training)`, seed unused."""
  return lambda features, seed: model(features, training=training)


def _scalars(outputs: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
  """The scalar entries of a step's outputs as float32 (what gets averaged and logged)."""
  if not isinstance(outputs, Mapping):
    raise TypeError(f"the step function must return a dict of tensors; got {type(outputs)}")
  return {k: tf.cast(v, tf.float32) for k, v in outputs.items()
          if tf.is_tensor(v) and v.shape.rank == 0}


def write_results(path: str, results: Mapping[str, float]) -> None:
  """Writes eval results as sorted `key = value` lines, atomically (temp file + rename).

  The line format is what the official `train_or_eval` logs for `estimator.evaluate`; the
  official pre-training code names `results/unsup_results.txt` in its config but never writes it.
  """
  tf.io.gfile.makedirs(path.rsplit("/", 1)[0] if "/" in path else ".")
  tmp = f"{path}.tmp"
  with tf.io.gfile.GFile(tmp, "w") as f:
    f.write("".join(f"{k} = {results[k]}\n" for k in sorted(results)))
  tf.io.gfile.rename(tmp, path, overwrite=True)


class Trainer:
  """Trains and evaluates a built model under `strategy`; see the module docstring.

  Checks model_dir (creatable, writable, room for two checkpoints) on construction, so bad
  settings fail before any step runs. Checkpoint: `tf.train.Checkpoint(model=, optimizer=,
  step=)` saved as `<model_dir>/ckpt-<step>` every `save_checkpoints_steps` and at the end.
  """

  def __init__(self, strategy: tf.distribute.Strategy, model: tf_keras.Model,
               optimizer: tf_keras.optimizers.Optimizer, settings: TrainSettings,
               step_fn: StepFn | None = None, init_fn: Callable[[], int | None] | None = None,
               log_fn: Callable[[str], None] = log):
    variables = model.trainable_variables
    if not variables:
      raise ValueError("the model has no trainable variables yet: build it (call it once on "
                       "example features) inside strategy.scope() before creating the Trainer")
    if not all(strategy.extended.variable_created_in_scope(v) for v in model.variables):
      raise ValueError("the model's variables were not created under this strategy's scope(); "
                       "build the model inside `with strategy.scope():`")
    if getattr(optimizer, "_distribution_strategy", strategy) is not strategy:
      raise ValueError("the optimizer was created outside this strategy's scope(); create it "
                       "inside `with strategy.scope():`")
    self.strategy, self.model, self.optimizer, self.settings = strategy, model, optimizer, settings
    self.step_fn = step_fn or model_step_fn(model, training=True)
    self.init_fn, self.log_fn = init_fn, log_fn
    self.is_chief, task_id = runtime.worker_role(strategy)
    self._num_replicas = strategy.num_replicas_in_sync
    self._loss_scaling = isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer)
    with strategy.scope():
      optimizer.build(variables)  # slots exist before restore and before the size check
      self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
      self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                            step=self.global_step)
    self._keeper = checkpointing.CheckpointKeeper(
        self.checkpoint, settings.model_dir, settings.keep_checkpoint_max, self.is_chief, task_id)
    self._keeper.check(checkpointing.checkpoint_bytes(
        list(model.variables) + list(optimizer.variables)))
    self._grad_fn = (tf.function(self._forward_backward, jit_compile=True)
                     if settings.jit_compile else self._forward_backward)
    self._default_eval_step = model_step_fn(model, training=False)
    self._restored = False
    self._train_loop = None
    self._eval_loops: dict[int, Callable] = {}

  # ----- per-replica work --------------------------------------------------------------------

  def _step_seed(self, index: tf.Tensor) -> tf.Tensor:
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    return tf.stack([tf.constant(self.settings.seed, tf.int64),
                     tf.cast(index, tf.int64) * self._num_replicas + tf.cast(replica, tf.int64)])

  def _forward_backward(self, features: Features, seed: tf.Tensor):
    """Gradients of total_loss / num_replicas (loss-scaled for float16) and scalar outputs."""
    with tf.GradientTape() as tape:
      outputs = _scalars(self.step_fn(features, seed))
      if "total_loss" not in outputs:
        raise ValueError("the step function must return a scalar 'total_loss'; got "
                         f"scalar outputs {sorted(outputs)}")
      loss = outputs["total_loss"] / self._num_replicas
      if self._loss_scaling:
        loss = self.optimizer.get_scaled_loss(loss)
    grads = tape.gradient(loss, self.model.trainable_variables)
    if self._loss_scaling:
      grads = self.optimizer.get_unscaled_gradients(grads)
    return grads, outputs

  def _replica_train_step(self, features: Features, index: tf.Tensor) -> dict[str, tf.Tensor]:
    grads, outputs = self._grad_fn(features, self._step_seed(index))
    self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))
    return outputs

  # ----- the multi-step tf.function ---------------------------------------------------------

  def _make_loop(self, replica_fn: Callable, train: bool) -> Callable:
    """tf.function(iterator, num_steps) -> (metric sums, steps run, loss finite, data ran out).

    Runs up to num_steps steps; stops early after a non-finite total_loss (train) or when the
    iterator is exhausted. The first step is peeled off the loop to fix the sums' structure.
    """
    strategy = self.strategy

    def one_step(features, index):
      per_replica = strategy.run(replica_fn, args=(features, index))
      out = {k: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None)
             for k, v in per_replica.items()}
      if train:
        self.global_step.assign_add(1)
      return out

    def index_of(done):
      return tf.identity(self.global_step) if train else tf.cast(done, tf.int64)

    @tf.function
    def loop(iterator, num_steps):
      sums = one_step(next(iterator), index_of(0))
      done = tf.constant(1)
      finite = tf.math.is_finite(sums["total_loss"]) if train else tf.constant(True)
      exhausted = tf.constant(False)
      for _ in tf.range(num_steps - 1):
        if not finite:
          break
        optional = iterator.get_next_as_optional()
        if not optional.has_value():
          exhausted = tf.constant(True)
          break
        out = one_step(optional.get_value(), index_of(done))
        sums = {k: sums[k] + out[k] for k in sums}
        done += 1
        if train:
          finite = tf.math.is_finite(out["total_loss"])
      return sums, done, finite, exhausted

    return loop

  def _run_loop(self, loop: Callable, iterator, num_steps: int):
    try:
      sums, done, finite, exhausted = loop(iterator, tf.constant(num_steps))
    except tf.errors.OutOfRangeError:  # the data ended exactly at a loop boundary
      return {}, 0, True, True
    return ({k: float(v) for k, v in sums.items()}, int(done), bool(finite), bool(exhausted))

  # ----- public API ---------------------------------------------------------------------------

  def restore_or_initialize(self) -> int:
    """Restores the latest checkpoint in model_dir, else runs init_fn; returns the global step.

    init_fn may return a step (e.g. that of the checkpoint it loaded): it becomes the global
    step, so training continues the schedule from there.
    """
    path = self._keeper.latest()
    if path is not None:
      status = self.checkpoint.restore(path)
      try:
        status.assert_existing_objects_matched()
      except AssertionError as e:
        raise ValueError(f"checkpoint {path} does not match this model/optimizer: "
                         f"{checkpointing._first_line(e)}") from None
      self.log_fn(f"Restored {path} at step {int(self.global_step.numpy())}")
    elif self.init_fn is not None:
      step = self.init_fn()
      if step is not None:
        self.global_step.assign(step)
      self.log_fn("No checkpoint in model_dir: weights initialised by init_fn")
    self._restored = True
    return int(self.global_step.numpy())

  def _current_step(self) -> int:
    return int(self.global_step.numpy()) if self._restored else self.restore_or_initialize()

  def train(self, dataset_fn: DatasetFn,
            metrics: Sequence[tf_keras.metrics.Metric] = ()) -> dict[str, float]:
    """Trains up to settings.num_train_steps; returns the last logged values.

    `metrics`: streaming Keras metrics that step_fn updates (create them under
    strategy.scope()); each log line reports their `result()` over its interval, then resets
    them (e.g. accuracy or AUC over all examples of the interval, not a mean of batch values).

    dataset_fn(input_context) must return the per-replica-batched dataset of one input
    pipeline (`input_context.get_per_replica_batch_size(global_batch)`). It is called after the
    restore, so it may read `trainer.global_step` to continue a deterministic data stream; by
    default a resumed run restarts its input pipeline, as the official TPUEstimator does.
    Raises NonFiniteLossError (without saving) when total_loss becomes NaN or Inf.
    """
    s = self.settings
    step = self._current_step()
    if step >= s.num_train_steps:
      self.log_fn(f"Already at step {step} >= num_train_steps {s.num_train_steps}; not training")
      return {}
    if self._train_loop is None:
      self._train_loop = self._make_loop(self._replica_train_step, train=True)
    iterator = iter(self.strategy.distribute_datasets_from_function(dataset_fn))
    writer = (tf.summary.create_file_writer(s.model_dir) if self.is_chief
              else tf.summary.create_noop_writer())
    progress = monitoring.Progress(s.num_train_steps, step, s.train_batch_size,
                                   self._num_replicas, s.flops_per_step, s.peak_flops, writer,
                                   self.log_fn)
    logged: dict[str, float] = {}
    for metric in metrics:
      metric.reset_state()
    try:
      while step < s.num_train_steps:
        target = min(s.num_train_steps,
                     (step // s.iterations_per_loop + 1) * s.iterations_per_loop,
                     (step // s.save_checkpoints_steps + 1) * s.save_checkpoints_steps)
        sums, done, finite, exhausted = self._run_loop(self._train_loop, iterator, target - step)
        step = int(self.global_step.numpy())
        if not finite:
          raise NonFiniteLossError(
              f"total_loss became NaN or Inf at step {step}; stopped without saving, the latest "
              f"checkpoint is {self._keeper.latest() or 'none'}")
        progress.add(sums if s.log_total_loss else
                     {k: v for k, v in sums.items() if k != "total_loss"}, done)
        if exhausted:
          self.log_fn(f"Training data ran out at step {step} before num_train_steps "
                      f"{s.num_train_steps}; saving and stopping")
        end = exhausted or step >= s.num_train_steps
        if end or step % s.iterations_per_loop == 0:
          logged = progress.log(step, monitoring.learning_rate_of(self.optimizer),
                                {m.name: float(m.result()) for m in metrics})
          for metric in metrics:
            metric.reset_state()
        if end or step % s.save_checkpoints_steps == 0:
          path = self._keeper.save(step)
          if self.is_chief:
            self.log_fn(f"Saved {path}")
        if exhausted:
          break
    finally:
      writer.close()
    return logged

  def evaluate(self, dataset_fn: DatasetFn, num_steps: int, step_fn: StepFn | None = None,
               metrics: Sequence[tf_keras.metrics.Metric] = (),
               results_file: str | None = None) -> dict[str, float]:
    """Runs step_fn (default: the model with training=False) over num_steps batches.

    Returns the mean of each scalar output over batches and replicas (`total_loss` reported as
    `loss`, as estimator.evaluate does), the `result()` of each Keras metric in `metrics`
    (streaming, e.g. weighted accuracy or AUC over all batches; create them under
    strategy.scope() and update them in step_fn), and `global_step`. Fewer batches are used if
    the data runs out first. Writes TensorBoard scalars to model_dir/eval and, if given,
    `results_file` (see write_results) on the chief.
    """
    if num_steps < 1:
      raise ValueError(f"num_steps must be >= 1; got {num_steps}")
    step = self._current_step()
    step_fn = step_fn or self._default_eval_step
    key = id(step_fn)  # the cached loop keeps step_fn alive, so its id is not reused
    if key not in self._eval_loops:
      self._eval_loops[key] = self._make_loop(
          lambda features, index: _scalars(step_fn(features, self._step_seed(index))),
          train=False)
    for metric in metrics:
      metric.reset_state()
    iterator = iter(self.strategy.distribute_datasets_from_function(dataset_fn))
    sums, done, _, _ = self._run_loop(self._eval_loops[key], iterator, num_steps)
    if done < num_steps:
      self.log_fn(f"Eval data ran out after {done} of {num_steps} steps")
    results = {("loss" if k == "total_loss" else k): v / max(done, 1) for k, v in sums.items()}
    results.update({m.name: float(m.result()) for m in metrics})
    results["global_step"] = step  # printed by the caller's summary, not here
    if self.is_chief:
      writer = tf.summary.create_file_writer(f"{self.settings.model_dir}/eval")
      with writer.as_default():
        for k, v in results.items():
          if k != "global_step":
            tf.summary.scalar(k, v, step=step)
      writer.close()
      if results_file:
        write_results(results_file, results)
    return results
