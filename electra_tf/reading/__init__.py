"""Model reading: what a model path holds (official TF1, ours, Hugging Face) and the
self-describing model directory (``hparams.json``, ``vocab.txt``).

``model_source`` opens a path once; ``model_dir`` reads and writes a directory's shape and
vocabulary; ``hf_import`` reads a Hugging Face ELECTRA folder. Only the foundations are imported
here, so modeling, training, pre-training, fine-tuning and the exports all build on it. See
docs/architecture.md.
"""
