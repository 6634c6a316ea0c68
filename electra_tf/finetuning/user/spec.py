"""``task.json``: how a user's own fine-tuning task is described.

A folder ``<data_dir>/finetuning_data/<name>/`` with ``task.json`` next to ``train.*``,
``dev.*`` and an optional ``test.*`` makes ``<name>`` a task. Keys:

- ``type``: ``classification`` | ``regression`` | ``tagging``;
- ``text_a``, ``text_b`` (null for single texts), ``label``: column names (CSV, TSV with a
  header, JSONL keys) or 0-based column numbers (CSV / TSV); for tagging JSONL the keys of the
  token and tag lists (default ``tokens`` / ``tags``); ``id`` (optional): a column copied into
  the written predictions (rows or files without it: the row number);
- ``labels`` (classification, optional): the label values; default: first-seen order in train;
- ``metrics`` (optional): see ``scoring.METRICS``;
- ``header`` (TSV, default true): whether the first line names the columns;
- ``symmetric`` (sentence pairs, default false): the pair order does not matter, so training
  also sees every pair swapped (as the official MRPC / STS-B with ``double_unordered``);
- ``range`` (regression, optional): ``[low, high]`` of the scores, checked on train and dev;
  default: the train minimum and maximum. The target is ``(score - low) / high`` (official STS);
- ``spans`` (tagging, default true): tags are spans (BIO / IOB2 / IOBES, scored on whole
  spans); false: one independent tag per word (scored by word accuracy).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from electra_tf.finetuning.task_base import data_error

TASK_FILE = "task.json"
TYPES = ("classification", "regression", "tagging")
DEFAULT_METRICS = {"classification": ("accuracy", "macro_f1"),
                   "regression": ("pearson", "spearman"),
                   "tagging": ("precision", "recall", "f1")}
KNOWN_METRICS = {"classification": ("accuracy", "macro_f1", "mcc", "precision", "recall", "f1"),
                 "regression": ("pearson", "spearman", "mse"),
                 "tagging": ("precision", "recall", "f1", "accuracy")}
_KEYS = ("type", "text_a", "text_b", "label", "labels", "metrics", "id", "header", "symmetric",
         "range", "spans")

Column = str | int


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """A parsed ``task.json`` (see the module docstring); ``path`` is the file, for messages."""

  path: str
  type: str
  text_a: Column
  text_b: Column | None = None
  label: Column = "label"
  labels: tuple[Any, ...] | None = None
  metrics: tuple[str, ...] | None = None  # None: the defaults (which depend on the labels)
  id: Column | None = None
  header: bool = True
  symmetric: bool = False
  range: tuple[float, float] | None = None
  spans: bool = True


def label_key(value: Any) -> str:
  """A label value as the string the task uses (JSON ``1`` and CSV ``"1"`` are one label)."""
  return value if isinstance(value, str) else json.dumps(value)


def has_task_file(raw_data_dir: str) -> bool:
  return os.path.isfile(os.path.join(raw_data_dir, TASK_FILE))


def _column(path: str, key: str, value: Any, optional: bool = False) -> Column | None:
  if value is None and optional:
    return None
  if isinstance(value, bool) or not isinstance(value, (str, int)) or value in ("", -1):
    raise data_error(path, f"'{key}' must be a column name or a 0-based column number, "
                     f"got {json.dumps(value)}")
  if isinstance(value, int) and value < 0:
    raise data_error(path, f"'{key}' must be >= 0, got {value}")
  return value


def _flag(path: str, raw: dict, key: str, default: bool) -> bool:
  value = raw.get(key, default)
  if not isinstance(value, bool):
    raise data_error(path, f"'{key}' must be true or false, got {json.dumps(value)}")
  return value


def _labels(path: str, value: Any) -> tuple[Any, ...] | None:
  if value is None:
    return None
  if (not isinstance(value, list) or len(value) < 2
      or not all(isinstance(v, (str, int, float, bool)) for v in value)):
    raise data_error(path, "'labels' must be a list of at least 2 label values")
  keys = [label_key(v) for v in value]
  dupes = sorted({k for k in keys if keys.count(k) > 1})
  if dupes:
    raise data_error(path, f"'labels' lists {dupes[0]!r} twice")
  return tuple(value)


def _metrics(path: str, task_type: str, value: Any) -> tuple[str, ...] | None:
  if value is None:
    return None
  known = KNOWN_METRICS[task_type]
  if not isinstance(value, list) or not value:
    raise data_error(path, f"'metrics' must be a non-empty list of: {', '.join(known)}")
  for metric in value:
    if metric not in known:
      raise data_error(path, f"unknown metric {json.dumps(metric)} for a {task_type} task "
                       f"(known: {', '.join(known)})")
  return tuple(value)


def _range(path: str, value: Any) -> tuple[float, float] | None:
  if value is None:
    return None
  if (not isinstance(value, list) or len(value) != 2
      or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
      or not value[0] < value[1] or value[1] <= 0):
    raise data_error(path, f"'range' must be [low, high] with low < high and high > 0, got "
                     f"{json.dumps(value)}")
  return float(value[0]), float(value[1])


def load_spec(raw_data_dir: str) -> TaskSpec:
  """Reads and checks ``<raw_data_dir>/task.json``; any problem is a one-line ``DataError``."""
  path = os.path.join(raw_data_dir, TASK_FILE)
  try:
    with open(path, encoding="utf-8") as f:
      raw = json.load(f)
  except json.JSONDecodeError as e:
    raise data_error(path, f"not valid JSON: {e.msg}", e.lineno) from None
  return parse_spec(raw, path)


def spec_json(spec: TaskSpec, labels: list[Any] | None = None,
              score_range: list[float] | None = None) -> dict[str, Any]:
  """``spec`` as a task.json object, with the labels / score range the task resolved (found
  in train when task.json gave none), so ``parse_spec`` rebuilds the task with no data."""
  raw = {key: getattr(spec, key) for key in _KEYS if getattr(spec, key) is not None}
  for key in ("labels", "metrics", "range"):
    if key in raw:
      raw[key] = list(raw[key])
  if labels is not None:
    raw["labels"] = list(labels)
  if score_range is not None:
    raw["range"] = list(score_range)
  return raw


def parse_spec(raw: Any, path: str) -> TaskSpec:
  """Checks a task.json object (``path`` names it in errors); one-line ``DataError``s."""
  if not isinstance(raw, dict):
    raise data_error(path, "must hold a JSON object")
  unknown = sorted(set(raw) - set(_KEYS))
  if unknown:
    raise data_error(path, f"unknown key '{unknown[0]}' (known: {', '.join(_KEYS)})")
  task_type = raw.get("type")
  if task_type not in TYPES:
    raise data_error(path, f"'type' must be one of {', '.join(TYPES)}, got "
                     f"{json.dumps(task_type)}")
  tagging = task_type == "tagging"
  for key in ("text_a", "label"):
    if key not in raw and not tagging:
      raise data_error(path, f"missing key '{key}' (the column holding the {key})")
  if "labels" in raw and task_type != "classification":
    raise data_error(path, "'labels' is only for classification tasks")
  if "range" in raw and task_type != "regression":
    raise data_error(path, "'range' is only for regression tasks")
  if "text_b" in raw and tagging:
    raise data_error(path, "'text_b' is not used by tagging tasks")
  spans = _flag(path, raw, "spans", True)
  metrics = _metrics(path, task_type, raw.get("metrics"))
  if tagging and not spans and metrics and set(metrics) != {"accuracy"}:
    raise data_error(path, "a tagging task with \"spans\": false is scored by accuracy only")
  return TaskSpec(
      path=path, type=task_type,
      text_a=_column(path, "text_a", raw.get("text_a", "tokens")),
      text_b=_column(path, "text_b", raw.get("text_b"), optional=True),
      label=_column(path, "label", raw.get("label", "tags")),
      labels=_labels(path, raw.get("labels")), metrics=metrics,
      id=_column(path, "id", raw.get("id"), optional=True),
      header=_flag(path, raw, "header", True), symmetric=_flag(path, raw, "symmetric", False),
      range=_range(path, raw.get("range")), spans=spans)
