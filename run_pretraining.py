r"""Pre-trains ELECTRA, Electric or a masked LM (official ``run_pretraining.py`` in TF2).

  python run_pretraining.py --data_dir D --model_name M --hparams '{"model_size": "small"}'

(``--data-dir`` / ``--model-name`` also work.) Layout, as official:
  D/pretrain_tfrecords/pretrain_data.tfrecord*   examples (data_prep/build_pretraining_dataset.py)
  D/vocab.txt                                    WordPiece vocabulary (vocab_size lines)
  D/models/M/                                    checkpoints ckpt-<step>, TensorBoard events
  D/models/M/eval/                               eval TensorBoard events
  D/models/M/results/unsup_results.txt           eval metrics (``do_eval``)

Rerunning the same command resumes from the latest checkpoint in D/models/M. With no checkpoint
there, the ``init_checkpoint`` hparam (an official TF1 checkpoint, or one of ours) gives the
starting weights, Adam slots if it has them, and the global step (so, as the official README
says for the released models, raise ``num_train_steps`` past the checkpoint's step).
``do_train`` then ``do_eval`` (the official allows only one; both is train, then evaluate).

Randomness: the ``seed`` hparam seeds initialisation, dropout, the data order, and masking and
generator sampling. The last two are stateless, drawn from ``[seed, step * replicas + replica]``,
so they do not depend on where a run was resumed; dropout restarts its sequence in a resumed
process and the data order is reseeded with ``seed + step``. Without the hparam a seed is drawn
and logged, and the data order is the official non-deterministic one.

Each log line (every ``iterations_per_loop`` steps) writes TensorBoard scalars averaged over the
interval: ``total_loss``, ``mlm_loss`` (generator), ``disc_loss``, ``learning_rate``, the
official eval metrics streamed over the interval's examples (``masked_lm_accuracy``,
``sampled_masked_lm_accuracy``, ``disc_accuracy`` / ``precision`` / ``recall`` / ``auc``),
``examples_per_second`` and ``model_flops_utilization`` (official FLOP counting, see
``train_flops_per_example``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from absl import app, flags  # noqa: E402

from electra_tf.cli import data_dir_and_model_name  # noqa: E402

FLAGS = flags.FLAGS
STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")
PRECISIONS = ("none", "bfloat16", "float16")
# Feature keys that, when present, replace the model's random draws (tests hold them fixed).
DRAW_KEYS = ("categorical_positions", "mask_uniform", "gumbel_uniform")


def define_flags() -> None:
  """Command-line flags (defined on demand, so that importing this module defines none)."""
  flags.DEFINE_string("data_dir", None, "Folder with pretrain_tfrecords/, vocab.txt, models/.")
  flags.DEFINE_string("data-dir", None, "Official spelling of --data_dir.")
  flags.DEFINE_string("model_name", None, "Name of the model (folder under models/).")
  flags.DEFINE_string("model-name", None, "Official spelling of --model_name.")
  flags.DEFINE_string("hparams", "{}", "Pre-training hparams: a JSON dict or a .json file.")
  flags.DEFINE_enum("distribution_strategy", "one_device", STRATEGIES,
                    "tf.distribute strategy; the use_tpu hparam selects tpu unless this is set.")
  flags.DEFINE_integer("num_gpus", None, "GPUs to use (default: every visible GPU).")
  flags.DEFINE_string("tpu", None, "TPU name or address ('' = local; default: tpu_name hparam).")
  flags.DEFINE_bool("jit_compile", False, "XLA-compile the forward and backward pass.")
  flags.DEFINE_enum("mixed_precision", "none", PRECISIONS,
                    "Compute dtype; float16 adds dynamic loss scaling. Weights stay float32.")
  flags.DEFINE_float("peak_tflops", None, "Peak TFLOP/s of one device for MFU (default: looked "
                     "up for known GPUs, estimated for CPUs; see electra_tf/training/hardware.py).")


def _log(message: str = "") -> None:
  print(message, flush=True)


# --------------------------------------------------------------------------------------------
# Checks and FLOPs
# --------------------------------------------------------------------------------------------


def check_inputs(config: Any) -> None:
  """One-line errors for a wrong run setup, before anything is built."""
  import tensorflow as tf

  from electra_tf.pretraining import data

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


def train_flops_per_example(model: Any, seq_length: int) -> float:
  """Train FLOPs of one sequence for this model, counted as the official ``flops_computation``.

  Discriminator (binary head) + generator (MLM head over the ``max_predictions_per_seq``
  gathered positions; Electric: two towers and the cloze head over every position). Embedding
  lookups count as gathers (sparse), which is what this code runs: the official one-hot count
  would credit the step with vocabulary-sized matmuls it does not do.
  """
  from electra_tf import flops

  bert = model.bert_config
  vocab = bert.vocab_size
  total = 0.0
  if model.has_discriminator:
    total += flops.transformer_train_flops_per_example(
        bert.hidden_size, bert.num_hidden_layers, seq_length, vocab,
        model.discriminator.embedding_size, bert.intermediate_size, bert.num_attention_heads,
        sparse_embed_lookup=True, discriminator=True)
  gen = model.generator
  if gen is None:  # uniform generator
    return total
  g = gen.config
  if model.two_tower_generator:
    tower = (g.num_hidden_layers * flops.block_flops(g.hidden_size, seq_length,
                                                     g.intermediate_size, g.num_attention_heads)
             + flops.input_embedding_flops(g.hidden_size, seq_length, vocab, gen.embedding_size,
                                           sparse_embed_lookup=True))
    head = flops.mlm_output_flops(2 * g.hidden_size, seq_length, vocab, gen.embedding_size,
                                  output_frac=1.0)
    return total + 2.0 * (2 * tower + head)
  return total + flops.transformer_train_flops_per_example(
      g.hidden_size, g.num_hidden_layers, seq_length, vocab, gen.embedding_size,
      g.intermediate_size, g.num_attention_heads,
      output_frac=model.max_predictions_per_seq / seq_length, sparse_embed_lookup=True)


# --------------------------------------------------------------------------------------------
# Step functions and data
# --------------------------------------------------------------------------------------------


def _draws(features: Mapping[str, Any]) -> dict[str, Any]:
  return {k: features[k] for k in DRAW_KEYS if k in features}


def train_step_fn(model: Any, metrics: Sequence[Any]) -> Callable:
  """step(features, seed) -> {total_loss, mlm_loss[, disc_loss]}; updates ``metrics``.

  ``features``: int32 [B, T] ``input_ids`` / ``input_mask`` / ``segment_ids`` of one replica,
  optionally the injected draws of ``DRAW_KEYS``; ``seed``: int64 [2] per step and replica.
  """
  import tensorflow as tf

  from electra_tf.pretraining.objectives import metric_statistics

  def step(features, seed):
    out = model(features, training=True, seed=seed, draws=_draws(features))
    if metrics:
      stats = metric_statistics(out, model.disc_weight)
      for metric in metrics:
        metric.update_state(stats)
    losses = {"total_loss": out["total_loss"], "mlm_loss": out["mlm_loss"]}
    if model.has_discriminator:
      losses["disc_loss"] = out["disc_loss"]
    return losses

  # The model has no tensor-dependent Python control flow: skipping autograph's source
  # conversion of every layer saves seconds of tracing.
  return tf.autograph.experimental.do_not_convert(step)


def eval_step_fn(model: Any, metrics: Sequence[Any]) -> Callable:
  """step(features, seed) -> {total_loss} (reported as ``loss``); streams the official metrics."""
  import tensorflow as tf

  from electra_tf.pretraining.objectives import metric_statistics

  def step(features, seed):
    out = model(features, training=False, seed=seed, draws=_draws(features))
    stats = metric_statistics(out, model.disc_weight)
    for metric in metrics:
      metric.update_state(stats)
    return {"total_loss": out["total_loss"]}

  return tf.autograph.experimental.do_not_convert(step)


def dataset_fn(config: Any, is_training: bool, seed: int | None) -> Callable:
  """dataset_fn(input_context) for the Trainer: the official input pipeline per replica."""
  from electra_tf.pretraining import data

  batch_size = config.train_batch_size if is_training else config.eval_batch_size

  def fn(ctx):
    return data.pretraining_dataset(config.pretrain_tfrecords, batch_size, config.max_seq_length,
                                    is_training=is_training, seed=seed, input_context=ctx)

  return fn


def init_from_checkpoint(model: Any, optimizer: Any, global_step: Any, path: str,
                         log_fn: Callable[[str], None] = _log) -> int:
  """Starts from ``path`` (the ``init_checkpoint`` hparam); returns the global step set.

  TF1 (official names): every model variable must be in it; ``<var>/adam_m`` / ``adam_v``
  are loaded when present (else the slots start at zero), and ``global_step`` (0 if absent)
  becomes the step, for the schedule too. TF2 (ours): model, optimizer and step are restored.
  """
  import tensorflow as tf

  from electra_tf import checkpoints

  prefix = checkpoints.resolve_checkpoint(path)
  inner = getattr(optimizer, "inner_optimizer", optimizer)  # float16 loss scaling wrapper
  if not checkpoints.is_tf1_checkpoint(prefix):
    status = tf.train.Checkpoint(model=model, optimizer=optimizer, step=global_step).read(prefix)
    try:
      status.assert_existing_objects_matched()
    except AssertionError as e:
      raise ValueError(f"init_checkpoint {prefix} does not match this model: "
                       f"{str(e).strip().splitlines()[0]}") from None
    status.expect_partial()
    inner.iterations.assign(global_step)
    log_fn(f"Initialised from {prefix} (TF2) at step {int(global_step.numpy())}")
    return int(global_step.numpy())
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
  global_step.assign(step)
  inner.iterations.assign(step)
  log_fn(f"Initialised from {prefix} (TF1) at step {step}: {report.summary()}; "
         f"{len(slots)} optimizer slots loaded")
  if report.unused_other:
    log_fn(f"  not used: {', '.join(report.unused_other[:5])}"
           f"{' ...' if len(report.unused_other) > 5 else ''}")
  return step


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class PretrainingRun:
  """Everything ``build_run`` creates: the model, its optimizer and the Trainer that owns the
  checkpoints of ``config.model_dir``, the streaming metrics, and the seed in use."""

  config: Any
  model: Any
  optimizer: Any
  trainer: Any
  train_metrics: list
  eval_metrics: list
  seed: int


def build_run(config: Any, strategy: Any = None, jit_compile: bool = False,
              mixed_precision: str | None = None, peak_flops: float | None = None,
              log_fn: Callable[[str], None] = _log) -> PretrainingRun:
  """Checks the setup, then builds model, optimizer, metrics and Trainer under ``strategy``.

  ``mixed_precision``: None | "bfloat16" | "float16" (sets the global Keras policy).
  ``peak_flops``: of one device, for MFU (default: ``hardware.peak_flops``).
  """
  from electra_tf import training
  from electra_tf.optimization import create_optimizer
  from electra_tf.pretraining import metrics as metrics_lib
  from electra_tf.pretraining.objectives import PretrainingModel
  from electra_tf.training import hardware

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
    model = PretrainingModel(config)
    optimizer = training.wrap_optimizer(create_optimizer(
        config.learning_rate, config.num_train_steps, weight_decay_rate=config.weight_decay_rate,
        warmup_steps=config.num_warmup_steps, lr_decay_power=config.lr_decay_power),
        mixed_precision)
    train_metrics = metrics_lib.official_metrics(metrics_lib.metric_names(
        model.has_discriminator, model.disc_weight, include_losses=False))
    eval_metrics = metrics_lib.official_metrics(metrics_lib.metric_names(
        model.has_discriminator, model.disc_weight))
  if peak_flops is None:
    peak_flops = hardware.peak_flops(mixed_precision)
  settings = training.TrainSettings(
      model_dir=config.model_dir, num_train_steps=config.num_train_steps,
      train_batch_size=config.train_batch_size, iterations_per_loop=config.iterations_per_loop,
      save_checkpoints_steps=config.save_checkpoints_steps,
      keep_checkpoint_max=config.keep_checkpoint_max or 0, seed=seed, jit_compile=jit_compile,
      flops_per_step=config.train_batch_size * train_flops_per_example(
          model, config.max_seq_length),
      peak_flops=peak_flops)
  holder: list[Any] = []  # the Trainer, for init_fn (it owns the global step)

  def init_fn() -> None:
    init_from_checkpoint(model, optimizer, holder[0].global_step, config.init_checkpoint, log_fn)

  trainer = training.Trainer(strategy, model, optimizer, settings,
                             step_fn=train_step_fn(model, train_metrics),
                             init_fn=init_fn if config.init_checkpoint else None, log_fn=log_fn)
  holder.append(trainer)
  return PretrainingRun(config, model, optimizer, trainer, train_metrics, eval_metrics, seed)


def train_or_eval(config: Any, strategy: Any = None, jit_compile: bool = False,
                  mixed_precision: str | None = None, peak_flops: float | None = None,
                  log_fn: Callable[[str], None] = _log) -> dict[str, dict[str, float]]:
  """Pre-trains and/or evaluates as ``config`` says (official ``train_or_eval``).

  Returns ``{"train": last logged values, "eval": eval results}`` (the parts that ran).
  """
  import tensorflow as tf

  from electra_tf import training

  if (config.do_eval and not config.do_train and not config.init_checkpoint
      and training.latest_checkpoint(config.model_dir) is None):
    raise ValueError(f"nothing to evaluate: no checkpoint in {config.model_dir} and no "
                     "init_checkpoint hparam")
  if config.debug and config.do_train and tf.io.gfile.exists(config.model_dir):
    log_fn(f"debug: deleting {config.model_dir} (official behaviour)")
    tf.io.gfile.rmtree(config.model_dir)
  log_fn("=" * 80 + "\nConfig:\n" + config.to_json() + "\n" + "=" * 80)
  run = build_run(config, strategy, jit_compile, mixed_precision, peak_flops, log_fn)
  results: dict[str, dict[str, float]] = {}
  start = run.trainer.restore_or_initialize()
  if config.do_train:
    log_fn("=" * 80 + f"\nRunning training from step {start}\n" + "=" * 80)
    # A resumed run reseeds the data order instead of replaying the first batches again.
    data_seed = None if config.seed is None else config.seed + start
    results["train"] = run.trainer.train(dataset_fn(config, True, data_seed),
                                         metrics=run.train_metrics)
  if config.do_eval:
    log_fn("=" * 80 + "\nRunning evaluation\n" + "=" * 80)
    results["eval"] = run.trainer.evaluate(
        dataset_fn(config, False, config.seed), config.num_eval_steps,
        step_fn=eval_step_fn(run.model, run.eval_metrics), metrics=run.eval_metrics,
        results_file=config.results_txt)
  return results


def main(argv: Sequence[str]) -> None:
  data_dir, model_name = data_dir_and_model_name(list(argv))
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  from electra_tf.config import PretrainingConfig, load_hparams

  try:  # hparams first: their errors need no TensorFlow start-up
    config = PretrainingConfig(model_name, data_dir, **load_hparams(FLAGS.hparams))
  except ValueError as e:
    sys.exit(f"run_pretraining.py: error: {e}")
  from electra_tf import training

  try:
    name = FLAGS.distribution_strategy
    if config.use_tpu and not FLAGS["distribution_strategy"].present:
      name = "tpu"
    tpu = FLAGS.tpu if FLAGS.tpu is not None else (config.tpu_name or "")
    strategy = training.get_strategy(name, FLAGS.num_gpus, tpu=tpu if name == "tpu" else None)
    precision = None if FLAGS.mixed_precision == "none" else FLAGS.mixed_precision
    peak = FLAGS.peak_tflops * 1e12 if FLAGS.peak_tflops else None
    results = train_or_eval(config, strategy, FLAGS.jit_compile, precision, peak)
  except (ValueError, FileNotFoundError, training.ModelDirError,
          training.CheckpointSaveError, training.NonFiniteLossError) as e:
    sys.exit(f"run_pretraining.py: error: {e}")
  if "eval" in results:
    _log(json.dumps(results["eval"], sort_keys=True))


if __name__ == "__main__":
  define_flags()
  app.run(main)
