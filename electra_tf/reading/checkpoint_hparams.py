"""The hparams that describe a model path: its ``hparams.json`` when it has one, else the
official hparams inferred from an official TF1 checkpoint's tensor shapes (the released ELECTRA
models, the official reference folders), and a run's hparams merged with them.

``shape_hparams`` writes sizes as official hparams (``model_hparam_overrides`` only where the
size preset differs), which the Hugging Face import uses too. Attention heads cannot be read
from shapes: ``heads_for`` guesses them (``model_dir.GUESSED_KEYS``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from electra_tf import checkpoints
from electra_tf.config import MODEL_SIZES
from electra_tf.model_sizes import DEBUG_BERT_SIZES
from electra_tf.reading.model_dir import (
  HPARAMS_FILE,
  hparams_source,
  merge_hparams,
  read_model_hparams,
)

# Hidden size -> attention heads, which shapes cannot tell: the official presets (and debug).
PRESET_HEADS = {256: 4, 768: 12, 1024: 16, DEBUG_BERT_SIZES["hidden_size"]:
                DEBUG_BERT_SIZES["num_attention_heads"]}
# Fractions the official configs use, preferred when they give the same size.
_OFFICIAL_FRACTIONS = (1.0, 0.5, 0.25, 0.33333)


def fraction(part: int, whole: int) -> float:
  """The generator fraction f with int(round(whole * f)) == part: an official value when one
  fits, else the shortest decimal that does."""
  for f in _OFFICIAL_FRACTIONS:
    if int(round(whole * f)) == part:
      return f
  for digits in range(1, 8):
    f = round(part / whole, digits)
    if f > 0 and int(round(whole * f)) == part:
      return f
  return part / whole


def model_size_for(hidden: int) -> str:
  """The preset with this hidden size, else the nearest smaller one ("small" below 768)."""
  for name, sizes in MODEL_SIZES.items():
    if sizes["hidden_size"] == hidden:
      return name
  return "small" if hidden < 768 else "base" if hidden < 1024 else "large"




def heads_for(hidden: int) -> int:
  """Attention heads for a hidden size (shapes cannot tell): preset, else hidden // 64."""
  return PRESET_HEADS.get(hidden, max(1, hidden // 64))


def shape_hparams(vocab_size: int, embedding_size: int, hidden: int, layers: int,
                  intermediate: int, heads: int | None = None, hidden_act: str = "gelu",
                  max_position_embeddings: int = 512, type_vocab_size: int = 2,
                  generator: tuple[int, int] | None = None, untied_embeddings: bool = False,
                  discriminator: bool = True, two_tower: bool = False,
                  tied_generator: bool = False) -> dict[str, Any]:
  """Official hparams that rebuild a model of these sizes.

  ``generator``: (hidden h, layers) of a separate generator tower, or None (no generator, or
  with ``tied_generator`` the masked-LM head on the discriminator tower). The sizes go into
  ``model_hparam_overrides`` only where they differ from what ``model_size`` gives.
  """
  size = model_size_for(hidden)
  heads = heads_for(hidden) if heads is None else heads
  preset = MODEL_SIZES[size]
  overrides: dict[str, Any] = {}
  if hidden != preset["hidden_size"]:
    overrides["hidden_size"] = hidden
  if layers != preset["num_hidden_layers"]:
    overrides["num_hidden_layers"] = layers
  if heads != max(1, hidden // 64):
    overrides["num_attention_heads"] = heads
  if intermediate != 4 * hidden:
    overrides["intermediate_size"] = intermediate
  if hidden_act != "gelu":
    overrides["hidden_act"] = hidden_act
  if max_position_embeddings != 512:
    overrides["max_position_embeddings"] = max_position_embeddings
  if type_vocab_size != 2:
    overrides["type_vocab_size"] = type_vocab_size
  out: dict[str, Any] = {"model_size": size, "vocab_size": vocab_size,
                         "embedding_size": embedding_size, "model_hparam_overrides": overrides}
  has_generator = generator is not None or tied_generator
  out["electric_objective"] = bool(two_tower and discriminator)
  out["electra_objective"] = bool(discriminator and not two_tower)
  out["two_tower_generator"] = bool(two_tower)
  out["uniform_generator"] = bool(discriminator and not has_generator)
  out["untied_generator"] = not tied_generator
  out["untied_generator_embeddings"] = bool(untied_embeddings)
  if generator is not None:
    out["generator_hidden_size"] = fraction(generator[0], hidden)
    out["generator_layers"] = fraction(generator[1], layers)
  return out


def _tower_sizes(shapes: Mapping[str, list[int]], scope: str) -> tuple[int, int, int] | None:
  """(hidden, layers, intermediate) of the tower under ``scope``; None if absent."""
  query = shapes.get(f"{scope}/encoder/layer_0/attention/self/query/kernel")
  if query is None:
    return None
  layers = 0
  while f"{scope}/encoder/layer_{layers}/attention/self/query/kernel" in shapes:
    layers += 1
  intermediate = shapes[f"{scope}/encoder/layer_0/intermediate/dense/kernel"][1]
  return query[0], layers, intermediate


def infer_hparams_from_checkpoint(prefix: str) -> tuple[dict[str, Any], str]:
  """(official hparams, one-line summary) from an official TF1 checkpoint's tensor shapes.

  Reads sizes, generator sizing and the tower layout (tied / untied generator embeddings,
  Electric two towers, a masked-LM head on the discriminator, discriminator presence);
  attention heads come from the presets (``heads_for``). Electric and ELECTRA with a
  two-tower generator have the same variables: such a checkpoint is read as Electric.
  """
  import tensorflow as tf

  keys = checkpoints.read_retried(prefix, lambda: tf.train.list_variables(prefix))
  shapes = {name: list(shape) for name, shape in keys}
  if any(name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH") for name in shapes):
    raise ValueError(f"{prefix} is an object-based (TF2) checkpoint; its hparams cannot be "
                     f"inferred: keep {HPARAMS_FILE} beside it or pass --hparams")
  table = shapes.get("electra/embeddings/word_embeddings")
  disc = _tower_sizes(shapes, "electra")
  if table is None or disc is None:
    raise ValueError(f"{prefix} has no electra/embeddings/word_embeddings or electra/encoder: "
                     "not an ELECTRA checkpoint")
  vocab_size, embedding_size = table
  hidden, layers, intermediate = disc
  has_disc = "discriminator_predictions/dense_1/kernel" in shapes
  two_tower = _tower_sizes(shapes, "generator_ltr")
  small = _tower_sizes(shapes, "generator")
  gen = two_tower or small
  untied = "generator/embeddings/word_embeddings" in shapes
  tied_head = gen is None and "generator_predictions/output_bias" in shapes
  values = shape_hparams(
    vocab_size, embedding_size, hidden, layers, intermediate,
    max_position_embeddings=shapes["electra/embeddings/position_embeddings"][0],
    type_vocab_size=shapes["electra/embeddings/token_type_embeddings"][0],
    generator=None if gen is None else gen[:2], untied_embeddings=untied, discriminator=has_disc,
    two_tower=two_tower is not None, tied_generator=tied_head)
  if gen is not None and gen[2] != 4 * gen[0]:
    raise ValueError(f"{prefix}: generator intermediate size {gen[2]} is not 4 x its hidden "
                     f"size {gen[0]}, which the official generator config always has")
  summary = _summary(values, hidden, layers, gen, has_disc, tied_head)
  tasks = sorted({n.split("/")[1] for n in shapes if n.startswith("task_specific/")})
  if tasks:
    summary += f", fine-tuned heads: {', '.join(tasks)}"
  return values, summary


def _summary(values: Mapping[str, Any], hidden: int, layers: int,
             gen: tuple[int, ...] | None, has_disc: bool, tied_head: bool) -> str:
  parts = [f"vocab_size {values['vocab_size']}", f"embedding_size {values['embedding_size']}",
           f"hidden {hidden} x {layers} layers"]
  if gen is not None:
    kind = ("two-tower, Electric" if values["two_tower_generator"] else
            "untied embeddings" if values["untied_generator_embeddings"] else "tied embeddings")
    parts.append(f"generator {values['generator_hidden_size']:g} x {gen[1]} layers ({kind})")
  elif tied_head:
    parts.append("masked-LM head on the discriminator" if has_disc else "masked LM only")
  if not has_disc:
    parts.append("no discriminator head")
  return "inferred from checkpoint: " + ", ".join(parts)


def model_hparams(model_dir_or_checkpoint: str) -> tuple[dict[str, Any] | None, str]:
  """(stored or inferred hparams, their source) for a model directory or checkpoint.

  ``hparams.json`` wins; otherwise an official TF1 checkpoint there is inferred; (None, "")
  when there is neither.
  """
  stored = read_model_hparams(model_dir_or_checkpoint)
  if stored is not None:
    return stored, hparams_source(model_dir_or_checkpoint)
  try:
    prefix = checkpoints.resolve_checkpoint(model_dir_or_checkpoint)
  except FileNotFoundError:
    return None, ""
  if not checkpoints.is_tf1_checkpoint(prefix):
    return None, ""
  values, summary = infer_hparams_from_checkpoint(prefix)
  return values, f"checkpoint {prefix} ({summary})"


def hparams_for_run(user: Mapping[str, Any], places: list[str | None],
                    target: str = "pretraining") -> tuple[dict[str, Any], str]:
  """(``user`` merged with the first place's stored or inferred hparams, that source).

  ``places``: model directories / checkpoints in order of precedence (e.g. the run's
  ``model_dir``, then ``init_checkpoint``); missing or None places are skipped. Returns
  (``dict(user)``, "") when none describes a model.
  """
  for place in places:
    if not place or not (os.path.exists(place) or os.path.exists(place + ".index")):
      continue
    stored, source = model_hparams(place)
    if stored is not None:
      inferred = read_model_hparams(place) is None
      return merge_hparams(stored, user, source=source, target=target,
                           inferred=inferred), source
  return dict(user), ""
