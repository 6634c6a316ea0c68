"""Shared fixtures: the golden lane (this repository) and the extended lane (../shared).

``reference_dir`` is parametrized over the lanes: ``golden`` (tests/golden, always) and
``extended`` (../shared/reference, only where it exists). Tests marked ``extended`` read the
shared folder's full data sets and are collected only where it exists. A test of the golden
lane that opens a file under the shared folder fails (``helpers.lanes.SharedReadGuard``).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import pytest  # noqa: E402
from helpers.lanes import SharedReadGuard, in_extended_lane  # noqa: E402
from helpers.paths import (  # noqa: E402
  DATA,
  GOLDEN,
  REFERENCE,
  SHARED,
  TEST_DATA,
  extended_available,
)

EXTENDED = extended_available()
LANES = ["golden", "extended"] if EXTENDED else ["golden"]
_HOW = (f"put the shared folder (reference/, data/) at {SHARED} or set "
        "ELECTRA_SHARED=/path/to/shared")


def pytest_configure(config):
  config.addinivalue_line(
      "markers", "extended: reads the shared folder's full data sets (extended lane only)")
  config.addinivalue_line(
      "markers", "golden_lane_only: a tests/golden folder that the shared set does not have")


def pytest_generate_tests(metafunc):
  if "reference_dir" in metafunc.fixturenames:
    metafunc.parametrize("reference_dir", LANES, indirect=True, scope="session")


def pytest_collection_modifyitems(config, items):
  """Without the shared folder, extended tests are not collected (not counted as skips); nor
  is the extended lane of a golden folder that only tests/golden has."""
  if not EXTENDED:
    items[:] = [item for item in items if item.get_closest_marker("extended") is None]
  items[:] = [item for item in items if not (
      item.get_closest_marker("golden_lane_only") and in_extended_lane(item))]


def pytest_unconfigure(config):
  """Without the shared folder, the run's last line: the extended lane did not run (no failure)."""
  if not EXTENDED and not hasattr(config, "workerinput"):
    print(f"extended parity lane did not run: {REFERENCE} not found; to run it, {_HOW}")


_GUARD = SharedReadGuard(SHARED)
sys.addaudithook(_GUARD)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
  _GUARD.take()
  _GUARD.active = not in_extended_lane(item)
  yield
  _GUARD.active = False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
  _GUARD.active = not in_extended_lane(item)
  yield
  _GUARD.active = False
  reads = _GUARD.take()
  if reads:
    pytest.fail(f"a golden-lane test read the shared folder: {reads[0]} (mark it extended or "
                "use tests/golden, tests/data)", pytrace=False)


@pytest.fixture(scope="session")
def reference_dir(request):
  """The lane's official goldens: tests/golden, or ../shared/reference (extended)."""
  return REFERENCE if request.param == "extended" else GOLDEN


@pytest.fixture(scope="session")
def data_dir():
  """Licensed real-text excerpts in the repository (tests/data/SOURCE.md)."""
  return TEST_DATA


@pytest.fixture(scope="session")
def shared_data_dir():
  """The shared folder's full data sets: only for tests marked ``extended``."""
  return DATA


@pytest.fixture(scope="session")
def vocab_file():
  """The goldens' small WordPiece vocabulary (BERT's special-token ids; tests/golden)."""
  return str(GOLDEN / "vocab.txt")


@pytest.fixture(scope="session")
def tiny_litert_export(tmp_path_factory):
  """helpers.tiny_litert's export, built once for the tests that only read it."""
  from helpers import tiny_litert

  return tiny_litert.build(tmp_path_factory.mktemp("tiny_litert"))


@pytest.fixture(autouse=True)
def grappler_options():
  """Each test starts with the process's grappler options (gradient accumulation changes them)."""
  import tensorflow as tf

  before = tf.config.optimizer.get_experimental_options()
  yield
  if tf.config.optimizer.get_experimental_options() != before:
    tf.config.optimizer.set_experimental_options(
        {**{"arithmetic_optimization": True}, **before})
