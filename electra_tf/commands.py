"""The console scripts of ``pip install -e .`` (``[project.scripts]`` in pyproject.toml).

Each runs one entry point exactly as its ``python`` form does (``python run_pretraining.py``,
``python -m electra_tf.convert``, ...), flags, quiet console and exit status included, from any
folder. ``COMMANDS`` is the one list: this module's entry functions are made from it, and
tests/test_commands.py checks that pyproject.toml names each of them and nothing else.
"""

from __future__ import annotations

import runpy
from collections.abc import Callable

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


def _entry(script: str, module: str) -> Callable[[], None]:
  def run() -> None:
    # runpy rather than importing a main(): the entry points do their own start-up under
    # ``if __name__ == "__main__"`` (quiet console before TensorFlow loads, flag definitions).
    runpy.run_module(module, run_name="__main__", alter_sys=True)

  run.__name__ = run.__qualname__ = _function_name(script)
  run.__doc__ = f"``{script}``: ``{python_form(script)}``."
  return run


for _script, _module in COMMANDS.items():
  globals()[_function_name(_script)] = _entry(_script, _module)
del _script, _module
