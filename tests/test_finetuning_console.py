"""What a fine-tuning run prints and writes to TensorBoard: the train loss as a per-example
mean (the optimizer still gets the official batch sum) and progress lines in short runs."""

import re

import numpy as np
import pytest
import tensorflow as tf

import run_finetuning as rf
from electra_tf.config import FinetuningConfig
from electra_tf.finetuning.runner import LOGGED_TRAIN_LOSS, train_step_outputs

TINY = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2},
        "embedding_size": 16, "max_seq_length": 32, "train_batch_size": 8,
        "eval_batch_size": 8, "init_checkpoint": None, "seed": 3, "task_names": ["rte"]}


def test_default_iterations_per_loop_reports_every_tenth_of_a_short_run():
  config = FinetuningConfig("m", "D", task_names=["rte"])
  assert config.iterations_per_loop == 1000  # the official default is kept in the config
  assert [config.train_iterations_per_loop(n) for n in (5, 10, 95, 5000, 20000, 10**6)] == [
      1, 1, 9, 500, 1000, 1000]
  user = FinetuningConfig("m", "D", task_names=["rte"], iterations_per_loop=1000)
  assert [user.train_iterations_per_loop(n) for n in (5, 95, 5000)] == [5, 95, 1000]
  assert FinetuningConfig("m", "D", task_names=["rte"],
                          iterations_per_loop=7).train_iterations_per_loop(95) == 7
  config.iterations_per_loop = 20  # set after construction: also the user's value
  assert config.train_iterations_per_loop(95) == 20
  debug = FinetuningConfig("m", "D", task_names=["rte"], debug=True)
  assert debug.train_iterations_per_loop(5000) == 1


def test_train_step_outputs_mean_skips_padding():
  loss = tf.constant(6.0)
  out = train_step_outputs(loss, tf.constant([0, 1, 0, 2, 2]), n_tasks=2)  # 2 = padding
  assert float(out["total_loss"]) == 6.0 and float(out[LOGGED_TRAIN_LOSS]) == 2.0
  only_padding = train_step_outputs(tf.constant(0.0), tf.constant([2, 2]), n_tasks=2)
  assert float(only_padding[LOGGED_TRAIN_LOSS]) == 0.0


def _rows(path, start, stop):
  with open(path, encoding="utf-8") as f:
    rows = f.read().split("\n")
  return "\n".join([rows[0]] + rows[start:stop]) + "\n"


def _tensorboard_tags(model_dir):
  tags = {}
  for path in tf.io.gfile.glob(f"{model_dir}/events.out.tfevents.*"):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        tags.setdefault(value.tag, []).append(
            float(tf.make_ndarray(value.tensor)) if value.HasField("tensor")
            else value.simple_value)
  return tags


@pytest.mark.slow
def test_short_run_logs_mean_loss_often(data_dir, vocab_file, tmp_path, capsys):
  rte = tmp_path / "finetuning_data" / "rte"
  rte.mkdir(parents=True)
  (rte / "train.tsv").write_text(_rows(data_dir / "glue" / "RTE" / "train.tsv", 1, 17))
  (rte / "dev.tsv").write_text(_rows(data_dir / "glue" / "RTE" / "dev.tsv", 1, 9))
  config = FinetuningConfig("m", str(tmp_path), **TINY, vocab_file=vocab_file,
                            num_train_epochs=5.0)  # 16 rows / batch 8 * 5 = 10 steps
  results = rf.run_finetuning(config)
  out = capsys.readouterr().out
  progress = [line for line in out.splitlines() if re.match(r"\d+/10 = ", line)]
  assert [line.split("/")[0] for line in progress] == [str(i) for i in range(1, 11)]
  means = []
  for line in progress:
    assert "total_loss" not in line
    means.append(float(re.search(LOGGED_TRAIN_LOSS + r": ([0-9.e+-]+)", line).group(1)))
  # two-class cross-entropy of a tiny model near initialisation: about ln 2 = 0.69 per example
  # on average (the batch sum logged before was about 8 times that)
  assert all(m > 0 for m in means) and 0.3 < np.mean(means) < 1.5
  assert out.count('"model_name": "m"') == 1  # the config is printed once
  tags = _tensorboard_tags(config.model_dir + "_1")
  assert "total_loss" not in tags and len(tags[LOGGED_TRAIN_LOSS]) == 10
  assert np.all(np.isfinite(tags[LOGGED_TRAIN_LOSS]))
  assert 0.3 < results[0]["rte"]["loss"] < 1.5  # the dev loss: same unit
