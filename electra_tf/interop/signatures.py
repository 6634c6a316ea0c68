"""The one table of a fine-tuned model's serving signatures, by task kind (TensorFlow-free).

A task's ``kind`` (``finetuning.task_base.Task.kind``, stored in ``tasks.json`` and
``litert.json``) gives its signature family and outputs:

| kind | family | outputs |
|---|---|---|
| classification | ``classify`` | ``logits`` [B, n_labels], ``probabilities`` [B, n_labels] |
| regression | ``classify`` | ``score`` [B] (the task's scale), ``logits`` [B] (raw head) |
| tagging | ``tag`` | ``logits`` [B, T, n_tags], ``predictions`` [B, T] |
| span_qa | ``squad`` | start / end logits and the beam (``finetuned_saved_model``) |

A signature is named after its family when the model has one task of that family, else
``<family>_<task>`` (``classify_rte``). The SavedModel export, the LiteRT export (which
covers every family but ``squad``) and ``predict`` all name signatures with ``signature_names``
and map them to their tasks' definitions with ``by_signature``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FAMILIES = {"classification": "classify", "regression": "classify", "tagging": "tag",
            "span_qa": "squad"}
OUTPUTS = {"classification": ("logits", "probabilities"), "regression": ("score", "logits"),
           "tagging": ("logits", "predictions"),
           "span_qa": ("start_logits", "end_logits", "answerable_logit", "start_top_index",
                       "start_top_log_probs", "end_top_index", "end_top_log_probs")}
LITERT_KINDS = ("classification", "regression", "tagging")  # fixed-shape, batch-1 friendly


def family(kind: str) -> str:
  """``classify`` / ``tag`` / ``squad`` for a task kind; a one-line ValueError otherwise."""
  if kind not in FAMILIES:
    raise ValueError(f"no export signature for task kind {kind!r} (known: "
                     f"{', '.join(FAMILIES)})")
  return FAMILIES[kind]


def signature_names(kinds: Mapping[str, str]) -> dict[str, str]:
  """Task name -> signature name, for a model's tasks {name: kind} (see the module docstring)."""
  families = {name: family(kind) for name, kind in kinds.items()}
  counts = {f: list(families.values()).count(f) for f in families.values()}
  return {name: (f if counts[f] == 1 else f"{f}_{name}") for name, f in families.items()}


def by_signature(definitions: Mapping[str, Mapping[str, Any]],
                 names: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
  """Signature name -> its task's definition with ``task`` (the task's name) added, for a
  model's tasks {name: definition with its ``kind``} in their order; ``names`` (task ->
  signature) defaults to ``signature_names`` of their kinds. ``predict`` picks its task from
  this map and ``litert.json`` stores it (the LiteRT kinds)."""
  if names is None:
    names = signature_names({n: d["kind"] for n, d in definitions.items()})
  return {names[n]: {**d, "task": n} for n, d in definitions.items()}


def text_signature(name: str) -> str | None:
  """The raw-text twin of a ``classify[_<task>]`` signature (``classify_text[_<task>]``)."""
  return name.replace("classify", "classify_text", 1) if name.startswith("classify") else None
