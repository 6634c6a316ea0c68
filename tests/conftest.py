"""Shared fixtures: the golden lane (this repository) and the extended lane (../shared).

``reference_dir`` is parametrized over the lanes: ``golden`` (tests/golden, always) and
``extended`` (../shared/reference, only where it exists). Tests marked ``extended`` read the
shared folder's full data sets and are deselected where it does not exist. A test of the golden
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
  TESTS,
  extended_available,
)

EXTENDED = extended_available()
LANES = ["golden", "extended"] if EXTENDED else ["golden"]
SYSTEM = TESTS / "system"  # end-to-end runs: marked system
_HOW = (f"put the shared folder (reference/, data/) at {SHARED} or set "
        "ELECTRA_SHARED=/path/to/shared")


def pytest_generate_tests(metafunc):
  if "reference_dir" in metafunc.fixturenames:
    metafunc.parametrize("reference_dir", LANES, indirect=True, scope="session")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
  """Marks each test with its lane and drops what this machine cannot run, as deselected.

  ``golden``: every test of the golden lane (all but the extended ones); ``extended``: the
  tests marked so and the ``[extended]`` cases of ``reference_dir``; ``system``: the tests in
  tests/system. Without the shared folder, the extended tests are deselected; so is the extended
  case of a golden folder that only tests/golden has. Deselected tests are reported as such
  (pytest's ``N/M tests collected (K deselected)``, ``K deselected`` in the summary), so the
  collected count is the run count plus the deselected one. Runs before ``-m`` selects.
  """
  keep, dropped = [], []
  for item in items:
    extended = in_extended_lane(item)
    if (extended and not EXTENDED) or (extended and item.get_closest_marker("golden_lane_only")):
      dropped.append(item)
      continue
    if extended:
      item.add_marker(pytest.mark.extended)
    else:
      item.add_marker(pytest.mark.golden)
    if SYSTEM in item.path.parents:
      item.add_marker(pytest.mark.system)
    keep.append(item)
  if dropped:
    config.hook.pytest_deselected(items=dropped)
    items[:] = keep


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
