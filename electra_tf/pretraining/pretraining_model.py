"""The pre-training model: built towers and heads run through the four stages of ``objective``.

``PretrainingModel`` is the official ``run_pretraining.PretrainingModel`` as a Keras model that
is handed its parts (``builder.build_pretraining_model`` makes them from a config):

- ``discriminator`` (scope ``electra``) + ``discriminator_head``: ELECTRA and Electric;
  for a masked LM alone the ``discriminator`` tower is the generator and there is no head.
- the generator, by ``objective.generator``: ``generator`` + ``generator_head`` (ELECTRA's
  small tower); ``generator_ltr`` + ``generator_rtl`` + ``cloze_head`` (Electric's two causal
  towers); the discriminator tower + ``generator_head`` (every weight tied); nothing (uniform).

Shapes: B batch, T sequence, N max predictions per sequence, V vocabulary, H hidden size,
Hg generator representation width.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
import tf_keras

from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.dropout import site_seed
from electra_tf.modeling.encoder import Transformer
from electra_tf.modeling.heads import DiscriminatorHead, MaskedLMHead
from electra_tf.modeling.layers import serializable
from electra_tf.pretraining import masking
from electra_tf.pretraining import objective as objective_lib
from electra_tf.pretraining import part_configs as parts_lib
from electra_tf.pretraining.objective import (
  DISCRIMINATOR_TOWER,
  ELECTRIC,
  OWN_TOWER,
  TWO_TOWERS,
  UNIFORM,
  DiscriminatorLosses,
  GeneratorLosses,
  Objective,
)

# What a tower run records (``return_intermediates``): its input ids and these outputs.
TOWER_KEYS = ("token_embeddings", "embedding_postprocessed", "embedding_output",
              "all_layer_outputs", "sequence_output")
TowerOutputs = Mapping[str, tf.Tensor]
# Dropout sub-seed of each tower run of a step (the tied generator runs the discriminator tower
# twice: its two runs draw different masks).
GEN_RUN, LTR_RUN, RTL_RUN, DISC_RUN = range(4)


class Generated(NamedTuple):
  """Stage 2: generator logits at the masked slots and the generator losses.

  ``mlm_logits`` float32 [B, N, V]; two-tower generator: ``hidden`` [B, T, 2h] (its cloze
  representation), ``cloze_logits`` [B, T, V] and ``cloze_weights`` [B, T]; ``towers`` maps a
  record prefix (``gen_``, ``ltr_``, ``rtl_``) to that tower's outputs.
  """

  mlm_logits: tf.Tensor
  losses: GeneratorLosses
  hidden: tf.Tensor | None = None
  cloze_logits: tf.Tensor | None = None
  cloze_weights: tf.Tensor | None = None
  towers: Mapping[str, TowerOutputs] = {}

  @property
  def cloze_log_probs(self) -> tf.Tensor | None:
    """[B, T, V] log-softmax of the cloze logits (Electric's discriminator reads log q)."""
    return None if self.losses.cloze is None else self.losses.cloze.log_probs


class Discriminated(NamedTuple):
  """Stage 4: final discriminator ``logits`` [B, T], their ``losses`` (None without labels),
  Electric's ``raw_logits`` and ``log_q`` [B, T], and the tower's outputs."""

  logits: tf.Tensor
  losses: DiscriminatorLosses | None
  raw_logits: tf.Tensor | None
  log_q: tf.Tensor | None
  tower: TowerOutputs


def _run_tower(tower: Transformer, inputs: masking.Inputs, training: bool,
               seed: tf.Tensor | None = None, run: int = 0) -> dict[str, tf.Tensor]:
  """The tower's outputs on ``inputs`` plus the ``input_ids`` it read; dropout drawn from
  sub-seed ``run`` of ``seed`` [2] when given."""
  result = tower(inputs.input_ids, inputs.input_mask, inputs.segment_ids, training=training,
                 seed=site_seed(seed, run))
  return {"input_ids": inputs.input_ids, **{k: result[k] for k in TOWER_KEYS}}


@serializable
class PretrainingModel(tf_keras.Model):
  """Generator + discriminator with the official variable names and losses.

  Args:
    objective: the losses and sampling settings.
    discriminator, discriminator_head: built; the head is None for a masked LM alone.
    generator, generator_head: ELECTRA's own generator tower and its ``generator_predictions``
      head; with ``objective.generator == DISCRIMINATOR_TOWER`` only the head (the tower is
      ``discriminator``).
    generator_ltr, generator_rtl, cloze_head: the two-tower generator.
    continuation: bool [V] table of ``##`` pieces, needed by whole-word / span masking.
  Every part must be built (its variables exist), so ``tf1_variables()`` is complete at once
  and a checkpoint can be loaded before the first step.
  """

  def __init__(self, objective: Objective, discriminator: Transformer | None = None,
               discriminator_head: DiscriminatorHead | None = None,
               generator: Transformer | None = None,
               generator_head: MaskedLMHead | None = None,
               generator_ltr: Transformer | None = None, generator_rtl: Transformer | None = None,
               cloze_head: MaskedLMHead | None = None, continuation: Any = None, **kwargs):
    super().__init__(name=kwargs.pop("name", "pretraining_model"), **kwargs)
    parts = dict(discriminator=discriminator, discriminator_head=discriminator_head,
                 generator=generator, generator_head=generator_head, generator_ltr=generator_ltr,
                 generator_rtl=generator_rtl, cloze_head=cloze_head)
    _check_parts(objective, parts)
    self.objective = objective
    self.discriminator = discriminator
    self.discriminator_head = discriminator_head
    self.generator = generator
    self.generator_head = generator_head
    self.generator_ltr = generator_ltr
    self.generator_rtl = generator_rtl
    self.cloze_head = cloze_head
    # bool [V] ``##`` pieces, for whole-word / span masking (None: token masking only)
    self.continuation = None if continuation is None else tf.constant(continuation, tf.bool)
    self.built = True

  def get_config(self) -> dict:
    """JSON-able: ``name``, ``objective`` (a dict), the parts' Keras configs, which parts
    share an ``Embeddings`` layer (see ``pretraining.part_configs``) and, for whole-word /
    span masking, the continuation table as ``{"size": V, "ids": [the ## piece ids]}``."""
    parts = {name: getattr(self, name) for name in parts_lib.PART_NAMES}
    config = {"name": self.name, "trainable": self.trainable,
              "objective": self.objective.to_dict(), **parts_lib.serialize_parts(parts)}
    if self.continuation is not None:
      table = self.continuation.numpy()
      config["continuation"] = {"size": int(table.shape[0]),
                                "ids": np.flatnonzero(table).tolist()}
    return config

  @classmethod
  def from_config(cls, config: dict, custom_objects=None) -> PretrainingModel:
    """A new model with the same parts (fresh weights), tied embeddings tied again."""
    continuation = None
    if config.get("continuation") is not None:
      continuation = np.zeros(config["continuation"]["size"], bool)
      continuation[config["continuation"]["ids"]] = True
    model = cls(Objective.from_dict(config["objective"]), **parts_lib.deserialize_parts(config),
                continuation=continuation, name=config.get("name", "pretraining_model"))
    model.trainable = config.get("trainable", True)
    return model

  # ----- parts ---------------------------------------------------------------------------------

  @property
  def generator_is_discriminator(self) -> bool:
    """True when the generator runs the discriminator tower (untied generator off, or MLM)."""
    return self.objective.generator == DISCRIMINATOR_TOWER

  @property
  def mlm_head(self) -> MaskedLMHead | None:
    """The generator's output head: ``cloze_predictions`` (two towers) or
    ``generator_predictions``; None for the uniform generator."""
    return self.cloze_head if self.objective.generator == TWO_TOWERS else self.generator_head

  @property
  def generator_config(self) -> BertConfig | None:
    """Sizes of the generator's own tower(s); None when it has none (uniform, or the
    discriminator tower)."""
    own = self.generator_ltr if self.objective.generator == TWO_TOWERS else self.generator
    return None if own is None else own.config

  def tf1_variables(self) -> dict[str, tf.Variable]:
    """Official TF1 checkpoint name -> variable, for every model variable."""
    out: dict[str, tf.Variable] = {}
    for v in self.variables:
      name = v.name.split(":")[0]
      if name in out and out[name] is not v:
        raise ValueError(f"two model variables share the name {name!r}")
      out[name] = v
    return out

  # ----- stages that need weights --------------------------------------------------------------

  def _generator_towers(self, inputs: masking.Inputs, training: bool,
                        seed: tf.Tensor | None = None
                        ) -> tuple[tf.Tensor, dict[str, TowerOutputs]]:
    """(generator representation [B, T, Hg], tower outputs by record prefix); ``seed``: the
    step's dropout seed [2] or None."""
    kind = self.objective.generator
    if kind == UNIFORM:
      raise ValueError("the uniform generator has no representation")
    if kind != TWO_TOWERS:
      tower = self.discriminator if self.generator_is_discriminator else self.generator
      gen = _run_tower(tower, inputs, training, seed, GEN_RUN)
      return gen["sequence_output"], {"gen_": gen}
    ltr = _run_tower(self.generator_ltr, inputs, training, seed, LTR_RUN)
    rtl = _run_tower(self.generator_rtl, inputs, training, seed, RTL_RUN)
    # Position t sees ltr[t - 1] and rtl[t + 1] (official roll, wrapping around).
    hidden = tf.concat([tf.roll(ltr["sequence_output"], shift=1, axis=1),
                        tf.roll(rtl["sequence_output"], shift=-1, axis=1)], -1)
    return hidden, {"ltr_": ltr, "rtl_": rtl}

  def generator_hidden(self, inputs: masking.Inputs, training: bool = False) -> tf.Tensor:
    """Generator representation [B, T, Hg] of ``inputs`` (the input of ``mlm_head``).

    Two towers: ``concat(ltr[t-1], rtl[t+1])`` (wrapping) of width 2h, as the official
    ``TwoTowerClozeTransformer``; otherwise the generator tower's sequence output.
    """
    return self._generator_towers(inputs, training)[0]

  def generate(self, inputs: masking.Inputs, masked: masking.Inputs, *,
               training: bool = False, seed: tf.Tensor | None = None) -> Generated:
    """Stage 2: generator logits at ``masked``'s slots and the generator losses.

    ``seed``: the step's dropout seed [2] (``Objective.dropout_seed``); None: Keras dropout.

    The one-tower generators read the masked input; the two-tower cloze generator reads the
    original ``inputs`` (each position sees only its neighbours) and predicts every position.
    """
    obj = self.objective
    if obj.generator == UNIFORM:
      mlm_logits = tf.zeros(tf.concat([tf.shape(masked.masked_lm_ids), [obj.vocab_size]], 0))
      return Generated(mlm_logits, objective_lib.generator_losses(mlm_logits, masked))
    if obj.generator == TWO_TOWERS:
      hidden, towers = self._generator_towers(inputs, training, seed)
      cloze_logits = tf.cast(self.cloze_head(hidden), tf.float32)  # [B, T, V]
      cloze_weights = tf.cast(masking.get_candidates_mask(inputs, obj.vocab), tf.float32)
      mlm_logits = masking.gather_positions(cloze_logits, masked.masked_lm_positions)
      losses = objective_lib.generator_losses(mlm_logits, masked, cloze_logits, cloze_weights,
                                              inputs.input_ids)
      return Generated(mlm_logits, losses, hidden, cloze_logits, cloze_weights, towers)
    hidden, towers = self._generator_towers(masked, training, seed)
    mlm_logits = tf.cast(self.generator_head(
        masking.gather_positions(hidden, masked.masked_lm_positions)), tf.float32)
    return Generated(mlm_logits, objective_lib.generator_losses(mlm_logits, masked),
                     towers=towers)

  def discriminate(self, inputs: masking.Inputs, labels: tf.Tensor | None = None, *,
                   training: bool = False, cloze_log_probs: tf.Tensor | None = None,
                   seed: tf.Tensor | None = None) -> Discriminated:
    """Stage 4: discriminator logits [B, T] on ``inputs`` and, given int ``labels`` [B, T],
    the loss. Electric needs ``cloze_log_probs`` [B, T, V] (see ``objective.electric_logits``).
    ``seed``: the step's dropout seed [2]; None: Keras dropout.
    """
    if self.discriminator_head is None:
      raise ValueError("this model has no discriminator (electra_objective and "
                       "electric_objective are both false)")
    tower = _run_tower(self.discriminator, inputs, training, seed, DISC_RUN)
    logits = tf.cast(self.discriminator_head(tower["sequence_output"]), tf.float32)
    raw_logits = log_q = None
    if self.objective.kind == ELECTRIC:
      if cloze_log_probs is None:
        raise ValueError("Electric's discriminator needs the cloze log-probabilities")
      raw_logits = logits
      logits, log_q = objective_lib.electric_logits(raw_logits, cloze_log_probs,
                                                    inputs.input_ids, self.objective)
    losses = (None if labels is None
              else objective_lib.discriminator_losses(logits, labels, inputs.input_mask))
    return Discriminated(logits, losses, raw_logits, log_q, tower)

  def rtd_logits(self, inputs: masking.Inputs) -> tuple[tf.Tensor, tf.Tensor]:
    """Inference: (discriminator sequence output [B, T, H], logits [B, T]) on ``inputs``.

    For Electric the logits include ``log q`` from the cloze model run on the same input
    (the official ``clean_disc_logits``).
    """
    cloze_log_probs = None
    if self.objective.kind == ELECTRIC:
      cloze_logits = tf.cast(self.cloze_head(self.generator_hidden(inputs)), tf.float32)
      cloze_log_probs = tf.nn.log_softmax(cloze_logits)
    judged = self.discriminate(inputs, cloze_log_probs=cloze_log_probs)
    return judged.tower["sequence_output"], judged.logits

  # ----- the step ------------------------------------------------------------------------------

  def call(self, features: Mapping[str, tf.Tensor], training: bool = False,
           draws: Mapping[str, tf.Tensor] | None = None, seed: tf.Tensor | int | None = None,
           return_intermediates: bool = False) -> dict[str, tf.Tensor]:
    """One pre-training forward pass: mask -> generate -> corrupt -> discriminate.

    Args:
      features: int32 [B, T] ``input_ids``, ``input_mask``, ``segment_ids``.
      training: dropout on (the towers; the heads have none, as in the official code).
      draws: optional injected randomness: ``categorical_positions`` int32 [B, N],
        ``mask_uniform`` float32 [B, N], ``gumbel_uniform`` float32 [B, N, V].
      seed: per-step seed (scalar or [2] int) for the stateless draws not injected and, when
        training, the towers' dropout masks (``Objective.dropout_seed``; with no seed at all,
        Keras dropout).
      return_intermediates: also return tower outputs and full-vocabulary logits (large).
    Returns:
      see ``step_outputs``.
    """
    obj = self.objective
    draws = dict(draws or {})
    inputs = masking.features_to_inputs(features)
    mask_seed, sample_seed = obj.step_seeds(seed)
    dropout_seed = obj.dropout_seed(seed) if training else None
    masked = objective_lib.mask(inputs, obj, draws, mask_seed, self.continuation)
    generated = self.generate(inputs, masked, training=training, seed=dropout_seed)
    if not obj.has_discriminator:  # masked LM only: nothing is sampled
      total_loss = obj.gen_weight * generated.losses.loss
      return step_outputs(obj, inputs, masked, generated, None, None, total_loss,
                          return_intermediates)
    corrupted = objective_lib.corrupt(masked, generated.mlm_logits, obj,
                                      draws.get("gumbel_uniform"), sample_seed)
    judged = self.discriminate(corrupted.inputs, corrupted.labels, training=training,
                               cloze_log_probs=generated.cloze_log_probs, seed=dropout_seed)
    total_loss = obj.gen_weight * generated.losses.loss + obj.disc_weight * judged.losses.loss
    return step_outputs(obj, inputs, masked, generated, corrupted, judged, total_loss,
                        return_intermediates)


def step_outputs(objective: Objective, inputs: masking.Inputs, masked: masking.Inputs,
                 generated: Generated, corrupted: objective_lib.Corrupted | None,
                 judged: Discriminated | None, total_loss: tf.Tensor,
                 intermediates: bool = False) -> dict[str, tf.Tensor]:
  """The stages' results as the flat dict of official output names.

  ``total_loss``, ``mlm_loss`` (the generator term: cloze loss for the two-tower generator),
  ``disc_loss``, ``masked_input_ids``, ``masked_lm_positions`` / ``_ids`` / ``_weights``
  [B, N], ``num_to_predict`` [B], ``gen_mlm_preds`` / ``gen_mlm_per_example_loss`` [B, N],
  ``gen_mlm_loss``, ``input_mask``; with a discriminator ``sampled_tokids`` [B, N],
  ``fake_input_ids``, ``disc_labels``, ``disc_logits``, ``disc_probs``, ``disc_preds`` [B, T],
  ``disc_per_example_loss`` [B]; two towers add ``cloze_*``, Electric ``disc_logits_raw``,
  ``disc_log_q``, ``log_mask_ratio``. ``intermediates`` adds the towers' outputs
  (``<prefix><key>``), ``candidates_sample_logits``, ``gen_mlm_logits``, ``cloze_logits``,
  ``gen_sequence_output``.
  """
  mlm, cloze = generated.losses.mlm, generated.losses.cloze
  out = {
      "input_mask": inputs.input_mask,
      "masked_input_ids": masked.input_ids,
      "masked_lm_positions": masked.masked_lm_positions,
      "masked_lm_ids": masked.masked_lm_ids,
      "masked_lm_weights": masked.masked_lm_weights,
      "num_to_predict": tf.cast(tf.reduce_sum(masked.masked_lm_weights, -1), tf.int32),
      "gen_mlm_preds": mlm.preds, "gen_mlm_per_example_loss": mlm.per_example_loss,
      "gen_mlm_loss": mlm.loss, "mlm_loss": generated.losses.loss, "total_loss": total_loss,
  }
  if cloze is not None:
    out.update(cloze_loss=cloze.loss, cloze_per_example_loss=cloze.per_example_loss,
               cloze_preds=cloze.preds, cloze_weights=generated.cloze_weights)
  if judged is None:
    out["disc_loss"] = tf.constant(0.0)
  else:
    disc = judged.losses
    out.update(sampled_tokids=corrupted.sampled, fake_input_ids=corrupted.inputs.input_ids,
               disc_labels=corrupted.labels, disc_logits=judged.logits, disc_probs=disc.probs,
               disc_preds=disc.preds, disc_per_example_loss=disc.per_example_loss,
               disc_loss=disc.loss)
    if judged.log_q is not None:
      out.update(disc_logits_raw=judged.raw_logits, disc_log_q=judged.log_q,
                 log_mask_ratio=objective.log_mask_ratio())
  if intermediates:
    out["candidates_sample_logits"] = masking.candidates_log_probs(
        masking.get_candidates_mask(inputs, objective.vocab))
    out["gen_mlm_logits"] = generated.mlm_logits
    towers = dict(generated.towers)
    if judged is not None:
      towers["disc_"] = judged.tower
    for prefix, tower in towers.items():
      out.update({prefix + k: v for k, v in tower.items()})
    if cloze is not None:
      out.update(gen_sequence_output=generated.hidden, cloze_logits=generated.cloze_logits)
  return out


def _check_parts(objective: Objective, parts: Mapping[str, object]) -> None:
  """One-line error when the parts do not fit the objective (a builder bug, or hand assembly)."""
  need = set()
  if objective.has_discriminator:
    need |= {"discriminator", "discriminator_head"}
  need |= {OWN_TOWER: {"generator", "generator_head"},
           TWO_TOWERS: {"generator_ltr", "generator_rtl", "cloze_head"},
           DISCRIMINATOR_TOWER: {"discriminator", "generator_head"},
           UNIFORM: set()}[objective.generator]
  given = {name for name, part in parts.items() if part is not None}
  if given != need:
    missing, extra = sorted(need - given), sorted(given - need)
    raise ValueError(f"a {objective.kind} model with generator {objective.generator!r} takes "
                     f"{', '.join(sorted(need)) or 'no parts'}; missing: "
                     f"{', '.join(missing) or 'none'}, unexpected: {', '.join(extra) or 'none'}")
  unbuilt = sorted(name for name in given if not parts[name].built)
  if unbuilt:
    raise ValueError(f"parts not built (build them before assembling): {', '.join(unbuilt)}")
