"""A power cut that drops every write not yet durable (benchmarks/chaos.py "unsynced cut"): from
the write journal a run kept (chaos_inject/chaos_writes.py), the files it wrote are put back to
their last durable state after its SIGKILL, as a disk that lost its cache would leave them.

The model (ext4 / XFS without data journalling, the worst each allows): a file's bytes are
durable once an fsync of it follows the write; a name (a file created, a rename into a folder)
once an fsync of its folder follows. Undone, newest first: bytes not durable go back to the
file's content before the write (a copy the journal kept), or to nothing for a new file; a
rename not durable is reversed (the replaced file restored); a file created whose name is not
durable is removed. Only what the run wrote through Python (the package's own writers) is
journalled; TensorFlow's C++ writes are not."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil


@dataclasses.dataclass
class _Op:
  kind: str  # "create" or "rename"
  path: str  # created file, or the rename's destination
  src: str = ""  # a rename's source
  shadow: str | None = None  # the replaced destination's bytes
  durable: bool = False


def read_journal(events: pathlib.Path) -> list[dict]:
  """The write journal's events, in order."""
  if not events.exists():
    return []
  return [e for e in (json.loads(line) for line in events.read_text().splitlines()
                      if line.strip()) if e["ev"] in ("w", "rename", "fsync")]


def _replay(journal: list[dict]) -> tuple[list[_Op], dict[str, dict]]:
  """The name operations (durable or not) and, per file's current path, its bytes' state:
  {"dirty": not fsynced since written, "shadow": its bytes before the write, "new": ...}."""
  ops: list[_Op] = []
  content: dict[str, dict] = {}
  for e in journal:
    if e["ev"] == "w":
      old = content.get(e["path"])
      if old is None or not old["dirty"]:  # the last durable bytes: before this write
        content[e["path"]] = {"dirty": True, "shadow": e["shadow"], "new": e["new"]}
      if e["new"]:
        ops.append(_Op("create", e["path"]))
    elif e["ev"] == "rename":
      ops.append(_Op("rename", e["dst"], e["src"], e["shadow"]))
      if e["src"] in content:
        content[e["dst"]] = content.pop(e["src"])
      else:
        content.pop(e["dst"], None)  # replaced by a file this run did not write
    elif e["ev"] == "fsync":
      if e["path"] in content:
        content[e["path"]]["dirty"] = False
      for op in ops:
        if os.path.dirname(op.path) == e["path"]:
          op.durable = True
  return ops, content


def drop_unsynced(events: pathlib.Path, root: pathlib.Path) -> str:
  """Puts every write the journal of ``events`` shows not yet durable back to its last
  durable state (files under ``root`` only); says what it did."""
  ops, content = _replay(read_journal(events))
  inside = str(root.resolve()) + os.sep
  restored = renamed = removed = 0
  for path, state in content.items():
    if not state["dirty"] or not path.startswith(inside) or not os.path.isfile(path):
      continue
    if state["shadow"]:
      shutil.copyfile(state["shadow"], path)
    else:
      with open(path, "r+b") as f:
        f.truncate(0)
    restored += 1
  for op in reversed(ops):
    if op.durable or not op.path.startswith(inside):
      continue
    if op.kind == "rename" and os.path.lexists(op.path):
      os.makedirs(os.path.dirname(op.src), exist_ok=True)
      os.rename(op.path, op.src)
      if op.shadow:
        shutil.copyfile(op.shadow, op.path)
      renamed += 1
    elif op.kind == "create" and os.path.isfile(op.path):
      os.remove(op.path)
      removed += 1
  return (f"unsynced writes dropped: {restored} files' bytes, {renamed} renames, "
          f"{removed} new names")
