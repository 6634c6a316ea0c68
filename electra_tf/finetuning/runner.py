"""One fine-tuning trial's model (official ``ModelRunner``): build, train or restore, predict,
score, write test-set outputs.

Training differentiates the official loss (each example's own task loss, summed over the
batch); what is logged is ``loss_mean_per_example`` (that sum over the batch's non-padding
records), comparable with the dev ``loss`` the scorers report.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import tensorflow as tf

from electra_tf import checkpoints, folder_lock, training
from electra_tf.config import FinetuningConfig
from electra_tf.console import log
from electra_tf.finetuning import features, outputs
from electra_tf.finetuning import finetuning_model as model_lib
from electra_tf.finetuning.builtin import qa
from electra_tf.finetuning.builtin.classification import read_tsv
from electra_tf.finetuning.init_report import init_lines
from electra_tf.finetuning.preprocessing import Preprocessor
from electra_tf.finetuning.task_base import Task
from electra_tf.modeling import fusion
from electra_tf.reading.model_tasks import write_tasks

LOGGED_TRAIN_LOSS = "loss_mean_per_example"


def train_step_outputs(model_loss: tf.Tensor, task_id: tf.Tensor,
                       n_tasks: int) -> dict[str, tf.Tensor]:
  """Scalars of one training step: ``total_loss`` (the official batch sum [], what the
  optimizer differentiates) and ``loss_mean_per_example`` (that sum over the batch's records
  with ``task_id`` [B] < ``n_tasks``, i.e. without padding; what gets logged)."""
  n_examples = tf.reduce_sum(tf.cast(task_id < n_tasks, model_loss.dtype))
  return {"total_loss": model_loss,
          LOGGED_TRAIN_LOSS: model_loss / tf.maximum(n_examples, 1.0)}


class ModelRunner:
  """Builds, trains and runs one trial's model under ``strategy`` (official ``ModelRunner``).

  Args:
    config: ``FinetuningConfig``.
    tasks: the run's tasks in ``task_id`` order.
    preprocessor: gives the cached TFRecords of each split.
    strategy: a ``tf.distribute`` strategy; the model is built in its scope.
    model_dir: this trial's checkpoint folder.
    seed: this trial's seed (None: unseeded).
  """

  def __init__(self, config: FinetuningConfig, tasks: Sequence[Task], preprocessor: Preprocessor,
               strategy: tf.distribute.Strategy, model_dir: str, seed: int | None):
    self.config, self.tasks, self.pre = config, list(tasks), preprocessor
    self.strategy, self.model_dir, self.seed = strategy, model_dir, seed
    if seed is not None:
      training.set_seed(seed)
    # Layers take the dtype policy when they are made: mixed_precision applies to this model
    # only (training, and prediction with the trained weights).
    training.set_mixed_precision_policy(training.resolve_precision(config.mixed_precision)[0])
    try:
      with strategy.scope(), fusion.xla_elementwise(config.xla_elementwise):
        self.model = model_lib.create_model(config, tasks)
    finally:
      training.set_mixed_precision_policy(None)
    self._predict_fns: dict[tuple[str, ...], Callable] = {}

  def _init_weights(self) -> None:
    if not self.config.init_checkpoint:
      log("No init_checkpoint: fine-tuning from random initialisation")
      return
    report = model_lib.load_init_checkpoint(self.model, self.config.init_checkpoint)
    for line in init_lines(self.config.init_checkpoint, report, self.model.task_names):
      log(line)

  def train(self) -> int:
    """Trains for the official number of steps; returns the step the model is at (its last
    checkpoint's and ``tf1/``'s)."""
    c = self.config
    path, n_records = self.pre.prepare(self.tasks, "train", is_training=True)
    for folder in (self.model_dir, os.path.join(self.model_dir, "tf1")):  # beside hparams.json
      write_tasks(folder, [task.definition() for task in self.tasks])
    steps = model_lib.num_train_steps(n_records, c.train_batch_size, c.num_train_epochs)
    with self.strategy.scope():
      optimizer = model_lib.create_finetuning_optimizer(c, steps, self.model.n_transformer_layers)
    settings = training.TrainSettings(
        model_dir=self.model_dir, num_train_steps=steps, train_batch_size=c.train_batch_size,
        iterations_per_loop=c.train_iterations_per_loop(steps),
        save_checkpoints_steps=c.save_checkpoints_steps, seed=self.seed or 0,
        log_total_loss=False, gradient_accumulation_steps=c.gradient_accumulation_steps,
        micro_batch_losses="sum",  # the official loss sums over the batch
        jit_compile=c.jit_compile)
    model, n_tasks, seeded = self.model, len(self.tasks), self.seed is not None

    def step_fn(batch, seed):
      # Seeded: dropout masks drawn from the per-step, per-replica seed (resume-exact).
      out = model(batch, training=True, seed=seed if seeded else None)
      return train_step_outputs(out["loss"], batch["task_id"], n_tasks)

    trainer = training.Trainer(self.strategy, model, optimizer, settings, step_fn=step_fn,
                               init_fn=self._init_weights, log_fn=log)
    # Seeded: a resumed run continues the uninterrupted data stream (consumed records skipped).
    try:
      start = trainer.restore_or_initialize()
    except training.NonFiniteCheckpointError as e:  # fine-tuning has no --restart
      trial = self.model_dir[len(c.model_dir) + 1:]  # the folder is <model_dir>_<trial>
      record = os.path.join(f"{c.model_dir}_trials", f"trial_{trial}.json")
      raise e.with_advice(f"to train this trial afresh, move its folder {self.model_dir} and "
                          f"its record {record} (if there is one) aside, then rerun") from None
    consumed = start * c.train_batch_size if seeded else 0

    def dataset_fn(ctx):
      batch = ctx.get_per_replica_batch_size(c.train_batch_size)
      return features.input_dataset(path, self.pre.specs, batch, is_training=True,
                                    seed=self.seed, vocab_size=c.vocab_size,
                                    skip_examples=consumed // ctx.num_input_pipelines)

    folder_lock.check_held(self.model_dir)  # paused past its lease: not a line more
    log(f"Training for {steps} steps ({n_records} records, batch {c.train_batch_size}, "
        f"{c.num_train_epochs} epochs)")
    trainer.train(dataset_fn)
    # Official-name copy of the weights and the optimizer slots (<var>/adam_m, ... lamb_v),
    # readable by the official code and the converters.
    values = {name: v.numpy() for name, v in model.tf1_variables().items()}
    values.update({name: v.numpy() for name, v in optimizer.tf1_slot_variables().items()})
    final_step = int(trainer.global_step.numpy())
    checkpoints.save_tf1_checkpoint(values, os.path.join(self.model_dir, "tf1"),
                                    global_step=final_step)
    return final_step

  def restore(self) -> None:
    """Weights for evaluation without training: model_dir's latest checkpoint, else init."""
    latest = model_lib.restore_latest(self.model, self.model_dir)
    if latest:
      log(f"Restored {latest}")
    elif self.config.init_checkpoint:
      self._init_weights()
    else:
      raise FileNotFoundError(f"nothing to evaluate: no checkpoint in {self.model_dir} and no "
                              "init_checkpoint (set do_train, or init_checkpoint)")

  # ----- prediction ---------------------------------------------------------------------------

  def predict(self, tasks: Sequence[Any], split: str) -> Iterator[tuple[int, dict]]:
    """Yields (task_id, {task: {output: value}}) per record of ``split`` (padding skipped)."""
    c, strategy = self.config, self.strategy
    path, n_records = self.pre.prepare(tasks, split, is_training=False)
    names = tuple(t.name for t in tasks)
    if names not in self._predict_fns:
      model = self.model

      def replica_fn(batch):
        out = model(batch, training=False, task_names=names)
        return {"task_id": out["task_id"], **{n: out[n] for n in names}}

      @tf.function
      def step(batch):
        per_replica = strategy.run(replica_fn, args=(batch,))
        return tf.nest.map_structure(
            lambda v: tf.concat(strategy.experimental_local_results(v), 0), per_replica)

      self._predict_fns[names] = step

    def dataset_fn(ctx):
      batch = ctx.get_per_replica_batch_size(c.eval_batch_size)
      return features.input_dataset(path, self.pre.specs, batch, is_training=False,
                                    vocab_size=c.vocab_size)

    padding_id = len(self.tasks)
    for batch in strategy.distribute_datasets_from_function(dataset_fn):
      out = tf.nest.map_structure(lambda t: t.numpy(), self._predict_fns[names](batch))
      for i, task_id in enumerate(out["task_id"]):
        if task_id != padding_id:
          yield int(task_id), {n: {k: v[i] for k, v in out[n].items()} for n in names}

  def scorer(self, task: Any, split: str):
    if isinstance(task, qa.QATask):
      os.makedirs(os.path.dirname(self.config.qa_preds_file(task.name)), exist_ok=True)
      return task.get_scorer(split, preds_path=self.config.qa_preds_file(task.name),
                             na_path=self.config.qa_na_file(task.name))
    return task.get_scorer(split)

  def evaluate_task(self, task: Any, split: str = "dev"):
    """A scorer fed with the model's outputs on ``split`` of ``task``."""
    scorer = self.scorer(task, split)
    for _, result in self.predict([task], split):
      scorer.update(result[task.name])
    return scorer

  def evaluate(self) -> dict[str, dict[str, float]]:
    """Dev metrics per task (MNLI's dev_mismatched as ``mnli-dev_mismatched`` when present)."""
    results = {}
    for task in self.tasks:
      for split in task.get_dev_splits():
        log(f"Evaluating {task.name} {split}")
        scorer = self.evaluate_task(task, split)
        key = task.name if split == "dev" else f"{task.name}-{split}"
        results[key] = dict(scorer.get_results())
        log(f"{key}: {scorer.results_str()}")
    return results

  # ----- test-set outputs ---------------------------------------------------------------------

  def write_test_outputs(self, trial: int, use_tfds: bool) -> list[str]:
    """Per task: its own ``write_predictions(predictions, stem)`` when it has one, once per
    test split (``predictions``: the head's output dict per record, in file order; ``stem``:
    the trial's test_predictions path without its extension, e.g.
    ``test_predictions/<task>_test_<trial>_predictions``, so each trial's file is its own; it
    returns the path written); else GLUE: official pickles
    (eid -> logits / prediction) and GLUE submission TSVs; SQuAD 2.0: prediction JSON with ""
    for questions judged unanswerable. Returns the paths written."""
    c = self.config
    test_dir = os.path.dirname(c.test_predictions("task", "test", trial))
    written: list[str] = []
    for task in self.tasks:
      if callable(getattr(task, "write_predictions", None)):
        log(f"Writing test predictions for {task.name}")
        for split in task.get_test_splits():
          split_outputs = [r[task.name] for _, r in self.predict([task], split)]
          stem = os.path.splitext(c.test_predictions(task.name, split, trial))[0]
          written.append(task.write_predictions(split_outputs, stem))
          log(f"  wrote {written[-1]}")
      elif task.name in outputs.GLUE_TASKS:
        written += self._write_glue(task, trial, use_tfds, test_dir)
      elif task.name == "squad":
        log("Writing SQuAD test predictions")
        predictions, null_odds = self.evaluate_task(task, "test").write_predictions()
        preds = outputs.squad_test_predictions(predictions, null_odds, c.qa_na_threshold)
        # official: JSON written to the ".pkl" test_predictions path; ".json" here
        path = os.path.splitext(c.test_predictions(task.name, "test", trial))[0] + ".json"
        outputs.write_json(preds, path)
        written.append(path)
        log(f"  wrote {path}")
      else:
        log(f"Skipping task {task.name} - writing predictions is not supported for this task")
    return written

  def _write_glue(self, task: Any, trial: int, use_tfds: bool, test_dir: str) -> list[str]:
    written = []
    for split in task.get_test_splits():
      log(f"Writing test predictions for {task.name} {split}")
      preds = {}
      for _, result in self.predict([task], split):
        r = result[task.name]
        preds[int(r["eid"])] = r["logits"] if "logits" in r else r["predictions"]
      written.append(self.config.test_predictions(task.name, split, trial))
      outputs.write_pickle(preds, written[-1])
      if (task.name, split) in outputs.GLUE_SUBMISSION_FILES:
        indices = None if use_tfds else glue_test_indices(task, split)
        written.append(outputs.write_glue_submission(
            task, split, preds, os.path.join(test_dir, f"glue_submission_{trial}"), indices))
        log(f"  wrote {written[-1]}")
    return written


def glue_test_indices(task: Any, split: str) -> dict[int, str] | None:
  """eid -> the GLUE test file's ``index`` column (None when the file has no such column)."""
  rows = read_tsv(task.split_path(task.file_split(split), ".tsv"))
  if not rows or rows[0][1][:1] != ["index"]:
    return None
  return {i: row[0] for i, (_, row) in enumerate(rows[1:])}
