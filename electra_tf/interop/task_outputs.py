"""A fine-tuned task's inputs from raw text, and its signature's outputs turned into
predictions, scores and agreement; TensorFlow-free (the on-device runner, ``predict`` and
convert's LiteRT measurement use it).

A task is given by its definition (``tasks.json`` / ``litert.json``, see
``electra_tf.reading.model_tasks``): ``kind``, ``labels`` (tags) in id order, ``range``,
``scorer`` / ``metrics`` and, for a user task, ``task_json``. Outputs are one row's values of
the signature (``interop.signatures``), without the batch dimension.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from electra_tf.finetuning import scorers
from electra_tf.finetuning.user import scoring
from electra_tf.finetuning.user.spec import label_key
from electra_tf.finetuning.wordpiece import sentence_features, word_features

INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")


def featurize(tokenizer: Any, kind: str, max_seq_length: int, text_a: str | None = None,
              text_b: str | None = None, words: Sequence[str] | None = None) -> dict[str, Any]:
  """One row's inputs as ``run_finetuning.py`` builds them: [max_seq_length] int lists
  ``input_ids``, ``input_mask``, ``segment_ids`` (tagging: also ``labeled_positions`` and
  ``n_words``, the words that fit)."""
  return featurize_row(tokenizer, kind, max_seq_length, text_a, text_b, words)[0]


def featurize_row(tokenizer: Any, kind: str, max_seq_length: int, text_a: str | None = None,
                  text_b: str | None = None, words: Sequence[str] | None = None
                  ) -> tuple[dict[str, Any], bool]:
  """(``featurize``'s inputs, whether the row was cut to fit ``max_seq_length``: tokens of
  its texts dropped, or words of a tagging row left untagged)."""
  if kind == "tagging":
    features = word_features(tokenizer, words, max_seq_length)
    return features, features["n_words"] < len(words)
  features, n_tokens = sentence_features(tokenizer, text_a, text_b or None, max_seq_length)
  return features, n_tokens > max_seq_length


def label_values(definition: Mapping[str, Any]) -> list[Any]:
  """The labels as the task's files write them (a user task's JSON values), in id order."""
  task_json = definition.get("task_json") or {}
  return list(task_json.get("labels") or definition["labels"])


def word_predictions(outputs: Mapping[str, Any], features: Mapping[str, Any]) -> np.ndarray:
  """Tag ids [n_words] at each kept word's first piece."""
  positions = np.asarray(features["labeled_positions"][:features["n_words"]], np.int64)
  return np.asarray(outputs["predictions"])[positions]


def prediction(definition: Mapping[str, Any], outputs: Mapping[str, Any],
               features: Mapping[str, Any], n_words: int | None = None) -> dict[str, Any]:
  """One row's prediction: {"label", "probability", "probabilities": {label: p}}
  (classification), {"score"} (regression) or {"tags"} (tagging: one per word of the
  ``n_words``; words past max_seq_length get "O")."""
  kind = definition["kind"]
  if kind == "classification":
    probabilities = np.asarray(outputs["probabilities"], np.float64)
    best = int(probabilities.argmax())
    values = label_values(definition)
    return {"label": values[best], "probability": round(float(probabilities[best]), 6),
            "probabilities": {label_key(v): round(float(p), 6)
                              for v, p in zip(values, probabilities, strict=True)}}
  if kind == "regression":
    return {"score": round(float(np.asarray(outputs["score"])), 6)}
  tags = [definition["labels"][int(i)] for i in word_predictions(outputs, features)]
  return {"tags": tags + ["O"] * ((n_words or len(tags)) - len(tags))}


def gold_ids(definition: Mapping[str, Any], gold: Any) -> Any:
  """A row's label as the scorer wants it: the label id (classification), the target
  ``(score - low) / high`` (regression, as trained), tag ids (tagging, span tags as BIOES);
  a label the model does not know is a ValueError naming it."""
  kind = definition["kind"]
  if kind == "regression":
    low, high = definition["range"]
    return (float(gold) - low) / high
  labels = definition["labels"]
  if kind == "tagging":
    if definition.get("spans", True):
      gold = scorers.get_tags(scorers.get_span_labels(list(gold)), len(gold), "BIOES")
    unknown = [t for t in gold if t not in labels]
    if unknown:
      raise ValueError(f"unknown tag {unknown[0]!r} (the model's tags: {', '.join(labels)})")
    return [labels.index(t) for t in gold]
  if label_key(gold) not in labels:
    raise ValueError(f"unknown label {label_key(gold)!r} (the model's labels: "
                     f"{', '.join(labels)})")
  return labels.index(label_key(gold))


def make_scorer(definition: Mapping[str, Any]) -> scorers.Scorer:
  """A fresh scorer of the task's own class and metrics (its definition's ``scorer``)."""
  mapping = {t: i for i, t in enumerate(definition.get("labels") or [])}
  metrics = definition.get("metrics")
  factories = {
      "scorers.AccuracyScorer": scorers.AccuracyScorer,
      "scorers.AccuracyF1Scorer": scorers.AccuracyF1Scorer,
      "scorers.MCCScorer": scorers.MCCScorer,
      "scorers.RegressionScorer": scorers.RegressionScorer,
      "scorers.WordAccuracyScorer": scorers.WordAccuracyScorer,
      "scorers.EntityLevelF1Scorer": lambda: scorers.EntityLevelF1Scorer(mapping),
      "scoring.ClassificationScorer": lambda: scoring.ClassificationScorer(metrics),
      "scoring.RegressionScorer": lambda: scoring.RegressionScorer(metrics),
      "scoring.TaggingScorer": lambda: scoring.TaggingScorer(mapping, metrics),
  }
  if definition.get("scorer") not in factories:
    raise ValueError(f"task '{definition.get('name')}': unknown scorer "
                     f"{definition.get('scorer')!r} in its definition")
  return factories[definition["scorer"]]()


def score_row(scorer: scorers.Scorer, definition: Mapping[str, Any], outputs: Mapping[str, Any],
              features: Mapping[str, Any], gold: Any) -> None:
  """Feeds one row (``gold`` from ``gold_ids``) to ``scorer`` as the task's evaluation does.
  The loss is not known here: 0 is fed and ``metric_values`` leaves it out."""
  kind = definition["kind"]
  if kind == "tagging":
    predicted = word_predictions(outputs, features)
    scorer.update({"loss": 0.0, "labels": np.asarray(gold[:len(predicted)]),
                   "labels_mask": np.ones(len(predicted)), "predictions": predicted})
  elif kind == "regression":
    scorer.update({"loss": 0.0, "targets": gold, "predictions": np.asarray(outputs["logits"])})
  else:
    scorer.update({"loss": 0.0, "label_ids": gold,
                   "predictions": int(np.asarray(outputs["logits"]).argmax())})


def metric_values(scorer: scorers.Scorer) -> dict[str, float]:
  """The scorer's metrics without its loss (see ``score_row``)."""
  return {name: value for name, value in scorer.get_results() if name != "loss"}


def agreement(definition: Mapping[str, Any], outputs: Mapping[str, Any],
              reference: Mapping[str, Any], features: Mapping[str, Any]) -> tuple[int, int]:
  """(predictions equal to the reference's, predictions compared) for one row: its label
  (classification), each kept word's tag (tagging); regression compares nothing (0, 0)."""
  kind = definition["kind"]
  if kind == "classification":
    same = np.asarray(outputs["logits"]).argmax() == np.asarray(reference["logits"]).argmax()
    return int(same), 1
  if kind == "tagging":
    a, b = word_predictions(outputs, features), word_predictions(reference, features)
    return int((a == b).sum()), len(a)
  return 0, 0


def max_difference(definition: Mapping[str, Any], outputs: Mapping[str, Any],
                   reference: Mapping[str, Any]) -> float:
  """max |output - reference| over the row's logits (regression: its score)."""
  name = "score" if definition["kind"] == "regression" else "logits"
  return float(np.abs(np.asarray(outputs[name], np.float64)
                      - np.asarray(reference[name], np.float64)).max())
