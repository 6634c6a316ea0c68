"""The demo's summary (data_prep/demo_summary.py): its closing sentence says what the run's own
files measured: the probe's paired verdict, the fine-tuned median, the int8 model's labels."""

import csv
import json
import subprocess
import sys

import numpy as np
from helpers.paths import REPO_ROOT

from data_prep import demo_summary
from electra_tf.probing import paired, verdict

LABELS = ["asyncio", "email", "typing"]


def _probe(step, better, worse, rows=384):
  losses = np.r_[np.zeros(better), np.ones(worse), np.zeros(rows - better - worse)]
  reference = np.r_[np.ones(better), np.zeros(worse), np.zeros(rows - better - worse)]
  compared = paired.compare(losses, reference, paired.probe_alpha(3))
  return verdict.probe_record(step, {"cls": 0.3, "mean": 0.5}, compared)


def _demo_dir(tmp_path, history):
  """A finished demo's files, as the run writes them."""
  (tmp_path / "models/demo/results").mkdir(parents=True)
  (tmp_path / "models/demo/probe").mkdir()
  (tmp_path / "finetuning_data/topic").mkdir(parents=True)
  (tmp_path / "topic_export/litert").mkdir(parents=True)
  (tmp_path / "models/demo/results/unsup_results.txt").write_text(
      "disc_auc = 0.81\ndisc_precision = 0.97\ndisc_recall = 0.27\nglobal_step = 300\n"
      "masked_lm_accuracy = 0.15\n")
  (tmp_path / "finetuning_data/topic/task.json").write_text(json.dumps({"labels": LABELS}))
  (tmp_path / "models/demo/results/topic_results.json").write_text(json.dumps(
      {"trials": [{"topic": {"accuracy": a}} for a in (50.0, 61.5)],
       "median": {"topic": {"accuracy": 50.0}}}))
  (tmp_path / "models/demo/probe/topic.json").write_text(json.dumps(
      {"history": history, "num_probes": 3}))
  (tmp_path / "topic_export/litert/int8.tflite").write_bytes(b"\0" * 1000)
  for name, column, values in (("new_sentences.csv", "written_for", LABELS),
                               ("new_sentences_predictions.csv", "prediction",
                                ["asyncio", "typing", "typing"])):
    with open(tmp_path / name, "w", encoding="utf-8", newline="") as f:
      writer = csv.writer(f)
      writer.writerow(["sentence", column, "probability"])
      writer.writerows([f"sentence {i}", v, "0.5"] for i, v in enumerate(values))
  return tmp_path


def test_every_probe_above_says_so_and_nothing_unmeasured(tmp_path):
  history = [_probe(s, 80, 10) for s in (100, 200, 300)]
  lines = demo_summary.summary_lines(str(_demo_dir(tmp_path, history)), ".venv", 1,
                                     [10, 20, 3, 40])
  said = lines[-2]  # before the wall time
  assert said.startswith("  After 300 steps of pre-training the frozen features carry more of "
                         "'topic' than random-init ones\n  (mean-pooled probe +0.182 [+0.")
  assert "above random init in 3 of 3 probes); fine-tuned, 'topic' reaches a median dev " \
         "accuracy of 50.0\n  (chance 33.3), and the int8 model gives 2 of 3 new" in said
  for unmeasured in ("edge past", "at times", "scores higher", "initialisation", "transfer.md"):
    assert unmeasured not in said
  assert "above random init in 3 of 3 probe(s), steps 100-300; at step 300" in "\n".join(lines)


def test_no_probe_above_says_the_features_read_like_random_ones(tmp_path):
  history = [_probe(s, 20, 18) for s in (100, 200, 300)]
  assert not any(h["above"] for h in history)
  demo_dir = _demo_dir(tmp_path, history)
  out = subprocess.run([sys.executable, str(REPO_ROOT / "data_prep" / "demo_summary.py"),
                        str(demo_dir), ".venv", "1", "10", "20", "3", "40"], text=True,
                       capture_output=True, check=True, cwd=tmp_path).stdout
  assert ("  After 300 steps of pre-training a linear read-out of the frozen features cannot be "
          "told\n  from one of random-init features on 'topic' (mean-pooled probe +0.005 "
          "[-0.") in out
  assert "above random init in 0 of 3 probes); fine-tuned" in out
  assert "total wall time: 40 s" in out


def test_a_last_probe_below_random_init_says_less(tmp_path):
  history = [_probe(100, 30, 10), _probe(200, 5, 60)]
  assert history[-1]["high"] < 0
  said = demo_summary.summary_lines(str(_demo_dir(tmp_path, history)), ".venv", 1,
                                    [10, 20, 3, 40])[-2]
  assert said.startswith("  After 200 steps of pre-training the frozen features carry less of "
                         "'topic' than random-init ones\n  (mean-pooled probe -0.143 [-0.")
  assert "above random init in 1 of 2 probes)" in said
