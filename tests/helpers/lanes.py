"""The two test lanes and the guard that keeps the golden lane off the shared folder.

golden: tests/golden (official goldens at tiny shapes) and tests/data (licensed excerpts); always.
extended: ../shared/reference and ../shared/data (or ``ELECTRA_SHARED``); only where present.
"""

from __future__ import annotations

import os
import pathlib


def in_extended_lane(item) -> bool:
  """True for a pytest item of the extended lane (its ``reference_dir`` or its marker)."""
  callspec = getattr(item, "callspec", None)
  lane = callspec.params.get("reference_dir") if callspec else None
  return lane == "extended" or item.get_closest_marker("extended") is not None


class SharedReadGuard:
  """An audit hook recording the files opened or listed under ``root`` while ``active``.

  It sees Python-level opens (``open``, ``np.load``, ``os.listdir``, ``os.scandir``), not
  TensorFlow's C++ file reads; the public-clone run (no shared folder at all) checks the rest.
  """

  EVENTS = ("open", "os.listdir", "os.scandir")

  def __init__(self, root: pathlib.Path):
    self.root = os.path.realpath(root)
    self.active = False
    self.reads: list[str] = []

  def __call__(self, event: str, args: tuple) -> None:
    if not self.active or event not in self.EVENTS or not args:
      return
    path = args[0]
    if isinstance(path, (str, bytes, os.PathLike)):
      path = os.fsdecode(path)
      real = os.path.realpath(path)
      if real == self.root or real.startswith(self.root + os.sep):
        self.reads.append(path)

  def take(self) -> list[str]:
    """The reads recorded so far, forgetting them."""
    reads, self.reads = self.reads, []
    return reads
