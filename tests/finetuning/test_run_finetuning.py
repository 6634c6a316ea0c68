"""run_finetuning.py end to end on a few rows in the official layout (tmp_path):
train a few steps, evaluate, write results / weights / test outputs; bad input errors."""

import json
import os
import pathlib
import pickle
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import procs
from helpers.paths import REPO_ROOT

import run_finetuning as rf
from electra_tf import folder_lock, lock_lease
from electra_tf.config import FinetuningConfig
from electra_tf.finetuning import outputs, registry
from electra_tf.finetuning.builtin import tfds_glue
from electra_tf.finetuning.runner import glue_test_indices
from electra_tf.finetuning.trials import check_init_checkpoint

REPO = str(REPO_ROOT)
TINY = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2},
        "embedding_size": 16, "max_seq_length": 64, "train_batch_size": 8,
        "eval_batch_size": 8, "init_checkpoint": None, "seed": 3}


def _lines(path, start, stop, header=True):
  with open(path, encoding="utf-8") as f:
    rows = f.read().split("\n")
  return "\n".join(([rows[0]] if header else []) + rows[start:stop]) + "\n"


def _sentences(path, n):
  with open(path) as f:
    return "\n\n".join(f.read().split("\n\n")[:n]) + "\n\n"


@pytest.fixture(scope="module")
def data_root(data_dir, tmp_path_factory):
  """<root>/finetuning_data/{rte,sts,squad,chunk}: rows copied from tests/data (make_task_files.py).

  Test files start at row 100 so the GLUE ``index`` column differs from the row position.
  CoNLL-2000 has no dev split: dev.txt is the first sentences of test.txt.
  """
  root = tmp_path_factory.mktemp("data")
  glue = data_dir / "glue"
  files = {
      "rte/train.tsv": _lines(glue / "RTE" / "train.tsv", 1, 25),
      "rte/dev.tsv": _lines(glue / "RTE" / "dev.tsv", 1, 13),
      "rte/test.tsv": _lines(glue / "RTE" / "test.tsv", 101, 109),
      "sts/train.tsv": _lines(glue / "STS-B" / "train.tsv", 1, 17),
      "sts/dev.tsv": _lines(glue / "STS-B" / "dev.tsv", 1, 13),
      "sts/test.tsv": _lines(glue / "STS-B" / "test.tsv", 101, 107),
      "chunk/train.txt": _sentences(data_dir / "chunk" / "train.txt", 16),
      "chunk/dev.txt": _sentences(data_dir / "chunk" / "test.txt", 8),
  }
  with open(data_dir / "squad" / "dev-v2.0-small.json") as f:
    squad = f.read()
  for split in ("train", "dev", "test"):
    files[f"squad/{split}.json"] = squad
  for name, text in files.items():
    path = root / "finetuning_data" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
  return root


def _config(root, vocab_file, **hparams):
  return FinetuningConfig("m", str(root), **{**TINY, "vocab_file": vocab_file, **hparams})


def _checkpoint_shape(reference_dir):
  """The lane's electra_small_2l shape (its hparams.json; a small model's embedding 128 where
  it names none); its vocabulary is the lane's vocab.txt."""
  lane = json.loads((reference_dir / "electra_small_2l" / "hparams.json").read_text())
  return {"model_size": lane["model_size"], "vocab_size": lane["vocab_size"],
          "model_hparam_overrides": lane["model_hparam_overrides"],
          "embedding_size": lane.get("embedding_size", 128)}


def _read(path):
  with open(path) as f:
    return f.read()


@pytest.mark.slow
def test_all_task_families_multitask_from_official_checkpoint(data_root, reference_dir):
  """rte + sts + squad + chunk in one multi-task run initialised from electra_small_2l."""
  ckpt = str(reference_dir / "electra_small_2l" / "model.ckpt")
  config = _config(data_root, str(reference_dir / "vocab.txt"), **_checkpoint_shape(reference_dir),
                   task_names=["rte", "sts", "squad", "chunk"], init_checkpoint=ckpt,
                   num_train_epochs=0.25, max_query_length=24, doc_stride=32,
                   write_test_outputs=True)
  results = rf.run_finetuning(config)
  assert len(results) == 1 and list(results[0]) == ["rte", "sts", "squad", "chunk"]
  metrics = results[0]
  assert 0 <= metrics["rte"]["accuracy"] <= 100
  assert -100 <= metrics["sts"]["pearson"] <= 100
  assert metrics["squad"]["total"] == 14 and 0 <= metrics["squad"]["f1"] <= 100
  assert 0 <= metrics["chunk"]["f1"] <= 100
  for task in metrics:
    assert all(np.isfinite(v) for v in metrics[task].values()), task

  # results: official txt lines, official pickle, JSON
  txt = _read(config.results_txt).splitlines()
  assert [line.split(":")[0] for line in txt] == ["rte", "sts", "squad", "chunk"]
  assert txt[0] == "rte: " + " - ".join(f"{k}: {v:.2f}" for k, v in metrics["rte"].items())
  with open(config.results_pkl, "rb") as f:
    assert pickle.load(f) == results
  record = json.loads(_read(config.results_txt.replace(".txt", ".json")))
  assert record["num_trials"] == 1 and record["trials"] == results
  assert os.path.isfile(config.qa_preds_file("squad")) and os.path.isfile(
      config.qa_na_file("squad"))

  # weights: TF2 checkpoint + official-name copy; encoder moved only a little from the init
  model_dir = config.model_dir + "_1"
  assert tf.train.latest_checkpoint(model_dir)
  tuned = tf.train.load_checkpoint(os.path.join(model_dir, "tf1", "model.ckpt"))
  init = tf.train.load_checkpoint(ckpt)
  steps = int(tuned.get_tensor("global_step"))
  assert steps >= 2
  stored = tuned.get_variable_to_shape_map()
  weights = [n for n in stored if not n.endswith(("/adam_m", "/adam_v")) and n != "global_step"]
  # the optimizer's slots come along under the official names, one pair per weight
  assert sorted(n for n in stored if n.endswith(("/adam_m", "/adam_v"))) == sorted(
      f"{n}/{s}" for n in weights for s in ("adam_m", "adam_v"))
  names = [n for n in weights if n.startswith("electra/")]
  assert len(names) == 39
  diffs = [np.abs(tuned.get_tensor(n) - init.get_tensor(n)).max() for n in names]
  # AdamWeightDecay moves a weight by < 10 lr per step (lr 1e-4); a random init is ~0.02 off
  assert 0 < max(diffs) < 1e-3 * steps
  assert {n.split("/")[1] for n in tuned.get_variable_to_shape_map()
          if n.startswith("task_specific/")} == {"rte", "sts", "squad", "chunk"}

  # test outputs: GLUE submission TSVs with the test files' index column, SQuAD JSON
  test_dir = os.path.dirname(config.test_predictions("rte", "test", 1))
  rte = _read(os.path.join(test_dir, "glue_submission_1", "RTE.tsv")).splitlines()
  assert rte[0] == "index\tprediction" and [r.split("\t")[0] for r in rte[1:]] == [
      str(i) for i in range(100, 108)]
  assert {r.split("\t")[1] for r in rte[1:]} <= {"entailment", "not_entailment"}
  sts = _read(os.path.join(test_dir, "glue_submission_1", "STS-B.tsv")).splitlines()[1:]
  assert len(sts) == 6 and all(0.0 <= float(r.split("\t")[1]) <= 5.0 for r in sts)
  with open(config.test_predictions("sts", "test", 1), "rb") as f:
    assert sorted(pickle.load(f)) == list(range(6))
  squad = json.loads(_read(config.test_predictions("squad", "test", 1)[:-4] + ".json"))
  assert len(squad) == 14 and all(isinstance(v, str) for v in squad.values())


@pytest.mark.slow
def test_trials_median_reuse_and_eval_only(data_root, vocab_file, tmp_path):
  """Two seeded trials + median; keep_all_models=False keeps only the last trial's weights;
  a do_train=False run restores them and reproduces that trial's dev metrics."""
  config = _config(data_root, vocab_file, task_names=["rte"], num_trials=2,
                   num_train_epochs=2.0, keep_all_models=False,
                   preprocessed_data_dir=str(tmp_path / "tfrecords"))
  results = rf.run_finetuning(config)
  assert len(results) == 2
  txt = _read(config.results_txt).splitlines()
  assert len(txt) == 3 and txt[2].startswith("rte median: accuracy: ")
  record = json.loads(_read(config.results_txt.replace(".txt", ".json")))
  for metric in ("accuracy", "loss"):
    want = float(np.median([r["rte"][metric] for r in results]))
    assert record["median"]["rte"][metric] == pytest.approx(want)
  assert not os.path.exists(config.model_dir + "_1")
  assert tf.train.latest_checkpoint(config.model_dir + "_2")
  for folder in ("_trials", "_2"):  # the run's and the trial's locks are released
    assert not os.path.exists(os.path.join(config.model_dir + folder, folder_lock.LOCK_NAME))
  train_file = tmp_path / "tfrecords" / "rte_train.tfrecord"
  mtime = os.path.getmtime(train_file)

  again = _config(data_root, vocab_file, task_names=["rte"], do_train=False,
                  preprocessed_data_dir=str(tmp_path / "tfrecords"))
  # this run's trial 1 reads <model_dir>_1: move the kept trial-2 weights there
  os.rename(config.model_dir + "_2", config.model_dir + "_1")
  assert rf.run_finetuning(again) == [results[1]]
  assert os.path.getmtime(train_file) == mtime  # cached features reused


def test_a_second_run_on_the_same_model_dir_is_refused(data_root, vocab_file, tmp_path):
  config = _config(data_root, vocab_file, task_names=["rte"], num_trials=2,
                   preprocessed_data_dir=str(tmp_path / "tfrecords"),
                   model_dir=str(tmp_path / "rte_model"))
  lock = pathlib.Path(config.model_dir + "_trials", folder_lock.LOCK_NAME)
  with procs.renewed_lock(lock, pid=os.getppid(), start=lock_lease.proc_start(os.getppid()),
                          command="python run_finetuning.py x"):  # a live run renewing it
    with pytest.raises(folder_lock.FolderLockedError) as err:
      rf.run_finetuning(config)
  assert str(err.value) == (
      f"{config.model_dir}_trials is in use by another run (host {socket.gethostname()}, pid "
      f"{os.getppid()}, since 2026-01-02 03:04:05 UTC, command: python run_finetuning.py x); "
      "wait for it to end or stop it")
  assert not os.path.exists(config.model_dir + "_1")  # no trial touched


@pytest.mark.slow
def test_same_seed_same_results(data_root, vocab_file, tmp_path):
  results = []
  for name in ("a", "b"):
    config = _config(data_root, vocab_file, task_names=["sts"], num_train_epochs=1.0,
                     preprocessed_data_dir=str(tmp_path / name))
    config.model_dir = str(tmp_path / name / "model")
    results.append(rf.run_finetuning(config))
  assert results[0] == results[1]


def test_bad_input_is_a_one_line_error(data_root, vocab_file, tmp_path):
  with pytest.raises(ValueError, match="Unknown task 'rtee'; known tasks: cola, sst, mrpc"):
    registry.build_tasks(_config(data_root, vocab_file, task_names=["rtee"]))
  with pytest.raises(FileNotFoundError, match="data folder for task 'cola' not found"):
    registry.build_tasks(_config(data_root, vocab_file, task_names=["rte", "cola"]))
  with pytest.raises(FileNotFoundError, match="vocab file not found"):
    registry.build_tasks(_config(data_root, str(tmp_path / "no_vocab.txt"), task_names=["rte"]))
  missing = _config(data_root, vocab_file, task_names=["rte"],
                    init_checkpoint=str(tmp_path / "nothing"))
  with pytest.raises(FileNotFoundError, match='"init_checkpoint": null'):
    check_init_checkpoint(missing)
  default = FinetuningConfig("m", str(data_root), task_names=["rte"])  # models/m: absent
  with pytest.raises(FileNotFoundError, match="init_checkpoint"):
    check_init_checkpoint(default)


@pytest.mark.parametrize("args,message", [
    (["--data-dir", "{root}", "--model-name", "m", "--hparams", '{{"task_names": ["rtee"]}}'],
     "Unknown task 'rtee'; known tasks: cola, "),
    (["--data_dir", "{root}", "--model_name", "m", "--hparams", '{{"task_names": ["mnli"]}}'],
     "data folder for task 'mnli' not found: {root}/finetuning_data/mnli"),
])
def test_cli_errors(data_root, args, message):
  root = str(data_root)
  proc = subprocess.run([sys.executable, os.path.join(REPO, "run_finetuning.py"),
                         *[a.format(root=root) for a in args]],
                        capture_output=True, text=True, timeout=120, cwd=REPO,
                        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
  assert proc.returncode == 1
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("run_finetuning.py: error: ") and message.format(root=root) in last


# --------------------------------------------------------------------------------------------
# Output formats and TFDS conversion
# --------------------------------------------------------------------------------------------


def test_glue_submission_rows(data_root, vocab_file):
  tasks = {t.name: t for t in registry.build_tasks(_config(data_root, vocab_file,
                                                     task_names=["rte", "sts"]))}
  rows = outputs.glue_submission_rows(tasks["rte"], {1: np.array([0.1, 2.0]),
                                                     0: np.array([3.0, -1.0])})
  assert rows == [("0", "entailment"), ("1", "not_entailment")]
  rows = outputs.glue_submission_rows(tasks["sts"], {0: np.float32(0.5), 1: np.float32(1.3),
                                                     2: np.float32(-0.1)}, {0: "7", 1: "8",
                                                                            2: "9"})
  assert rows == [("7", "2.500"), ("8", "5.000"), ("9", "0.000")]
  assert glue_test_indices(tasks["rte"], "test") == {i: str(100 + i) for i in range(8)}


def test_median_results():
  trials = [{"a": {"x": 1.0, "y": 5.0}}, {"a": {"x": 3.0, "y": 4.0}}, {"a": {"x": 2.0}}]
  assert outputs.median_results(trials) == {"a": {"x": 2.0, "y": 4.5}}


def test_tfds_rows_become_task_examples(data_root, vocab_file, data_dir, tmp_path):
  """TFDS GLUE rows (real RTE / STS-B rows in TFDS form) -> the same examples as the TSVs."""
  tasks = {t.name: t for t in registry.build_tasks(_config(data_root, vocab_file,
                                                     task_names=["rte", "sts"]))}
  for name, split, label_names in (("rte", "dev", ["entailment", "not_entailment"]),
                                   ("sts", "train", [])):
    task = tasks[name]
    want = task.get_examples(split)
    n = len(want) // (2 if task.swap_copy(split) else 1)
    _, field_a, field_b = tfds_glue.TFDS_GLUE[name]
    rows = [{"idx": i, field_a: ex.text_a.encode(), field_b: ex.text_b.encode(),
             "label": (label_names.index(ex.label) if label_names else np.float32(ex.label))}
            for i, ex in enumerate(want[:n])][::-1]  # TFDS order is not the file order
    got = tfds_glue.to_examples(task, split, rows, label_names)
    assert [(e.eid, e.text_a, e.text_b, e.label) for e in got] == [
        (e.eid, e.text_a, e.text_b, pytest.approx(e.label) if name == "sts" else e.label)
        for e in want]
  assert tfds_glue.tfds_split("mnli", "dev_mismatched") == ("glue/mnli", "validation_mismatched")
  assert tfds_glue.tfds_split("mnli", "diagnostic") == ("glue/ax", "test")
  with pytest.raises(FileNotFoundError, match="glue/rte is not prepared"):
    tfds_glue.read_tfds("glue/rte", "validation", str(tmp_path / "tfds"))
