"""Small helpers shared by the absl entry points."""

from __future__ import annotations

from absl import app, flags


def official_flag(underscored: str, hyphenated: str) -> str | None:
  """Value of a flag given either as ``--data_dir`` or the official ``--data-dir`` spelling."""
  a, b = flags.FLAGS[underscored].value, flags.FLAGS[hyphenated].value
  if a is not None and b is not None and a != b:
    raise app.UsageError(f"--{underscored} and --{hyphenated} disagree: {a!r} vs {b!r}")
  return a if a is not None else b


def data_dir_and_model_name(argv: list[str]) -> tuple[str, str]:
  """The two required paths of both entry points; a usage error for stray or missing ones."""
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  data_dir = official_flag("data_dir", "data-dir")
  model_name = official_flag("model_name", "model-name")
  if not data_dir or not model_name:
    raise app.UsageError("--data_dir and --model_name are required")
  return data_dir, model_name
