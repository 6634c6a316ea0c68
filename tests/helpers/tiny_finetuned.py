"""A tiny fine-tuned model of three user tasks (classification, regression, tagging) on the
GLUE / CoNLL-2000-layout rows of tests/data (``user_data``), trained from random initialisation by
``run_finetuning``, for the tests of the model directory's ``tasks.json``, convert, the LiteRT
exports and predict."""

import os

from helpers import user_data

TASKS = ["movie_reviews", "similarity", "chunking"]  # CSV classification, CSV regression, CoNLL
TINY = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 1,
                                   "num_attention_heads": 2, "intermediate_size": 64},
        "embedding_size": 16, "max_seq_length": 32, "train_batch_size": 8,
        "eval_batch_size": 8, "init_checkpoint": None, "seed": 3,
        "learning_rate": 3e-3, "num_trials": 1, "num_train_epochs": 6.0}


def train(root, data_dir, vocab_file, task_names=TASKS):
  """``<root>/finetuning_data`` (tests/data rows) and ``<root>/models/tiny``, trained; returns
  (the trial's model directory, its dev results {task: {metric: value}})."""
  import run_finetuning as rf
  from electra_tf.config import FinetuningConfig

  data = user_data.write_all(root, data_dir)
  dev = data / "movie_reviews" / "dev.csv"  # 15 rows: no accuracy is its own complement
  dev.write_text("".join(dev.read_text(encoding="utf-8").splitlines(True)[:16]),
                 encoding="utf-8")
  config = FinetuningConfig("tiny", str(root), **{**TINY, "vocab_file": vocab_file,
                                                  "task_names": list(task_names)})
  results = rf.run_finetuning(config)
  return os.path.join(str(root), "models", "tiny", "finetuning_models",
                      ",".join(task_names) + "_model_1"), results[0]
