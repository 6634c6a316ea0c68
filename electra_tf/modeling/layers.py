"""Dense / LayerNorm building blocks whose variables carry absolute TF1 names.

Keras names variables after the name scopes active when a layer is first called, which
depends on who calls it first (the generator runs before the discriminator, yet both read
``electra/embeddings``). These layers instead create their variables under an explicit,
absolute scope such as ``electra/encoder/layer_0/attention/self/query``, so the TF2 variable
name is the official checkpoint key whatever the call order or the enclosing model. Scope and
variable names come from ``electra_tf.names``. Every layer has ``get_config`` (and
``from_config`` where the constructor takes objects) and is registered as ``electra_tf>Name``
for ``tf_keras.layers.deserialize``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import tensorflow as tf
import tf_keras

from electra_tf import names

# Registered names for ``tf_keras.layers.deserialize`` / ``clone_model``: ``electra_tf>Dense``.
serializable = tf_keras.saving.register_keras_serializable(package="electra_tf")


def gelu(x: tf.Tensor) -> tf.Tensor:
  """Exact (erf) GELU, as the official ELECTRA ``modeling.gelu`` (not the tanh form)."""
  return x * 0.5 * (1.0 + tf.math.erf(x / tf.cast(math.sqrt(2.0), x.dtype)))


def layer_norm(x: tf.Tensor, beta: tf.Tensor, gamma: tf.Tensor, epsilon: float) -> tf.Tensor:
  """LayerNorm of x [..., dim] over its last axis, statistics in float32, result in x's dtype."""
  x32 = tf.cast(x, tf.float32)
  mean, variance = tf.nn.moments(x32, axes=[-1], keepdims=True)
  y = tf.nn.batch_normalization(x32, mean, variance, tf.cast(beta, tf.float32),
                                tf.cast(gamma, tf.float32), epsilon)
  return tf.cast(y, x.dtype)


_ACTIVATIONS: dict[str, Callable[[tf.Tensor], tf.Tensor] | None] = {
    "linear": None,
    "relu": tf.nn.relu,
    "gelu": gelu,
    "tanh": tf.tanh,
}


def get_activation(name: str | None) -> Callable[[tf.Tensor], tf.Tensor] | None:
  """Maps the official ``hidden_act`` strings to functions (None = identity)."""
  if not name:
    return None
  key = name.lower()
  if key not in _ACTIVATIONS:
    raise ValueError(f"Unsupported hidden_act {name!r}; known: {', '.join(sorted(_ACTIVATIONS))}")
  return _ACTIVATIONS[key]


def activation_name(activation: str | Callable | None) -> str | None:
  """The ``hidden_act`` string of an activation function (inverse of ``get_activation``)."""
  if activation is None or isinstance(activation, str):
    return activation
  for name, fn in _ACTIVATIONS.items():
    if fn is activation:
      return name
  raise ValueError(f"activation {activation!r} is not one of {', '.join(sorted(_ACTIVATIONS))}")


def truncated_normal(stddev: float) -> tf_keras.initializers.Initializer:
  """The official ``create_initializer``: truncated normal with the given stddev."""
  return tf_keras.initializers.TruncatedNormal(stddev=stddev)


class ScopedLayer(tf_keras.layers.Layer):
  """A layer that creates its variables under the absolute TF1 scope ``scope``.

  ``get_config`` stores ``scope`` instead of the Keras ``name`` (which is derived from it).
  """

  def __init__(self, scope: str, **kwargs):
    super().__init__(name=scope.replace("/", "."), **kwargs)
    self.scope = scope

  def scoped_weight(self, name: str, shape, initializer, dtype=None) -> tf.Variable:
    with tf.name_scope(self.scope + "/"):
      return self.add_weight(name, shape=shape, initializer=initializer,
                             dtype=dtype or self.variable_dtype, trainable=True)

  def get_config(self) -> dict:
    config = super().get_config()
    del config["name"]
    config["scope"] = self.scope
    return config


@serializable


class Dense(ScopedLayer):
  """``tf.layers.dense`` equivalent: ``<scope>/kernel`` [in, units], ``<scope>/bias`` [units].

  The default kernel initializer is glorot-uniform, as ``tf.layers.dense`` without one.
  """

  def __init__(self, units: int, scope: str, activation: str | Callable | None = None,
               kernel_initializer=None, **kwargs):
    super().__init__(scope, **kwargs)
    self.units = units
    self.activation = get_activation(activation) if isinstance(activation, str) else activation
    self.kernel_initializer = kernel_initializer or tf_keras.initializers.GlorotUniform()

  def build(self, input_shape):
    in_dim = int(input_shape[-1])
    self.kernel = self.scoped_weight(names.KERNEL, [in_dim, self.units], self.kernel_initializer)
    self.bias = self.scoped_weight(names.BIAS, [self.units], "zeros")
    super().build(input_shape)

  def linear(self, x: tf.Tensor) -> tf.Tensor:
    """[..., in] -> [..., units]: x @ kernel + bias, without the activation."""
    y = tf.matmul(tf.reshape(x, [-1, tf.shape(x)[-1]]), self.kernel)
    y = tf.nn.bias_add(y, self.bias)
    return tf.reshape(y, tf.concat([tf.shape(x)[:-1], [self.units]], 0))

  def call(self, x: tf.Tensor) -> tf.Tensor:
    """[..., in] -> [..., units]."""
    y = self.linear(x)
    if self.activation is not None:
      y = self.activation(y)
    return y

  def get_config(self) -> dict:
    return {**super().get_config(), "units": self.units,
            "activation": activation_name(self.activation),
            "kernel_initializer": tf_keras.initializers.serialize(self.kernel_initializer)}

  @classmethod
  def from_config(cls, config: dict) -> Dense:
    config = dict(config)
    config["kernel_initializer"] = tf_keras.initializers.deserialize(config["kernel_initializer"])
    return cls(**config)


@serializable
class LayerNorm(ScopedLayer):
  """``contrib.layers.layer_norm`` over the last axis (eps 1e-12): ``LayerNorm/{beta,gamma}``.

  Statistics are computed in float32 even under mixed precision (epsilon 1e-12 underflows in
  float16).
  """

  def __init__(self, scope: str, epsilon: float = 1e-12, **kwargs):
    super().__init__(scope, **kwargs)
    self.epsilon = epsilon

  def build(self, input_shape):
    dim = int(input_shape[-1])
    self.beta = self.scoped_weight(names.BETA, [dim], "zeros")
    self.gamma = self.scoped_weight(names.GAMMA, [dim], "ones")
    super().build(input_shape)

  def call(self, x: tf.Tensor) -> tf.Tensor:
    """[..., dim] -> [..., dim]."""
    return layer_norm(x, self.beta, self.gamma, self.epsilon)

  def get_config(self) -> dict:
    return {**super().get_config(), "epsilon": self.epsilon}
