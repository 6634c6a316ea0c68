r"""Fine-tunes an ELECTRA model on GLUE, SQuAD / MRQA or CoNLL-2000 chunking (official
``run_finetuning.py`` in TF2).

  python run_finetuning.py --data_dir D --model_name M --hparams '{"task_names": ["rte"]}'

(``--data-dir`` / ``--model-name`` also work.) Layout, as official:
  D/finetuning_data/<task>/{train,dev,test}.{tsv,json,txt}   raw task data
  D/models/M/                                  init checkpoint (official TF1 or ours), vocab.txt
  D/models/M/finetuning_tfrecords/<tasks>_tfrecords/   featurised TFRecord cache
  D/models/M/finetuning_models/<tasks>_model_<trial>/  fine-tuned weights (TF2 ckpt-<step>,
                                                       tf1/model.ckpt with official names)
  D/models/M/results/<tasks>_results.{txt,pkl,json}    dev metrics of every trial + median
  D/models/M/test_predictions/                 test outputs (official pickles, GLUE submission
                                               TSVs, SQuAD 2.0 prediction JSON)
``init_checkpoint`` defaults to D/models/M; set it to null in --hparams to train from random
initialisation. Trial t (1-based) uses seed ``seed + t - 1`` when the ``seed`` hparam is set.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf_keras (Keras 2), as everywhere here
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from absl import app, flags  # noqa: E402

from electra_tf import checkpoints, training  # noqa: E402
from electra_tf.cli import data_dir_and_model_name  # noqa: E402
from electra_tf.config import FinetuningConfig, load_hparams  # noqa: E402
from electra_tf.finetuning import features, outputs, qa, registry, tfds_glue  # noqa: E402
from electra_tf.finetuning import model as model_lib  # noqa: E402
from electra_tf.finetuning.classification import read_tsv  # noqa: E402
from electra_tf.finetuning.task import DataError  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "Folder with finetuning_data/ and models/ (official layout).")
flags.DEFINE_string("data-dir", None, "Official spelling of --data_dir.")
flags.DEFINE_string("model_name", None, "Name of the pre-trained model (folder under models/).")
flags.DEFINE_string("model-name", None, "Official spelling of --model_name.")
flags.DEFINE_string("hparams", "{}", "Fine-tuning hparams: a JSON dict or a .json file.")
flags.DEFINE_bool("use_tfds", False, "Read GLUE tasks from locally prepared TensorFlow Datasets "
                  "(glue/cola, ...) instead of the TSV files; nothing is downloaded.")
flags.DEFINE_string("tfds_data_dir", None, "TFDS data folder (default: TFDS's own default).")
flags.DEFINE_string("distribution_strategy", "one_device",
                    "one_device | mirrored | multi_worker_mirrored | tpu")
flags.DEFINE_integer("num_gpus", None, "GPUs to use (default: all visible).")


def _log(*parts: Any) -> None:
  print(*parts, flush=True)


def _heading(message: str) -> None:
  _log("=" * 80 + "\n" + message + "\n" + "=" * 80)


# --------------------------------------------------------------------------------------------
# Tasks and featurised data
# --------------------------------------------------------------------------------------------


class Preprocessor:
  """Featurises splits into cached TFRecords (official ``Preprocessor``) and reads them back.

  ``examples_fn(task, split)`` gives a split's examples (the task's own reader, or TFDS).
  A training file mixes every task's examples, shuffled; both kinds are padded with
  ``task_id = len(tasks)`` records up to a multiple of the batch size.
  """

  def __init__(self, config: FinetuningConfig, tasks: Sequence[Any],
               examples_fn: Callable[[Any, str], list], seed: int | None = None):
    self.config = config
    self.tasks = list(tasks)
    self.examples_fn = examples_fn
    self.seed = seed
    self.specs = features.all_feature_specs(tasks, config.max_seq_length)
    self._by_name = {t.name: t for t in tasks}

  def _feature_dicts(self, tasks: Sequence[Any], split: str, is_training: bool) -> Iterator:
    examples = [ex for task in tasks for ex in self.examples_fn(task, split)]
    if is_training:
      (random.Random(self.seed) if self.seed is not None else random).shuffle(examples)
    for i, example in enumerate(examples):
      for feature in self._by_name[example.task_name].featurize(example, is_training):
        if self.config.log_examples and i == 0:
          _log(f"example features ({example.task_name} {split}): {feature}")
        yield feature

  def prepare(self, tasks: Sequence[Any], split: str, is_training: bool) -> tuple[str, int]:
    """(TFRecord path, number of records incl. padding), featurising unless cached."""
    c = self.config
    batch_size = c.train_batch_size if is_training else c.eval_batch_size
    prefix = features.cache_prefix(c.preprocessed_data_dir, [t.name for t in tasks], split)
    _log(f"Loading dataset {os.path.basename(prefix)}")
    return features.build_or_load_cached(
        prefix, lambda: self._feature_dicts(tasks, split, is_training), self.specs,
        pad_to_multiple_of=batch_size, padding_task_id=len(self.tasks),
        use_existing=c.use_tfrecords_if_existing)


def make_examples_fn(config: FinetuningConfig, use_tfds: bool, tfds_data_dir: str | None):
  def examples_fn(task: Any, split: str) -> list:
    if use_tfds and task.name in tfds_glue.TFDS_GLUE:
      return tfds_glue.get_examples(task, split, tfds_data_dir)
    return task.get_examples(split)

  return examples_fn


# --------------------------------------------------------------------------------------------
# One trial: train (or restore), predict, score
# --------------------------------------------------------------------------------------------


class ModelRunner:
  """Builds, trains and runs one trial's model under ``strategy`` (official ``ModelRunner``)."""

  def __init__(self, config: FinetuningConfig, tasks: Sequence[Any], preprocessor: Preprocessor,
               strategy: Any, model_dir: str, seed: int | None):
    self.config, self.tasks, self.pre = config, list(tasks), preprocessor
    self.strategy, self.model_dir, self.seed = strategy, model_dir, seed
    if seed is not None:
      training.set_seed(seed)
    with strategy.scope():
      self.model = model_lib.create_model(config, tasks)
    self._predict_fns: dict[tuple[str, ...], Callable] = {}

  def _init_weights(self) -> None:
    if not self.config.init_checkpoint:
      _log("No init_checkpoint: fine-tuning from random initialisation")
      return
    report = model_lib.load_init_checkpoint(self.model, self.config.init_checkpoint)
    _log(f"Initialised from {self.config.init_checkpoint}: {report.summary()}")
    if report.unused_other:
      _log(f"  not used: {', '.join(report.unused_other[:5])}"
           f"{' ...' if len(report.unused_other) > 5 else ''}")
    if report.missing:
      _log(f"  not in the checkpoint (initialised randomly): {', '.join(report.missing[:5])}"
           f"{' ...' if len(report.missing) > 5 else ''}")

  def train(self) -> int:
    """Trains for the official number of steps; returns it."""
    c = self.config
    path, n_records = self.pre.prepare(self.tasks, "train", is_training=True)
    steps = model_lib.num_train_steps(n_records, c.train_batch_size, c.num_train_epochs)
    with self.strategy.scope():
      optimizer = model_lib.create_finetuning_optimizer(c, steps, self.model.n_transformer_layers)
    settings = training.TrainSettings(
        model_dir=self.model_dir, num_train_steps=steps, train_batch_size=c.train_batch_size,
        iterations_per_loop=min(c.iterations_per_loop, steps),
        save_checkpoints_steps=c.save_checkpoints_steps, seed=self.seed or 0)
    model = self.model
    trainer = training.Trainer(
        self.strategy, model, optimizer, settings,
        step_fn=lambda batch, seed: {"total_loss": model(batch, training=True)["loss"]},
        init_fn=self._init_weights)

    def dataset_fn(ctx):
      batch = ctx.get_per_replica_batch_size(c.train_batch_size)
      return features.input_dataset(path, self.pre.specs, batch, is_training=True,
                                    seed=self.seed)

    _log(f"Training for {steps} steps ({n_records} records, batch {c.train_batch_size}, "
         f"{c.num_train_epochs} epochs)")
    trainer.train(dataset_fn)
    # Official-name copy of the weights, readable by the official code and the converters.
    values = {name: v.numpy() for name, v in model.tf1_variables().items()}
    checkpoints.save_tf1_checkpoint(values, os.path.join(self.model_dir, "tf1"),
                                    global_step=int(trainer.global_step.numpy()))
    return steps

  def restore(self) -> None:
    """Weights for evaluation without training: model_dir's latest checkpoint, else init."""
    latest = training.latest_checkpoint(self.model_dir) if os.path.isdir(self.model_dir) else None
    if latest:
      status = tf.train.Checkpoint(model=self.model).read(latest)
      status.expect_partial().assert_existing_objects_matched()
      _log(f"Restored {latest}")
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
      return features.input_dataset(path, self.pre.specs, batch, is_training=False)

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
        _log(f"Evaluating {task.name} {split}")
        scorer = self.evaluate_task(task, split)
        key = task.name if split == "dev" else f"{task.name}-{split}"
        results[key] = dict(scorer.get_results())
        _log(f"{key}: {scorer.results_str()}")
    return results

  def write_test_outputs(self, trial: int, use_tfds: bool) -> None:
    """GLUE: official pickles (eid -> logits / prediction) and GLUE submission TSVs;
    SQuAD 2.0: prediction JSON with "" for questions judged unanswerable."""
    c = self.config
    test_dir = os.path.dirname(c.test_predictions("task", "test", trial))
    for task in self.tasks:
      if task.name in outputs.GLUE_TASKS:
        for split in task.get_test_splits():
          _log(f"Writing test predictions for {task.name} {split}")
          preds = {}
          for _, result in self.predict([task], split):
            r = result[task.name]
            preds[int(r["eid"])] = r["logits"] if "logits" in r else r["predictions"]
          outputs.write_pickle(preds, c.test_predictions(task.name, split, trial))
          if (task.name, split) in outputs.GLUE_SUBMISSION_FILES:
            indices = None if use_tfds else glue_test_indices(task, split)
            path = outputs.write_glue_submission(
                task, split, preds, os.path.join(test_dir, f"glue_submission_{trial}"), indices)
            _log(f"  wrote {path}")
      elif task.name == "squad":
        _log("Writing SQuAD test predictions")
        predictions, null_odds = self.evaluate_task(task, "test").write_predictions()
        preds = outputs.squad_test_predictions(predictions, null_odds, c.qa_na_threshold)
        # official: JSON written to the ".pkl" test_predictions path; ".json" here
        path = os.path.splitext(c.test_predictions(task.name, "test", trial))[0] + ".json"
        outputs.write_json(preds, path)
        _log(f"  wrote {path}")
      elif hasattr(task, "write_predictions"):
        for split in task.get_test_splits():
          preds = [result[task.name] for _, result in self.predict([task], split)]
          _log(f"  wrote {task.write_predictions(preds, test_dir)}")
      else:
        _log(f"Skipping task {task.name} - writing predictions is not supported for this task")


def glue_test_indices(task: Any, split: str) -> dict[int, str] | None:
  """eid -> the GLUE test file's ``index`` column (None when the file has no such column)."""
  rows = read_tsv(task.split_path(task.file_split(split), ".tsv"))
  if not rows or rows[0][1][:1] != ["index"]:
    return None
  return {i: row[0] for i, (_, row) in enumerate(rows[1:])}


# --------------------------------------------------------------------------------------------
# The trial loop
# --------------------------------------------------------------------------------------------


def check_init_checkpoint(config: FinetuningConfig) -> None:
  """Fails before any work when ``init_checkpoint`` names nothing usable."""
  if not config.init_checkpoint:
    return
  try:
    checkpoints.resolve_checkpoint(config.init_checkpoint)
  except FileNotFoundError as e:
    raise FileNotFoundError(f"init_checkpoint: {e}; set \"init_checkpoint\": null in --hparams "
                            "to fine-tune from random initialisation") from None


def trial_seed(seed: int | None, trial: int) -> int | None:
  return None if seed is None else seed + trial - 1


def run_finetuning(config: FinetuningConfig, strategy: Any = None, use_tfds: bool = False,
                   tfds_data_dir: str | None = None) -> list[dict[str, dict[str, float]]]:
  """Trains and evaluates ``num_trials`` models; returns each trial's dev results."""
  tasks = registry.build_tasks(config, use_tfds)  # bad names / folders fail before any output
  check_init_checkpoint(config)
  _heading(f"Config: model={config.model_name}, trials={config.num_trials}")
  _log(config.to_json())
  strategy = strategy or training.get_strategy("one_device")
  examples_fn = make_examples_fn(config, use_tfds, tfds_data_dir)
  preprocessor = Preprocessor(config, tasks, examples_fn, seed=config.seed)
  results: list[dict[str, dict[str, float]]] = []
  trial = 1
  while config.num_trials < 0 or trial <= config.num_trials:
    heading = f"model={config.model_name}, trial {trial}/{config.num_trials}"
    model_dir = f"{config.model_dir}_{trial}"
    if config.do_train and tf.io.gfile.exists(model_dir):
      tf.io.gfile.rmtree(model_dir)  # official rmkdir: every trial starts afresh
    runner = ModelRunner(config, tasks, preprocessor, strategy, model_dir,
                         trial_seed(config.seed, trial))
    if config.do_train:
      _heading(f"Start training: {heading}")
      runner.train()
    elif config.do_eval:
      runner.restore()
    if config.do_eval:
      _heading(f"Run dev set evaluation: {heading}")
      results.append(runner.evaluate())
      json_path = outputs.write_results(results, config.results_txt, config.results_pkl)
      _log(f"Wrote {config.results_txt}, {config.results_pkl}, {json_path}")
      if config.write_test_outputs and trial <= config.n_writes_test:
        _heading(f"Running on the test set and writing the predictions: {heading}")
        runner.write_test_outputs(trial, use_tfds)
    if trial != config.num_trials and not config.keep_all_models:
      shutil.rmtree(model_dir, ignore_errors=True)
    del runner
    tf_keras.backend.clear_session()
    trial += 1
  if len(results) > 1:
    for task, metrics in outputs.median_results(results).items():
      _log(f"{task} median over {len(results)} trials: "
           + " - ".join(f"{k}: {v:.2f}" for k, v in metrics.items()))
  return results


def main(argv: Sequence[str]) -> None:
  data_dir, model_name = data_dir_and_model_name(list(argv))
  tf.get_logger().setLevel("ERROR")  # as the official script
  try:
    config = FinetuningConfig(model_name, data_dir, **load_hparams(FLAGS.hparams))
    strategy = training.get_strategy(FLAGS.distribution_strategy, FLAGS.num_gpus)
    run_finetuning(config, strategy, FLAGS.use_tfds, FLAGS.tfds_data_dir)
  except (ValueError, FileNotFoundError, DataError) as e:
    sys.exit(f"run_finetuning.py: error: {e}")


if __name__ == "__main__":
  app.run(main)
