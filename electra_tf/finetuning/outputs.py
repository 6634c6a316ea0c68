"""What a fine-tuning run writes: the results record (official ``write_results``) with the median
over trials, GLUE test predictions in the submission format, SQuAD test prediction JSON.

Results files (official names from ``FinetuningConfig``): ``results_txt`` has one official line
``<task>: <metric>: <value> - ...`` per trial and task (values with 2 decimals), then, with
several trials, ``<task> median: ...`` lines; ``results_pkl`` is the official pickle (a list with
one ``{task: {metric: value}}`` dict per trial); ``<results_txt stem>.json`` has ``trials``,
``median`` and ``num_trials``.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from electra_tf import atomic_io

TrialResults = Mapping[str, Mapping[str, float]]

# (task, split) -> GLUE benchmark submission file name.
GLUE_SUBMISSION_FILES: dict[tuple[str, str], str] = {
    ("cola", "test"): "CoLA.tsv", ("sst", "test"): "SST-2.tsv", ("mrpc", "test"): "MRPC.tsv",
    ("sts", "test"): "STS-B.tsv", ("qqp", "test"): "QQP.tsv",
    ("mnli", "test_matched"): "MNLI-m.tsv", ("mnli", "test_mismatched"): "MNLI-mm.tsv",
    ("mnli", "diagnostic"): "AX.tsv", ("qnli", "test"): "QNLI.tsv", ("rte", "test"): "RTE.tsv",
    ("wnli", "test"): "WNLI.tsv",
}
GLUE_TASKS = ("cola", "mrpc", "mnli", "sst", "rte", "qnli", "qqp", "sts", "wnli")


def _atomic_write(path: str, data: bytes | str) -> None:
  atomic_io.make_dirs(os.path.dirname(path) or ".")
  atomic_io.write_bytes(path, data if isinstance(data, bytes) else data.encode("utf-8"))


def median_results(results: Sequence[TrialResults]) -> dict[str, dict[str, float]]:
  """Per task and metric, the median over the trials that report it."""
  out: dict[str, dict[str, float]] = {}
  for trial in results:
    for task, metrics in trial.items():
      for metric in metrics:
        if metric not in out.setdefault(task, {}):
          values = [r[task][metric] for r in results if task in r and metric in r[task]]
          out[task][metric] = float(np.median(values))
  return out


def _line(task: str, metrics: Mapping[str, float]) -> str:
  return task + ": " + " - ".join(f"{k}: {v:.2f}" for k, v in metrics.items()) + "\n"


def write_results(results: Sequence[TrialResults], results_txt: str, results_pkl: str) -> str:
  """Writes the txt, pickle and JSON records of all trials so far; returns the JSON path."""
  lines = [_line(task, metrics) for trial in results for task, metrics in trial.items()
           if task not in ("time", "global_step")]
  median = median_results(results)
  if len(results) > 1:
    lines += [_line(f"{task} median", metrics) for task, metrics in median.items()]
  _atomic_write(results_txt, "".join(lines))
  _atomic_write(results_pkl, pickle.dumps([dict(r) for r in results]))
  json_path = os.path.splitext(results_txt)[0] + ".json"
  record = {"num_trials": len(results), "trials": [dict(r) for r in results], "median": median}
  _atomic_write(json_path, json.dumps(record, indent=2, sort_keys=True) + "\n")
  return json_path


def write_pickle(obj: Any, path: str) -> None:
  _atomic_write(path, pickle.dumps(obj))


def write_json(obj: Any, path: str) -> None:
  _atomic_write(path, json.dumps(obj, indent=2) + "\n")


def glue_submission_rows(task: Any, predictions: Mapping[int, np.ndarray],
                         indices: Mapping[int, str] | None = None) -> list[tuple[str, str]]:
  """(index, label) rows of a GLUE submission file, in eid order.

  ``predictions``: eid -> the head's logits [n_labels] (classification) or prediction []
  (regression, scaled back to the task's range and clipped to it). ``indices``: eid -> the
  test file's ``index`` column (default: the eid, which equals it in the GLUE test files).
  """
  rows = []
  for eid in sorted(predictions):
    value = np.asarray(predictions[eid])
    if hasattr(task, "label_list"):
      label = task.label_list[int(np.argmax(value))]
    else:
      score = float(value) * task.max_value + task.min_value
      label = f"{min(max(score, task.min_value), task.max_value):.3f}"
    rows.append((str(indices[eid]) if indices else str(eid), label))
  return rows


def write_glue_submission(task: Any, split: str, predictions: Mapping[int, np.ndarray],
                          output_dir: str, indices: Mapping[int, str] | None = None) -> str:
  """Writes ``<output_dir>/<GLUE name>.tsv`` (header ``index\\tprediction``); returns its path."""
  key = (task.name, split)
  if key not in GLUE_SUBMISSION_FILES:
    raise ValueError(f"no GLUE submission file for task {task.name!r} split {split!r}")
  path = os.path.join(output_dir, GLUE_SUBMISSION_FILES[key])
  rows = glue_submission_rows(task, predictions, indices)
  _atomic_write(path, "index\tprediction\n" + "".join(f"{i}\t{p}\n" for i, p in rows))
  return path


def squad_test_predictions(predictions: Mapping[str, str], null_odds: Mapping[str, float],
                           threshold: float) -> dict[str, str]:
  """Official SQuAD 2.0 test output: "" where the no-answer logit exceeds ``threshold``."""
  return {q: ("" if null_odds[q] > threshold else text) for q, text in predictions.items()}
