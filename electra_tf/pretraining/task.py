"""The pre-training task for the Trainer: setup checks, step functions, data, initialisation.

    run = build_run(config, strategy)          # model, optimizer, metrics, Trainer
    start = run.trainer.restore_or_initialize()
    run.trainer.train(dataset_fn(config, True, seed), metrics=run.train_metrics)
    run.trainer.evaluate(dataset_fn(config, False, seed), config.num_eval_steps,
                         step_fn=eval_step_fn(run.model, run.eval_metrics), ...)

Step functions take one replica's features (int32 [B, T] ``input_ids`` / ``input_mask`` /
``segment_ids``, optionally the injected draws of ``DRAW_KEYS``) and the int64 [2] seed the
Trainer passes per step and replica (masking and sampling are drawn from it).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from electra_tf import checkpoints, flops, training
from electra_tf.console import log
from electra_tf.optimization import create_optimizer
from electra_tf.pretraining import data
from electra_tf.pretraining import metrics as metrics_lib
from electra_tf.pretraining.builder import build_pretraining_model
from electra_tf.pretraining.model import PretrainingModel
from electra_tf.training import hardware

# Feature keys that, when present, replace the model's random draws (tests hold them fixed).
DRAW_KEYS = ("categorical_positions", "mask_uniform", "gumbel_uniform")


def check_inputs(config: Any) -> None:
  """One-line errors for a wrong run setup, before anything is built."""
  if not (config.do_train or config.do_eval):
    raise ValueError("nothing to do: set do_train and/or do_eval")
  if not tf.io.gfile.exists(config.vocab_file):
    raise FileNotFoundError(f"vocab file not found: {config.vocab_file}")
  with tf.io.gfile.GFile(config.vocab_file) as f:
    n_tokens = sum(1 for _ in f)
  if n_tokens != config.vocab_size:
    raise ValueError(f"vocab file {config.vocab_file} has {n_tokens} tokens but the vocab_size "
                     f"hparam is {config.vocab_size}; set \"vocab_size\": {n_tokens}")
  data.expand_file_pattern(config.pretrain_tfrecords)  # no files / unfinished shards


# ------------------------------------------------------------------------------ steps and data


def _draws(features: Mapping[str, Any]) -> dict[str, Any]:
  return {k: features[k] for k in DRAW_KEYS if k in features}


def train_step_fn(model: PretrainingModel, metrics: Sequence[Any]) -> Callable:
  """step(features, seed) -> {total_loss, mlm_loss[, disc_loss]}; updates ``metrics``."""
  objective = model.objective

  def step(features, seed):
    out = model(features, training=True, seed=seed, draws=_draws(features))
    if metrics:
      stats = metrics_lib.metric_statistics(out, objective.disc_weight)
      for metric in metrics:
        metric.update_state(stats)
    losses = {"total_loss": out["total_loss"], "mlm_loss": out["mlm_loss"]}
    if objective.has_discriminator:
      losses["disc_loss"] = out["disc_loss"]
    return losses

  # The model has no tensor-dependent Python control flow: skipping autograph's source
  # conversion of every layer saves seconds of tracing.
  return tf.autograph.experimental.do_not_convert(step)


def eval_step_fn(model: PretrainingModel, metrics: Sequence[Any]) -> Callable:
  """step(features, seed) -> {total_loss} (reported as ``loss``); streams the official metrics."""
  disc_weight = model.objective.disc_weight

  def step(features, seed):
    out = model(features, training=False, seed=seed, draws=_draws(features))
    stats = metrics_lib.metric_statistics(out, disc_weight)
    for metric in metrics:
      metric.update_state(stats)
    return {"total_loss": out["total_loss"]}

  return tf.autograph.experimental.do_not_convert(step)


def dataset_fn(config: Any, is_training: bool, seed: int | None,
               skip_steps: int = 0) -> Callable:
  """dataset_fn(input_context) for the Trainer: the official input pipeline per replica;
  ``skip_steps`` global batches of the stream are dropped first (a seeded resume)."""
  batch_size = config.train_batch_size if is_training else config.eval_batch_size

  def fn(ctx):
    return data.pretraining_dataset(config.pretrain_tfrecords, batch_size, config.max_seq_length,
                                    is_training=is_training, seed=seed, input_context=ctx,
                                    skip_steps=skip_steps)

  return fn


# ------------------------------------------------------------------------------ initialisation


def init_from_checkpoint(model: PretrainingModel, optimizer: Any, path: str,
                         log_fn: Callable[[str], None] = log) -> int:
  """Loads ``path`` (the ``init_checkpoint`` hparam); returns its global step.

  TF1 (official names): every model variable must be in it; ``<var>/adam_m`` / ``adam_v``
  are loaded when present (else the slots start at zero), and ``global_step`` (0 if absent)
  is returned and set as the optimizer's step, for the schedule. TF2 (ours): model, optimizer
  and step are restored. The Trainer makes the returned step its global step.
  """
  prefix = checkpoints.resolve_checkpoint(path)
  inner = getattr(optimizer, "inner_optimizer", optimizer)  # float16 loss scaling wrapper
  if not checkpoints.is_tf1_checkpoint(prefix):
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    status = tf.train.Checkpoint(model=model, optimizer=optimizer, step=global_step).read(prefix)
    try:
      status.assert_existing_objects_matched()
    except AssertionError as e:
      raise ValueError(f"init_checkpoint {prefix} does not match this model: "
                       f"{str(e).strip().splitlines()[0]}") from None
    status.expect_partial()
    step = int(global_step.numpy())
    inner.iterations.assign(step)
    log_fn(f"Initialised from {prefix} (TF2) at step {step}")
    return step
  report = checkpoints.load_tf1_checkpoint(model.tf1_variables(), prefix)
  reader = tf.train.load_checkpoint(prefix)
  shapes = reader.get_variable_to_shape_map()
  slots = {k: v for k, v in inner.tf1_slot_variables().items() if k in shapes}
  for name, slot in slots.items():
    if list(shapes[name]) != slot.shape.as_list():
      raise ValueError(f"shape mismatch for {name}: checkpoint {list(shapes[name])} vs "
                       f"{slot.shape.as_list()}")
    slot.assign(reader.get_tensor(name))
  step = int(reader.get_tensor("global_step")) if "global_step" in shapes else 0
  inner.iterations.assign(step)
  log_fn(f"Initialised from {prefix} (TF1) at step {step}: {report.summary()}; "
         f"{len(slots)} optimizer slots loaded")
  if report.unused_other:
    log_fn(f"  not used: {', '.join(report.unused_other[:5])}"
           f"{' ...' if len(report.unused_other) > 5 else ''}")
  return step


def checkpoint_step(path: str) -> int | None:
  """The global step stored in a TF1 (``global_step``) or TF2 (``step``) checkpoint, 0 when it
  has none, None when ``path`` cannot be read."""
  try:
    reader = tf.train.load_checkpoint(checkpoints.resolve_checkpoint(path))
  except (FileNotFoundError, ValueError, tf.errors.OpError):
    return None
  shapes = reader.get_variable_to_shape_map()
  for key in ("global_step", "step/.ATTRIBUTES/VARIABLE_VALUE"):
    if key in shapes:
      return int(reader.get_tensor(key))
  return 0


def consumed_steps(config: Any, start: int, log_fn: Callable[[str], None] = log) -> int:
  """Training batches a seeded run already took from its data stream when it (re)starts at
  global step ``start``: ``start`` minus the step it began at (that of ``init_checkpoint``)."""
  if config.seed is None:
    return 0  # the official non-deterministic order: nothing to continue
  begin = checkpoint_step(config.init_checkpoint) if config.init_checkpoint else 0
  if begin is None:
    log_fn(f"Cannot read the step of init_checkpoint {config.init_checkpoint}: the data stream "
           "restarts instead of continuing")
    return 0
  return max(start - begin, 0)


# ------------------------------------------------------------------------------ the run


@dataclasses.dataclass
class PretrainingRun:
  """Everything ``build_run`` creates: the model, its optimizer and the Trainer that owns the
  checkpoints of ``config.model_dir``, the streaming metrics, and the seed in use."""

  config: Any
  model: PretrainingModel
  optimizer: Any
  trainer: training.Trainer
  train_metrics: list
  eval_metrics: list
  seed: int


def build_run(config: Any, strategy: tf.distribute.Strategy | None = None,
              jit_compile: bool = False, mixed_precision: str | None = None,
              peak_flops: float | None = None,
              log_fn: Callable[[str], None] = log) -> PretrainingRun:
  """Checks the setup, then builds model, optimizer, metrics and Trainer under ``strategy``.

  ``mixed_precision``: None | "bfloat16" | "float16" (sets the global Keras policy).
  ``peak_flops``: of one device, for MFU (default: ``hardware.peak_flops``).
  """
  check_inputs(config)
  strategy = strategy or training.get_strategy("one_device")
  replicas = strategy.num_replicas_in_sync
  for name in ("train_batch_size", "eval_batch_size"):
    if getattr(config, name) % replicas:
      raise ValueError(f"{name} {getattr(config, name)} is not divisible by the {replicas} "
                       "replicas of the distribution strategy")
  seed = config.seed
  if seed is None:
    seed = random.SystemRandom().randrange(2**31)
    log_fn(f"No seed hparam: using seed {seed} for initialisation, masking and sampling")
  training.set_mixed_precision_policy(mixed_precision)
  training.set_seed(seed)
  with strategy.scope():
    model = build_pretraining_model(config)
    optimizer = training.wrap_optimizer(create_optimizer(
        config.learning_rate, config.num_train_steps, weight_decay_rate=config.weight_decay_rate,
        warmup_steps=config.num_warmup_steps, lr_decay_power=config.lr_decay_power),
        mixed_precision)
    objective = model.objective
    train_metrics = metrics_lib.official_metrics(metrics_lib.metric_names(
        objective.has_discriminator, objective.disc_weight, include_losses=False))
    eval_metrics = metrics_lib.official_metrics(metrics_lib.metric_names(
        objective.has_discriminator, objective.disc_weight))
  if peak_flops is None:
    peak_flops = hardware.peak_flops(mixed_precision)
  settings = training.TrainSettings(
      model_dir=config.model_dir, num_train_steps=config.num_train_steps,
      train_batch_size=config.train_batch_size, iterations_per_loop=config.iterations_per_loop,
      save_checkpoints_steps=config.save_checkpoints_steps,
      keep_checkpoint_max=config.keep_checkpoint_max or 0, seed=seed, jit_compile=jit_compile,
      flops_per_step=config.train_batch_size * flops.train_flops_per_example(
          model, config.max_seq_length),
      peak_flops=peak_flops)

  def init_fn() -> int:
    return init_from_checkpoint(model, optimizer, config.init_checkpoint, log_fn)

  trainer = training.Trainer(strategy, model, optimizer, settings,
                             step_fn=train_step_fn(model, train_metrics),
                             init_fn=init_fn if config.init_checkpoint else None, log_fn=log_fn)
  return PretrainingRun(config, model, optimizer, trainer, train_metrics, eval_metrics, seed)
