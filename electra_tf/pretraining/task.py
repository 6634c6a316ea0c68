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
import os
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from electra_tf import checkpoints, tokenization, training
from electra_tf.config import PretrainingConfig
from electra_tf.console import log
from electra_tf.modeling import fusion
from electra_tf.optimization import create_optimizer
from electra_tf.pretraining import data, flops, masking, word_masking
from electra_tf.pretraining import metrics as metrics_lib
from electra_tf.pretraining import objective as objective_lib
from electra_tf.pretraining.builder import build_pretraining_model
from electra_tf.pretraining.collapse import CollapseWatch
from electra_tf.pretraining.pretraining_model import PretrainingModel
from electra_tf.reading import model_source
from electra_tf.training import hardware
from electra_tf.training.accumulation import BATCH_TOTALS

# Feature keys that, when present, replace the model's random draws (tests hold them fixed).
DRAW_KEYS = ("categorical_positions", "mask_uniform", "gumbel_uniform", "unit_uniform",
             "span_uniform")


def check_inputs(config: PretrainingConfig) -> None:
  """One-line errors for a wrong run setup, before anything is built."""
  if not (config.do_train or config.do_eval):
    raise ValueError("nothing to do: set do_train and/or do_eval")
  n_tokens = len(tokenization.vocab_lines(config.vocab_file))  # missing / non-UTF-8: one line
  if n_tokens != config.vocab_size:
    raise ValueError(f"vocab file {config.vocab_file} has {n_tokens} tokens but the vocab_size "
                     f"hparam is {config.vocab_size}; set \"vocab_size\": {n_tokens}")
  data.expand_file_pattern(config.pretrain_tfrecords)  # no files / unfinished shards


# ------------------------------------------------------------------------------ steps and data


def _draws(features: Mapping[str, Any]) -> dict[str, Any]:
  return {k: features[k] for k in DRAW_KEYS if k in features}


def _loss_denominators(objective: objective_lib.Objective, gen_weights: tf.Tensor,
                       input_mask: tf.Tensor) -> dict[str, tf.Tensor]:
  """The sums the official losses divide by: generator weights (masked slots, or the cloze
  positions of the two-tower generator) and real tokens (discriminator)."""
  out = {"gen": tf.reduce_sum(tf.cast(gen_weights, tf.float32))}
  if objective.has_discriminator:
    out["disc"] = tf.reduce_sum(tf.cast(input_mask, tf.float32))
  return out


def batch_totals_fn(objective: objective_lib.Objective, continuation: tf.Tensor | None = None
                    ) -> Callable:
  """totals(micro-batch features, its step seed [2]) -> its loss denominators; the Trainer
  adds them over the update's micro-batches (``training.replica_step``).

  Token masking weights do not depend on the random draws (only on ``input_mask`` and the
  tokens), so fixed draws give the weights the model's own masking gives. Whole-word / span
  masking (``continuation``: bool [V] ``##`` pieces) may leave a row short of its budget
  depending on the draws, so there the micro-batch is masked with the draws the model takes
  from the same seed (and injected ``DRAW_KEYS``): the exact count.
  """

  def totals(features, seed):
    inputs = masking.features_to_inputs(features)
    if objective.generator == objective_lib.TWO_TOWERS:
      gen_weights = masking.get_candidates_mask(inputs, objective.vocab)
    elif objective.masking == word_masking.TOKEN:
      shape = tf.stack([tf.shape(inputs.input_ids)[0], objective.max_predictions_per_seq])
      fixed = {"categorical_positions": tf.zeros(shape, tf.int32),
               "mask_uniform": tf.ones(shape, tf.float32)}
      gen_weights = objective_lib.mask(inputs, objective, fixed).masked_lm_weights
    else:  # as PretrainingModel.call masks
      mask_seed, _ = objective.step_seeds(seed)
      gen_weights = objective_lib.mask(inputs, objective, _draws(features), mask_seed,
                                       continuation).masked_lm_weights
    return _loss_denominators(objective, gen_weights, inputs.input_mask)

  return totals


def _micro_batch_loss(objective: objective_lib.Objective, out: Mapping[str, tf.Tensor],
                      totals: Mapping[str, tf.Tensor]) -> tf.Tensor:
  """A micro-batch's exact share of the update's loss.

  Each official loss term is ``sum(w * l) / (sum(w) + 1e-6)`` over its batch; rescaling a
  micro-batch's term by ``(its sum(w) + 1e-6) / (the update's sum(w) + 1e-6)`` turns it into
  ``sum over the micro-batch(w * l) / (update's sum(w) + 1e-6)``, so the k shares (and their
  gradients) add up to the one-batch loss (and gradient) exactly, whatever each micro-batch's
  number of masked slots or real tokens.
  """
  gen_weights = out["cloze_weights"] if "cloze_weights" in out else out["masked_lm_weights"]
  parts = _loss_denominators(objective, gen_weights, out["input_mask"])

  def share(name):
    return (parts[name] + 1e-6) / (totals[name] + 1e-6)

  loss = objective.gen_weight * (out["mlm_loss"] * share("gen"))
  if objective.has_discriminator:
    loss += objective.disc_weight * (out["disc_loss"] * share("disc"))
  return loss


def train_step_fn(model: PretrainingModel, metrics: Sequence[Any]) -> Callable:
  """step(features, seed) -> {total_loss, mlm_loss[, disc_loss]}; updates ``metrics``.

  With ``features[BATCH_TOTALS]`` (gradient accumulation), ``total_loss`` is the micro-batch's
  share of the update's loss (see ``_micro_batch_loss``); the Trainer adds the shares.
  """
  objective = model.objective

  def step(features, seed):
    out = model(features, training=True, seed=seed, draws=_draws(features))
    if metrics:
      stats = metrics_lib.metric_statistics(out, objective.disc_weight)
      for metric in metrics:
        metric.update_state(stats)
    total = out["total_loss"]
    if BATCH_TOTALS in features:
      total = _micro_batch_loss(objective, out, features[BATCH_TOTALS])
    losses = {"total_loss": total, "mlm_loss": out["mlm_loss"]}
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


def dataset_fn(config: PretrainingConfig, is_training: bool, seed: int | None,
               skip_steps: int = 0) -> Callable:
  """dataset_fn(input_context) for the Trainer: the official input pipeline per replica;
  ``skip_steps`` global batches of the stream are dropped first (a seeded resume)."""
  batch_size = config.train_batch_size if is_training else config.eval_batch_size

  def fn(ctx):
    return data.pretraining_dataset(config.pretrain_tfrecords, batch_size, config.max_seq_length,
                                    is_training=is_training, seed=seed, input_context=ctx,
                                    vocab_size=config.vocab_size, skip_steps=skip_steps)

  return fn


def stream_signature(config: PretrainingConfig) -> dict[str, Any] | None:
  """What a seeded training stream depends on, saved with its input state (None: unseeded,
  nothing to continue). A resume restores the state only when this is unchanged."""
  if config.seed is None:
    return None
  files = data.expand_file_pattern(config.pretrain_tfrecords)
  return {"files": [[os.path.basename(f), tf.io.gfile.stat(f).length] for f in files],
          "train_batch_size": config.train_batch_size, "max_seq_length": config.max_seq_length,
          "vocab_size": config.vocab_size, "seed": config.seed, "pipeline": data.PIPELINE_VERSION,
          "tensorflow": tf.__version__}


# ------------------------------------------------------------------------------ initialisation


def init_from_checkpoint(model: PretrainingModel, optimizer: Any, path: str,
                         log_fn: Callable[[str], None] = log) -> int:
  """Loads ``path`` (the ``init_checkpoint`` hparam); returns its global step.

  TF1 (official names): every model variable must be in it; ``<var>/adam_m`` / ``adam_v``
  are loaded when present (else the slots start at zero), and ``global_step`` (0 if absent)
  is returned and set as the optimizer's step, for the schedule. TF2 (ours): model, optimizer
  and step are restored. The Trainer makes the returned step its global step.
  """
  source = model_source.load_model(path)
  if source.kind == model_source.HUGGING_FACE:  # weights only: no optimizer state, step 0
    report = model_source.assign_tf1_names(source, model.tf1_variables())
    log_fn(f"Initialised from {path} (Hugging Face) at step 0: {report.summary()}")
    return 0
  prefix = source.prefix
  inner = getattr(optimizer, "inner_optimizer", optimizer)  # float16 loss scaling wrapper
  if source.kind == model_source.TF2:
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    status = checkpoints.read_retried(prefix, lambda: tf.train.Checkpoint(
        model=model, optimizer=optimizer, step=global_step).read(prefix))
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

  def read_slots_and_step() -> tuple[dict[str, Any], int]:
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    return ({k: reader.get_tensor(k) for k in inner.tf1_slot_variables() if k in shapes},
            int(reader.get_tensor("global_step")) if "global_step" in shapes else 0)
  values, step = checkpoints.read_retried(prefix, read_slots_and_step)
  slots = {k: v for k, v in inner.tf1_slot_variables().items() if k in values}
  for name, slot in slots.items():
    if list(values[name].shape) != slot.shape.as_list():
      raise ValueError(f"shape mismatch for {name}: checkpoint {list(values[name].shape)} vs "
                       f"{slot.shape.as_list()}")
    slot.assign(values[name])
  inner.iterations.assign(step)
  log_fn(f"Initialised from {prefix} (TF1) at step {step}: {report.summary()}; "
         f"{len(slots)} optimizer slots loaded")
  ignored = [k for k in report.unused_optimizer_state if k not in slots and k != "global_step"]
  if ignored:
    zero = len(inner.tf1_slot_variables()) - len(slots)
    log_fn(f"  ignored: {len(ignored)} optimizer-state tensors of another optimizer (e.g. "
           f"{ignored[0]}); {zero} of this run's {len(inner.tf1_slot_variables())} optimizer "
           "slots start at zero")
  if report.unused_other:
    log_fn(f"  not used: {', '.join(report.unused_other[:5])}"
           f"{' ...' if len(report.unused_other) > 5 else ''}")
  return step


def checkpoint_step(path: str) -> int | None:
  """The global step stored in a TF1 (``global_step``) or TF2 (``step``) checkpoint, 0 when it
  has none, None when ``path`` holds no checkpoint or a damaged one (a read error that
  persists raises CheckpointUnavailableError)."""
  def read_step() -> int:
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    for key in ("global_step", "step/.ATTRIBUTES/VARIABLE_VALUE"):
      if key in shapes:
        return int(reader.get_tensor(key))
    return 0

  try:
    prefix = checkpoints.resolve_checkpoint(path)
    return checkpoints.read_retried(prefix, read_step)
  except (FileNotFoundError, ValueError, tf.errors.InvalidArgumentError):
    return None


def consumed_steps(config: PretrainingConfig, start: int,
                   log_fn: Callable[[str], None] = log) -> int:
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

  config: PretrainingConfig
  model: PretrainingModel
  optimizer: Any
  trainer: training.Trainer
  train_metrics: list
  eval_metrics: list
  seed: int


def build_run(config: PretrainingConfig, strategy: tf.distribute.Strategy | None = None,
              jit_compile: bool = False, mixed_precision: str | None = None,
              peak_flops: float | None = None,
              log_fn: Callable[[str], None] = log,
              xla_elementwise: bool = False) -> PretrainingRun:
  """Checks the setup, then builds model, optimizer, metrics and Trainer under ``strategy``.

  ``mixed_precision``: None | "bfloat16" | "float16" (sets the global Keras policy).
  ``peak_flops``: of one device, for MFU (default: ``hardware.peak_flops``).
  ``xla_elementwise``: the layers XLA-compile their elementwise work (``modeling/fusion.py``).
  """
  check_inputs(config)
  strategy = strategy or training.get_strategy("one_device")
  config.check_batch_split(strategy.num_replicas_in_sync)
  k = config.gradient_accumulation_steps
  seed = config.seed
  if seed is None:
    seed = random.SystemRandom().randrange(2**31)
    log_fn(f"No seed hparam: using seed {seed} for initialisation, masking and sampling")
  training.set_mixed_precision_policy(mixed_precision)
  note = hardware.low_precision_note(mixed_precision)
  if note:
    log_fn(note)
  training.set_seed(seed)
  with strategy.scope(), fusion.xla_elementwise(xla_elementwise):
    model = build_pretraining_model(config)
    optimizer = training.wrap_optimizer(create_optimizer(
        config.learning_rate, config.num_train_steps, weight_decay_rate=config.weight_decay_rate,
        warmup_steps=config.num_warmup_steps, lr_decay_power=config.lr_decay_power,
        optimizer=config.optimizer), mixed_precision)
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
      peak_flops=peak_flops, gradient_accumulation_steps=k, micro_batch_losses="sum")

  def init_fn() -> int:
    return init_from_checkpoint(model, optimizer, config.init_checkpoint, log_fn)

  hooks = []
  if objective.has_discriminator and objective.disc_weight > 0:  # there is a recall to watch
    hooks.append(CollapseWatch(config.num_warmup_steps, log_fn))
  trainer = training.Trainer(strategy, model, optimizer, settings,
                             step_fn=train_step_fn(model, train_metrics),
                             init_fn=init_fn if config.init_checkpoint else None, log_fn=log_fn,
                             batch_totals_fn=batch_totals_fn(objective, model.continuation),
                             interval_hooks=hooks)
  return PretrainingRun(config, model, optimizer, trainer, train_metrics, eval_metrics, seed)
