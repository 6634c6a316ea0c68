"""The built-in tasks: GLUE sentence (pair) classification and regression (``classification``,
``tfds_glue`` for TensorFlow Datasets copies), tagging (``tagging``: chunking) and extractive QA
(``qa``, decoded by ``qa_decoding``: SQuAD / MRQA). User tasks (``task.json``) are in
``finetuning/user/``; both implement ``finetuning.task_base.Task``."""
