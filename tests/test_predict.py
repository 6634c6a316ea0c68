"""A fine-tuned model carries its task definitions (tasks.json), converts with no data folder,
and predict labels files with it: model directory, SavedModel and LiteRT (TensorFlow-free),
scoring labelled rows exactly as the fine-tuning run's evaluation did."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import tiny_finetuned
from helpers.paths import REPO_ROOT

from electra_tf import console
from electra_tf.interop import litert_eval, predicting, prediction_rows, signatures
from electra_tf.interop.conversion import convert_finetuned
from electra_tf.interop.litert_runner import LiteRTModel
from electra_tf.reading import model_tasks

# A program must be quiet without the test session's TF_CPP_MIN_LOG_LEVEL (conftest).
ENV = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
ENV.update(CUDA_VISIBLE_DEVICES="-1", PYTHONPATH=str(REPO_ROOT))
DEV = {"movie_reviews": "dev.csv", "similarity": "dev.csv", "chunking": "dev.conll"}
MAIN_METRIC = {"movie_reviews": "accuracy", "similarity": "pearson", "chunking": "f1"}


def _run(*args, timeout=600):
  proc = subprocess.run([sys.executable, *map(str, args)], cwd=REPO_ROOT, env=ENV,
                        capture_output=True, text=True, timeout=timeout)
  return proc, (proc.stdout + proc.stderr).splitlines()


@pytest.fixture(scope="module")
def model(tmp_path_factory, data_dir, vocab_file):
  """The tiny 3-task model fine-tuned in a temp folder, converted by the CLI with LiteRT
  float32 + int8 and no --data_dir."""
  root = tmp_path_factory.mktemp("predict")
  trial, dev = tiny_finetuned.train(root, data_dir, vocab_file)
  out = root / "export"
  proc, lines = _run("-m", "electra_tf.convert", f"--checkpoint={trial}", f"--output_dir={out}",
                     "--litert=float32,int8")
  assert proc.returncode == 0, "\n".join(lines[-30:])
  return {"root": root, "trial": trial, "dev": dev, "out": out, "convert_lines": lines,
          "data": root / "finetuning_data"}


def _predict(model_path, task, data, **given):
  predictor = predicting.open_model(str(model_path), task)
  rows = prediction_rows.read_rows(str(data / task / DEV[task]), predictor.definition, given)
  return predicting.predict_rows(predictor, rows, batch_size=8), rows


@pytest.mark.slow
def test_model_directory_carries_its_task_definitions(model):
  trial = model["trial"]
  for folder in (trial, os.path.join(trial, "tf1"), model["out"], model["out"] / "saved_model",
                 model["out"] / "tf1"):
    with open(os.path.join(folder, "tasks.json"), encoding="utf-8") as f:
      tasks = {t["name"]: t for t in json.load(f)["tasks"]}
    assert [t for t in tasks] == tiny_finetuned.TASKS
    reviews, sim, chunking = (tasks[n] for n in tiny_finetuned.TASKS)
    assert reviews["kind"] == "classification"
    assert sorted(reviews["labels"]) == ["0", "1"]  # in first-seen order in train
    assert reviews["task_json"]["text_a"] == "review" and reviews["scorer"].endswith(
        "ClassificationScorer")
    assert sim["kind"] == "regression" and sim["range"] == [0.0, 5.0]
    assert chunking["kind"] == "tagging" and chunking["spans"]
    assert chunking["labels"] == sorted(chunking["labels"]) and "B-NP" in chunking["labels"]
    # the data folder relative to the model folder: no absolute path of this machine
    assert not os.path.isabs(reviews["data"]) and str(model["root"]) not in json.dumps(tasks)
    assert os.path.normpath(os.path.join(folder, reviews["data"])) == str(
        model["data"] / "movie_reviews")
    read = model_tasks.read_tasks(str(folder))
    assert read["movie_reviews"]["data"] == str(model["data"] / "movie_reviews")


@pytest.mark.slow
def test_convert_without_data_dir_measures_litert_and_is_quiet(model):
  lines = model["convert_lines"]
  assert not [line for line in lines if console.LOG_LINE.match(line)], lines
  assert not [line for line in lines if "Traceback" in line or "fully_quantize" in line]
  text = "\n".join(lines)
  assert "movie_reviews dev, 15 rows: float32 (SavedModel) accuracy" in text
  assert "chunking dev, 12 rows: float32 (SavedModel) precision" in text
  spec = json.loads((model["out"] / "litert" / "litert.json").read_text())
  dev = spec["dev"]["movie_reviews"]
  assert dev["float32"]["accuracy"] == pytest.approx(model["dev"]["movie_reviews"]["accuracy"])
  assert dev["variants"]["float32"]["agreement"] == 100.0
  assert dev["variants"]["float32"]["max_difference"] <= 1e-5
  assert 0 < dev["variants"]["int8"]["max_difference"] < 1.0
  assert "agreement" not in spec["dev"]["similarity"]["variants"]["int8"]  # regression
  assert sorted(spec["signatures"]) == ["classify_movie_reviews", "classify_similarity", "tag"]


@pytest.mark.slow
def test_convert_names_what_to_pass_without_definitions(model, tmp_path):
  old = tmp_path / "old_model"
  shutil.copytree(model["trial"], old)
  (old / "tasks.json").unlink()
  with pytest.raises(ValueError) as err:
    convert_finetuned(str(old), {}, str(tmp_path / "out"))
  message = str(err.value)
  assert "\n" not in message and "has no tasks.json" in message
  assert "pass --data_dir" in message and str(old) in message
  # with the data folder the tasks are defined by it, as before tasks.json existed
  result = convert_finetuned(str(old), {}, str(tmp_path / "out2"), str(model["root"]))
  assert [t.name for t in result["tasks"]] == tiny_finetuned.TASKS


@pytest.mark.slow
@pytest.mark.parametrize("task", tiny_finetuned.TASKS)
def test_predict_scores_dev_rows_as_the_fine_tuning_run(model, task):
  """SavedModel, model directory and LiteRT float32 give the run's own dev metric.

  Metrics are in percent; LiteRT's float32 kernels round differently from TensorFlow's (its
  outputs agree within 1e-5: convert's ``max_difference``, checked above), which moves a
  percent metric by up to 100x that: 1e-4 there (measured 3.3e-5 on the similarity Pearson,
  docs/fidelity.md), 1e-5 for TensorFlow's own paths.
  """
  want = model["dev"][task]
  metric = MAIN_METRIC[task]
  for path, bound in ((model["out"] / "saved_model", 1e-5), (model["trial"], 1e-5),
                      (model["out"] / "litert" / "float32.tflite", 1e-4),
                      (model["out"] / "litert", 1e-4)):
    result, rows = _predict(path, task, model["data"])
    assert result.labelled == len(rows) == len(result.predictions)
    assert result.metrics[metric] == pytest.approx(want[metric], abs=bound), (path, task)
    assert set(result.metrics) == set(want) - {"loss"}


@pytest.mark.slow
@pytest.mark.parametrize("litert, variant", [("litert/int8.tflite", "int8"),
                                             ("litert", "float32")])
def test_predict_tflite_without_tensorflow(model, tmp_path, litert, variant):
  """The .tflite path of the CLI (a file, or convert's litert/ folder: its float32 model) in a
  process where importing TensorFlow fails; its accuracy equals convert's measurement of the
  same file (featurised by the task there)."""
  output = tmp_path / "predictions.tsv"
  argv = ["predict", f"--model={model['out'] / litert}",
          f"--input={model['data'] / 'movie_reviews' / 'dev.csv'}", "--task=movie_reviews",
          f"--output={output}", "--show=2", "--batch_size=5"]
  code = ("import runpy, sys; sys.modules['tensorflow'] = None; "
          "sys.modules['tensorflow_text'] = None; sys.modules['tf_keras'] = None; "
          f"sys.argv = {argv!r}; runpy.run_module('electra_tf.predict', run_name='__main__')")
  proc, lines = _run("-c", code, timeout=300)
  assert proc.returncode == 0, "\n".join(lines[-20:])
  assert not [line for line in lines if console.LOG_LINE.match(line)], lines
  spec = json.loads((model["out"] / "litert" / "litert.json").read_text())
  measured = spec["dev"]["movie_reviews"]["variants"][variant]["accuracy"]
  assert f"{variant}.tflite" in proc.stdout
  assert f"accuracy {measured:.2f}" in proc.stdout
  assert "examples/s" in proc.stdout and "15 labelled rows" in proc.stdout
  progress = [line for line in lines if line.startswith("predict: ")]
  assert progress[-1].startswith("predict: 15/15 rows (100%)")
  table = output.read_text().splitlines()
  header = table[0].split("\t")  # the input's columns, then the prediction's
  assert header[-4:-2] == ["prediction", "probability"] and "review" in header
  assert len(table) == 16 and {r.split("\t")[-4] for r in table[1:]} <= {"0", "1"}


@pytest.mark.slow
def test_litert_model_on_raw_text_equals_the_saved_model(model):
  import tensorflow_text  # noqa: F401

  loaded = tf.saved_model.load(str(model["out"] / "saved_model"))
  litert = model["out"] / "litert" / "float32.tflite"
  texts = ["A gorgeous, witty, seductive movie.", "Naïve café owners sell 東京 tours — $12!"]
  reviews = LiteRTModel(str(litert), "movie_reviews", num_threads=1)
  want = loaded.signatures["classify_text_movie_reviews"](
      text_a=tf.constant(texts), text_b=tf.constant(["", ""]))["probabilities"].numpy()
  for text, probabilities in zip(texts, want, strict=True):
    got = reviews.predict(text)
    labels = reviews.definition["labels"]
    assert list(got["probabilities"]) == labels
    np.testing.assert_allclose(list(got["probabilities"].values()), probabilities, atol=1e-5)
    assert got["label"] == labels[int(probabilities.argmax())]
  similarity = LiteRTModel(str(litert), "similarity")
  features = similarity.featurize("A man is playing a flute.", "A man plays the flute.")
  want = loaded.signatures["classify_similarity"](
      **{k: tf.constant([features[k]]) for k in ("input_ids", "input_mask", "segment_ids")})
  got = similarity.predict("A man is playing a flute.", "A man plays the flute.")
  assert got["score"] == pytest.approx(float(want["score"][0]), abs=1e-5)
  tagger = LiteRTModel(str(litert), "tag")
  words = "Confidence in the pound is widely expected to take another sharp dive".split()
  got = tagger.predict(words)["tags"]
  assert len(got) == len(words) and set(got) <= set(tagger.definition["labels"])


@pytest.mark.slow
def test_predict_unknown_label_names_file_and_line(model, tmp_path):
  bad = tmp_path / "dev.csv"
  bad.write_text("sentiment,review\n1,good\n7,bad\n", encoding="utf-8")
  predictor = predicting.open_model(str(model["out"] / "litert" / "int8.tflite"),
                                    "movie_reviews")
  rows = prediction_rows.read_rows(str(bad), predictor.definition, {})
  with pytest.raises(ValueError) as err:
    predicting.predict_rows(predictor, rows, 4, str(bad))
  assert str(err.value).startswith(f"{bad}:3: unknown label '7' (the model's labels: ")


@pytest.mark.slow
def test_dev_rows_gone_is_one_line(model, tmp_path):
  """A model whose data folder is gone still converts; the LiteRT measurement says why not."""
  from electra_tf.finetuning import registry
  from electra_tf.interop.conversion import finetuned_config
  from electra_tf.reading import model_tasks

  definitions = model_tasks.read_tasks(model["trial"])
  definitions["movie_reviews"]["data"] = str(tmp_path / "gone")
  config, _ = finetuned_config(model["trial"], {}, str(tmp_path), None)
  tasks = registry.model_tasks(config, definitions, model["trial"])
  dev = litert_eval.measure(str(model["out"] / "saved_model"),
                            {"int8": str(model["out"] / "litert" / "int8.tflite")},
                            tasks[:1], {"movie_reviews": "classify_movie_reviews"}, 10)
  assert dev == {"movie_reviews": {"not_measured": f"{tmp_path / 'gone'}: no dev file "
                                   "(dev.csv or dev.tsv or dev.jsonl)"}}
  assert litert_eval.summary_lines(dev) == [
      f"    movie_reviews: agreement with float32 not measured, no dev rows ({tmp_path / 'gone'}"
      ": no dev file (dev.csv or dev.tsv or dev.jsonl); --data_dir gives them)"]


def test_one_signature_table():
  kinds = {"rte": "classification", "sts": "regression", "chunk": "tagging", "squad": "span_qa"}
  assert signatures.signature_names(kinds) == {
      "rte": "classify_rte", "sts": "classify_sts", "chunk": "tag", "squad": "squad"}
  assert signatures.signature_names({"topic": "classification"}) == {"topic": "classify"}
  assert signatures.text_signature("classify_rte") == "classify_text_rte"
  assert signatures.text_signature("tag") is None
  with pytest.raises(ValueError, match="no export signature for task kind 'ranking'"):
    signatures.signature_names({"x": "ranking"})
  definitions = {"rte": {"kind": "classification"}, "topic": {"kind": "classification"}}
  assert signatures.by_signature(definitions) == {
      "classify_rte": {"kind": "classification", "task": "rte"},
      "classify_topic": {"kind": "classification", "task": "topic"}}


class _Task:
  """What ``litert_export`` reads of a task: its name, kind and definition."""

  def __init__(self, definition):
    self.name, self.kind, self._definition = definition["name"], definition["kind"], definition

  def definition(self):
    return dict(self._definition)


def test_litert_json_and_tasks_json_give_predict_the_same_task(tmp_path):
  """One signature -> definition map: the entries convert writes into litert.json and the
  ones predict builds from a SavedModel's tasks.json name the same signature and definition."""
  from electra_tf.interop import litert_export

  definitions = [
      {"name": "rte", "kind": "classification", "labels": ["yes", "no"], "data": "d/rte",
       "scorer": "scorers.AccuracyScorer"},
      {"name": "sts", "kind": "regression", "range": [0.0, 5.0], "data": "d/sts",
       "scorer": "scorers.RegressionScorer"},
      {"name": "chunk", "kind": "tagging", "labels": ["B-NP", "O"], "data": "d/chunk",
       "scorer": "scorers.EntityLevelF1Scorer"},
      {"name": "squad", "kind": "span_qa", "data": "d/squad"}]
  saved = tmp_path / "saved_model"
  litert = tmp_path / "litert"
  saved.mkdir()
  litert.mkdir()
  (saved / "saved_model.pb").write_bytes(b"")
  (saved / "hparams.json").write_text('{"max_seq_length": 16}')
  model_tasks.write_tasks(str(saved), definitions)
  tasks = [_Task(d) for d in definitions]
  names = signatures.signature_names({t.name: t.kind for t in tasks})
  kinds = litert_export.signature_kinds(tasks, names)
  assert list(kinds) == ["classify_rte", "classify_sts", "tag"]  # span QA: not LiteRT
  (litert / "int8.tflite").write_bytes(b"")
  (litert / "litert.json").write_text(json.dumps({"signatures": kinds}))
  for d in definitions[:3]:
    from_tflite = predicting.read_model_spec(str(litert / "int8.tflite"), d["name"]).definition
    from_saved = predicting.read_model_spec(str(saved), d["name"]).definition
    assert from_tflite.pop("outputs") == list(signatures.OUTPUTS[d["kind"]])
    assert from_tflite == {k: v for k, v in from_saved.items() if k != "data"}, d["name"]
    assert from_tflite["signature"] == names[d["name"]] and from_tflite["name"] == d["name"]


def test_reads_text_and_table_rows(tmp_path):
  definition = {"kind": "classification", "labels": ["neg", "pos"],
                "task_json": {"text_a": "review", "label": "sentiment"}}
  lines = tmp_path / "rows.txt"
  lines.write_text("first text\n\nsecond\tits pair\n", encoding="utf-8")
  rows = prediction_rows.read_rows(str(lines), definition, {})
  assert [(r.line, r.text_a, r.text_b, r.label) for r in rows] == [
      (1, "first text", None, None), (3, "second", "its pair", None)]
  table = tmp_path / "rows.jsonl"
  table.write_text('{"review": "ok", "sentiment": "pos", "id": "r1"}\n{"review": "bad"}\n')
  rows = prediction_rows.read_rows(str(table), definition, {})
  assert [(r.id, r.text_a, r.label) for r in rows] == [("r1", "ok", "pos"), (1, "bad", None)]
  tsv = tmp_path / "rows.tsv"
  tsv.write_text("a\tb\tc\nx\ty\tpos\n", encoding="utf-8")
  rows = prediction_rows.read_rows(str(tsv), definition, {"text_a": "1", "label": "c"})
  assert [(r.text_a, r.label) for r in rows] == [("y", "pos")]
  with pytest.raises(ValueError, match="missing column 'review' for text_a"):
    prediction_rows.read_rows(str(tsv), definition, {})
