"""Writers whose bytes depend only on the data, so that a rerun rewrites every golden bit for bit.

``np.savez_compressed`` stamps each member with the current time; these writers do not.
"""

from __future__ import annotations

import io
import json
import pathlib
import zipfile

import numpy as np

_EPOCH = (1980, 1, 1, 0, 0, 0)


def save_npz(path: pathlib.Path, arrays: dict[str, np.ndarray]) -> None:
  """Like ``np.savez_compressed`` (same ``np.load`` result), members in sorted key order."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
    for key in sorted(arrays):
      buf = io.BytesIO()
      np.lib.format.write_array(buf, np.asarray(arrays[key]), allow_pickle=False)
      info = zipfile.ZipInfo(key + ".npy", date_time=_EPOCH)
      info.compress_type = zipfile.ZIP_DEFLATED
      info.external_attr = 0o644 << 16
      zf.writestr(info, buf.getvalue())


def save_json(path: pathlib.Path, obj) -> None:
  """Indented JSON with sorted keys and a final newline."""
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def save_jsonl(path: pathlib.Path, rows) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                  encoding="utf-8")


def save_text(path: pathlib.Path, text: str) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(text, encoding="utf-8")
