"""Fine-tuning on the user's own data with no code: a ``task.json`` beside CSV / TSV / JSONL /
CoNLL files (``spec``) makes a classification, regression or tagging task (``tasks``); ``records``
reads the files, ``scoring`` computes the chosen metrics, ``predictions`` writes test outputs.
"""
