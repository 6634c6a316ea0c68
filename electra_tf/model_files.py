"""The names of what a model folder holds, and where its vocabulary is found: one home for each,
used by every module that writes or reads them (TensorFlow-free).

``VOCAB_FILE`` is the WordPiece vocabulary beside a model's checkpoints (and in a Hugging Face
folder, a LiteRT export, a SavedModel's ``assets/``); ``SAVED_MODEL_DIR`` the folder convert
writes the SavedModel to under ``--output_dir``.
"""

from __future__ import annotations

import os

VOCAB_FILE = "vocab.txt"
SAVED_MODEL_DIR = "saved_model"


def vocab_in(folder: str) -> str | None:
  """The ``vocab.txt`` of a model folder: in the folder, else in its ``assets/`` (a SavedModel's
  copy); None when neither exists."""
  for path in (os.path.join(folder, VOCAB_FILE), os.path.join(folder, "assets", VOCAB_FILE)):
    if os.path.isfile(path):
      return path
  return None
