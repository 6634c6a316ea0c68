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

from electra_tf import model_files
from electra_tf.interop import litert_eval, litert_export, signatures
from electra_tf.interop.keras_hub_export import (
  KERAS_HUB_DIR,
  MISSING,
  export_preset,
  measure_difference,
  note_differences,
  sample_inputs,
)
from electra_tf.model_sizes import get_bert_config
from electra_tf.reading import checkpoint_hparams

DEV_ROWS = 1000  # dev rows per task on which convert --litert measures each variant


def check_requests(litert: Sequence[str], keras_hub: bool, checkpoint: str,
                   finetuned: bool) -> list[str]:
  """The LiteRT variants asked for; a one-line ValueError / ImportError before any work when
  the request cannot be met (LiteRT of a pre-training model, keras-hub not installed)."""
  variants = litert_export.parse_variants(litert) if litert else []
  if variants and not finetuned:
    try:
      stored = checkpoint_hparams.model_hparams(checkpoint)[0]
    except (OSError, ValueError):
      stored = None
    raise ValueError(litert_export.no_finetuned_head_message(checkpoint, stored))
  if keras_hub:
    try:
      import keras_hub as _  # noqa: F401
    except ImportError:
      raise ImportError(MISSING) from None
  return variants


def _vocab(output_dir: str) -> str | None:
  return model_files.vocab_in(output_dir)


def export_litert(output_dir: str, result: dict[str, Any], variants: Sequence[str],
                  dev_rows: int = DEV_ROWS) -> dict[str, Any]:
  """``<output_dir>/litert/`` for the fine-tuned model ``convert_finetuned`` returned, each
  variant measured on the first ``dev_rows`` dev rows of each task (``litert_eval``)."""
  tasks, config = result["tasks"], result["config"]
  names = signatures.signature_names({t.name: t.kind for t in tasks})
  representative = None
  if "int8_full" in variants:  # calibrated on each task's train split
    representative = litert_export.representative_inputs(
        {names[t.name]: t for t in tasks if t.kind in signatures.LITERT_KINDS})
  written = litert_export.export_litert(
      output_dir, tasks, names, config.max_seq_length, variants, _vocab(output_dir),
      config.do_lower_case, representative)
  if written["files"] and dev_rows > 0:
    exported = {t: n for t, n in names.items() if n in written["signatures"]}
    written["dev"] = litert_eval.measure(os.path.join(output_dir, model_files.SAVED_MODEL_DIR),
                                         written["files"], tasks, exported, dev_rows)
    litert_export.update_spec(written["dir"], {"dev": written["dev"]})
  return written


def export_keras_hub(output_dir: str, result: dict[str, Any]) -> str:
  """``<output_dir>/keras_hub/``, the keras-hub preset of the model's encoder; its difference
  from our encoder goes into ``result["keras_hub_difference"]``."""
  config = result["config"]
  bert = get_bert_config(config)
  preset = export_preset(result["tf1"], os.path.join(output_dir, KERAS_HUB_DIR),
                         bert.num_attention_heads, _vocab(output_dir), config.do_lower_case,
                         bert.hidden_act)
  encoder = os.path.join(output_dir, "encoder")
  if os.path.isdir(encoder):
    inputs, what = sample_inputs(result.get("tasks", []), bert.vocab_size,
                                 bert.max_position_embeddings)
    result["keras_hub_difference"] = {"max": measure_difference(preset, encoder, inputs),
                                      "inputs": what}
    note_differences(preset, result["keras_hub_difference"])
  return preset


def export_extras(output_dir: str, result: dict[str, Any], litert: Sequence[str],
                  keras_hub: bool, dev_rows: int = DEV_ROWS) -> None:
  """Adds ``result["litert"]`` / ``result["keras_hub"]`` after writing what was asked for."""
  if litert:
    result["litert"] = export_litert(output_dir, result, litert, dev_rows)
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
    lines += litert_eval.summary_lines(litert.get("dev", {}))
  if result.get("keras_hub"):
    lines.append(f"  keras_hub/    {result['keras_hub']}")
  if result.get("keras_hub_difference"):
    diff = result["keras_hub_difference"]
    lines.append(f"    sequence_output within {diff['max']:.1e} of ours on {diff['inputs']} "
                 "(keras-hub's ElectraBackbone computes GELU by its tanh approximation, "
                 "ELECTRA exactly; noted in its metadata.json)")
  return lines
