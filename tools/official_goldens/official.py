"""Imports the official ELECTRA code (an unedited checkout) under TF 2.20, with shims.

The official tree targets TF 1.15. Nothing in it is edited: each shim below stands in for one
thing TF 2.20 lacks, installed before the official modules are imported.
"""

from __future__ import annotations

import importlib
import os
import sys
import types

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.compat.v1.layers.dense needs Keras 2
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

tf1 = tf.compat.v1
_LOADED: str | None = None


def _shim_contrib() -> None:
  """``tensorflow.contrib.layers`` (gone in TF 2): tf_slim's layers are the same functions.

  The official modeling.py uses only ``contrib_layers.layer_norm`` (variables LayerNorm/beta,
  LayerNorm/gamma, epsilon 1e-12, moments over the last axis), which tf_slim keeps unchanged.
  """
  import tf_slim

  contrib = types.ModuleType("tensorflow.contrib")
  contrib.layers = tf_slim.layers
  sys.modules["tensorflow.contrib"] = contrib
  sys.modules["tensorflow.contrib.layers"] = tf_slim.layers


def _shim_estimator() -> None:
  """``tf.estimator`` (absent in TF 2.20): the official training_utils subclasses its hooks.

  ``SessionRunHook`` and ``SessionRunArgs`` are the very classes ``tf.compat.v1.train`` exports.
  Only the hook base classes are provided; the TPUEstimator entry points are not run.
  """
  estimator = getattr(tf1, "estimator", None)
  if estimator is None or not hasattr(estimator, "SessionRunHook"):
    estimator = types.SimpleNamespace(
        SessionRunHook=tf1.train.SessionRunHook, SessionRunArgs=tf1.train.SessionRunArgs)
    tf1.estimator = estimator


class _ListsAcceptingArrays:
  """``tf.train`` for the official ``_make_tf_example``: protobuf 5 is stricter about lists.

  The official code passes ``list(values)`` where values may be a 0-d numpy array (the default
  feature value); protobuf 5 rejects that. Each value is turned into a Python int / float
  first: the stored values are the same.
  """

  def __getattr__(self, name):
    return getattr(tf1.train, name)

  @staticmethod
  def Int64List(value=()):  # noqa: N802 (the protobuf class name)
    import numpy as np
    return tf1.train.Int64List(value=[int(x) for x in np.ravel(np.asarray(list(value)))])

  @staticmethod
  def FloatList(value=()):  # noqa: N802
    import numpy as np
    return tf1.train.FloatList(value=[float(x) for x in np.ravel(np.asarray(list(value)))])


class _TFWithStrictListShim:
  """The official module's ``tf`` with ``tf.train`` replaced by :class:`_ListsAcceptingArrays`."""

  train = _ListsAcceptingArrays()

  def __getattr__(self, name):
    return getattr(tf1, name)


def load(official_dir: str) -> None:
  """Puts the official checkout on ``sys.path`` with the shims; graph mode, TF1 variables."""
  global _LOADED
  official_dir = os.path.abspath(official_dir)
  if _LOADED == official_dir:
    return
  if not os.path.isfile(os.path.join(official_dir, "model", "modeling.py")):
    raise SystemExit(f"--official_dir {official_dir}: no model/modeling.py (a checkout of "
                     "google-research/electra is expected)")
  tf1.disable_v2_behavior()  # reference variables and graph mode, as TF 1.15 ran
  _shim_contrib()
  _shim_estimator()
  sys.path.insert(0, official_dir)
  _LOADED = official_dir


def module(name: str):
  """An official module by dotted name (``"model.modeling"``), shims applied where needed."""
  mod = importlib.import_module(name)
  if name == "finetune.preprocessing" and not isinstance(mod.tf, _TFWithStrictListShim):
    mod.tf = _TFWithStrictListShim()
  return mod


def commit(official_dir: str) -> str:
  """The checkout's commit if it is a git work tree, else ``"unknown"`` (recorded in README)."""
  head = os.path.join(official_dir, ".git", "HEAD")
  try:
    with open(head) as f:
      ref = f.read().strip()
    if ref.startswith("ref: "):
      with open(os.path.join(official_dir, ".git", ref[5:])) as f:
        return f.read().strip()
    return ref
  except OSError:
    return "unknown"
