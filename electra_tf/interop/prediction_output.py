"""The predictions ``predict`` writes: each input row's own columns, its prediction beside
them, streamed into a hidden sibling file that becomes ``--output`` only when every row is
written (an error, a Ctrl-C or a kill leaves no half-written output; TensorFlow-free).

Output (by extension):

- ``.jsonl``: one object a row: the input row's fields (a table's columns, a JSONL row's keys;
  ``text_a`` / ``text_b`` or ``words`` for text and CoNLL files), then ``prediction`` (the
  label, the score, or the tag list), and for classification ``probability`` and
  ``probabilities`` ({label: p}).
- ``.tsv`` / ``.csv``: the same columns, one a field: ``prediction``, ``probability`` and one
  ``p(<label>)`` column per label; word and tag lists joined by spaces.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from electra_tf import atomic_io
from electra_tf.finetuning.user.spec import label_key
from electra_tf.interop import task_outputs
from electra_tf.interop.prediction_rows import Row

OUTPUTS = (".jsonl", ".tsv", ".csv")


def default_output(input_path: str) -> str:
  """``<input without its extension>.predictions.jsonl``."""
  return os.path.splitext(input_path)[0] + ".predictions.jsonl"


def check_output(path: str, input_path: str) -> None:
  """A one-line ValueError for an output ``predict`` cannot write: unknown extension, the input
  itself, a folder, or a folder that is not there."""
  ext = os.path.splitext(path)[1]
  if ext not in OUTPUTS:
    raise ValueError(f"--output {path}: unknown format {ext or '(none)'} (known: "
                     f"{', '.join(OUTPUTS)})")
  if os.path.abspath(path) == os.path.abspath(input_path):
    raise ValueError(f"--output {path} is the input file; choose another name")
  if os.path.isdir(path):
    raise ValueError(f"--output {path} is a folder; give a file name")
  parent = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(parent):
    raise ValueError(f"--output {path}: no folder {parent}")


def prediction_fields(definition: Mapping[str, Any], prediction: Mapping[str, Any] | None,
                      table: bool) -> dict[str, Any]:
  """The output's prediction columns of one row (``prediction`` None: their names, empty)."""
  kind = definition["kind"]
  if kind == "classification":
    labels = [label_key(v) for v in task_outputs.label_values(definition)]
    p = prediction or {"probabilities": dict.fromkeys(labels)}
    out = {"prediction": p.get("label"), "probability": p.get("probability")}
    if table:
      return {**out, **{f"p({label})": p["probabilities"][label] for label in labels}}
    return {**out, "probabilities": p["probabilities"]}
  if kind == "regression":
    return {"prediction": (prediction or {}).get("score")}
  tags = (prediction or {}).get("tags")
  return {"prediction": " ".join(tags) if table and tags is not None else tags}


def output_columns(definition: Mapping[str, Any], fields: Sequence[str], path: str
                   ) -> list[str]:
  """The output's columns: the input's ``fields`` (``prediction_rows.check_rows``), then the
  prediction's; an input column named as a prediction column is a one-line ValueError
  (nothing of the input is overwritten)."""
  predicted = list(prediction_fields(definition, None, not path.endswith(".jsonl")))
  clash = [c for c in fields if c in predicted]
  if clash:
    raise ValueError(f"input column {clash[0]!r} has the name of an output column of "
                     f"{path} ({', '.join(predicted)}); rename it in the input")
  return [*fields, *predicted]


def _cell(value: Any) -> Any:
  return " ".join(map(str, value)) if isinstance(value, list) else value


@contextlib.contextmanager
def staged_writer(path: str, definition: Mapping[str, Any], fields: Sequence[str]
                  ) -> Iterator[Callable[[Row, Mapping[str, Any]], None]]:
  """Yields ``write(row, prediction)``; the rows go to a hidden sibling of ``path`` that
  replaces it when the block ends normally and is deleted when it raises (KeyboardInterrupt
  included). ``fields``: the input's columns (a table's cell is empty for a row without it)."""
  names = output_columns(definition, fields, path)
  table = not path.endswith(".jsonl")
  with atomic_io.temp_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as f:
    writer = None
    if table:
      delimiter = "\t" if path.endswith(".tsv") else ","
      writer = csv.DictWriter(f, names, delimiter=delimiter, lineterminator="\n")
      writer.writeheader()

    def write(row: Row, prediction: Mapping[str, Any]) -> None:
      out = {**row.fields, **prediction_fields(definition, prediction, table)}
      if writer is None:
        f.write(json.dumps(out, ensure_ascii=False) + "\n")
      else:
        writer.writerow({k: _cell(v) for k, v in out.items()})
    yield write
