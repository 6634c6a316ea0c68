"""Console output shared by the library and the entry points: one ``log`` for progress lines."""

from __future__ import annotations


def log(message: str = "") -> None:
  """Prints one progress line at once (no buffering, so logs interleave correctly)."""
  print(message, flush=True)
