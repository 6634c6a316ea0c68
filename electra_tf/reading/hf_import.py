"""Hugging Face ELECTRA folders -> official TF1 variables and hparams (inverse of ``hf_export``).

``import_hf(path)`` reads a discriminator (``ElectraForPreTraining`` or a bare ``ElectraModel``)
and/or a generator (``ElectraForMaskedLM``) as Hugging Face stores them: ``config.json``
(``model_type`` "electra") and ``model.safetensors`` (also sharded, or ``pytorch_model.bin``
when torch is installed), ``tokenizer_config.json`` and ``vocab.txt``. ``path`` is one model
folder or a folder with ``discriminator/`` and ``generator/``.

Mapping (the rows of ``hf_export``): torch ``Linear`` weights [out, in] are transposed to TF
kernels [in, out]; LayerNorm ``weight``/``bias`` -> ``gamma``/``beta``;
``dense_prediction`` -> ``discriminator_predictions/dense_1``; ``generator_lm_head.bias`` ->
``generator_predictions/output_bias`` (``generator_lm_head.weight`` is the tied word table).
A generator whose embeddings equal the discriminator's shares ``electra/embeddings`` (the
official default); different embeddings become ``generator/embeddings/*`` with
``untied_generator_embeddings``.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from electra_tf import model_files, names
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.reading.checkpoint_hparams import shape_hparams

CONFIG_FILE = "config.json"
DISCRIMINATOR_DIR = "discriminator"  # the two folders of a pair, as ``hf_export`` writes them
GENERATOR_DIR = "generator"
LAYER_NORM_EPS = 1e-12  # contrib layer_norm's epsilon, what every official LayerNorm uses
DISCRIMINATOR_CLASSES = ("ElectraForPreTraining", "ElectraModel")
GENERATOR_CLASS = "ElectraForMaskedLM"
_EMBEDDING_KEYS = ("word_embeddings.weight", "position_embeddings.weight",
                   "token_type_embeddings.weight", "LayerNorm.weight", "LayerNorm.bias")
_IGNORED_SUFFIXES = ("position_ids",)  # buffers some transformers versions save


@dataclasses.dataclass
class HFImport:
  """An imported model: ``variables`` {TF1 name: array}, official ``hparams`` (including
  ``do_lower_case``), ``vocab_file`` (None if the folder has none), a one-line ``summary``."""

  variables: dict[str, np.ndarray]
  hparams: dict[str, Any]
  vocab_file: str | None
  summary: str


def tf1_rows(kind: str, config: Any, embedding_size: int, scope: str = "generator",
             embeddings_scope: str = "electra/embeddings") -> list[Any]:
  """The TF1 <-> HF name table of one tower + head (``kind``: "discriminator" / "generator").

  The same ``electra_tf.names`` table the export writes with, read in the other direction;
  rows have ``tf_name``, ``hf_name``, ``tf_shape``, ``transpose`` and ``alias``.
  """
  if kind == "discriminator":
    return list(names.discriminator_table(config, embedding_size).rows)
  return list(names.generator_table(config, embedding_size, scope, embeddings_scope).rows)


def bert_config_from_hf(cfg: Mapping[str, Any]) -> tuple[BertConfig, int]:
  """(BertConfig, embedding_size) from an HF ELECTRA ``config.json``."""
  fields = {f.name for f in dataclasses.fields(BertConfig)}
  config = BertConfig.from_dict({k: v for k, v in cfg.items() if k in fields})
  return config, int(cfg.get("embedding_size", config.hidden_size))


def _read_json(path: str) -> dict[str, Any]:
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"cannot read {path}: {e}") from None


def load_weights(folder: str) -> dict[str, np.ndarray]:
  """HF parameter name -> float32 array from ``model.safetensors`` (single or sharded), else
  ``pytorch_model.bin`` (needs torch). Other formats are a one-line error."""
  single = os.path.join(folder, "model.safetensors")
  shards = sorted(glob.glob(os.path.join(folder, "model-*-of-*.safetensors")))
  if os.path.exists(single) or shards:
    from safetensors.numpy import load_file

    tensors: dict[str, np.ndarray] = {}
    for path in [single] if os.path.exists(single) else shards:
      tensors.update(load_file(path))
    return tensors
  bin_path = os.path.join(folder, "pytorch_model.bin")
  if os.path.exists(bin_path):
    try:
      import torch
    except ImportError:
      raise ValueError(f"{bin_path} needs PyTorch, which is not installed; convert it to "
                       "model.safetensors (transformers: save_pretrained(safe_serialization="
                       "True))") from None
    state = torch.load(bin_path, map_location="cpu", weights_only=True)
    return {k: v.float().numpy() for k, v in state.items()}
  if os.path.exists(os.path.join(folder, "tf_model.h5")):
    raise ValueError(f"{folder} has only tf_model.h5 (Keras HDF5), which is not read; convert "
                     "it to model.safetensors")
  raise FileNotFoundError(f"no model.safetensors or pytorch_model.bin in {folder}")


@dataclasses.dataclass
class _Model:
  folder: str
  arch: str
  config: Any  # BertConfig
  embedding_size: int
  tensors: dict[str, np.ndarray]


def _read_model(folder: str) -> _Model:
  """config.json + weights of one folder, names normalised to the ``electra.`` prefix."""
  cfg = _read_json(os.path.join(folder, CONFIG_FILE))
  if cfg.get("model_type") != "electra":
    raise ValueError(f"{folder}/{CONFIG_FILE}: model_type is {cfg.get('model_type')!r}, "
                     "not 'electra'")
  eps = cfg.get("layer_norm_eps", LAYER_NORM_EPS)
  if abs(eps - LAYER_NORM_EPS) > 1e-15:
    raise ValueError(f"{folder}/{CONFIG_FILE}: layer_norm_eps {eps}; ELECTRA uses "
                     f"{LAYER_NORM_EPS}")
  if cfg.get("position_embedding_type", "absolute") != "absolute":
    raise ValueError(f"{folder}/{CONFIG_FILE}: position_embedding_type "
                     f"{cfg['position_embedding_type']!r}; only 'absolute' exists in ELECTRA")
  arch = (cfg.get("architectures") or ["ElectraModel"])[0]
  if arch not in (*DISCRIMINATOR_CLASSES, GENERATOR_CLASS):
    raise ValueError(f"{folder}/{CONFIG_FILE}: architecture {arch} is not one of "
                     f"{', '.join((*DISCRIMINATOR_CLASSES, GENERATOR_CLASS))}")
  config, e = bert_config_from_hf(cfg)
  tensors = {k: np.asarray(v, np.float32) for k, v in load_weights(folder).items()
             if not k.endswith(_IGNORED_SUFFIXES)}
  if not any(k.startswith("electra.") for k in tensors):  # bare ElectraModel
    tensors = {f"electra.{k}": v for k, v in tensors.items()}
  return _Model(folder, arch, config, e, tensors)


def _find_models(path: str, generator: str | None) -> tuple[_Model | None, _Model | None]:
  """(discriminator, generator) from ``path`` (one folder or a pair) and ``generator``."""
  if os.path.exists(os.path.join(path, CONFIG_FILE)):
    first = _read_model(path)
    second = _read_model(generator) if generator else None
  else:
    dirs = [os.path.join(path, d) for d in (DISCRIMINATOR_DIR, GENERATOR_DIR)]
    found = [_read_model(d) for d in dirs if os.path.exists(os.path.join(d, CONFIG_FILE))]
    if not found:
      raise FileNotFoundError(f"no Hugging Face model in {path}: no {CONFIG_FILE} there or in "
                              f"{DISCRIMINATOR_DIR}/ or {GENERATOR_DIR}/")
    first, second = found[0], (found[1] if len(found) > 1 else None)
  disc = gen = None
  for model in (first, second):
    if model is None:
      continue
    slot = "generator" if model.arch == GENERATOR_CLASS else "discriminator"
    if (gen if slot == "generator" else disc) is not None:
      raise ValueError(f"two {slot}s given: {model.folder}")
    if slot == "generator":
      gen = model
    else:
      disc = model
  return disc, gen


def _take(model: _Model, rows: list[Any], out: dict[str, np.ndarray]) -> None:
  """Moves ``rows`` out of ``model.tensors`` into ``out`` under TF1 names (transposed back)."""
  for row in rows:
    if row.alias and row.hf_name not in model.tensors:
      continue  # the tied output layer: HF may store it or not; when stored it must be equal
    if row.hf_name not in model.tensors:
      raise ValueError(f"{model.folder}: the weights lack {row.hf_name} ({CONFIG_FILE} "
                       f"implies {row.tf_name} {list(row.tf_shape)})")
    array = model.tensors.pop(row.hf_name)
    array = np.ascontiguousarray(array.T) if row.transpose else array
    if tuple(array.shape) != row.tf_shape:
      raise ValueError(f"{model.folder}: {row.hf_name} gives {row.tf_name} shape "
                       f"{list(array.shape)}, {CONFIG_FILE} implies {list(row.tf_shape)}")
    if row.tf_name in out and not np.array_equal(out[row.tf_name], array):
      raise ValueError(f"{model.folder}: {row.hf_name} differs from the discriminator's")
    out[row.tf_name] = array


def _same_embeddings(disc: _Model, gen: _Model) -> bool:
  return all(
    np.array_equal(disc.tensors.get(f"electra.embeddings.{k}"),
                   gen.tensors.get(f"electra.embeddings.{k}")) for k in _EMBEDDING_KEYS)


def _check_generator(disc: _Model, gen: _Model) -> None:
  """The official generator config: the discriminator's with hidden h, 4h, max(1, h // 64)."""
  d, g = disc.config, gen.config
  for field in ("vocab_size", "hidden_act", "max_position_embeddings", "type_vocab_size"):
    if getattr(d, field) != getattr(g, field):
      raise ValueError(f"{gen.folder}: generator {field} {getattr(g, field)!r} differs from the "
                       f"discriminator's {getattr(d, field)!r}")
  h = g.hidden_size
  if g.intermediate_size != 4 * h or g.num_attention_heads != max(1, h // 64):
    raise ValueError(f"{gen.folder}: generator intermediate_size {g.intermediate_size} / "
                     f"num_attention_heads {g.num_attention_heads}; the official generator has "
                     f"{4 * h} / {max(1, h // 64)} for hidden_size {h}")


def _tokenizer_info(folders: list[str]) -> tuple[bool, str | None]:
  """(do_lower_case, vocab.txt path) from the first folder that has them."""
  lower, vocab = None, None
  for folder in folders:
    path = os.path.join(folder, "tokenizer_config.json")
    if lower is None and os.path.exists(path):
      lower = bool(_read_json(path).get("do_lower_case", True))
    if vocab is None:
      vocab = model_files.vocab_in(folder)
  return (True if lower is None else lower), vocab


def import_hf(path: str, generator: str | None = None) -> HFImport:
  """Reads HF ELECTRA model(s) as official TF1 variables + hparams.

  Args:
    path: one model folder (``config.json``) or a folder holding ``discriminator/`` and/or
      ``generator/``.
    generator: a separate ``ElectraForMaskedLM`` folder to pair with ``path``.
  Returns:
    ``HFImport``; ``hparams`` rebuild the model with ``PretrainingConfig`` (a discriminator
    alone gives ``uniform_generator``; a generator alone a masked-LM-only model).
  Raises:
    ValueError / FileNotFoundError: one line naming the folder and the problem.
  """
  disc, gen = _find_models(path, generator)
  out: dict[str, np.ndarray] = {}
  untied = False
  has_head = disc is not None and disc.arch == "ElectraForPreTraining"
  if disc is not None and gen is not None:  # before _take moves the tensors out
    untied = not _same_embeddings(disc, gen)
  if disc is not None:
    rows = tf1_rows("discriminator", disc.config, disc.embedding_size)
    if not has_head:
      rows = [r for r in rows if not r.tf_name.startswith("discriminator_predictions/")]
    _take(disc, rows, out)
  if gen is not None:
    head = gen.tensors.pop("generator_lm_head.weight", None)
    table = gen.tensors.get("electra.embeddings.word_embeddings.weight")
    if head is not None and not np.array_equal(head, table):
      raise ValueError(f"{gen.folder}: generator_lm_head.weight differs from the word "
                       "embeddings; ELECTRA's output layer is tied to them")
    if disc is None:
      scope, emb_scope = "electra", "electra/embeddings"
    else:
      _check_generator(disc, gen)
      scope = "generator"
      emb_scope = "generator/embeddings" if untied else "electra/embeddings"
      if untied and gen.embedding_size != gen.config.hidden_size:
        raise ValueError(f"{gen.folder}: the generator has its own embeddings of width "
                         f"{gen.embedding_size} != its hidden size {gen.config.hidden_size}; "
                         "official untied generator embeddings have the hidden width")
      if not untied and gen.embedding_size != disc.embedding_size:
        raise ValueError(f"{gen.folder}: embedding_size {gen.embedding_size} differs from the "
                         f"discriminator's {disc.embedding_size}")
    _take(gen, tf1_rows("generator", gen.config, gen.embedding_size, scope, emb_scope), out)
  for model in (disc, gen):
    if model is not None and model.tensors:
      raise ValueError(f"{model.folder}: unexpected tensor(s) {sorted(model.tensors)[:3]}")
  base = disc or gen
  c = base.config
  hparams = shape_hparams(
    c.vocab_size, base.embedding_size, c.hidden_size, c.num_hidden_layers, c.intermediate_size,
    heads=c.num_attention_heads, hidden_act=c.hidden_act,
    max_position_embeddings=c.max_position_embeddings, type_vocab_size=c.type_vocab_size,
    generator=(gen.config.hidden_size, gen.config.num_hidden_layers)
    if gen is not None and disc is not None else None,
    untied_embeddings=untied, discriminator=disc is not None, tied_generator=disc is None)
  _add_dropout(hparams, c)
  folders = [m.folder for m in (disc, gen) if m is not None]
  hparams["do_lower_case"], vocab = _tokenizer_info(folders)
  return HFImport(out, hparams, vocab, _summary(hparams, disc, gen, has_head, untied))


def _add_dropout(hparams: dict[str, Any], config: Any) -> None:
  """Non-default dropout / initializer values go into model_hparam_overrides."""
  for field, default in (("hidden_dropout_prob", 0.1), ("attention_probs_dropout_prob", 0.1),
                         ("initializer_range", 0.02)):
    if getattr(config, field) != default:
      hparams["model_hparam_overrides"][field] = getattr(config, field)


def _summary(hparams: Mapping[str, Any], disc: _Model | None, gen: _Model | None,
             has_head: bool, untied: bool) -> str:
  c = (disc or gen).config
  parts = [f"vocab_size {c.vocab_size}", f"embedding_size {hparams['embedding_size']}",
           f"hidden {c.hidden_size} x {c.num_hidden_layers} layers, "
           f"{c.num_attention_heads} heads"]
  if disc is not None and not has_head:
    parts.append("no discriminator head (ElectraModel)")
  if disc is not None and gen is not None:
    parts.append(f"generator {hparams['generator_hidden_size']:g} x "
                 f"{gen.config.num_hidden_layers} layers "
                 f"({'untied' if untied else 'tied'} embeddings)")
  elif gen is not None:
    parts.append("masked LM only")
  return "Hugging Face ELECTRA: " + ", ".join(parts)


def is_hf_folder(path: str) -> bool:
  """True for a Hugging Face ELECTRA folder (``config.json`` with ``model_type`` "electra"
  there or in ``discriminator/`` / ``generator/``)."""
  for folder in (path, os.path.join(path, DISCRIMINATOR_DIR),
                 os.path.join(path, GENERATOR_DIR)):
    config = os.path.join(folder, CONFIG_FILE)
    if os.path.isfile(config):
      try:
        return _read_json(config).get("model_type") == "electra"
      except ValueError:
        return False
  return False


def assign(variables: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
  """Sets model variables ({TF1 name: tf.Variable}) from imported arrays; the two name sets
  must be equal (a missing or extra tensor is a one-line error naming the first one)."""
  missing = sorted(set(variables) - set(arrays))
  extra = sorted(set(arrays) - set(variables))
  if missing or extra:
    raise ValueError(f"the imported model does not fit: {len(missing)} variable(s) missing "
                     f"(first: {missing[:1]}), {len(extra)} unused (first: {extra[:1]})")
  for name, var in variables.items():
    if list(var.shape) != list(arrays[name].shape):
      raise ValueError(f"{name}: imported shape {list(arrays[name].shape)}, model "
                       f"{list(var.shape)}")
    var.assign(arrays[name])
