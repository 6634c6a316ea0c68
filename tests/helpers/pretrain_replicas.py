"""Trains the real pre-training setup of run_pretraining.py (``task.build_run``) for a few
steps under one_device and under MirroredStrategy over 2 logical CPUs, with the same global
batches and the same injected masking / sampling draws, and saves the final weights of each
(a script: logical devices must be configured before TensorFlow initialises).

    python tests/helpers/pretrain_replicas.py --data_dir D --out_npz out.npz

Only rows without padding are used and dropout is off, so every replica's loss is the mean over
the same number of tokens and the mean of the two replica losses is the global-batch loss.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from electra_tf import training  # noqa: E402
from electra_tf.config import PretrainingConfig  # noqa: E402
from electra_tf.pretraining import data, masking, task  # noqa: E402

HPARAMS = {
    "model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2,
                               "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
    "embedding_size": 16, "max_seq_length": 32, "train_batch_size": 8, "num_train_steps": 3,
    "iterations_per_loop": 3, "save_checkpoints_steps": 3, "num_warmup_steps": 0,
    "learning_rate": 1e-3, "seed": 5,
}


def injected_rows(config, num_steps: int) -> dict[str, np.ndarray]:
  """num_steps * batch unpadded rows of the real data plus fixed draws for each row."""
  rows = data.pretraining_dataset(config.pretrain_tfrecords, 1, config.max_seq_length,
                                  is_training=False).unbatch()
  rows = rows.filter(lambda r: tf.reduce_all(r["input_mask"] == 1))
  n = num_steps * config.train_batch_size
  batch = next(iter(rows.batch(n, drop_remainder=True)))
  inputs = masking.features_to_inputs(batch)
  vocab = masking.read_special_ids(config.vocab_file)
  masked = masking.mask(inputs, config.mask_prob, config.max_predictions_per_seq, vocab,
                        seed=tf.constant([11, 0], tf.int64))
  shape = masked.masked_lm_positions.shape
  out = {k: v.numpy() for k, v in batch.items()}
  out["categorical_positions"] = masked.masked_lm_positions.numpy()
  out["mask_uniform"] = tf.random.stateless_uniform(shape, [12, 0]).numpy()
  out["gumbel_uniform"] = tf.random.stateless_uniform(
      list(shape) + [config.vocab_size], [13, 0]).numpy()
  return out


def train(strategy, config, rows) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
  """(initial, trained) weights by TF1 name."""
  run = task.build_run(config, strategy, log_fn=lambda line: None)
  init = {k: v.numpy() for k, v in run.model.tf1_variables().items()}

  def dataset_fn(ctx):
    per_replica = ctx.get_per_replica_batch_size(config.train_batch_size)
    return tf.data.Dataset.from_tensor_slices(rows).batch(per_replica)

  run.trainer.train(dataset_fn, metrics=run.train_metrics)
  assert int(run.trainer.global_step.numpy()) == config.num_train_steps
  return init, {k: v.numpy() for k, v in run.model.tf1_variables().items()}


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--data_dir", required=True)
  p.add_argument("--out_npz", required=True)
  args = p.parse_args()
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

  with open(os.path.join(args.data_dir, "vocab.txt"), encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)  # the data_dir's vocabulary, not the default 30522
  results = {}
  for name in ("one_device", "mirrored"):
    config = PretrainingConfig(name, args.data_dir, **HPARAMS, vocab_size=vocab_size)
    if name == "one_device":
      rows = injected_rows(config, config.num_train_steps)
      strategy = training.get_strategy("one_device", num_gpus=0)
    else:
      strategy = training.get_strategy("mirrored", devices=["CPU:0", "CPU:1"])
    assert strategy.num_replicas_in_sync == (2 if name == "mirrored" else 1)
    init, trained = train(strategy, config, rows)
    results.update({f"{name}/{k}": v for k, v in trained.items()})
    results.update({f"{name}_init/{k}": v for k, v in init.items()})
  np.savez(args.out_npz, **results)


if __name__ == "__main__":
  main()
