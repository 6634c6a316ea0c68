"""Runs ``electra_tf.data_prep.build_openwebtext_pretraining_dataset`` (the
``electra-build-openwebtext-data`` command) with the same flags; importing this module gives
that module."""

import importlib
import os
import runpy
import sys

if __package__ in (None, ""):  # run as a script: make the repository root importable
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_MODULE = "electra_tf.data_prep.build_openwebtext_pretraining_dataset"

if __name__ == "__main__":
  runpy.run_module(_MODULE, run_name="__main__", alter_sys=True)
else:
  sys.modules[__name__] = importlib.import_module(_MODULE)
