"""Small helpers shared by the absl entry points."""

from __future__ import annotations

from absl import app, flags


def official_flag(underscored: str, hyphenated: str) -> str | None:
  """Value of a flag given either as ``--data_dir`` or the official ``--data-dir`` spelling."""
  a, b = flags.FLAGS[underscored].value, flags.FLAGS[hyphenated].value
  if a is not None and b is not None and a != b:
    raise app.UsageError(f"--{underscored} and --{hyphenated} disagree: {a!r} vs {b!r}")
  return a if a is not None else b
