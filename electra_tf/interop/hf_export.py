"""Hugging Face export: our TF1-named variables -> ``transformers`` ELECTRA folders and back.

``export_hf`` writes, from a ``{tf1_name: array}`` mapping and the tower configs:

- ``<out>/discriminator/{config.json, model.safetensors}``: ``ElectraForPreTraining``.
- ``<out>/generator/{config.json, model.safetensors}``: ``ElectraForMaskedLM``.
- ``<out>/electra_tf_layout.json``: which TF1 scopes each folder came from, so
  ``load_hf_export`` maps the tensors back to the exact TF1 names.

Weights are written with ``safetensors.numpy`` (no torch needed). The name table lives in
``electra_tf.names`` (``discriminator_table`` / ``generator_table``, read both ways) and follows
``transformers/models/electra/modeling_electra.py``: torch ``Linear`` weights are [out, in], so
kernels are transposed; LayerNorm gamma -> ``weight``, beta -> ``bias``; ``dense_1`` of the
discriminator head -> ``dense_prediction``; ``generator_predictions/output_bias`` ->
``generator_lm_head.bias``; ``generator_lm_head.weight`` is the (tied) word-embedding table and,
as in the files transformers writes, not stored.
Electric's two-tower cloze generator has no HF class and is rejected.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from electra_tf import atomic_io, names
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.names import HfTable
from electra_tf.reading.hf_import import (
  CONFIG_FILE,
  DISCRIMINATOR_DIR,
  GENERATOR_DIR,
  LAYER_NORM_EPS,
  bert_config_from_hf,
)

LAYOUT_FILE = "electra_tf_layout.json"
WEIGHTS_FILE = "model.safetensors"
DISCRIMINATOR_CLASS = "ElectraForPreTraining"
GENERATOR_CLASS = "ElectraForMaskedLM"


def hf_config(config: BertConfig, embedding_size: int, architecture: str) -> dict[str, Any]:
  """The ``config.json`` of one HF ELECTRA model (``ElectraConfig`` fields)."""
  return {
      "architectures": [architecture],
      "model_type": "electra",
      "vocab_size": config.vocab_size,
      "embedding_size": embedding_size,
      "hidden_size": config.hidden_size,
      "num_hidden_layers": config.num_hidden_layers,
      "num_attention_heads": config.num_attention_heads,
      "intermediate_size": config.intermediate_size,
      # HF "gelu" is the exact erf form, the official ELECTRA ``modeling.gelu``.
      "hidden_act": config.hidden_act.lower(),
      "hidden_dropout_prob": config.hidden_dropout_prob,
      "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
      "max_position_embeddings": config.max_position_embeddings,
      "type_vocab_size": config.type_vocab_size,
      "initializer_range": config.initializer_range,
      "layer_norm_eps": LAYER_NORM_EPS,
      "pad_token_id": 0,
      "position_embedding_type": "absolute",
      "tie_word_embeddings": True,
  }


def _as_array(value: Any) -> np.ndarray:
  return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def _take(variables: Mapping[str, np.ndarray], table: HfTable) -> dict[str, np.ndarray]:
  """HF name -> array for every row of ``table``; a missing variable or a wrong shape is an
  error. Alias rows (the tied ``generator_lm_head.weight``) are left out, as transformers'
  ``save_pretrained`` leaves out tied weights (``tie_word_embeddings`` restores them)."""
  out = {}
  for row in table.primary_rows:
    if row.tf_name not in variables:
      raise ValueError(f"HF export needs variable {row.tf_name!r}, which is missing")
    array = variables[row.tf_name]
    if tuple(array.shape) != row.tf_shape:
      raise ValueError(f"shape of {row.tf_name} is {list(array.shape)}, the config implies "
                       f"{list(row.tf_shape)}")
    out[row.hf_name] = np.ascontiguousarray(array.T if row.transpose else array)
  return out


def _write_model(folder: str, tensors: dict[str, np.ndarray], config: dict[str, Any]) -> None:
  """config.json + model.safetensors, each written to a temp file and renamed into place."""
  os.makedirs(folder, exist_ok=True)
  with atomic_io.temp_path(os.path.join(folder, WEIGHTS_FILE)) as tmp:
    # "format": "pt" is the metadata transformers' from_pretrained checks in safetensors files.
    save_file(tensors, tmp, metadata={"format": "pt"})
  _write_json(os.path.join(folder, CONFIG_FILE), config)


def _write_json(path: str, obj: Any) -> None:
  atomic_io.write_json(path, obj, indent=2, sort_keys=True)


def export_hf(variables: Mapping[str, Any], disc_config: BertConfig | None,
              gen_config: BertConfig | None, embedding_size: int | None, out_dir: str,
              untied_generator_embeddings: bool = False) -> dict[str, str]:
  """Writes our pre-training model as Hugging Face ELECTRA folders.

  What is written follows the variables present:
  ``discriminator_predictions/*`` -> ``<out_dir>/discriminator`` (``ElectraForPreTraining``);
  ``generator_predictions/*`` -> ``<out_dir>/generator`` (``ElectraForMaskedLM``), whose tower
  is ``generator/*`` (small generator) or ``electra/*`` (``untied_generator=False`` or MLM-only
  training, where the masked-LM head sits on the ``electra`` tower).

  Args:
    variables: TF1 name -> array or ``tf.Variable`` (optimizer slots and ``global_step`` are
      ignored; any other variable that does not go into a folder is an error).
    disc_config: sizes of the ``electra`` tower (``get_bert_config``).
    gen_config: sizes of the ``generator`` tower (``get_generator_config``); unused (may be
      None) when the masked-LM head sits on the ``electra`` tower.
    embedding_size: E, the width of ``electra/embeddings/*`` (None: the hidden size).
    out_dir: created if needed.
    untied_generator_embeddings: the generator has its own ``generator/embeddings/*`` [V, h].
  Returns:
    ``{"discriminator": path, "generator": path}`` for the folders written.
  Raises:
    ValueError: Electric variables, a missing variable, a shape that contradicts the configs,
      an unexported variable, or a head activation HF cannot express.
  """
  arrays = _exportable_arrays(variables)
  has_disc = names.join(names.DISCRIMINATOR_HEAD, names.DENSE_1, names.KERNEL) in arrays
  has_gen = names.join(names.GENERATOR_HEAD, names.OUTPUT_BIAS) in arrays
  if not (has_disc or has_gen):
    raise ValueError("nothing to export: no discriminator_predictions/* or "
                     "generator_predictions/* variables (fine-tuned models have no HF head here)")
  if disc_config is None:
    raise ValueError("disc_config is required (it sizes the electra tower)")
  e = disc_config.hidden_size if embedding_size is None else int(embedding_size)

  layout: dict[str, dict[str, str]] = {}
  used: set[str] = set()
  folders = []
  if has_disc:
    table = names.discriminator_table(disc_config, e)
    folders.append((DISCRIMINATOR_DIR, _take(arrays, table),
                    hf_config(disc_config, e, DISCRIMINATOR_CLASS)))
    used.update(r.tf_name for r in table.rows)
    layout[DISCRIMINATOR_DIR] = {"tower": names.DISCRIMINATOR,
                                 "embeddings": names.embeddings_scope(names.DISCRIMINATOR)}
  if has_gen:
    config, scope, emb_scope, gen_e = _generator_tower(arrays, disc_config, gen_config, e,
                                                       untied_generator_embeddings)
    table = names.generator_table(config, gen_e, scope, emb_scope)
    folders.append((GENERATOR_DIR, _take(arrays, table),
                    hf_config(config, gen_e, GENERATOR_CLASS)))
    used.update(r.tf_name for r in table.rows)
    layout[GENERATOR_DIR] = {"tower": scope, "embeddings": emb_scope}
  unused = sorted(set(arrays) - used)
  if unused:
    raise ValueError(f"{len(unused)} variable(s) have no place in the HF export, first: "
                     f"{unused[0]} (pass only the pre-training model's variables)")
  return _write_folders(out_dir, folders, layout)


def _write_folders(out_dir: str, folders: list[tuple[str, dict[str, np.ndarray], dict]],
                   layout: dict[str, dict[str, str]]) -> dict[str, str]:
  """Each (name, tensors, config.json) as ``<out_dir>/<name>``, then the layout file."""
  written: dict[str, str] = {}
  for name, tensors, config in folders:
    folder = os.path.join(out_dir, name)
    _write_model(folder, tensors, config)
    written[name] = folder
  _write_json(os.path.join(out_dir, LAYOUT_FILE), layout)
  return written


def _exportable_arrays(variables: Mapping[str, Any]) -> dict[str, np.ndarray]:
  """``variables`` as arrays without optimizer state; Electric's variables are an error."""
  arrays = {k: _as_array(v) for k, v in variables.items()
            if not names.OPTIMIZER_STATE.search(k)}
  electric = sorted(k for k in arrays if k.startswith(tuple(s + "/" for s in
                                                            names.ELECTRIC_SCOPES)))
  if electric:
    raise ValueError(f"Electric's two-tower cloze generator ({electric[0]}, ...) has no Hugging "
                     "Face model class; HF export supports ELECTRA and masked-LM models only")
  return arrays


def _generator_tower(arrays: Mapping[str, np.ndarray], disc_config: BertConfig,
                     gen_config: BertConfig | None, e: int, untied_generator_embeddings: bool
                     ) -> tuple[BertConfig, str, str, int]:
  """(config, tower scope, embeddings scope, embedding width) of the masked-LM model."""
  own_tower = any(k.startswith(names.GENERATOR + "/") for k in arrays)
  gen_embeddings = names.embeddings_scope(names.GENERATOR)
  own_embeddings = names.join(gen_embeddings, names.WORD_EMBEDDINGS) in arrays
  if own_embeddings != bool(untied_generator_embeddings):
    raise ValueError(
        f"untied_generator_embeddings={untied_generator_embeddings} but the variables "
        f"{'have' if own_embeddings else 'lack'} generator/embeddings/word_embeddings")
  if own_tower:
    if gen_config is None:
      raise ValueError("gen_config is required: the variables hold a generator/ tower")
    config, scope = gen_config, names.GENERATOR
    emb_scope, gen_e = ((gen_embeddings, gen_config.hidden_size) if own_embeddings
                        else (names.embeddings_scope(names.DISCRIMINATOR), e))
  else:  # masked-LM head on the discriminator tower (fully tied generator / MLM-only)
    config, scope, gen_e = disc_config, names.DISCRIMINATOR, e
    emb_scope = names.embeddings_scope(names.DISCRIMINATOR)
  if disc_config.hidden_act.lower() != "gelu":
    # Our head (like the official get_token_logits) applies the discriminator's hidden_act;
    # HF's ElectraGeneratorPredictions always applies gelu.
    raise ValueError(f"hidden_act={disc_config.hidden_act!r}: HF ElectraForMaskedLM's "
                     "generator head always uses gelu, so the generator cannot be exported")
  return config, scope, emb_scope, gen_e


def _read_folder(folder: str, layout: Mapping[str, str] | None) -> dict[str, np.ndarray]:
  """One HF model folder -> TF1 name -> array (kernels transposed back)."""
  with open(os.path.join(folder, CONFIG_FILE)) as f:
    cfg = json.load(f)
  config, e = bert_config_from_hf(cfg)
  arch = (cfg.get("architectures") or [None])[0]
  tensors = load_file(os.path.join(folder, WEIGHTS_FILE))
  if arch == DISCRIMINATOR_CLASS:
    table = names.discriminator_table(config, e)
  elif arch == GENERATOR_CLASS:
    layout = layout or {"tower": names.GENERATOR,
                        "embeddings": names.embeddings_scope(names.DISCRIMINATOR)}
    table = names.generator_table(config, e, layout["tower"], layout["embeddings"])
  else:
    raise ValueError(f"{folder}: architectures {cfg.get('architectures')} is neither "
                     f"{DISCRIMINATOR_CLASS} nor {GENERATOR_CLASS}")
  out = {}
  for row in table.primary_rows:
    if row.hf_name not in tensors:
      raise ValueError(f"{folder}: {WEIGHTS_FILE} lacks {row.hf_name}")
    array = tensors.pop(row.hf_name)
    array = np.ascontiguousarray(array.T) if row.transpose else array
    if tuple(array.shape) != row.tf_shape:
      raise ValueError(f"{folder}: {row.hf_name} gives {row.tf_name} shape {list(array.shape)}, "
                       f"config.json implies {list(row.tf_shape)}")
    out[row.tf_name] = array
  for row in table.rows:
    alias = tensors.pop(row.hf_name, None) if row.alias else None
    if alias is not None and not np.array_equal(alias, out[row.tf_name]):
      raise ValueError(f"{folder}: {row.hf_name} differs from {table.to_hf(row.tf_name)}; "
                       "ELECTRA's output layer is tied to the word embeddings")
  if tensors:
    raise ValueError(f"{folder}: unexpected tensor(s) {sorted(tensors)[:3]}")
  return out


def load_hf_export(path: str) -> dict[str, np.ndarray]:
  """Reads an ``export_hf`` folder (or one HF ELECTRA model folder) back to TF1 names.

  Tensors both folders hold (the tied ``electra/embeddings/*``) must agree bit for bit.
  Without ``electra_tf_layout.json`` the generator is taken to be the standard small
  generator (``generator/*`` tower, embeddings tied to ``electra/embeddings``).
  """
  if os.path.exists(os.path.join(path, CONFIG_FILE)):
    return _read_folder(path, None)
  layout: dict[str, Any] = {}
  if os.path.exists(os.path.join(path, LAYOUT_FILE)):
    with open(os.path.join(path, LAYOUT_FILE)) as f:
      layout = json.load(f)
  # The layout file names the folders one export wrote (a stale folder from an earlier export
  # into the same directory is not read).
  folders = [d for d in (DISCRIMINATOR_DIR, GENERATOR_DIR)
             if (d in layout if layout else os.path.exists(os.path.join(path, d, CONFIG_FILE)))]
  if not folders:
    raise FileNotFoundError(f"no HF export in {path}: neither {CONFIG_FILE} nor "
                            f"{DISCRIMINATOR_DIR}/ or {GENERATOR_DIR}/ with one")
  out: dict[str, np.ndarray] = {}
  for name in folders:
    for key, array in _read_folder(os.path.join(path, name), layout.get(name)).items():
      if key in out and not np.array_equal(out[key], array):
        raise ValueError(f"{key} differs between the {DISCRIMINATOR_DIR} and {GENERATOR_DIR} "
                         "folders (untied embeddings need the layout file)")
      out[key] = array
  return out
