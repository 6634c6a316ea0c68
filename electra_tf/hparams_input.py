"""``--hparams`` as the official scripts take it: a JSON object literal, a ``.json`` file, or the
name of a preset shipped in ``electra_tf/configs/``; read into a plain dict before any config
is built.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

PRESETS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")


def preset_path(value: str) -> str | None:
  """The shipped ``configs/`` preset ``value`` names (``electra_small`` or
  ``electra_small.json``), when ``value`` is no existing file: ``--hparams`` finds the presets
  from an installed package as from a clone. None otherwise."""
  name = value if value.endswith(".json") else value + ".json"
  if os.sep in value or "/" in value or os.path.exists(value) or not name[:-5].isidentifier():
    return None
  path = os.path.join(PRESETS_DIR, name)
  return path if os.path.isfile(path) else None


def load_hparams(hparams: str | dict[str, Any] | None) -> dict[str, Any]:
  """``--hparams`` as the official scripts read it: a value ending in ``.json`` is a file,
  anything else a JSON object literal; a dict is copied, None or blank means no hparams."""
  if hparams is None:
    return {}
  if isinstance(hparams, dict):
    return copy.deepcopy(hparams)
  if not isinstance(hparams, str):
    raise ValueError(f"hparams must be a JSON string, a .json path or a dict, got "
                     f"{type(hparams).__name__}")
  hparams = preset_path(hparams.strip()) or hparams
  if hparams.strip().endswith(".json"):
    path = hparams.strip()
    try:
      with open(path) as f:
        text = f.read()
    except OSError as e:
      raise ValueError(f"cannot read hparams file {path}: {e.strerror}") from None
    source = f"hparams file {path}"
  else:
    if not hparams.strip():
      return {}
    text, source = hparams, "--hparams"
  try:
    value = json.loads(text)
  except json.JSONDecodeError as e:
    raise ValueError(f"{source} is not valid JSON: {e}") from None
  if not isinstance(value, dict):
    raise ValueError(f"{source} must be a JSON object, got {type(value).__name__}")
  return value
