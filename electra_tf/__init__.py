"""electra-tf: a TensorFlow 2 / Keras port of google-research/electra."""

__version__ = "0.1.0"
