"""Pre-training's orchestrator (official ``run_pretraining.train_or_eval``): check the setup,
show the settings, build the run, restore or initialise, then train and / or evaluate.

``run_pretraining.py`` parses the flags and calls ``train_or_eval``; tests and benchmarks call it
with a config of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from electra_tf import console
from electra_tf.console import log


def train_or_eval(config: Any, strategy: Any = None, jit_compile: bool = False,
                  mixed_precision: str | None = None, peak_flops: float | None = None,
                  log_fn: Callable[[str], None] = log, check_data: bool | None = None,
                  probe: Any = None,
                  xla_elementwise: bool = False) -> dict[str, dict[str, float]]:
  """Pre-trains and/or evaluates as ``config`` says (official ``train_or_eval``).

  Returns ``{"start": {"global_step": restored step}, "train": last logged values, "eval":
  eval results}`` (the parts that ran).
  ``mixed_precision``: None | "bfloat16" | "float16" | "auto" (``training.resolve_precision``).
  ``check_data``: read every shard before step 1 (True), never (False), or when the data is
  small (None, < 1 GiB). ``probe``: a ``probing.during_pretraining.RunProbe`` to attach.
  ``xla_elementwise``: XLA for each layer's elementwise work only (``modeling/fusion.py``).
  """
  import tensorflow as tf

  from electra_tf import training
  from electra_tf.pretraining import data_check, run_settings, task
  from electra_tf.reading import model_dir
  from electra_tf.training import input_state

  if (config.do_eval and not config.do_train and not config.init_checkpoint
      and training.latest_checkpoint(config.model_dir) is None):
    raise ValueError(f"nothing to evaluate: no checkpoint in {config.model_dir} and no "
                     "init_checkpoint hparam")
  if config.debug and config.do_train and tf.io.gfile.exists(config.model_dir):
    log_fn(f"debug: deleting {config.model_dir} (official behaviour)")
    tf.io.gfile.rmtree(config.model_dir)
  # A few lines of settings; every hparam goes to config.json once the setup checks passed.
  lines = run_settings.settings_lines(config, run_settings.full_config_path(config),
                                     training.latest_checkpoint(config.model_dir))
  requested = mixed_precision
  mixed_precision, precision_line = training.resolve_precision(requested)
  xla = ", XLA" if jit_compile else ", XLA on elementwise work" if xla_elementwise else ""
  if requested not in (None, "float32") or xla:  # float32 without XLA goes unsaid
    lines.insert(-3, f"  compute: {precision_line}{xla}")
  log_fn("\n".join(lines))
  if console.is_verbose():
    log_fn(config.to_json())
  run = task.build_run(config, strategy, jit_compile, mixed_precision, peak_flops, log_fn,
                       xla_elementwise)
  data_check.check_data(config.pretrain_tfrecords, config.max_seq_length, config.vocab_size,
                        check=check_data, log_fn=log_fn)  # after build_run's setup checks
  try:
    start = run.trainer.restore_or_initialize()
  except training.NonFiniteCheckpointError as e:
    raise e.with_advice("rerun with --restart to start afresh (it moves the model folder "
                        "aside)") from None
  results: dict[str, dict[str, float]] = {"start": {"global_step": start}}
  run_settings.write_full_config(config, run.trainer.is_chief)
  if probe is not None and config.do_train:
    probe.attach(run.trainer, run.model.discriminator, start)
  if config.do_train:
    model_dir.write_model_files(config.model_dir, config, config.vocab_file)
    log_fn("=" * 80 + f"\nRunning training from step {start}\n" + "=" * 80)
    # Seeded: a resumed stream continues the uninterrupted one (the consumed batches are
    # skipped); unseeded: the official non-deterministic order restarts.
    # A saved input state continues it without re-reading (training/input_state.py).
    skip = task.consumed_steps(config, start, log_fn)
    stream = input_state.plan(
        config.model_dir, start, skip, task.stream_signature(config), run.trainer.strategy,
        config.train_batch_size, lambda n: task.dataset_fn(config, True, config.seed, n), log_fn)
    results["train"] = run.trainer.train(
        task.dataset_fn(config, True, config.seed, stream.skip_steps),
        metrics=run.train_metrics, input_state=stream)
  if config.do_eval:
    log_fn("=" * 80 + "\nRunning evaluation\n" + "=" * 80)
    results["eval"] = run.trainer.evaluate(
        task.dataset_fn(config, False, config.seed), config.num_eval_steps,
        step_fn=task.eval_step_fn(run.model, run.eval_metrics), metrics=run.eval_metrics,
        results_file=config.results_txt)
  return results
