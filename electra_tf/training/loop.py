"""The strategy-agnostic training loop: `Trainer`, a `tf.function` running many steps through
`strategy.run` per call.

    strategy = get_strategy(...)
    with strategy.scope():
      model = ...  # built (called once), so its variables exist
      optimizer = wrap_optimizer(create_optimizer(...), mixed_precision)
    trainer = Trainer(strategy, model, optimizer, TrainSettings(model_dir=..., ...),
                      init_fn=lambda: load_tf1_weights(model, init_checkpoint))  # -> step or None
    trainer.train(dataset_fn)            # resumes from model_dir if it holds a checkpoint
    trainer.evaluate(eval_dataset_fn, num_eval_steps, results_file=...)

The step function is `step_fn(features, seed) -> {"total_loss": scalar, other metrics...}`; the
default one calls `model(features, training=...)` and ignores the seed. Where each part lives:
  replica_step.py   one replica's update: seeds, forward/backward, loss scaling, apply
  accumulation.py   how k micro-batches make one update (their gradients summed)
  step_loop.py      the compiled multi-step loop and the stop request read before each step
  interrupt.py      Ctrl-C / SIGTERM: from the signal to the stop request
  stops.py          saves, and the end of a run on a stop, a data error or a non-finite loss
  checkpointing.py  saves and the resume (checkpoint_files.py: which files count,
                    checkpoint_restore.py: which checkpoint is usable)
  evaluation.py     evaluation over a number of batches
  settings.py       TrainSettings, checked when made
This module drives them: `Trainer.train` calls the loop once per log interval
(`_train_loops`), logs, saves and ends the run as the loop's result says.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import tensorflow as tf
import tf_keras

from electra_tf import folder_lock
from electra_tf.console import error_line, log
from electra_tf.training import (
  accumulation,
  checkpoint_restore,
  checkpointing,
  evaluation,
  interrupt,
  lost_worker,
  monitoring,
  runtime,
  step_loop,
  stops,
  worker_data,
)
from electra_tf.training.input_state import DatasetFn, InputState
from electra_tf.training.replica_step import (  # noqa: F401 -- re-exported types
  BatchTotalsFn,
  Features,
  ReplicaStep,
  StepFn,
  scalars,
  step_seed,
)
from electra_tf.training.settings import TrainSettings

# hook(step, values logged for the interval ending at step) -> a short text for the interval's
# log line, or None; run with the run's summary writer as the default writer (tf.summary calls
# land in its TensorBoard events), before the line is printed
IntervalHook = Callable[[int, Mapping[str, float]], str | None]


def model_step_fn(model: tf_keras.Model, training: bool) -> StepFn:
  """The default step function: `model(features, training=training)`, seed unused."""
  return lambda features, seed: model(features, training=training)


def _check_built(strategy: tf.distribute.Strategy, model: tf_keras.Model,
                 optimizer: tf_keras.optimizers.Optimizer) -> None:
  """One-line errors for a model or optimizer not (built) under `strategy.scope()`."""
  if not model.trainable_variables:
    raise ValueError("the model has no trainable variables yet: build it (call it once on "
                     "example features) inside strategy.scope() before creating the Trainer")
  if not all(strategy.extended.variable_created_in_scope(v) for v in model.variables):
    raise ValueError("the model's variables were not created under this strategy's scope(); "
                     "build the model inside `with strategy.scope():`")
  if getattr(optimizer, "_distribution_strategy", strategy) is not strategy:
    raise ValueError("the optimizer was created outside this strategy's scope(); create it "
                     "inside `with strategy.scope():`")


def _optimizer_variables(optimizer) -> list[tf.Variable]:
  variables = optimizer.variables  # a method on legacy tf_keras optimizers (e.g. LAMB)
  return list(variables() if callable(variables) else variables)


def _build_optimizer(optimizer, variables: list[tf.Variable]) -> None:
  """Creates the slots of `variables` (legacy loss-scale wrappers have no build: the inner)."""
  build = getattr(optimizer, "build", None) or optimizer.inner_optimizer.build
  build(variables)


def every_worker(strategy: tf.distribute.Strategy, value: int) -> list[int]:
  """`value` as each worker of `strategy` gave it, in worker order (one all-gather through the
  strategy: a collective every worker must call; a single worker gets `[value]`)."""
  values = strategy.gather(strategy.run(lambda: tf.constant([value], tf.int64)), axis=0).numpy()
  lost_worker.wait_for_every_worker()  # every worker's gather has ended: any may now exit
  return values.tolist()[::len(strategy.extended.worker_devices)]  # one replica per worker


class Trainer:
  """Trains and evaluates a built model under `strategy`; see the module docstring.

  Checks model_dir (creatable, writable, room for two checkpoints) on construction, so bad
  settings fail before any step runs. Checkpoint: `tf.train.Checkpoint(model=, optimizer=,
  step=)` saved as `<model_dir>/ckpt-<step>` every `save_checkpoints_steps` and at the end.
  `interval_hooks` are called at each log line as `hook(step, logged values)`, their texts
  added to the line (see IntervalHook), e.g. pretraining.collapse.CollapseWatch.
  """

  def __init__(self, strategy: tf.distribute.Strategy, model: tf_keras.Model,
               optimizer: tf_keras.optimizers.Optimizer, settings: TrainSettings,
               step_fn: StepFn | None = None, init_fn: Callable[[], int | None] | None = None,
               log_fn: Callable[[str], None] = log, batch_totals_fn: BatchTotalsFn | None = None,
               interval_hooks: Sequence[IntervalHook] = ()):
    _check_built(strategy, model, optimizer)
    self.strategy, self.model, self.optimizer, self.settings = strategy, model, optimizer, settings
    self.step_fn = step_fn or model_step_fn(model, training=True)
    self.init_fn, self.log_fn, self.batch_totals_fn = init_fn, log_fn, batch_totals_fn
    self.interval_hooks = tuple(interval_hooks)
    micro_batches = accumulation.prepare(settings.gradient_accumulation_steps)
    self.is_chief, task_id = runtime.worker_role(strategy)
    self._num_replicas = strategy.num_replicas_in_sync
    self._replica_train_step = ReplicaStep(
        model, optimizer, self.step_fn, settings.seed, self._num_replicas, micro_batches,
        accumulation.micro_batch_weight(settings.micro_batch_losses, micro_batches),
        settings.jit_compile, batch_totals_fn)
    with strategy.scope():
      _build_optimizer(optimizer, model.trainable_variables)  # slots exist before restore
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
    self._saver = stops.StepSaver(self._keeper, self._saved_variables, strategy,
                                  self._collective_stop, log_fn)
    self._default_eval_step = model_step_fn(model, training=False)
    self._restored = self._accumulation_logged = False
    self._train_loop = None
    self._input_guard: worker_data.InputErrorGuard | None = None
    self._eval_loops: dict[int, Callable] = {}

  def _make_loop(self, replica_fn: Callable, train: bool) -> Callable:
    """The compiled multi-step loop of `replica_fn` (see step_loop.make_loop)."""
    if not train:
      return step_loop.make_loop(self.strategy, replica_fn)
    return step_loop.make_loop(
        self.strategy, replica_fn, self.global_step,
        lambda after: step_loop.agreed_stop(self.strategy, self._stop, self._collective_stop,
                                            after))

  # ----- public API ---------------------------------------------------------------------------

  def restore_or_initialize(self) -> int:
    """Restores the latest checkpoint in model_dir, else runs init_fn; returns the global step.

    A checkpoint that is damaged or holds NaN or Inf is moved aside with a warning for the
    newest older one that is usable (checkpoint_restore.restore_readable); a read error that is not
    damage is retried, then stops the run, moving nothing. Every worker must have restored the
    same step (`every_worker`), else all stop with one line. init_fn may return a
    step (e.g. that of the checkpoint it loaded): it becomes the global step, so training
    continues the schedule from there.
    """
    try:
      with lost_worker.reported(self._collective_stop, self._keeper.latest):  # a peer lost
        path, status = self._keeper.restore(
            self.log_fn, lambda: checkpoint_restore.non_finite_variable(self._saved_variables),
            functools.partial(every_worker, self.strategy))
    except Exception as e:
      e.exit_at_once = self._collective_stop  # the other workers stop too: no teardown wait
      raise
    if path is not None:
      try:
        status.assert_existing_objects_matched()
      except AssertionError as e:
        raise ValueError(f"checkpoint {path} does not match this model/optimizer: "
                         f"{error_line(e, name_type=False)}") from None
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
    self._check_lease()
    writer = (tf.summary.create_file_writer(s.model_dir) if self.is_chief
              else tf.summary.create_noop_writer())
    progress = monitoring.Progress(s.num_train_steps, step, s.train_batch_size,
                                   self._num_replicas, s.flops_per_step, s.peak_flops, writer,
                                   self.log_fn)
    logged: dict[str, float] = {}
    for metric in metrics:
      metric.reset_state()
    k = self._replica_train_step.micro_batches
    if k > 1 and not self._accumulation_logged:  # one line, once
      self._accumulation_logged = True
      self.log_fn(accumulation.plan_line(k, s.train_batch_size, self._num_replicas,
                                         self.model.trainable_variables))
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
    """Calls the multi-step loop until num_train_steps, a stop request or the data's end;
    logs each interval (then the interval hooks run with ``writer`` as the default writer),
    saves every save_checkpoints_steps and at the end, and raises the error a stop ends with
    (stops.StepSaver)."""
    s, logged = self.settings, {}
    while step < s.num_train_steps:
      target = min(s.num_train_steps,
                   (step // s.iterations_per_loop + 1) * s.iterations_per_loop,
                   (step // s.save_checkpoints_steps + 1) * s.save_checkpoints_steps)
      result = self._run_steps(iterator, target - step)
      step = int(self.global_step.numpy())
      if not result.finite:
        raise self._saver.non_finite_loss(step)
      if result.done:
        progress.add(result.sums if s.log_total_loss else
                     {k: v for k, v in result.sums.items() if k != "total_loss"}, result.done)
      if result.exhausted:
        self.log_fn(f"Training data ran out at step {step} before num_train_steps "
                    f"{s.num_train_steps}; saving and stopping")
      end = result.exhausted or result.stopped or step >= s.num_train_steps
      if result.done and (end or step % s.iterations_per_loop == 0):
        self._check_lease()
        logged = progress.log(
            step, monitoring.learning_rate_of(self.optimizer),
            {m.name: float(m.result()) for m in metrics},
            notes=functools.partial(self._run_interval_hooks, step, writer=writer))
        for metric in metrics:
          metric.reset_state()
      if result.stopped:  # the stop discarded one fetched batch: a saved input state would skip it
        self._keeper.input = None
      if end or step % s.save_checkpoints_steps == 0:
        self._saver.save(step)
      if result.stopped:  # Ctrl-C, SIGTERM or a data error, on this worker or another
        guard = self._input_guard
        raise self._saver.stopped(step, result.stopped, guard.message if guard else None)
      if result.exhausted:
        break
    return logged

  def _run_steps(self, iterator, num_steps: int) -> step_loop.LoopResult:
    """One call of the compiled training loop. The one place where the TensorFlow errors the
    call raises are caught: a data error of the input pipeline saves the completed steps and
    ends the run with one line."""
    try:
      return step_loop.run(self._train_loop, iterator, num_steps)
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as e:
      raise self._saver.data_error(e, int(self.global_step.numpy())) from None

  def _check_lease(self) -> None:
    """On the chief: stops with one line (LostLockError) once this run lost model_dir's lock."""
    if self.is_chief:
      folder_lock.check_held(self.settings.model_dir)

  def _run_interval_hooks(self, step: int, logged: dict[str, float], *,
                          writer: tf.summary.SummaryWriter) -> list[str]:
    """The interval hooks' texts for the log line of `step` (see IntervalHook)."""
    notes = []
    if self.interval_hooks:
      with writer.as_default():
        notes = [hook(step, logged) for hook in self.interval_hooks]
      writer.flush()
    return [note for note in notes if note]

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
      seed, replicas = self.settings.seed, self._num_replicas
      self._eval_loops[key] = self._make_loop(
          lambda features, index: scalars(step_fn(features, step_seed(seed, index, replicas))),
          train=False)
    for metric in metrics:
      metric.reset_state()
    iterator = iter(self.strategy.distribute_datasets_from_function(dataset_fn))
    results = evaluation.run(self._eval_loops[key], iterator, num_steps, metrics, step,
                             self.log_fn)
    if self.is_chief:
      evaluation.write(results, self.settings.model_dir, results_file)
    return results
