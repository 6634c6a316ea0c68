"""Where the repository and the shared reference data live (``ELECTRA_SHARED`` overrides)."""

from __future__ import annotations

import os
import pathlib

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
SHARED = pathlib.Path(os.environ.get("ELECTRA_SHARED", REPO_ROOT.parent / "shared"))
REFERENCE = SHARED / "reference"  # outputs of the official code (see its README.md)
DATA = SHARED / "data"  # real data sets
