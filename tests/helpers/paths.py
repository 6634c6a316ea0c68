"""Where the repository's test data and the optional shared reference live.

Two lanes (tests/README.md): the *golden* lane reads only this repository (``tests/golden/``:
official goldens at tiny shapes; ``tests/data/``: licensed text excerpts). The *extended* lane
reads the big official goldens and full data sets of the shared folder (``../shared`` beside
the clone, or ``ELECTRA_SHARED``), when it is there.
"""

from __future__ import annotations

import os
import pathlib

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
TESTS = REPO_ROOT / "tests"  # the tests root, whatever folder a test file sits in
HELPERS = TESTS / "helpers"  # shared test code and the scripts tests run in subprocesses
GOLDEN = REPO_ROOT / "tests" / "golden"  # official goldens at tiny shapes (tests/golden/README.md)
TEST_DATA = REPO_ROOT / "tests" / "data"  # licensed excerpts (tests/data/SOURCE.md)
SHARED = pathlib.Path(os.environ.get("ELECTRA_SHARED", REPO_ROOT.parent / "shared"))
REFERENCE = SHARED / "reference"  # extended lane: outputs of the official code (its README.md)
DATA = SHARED / "data"  # extended lane: full real data sets


def extended_available() -> bool:
  """True when the shared folder's reference goldens are there (the extended lane runs)."""
  return REFERENCE.is_dir()
