"""``tasks.json``: the task definitions a fine-tuned model directory carries.

Beside ``hparams.json`` (shape) and ``vocab.txt``, a fine-tuned model's directory holds, per
task of its ``task_names`` in order, what defines the task's outputs
(``finetuning.task_base.Task.definition``)::

  {"tasks": [{"name": "topic", "kind": "classification", "labels": ["json", "os", ...],
              "scorer": "scoring.ClassificationScorer", "metrics": ["accuracy", ...],
              "data": "../../finetuning_data/topic", "task_json": {...}}, ...]}

``kind`` is ``classification`` / ``regression`` / ``tagging`` / ``span_qa``; ``labels`` the
label (tag) list in id order, ``range`` a regression's score range; ``task_json`` a user
task's ``task.json`` with the labels it found in train; ``data`` the folder it was trained on
(its dev rows, when still there: convert's LiteRT calibration and dev checks read them), stored
relative to the folder holding ``tasks.json`` so that the file names no absolute path of the
machine that trained (``read_tasks`` gives it back absolute; a file with an absolute ``data``
still reads). Convert, export and predict read it, so they need no data folder. Written
atomically by ``run_finetuning.py`` (each trial's model directory and its ``tf1/``) and by
``convert`` (the output folder and its exports).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from electra_tf import atomic_io
from electra_tf.reading.model_dir import model_dir_of

TASKS_FILE = "tasks.json"


def _local(path: Any) -> bool:
  return isinstance(path, str) and "://" not in path


def write_tasks(model_dir: str, definitions: Sequence[dict[str, Any]]) -> str:
  """Writes ``<model_dir>/tasks.json`` atomically, each ``data`` folder relative to
  ``model_dir``; returns its path."""
  os.makedirs(model_dir, exist_ok=True)
  path = os.path.join(model_dir, TASKS_FILE)
  here = os.path.abspath(model_dir)
  tasks = [{**d, "data": os.path.relpath(os.path.abspath(d["data"]), here)}
           if _local(d.get("data")) and _local(model_dir) else dict(d) for d in definitions]
  atomic_io.write_json(path, {"tasks": tasks}, indent=2, sort_keys=True)
  return path


def read_tasks(model_dir_or_checkpoint: str) -> dict[str, dict[str, Any]] | None:
  """Task name -> definition from the ``tasks.json`` of a model directory (given itself or a
  checkpoint in it), in the model's task order; None when there is none. An unreadable file
  is a one-line ValueError."""
  path = os.path.join(model_dir_of(model_dir_or_checkpoint), TASKS_FILE)
  if not os.path.exists(path):
    return None
  try:
    with open(path, encoding="utf-8") as f:
      tasks = json.load(f)["tasks"]
    here = os.path.dirname(os.path.abspath(path))
    for t in tasks:
      if _local(t.get("data")):  # relative to the folder (an absolute one stays as it is)
        t["data"] = os.path.normpath(os.path.join(here, t["data"]))
    return {t["name"]: t for t in tasks}
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise ValueError(f"cannot read {path}: {e}") from None
