"""User tasks through ``run_finetuning``: the same seeded training as the built-in task on the
same real rows gives the same dev metrics; written test predictions re-scored independently
(scikit-learn, seqeval) give the reported metrics; multi-task runs and SavedModel export."""

import csv
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from helpers import user_data

import run_finetuning as rf
from electra_tf.config import FinetuningConfig
from electra_tf.finetuning import registry
from electra_tf.finetuning.finetuning_model import create_model
from electra_tf.interop.finetuned_saved_model import export_finetuned_saved_model

TINY = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2},
        "embedding_size": 16, "max_seq_length": 64, "train_batch_size": 8,
        "eval_batch_size": 8, "init_checkpoint": None, "seed": 3, "num_train_epochs": 1.0,
        "learning_rate": 1e-3}


@pytest.fixture(scope="module")
def root(data_dir, tmp_path_factory):
  root = tmp_path_factory.mktemp("user_training")
  user_data.write_all(root, data_dir)
  return root


def _run(root, vocab_file, task_names, **hparams):
  config = FinetuningConfig("m", str(root), **{**TINY, "vocab_file": vocab_file,
                                               "task_names": task_names, **hparams})
  return config, rf.run_finetuning(config)


def _test_dir(config):
  return os.path.dirname(config.test_predictions("x", "test", 1))


def _dev_labels(root, task, column):
  with open(root / "finetuning_data" / task / "dev.csv", encoding="utf-8", newline="") as f:
    return [row[column] for row in csv.DictReader(f)]


@pytest.mark.slow
def test_sst_as_csv_same_metrics_and_written_predictions(root, vocab_file):
  sklearn_metrics = pytest.importorskip("sklearn.metrics")
  _, builtin = _run(root, vocab_file, ["sst"])
  config, user = _run(root, vocab_file, ["movie_reviews"], write_test_outputs=True)
  got, want = user[0]["movie_reviews"], builtin[0]["sst"]
  assert list(got) == ["accuracy", "macro_f1", "mcc", "loss"]
  assert got["accuracy"] == want["accuracy"] and got["loss"] == want["loss"]

  # the test file holds the dev rows: its written predictions re-score to the dev metrics
  written = os.path.join(_test_dir(config), "movie_reviews_test_1_predictions.tsv")
  with open(written, newline="") as f:
    rows = list(csv.reader(f, delimiter="\t"))
  assert rows[0] == ["review_id", "review", "prediction"]
  assert [r[0] for r in rows[1:]] == [f"r{i}" for i in range(16)]
  gold, pred = _dev_labels(root, "movie_reviews", "sentiment"), [r[2] for r in rows[1:]]
  assert [r[1] for r in rows[1:]] == _dev_labels(root, "movie_reviews", "review")
  assert got["accuracy"] == pytest.approx(100 * sklearn_metrics.accuracy_score(gold, pred))
  assert got["macro_f1"] == pytest.approx(100 * sklearn_metrics.f1_score(gold, pred,
                                                                         average="macro"))
  assert got["mcc"] == pytest.approx(100 * sklearn_metrics.matthews_corrcoef(gold, pred))


@pytest.mark.slow
@pytest.mark.parametrize("builtin,user", [("mrpc", "paraphrase"), ("sts", "similarity")])
def test_pairs_same_metrics_as_builtin(root, vocab_file, builtin, user):
  """MRPC as JSONL (int labels) and STS-B as CSV, both symmetric: identical dev results."""
  _, want = _run(root, vocab_file, [builtin])
  config, got = _run(root, vocab_file, [user], write_test_outputs=True)
  assert got[0][user] == want[0][builtin]
  assert 0 < got[0][user]["loss"] and np.isfinite(list(got[0][user].values())).all()
  out = os.path.join(_test_dir(config), user + "_test_1_predictions."
                     + ("jsonl" if user == "paraphrase" else "tsv"))
  if user == "paraphrase":
    with open(out) as f:
      rows = [json.loads(line) for line in f]
    with open(root / "finetuning_data" / user / "test.jsonl") as f:
      test = [json.loads(line) for line in f]
    assert [r["pair"] for r in rows] == [t["pair"] for t in test]
    assert {r["prediction"] for r in rows} <= {0, 1}
    acc = 100 * np.mean([r["prediction"] == t["same"] for r, t in zip(rows, test, strict=True)])
    assert got[0][user]["accuracy"] == pytest.approx(acc)
  else:
    with open(out, newline="") as f:
      rows = list(csv.DictReader(f, delimiter="\t"))
    assert list(rows[0]) == ["id", "s1", "s2", "prediction"] and len(rows) == 16
    gold = [float(s) for s in _dev_labels(root, user, "similarity")]
    pred = [float(r["prediction"]) for r in rows]
    # not 1e-5: measured 5.7e-5 (of -15.07 %): the metric and the file come from separate passes
    assert got[0][user]["pearson"] == pytest.approx(100 * np.corrcoef(gold, pred)[0, 1],
                                                    abs=1e-4)


@pytest.mark.slow
def test_chunking_as_conll_same_f1_and_seqeval(root, vocab_file):
  seqeval_metrics = pytest.importorskip("seqeval.metrics")
  _, want = _run(root, vocab_file, ["chunk"], max_seq_length=128, learning_rate=3e-3,
                 num_train_epochs=3.0)
  config, got = _run(root, vocab_file, ["chunking"], max_seq_length=128, learning_rate=3e-3,
                     num_train_epochs=3.0, write_test_outputs=True)
  assert got[0]["chunking"] == want[0]["chunk"]
  assert got[0]["chunking"]["f1"] > 0

  task = registry.build_tasks(config)[0]
  for example in task.get_examples("test"):  # no word is cut off at max_seq_length
    feature = task.featurize(example)[0]
    assert sum(feature["chunking_labels_mask"]) == len(example.words)

  def sentences(path):
    with open(path) as f:
      return [[line.split() for line in block.splitlines()]
              for block in f.read().split("\n\n") if block.strip()]

  gold = sentences(root / "finetuning_data" / "chunking" / "dev.conll")
  written = sentences(os.path.join(_test_dir(config), "chunking_test_1_predictions.tsv"))
  assert [[w[0] for w in s] for s in written] == [[w[0] for w in s] for s in gold]
  y_true = [[w[-1] for w in s] for s in gold]
  y_pred = [[w[-1] for w in s] for s in written]
  metrics = got[0]["chunking"]
  assert metrics["f1"] == pytest.approx(100 * seqeval_metrics.f1_score(y_true, y_pred))
  assert metrics["precision"] == pytest.approx(
      100 * seqeval_metrics.precision_score(y_true, y_pred))
  assert metrics["recall"] == pytest.approx(100 * seqeval_metrics.recall_score(y_true, y_pred))


@pytest.mark.slow
def test_multitask_with_builtin_and_export(root, vocab_file, tmp_path):
  """sst + user tagging + user regression in one run (two trials, layer-wise decay), then the
  SavedModel signatures of the user tasks give the model's own outputs."""
  config, results = _run(root, vocab_file, ["sst", "chunking", "similarity"], num_trials=2,
                         layerwise_lr_decay=0.5, write_test_outputs=True)
  assert len(results) == 2 and all(list(r) == ["sst", "chunking", "similarity"]
                                   for r in results)
  for name in ("chunking", "similarity"):  # each trial's own file
    for trial in (1, 2):
      path = os.path.join(_test_dir(config), f"{name}_test_{trial}_predictions.tsv")
      assert os.path.getsize(path) > 0

  tasks = registry.build_tasks(config)
  model = create_model(config, tasks)
  status = tf.train.Checkpoint(model=model).read(tf.train.latest_checkpoint(
      config.model_dir + "_2"))
  status.assert_existing_objects_matched()
  names = export_finetuned_saved_model(model, tasks, str(tmp_path / "export"))
  assert names == ["classify_similarity", "classify_sst", "tag"]
  loaded = tf.saved_model.load(str(tmp_path / "export"))
  for task, signature in ((tasks[1], "tag"), (tasks[2], "classify_similarity")):
    batch = [task.featurize(e)[0] for e in task.get_examples("dev")[:4]]
    inputs = {k: tf.constant([f[k] for f in batch], tf.int32)
              for k in ("input_ids", "input_mask", "segment_ids")}
    served = loaded.signatures[signature](**inputs)
    feats = {k: tf.constant(np.array([f[k] for f in batch])) for k in batch[0]}
    feats = {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in feats.items()}
    out = model(feats, training=False, task_names=[task.name])[task.name]
    if signature == "tag":
      positions = feats["chunking_labeled_positions"].numpy()
      logits = np.take_along_axis(served["logits"].numpy(), positions[..., None], axis=1)
      np.testing.assert_allclose(logits, out["logits"].numpy(), rtol=1e-5, atol=1e-5)
    else:
      np.testing.assert_allclose(served["score"].numpy(),
                                 out["predictions"].numpy() * 5.0, rtol=1e-5, atol=1e-5)
