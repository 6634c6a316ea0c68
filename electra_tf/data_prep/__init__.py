"""Corpus -> pre-training TFRecords and vocabularies: the builders behind the
``electra-build-pretraining-data*`` and ``electra-learn-vocab`` commands (``data_prep/*.py``
run them too)."""
