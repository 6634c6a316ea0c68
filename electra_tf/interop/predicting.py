r"""Label a file with a fine-tuned model (the ``python -m electra_tf.predict`` command).

  python -m electra_tf.predict --model <model dir | SavedModel | .tflite | litert/> \
      --input rows.csv \
      [--output rows.predictions.jsonl] [--task topic] [--batch_size 32] [--show 0]

Everything is checked before the model loads (``main``): the flags, ``--output`` (format,
folder), the model's task definition (``interop.serving_models.read_model_spec``, its JSON files
only), and every row of ``--input`` against it (``prediction_rows.check_rows``: columns, blank
or unknown labels, no rows). Then the rows stream through the model in batches with a
progress line, each written with its prediction beside the input's own columns into a hidden
file that becomes ``--output`` when the last row is written (``prediction_output``): a Ctrl-C
or an error leaves no output file. Rows with a label are scored with the task's own scorer
(its metrics, e.g. accuracy); the summary names the rows cut to ``max_seq_length`` and gives
examples per second (featurisation and model, the model already loaded).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from electra_tf import console
from electra_tf.interop import prediction_output, prediction_rows, task_outputs
from electra_tf.interop.serving_models import (  # noqa: F401 -- the predict API, re-exported
  ModelSpec,
  Predictor,
  litert_in_folder,
  load,
  open_model,
  read_model_spec,
)

INPUTS = task_outputs.INPUT_NAMES
SHOWN_LINES = 5  # truncated rows named in the summary; the rest are counted


@dataclasses.dataclass
class Result:
  predictions: list[dict[str, Any]]  # kept only when no ``write`` was given
  metrics: dict[str, float]  # the task's metrics over the labelled rows ({} if none)
  labelled: int
  seconds: float
  rows: int = 0
  truncated: list[int] = dataclasses.field(default_factory=list)  # first lines of rows cut
  n_truncated: int = 0  # rows cut to fit max_seq_length
  batch: int = 0  # rows per model call, as run


def _batches(rows: Iterable[prediction_rows.Row], size: int
             ) -> Iterable[list[prediction_rows.Row]]:
  batch: list[prediction_rows.Row] = []
  for row in rows:
    batch.append(row)
    if len(batch) == size:
      yield batch
      batch = []
  if batch:
    yield batch


def predict_rows(predictor: Predictor, rows: Iterable[prediction_rows.Row], batch_size: int,
                 where: str = "", total: int | None = None,
                 write: Callable[[prediction_rows.Row, Mapping[str, Any]], None] | None = None
                 ) -> Result:
  """Predictions for ``rows`` (streamed) in batches, a progress line every 10 % of ``total``
  (len(rows) if None); labelled rows scored. Each prediction goes to ``write`` when given,
  else into the result."""
  definition, kind = predictor.definition, predictor.definition["kind"]
  total = len(rows) if total is None else total  # type: ignore[arg-type]
  batch_size = min(batch_size, predictor.max_batch or batch_size)
  scorer = None
  kept: list[dict[str, Any]] = []
  warm_up = np.zeros([max(1, min(batch_size, total)), predictor.max_seq_length], np.int32)
  predictor.run_batch({k: warm_up for k in INPUTS})  # first-call setup is not timed
  done = labelled = n_truncated = 0
  truncated: list[int] = []  # the first SHOWN_LINES only: memory stays flat
  start, step = time.perf_counter(), max(1, total // 10)
  for batch in _batches(rows, batch_size):
    featurised = [task_outputs.featurize_row(predictor.tokenizer, kind, predictor.max_seq_length,
                                             r.text_a, r.text_b, r.words) for r in batch]
    outputs = predictor.run_batch({k: np.asarray([f[k] for f, _ in featurised], np.int32)
                                   for k in INPUTS})
    for i, (row, (f, cut)) in enumerate(zip(batch, featurised, strict=True)):
      out = {k: v[i] for k, v in outputs.items()}
      prediction = task_outputs.prediction(definition, out, f,
                                           len(row.words) if row.words is not None else None)
      if write is None:
        kept.append(prediction)
      else:
        write(row, prediction)
      if cut:
        n_truncated += 1
        truncated += [row.line] if len(truncated) < SHOWN_LINES else []
      if row.label is not None:
        gold = prediction_rows.check_label(where, definition, row)
        scorer = scorer or task_outputs.make_scorer(definition)
        task_outputs.score_row(scorer, definition, out, f, gold)
        labelled += 1
    first, done = done, done + len(batch)
    if done // step != first // step or done == total:
      seconds = time.perf_counter() - start
      console.log(f"predict: {done}/{total} rows ({100 * done / max(total, 1):.0f}%), "
                  f"{done / max(seconds, 1e-9):.1f} rows/s")
  metrics = task_outputs.metric_values(scorer) if scorer is not None else {}
  return Result(kept, metrics, labelled, time.perf_counter() - start, done, truncated,
                n_truncated, batch_size)


def row_line(row: prediction_rows.Row, prediction: Mapping[str, Any]) -> str:
  """``label (p=0.93)  text`` (score / tags) for printing one row."""
  text = " ".join(row.words) if row.words is not None else row.text_a + (
      f" | {row.text_b}" if row.text_b else "")
  if "label" in prediction:
    return f"  {prediction['label']} (p={prediction['probability']:.2f})  {text}"
  if "score" in prediction:
    return f"  {prediction['score']:.3f}  {text}"
  return "  " + " ".join(f"{w}/{t}" for w, t in zip(row.words, prediction["tags"], strict=True))


def truncation_line(result: Result, max_seq_length: int, kind: str) -> str | None:
  """The summary line naming the rows cut to ``max_seq_length`` (None if none was)."""
  if not result.n_truncated:
    return None
  lines = ", ".join(map(str, result.truncated))
  more = f" and {result.n_truncated - len(result.truncated)} more" if (
      result.n_truncated > len(result.truncated)) else ""
  what = "words past it tagged O" if kind == "tagging" else "tokens past it dropped"
  return (f"  {result.n_truncated} of {result.rows} rows longer than max_seq_length "
          f"{max_seq_length} ({what}): line{'s' if result.n_truncated > 1 else ''} "
          f"{lines}{more}")


def define_flags() -> None:
  """Command-line flags, defined on demand so importing this module defines none."""
  from absl import flags

  paths = {
      "model": "A fine-tuned model directory, a SavedModel export, a LiteRT .tflite "
               "(litert.json beside it) or a LiteRT folder (its float32 model if there).",
      "input": "Rows to label: .txt (one a line), .csv, .tsv, .jsonl; tagging also CoNLL .conll.",
      "output": "Where the predictions go, beside the input's columns (.jsonl, .tsv, .csv; "
                "default <input without extension>.predictions.jsonl).",
      "task": "The task to predict, for a model with several."}
  for name, text in paths.items():
    flags.DEFINE_string(name, None, text)
  for role in prediction_rows.ROLES:
    flags.DEFINE_string(role, None, f"Column of the {role} (name or 0-based number; default: "
                        "the task's task.json, else the role's name).")
  flags.DEFINE_integer("batch_size", 32, "Rows per model call (LiteRT runs one row per call).")
  flags.DEFINE_integer("threads", None, "LiteRT interpreter threads (default: its own).")
  flags.DEFINE_integer("max_rows", None, "Only the first rows of --input.")
  flags.DEFINE_integer("show", 0, "Print the first N rows' predictions.")


def main(argv: list[str]) -> None:
  from absl import app, flags

  f = flags.FLAGS
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  if not f.model or not f.input:
    raise app.UsageError("--model and --input are required")
  if f.batch_size < 1:
    raise app.UsageError(f"--batch_size must be >= 1, got {f.batch_size}")
  given = {r: getattr(f, r) for r in prediction_rows.ROLES}
  # checked before anything loads: input, output, the model's definition, every row
  prediction_rows.check_input(f.input)
  output = f.output or prediction_output.default_output(f.input)
  prediction_output.check_output(output, f.input)
  spec = read_model_spec(f.model, f.task)
  found = prediction_rows.check_rows(f.input, spec.definition, given, f.max_rows)
  prediction_output.output_columns(spec.definition, found.fields, output)
  predictor = load(spec, f.threads)
  shown: list[str] = []
  rows = prediction_rows.iter_rows(f.input, spec.definition, given, found.tagged)
  with prediction_output.staged_writer(output, spec.definition, found.fields) as write:
    def write_and_show(row, prediction):
      write(row, prediction)
      if len(shown) < f.show:
        shown.append(row_line(row, prediction))
    limited = (r for _, r in zip(range(found.rows), rows, strict=False))  # --max_rows
    result = predict_rows(predictor, limited, f.batch_size, f.input, found.rows, write_and_show)
  lines = list(shown)
  if result.labelled:
    scores = ", ".join(f"{k} {v:.2f}" for k, v in result.metrics.items())
    lines.append(f"  {scores} ({result.labelled} labelled rows)")
  cut = truncation_line(result, predictor.max_seq_length, spec.definition["kind"])
  lines += [cut] if cut else []
  per_call = (f"batch {result.batch}" if predictor.max_batch is None else
              f"batch {result.batch}: a .tflite runs one row per call")
  lines += [f"  {result.rows / max(result.seconds, 1e-9):.1f} examples/s ({result.rows} rows "
            f"in {result.seconds:.2f} s: tokenisation, featurisation and the model, "
            f"{per_call})", f"  predictions: {output}"]
  console.summary(f"Predicted {f.input} with {predictor.description} (task "
                  f"{predictor.definition['task']}):", lines)
