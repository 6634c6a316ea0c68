"""Shared test fixtures: where ../shared lives, and quiet TensorFlow."""

import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import pytest  # noqa: E402
from helpers.paths import DATA, REFERENCE, SHARED  # noqa: E402


def _shared_folder(folder: pathlib.Path) -> pathlib.Path:
  """``folder`` if it exists; else the test fails with one line (no traceback) saying where."""
  if not folder.is_dir():
    pytest.fail(
        f"{folder} not found: the golden tests read the shared folder {SHARED} (default: "
        f"../shared beside the clone, holding reference/ and data/); put it there or set "
        f"ELECTRA_SHARED=/path/to/shared", pytrace=False)
  return folder


@pytest.fixture(scope="session")
def reference_dir() -> pathlib.Path:
  return _shared_folder(REFERENCE)


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
  return _shared_folder(DATA)


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
