"""The fine-tuning run (official ``run_finetuning.run_finetuning``): ``num_trials`` times train,
evaluate on dev, write results and test outputs; the median over trials at the end.

Finished work is kept, whatever stopped a run (a signal, SIGKILL, a crash, a power cut):

- Trial ``t`` trains in ``<model_dir>_<t>``, whose ``trial_settings.json`` (written before its
  first checkpoint) holds the settings it is trained with. A rerun with the same settings
  resumes it from its newest readable checkpoint (seeded: as if it had never stopped).
- A trial trained, evaluated and with its test outputs written is recorded in
  ``<model_dir>_trials/trial_<t>.json`` (settings, final step, dev results, the test-output
  files it wrote), written whole, then named. The record outlives the trial's folder (which
  ``keep_all_models`` false deletes); a rerun reports the recorded results, in trial order, and
  does not train the trial again, unless the rerun keeps the trial's model and the folder does
  not hold it at the final step, readable, ``tf1/`` included (then it trains again from its
  newest usable checkpoint).
- A record or a settings file that a power cut left empty: see
  ``trial_book.TrialBook._recover_damaged``.
- The settings (``TrialBook.settings``): the hparams that change what a trial computes, the
  task data (``Preprocessor.data_key``: raw files, vocabulary, featurisation options), the
  identity of ``init_checkpoint`` and the trial's seed. A folder or record made with other
  settings is moved aside to ``<name>.rejected-<n>``, never deleted, with one line naming what
  changed; its trial starts afresh.
- One run at a time: the run holds the lock ``<model_dir>_trials/.run.lock`` (folder_lock.py)
  from before it reads or moves any trial's folder or record until it ends; each trial's
  training also holds its folder's own lock. A second run with the same ``model_dir`` is
  refused in one line naming the first.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras

from electra_tf import checkpoints, early_interrupt, folder_lock, training
from electra_tf.config import FinetuningConfig
from electra_tf.console import log
from electra_tf.finetuning import outputs, registry, run_settings
from electra_tf.finetuning.preprocessing import Preprocessor, make_examples_fn
from electra_tf.finetuning.runner import ModelRunner
from electra_tf.finetuning.trial_book import TrialBook, trial_seed
from electra_tf.reading import model_source


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


def run_trial(book: TrialBook | None, runner: ModelRunner, trial: int, title: str,
              use_tfds: bool) -> dict[str, Any]:
  """Trains (``book`` set: ``do_train``) or restores a trial's model, evaluates it and writes
  its test outputs; returns what it computed, as a record (recorded when ``book`` is set)."""
  c = runner.config
  final_step = 0
  if book is not None:
    heading(f"Start training: {title}")
    final_step = runner.train()
  elif c.do_eval:
    runner.restore()
  dev_results = test_outputs = None
  if c.do_eval:
    heading(f"Run dev set evaluation: {title}")
    dev_results = runner.evaluate()
    if c.write_test_outputs and trial <= c.n_writes_test:
      heading(f"Running on the test set and writing the predictions: {title}")
      test_outputs = runner.write_test_outputs(trial, use_tfds)
  if book is None:
    return {"dev_results": dev_results}
  return book.record(trial, final_step, dev_results, test_outputs)


def run_finetuning(config: FinetuningConfig, strategy: tf.distribute.Strategy | None = None,
                   use_tfds: bool = False, tfds_data_dir: str | None = None
                   ) -> list[dict[str, dict[str, float]]]:
  """Trains and evaluates ``num_trials`` models of a ``FinetuningConfig``; returns each trial's
  dev results ({task: {metric: value}}). ``strategy`` defaults to one device; ``use_tfds``
  reads GLUE tasks from prepared TensorFlow Datasets in ``tfds_data_dir``. Trials recorded
  by an earlier run with the same settings are reported, not trained again."""
  tasks = registry.build_tasks(config, use_tfds)  # bad names / folders fail before any output
  check_init_checkpoint(config)
  run_settings.check_settings(config)  # before any cache is built
  note = folder_lock.acquire(f"{config.model_dir}_trials")  # the run's lock: all its folders
  if note:
    log(note)
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
  book = TrialBook(config, preprocessor) if config.do_train else None
  if book is not None:
    book.reject_other_settings()
  results: list[dict[str, dict[str, float]]] = []
  trial, replaced = 1, []  # models an earlier run kept and this one does not: deleted last
  while config.num_trials < 0 or trial <= config.num_trials:
    early_interrupt.raise_if_swallowed()  # a Ctrl-C during the last trial's evaluation
    title = f"model={config.model_name}, trial {trial}/{config.num_trials}"
    record = earlier_record = book.finished(trial) if book is not None else None
    if record is not None:
      log(f"Trial {trial}/{config.num_trials} finished earlier: recorded in "
          f"{book.record_path(trial)}; not training it again")
    else:
      model_dir = book.prepare_dir(trial) if book is not None else f"{config.model_dir}_{trial}"
      runner = ModelRunner(config, tasks, preprocessor, strategy, model_dir,
                           trial_seed(config.seed, trial))
      record = run_trial(book, runner, trial, title, use_tfds)
      del runner
      folder_lock.release(model_dir)  # taken by the trial's training
      tf_keras.backend.clear_session()
    if config.do_eval:
      results.append(record["dev_results"])
      json_path = outputs.write_results(results, config.results_txt, config.results_pkl)
      log(f"Wrote {config.results_txt}, {config.results_pkl}, {json_path}")
    if book is not None:
      if earlier_record is None or not earlier_record.get("kept", True) or config.num_trials < 0:
        book.remove_dir_unless_kept(trial)
      else:  # a model an earlier run kept goes once this run's last trial is complete
        replaced.append(trial)
      if trial == config.num_trials:
        for earlier in replaced:
          book.remove_dir_unless_kept(earlier)
    trial += 1
  if len(results) > 1:
    for task, metrics in outputs.median_results(results).items():
      log(f"{task} median over {len(results)} trials: "
          + " - ".join(f"{k}: {v:.2f}" for k, v in metrics.items()))
  folder_lock.release(f"{config.model_dir}_trials")
  return results
