"""A ``PretrainingModel``'s parts as JSON-able Keras configs and back (its ``get_config`` /
``from_config``), keeping tied embeddings tied.

Each part is stored as ``tf_keras.layers.serialize(part)``. Parts that read another part's
``Embeddings`` layer (a generator tied to the discriminator's tables, a head tied to its
tower's) are listed in ``shared_embeddings`` as ``{part: owner}``; ``deserialize_parts`` hands
them the owner's rebuilt layer instead of a copy, so the rebuilt model has one table, the
same variables and the same names as the original.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tf_keras

from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.encoder import Embeddings, Transformer
from electra_tf.modeling.heads import MaskedLMHead

# Every part a model may have, in the builder's creation (and build) order: an owner of shared
# embeddings always comes before the parts that read them.
PART_NAMES = ("discriminator", "discriminator_head", "generator", "generator_ltr",
              "generator_rtl", "cloze_head", "generator_head")


def serialize_parts(parts: Mapping[str, tf_keras.layers.Layer | None]) -> dict[str, Any]:
  """``{"parts": {name: layer config}, "shared_embeddings": {name: owner name}}`` of the
  parts that are not None."""
  configs: dict[str, Any] = {}
  shared: dict[str, str] = {}
  owners: dict[int, str] = {}  # id of an Embeddings layer -> the first part that reads it
  for name in PART_NAMES:
    part = parts.get(name)
    if part is None:
      continue
    configs[name] = tf_keras.layers.serialize(part)
    embeddings = getattr(part, "embeddings", None)
    if embeddings is not None:
      owner = owners.setdefault(id(embeddings), name)
      if owner != name:
        shared[name] = owner
  return {"parts": configs, "shared_embeddings": shared}


def deserialize_parts(config: Mapping[str, Any]) -> dict[str, tf_keras.layers.Layer]:
  """The built parts ``serialize_parts`` described, sharing embeddings as the original did."""
  configs, shared = config["parts"], config.get("shared_embeddings", {})
  unknown = sorted(set(configs) - set(PART_NAMES))
  if unknown:
    raise ValueError(f"unknown pre-training model part(s) {unknown}; expected {PART_NAMES}")
  parts: dict[str, tf_keras.layers.Layer] = {}
  for name in PART_NAMES:
    if name not in configs:
      continue
    blob = configs[name]
    owner = shared.get(name)
    if owner is None:
      part = tf_keras.layers.deserialize(blob)  # heads come back built (their build_config)
    elif owner not in parts:
      raise ValueError(f"part {name!r} shares the embeddings of {owner!r}, which is not a "
                       f"part built before it ({', '.join(parts) or 'none'})")
    else:
      part = _with_embeddings(blob, parts[owner].embeddings)
      if blob.get("build_config"):
        part.build_from_config(blob["build_config"])
    if not part.built:  # towers: build(None) records no input shape
      part.build(None)
    parts[name] = part
  return parts


def _with_embeddings(blob: Mapping[str, Any], embeddings: Embeddings) -> tf_keras.layers.Layer:
  """The tower or head ``blob`` describes, reading the given (shared) ``embeddings`` layer."""
  config = {**blob["config"], "embeddings": embeddings}
  cls = tf_keras.saving.get_registered_object(blob.get("registered_name") or blob["class_name"])
  if cls is Transformer:
    return Transformer(**{**config, "config": BertConfig.from_dict(config["config"])})
  if cls is MaskedLMHead:
    return MaskedLMHead(**config)
  raise ValueError(f"a {blob['class_name']} cannot share embeddings (only towers and masked "
                   "LM heads read another part's tables)")
