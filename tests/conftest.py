"""Shared test fixtures: where ../shared lives, and quiet TensorFlow."""

import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import pytest  # noqa: E402
from helpers.paths import DATA, REFERENCE  # noqa: E402


@pytest.fixture(scope="session")
def reference_dir() -> pathlib.Path:
  if not REFERENCE.is_dir():
    pytest.fail(f"reference data not found at {REFERENCE} (set ELECTRA_SHARED)")
  return REFERENCE


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
  if not DATA.is_dir():
    pytest.fail(f"shared data not found at {DATA} (set ELECTRA_SHARED)")
  return DATA


@pytest.fixture(scope="session")
def vocab_file(reference_dir) -> str:
  return str(reference_dir / "vocab.txt")


@pytest.fixture(autouse=True)
def grappler_options():
  """Each test starts with the process's grappler options (gradient accumulation changes them)."""
  import tensorflow as tf

  before = tf.config.optimizer.get_experimental_options()
  yield
  if tf.config.optimizer.get_experimental_options() != before:
    tf.config.optimizer.set_experimental_options(
        {**{"arithmetic_optimization": True}, **before})
