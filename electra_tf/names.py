"""The official TF1 variable names in one place, and their Hugging Face counterparts.

Every layer reads its scope from here, and checkpoint I/O, ``convert`` and the Hugging Face
export/import use the same constants, so a name is defined once. Scopes are absolute (see
``modeling/layers.py``): ``electra/encoder/layer_0/attention/self/query/kernel``.

The Hugging Face map is one table of ``HfRow`` (TF1 name, HF name, TF shape, transpose flag)
per HF model class, read in both directions: ``HfTable.to_hf`` (export) and ``HfTable.to_tf1``
(import) are exact inverses.
"""

from __future__ import annotations

import dataclasses
import re

import tensorflow as tf

from electra_tf.modeling.bert_config import BertConfig

# Towers (one official ``BertModel`` each).
DISCRIMINATOR = "electra"  # also the fine-tuning encoder and the masked-LM-only model
GENERATOR = "generator"  # ELECTRA's small generator
GENERATOR_LTR = "generator_ltr"  # Electric's left-to-right tower
GENERATOR_RTL = "generator_rtl"  # Electric's right-to-left tower

# Heads.
DISCRIMINATOR_HEAD = "discriminator_predictions"
GENERATOR_HEAD = "generator_predictions"
CLOZE_HEAD = "cloze_predictions"
TASK_SPECIFIC = "task_specific"  # fine-tuning heads: task_specific/<task name>/...
ELECTRIC_SCOPES = (GENERATOR_LTR, GENERATOR_RTL, CLOZE_HEAD)

# Variables of one layer (``tf.layers.dense``, ``contrib.layers.layer_norm``).
KERNEL = "kernel"
BIAS = "bias"
LAYER_NORM = "LayerNorm"
BETA = "beta"
GAMMA = "gamma"

# Embeddings (``<tower>/embeddings/...``).
EMBEDDINGS = "embeddings"
WORD_EMBEDDINGS = "word_embeddings"
TOKEN_TYPE_EMBEDDINGS = "token_type_embeddings"
POSITION_EMBEDDINGS = "position_embeddings"
EMBEDDINGS_PROJECT = "embeddings_project"

# Sub-scopes of one transformer block (``<tower>/encoder/layer_<i>/...``).
QUERY = "attention/self/query"
KEY = "attention/self/key"
VALUE = "attention/self/value"
ATTENTION_OUTPUT = "attention/output/dense"
ATTENTION_NORM = "attention/output/LayerNorm"
INTERMEDIATE = "intermediate/dense"
OUTPUT = "output/dense"
OUTPUT_NORM = "output/LayerNorm"

# Sub-scopes of the heads: ``dense``, ``dense_1``, ... are the official ``tf.layers.dense``
# auto-names in creation order.
DENSE = "dense"
DENSE_1 = "dense_1"
DENSE_2 = "dense_2"
DENSE_3 = "dense_3"
QA_HIDDEN = "qa_hidden"  # SQuAD's joint end-logit hidden layer
OUTPUT_BIAS = "output_bias"  # masked-LM head's bias [V]

# Checkpoint entries that are training state, not model weights.
GLOBAL_STEP = "global_step"
ADAM_SLOTS = ("adam_m", "adam_v")
LAMB_SLOTS = ("lamb_m", "lamb_v")  # LAMB's first / second moment (bias-corrected when applied)
OPTIMIZER_STATE = re.compile(r"(^global_step$|/(adam|lamb)_[mv]$)")
# ``<variable>/adam_m`` etc.: one optimizer slot and the TF1 name of the variable it belongs to.
OPTIMIZER_SLOT = re.compile(r"^(?P<variable>.+)/(?P<kind>adam|lamb)_[mv]$")


def tf1_name(variable: tf.Variable) -> str:
  """``variable.name`` without the ``:<output index>`` suffix (the TF1 checkpoint key)."""
  match = re.match(r"^(.*):\d+$", variable.name)
  return match.group(1) if match else variable.name


def join(*parts: str) -> str:
  """``join("electra", "embeddings", "LayerNorm")`` -> ``electra/embeddings/LayerNorm``."""
  return "/".join(parts)


def embeddings_scope(tower: str) -> str:
  """``<tower>/embeddings``: word / token-type / position tables and their LayerNorm."""
  return join(tower, EMBEDDINGS)


def embeddings_project_scope(tower: str) -> str:
  """``<tower>/embeddings_project``: the E -> H dense when embedding and hidden sizes differ."""
  return join(tower, EMBEDDINGS_PROJECT)


def layer_scope(tower: str, index: int) -> str:
  """``<tower>/encoder/layer_<index>``: one transformer block."""
  return f"{tower}/encoder/layer_{index}"


def task_scope(task_name: str) -> str:
  """``task_specific/<task_name>``: a fine-tuning head."""
  return join(TASK_SPECIFIC, task_name)


# ------------------------------------------------------------------------------------------
# Hugging Face ``transformers`` ELECTRA names (``models/electra/modeling_electra.py``).

HF_TOWER = "electra"  # every HF ELECTRA class holds its BertModel as ``electra.*``
HF_LM_HEAD_WEIGHT = "generator_lm_head.weight"  # tied to the word embeddings


@dataclasses.dataclass(frozen=True)
class HfRow:
  """One tensor: TF1 name and shape <-> HF name; ``transpose`` for dense kernels.

  ``alias`` rows are HF tensors that repeat another row's TF1 tensor (the tied
  ``generator_lm_head.weight``): written on export, checked equal and dropped on import.
  """

  tf_name: str
  hf_name: str
  tf_shape: tuple[int, ...]
  transpose: bool = False
  alias: bool = False


@dataclasses.dataclass(frozen=True)
class HfTable:
  """The name table of one HF model, readable in both directions."""

  rows: tuple[HfRow, ...]

  def __post_init__(self):
    for key, rows in (("hf_name", self.rows), ("tf_name", self.primary_rows)):
      seen = [getattr(r, key) for r in rows]
      dup = sorted({n for n in seen if seen.count(n) > 1})
      if dup:
        raise ValueError(f"HF name table maps {key} {dup[0]!r} twice")

  @property
  def primary_rows(self) -> tuple[HfRow, ...]:
    """Rows that own their TF1 tensor (no aliases): a one-to-one map."""
    return tuple(r for r in self.rows if not r.alias)

  def to_hf(self, tf_name: str) -> str:
    """TF1 name -> HF name (export direction)."""
    for row in self.primary_rows:
      if row.tf_name == tf_name:
        return row.hf_name
    raise KeyError(f"{tf_name!r} has no Hugging Face name in this table")

  def to_tf1(self, hf_name: str) -> str:
    """HF name -> TF1 name (import direction; an alias gives the tensor it repeats)."""
    for row in self.rows:
      if row.hf_name == hf_name:
        return row.tf_name
    raise KeyError(f"{hf_name!r} has no TF1 name in this table")

  def row_for_hf(self, hf_name: str) -> HfRow:
    return next(r for r in self.rows if r.hf_name == hf_name)


def _hf_dense(tf_scope: str, hf_scope: str, n_in: int, n_out: int) -> list[HfRow]:
  """tf ``kernel`` [in, out], ``bias`` [out] <-> torch ``weight`` [out, in], ``bias``."""
  return [HfRow(join(tf_scope, KERNEL), f"{hf_scope}.weight", (n_in, n_out), transpose=True),
          HfRow(join(tf_scope, BIAS), f"{hf_scope}.bias", (n_out,))]


def _hf_layer_norm(tf_scope: str, hf_scope: str, dim: int) -> list[HfRow]:
  """gamma -> ``weight``, beta -> ``bias``."""
  return [HfRow(join(tf_scope, GAMMA), f"{hf_scope}.weight", (dim,)),
          HfRow(join(tf_scope, BETA), f"{hf_scope}.bias", (dim,))]


def _hf_embedding_rows(tf_scope: str, config: BertConfig, embedding_size: int) -> list[HfRow]:
  """``<tf_scope>/{word,token_type,position}_embeddings`` + LayerNorm -> ``electra.embeddings``."""
  e, hf = embedding_size, f"{HF_TOWER}.embeddings"
  return [
      HfRow(join(tf_scope, WORD_EMBEDDINGS), f"{hf}.word_embeddings.weight",
            (config.vocab_size, e)),
      HfRow(join(tf_scope, POSITION_EMBEDDINGS), f"{hf}.position_embeddings.weight",
            (config.max_position_embeddings, e)),
      HfRow(join(tf_scope, TOKEN_TYPE_EMBEDDINGS), f"{hf}.token_type_embeddings.weight",
            (config.type_vocab_size, e)),
      *_hf_layer_norm(join(tf_scope, LAYER_NORM), f"{hf}.LayerNorm", e),
  ]


# TF1 block sub-scope -> HF sub-module of ``electra.encoder.layer.<i>``.
_HF_BLOCK = {QUERY: "attention.self.query", KEY: "attention.self.key",
             VALUE: "attention.self.value", ATTENTION_OUTPUT: "attention.output.dense",
             ATTENTION_NORM: "attention.output.LayerNorm", INTERMEDIATE: "intermediate.dense",
             OUTPUT: "output.dense", OUTPUT_NORM: "output.LayerNorm"}


def _hf_tower_rows(tower: str, embeddings: str, config: BertConfig,
                   embedding_size: int) -> list[HfRow]:
  """One official ``BertModel`` (embeddings, projection, L layers) -> HF ``electra.*``."""
  h, i = config.hidden_size, config.intermediate_size
  rows = _hf_embedding_rows(embeddings, config, embedding_size)
  if embedding_size != h:
    rows += _hf_dense(embeddings_project_scope(tower), f"{HF_TOWER}.embeddings_project",
                      embedding_size, h)
  dense_sizes = {QUERY: (h, h), KEY: (h, h), VALUE: (h, h), ATTENTION_OUTPUT: (h, h),
                 INTERMEDIATE: (h, i), OUTPUT: (i, h)}
  for n in range(config.num_hidden_layers):
    tf_l, hf_l = layer_scope(tower, n), f"{HF_TOWER}.encoder.layer.{n}"
    for sub, hf_sub in _HF_BLOCK.items():
      if sub in dense_sizes:
        rows += _hf_dense(join(tf_l, sub), f"{hf_l}.{hf_sub}", *dense_sizes[sub])
      else:
        rows += _hf_layer_norm(join(tf_l, sub), f"{hf_l}.{hf_sub}", h)
  return rows


def discriminator_table(config: BertConfig, embedding_size: int) -> HfTable:
  """``ElectraForPreTraining``: tower ``electra`` + ``discriminator_predictions``."""
  h = config.hidden_size
  return HfTable(tuple(
      _hf_tower_rows(DISCRIMINATOR, embeddings_scope(DISCRIMINATOR), config, embedding_size)
      + _hf_dense(join(DISCRIMINATOR_HEAD, DENSE), "discriminator_predictions.dense", h, h)
      + _hf_dense(join(DISCRIMINATOR_HEAD, DENSE_1),
                  "discriminator_predictions.dense_prediction", h, 1)))


def generator_table(config: BertConfig, embedding_size: int, tower: str = GENERATOR,
                    embeddings: str = embeddings_scope(DISCRIMINATOR)) -> HfTable:
  """``ElectraForMaskedLM``: tower ``tower`` (embeddings at ``embeddings``) + the MLM head.

  ``generator_lm_head.weight`` is an alias of the word-embedding table (tied output layer).
  """
  e = embedding_size
  word_embeddings = join(embeddings, WORD_EMBEDDINGS)
  return HfTable(tuple(
      _hf_tower_rows(tower, embeddings, config, e)
      + _hf_dense(join(GENERATOR_HEAD, DENSE), "generator_predictions.dense",
                  config.hidden_size, e)
      + _hf_layer_norm(join(GENERATOR_HEAD, LAYER_NORM), "generator_predictions.LayerNorm", e)
      + [HfRow(join(GENERATOR_HEAD, OUTPUT_BIAS), "generator_lm_head.bias",
               (config.vocab_size,)),
         HfRow(word_embeddings, HF_LM_HEAD_WEIGHT, (config.vocab_size, e), alias=True)]))
