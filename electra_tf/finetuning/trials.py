"""The fine-tuning run (official ``run_finetuning.run_finetuning``): ``num_trials`` times train,
evaluate on dev, write results and test outputs; the median over trials at the end."""

from __future__ import annotations

import os
import shutil

import tensorflow as tf
import tf_keras

from electra_tf import checkpoints, training
from electra_tf.config import FinetuningConfig
from electra_tf.console import log
from electra_tf.finetuning import outputs, registry, run_settings
from electra_tf.finetuning.preprocessing import Preprocessor, make_examples_fn
from electra_tf.finetuning.runner import ModelRunner
from electra_tf.reading import model_source
from electra_tf.reading.model_dir import write_model_files

INTERRUPTED = "INTERRUPTED"  # in a trial's model_dir: resume it instead of starting afresh


def heading(message: str) -> None:
  log("=" * 80 + "\n" + message + "\n" + "=" * 80)


def check_init_checkpoint(config: FinetuningConfig) -> None:
  """Fails before any work when ``init_checkpoint`` names nothing usable."""
  if not config.init_checkpoint or model_source.is_hf(config.init_checkpoint):
    return
  try:
    checkpoints.resolve_checkpoint(config.init_checkpoint)
  except FileNotFoundError as e:
    raise FileNotFoundError(f"init_checkpoint: {e}; set \"init_checkpoint\": null in --hparams "
                            "to fine-tune from random initialisation") from None


def trial_seed(seed: int | None, trial: int) -> int | None:
  """Trial ``trial`` (1-based) uses ``seed + trial - 1``; None stays None."""
  return None if seed is None else seed + trial - 1


def prepare_trial_dir(config: FinetuningConfig, trial: int) -> tuple[str, str]:
  """(the model_dir of trial ``trial``, its INTERRUPTED marker). Training resumes a trial a
  signal stopped, else starts it afresh, with the model's shape and vocabulary written."""
  model_dir = f"{config.model_dir}_{trial}"
  interrupted = os.path.join(model_dir, INTERRUPTED)
  if config.do_train and tf.io.gfile.exists(interrupted):  # stopped by a signal: resume it
    tf.io.gfile.remove(interrupted)
    log(f"Resuming trial {trial}, interrupted earlier, from {model_dir}")
  elif config.do_train and tf.io.gfile.exists(model_dir):
    tf.io.gfile.rmtree(model_dir)  # official rmkdir: every trial starts afresh
  if config.do_train:  # the model's shape and vocabulary beside its checkpoints
    for folder in (model_dir, os.path.join(model_dir, "tf1")):
      write_model_files(folder, config, config.vocab_file)
  return model_dir, interrupted


def run_finetuning(config: FinetuningConfig, strategy: tf.distribute.Strategy | None = None,
                   use_tfds: bool = False, tfds_data_dir: str | None = None
                   ) -> list[dict[str, dict[str, float]]]:
  """Trains and evaluates ``num_trials`` models of a ``FinetuningConfig``; returns each trial's
  dev results ({task: {metric: value}}). ``strategy`` defaults to one device; ``use_tfds``
  reads GLUE tasks from prepared TensorFlow Datasets in ``tfds_data_dir``."""
  tasks = registry.build_tasks(config, use_tfds)  # bad names / folders fail before any output
  check_init_checkpoint(config)
  run_settings.check_settings(config)  # before any cache is built
  log("\n".join(run_settings.settings_lines(config, tasks,
                                            run_settings.write_full_config(config))))
  strategy = strategy or training.get_strategy("one_device")
  preprocessor = Preprocessor(
      config, tasks, make_examples_fn(use_tfds, tfds_data_dir), seed=config.seed,
      source={"use_tfds": use_tfds, "tfds_data_dir": tfds_data_dir if use_tfds else None})
  if config.do_train and config.do_eval:  # bad dev rows (e.g. an unknown label) fail now,
    for task in tasks:                     # not after training; the features are cached
      for split in task.get_dev_splits():
        preprocessor.prepare([task], split, is_training=False)
  results: list[dict[str, dict[str, float]]] = []
  trial = 1
  while config.num_trials < 0 or trial <= config.num_trials:
    title = f"model={config.model_name}, trial {trial}/{config.num_trials}"
    model_dir, interrupted = prepare_trial_dir(config, trial)
    runner = ModelRunner(config, tasks, preprocessor, strategy, model_dir,
                         trial_seed(config.seed, trial))
    if config.do_train:
      heading(f"Start training: {title}")
      try:
        runner.train()
      except training.Interrupted:  # saved; the rerun continues this trial, not a fresh one
        with tf.io.gfile.GFile(interrupted, "w") as f:
          f.write("stopped by a signal; the next run resumes this trial\n")
        raise
    elif config.do_eval:
      runner.restore()
    if config.do_eval:
      heading(f"Run dev set evaluation: {title}")
      results.append(runner.evaluate())
      json_path = outputs.write_results(results, config.results_txt, config.results_pkl)
      log(f"Wrote {config.results_txt}, {config.results_pkl}, {json_path}")
      if config.write_test_outputs and trial <= config.n_writes_test:
        heading(f"Running on the test set and writing the predictions: {title}")
        runner.write_test_outputs(trial, use_tfds)
    if trial != config.num_trials and not config.keep_all_models:
      shutil.rmtree(model_dir, ignore_errors=True)
    del runner
    tf_keras.backend.clear_session()
    trial += 1
  if len(results) > 1:
    for task, metrics in outputs.median_results(results).items():
      log(f"{task} median over {len(results)} trials: "
          + " - ".join(f"{k}: {v:.2f}" for k, v in metrics.items()))
  return results
