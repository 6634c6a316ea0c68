"""The console scripts of ``pip install -e .`` (``[project.scripts]`` in pyproject.toml).

Each runs one entry point exactly as its ``python`` form does, flags, quiet console and exit
status included, from any folder:

  electra-pretrain   = python run_pretraining.py
  electra-finetune   = python run_finetuning.py
  electra-convert    = python -m electra_tf.convert
  electra-curves     = python -m electra_tf.learning_curves
  electra-predict    = python -m electra_tf.predict
"""

from __future__ import annotations

import runpy

# console script -> the module its ``python`` form runs as ``__main__``
COMMANDS = {
  "electra-pretrain": "run_pretraining",
  "electra-finetune": "run_finetuning",
  "electra-convert": "electra_tf.convert",
  "electra-curves": "electra_tf.learning_curves",
  "electra-predict": "electra_tf.predict",
}


def _run(module: str) -> None:
  # runpy rather than importing a main(): the entry points do their own start-up under
  # ``if __name__ == "__main__"`` (quiet console before TensorFlow loads, flag definitions).
  runpy.run_module(module, run_name="__main__", alter_sys=True)


def pretrain() -> None:
  """``electra-pretrain``: pre-training (``python run_pretraining.py``)."""
  _run(COMMANDS["electra-pretrain"])


def finetune() -> None:
  """``electra-finetune``: fine-tuning (``python run_finetuning.py``)."""
  _run(COMMANDS["electra-finetune"])


def convert() -> None:
  """``electra-convert``: conversion and exports (``python -m electra_tf.convert``)."""
  _run(COMMANDS["electra-convert"])


def curves() -> None:
  """``electra-curves``: learning curves (``python -m electra_tf.learning_curves``)."""
  _run(COMMANDS["electra-curves"])


def predict() -> None:
  """``electra-predict``: label a file with a fine-tuned model (``python -m
  electra_tf.predict``)."""
  _run(COMMANDS["electra-predict"])
