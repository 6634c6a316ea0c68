"""Fine-tuning data and heads: task readers, featurizers, TFRecord features, heads, scorers.

- ``registry``: tasks by official name (``get_tasks``), raw data under
  ``<data_dir>/finetuning_data/<task>/``.
- ``classification`` (GLUE), ``qa`` (SQuAD 1.1/2.0, MRQA), ``tagging`` (CoNLL-2000 chunking).
- ``user/``: tasks described by a ``task.json`` (``user.tasks``, the file format in
  ``user.spec``), read by ``user.records``, scored by ``user.scoring``, predictions written by
  ``user.predictions``.
- ``features``: feature specs, ``tf.train.Example`` records, TFRecord cache, input datasets.
- ``task_heads``: ``head(sequence_output, features, training) -> (outputs, per_example_loss)``.
- ``scorers``: official metrics (MCC, accuracy, F1, Pearson/Spearman, SQuAD/MRQA EM/F1, span F1).
"""
