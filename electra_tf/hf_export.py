"""Hugging Face export: our TF1-named variables -> ``transformers`` ELECTRA folders and back.

``export_hf`` writes, from a ``{tf1_name: array}`` mapping and the tower configs:

- ``<out>/discriminator/{config.json, model.safetensors}``: ``ElectraForPreTraining``.
- ``<out>/generator/{config.json, model.safetensors}``: ``ElectraForMaskedLM``.
- ``<out>/electra_tf_layout.json``: which TF1 scopes each folder came from, so
  ``load_hf_export`` maps the tensors back to the exact TF1 names.

Weights are written with ``safetensors.numpy`` (no torch needed). The HF names follow
``transformers/models/electra/modeling_electra.py``: torch ``Linear`` weights are [out, in], so
kernels are transposed; LayerNorm gamma -> ``weight``, beta -> ``bias``; ``dense_1`` of the
discriminator head -> ``dense_prediction``; ``generator_predictions/output_bias`` ->
``generator_lm_head.bias`` and ``generator_lm_head.weight`` is the (tied) word-embedding table.
Electric's two-tower cloze generator has no HF class and is rejected.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
from collections.abc import Mapping
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from electra_tf.modeling.bert_config import BertConfig

DISCRIMINATOR_DIR = "discriminator"
GENERATOR_DIR = "generator"
LAYOUT_FILE = "electra_tf_layout.json"
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
DISCRIMINATOR_CLASS = "ElectraForPreTraining"
GENERATOR_CLASS = "ElectraForMaskedLM"
LAYER_NORM_EPS = 1e-12  # contrib layer_norm's epsilon, what every official LayerNorm uses
# Checkpoint entries that are training state, not model weights.
_TRAINING_STATE = re.compile(r"(^global_step$|/adam_[mv]$)")
_ELECTRIC_SCOPES = ("generator_ltr/", "generator_rtl/", "cloze_predictions/")


@dataclasses.dataclass(frozen=True)
class _Row:
  """One tensor: TF1 name and shape <-> HF name; ``transpose`` for dense kernels."""

  tf_name: str
  hf_name: str
  tf_shape: tuple[int, ...]
  transpose: bool = False


def _dense(tf_scope: str, hf_scope: str, n_in: int, n_out: int) -> list[_Row]:
  """tf ``kernel`` [in, out], ``bias`` [out] <-> torch ``weight`` [out, in], ``bias``."""
  return [_Row(f"{tf_scope}/kernel", f"{hf_scope}.weight", (n_in, n_out), transpose=True),
          _Row(f"{tf_scope}/bias", f"{hf_scope}.bias", (n_out,))]


def _layer_norm(tf_scope: str, hf_scope: str, dim: int) -> list[_Row]:
  return [_Row(f"{tf_scope}/gamma", f"{hf_scope}.weight", (dim,)),
          _Row(f"{tf_scope}/beta", f"{hf_scope}.bias", (dim,))]


def _embedding_rows(tf_scope: str, config: BertConfig, embedding_size: int) -> list[_Row]:
  """``<tf_scope>/{word,token_type,position}_embeddings`` + LayerNorm -> ``electra.embeddings``."""
  e = embedding_size
  return [
      _Row(f"{tf_scope}/word_embeddings", "electra.embeddings.word_embeddings.weight",
           (config.vocab_size, e)),
      _Row(f"{tf_scope}/position_embeddings", "electra.embeddings.position_embeddings.weight",
           (config.max_position_embeddings, e)),
      _Row(f"{tf_scope}/token_type_embeddings",
           "electra.embeddings.token_type_embeddings.weight", (config.type_vocab_size, e)),
      *_layer_norm(f"{tf_scope}/LayerNorm", "electra.embeddings.LayerNorm", e),
  ]


def _tower_rows(scope: str, embeddings_scope: str, config: BertConfig,
                embedding_size: int) -> list[_Row]:
  """One official ``BertModel`` (embeddings, projection, L layers) -> HF ``electra.*``."""
  h, i = config.hidden_size, config.intermediate_size
  rows = _embedding_rows(embeddings_scope, config, embedding_size)
  if embedding_size != h:
    rows += _dense(f"{scope}/embeddings_project", "electra.embeddings_project", embedding_size, h)
  for n in range(config.num_hidden_layers):
    tf_l, hf_l = f"{scope}/encoder/layer_{n}", f"electra.encoder.layer.{n}"
    for part in ("query", "key", "value"):
      rows += _dense(f"{tf_l}/attention/self/{part}", f"{hf_l}.attention.self.{part}", h, h)
    rows += _dense(f"{tf_l}/attention/output/dense", f"{hf_l}.attention.output.dense", h, h)
    rows += _layer_norm(f"{tf_l}/attention/output/LayerNorm",
                        f"{hf_l}.attention.output.LayerNorm", h)
    rows += _dense(f"{tf_l}/intermediate/dense", f"{hf_l}.intermediate.dense", h, i)
    rows += _dense(f"{tf_l}/output/dense", f"{hf_l}.output.dense", i, h)
    rows += _layer_norm(f"{tf_l}/output/LayerNorm", f"{hf_l}.output.LayerNorm", h)
  return rows


def discriminator_rows(config: BertConfig, embedding_size: int) -> list[_Row]:
  """Name table of ``ElectraForPreTraining`` (tower ``electra`` + ``discriminator_predictions``)."""
  h = config.hidden_size
  return (_tower_rows("electra", "electra/embeddings", config, embedding_size)
          + _dense("discriminator_predictions/dense", "discriminator_predictions.dense", h, h)
          + _dense("discriminator_predictions/dense_1",
                   "discriminator_predictions.dense_prediction", h, 1))


def generator_rows(config: BertConfig, embedding_size: int, scope: str = "generator",
                   embeddings_scope: str = "electra/embeddings") -> list[_Row]:
  """Name table of ``ElectraForMaskedLM`` (tower ``scope`` + ``generator_predictions``).

  ``generator_lm_head.weight`` is not a row: it is the word-embedding table itself (tied).
  """
  return (_tower_rows(scope, embeddings_scope, config, embedding_size)
          + _dense("generator_predictions/dense", "generator_predictions.dense",
                   config.hidden_size, embedding_size)
          + _layer_norm("generator_predictions/LayerNorm", "generator_predictions.LayerNorm",
                        embedding_size)
          + [_Row("generator_predictions/output_bias", "generator_lm_head.bias",
                  (config.vocab_size,))])


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


def _bert_config_from_hf(cfg: Mapping[str, Any]) -> tuple[BertConfig, int]:
  """(BertConfig, embedding_size) from an HF ELECTRA ``config.json``."""
  fields = {f.name for f in dataclasses.fields(BertConfig)}
  config = BertConfig.from_dict({k: v for k, v in cfg.items() if k in fields})
  return config, int(cfg.get("embedding_size", config.hidden_size))


def _as_array(value: Any) -> np.ndarray:
  return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def _take(variables: Mapping[str, np.ndarray], rows: list[_Row]) -> dict[str, np.ndarray]:
  """HF name -> array for ``rows``; a missing variable or a wrong shape is an error."""
  out = {}
  for row in rows:
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
  fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
  os.close(fd)
  # "format": "pt" is the metadata transformers' from_pretrained checks in safetensors files.
  save_file(tensors, tmp, metadata={"format": "pt"})
  os.replace(tmp, os.path.join(folder, WEIGHTS_FILE))
  _write_json(os.path.join(folder, CONFIG_FILE), config)


def _write_json(path: str, obj: Any) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=2, sort_keys=True)
    f.write("\n")
  os.replace(tmp, path)


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
  arrays = {k: _as_array(v) for k, v in variables.items() if not _TRAINING_STATE.search(k)}
  electric = sorted(k for k in arrays if k.startswith(_ELECTRIC_SCOPES))
  if electric:
    raise ValueError(f"Electric's two-tower cloze generator ({electric[0]}, ...) has no Hugging "
                     "Face model class; HF export supports ELECTRA and masked-LM models only")
  has_disc = "discriminator_predictions/dense_1/kernel" in arrays
  has_gen = "generator_predictions/output_bias" in arrays
  if not (has_disc or has_gen):
    raise ValueError("nothing to export: no discriminator_predictions/* or "
                     "generator_predictions/* variables (fine-tuned models have no HF head here)")
  if disc_config is None:
    raise ValueError("disc_config is required (it sizes the electra tower)")
  e = disc_config.hidden_size if embedding_size is None else int(embedding_size)

  layout: dict[str, dict[str, str]] = {}
  written: dict[str, str] = {}
  used: set[str] = set()
  folders = []
  if has_disc:
    rows = discriminator_rows(disc_config, e)
    folders.append((DISCRIMINATOR_DIR, _take(arrays, rows),
                    hf_config(disc_config, e, DISCRIMINATOR_CLASS)))
    used.update(r.tf_name for r in rows)
    layout[DISCRIMINATOR_DIR] = {"tower": "electra", "embeddings": "electra/embeddings"}
  if has_gen:
    own_tower = any(k.startswith("generator/") for k in arrays)
    own_embeddings = "generator/embeddings/word_embeddings" in arrays
    if own_embeddings != bool(untied_generator_embeddings):
      raise ValueError(
          f"untied_generator_embeddings={untied_generator_embeddings} but the variables "
          f"{'have' if own_embeddings else 'lack'} generator/embeddings/word_embeddings")
    if own_tower:
      if gen_config is None:
        raise ValueError("gen_config is required: the variables hold a generator/ tower")
      config, scope = gen_config, "generator"
      emb_scope, gen_e = (("generator/embeddings", gen_config.hidden_size) if own_embeddings
                          else ("electra/embeddings", e))
    else:  # masked-LM head on the discriminator tower (fully tied generator / MLM-only)
      config, scope, emb_scope, gen_e = disc_config, "electra", "electra/embeddings", e
    if disc_config.hidden_act.lower() != "gelu":
      # Our head (like the official get_token_logits) applies the discriminator's hidden_act;
      # HF's ElectraGeneratorPredictions always applies gelu.
      raise ValueError(f"hidden_act={disc_config.hidden_act!r}: HF ElectraForMaskedLM's "
                       "generator head always uses gelu, so the generator cannot be exported")
    rows = generator_rows(config, gen_e, scope, emb_scope)
    tensors = _take(arrays, rows)
    tensors["generator_lm_head.weight"] = tensors["electra.embeddings.word_embeddings.weight"]
    folders.append((GENERATOR_DIR, tensors, hf_config(config, gen_e, GENERATOR_CLASS)))
    used.update(r.tf_name for r in rows)
    layout[GENERATOR_DIR] = {"tower": scope, "embeddings": emb_scope}
  unused = sorted(set(arrays) - used)
  if unused:
    raise ValueError(f"{len(unused)} variable(s) have no place in the HF export, first: "
                     f"{unused[0]} (pass only the pre-training model's variables)")
  for name, tensors, config in folders:
    folder = os.path.join(out_dir, name)
    _write_model(folder, tensors, config)
    written[name] = folder
  _write_json(os.path.join(out_dir, LAYOUT_FILE), layout)
  return written


def _read_folder(folder: str, layout: Mapping[str, str] | None) -> dict[str, np.ndarray]:
  """One HF model folder -> TF1 name -> array (kernels transposed back)."""
  with open(os.path.join(folder, CONFIG_FILE)) as f:
    cfg = json.load(f)
  config, e = _bert_config_from_hf(cfg)
  arch = (cfg.get("architectures") or [None])[0]
  tensors = load_file(os.path.join(folder, WEIGHTS_FILE))
  if arch == DISCRIMINATOR_CLASS:
    rows = discriminator_rows(config, e)
  elif arch == GENERATOR_CLASS:
    layout = layout or {"tower": "generator", "embeddings": "electra/embeddings"}
    rows = generator_rows(config, e, layout["tower"], layout["embeddings"])
    head = tensors.pop("generator_lm_head.weight", None)
    table = tensors.get("electra.embeddings.word_embeddings.weight")
    if head is not None and table is not None and not np.array_equal(head, table):
      raise ValueError(f"{folder}: generator_lm_head.weight differs from the word embeddings; "
                       "ELECTRA's output layer is tied to them")
  else:
    raise ValueError(f"{folder}: architectures {cfg.get('architectures')} is neither "
                     f"{DISCRIMINATOR_CLASS} nor {GENERATOR_CLASS}")
  out = {}
  for row in rows:
    if row.hf_name not in tensors:
      raise ValueError(f"{folder}: {WEIGHTS_FILE} lacks {row.hf_name}")
    array = tensors.pop(row.hf_name)
    array = np.ascontiguousarray(array.T) if row.transpose else array
    if tuple(array.shape) != row.tf_shape:
      raise ValueError(f"{folder}: {row.hf_name} gives {row.tf_name} shape {list(array.shape)}, "
                       f"config.json implies {list(row.tf_shape)}")
    out[row.tf_name] = array
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
