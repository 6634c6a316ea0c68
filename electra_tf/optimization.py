"""ELECTRA's optimizer: Adam without bias correction, decoupled weight decay, global-norm clipping,
linear warmup times polynomial decay, and optional layer-wise learning-rate decay.

Numerically the official ``model/optimization.py`` (``create_optimizer`` +
``AdamWeightDecayOptimizer``), written as a new-style ``tf_keras`` optimizer so that
``apply_gradients`` works in eager mode, inside ``tf.function`` and under ``tf.distribute``
strategies (tested: MirroredStrategy; gradients are summed across replicas before clipping), and its
slots are tracked by ``tf.train.Checkpoint``. Per step, for every variable ``p`` with gradient
``g`` (after clipping all gradients together to global norm ``clip_norm``)::

  m = 0.9 m + 0.1 g;  v = 0.999 v + 0.001 g^2            (no bias correction)
  u = m / (sqrt(v) + 1e-6) + weight_decay_rate * p       (decay skipped for LayerNorm / bias)
  p = p - lr_var * u

``lr_var`` is the scheduled learning rate times the variable's layer-wise multiplier.
Variables are identified by their TF1 name (``variable.name`` without ``:0``), e.g.
``electra/encoder/layer_0/attention/output/LayerNorm/gamma``.

``create_optimizer(..., optimizer="lamb")`` gives tf-models-official's LAMB instead (``Lamb``:
bias-corrected Adam moments, the same decoupled weight decay, then each variable's update
scaled by ``||p|| / ||u||``), with the same exclusions (from decay and from that trust ratio),
schedule, clipping and layer-wise multipliers; it is the optimizer for global batches in the
thousands.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import tensorflow as tf
import tf_keras
from official.modeling.optimization import lamb as tfm_lamb

from electra_tf.names import LAMB_SLOTS, tf1_name

LR_STEP_MODES = ("as_run", "ordered")
OPTIMIZERS = ("adamw", "lamb")
EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")


def warmup_steps_for(num_train_steps: int, warmup_steps: float = 0,
                     warmup_proportion: float = 0.0) -> float:
  """The official warmup length: ``max(num_train_steps * warmup_proportion, warmup_steps)``."""
  return max(num_train_steps * warmup_proportion, warmup_steps)


# Not tf-models' PolynomialWarmUp / LinearWarmup: their warmup replaces the decayed rate, ELECTRA's
# multiplies it.
class WarmupPolynomialDecay(tf_keras.optimizers.schedules.LearningRateSchedule):
  """``lr(step) = poly_decay(step) * min(1, step / warmup)``, the official schedule.

  ``poly_decay`` goes from ``initial_learning_rate`` to 0 over ``num_train_steps`` with exponent
  ``power`` and stays 0 afterwards. The warmup factor multiplies the decay (it does not replace
  it, so at the end of warmup the rate is already below ``initial_learning_rate``).

  ``warmup == 0``: the factor is 1. The official graph computes ``0 / 0 = NaN`` at step 0 there;
  this is a deliberate deviation (it only changes step 0 of the ``ordered`` step mode, which the
  official code would turn into NaN parameters).

  ``step_offset`` is added to the step before evaluating (1 reproduces the official as-run timing,
  see ``create_optimizer``).
  """

  def __init__(self, initial_learning_rate: float, num_train_steps: int,
               warmup_steps: float = 0.0, power: float = 1.0, step_offset: int = 0,
               name: str | None = None):
    super().__init__()
    if num_train_steps <= 0:
      raise ValueError(f"num_train_steps must be positive, got {num_train_steps}")
    if warmup_steps < 0:
      raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
    self.initial_learning_rate = initial_learning_rate
    self.num_train_steps = num_train_steps
    self.warmup_steps = warmup_steps
    self.power = power
    self.step_offset = step_offset
    self.name = name
    # tf_keras PolynomialDecay is the same formula as the official tf.train.polynomial_decay.
    self._decay = tf_keras.optimizers.schedules.PolynomialDecay(
        initial_learning_rate, num_train_steps, end_learning_rate=0.0, power=power, cycle=False)

  def __call__(self, step) -> tf.Tensor:
    with tf.name_scope(self.name or "WarmupPolynomialDecay"):
      step = tf.convert_to_tensor(step)
      if self.step_offset:
        step = step + tf.cast(self.step_offset, step.dtype)
      learning_rate = self._decay(step)
      if self.warmup_steps > 0:  # warmup 0: factor 1 (official: NaN at step 0), see docstring
        learning_rate *= tf.minimum(
            1.0, tf.cast(step, tf.float32) / tf.cast(self.warmup_steps, tf.float32))
      return learning_rate

  def get_config(self) -> dict:
    return {"initial_learning_rate": self.initial_learning_rate,
            "num_train_steps": self.num_train_steps, "warmup_steps": self.warmup_steps,
            "power": self.power, "step_offset": self.step_offset, "name": self.name}


def learning_rate_at(step, learning_rate: float, num_train_steps: int, warmup_steps: int = 0,
                     warmup_proportion: float = 0.0, lr_decay_power: float = 1.0) -> tf.Tensor:
  """Scalar float32 learning rate at global step ``step`` (before layer-wise multipliers).

  The update made when ``optimizer.iterations == k`` uses ``learning_rate_at(k + 1, ...)`` in
  ``lr_step_mode="as_run"`` and ``learning_rate_at(k, ...)`` in ``"ordered"``.
  """
  schedule = WarmupPolynomialDecay(
      learning_rate, num_train_steps,
      warmup_steps_for(num_train_steps, warmup_steps, warmup_proportion), lr_decay_power)
  return schedule(step)


def layer_lr_multipliers(layer_decay: float, n_layers: int,
                         fix_depth: bool = False) -> dict[str, float]:
  """Learning-rate multiplier per variable-name key (official ``_get_layer_lrs``).

  Depths: ``/embeddings/`` and ``/embeddings_project/`` 0, ``encoder/layer_i/`` ``i + 1``,
  ``task_specific/`` ``n_layers + 2``; multiplier ``layer_decay ** (top - depth)``.

  ``fix_depth=False`` (official): ``top = n_layers + 2``. Depth ``n_layers + 1`` belonged to the
  pooler that was removed with next-sentence prediction and is never used, so the last encoder
  layer gets ``layer_decay ** 2`` instead of ``layer_decay`` (google-research/electra#51).
  ``fix_depth=True`` (intended): ``task_specific/`` sits at depth ``n_layers + 1 = top``, so the
  task head gets 1, the last encoder layer ``layer_decay``, embeddings ``layer_decay ** (n + 1)``.
  """
  if n_layers is None or n_layers <= 0:
    raise ValueError(f"layer-wise LR decay needs n_transformer_layers > 0, got {n_layers}")
  top = n_layers + 1 if fix_depth else n_layers + 2
  key_to_depth = {"/embeddings/": 0, "/embeddings_project/": 0, "task_specific/": top}
  for layer in range(n_layers):
    key_to_depth[f"encoder/layer_{layer}/"] = layer + 1
  return {key: layer_decay ** (top - depth) for key, depth in key_to_depth.items()}


def _lr_multiplier_for(name: str, key_multipliers: dict[str, float] | None) -> float:
  """Multiplier of the one key contained in ``name`` (official: substring match)."""
  if key_multipliers is None:
    return 1.0
  keys = [key for key in key_multipliers if key in name]
  if not keys:
    raise ValueError(f"No layer-wise learning rate for variable {name!r} (keys: "
                     f"{', '.join(key_multipliers)})")
  if len(keys) > 1:  # official: would create the same adam_m slot twice and fail
    raise ValueError(f"Variable {name!r} matches several layer-wise keys: {keys}")
  return key_multipliers[keys[0]]


class AdamWeightDecay(tf_keras.optimizers.Optimizer):
  """The official ``AdamWeightDecayOptimizer`` + clipping + schedule, as a tf_keras optimizer.

  ``apply_gradients(grads_and_vars)`` (eagerly, in ``tf.function``, or inside ``strategy.run``)
  sums gradients across replicas, clips the sum by global norm, updates every variable and its
  ``adam_m`` / ``adam_v`` slots, then increments ``iterations`` (the official ``global_step``).
  Slots are created for the variables of the first ``apply_gradients`` (or ``build``) call; later
  calls must pass the same variables (sub-sets are fine).

  Replicas: gradients are *summed*, so each replica's loss must be its share of the global-batch
  mean (divide by ``num_replicas_in_sync``), as the official ``CrossShardOptimizer`` averaged.
  Clipping the summed gradient equals the official single-device run on the global batch; the
  official TPU path instead clipped each shard's gradient before averaging (not reproduced).

  ``self.learning_rate`` holds the scheduled rate the latest update used (before layer-wise
  multipliers); ``tf1_slot_variables()`` maps ``<var>/adam_m`` / ``<var>/adam_v`` to the slots.
  """

  def __init__(self, learning_rate: WarmupPolynomialDecay | float,
               weight_decay_rate: float = 0.0, beta_1: float = 0.9, beta_2: float = 0.999,
               epsilon: float = 1e-6,
               exclude_from_weight_decay: Sequence[str] = EXCLUDE_FROM_WEIGHT_DECAY,
               layer_lr_multipliers: dict[str, float] | None = None,
               clip_norm: float | None = 1.0, jit_compile: bool = False,
               name: str = "AdamWeightDecay", **kwargs):
    # weight_decay=None: the base class's own (pre-update) decay stays off; ours is in update_step.
    super().__init__(name=name, weight_decay=None, global_clipnorm=clip_norm,
                     jit_compile=jit_compile, **kwargs)
    self._learning_rate = self._build_learning_rate(learning_rate)
    self.weight_decay_rate = weight_decay_rate
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay_patterns = tuple(exclude_from_weight_decay or ())
    self.layer_lr_multipliers = (None if layer_lr_multipliers is None
                                 else dict(layer_lr_multipliers))

  def _do_use_weight_decay(self, name: str) -> bool:
    if not self.weight_decay_rate:
      return False
    return not any(re.search(p, name) for p in self.exclude_from_weight_decay_patterns)

  def build(self, var_list: Sequence[tf.Variable]) -> None:
    """Creates the ``adam_m`` / ``adam_v`` slots and per-variable decay / LR facts."""
    super().build(var_list)
    if getattr(self, "_built", False):
      return
    names = [tf1_name(var) for var in var_list]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
      raise ValueError(f"Variables share a TF1 name (slots would collide): {dupes}")
    multipliers = [_lr_multiplier_for(n, self.layer_lr_multipliers) for n in names]
    self._built = True
    self._tf1_names = names
    self._lr_multipliers = multipliers
    self._use_decay = [self._do_use_weight_decay(n) for n in names]
    self._adam_m = []
    self._adam_v = []
    for var in var_list:
      self._adam_m.append(self.add_variable_from_reference(var, "adam_m"))
      self._adam_v.append(self.add_variable_from_reference(var, "adam_v"))

  def update_step(self, gradient, variable) -> None:
    """One official AdamWeightDecay update of ``variable`` (any shape) with its clipped grad."""
    index = self._index_dict[self._var_key(variable)]
    m, v = self._adam_m[index], self._adam_v[index]
    if isinstance(gradient, tf.IndexedSlices):
      gradient = tf.convert_to_tensor(gradient)  # official applies sparse grads densely too
    next_m = tf.multiply(self.beta_1, m) + tf.multiply(1.0 - self.beta_1, gradient)
    next_v = tf.multiply(self.beta_2, v) + tf.multiply(1.0 - self.beta_2, tf.square(gradient))
    update = next_m / (tf.sqrt(next_v) + self.epsilon)
    if self._use_decay[index]:
      update += self.weight_decay_rate * variable
    learning_rate = tf.cast(self.learning_rate, variable.dtype)
    if self.layer_lr_multipliers is not None:
      learning_rate = learning_rate * self._lr_multipliers[index]
    variable.assign(variable - learning_rate * update)
    m.assign(next_m)
    v.assign(next_v)

  def clip_gradients(self, grads: Sequence[tf.Tensor | None]) -> list:
    """The clipping ``apply_gradients`` applies (after cross-replica summation)."""
    return list(self._clip_gradients(list(grads)))

  def tf1_slot_variables(self) -> dict[str, tf.Variable]:
    """``{"<var>/adam_m": slot, "<var>/adam_v": slot}``, the official training-graph names."""
    if not getattr(self, "_built", False):
      raise ValueError("optimizer has no slots yet: call build(variables) or apply_gradients")
    slots = {}
    for name, m, v in zip(self._tf1_names, self._adam_m, self._adam_v, strict=True):
      slots[f"{name}/adam_m"] = m
      slots[f"{name}/adam_v"] = v
    return slots

  def get_config(self) -> dict:
    config = super().get_config()
    config.update({
        "learning_rate": self._serialize_hyperparameter(self._learning_rate),
        "weight_decay_rate": self.weight_decay_rate, "beta_1": self.beta_1,
        "beta_2": self.beta_2, "epsilon": self.epsilon,
        "exclude_from_weight_decay": list(self.exclude_from_weight_decay_patterns),
        "layer_lr_multipliers": (None if self.layer_lr_multipliers is None
                                 else dict(self.layer_lr_multipliers)),
        "clip_norm": self.global_clipnorm,
    })
    for key in ("weight_decay", "global_clipnorm", "clipnorm", "clipvalue"):
      config.pop(key, None)
    return config

  @classmethod
  def from_config(cls, config: dict, custom_objects=None) -> AdamWeightDecay:
    config = dict(config)
    if isinstance(config.get("learning_rate"), dict):
      config["learning_rate"] = tf_keras.optimizers.schedules.deserialize(
          config["learning_rate"],
          custom_objects={"WarmupPolynomialDecay": WarmupPolynomialDecay,
                          **(custom_objects or {})})
    return cls(**config)


class Lamb(tfm_lamb.LAMB):
  """tf-models-official's ``LAMB`` with what the Trainer and the checkpoints need.

  The update math is tf-models' (``official.modeling.optimization.lamb.LAMB``, a legacy
  ``tf_keras`` optimizer): bias-corrected moments ``m`` / ``v``, decoupled weight decay, and
  the trust ratio ``||p|| / ||u||``; names matching ``exclude_from_weight_decay`` (LayerNorm,
  bias) get neither decay nor trust ratio, as NVIDIA's ELECTRA LAMB. Added here: the learning
  rate of each variable is multiplied by its layer-wise multiplier, gradients are summed
  across replicas, made dense (as ``AdamWeightDecay``) and clipped to global norm
  ``clip_norm``; ``build(variables)`` creates the slots ahead of the first update (so a
  checkpoint can be restored into them) and ``tf1_slot_variables()`` names them
  ``<var>/lamb_m`` / ``<var>/lamb_v``.
  """

  def __init__(self, learning_rate: WarmupPolynomialDecay | float,
               weight_decay_rate: float = 0.0, beta_1: float = 0.9, beta_2: float = 0.999,
               epsilon: float = 1e-6,
               exclude_from_weight_decay: Sequence[str] = EXCLUDE_FROM_WEIGHT_DECAY,
               layer_lr_multipliers: dict[str, float] | None = None,
               clip_norm: float | None = 1.0, name: str = "LAMB", **kwargs):
    super().__init__(learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                     weight_decay_rate=weight_decay_rate,
                     exclude_from_weight_decay=list(exclude_from_weight_decay or ()),
                     name=name, global_clipnorm=clip_norm, **kwargs)
    self.layer_lr_multipliers = (None if layer_lr_multipliers is None
                                 else dict(layer_lr_multipliers))
    self._multipliers: dict[str, float] = {}

  def build(self, var_list: Sequence[tf.Variable]) -> None:
    """Creates ``iterations``, the hyperparameters and the ``m`` / ``v`` slots of var_list."""
    names = [tf1_name(var) for var in var_list]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
      raise ValueError(f"Variables share a TF1 name (slots would collide): {dupes}")
    self._multipliers.update(
        {n: _lr_multiplier_for(n, self.layer_lr_multipliers) for n in names})
    self._tf1_vars = list(var_list)
    with tf.init_scope():
      self._create_all_weights(list(var_list))

  def apply_gradients(self, grads_and_vars, name=None, experimental_aggregate_gradients=True):
    grads_and_vars = [(tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g, v)
                      for g, v in grads_and_vars]
    if not self._multipliers:
      self.build([v for _, v in grads_and_vars])
    return super().apply_gradients(grads_and_vars, name, experimental_aggregate_gradients)

  def _resource_apply_dense(self, grad, var, apply_state=None):
    multiplier = self._multipliers.get(tf1_name(var), 1.0)
    if multiplier != 1.0:
      key = (var.device, var.dtype.base_dtype)
      coefficients = dict((apply_state or {}).get(key)
                          or self._fallback_apply_state(*key))
      coefficients["lr_t"] = coefficients["lr_t"] * multiplier
      apply_state = {key: coefficients}
    return super()._resource_apply_dense(grad, var, apply_state)

  def clip_gradients(self, grads: Sequence[tf.Tensor | None]) -> list:
    """The clipping ``apply_gradients`` applies (after cross-replica summation)."""
    if self.global_clipnorm is None:
      return list(grads)
    return list(tf.clip_by_global_norm(list(grads), self.global_clipnorm)[0])

  def tf1_slot_variables(self) -> dict[str, tf.Variable]:
    """``{"<var>/lamb_m": slot, "<var>/lamb_v": slot}`` (first and second moment)."""
    if not self._multipliers:
      raise ValueError("optimizer has no slots yet: call build(variables) or apply_gradients")
    slots = {}
    for var in self._tf1_vars:
      for slot_name, tf1_slot in zip(("m", "v"), LAMB_SLOTS, strict=True):
        slots[f"{tf1_name(var)}/{tf1_slot}"] = self.get_slot(var, slot_name)
    return slots

  def get_config(self) -> dict:
    config = super().get_config()
    config.update(exclude_from_weight_decay=list(self.exclude_from_weight_decay or ()),
                  layer_lr_multipliers=self.layer_lr_multipliers,
                  clip_norm=self.global_clipnorm)
    for key in ("decay", "global_clipnorm", "clipnorm", "clipvalue", "is_legacy_optimizer"):
      config.pop(key, None)
    return config


def create_optimizer(learning_rate: float, num_train_steps: int, weight_decay_rate: float = 0.0,
                     warmup_steps: int = 0, warmup_proportion: float = 0.0,
                     lr_decay_power: float = 1.0, layerwise_lr_decay_power: float = -1.0,
                     n_transformer_layers: int | None = None, lr_step_mode: str = "as_run",
                     layerwise_lr_decay_fix_depth: bool = False, clip_norm: float = 1.0,
                     jit_compile: bool = False, optimizer: str = "adamw"
                     ) -> AdamWeightDecay | Lamb:
  """The official ``create_optimizer`` settings as an ``AdamWeightDecay`` (or a ``Lamb``).

  Adam β1 0.9, β2 0.999, ε 1e-6, no bias correction; weight decay ``weight_decay_rate``
  except for names matching ``LayerNorm``, ``layer_norm``, ``bias``; gradients clipped to global
  norm ``clip_norm``; learning rate ``WarmupPolynomialDecay`` (warmup
  ``max(num_train_steps * warmup_proportion, warmup_steps)``); layer-wise decay
  (``layer_lr_multipliers``) when ``layerwise_lr_decay_power > 0``, where every variable must
  match exactly one key or ``build`` raises ``ValueError``.

  ``lr_step_mode``:
    - ``"as_run"`` (default): the official train op increments ``global_step`` with no ordering
      against the learning-rate read, and as run (TF graph, see the reference data) the increment
      happens first, so the update at step k uses ``lr(k + 1)``. The first update is not zero.
    - ``"ordered"``: the update at step k uses ``lr(k)`` (the first update is zero, Adam moments
      still move).
  ``layerwise_lr_decay_fix_depth``: see ``layer_lr_multipliers`` (False = official).
  ``jit_compile``: XLA-compile each variable's update (off by default: exact parity first).
  ``optimizer``: ``"adamw"`` (official) or ``"lamb"`` (``Lamb``: the same schedule, decay
  exclusions, clipping and layer-wise multipliers; ``jit_compile`` does not apply).
  """
  if optimizer not in OPTIMIZERS:
    raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
  if lr_step_mode not in LR_STEP_MODES:
    raise ValueError(f"lr_step_mode must be one of {LR_STEP_MODES}, got {lr_step_mode!r}")
  schedule = WarmupPolynomialDecay(
      learning_rate, num_train_steps,
      warmup_steps_for(num_train_steps, warmup_steps, warmup_proportion), lr_decay_power,
      step_offset=1 if lr_step_mode == "as_run" else 0)
  multipliers = None
  if layerwise_lr_decay_power > 0:
    multipliers = layer_lr_multipliers(layerwise_lr_decay_power, n_transformer_layers,
                                       layerwise_lr_decay_fix_depth)
  if optimizer == "lamb":
    return Lamb(schedule, weight_decay_rate=weight_decay_rate, layer_lr_multipliers=multipliers,
                clip_norm=clip_norm)
  return AdamWeightDecay(schedule, weight_decay_rate=weight_decay_rate,
                         layer_lr_multipliers=multipliers, clip_norm=clip_norm,
                         jit_compile=jit_compile)

