"""The console scripts of ``pip install -e .`` (``[project.scripts]`` in pyproject.toml).

Each runs one entry point exactly as its ``python`` form does (``python run_pretraining.py``,
``python -m electra_tf.convert``, ...), flags, quiet console and exit status included, from any
folder. ``COMMANDS`` is the one list; each command has its entry function below (named as
``entry_point`` says), and tests/test_commands.py checks that pyproject.toml names each of them
and nothing else, and that each runs its module.
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
  "electra-build-pretraining-data": "electra_tf.data_prep.build_pretraining_dataset",
  "electra-build-openwebtext-data": "electra_tf.data_prep.build_openwebtext_pretraining_dataset",
  "electra-build-pretraining-data-beam": "electra_tf.data_prep.beam_pipeline",
  "electra-learn-vocab": "electra_tf.data_prep.learn_vocab",
}
PREFIX = "electra-"


def entry_point(script: str) -> str:
  """The ``[project.scripts]`` value of ``script``: ``electra-pretrain`` ->
  ``electra_tf.commands:pretrain``."""
  return f"{__name__}:{_function_name(script)}"


def _function_name(script: str) -> str:
  return script.removeprefix(PREFIX).replace("-", "_")


def python_form(script: str) -> str:
  """What ``script`` runs, as typed: ``python run_pretraining.py``, ``python -m
  electra_tf.convert``."""
  module = COMMANDS[script]
  return f"python -m {module}" if "." in module else f"python {module}.py"


def _run(script: str) -> None:
  """Runs ``script``'s module as ``__main__``: runpy rather than importing a main(), since the
  entry points do their own start-up under ``if __name__ == "__main__"`` (quiet console before
  TensorFlow loads, flag definitions)."""
  runpy.run_module(COMMANDS[script], run_name="__main__", alter_sys=True)


def pretrain() -> None:
  """``electra-pretrain``: ``python run_pretraining.py``."""
  _run("electra-pretrain")


def finetune() -> None:
  """``electra-finetune``: ``python run_finetuning.py``."""
  _run("electra-finetune")


def convert() -> None:
  """``electra-convert``: ``python -m electra_tf.convert``."""
  _run("electra-convert")


def curves() -> None:
  """``electra-curves``: ``python -m electra_tf.learning_curves``."""
  _run("electra-curves")


def predict() -> None:
  """``electra-predict``: ``python -m electra_tf.predict``."""
  _run("electra-predict")


def build_pretraining_data() -> None:
  """``electra-build-pretraining-data``: ``python -m
  electra_tf.data_prep.build_pretraining_dataset``."""
  _run("electra-build-pretraining-data")


def build_openwebtext_data() -> None:
  """``electra-build-openwebtext-data``: ``python -m
  electra_tf.data_prep.build_openwebtext_pretraining_dataset``."""
  _run("electra-build-openwebtext-data")


def build_pretraining_data_beam() -> None:
  """``electra-build-pretraining-data-beam``: ``python -m electra_tf.data_prep.beam_pipeline``."""
  _run("electra-build-pretraining-data-beam")


def learn_vocab() -> None:
  """``electra-learn-vocab``: ``python -m electra_tf.data_prep.learn_vocab``."""
  _run("electra-learn-vocab")
