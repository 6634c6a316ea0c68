"""The on-device and Keras 3 exports of ``convert``: ``litert/`` and ``keras_hub/``.

Both are written from what ``convert`` has just written into the output folder
(``saved_model/``, ``tf1/``, ``vocab.txt``): ``litert_export`` and
``keras_hub_export`` do the work; this module checks the request before anything is
converted, wires the results and prints their summary lines.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from electra_tf.config import get_bert_config
from electra_tf.finetuning.classification import SingleOutputTask
from electra_tf.finetuning.tagging import TaggingTask
from electra_tf.interop import litert_export
from electra_tf.interop.keras_hub_export import KERAS_HUB_DIR, MISSING, export_preset
from electra_tf.reading import model_dir


def check_requests(litert: Sequence[str], keras_hub: bool, checkpoint: str,
                   finetuned: bool) -> list[str]:
  """The LiteRT variants asked for; a one-line ValueError / ImportError before any work when
  the request cannot be met (LiteRT of a pre-training model, keras-hub not installed)."""
  variants = litert_export.parse_variants(litert) if litert else []
  if variants and not finetuned:
    try:
      stored = model_dir.model_hparams(checkpoint)[0]
    except (OSError, ValueError):
      stored = None
    raise ValueError(litert_export.no_finetuned_head_message(checkpoint, stored))
  if keras_hub:
    try:
      import keras_hub as _  # noqa: F401
    except ImportError:
      raise ImportError(MISSING) from None
  return variants


def _signature_of(task: Any, signatures: Sequence[str]) -> str:
  """The SavedModel signature name of ``task`` (see ``interop.finetuned_saved_model``)."""
  family = ("classify" if isinstance(task, SingleOutputTask) else
            "tag" if isinstance(task, TaggingTask) else "squad")
  return family if family in signatures else f"{family}_{task.name}"


def _vocab(output_dir: str) -> str | None:
  path = os.path.join(output_dir, model_dir.VOCAB_FILE)
  return path if os.path.exists(path) else None


def export_litert(output_dir: str, result: dict[str, Any], variants: Sequence[str]
                  ) -> dict[str, Any]:
  """``<output_dir>/litert/`` for the fine-tuned model ``convert_finetuned`` returned."""
  tasks, config = result["tasks"], result["config"]
  names = {t.name: _signature_of(t, result["signatures"]) for t in tasks}
  representative = None
  if "int8_full" in variants:  # calibrated on each task's train split
    representative = litert_export.representative_inputs(
        {names[t.name]: t for t in tasks if names[t.name].startswith(("classify", "tag"))})
  return litert_export.export_litert(
      output_dir, tasks, names, config.max_seq_length, variants, _vocab(output_dir),
      config.do_lower_case, representative)


def export_keras_hub(output_dir: str, result: dict[str, Any]) -> str:
  """``<output_dir>/keras_hub/``, the keras-hub preset of the model's encoder."""
  config = result["config"]
  bert = get_bert_config(config)
  return export_preset(result["tf1"], os.path.join(output_dir, KERAS_HUB_DIR),
                       bert.num_attention_heads, _vocab(output_dir), config.do_lower_case,
                       bert.hidden_act)


def export_extras(output_dir: str, result: dict[str, Any], litert: Sequence[str],
                  keras_hub: bool) -> None:
  """Adds ``result["litert"]`` / ``result["keras_hub"]`` after writing what was asked for."""
  if litert:
    result["litert"] = export_litert(output_dir, result, litert)
  if keras_hub:
    result["keras_hub"] = export_keras_hub(output_dir, result)


def summary_lines(result: dict[str, Any]) -> list[str]:
  """The convert summary lines of the extra exports."""
  lines = []
  litert = result.get("litert")
  if litert and litert["dir"]:
    written = ", ".join(os.path.basename(p) for p in litert["files"].values()) or "none"
    line = f"  litert/       {litert['dir']} ({written}; signatures: " \
           f"{', '.join(litert['signatures'])})"
    if litert["failed"]:
      line += f"; failed: {', '.join(f'{v} ({why})' for v, why in litert['failed'].items())}"
    lines.append(line)
  if result.get("keras_hub"):
    lines.append(f"  keras_hub/    {result['keras_hub']}")
  return lines
