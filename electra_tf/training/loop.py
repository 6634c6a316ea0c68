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

Gradient accumulation (`settings.gradient_accumulation_steps` = k > 1): a step is still one
optimizer update on one global batch of `train_batch_size` examples, so the step counter, the
learning-rate schedule, checkpoints, logs and FLOPs count updates. Each replica splits its batch
into k micro-batches (see accumulation.py), runs step_fn on each with its own seed (`index`
above becomes `update * k + micro-batch`), adds the gradients in float32 and applies them
once (clipped once, by the optimizer). Embedding lookups by gather give tf.IndexedSlices;
their rows from all k micro-batches reach the optimizer unmerged, so the clipping norm counts
the same rows as for one batch, as the official CPU/GPU graph's norm does for any k.
`settings.micro_batch_losses` says how micro-batch losses combine; the logged `total_loss` is
the update's (their mean or sum), other scalars are means over micro-batches.
`batch_totals_fn(replica batch)`, when given, is computed once per update and passed to every
micro-batch's step_fn as `features[accumulation.BATCH_TOTALS]`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence

import tensorflow as tf
import tf_keras

from electra_tf.console import first_line, log
from electra_tf.training import (
  accumulation,
  checkpointing,
  interrupt,
  lost_worker,
  monitoring,
  runtime,
  worker_data,
)
from electra_tf.training.errors import InputDataError, NonFiniteLossError, data_error_line
from electra_tf.training.input_state import DatasetFn, InputState

Features = Mapping[str, tf.Tensor]
StepFn = Callable[[Features, tf.Tensor], Mapping[str, tf.Tensor]]
BatchTotalsFn = Callable[[Features], Mapping[str, tf.Tensor]]
# hook(step, values logged for the interval ending at step), run with the run's summary writer
# as the default writer (tf.summary calls land in its TensorBoard events)
IntervalHook = Callable[[int, Mapping[str, float]], None]


@dataclasses.dataclass(frozen=True)
class TrainSettings:
  """What the loop needs from the run configuration (official names where there is one)."""

  model_dir: str
  num_train_steps: int
  train_batch_size: int  # global batch of one optimizer update (all replicas and micro-batches)
  iterations_per_loop: int = 200  # steps per tf.function call = steps per log line
  save_checkpoints_steps: int = 1000
  keep_checkpoint_max: int = 5  # 0 keeps every checkpoint
  seed: int = 0  # first component of the per-step seed (see module docstring)
  jit_compile: bool = False  # XLA-compile forward + backward of each step
  flops_per_step: float | None = None  # model FLOPs of one update (all its micro-batches)
  peak_flops: float | None = None  # peak FLOP/s of one device, for model FLOPs utilisation
  # False: total_loss drives the optimizer but is not logged (the step function returns the
  # scalar to show instead, e.g. a per-example mean when total_loss is a sum over the batch)
  log_total_loss: bool = True
  gradient_accumulation_steps: int = 1  # micro-batches per update (see the module docstring)
  micro_batch_losses: str = "mean"  # "mean" | "sum", see accumulation.py

  def __post_init__(self):
    for name in ("num_train_steps", "train_batch_size", "iterations_per_loop",
                 "save_checkpoints_steps", "gradient_accumulation_steps"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")
    if self.train_batch_size % self.gradient_accumulation_steps:
      raise ValueError(f"train_batch_size {self.train_batch_size} is not divisible by "
                       f"gradient_accumulation_steps {self.gradient_accumulation_steps}")
    accumulation.micro_batch_weight(self.micro_batch_losses, self.gradient_accumulation_steps)
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


def _optimizer_variables(optimizer) -> list[tf.Variable]:
  variables = optimizer.variables  # a method on legacy tf_keras optimizers (e.g. LAMB)
  return list(variables() if callable(variables) else variables)


def _build_optimizer(optimizer, variables: list[tf.Variable]) -> None:
  """Creates the slots of `variables` (legacy loss-scale wrappers have no build: the inner)."""
  build = getattr(optimizer, "build", None) or optimizer.inner_optimizer.build
  build(variables)


class Trainer:
  """Trains and evaluates a built model under `strategy`; see the module docstring.

  Checks model_dir (creatable, writable, room for two checkpoints) on construction, so bad
  settings fail before any step runs. Checkpoint: `tf.train.Checkpoint(model=, optimizer=,
  step=)` saved as `<model_dir>/ckpt-<step>` every `save_checkpoints_steps` and at the end.
  `interval_hooks` are called after each log line as `hook(step, logged values)` (see
  IntervalHook), e.g. pretraining.collapse.CollapseWatch.
  """

  def __init__(self, strategy: tf.distribute.Strategy, model: tf_keras.Model,
               optimizer: tf_keras.optimizers.Optimizer, settings: TrainSettings,
               step_fn: StepFn | None = None, init_fn: Callable[[], int | None] | None = None,
               log_fn: Callable[[str], None] = log, batch_totals_fn: BatchTotalsFn | None = None,
               interval_hooks: Sequence[IntervalHook] = ()):
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
    self.init_fn, self.log_fn, self.batch_totals_fn = init_fn, log_fn, batch_totals_fn
    self.interval_hooks = tuple(interval_hooks)
    self._micro_batches = accumulation.prepare(settings.gradient_accumulation_steps)
    self._loss_weight = accumulation.micro_batch_weight(settings.micro_batch_losses,
                                                        self._micro_batches)
    self.is_chief, task_id = runtime.worker_role(strategy)
    self._num_replicas = strategy.num_replicas_in_sync
    self._loss_scaling = isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer)
    with strategy.scope():
      _build_optimizer(optimizer, variables)  # slots exist before restore and the size check
      self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
      self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                            step=self.global_step)
    self._keeper = checkpointing.CheckpointKeeper(
        self.checkpoint, settings.model_dir, settings.keep_checkpoint_max, self.is_chief, task_id)
    self._saved_variables = list(model.variables) + _optimizer_variables(optimizer)
    for note in self._keeper.check(checkpointing.checkpoint_bytes(self._saved_variables)):
      self.log_fn(note)
    self._stop = interrupt.StopRequest()
    # Several workers: the stop request is all-reduced before each step (see interrupt.py).
    self._collective_stop = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    self._grad_fn = (tf.function(self._forward_backward, jit_compile=True)
                     if settings.jit_compile else self._forward_backward)
    self._default_eval_step = model_step_fn(model, training=False)
    self._restored = False
    self._accumulation_logged = False
    self._train_loop = None
    self._input_guard: worker_data.InputErrorGuard | None = None
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
      loss = outputs["total_loss"]
      if self._loss_weight != 1.0:
        loss = loss * self._loss_weight
      loss = loss / self._num_replicas
      if self._loss_scaling:
        loss = self.optimizer.get_scaled_loss(loss)
    grads = tape.gradient(loss, self.model.trainable_variables)
    if self._loss_scaling:
      grads = self.optimizer.get_unscaled_gradients(grads)
    return grads, outputs

  def _update_gradients(self, features: Features, index: tf.Tensor):
    """Gradients and scalar outputs of update `index`: k = 1 runs the replica's batch as is;
    k > 1 sums the float32 gradients of its k micro-batches in a tf.while_loop."""
    k = self._micro_batches
    if k == 1:
      grads, outputs = self._grad_fn(features, self._step_seed(index))
      return accumulation.float32_grads(grads), outputs
    totals = None if self.batch_totals_fn is None else dict(self.batch_totals_fn(features))
    split = accumulation.split_batch(features, k)
    first = tf.cast(index, tf.int64) * k

    def run(j):
      micro = accumulation.micro_batch(split, j)
      if totals is not None:
        micro[accumulation.BATCH_TOTALS] = totals
      grads, outputs = self._grad_fn(micro, self._step_seed(first + j))
      return accumulation.float32_grads(grads), outputs

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
    if self._loss_weight == 1.0:  # the update's loss is the sum of the micro-batch losses
      outputs["total_loss"] = sums["total_loss"]
    return grads, outputs

  def _replica_train_step(self, features: Features, index: tf.Tensor) -> dict[str, tf.Tensor]:
    grads, outputs = self._update_gradients(features, index)
    self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))
    return outputs

  # ----- the multi-step tf.function ---------------------------------------------------------

  def _make_loop(self, replica_fn: Callable, train: bool) -> Callable:
    """tf.function(iterator, num_steps) -> (metric sums, steps run, loss finite, data ran out).

    Runs up to num_steps steps; stops early after a non-finite total_loss (train) or when the
    iterator is exhausted. The step exists once in the graph, inside the loop: its outputs'
    structure comes from a trace of it that never runs (a peeled first step doubled the graph,
    its compile time and about 0.5 GiB of resident memory at ELECTRA-Small shapes).
    """
    strategy = self.strategy

    def one_step(features, index):
      per_replica = strategy.run(replica_fn, args=(features, index))
      out = {k: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None)
             for k, v in per_replica.items()}
      if train:
        self.global_step.assign_add(1)
      return out

    def zero_sums(iterator) -> dict[str, tf.Tensor]:
      """Zeros shaped like one step's outputs (traces the step; creates optimizer slots)."""
      traced = tf.function(one_step).get_concrete_function(
          iterator.element_spec, tf.TensorSpec([], tf.int64))
      return {k: tf.zeros(v.shape, v.dtype) for k, v in traced.structured_outputs.items()}

    def index_of(done):
      return tf.identity(self.global_step) if train else tf.cast(done, tf.int64)

    @tf.function
    def loop(iterator, num_steps):
      sums = zero_sums(iterator)
      done = tf.constant(0)
      finite = tf.constant(True)
      exhausted = tf.constant(False)
      stopped = tf.constant(0)
      for _ in tf.range(num_steps):
        if not finite:
          break
        optional = iterator.get_next_as_optional()
        stopped = self._stop_signal(train, optional.has_value())
        if stopped > 0:
          break
        if not optional.has_value():
          exhausted = tf.constant(True)
          break
        out = one_step(optional.get_value(), index_of(done))
        sums = {k: sums[k] + out[k] for k in sums}
        done += 1
        if train:
          finite = tf.math.is_finite(out["total_loss"])
      return sums, done, finite, exhausted, stopped

    return loop

  def _stop_signal(self, train: bool, after: tf.Tensor) -> tf.Tensor:
    """The request to stop before the next step (0: none), agreed by all workers: a signal
    number, or worker_data.DATA_ERROR + the replica whose input failed. Read once `after` is
    computed (the batch fetch, where a worker's data error raises the request); called inside
    the loop's tf.function."""
    if not train:
      return tf.constant(0)
    with tf.control_dependencies([after]):
      if not self._collective_stop:
        return self._stop.requested.read_value()

      def mine():
        code = self._stop.requested.read_value()
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        code += tf.where(code >= worker_data.DATA_ERROR, tf.cast(replica, tf.int32), 0)
        return tf.reshape(code, [1])

      per_replica = self.strategy.run(mine)
      return tf.reduce_max(self.strategy.gather(per_replica, axis=0))  # ReduceOp has no MAX

  def _run_loop(self, loop: Callable, iterator, num_steps: int):
    """(metric sums, steps run, loss finite, data ran out, stop signal or 0)."""
    sums, done, finite, exhausted, stopped = loop(iterator, tf.constant(num_steps))
    if int(done) == 0:  # stopped or data ended exactly at a loop boundary: no sums to report
      return {}, 0, True, bool(exhausted), int(stopped)
    return ({k: float(v) for k, v in sums.items()}, int(done), bool(finite), bool(exhausted),
            int(stopped))

  # ----- public API ---------------------------------------------------------------------------

  def restore_or_initialize(self) -> int:
    """Restores the latest checkpoint in model_dir, else runs init_fn; returns the global step.

    An unreadable latest checkpoint is skipped with a warning for the newest older one that
    reads. init_fn may return a step (e.g. that of the checkpoint it loaded): it becomes the
    global step, so training continues the schedule from there.
    """
    # skips unreadable ones and ones holding NaN or Inf, with a warning
    path, status = self._keeper.restore(
        self.log_fn, lambda: checkpointing.non_finite_variable(self._saved_variables))
    if path is not None:
      try:
        status.assert_existing_objects_matched()
      except AssertionError as e:
        raise ValueError(f"checkpoint {path} does not match this model/optimizer: "
                         f"{first_line(e)}") from None
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

  def train(self, dataset_fn: DatasetFn, metrics: Sequence[tf_keras.metrics.Metric] = (),
            input_state: InputState | None = None) -> dict[str, float]:
    """Trains up to settings.num_train_steps; returns the last logged values.

    `metrics`: streaming Keras metrics that step_fn updates (create them under
    strategy.scope()); each log line reports their `result()` over its interval, then resets
    them (e.g. accuracy or AUC over all examples of the interval, not a mean of batch values).

    dataset_fn(input_context) must return the per-replica-batched dataset of one input
    pipeline (`input_context.get_per_replica_batch_size(global_batch)`). It is called after the
    restore, so it may read `trainer.global_step` to continue a deterministic data stream; by
    default a resumed run restarts its input pipeline, as the official TPUEstimator does.
    `input_state` (see input_state.py), when it saves: the loop iterates its plain iterator
    instead, and its state is saved beside each checkpoint.
    Raises NonFiniteLossError (without saving) when total_loss becomes NaN or Inf.
    """
    s = self.settings
    step = self._current_step()
    if step >= s.num_train_steps:
      self.log_fn(f"Already at step {step} >= num_train_steps {s.num_train_steps}; not training")
      return {}
    if self._train_loop is None:
      self._train_loop = self._make_loop(self._replica_train_step, train=True)
    self._keeper.input = input_state
    if self._collective_stop:  # a data error on one worker must stop all of them
      guard = worker_data.InputErrorGuard(self._stop)
      self._input_guard, inner_fn = guard, dataset_fn
      dataset_fn = lambda input_context: guard.guard(inner_fn(input_context))  # noqa: E731
    iterator = (input_state.open() if input_state is not None and input_state.saved
                else iter(self.strategy.distribute_datasets_from_function(dataset_fn)))
    writer = (tf.summary.create_file_writer(s.model_dir) if self.is_chief
              else tf.summary.create_noop_writer())
    progress = monitoring.Progress(s.num_train_steps, step, s.train_batch_size,
                                   self._num_replicas, s.flops_per_step, s.peak_flops, writer,
                                   self.log_fn)
    logged: dict[str, float] = {}
    for metric in metrics:
      metric.reset_state()
    if self._micro_batches > 1 and not self._accumulation_logged:
      self._accumulation_logged = True
      micro = s.train_batch_size // (self._num_replicas * self._micro_batches)
      mib = accumulation.accumulator_bytes(self.model.trainable_variables) / 2**20
      self.log_fn(f"Gradient accumulation: {self._micro_batches} micro-batches of {micro} "
                  f"examples per replica per update (global batch {s.train_batch_size}); "
                  f"float32 gradient accumulators: {mib:.3g} MiB per replica")
    try:
      with self._stop.watching(), lost_worker.reported(self._collective_stop, self._keeper.latest,
                                                       self.global_step):
        logged = self._train_loops(iterator, step, progress, metrics, writer)
    finally:
      writer.close()
    return logged

  def _train_loops(self, iterator, step: int, progress: monitoring.Progress,
                   metrics: Sequence[tf_keras.metrics.Metric],
                   writer: tf.summary.SummaryWriter) -> dict[str, float]:
    """Calls the multi-step loop until num_train_steps, a stop signal or the data's end;
    after each log line, the interval hooks run with ``writer`` as the default writer."""
    s, logged = self.settings, {}
    while step < s.num_train_steps:
      target = min(s.num_train_steps,
                   (step // s.iterations_per_loop + 1) * s.iterations_per_loop,
                   (step // s.save_checkpoints_steps + 1) * s.save_checkpoints_steps)
      try:
        sums, done, finite, exhausted, stopped = self._run_loop(self._train_loop, iterator,
                                                                target - step)
      except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as e:
        raise self._data_error(e) from None
      step = int(self.global_step.numpy())
      if not finite:
        raise NonFiniteLossError(
            f"total_loss became NaN or Inf at step {step}; stopped without saving, the latest "
            f"checkpoint is {self._keeper.latest() or 'none'}")
      if done:
        progress.add(sums if s.log_total_loss else
                     {k: v for k, v in sums.items() if k != "total_loss"}, done)
      if exhausted:
        self.log_fn(f"Training data ran out at step {step} before num_train_steps "
                    f"{s.num_train_steps}; saving and stopping")
      end = exhausted or stopped or step >= s.num_train_steps
      if done and (end or step % s.iterations_per_loop == 0):
        logged = progress.log(step, monitoring.learning_rate_of(self.optimizer),
                              {m.name: float(m.result()) for m in metrics})
        self._run_interval_hooks(step, logged, writer)
        for metric in metrics:
          metric.reset_state()
      if stopped:  # the stop discarded one fetched batch: a saved input state would skip it
        self._keeper.input = None
      if end or step % s.save_checkpoints_steps == 0:
        self._save(step)
      if stopped and self._collective_stop:
        self._barrier()  # every worker's part of the save is written before any of them exits
      if worker_data.is_data_error(stopped):
        raise self._worker_data_error(step, stopped)
      if stopped:
        raise self._at_once(interrupt.Interrupted(
            f"interrupted at step {step}: saved "
            f"{os.path.join(s.model_dir, f'ckpt-{step}')}; rerun to resume", stopped))
      if exhausted:
        break
    return logged

  def _run_interval_hooks(self, step: int, logged: dict[str, float],
                          writer: tf.summary.SummaryWriter) -> None:
    if self.interval_hooks:
      with writer.as_default():
        for hook in self.interval_hooks:
          hook(step, logged)
      writer.flush()

  def _save(self, step: int) -> None:
    """Saves the checkpoint of `step` unless it exists; never one holding NaN or Inf."""
    latest = self._keeper.latest()
    if latest is not None and checkpointing.step_of(latest) == step:
      return  # e.g. a stop request right after a periodic save
    bad = checkpointing.non_finite_variable(self._saved_variables)
    if bad is not None:
      raise NonFiniteLossError(
          f"{bad} became NaN or Inf at step {step}; stopped without saving, the latest "
          f"checkpoint is {latest or 'none'}")
    path = self._keeper.save(step)
    if self.is_chief:
      self.log_fn(f"Saved {path}")

  def _data_error(self, error: tf.errors.OpError) -> InputDataError:
    """Saves the steps completed before the input pipeline failed; the error to raise.

    The failing batch was never applied (the loop fetches a batch before running its step),
    so the variables and global_step are those of the last completed step.
    """
    step = int(self.global_step.numpy())
    self._keeper.input = None  # the input iterator is past the failing batch: not saved
    latest = self._keeper.latest()
    if step > 0 and (latest is None or checkpointing.step_of(latest) < step):
      self._save(step)
      latest = self._keeper.latest()
    return InputDataError(f"{data_error_line(error)} (at step {step}; latest checkpoint: "
                          f"{latest or 'none'})")

  def _barrier(self) -> None:
    """Returns once every worker got here (an all-reduce of one number)."""
    ones = self.strategy.run(lambda: tf.constant(1))
    self.strategy.reduce(tf.distribute.ReduceOp.SUM, ones, axis=None).numpy()

  def _at_once(self, error: Exception) -> Exception:
    """`error`, marked to end the process right after its line when several workers run.

    Their input pipelines (worker_data.py) and TensorFlow's cluster services can block
    interpreter teardown for minutes; every worker has saved and passed the barrier by now.
    """
    error.exit_at_once = self._collective_stop
    return error

  def _worker_data_error(self, step: int, stopped: int) -> InputDataError:
    """The error every worker stops with after one worker's input failed (all saved `step`)."""
    saved = os.path.join(self.settings.model_dir, f"ckpt-{step}")  # all saved it together
    message = self._input_guard.message if self._input_guard is not None else None
    if message is not None:
      return self._at_once(InputDataError(
          f"{message} (at step {step}; latest checkpoint: {saved})"))
    worker = worker_data.replica_of(stopped) // len(self.strategy.extended.worker_devices)
    return self._at_once(InputDataError(
        f"stopped at step {step} on a data error on worker {worker} (its output names the "
        f"shard); latest checkpoint: {saved}"))

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
    try:
      sums, done, _, _, _ = self._run_loop(self._eval_loops[key], iterator, num_steps)
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as e:
      raise InputDataError(f"{data_error_line(e)} (during evaluation)") from None
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
        monitoring.write_results(results_file, results)
    return results
