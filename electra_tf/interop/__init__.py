"""Exports: every format written (TF1 / TF2 checkpoints, SavedModels, Hugging Face folders,
LiteRT, keras-hub) and the convert command. Model paths are read by ``electra_tf.reading``.
See docs/architecture.md.
"""
