"""What each LiteRT variant costs on the user's own model: ``convert --litert`` runs every
variant written and the float32 SavedModel on the first dev rows of each task and reports,
per variant, the task's metric (e.g. accuracy), the agreement of its predictions with float32
(labels; tags per word) and the largest logit difference. The figures go into
``litert.json`` (``"dev"``) and the convert summary.

The dev rows are the task's ``dev`` split where the model was fine-tuned (its ``tasks.json``
says where) or under ``--data_dir``; without them one line says so and nothing is measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401 -- the SavedModel's raw-text signatures need its ops

from electra_tf import console
from electra_tf.finetuning import task_base
from electra_tf.interop import task_outputs
from electra_tf.interop.litert_runner import LiteRTModel

INPUTS = task_outputs.INPUT_NAMES


def dev_rows(task: Any, max_rows: int) -> tuple[list[dict[str, Any]], list[Any]] | str:
  """(features as ``task_outputs`` uses them, gold as ``task_outputs.score_row`` takes it) of
  the first ``max_rows`` dev examples, or why there are none (one line)."""
  try:
    rows = task_base.first_featurized(task, "dev", max_rows)
  except (OSError, ValueError) as e:
    return console.error_line(e, name_type=False)
  gold = []
  name = task.name
  for features in rows:
    if task.kind == "tagging":
      features["n_words"] = int(round(sum(features[name + "_labels_mask"])))
      features["labeled_positions"] = features[name + "_labeled_positions"]
      gold.append(features[name + "_labels"][:features["n_words"]])
    else:
      gold.append(features[name + ("_label_ids" if task.kind == "classification"
                                   else "_targets")])
  return rows, gold


def _outputs(run_batch, rows: Sequence[Mapping[str, Any]], batch_size: int = 32
             ) -> list[dict[str, np.ndarray]]:
  out = []
  for first in range(0, len(rows), batch_size):
    batch = rows[first:first + batch_size]
    values = run_batch({k: np.asarray([r[k] for r in batch], np.int32) for k in INPUTS})
    out += [{k: v[i] for k, v in values.items()} for i in range(len(batch))]
  return out


def _scores(definition: Mapping[str, Any], outputs: Sequence[Mapping[str, Any]],
            rows: Sequence[Mapping[str, Any]], gold: Sequence[Any],
            reference: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
  scorer = task_outputs.make_scorer(definition)
  same = compared = 0
  diff = 0.0
  for out, features, g, ref in zip(outputs, rows, gold, reference, strict=True):
    task_outputs.score_row(scorer, definition, out, features, g)
    a, n = task_outputs.agreement(definition, out, ref, features)
    same, compared = same + a, compared + n
    diff = max(diff, task_outputs.max_difference(definition, out, ref))
  scores: dict[str, Any] = dict(task_outputs.metric_values(scorer))
  if compared:
    scores["agreement"] = 100.0 * same / compared
  scores["max_difference"] = diff
  return scores


def measure(saved_model_dir: str, files: Mapping[str, str], tasks: Sequence[Any],
            signature_names: Mapping[str, str], max_rows: int) -> dict[str, Any]:
  """{task: {"rows", "float32": {metrics}, "variants": {variant: {metrics, "agreement",
  "max_difference"}}} or {"not_measured": why}} for the tasks in ``signature_names`` (task ->
  its signature in the ``.tflite`` ``files``, {variant: path})."""
  loaded = None
  result: dict[str, Any] = {}
  for task in tasks:
    if task.name not in signature_names:
      continue
    found = dev_rows(task, max_rows)
    if isinstance(found, str):
      result[task.name] = {"not_measured": found}
      continue
    rows, gold = found
    loaded = loaded or tf.saved_model.load(saved_model_dir)
    function = loaded.signatures[signature_names[task.name]]
    reference = _outputs(lambda b, f=function: {k: v.numpy() for k, v in f(
        **{n: tf.constant(x) for n, x in b.items()}).items()}, rows)
    definition = task.definition()
    own = _scores(definition, reference, rows, gold, reference)
    entry = {"rows": len(rows), "variants": {},
             "float32": {k: v for k, v in own.items() if k not in ("agreement", "max_difference")}}
    for variant, path in files.items():
      model = LiteRTModel(path, task.name, num_threads=1)
      outputs = [model.run_features(r) for r in rows]
      entry["variants"][variant] = _scores(definition, outputs, rows, gold, reference)
    result[task.name] = entry
  return result


def summary_lines(dev: Mapping[str, Any]) -> list[str]:
  """Per task, per variant: the metrics, agreement with float32 and the largest difference."""
  lines = []
  for task, entry in dev.items():
    if "not_measured" in entry:
      lines.append(f"    {task}: agreement with float32 not measured, no dev rows "
                   f"({entry['not_measured']}; --data_dir gives them)")
      continue
    metrics = list(entry["float32"])
    lines.append(f"    {task} dev, {entry['rows']} rows: float32 (SavedModel) "
                 + ", ".join(f"{k} {entry['float32'][k]:.2f}" for k in metrics))
    for variant, scores in entry["variants"].items():
      agree = (f", agreement with float32 {scores['agreement']:.1f}%"
               if "agreement" in scores else "")
      lines.append(f"      {variant:<10} " + ", ".join(f"{k} {scores[k]:.2f}" for k in metrics)
                   + f"{agree}, max |difference| {scores['max_difference']:.2g}")
  return lines
