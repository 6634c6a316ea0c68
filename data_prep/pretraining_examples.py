"""Importing this module gives ``electra_tf.data_prep.pretraining_examples`` (moved there)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("electra_tf.data_prep.pretraining_examples")
