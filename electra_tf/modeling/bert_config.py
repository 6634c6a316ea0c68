"""Transformer shape hparams, the same fields as the official ``modeling.BertConfig``."""

from __future__ import annotations

import dataclasses
import json
from typing import Any


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """Sizes of one transformer tower (discriminator, generator or fine-tuning encoder).

  Field names and defaults follow the official ``BertConfig`` so that ``bert_config.json``
  files written by the official code load unchanged.
  """

  vocab_size: int
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu"
  hidden_dropout_prob: float = 0.1
  attention_probs_dropout_prob: float = 0.1
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  initializer_range: float = 0.02

  @classmethod
  def from_dict(cls, d: dict[str, Any]) -> BertConfig:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
      raise ValueError(f"Unknown BertConfig field(s): {', '.join(unknown)}")
    return cls(**d)

  @classmethod
  def from_json_file(cls, path: str) -> BertConfig:
    with open(path) as f:
      return cls.from_dict(json.load(f))

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  def replace(self, **changes: Any) -> BertConfig:
    return dataclasses.replace(self, **changes)
