r"""The summary ``run_demo.sh`` ends on, built only from what the run wrote in DEMO_DIR.

  python data_prep/demo_summary.py demo_out .venv <median seed> <pre-training s> \
      <fine-tuning s> <export s> <total s>

It reads the pre-training eval (``models/demo/results/unsup_results.txt``), the probe's state
(``models/demo/probe/topic.json``: each probe's paired verdict against random init, see
``electra_tf/probing/verdict.py``), the fine-tuning results, the int8 model and its predictions
on the new sentences. Its closing sentence says what those measured, nothing else: whether the
last probe was above random init, below it (its interval under zero) or neither, in how many
probes it was above, the fine-tuned median against chance,
and how many new sentences the int8 model gave the package they were written for.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from electra_tf import console  # noqa: E402
from electra_tf.probing import verdict  # noqa: E402


def probe_lines(state: Mapping[str, Any]) -> list[str]:
  """The last probe of 'topic' and the run's verdict, in words."""
  history = state["history"]
  last = history[-1]
  return [f"     probe of 'topic' (a linear read-out of the frozen features) at step "
          f"{last['step']}: [CLS] {last['cls']:.3f}, mean {last['mean']:.3f};",
          f"     {verdict.run_words(history, state['num_probes'])} (third panel of the picture)"]


def closing(state: Mapping[str, Any], median: float, num_labels: int, matched: int,
            sentences: int) -> list[str]:
  """The closing sentence: this run's probe verdict, fine-tuned median and int8 labels."""
  history = state["history"]
  last, above = history[-1], sum(h["above"] for h in history)
  if last["above"]:
    probe = (f"After {last['step']} steps of pre-training the frozen features carry more of "
             f"'topic' than random-init ones\n  (mean-pooled probe {verdict.interval(last)}, "
             f"above random init in {above} of {len(history)} probes)")
  elif last["high"] < 0:  # the whole interval below zero: worse than random init
    probe = (f"After {last['step']} steps of pre-training the frozen features carry less of "
             f"'topic' than random-init ones\n  (mean-pooled probe {verdict.interval(last)}, "
             f"above random init in {above} of {len(history)} probes)")
  else:
    probe = (f"After {last['step']} steps of pre-training a linear read-out of the frozen "
             f"features cannot be told\n  from one of random-init features on 'topic' "
             f"(mean-pooled probe {verdict.interval(last)}, above random init in {above} of "
             f"{len(history)} probes)")
  return [f"  {probe}; fine-tuned, 'topic' reaches a median dev accuracy of {median:.1f}\n"
          f"  (chance {100 / num_labels:.1f}), and the int8 model gives {matched} of {sentences} "
          "new sentences the package they were\n  written for. What these numbers mean and "
          "what they do not: docs/demo.md."]


def _read(path: str) -> Any:
  with open(path, encoding="utf-8") as f:
    return json.load(f) if path.endswith(".json") else list(csv.DictReader(f))


def summary_lines(demo_dir: str, venv: str, seed: int, seconds: Sequence[int]) -> list[str]:
  """Every line of the demo's summary (``seconds``: pre-training, fine-tuning, export, total)."""
  train_s, ft_s, export_s, total_s = seconds
  with open(f"{demo_dir}/models/demo/results/unsup_results.txt", encoding="utf-8") as f:
    pre = {k: float(v) for k, v in (line.split(" = ") for line in f if " = " in line)}
  labels = _read(f"{demo_dir}/finetuning_data/topic/task.json")["labels"]
  results = _read(f"{demo_dir}/models/demo/results/topic_results.json")
  state = _read(f"{demo_dir}/models/demo/probe/topic.json")
  seeds = [trial["topic"]["accuracy"] for trial in results["trials"]]
  median = results["median"]["topic"]["accuracy"]
  int8 = f"{demo_dir}/topic_export/litert/int8.tflite"
  sentences = _read(f"{demo_dir}/new_sentences.csv")
  predictions = _read(f"{demo_dir}/new_sentences_predictions.csv")
  width = max(len(label) for label in labels)
  lines = [
      f"  1. pre-training: {int(pre['global_step'])} steps in {train_s} s; final eval: disc AUC "
      f"{pre['disc_auc']:.3f} (chance 0.5), disc recall {pre['disc_recall']:.3f},\n"
      f"     disc precision {pre['disc_precision']:.3f}, masked-LM accuracy "
      f"{pre['masked_lm_accuracy']:.3f}; learning curves: {demo_dir}/learning_curves.png",
      f"     TensorBoard: {venv}/bin/tensorboard --logdir {demo_dir}/models/demo",
      *probe_lines(state),
      f"  2. fine-tuning 'topic' (which of {len(labels)} packages a docstring sentence is from, "
      f"chance {100 / len(labels):.1f}), {len(seeds)} seed(s)\n     in {ft_s} s: dev accuracy "
      f"{median:.1f} (median; seeds {' '.join(f'{v:.1f}' for v in seeds)})",
      f"  3. LiteRT int8 of seed {seed}'s model: {int8} ({os.path.getsize(int8) / 1e6:.1f} MB), "
      f"{export_s} s",
      f"  4. the int8 model on {len(predictions)} new sentences, each written for one package "
      "(predicted label, probability):"]
  for row, predicted in zip(sentences, predictions, strict=True):
    lines.append(f"     {predicted['prediction']:<{width}} "
                 f"{float(predicted['probability']):.2f}  [{row['written_for']}] "
                 f"{row['sentence']}")
  matched = sum(p["prediction"] == s["written_for"]
                for s, p in zip(sentences, predictions, strict=True))
  return lines + closing(state, median, len(labels), matched, len(sentences)) + [
      f"  total wall time: {total_s} s (setting up {venv} included)"]


def main(argv: Sequence[str]) -> None:
  demo_dir, venv, *numbers = argv
  seed, *seconds = map(int, numbers)
  console.summary("Demo summary", summary_lines(demo_dir, venv, seed, seconds))


if __name__ == "__main__":
  main(sys.argv[1:])
