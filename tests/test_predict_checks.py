"""predict checks everything before its model loads (one line naming the file and row), streams
rows into a staged output that appears only when complete, keeps the input's columns beside
each prediction and names the rows cut to max_seq_length. On the tiny int8 LiteRT model of
``helpers.tiny_litert`` (no training), run as the command, without TensorFlow."""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from helpers import procs, tiny_litert
from helpers.paths import REPO_ROOT

from electra_tf.interop import predicting, prediction_output, prediction_rows, serving_models

ENV = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
ENV.update(CUDA_VISIBLE_DEVICES="-1", PYTHONPATH=str(REPO_ROOT))
BLOCK_TF = ("import sys; sys.modules['tensorflow'] = None; sys.modules['tf_keras'] = None; "
            "sys.argv = ['predict'] + sys.argv[1:]; import runpy; "
            "runpy.run_module('electra_tf.predict', run_name='__main__')")


@pytest.fixture(scope="module")
def export(tiny_litert_export):
  return tiny_litert_export


@pytest.fixture(scope="module")
def broken(export, tmp_path_factory):
  """A copy of the LiteRT folder whose .tflite is not a model: loading it fails, so a run
  that reports anything else checked before loading."""
  folder = tmp_path_factory.mktemp("broken") / "litert"
  shutil.copytree(export / "litert", folder)
  (folder / "int8.tflite").write_bytes(b"not a flatbuffer")
  return folder / "int8.tflite"


def _predict(*args, **popen):
  return subprocess.run([sys.executable, "-c", BLOCK_TF, *map(str, args)], cwd=REPO_ROOT,
                        env=ENV, capture_output=True, text=True, timeout=120, **popen)


def _csv(path, text):
  path.write_text(text, encoding="utf-8")
  return path


def test_broken_model_fails_only_when_loaded(broken, tmp_path):
  """The fixture's premise: a good input reaches the load, which fails."""
  rows = _csv(tmp_path / "rows.csv", "text_a\nfine\n")
  proc = _predict(f"--model={broken}", f"--input={rows}")
  assert proc.returncode == 1 and "predict: error:" in proc.stderr
  assert not os.path.exists(tmp_path / "rows.predictions.jsonl")


@pytest.mark.parametrize("name, text, flags, want", [
    ("blank.csv", "text_a,label\nfine,entailment\nbad,\n", [], "{input}:3: blank label"),
    ("unknown.csv", "text_a,label\nfine,entailment\nbad,maybe\n", [],
     "{input}:3: unknown label 'maybe' (the model's labels: entailment, not_entailment)"),
    ("nocolumn.csv", "review,label\nfine,entailment\n", [],
     "{input}:1: missing column 'text_a' for text_a (columns: review, label; --text_a names "
     "another)"),
    ("nocolumn.jsonl", '{"text_a": "ok"}\n{"review": "bad"}\n', [],
     "{input}:2: missing column \"text_a\" for text_a"),
    ("empty.csv", "text_a,label\n", [], "{input}: no rows to predict"),
    ("empty.txt", "\n\n", [], "{input}: no rows to predict"),
    ("rows.parquet", "x", [], "{input}: unknown input format .parquet"),
    ("gone.csv", None, [], "input file not found: {input}"),
    ("rows.csv", "text_a\nfine\n", ["--output={tmp}/out.parquet"],
     "--output {tmp}/out.parquet: unknown format .parquet (known: .jsonl, .tsv, .csv)"),
    ("rows.csv", "text_a\nfine\n", ["--output={tmp}/no/such/out.csv"],
     "--output {tmp}/no/such/out.csv: no folder {tmp}/no/such"),
    ("clash.csv", "text_a,prediction\nfine,x\n", ["--output={tmp}/out.csv"],
     "input column 'prediction' has the name of an output column"),
    ("rows.csv", "text_a\nfine\n", ["--task=sts"], "has no task 'sts' (its tasks: rte)"),
])
def test_each_refusal_is_one_line_before_the_model_loads(broken, tmp_path, name, text, flags,
                                                         want):
  path = tmp_path / name
  if text is not None:
    path.write_text(text, encoding="utf-8")
  proc = _predict(f"--model={broken}", f"--input={path}",
                  *(f.format(tmp=tmp_path) for f in flags))
  assert proc.returncode == 1, proc.stdout + proc.stderr
  assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
  assert proc.stderr.startswith("predict: error: ")
  assert want.format(input=path, tmp=tmp_path) in proc.stderr, proc.stderr
  assert [p for p in os.listdir(tmp_path) if p != name] == []  # nothing written


def test_input_is_checked_before_a_missing_model(tmp_path):
  proc = _predict(f"--model={tmp_path / 'gone.tflite'}", f"--input={tmp_path / 'gone.csv'}")
  assert proc.stderr.splitlines() == [f"predict: error: input file not found: "
                                      f"{tmp_path / 'gone.csv'}"]


def test_model_without_tasks_json_names_the_command_that_fixes_it(export, tmp_path):
  old = tmp_path / "old_model"
  shutil.copytree(export / "tf1", old)
  (old / "tasks.json").unlink()
  with pytest.raises(ValueError) as err:
    serving_models.read_model_spec(str(old))
  message = str(err.value)
  assert "\n" not in message and message.startswith(f"{old} has no tasks.json")
  assert f"python -m electra_tf.convert --checkpoint {old} --data_dir" in message


def test_keeps_the_input_columns_and_names_truncated_rows(export, tmp_path):
  long = " ".join(["word"] * 100)  # max_seq_length 64
  rows = tmp_path / "rows.jsonl"
  rows.write_text("".join(json.dumps(r) + "\n" for r in [
      {"id": "a", "text_a": "A man plays.", "label": "entailment", "source": "web"},
      {"id": "b", "text_a": long, "label": "not_entailment", "source": "book"},
      {"id": "c", "text_a": "It rains.", "text_b": long, "source": "news"}]), encoding="utf-8")
  for output in (tmp_path / "out.jsonl", tmp_path / "out.csv"):
    proc = _predict(f"--model={export / 'litert'}", f"--input={rows}", f"--output={output}",
                    "--show=1")
    assert proc.returncode == 0, proc.stderr
    assert ("2 of 3 rows longer than max_seq_length 64 (tokens past it dropped): lines 2, 3"
            in proc.stdout), proc.stdout
    assert "(2 labelled rows)" in proc.stdout and "batch 1: a .tflite" in proc.stdout
  written = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
  assert [list(r)[:4] for r in written[:2]] == [["id", "text_a", "label", "source"]] * 2
  assert written[2]["text_b"] == long and written[2]["source"] == "news"
  assert {r["prediction"] for r in written} <= set(tiny_litert.LABELS)
  assert set(written[0]["probabilities"]) == set(tiny_litert.LABELS)
  with open(tmp_path / "out.csv", encoding="utf-8") as f:
    table = list(csv.reader(f))
  assert table[0] == ["id", "text_a", "label", "source", "text_b", "prediction", "probability",
                      "p(entailment)", "p(not_entailment)"]
  assert [r[:4] for r in table[1:3]] == [["a", "A man plays.", "entailment", "web"],
                                         ["b", long, "not_entailment", "book"]]


def test_an_error_midway_leaves_no_output(export, tmp_path):
  rows = _csv(tmp_path / "rows.csv", "text_a\n" + "".join(f"row {i}\n" for i in range(40)))
  output = tmp_path / "out.csv"
  output.write_text("an older run's output\n")
  definition = serving_models.read_model_spec(str(export / "litert")).definition
  found = prediction_rows.check_rows(str(rows), definition, {})
  predictor = serving_models.open_model(str(export / "litert"))
  calls = []
  run = predictor.run_batch

  def failing(batch):
    calls.append(1)
    if len(calls) == 5:  # the warm-up, then 3 batches of 1 written
      raise KeyboardInterrupt
    return run(batch)
  predictor.run_batch = failing
  with pytest.raises(KeyboardInterrupt), prediction_output.staged_writer(
      str(output), definition, found.fields) as write:
    predicting.predict_rows(predictor, prediction_rows.iter_rows(str(rows), definition, {}),
                            8, str(rows), found.rows, write)
  assert output.read_text() == "an older run's output\n"
  assert sorted(os.listdir(tmp_path)) == ["out.csv", "rows.csv"]  # no staged leftovers


def test_sigint_midway_leaves_no_output(export, tmp_path):
  rows = _csv(tmp_path / "rows.txt", "".join(f"sentence number {i} of many\n"
                                             for i in range(30000)))
  output = tmp_path / "out.jsonl"
  proc = subprocess.Popen([sys.executable, "-c", BLOCK_TF, f"--model={export / 'litert'}",
                           f"--input={rows}", f"--output={output}"], cwd=REPO_ROOT, env=ENV,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          preexec_fn=procs.sigint_as_a_terminal)
  first = proc.stdout.readline()  # the first progress line: rows are being written
  assert first.startswith("predict: 3000/30000 rows (10%)"), first
  staged = [p for p in os.listdir(tmp_path) if p.startswith(".out.jsonl.tmp")]
  proc.send_signal(signal.SIGINT)
  proc.communicate(timeout=60)
  assert proc.returncode != 0 and staged
  assert sorted(os.listdir(tmp_path)) == ["rows.txt"]


CHUNK = {"name": "chunk", "kind": "tagging", "labels": ["B-NP", "E-NP", "O", "S-NP"],
         "spans": True, "scorer": "scorers.EntityLevelF1Scorer"}


def _sentence(i, name):
  words, tags = ["The", f"cat{i}", "sat"], ["B-NP", "I-NP", "O"]
  if name.endswith(".jsonl"):
    return json.dumps({"tokens": words, "tags": tags}) + "\n"
  return "".join(f"{w} NN {t}\n" for w, t in zip(words, tags, strict=True)) + "\n"


@pytest.mark.parametrize("name", ["rows.conll", "rows.jsonl"])
def test_tagged_files_are_read_as_they_go(tmp_path, name):
  """A sentence appended after the first row was handed out is read: the file was not read
  whole (its 3000 sentences are far more than one read buffer)."""
  path = tmp_path / name
  path.write_text("".join(_sentence(i, name) for i in range(3000)), encoding="utf-8")
  found = prediction_rows.check_rows(str(path), CHUNK, {})
  assert (found.rows, found.labelled, found.tagged) == (3000, 3000, True)
  rows = prediction_rows.iter_rows(str(path), CHUNK, {}, found.tagged)
  assert next(rows).words == ["The", "cat0", "sat"]
  with open(path, "a", encoding="utf-8") as f:
    f.write(_sentence("_late", name))
  rest = list(rows)
  assert len(rest) == 3000 and rest[-1].words == ["The", "cat_late", "sat"]
  assert rest[-1].label == ["B-NP", "I-NP", "O"]


def test_tagged_file_checks_name_the_line(tmp_path):
  """Every sentence is checked before any model loads: an unknown tag in the last one is one
  line naming its first line; a word without a tag reads the whole file without tags."""
  path = tmp_path / "rows.conll"
  path.write_text("".join(_sentence(i, ".conll") for i in range(50)) + "A NN B-VP\n",
                  encoding="utf-8")
  with pytest.raises(ValueError) as err:
    prediction_rows.check_rows(str(path), CHUNK, {})
  assert str(err.value).startswith(f"{path}:201: unknown tag 'S-VP' (the model's tags: ")
  path.write_text(_sentence(0, ".conll") + "".join(_sentence(i, ".conll") + "bare\n\n"
                                                   for i in range(1, 3)), encoding="utf-8")
  found = prediction_rows.check_rows(str(path), CHUNK, {})
  assert (found.rows, found.labelled, found.tagged, found.fields) == (5, 0, False, ["words"])
  rows = list(prediction_rows.iter_rows(str(path), CHUNK, {}, found.tagged))
  assert [r.line for r in rows] == [1, 5, 9, 11, 15] and {r.label for r in rows} == {None}
  assert prediction_rows.check_rows(str(path), CHUNK, {}, max_rows=2).tagged is True
