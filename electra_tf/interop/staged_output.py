"""Write a whole output folder next to its destination, then move it into place.

A folder is either the old one or the complete new one: an export that fails or is killed
leaves the destination untouched (and at worst a hidden ``.<name>.tmp-<pid>-*`` sibling, which
the next successful export removes), and a new export never mixes with files of an older one
(e.g. an old ``hf/`` beside a new model).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import tensorflow as tf

from electra_tf import atomic_io


class OutputDirError(ValueError):
  """The output folder holds files and replacing it was not asked for."""


def check_output_dir(output_dir: str, overwrite: bool) -> None:
  """Raises OutputDirError if output_dir is a file, or a non-empty folder without overwrite."""
  if not tf.io.gfile.exists(output_dir):
    return
  if not tf.io.gfile.isdir(output_dir):
    raise OutputDirError(f"output_dir {output_dir} exists and is not a directory")
  if tf.io.gfile.listdir(output_dir) and not overwrite:
    raise OutputDirError(f"output_dir {output_dir} is not empty; pass --overwrite to replace "
                         "it whole, or choose another folder")


@contextlib.contextmanager
def staged_dir(output_dir: str, overwrite: bool = False) -> Iterator[str]:
  """Yields a fresh sibling folder to write into; on success it replaces ``output_dir`` whole
  and the hidden leftovers of earlier killed exports are removed (atomic_io.staged_dir).

  On an exception the sibling is deleted and ``output_dir`` is left as it was.
  """
  output_dir = output_dir.rstrip("/") or output_dir
  check_output_dir(output_dir, overwrite)
  with atomic_io.staged_dir(output_dir) as stage:
    yield stage


def relocate(value: object, stage: str, output_dir: str) -> object:
  """``value`` (a path, or a dict/list of them) with the staging folder replaced by output_dir."""
  if isinstance(value, str) and (value == stage or value.startswith(stage + os.sep)):
    return output_dir.rstrip("/") + value[len(stage):]
  if isinstance(value, dict):
    return {k: relocate(v, stage, output_dir) for k, v in value.items()}
  if isinstance(value, list | tuple):
    return type(value)(relocate(v, stage, output_dir) for v in value)
  return value
