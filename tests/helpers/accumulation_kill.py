"""The toy model (toy_train.py) trained with gradient accumulation, optionally SIGKILLed in the
middle of an update: inside micro-batch `--kill_micro_batch` of update `--kill_update`
(0-based), after the checkpoint of an earlier update.

    python tests/helpers/accumulation_kill.py --model_dir D --kill_update 13 --kill_micro_batch 2
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import tensorflow as tf  # noqa: E402

from electra_tf import training  # noqa: E402
from helpers import toy_train  # noqa: E402

K, BATCH, STEPS = 4, 16, 20


def run(model_dir: str, kill_at: int | None = None, log_fn=print) -> dict:
  """Trains the toy model for STEPS updates of K micro-batches (resuming from model_dir);
  kill_at: the micro-batch seed index (update * K + micro-batch) that SIGKILLs the process."""
  strategy = training.get_strategy("one_device", num_gpus=0)
  model, optimizer = toy_train.build(strategy, STEPS)
  base = toy_train.toy_step_fn(model)

  def step(features, seed):
    out = base(features, seed)
    if kill_at is None:
      return out

    def maybe_kill(index):
      if int(index) == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
      return index

    with tf.control_dependencies([tf.py_function(maybe_kill, [seed[1]], tf.int64)]):
      return {k: tf.identity(v) for k, v in out.items()}

  settings = training.TrainSettings(model_dir, STEPS, BATCH, iterations_per_loop=1,
                                    save_checkpoints_steps=10, gradient_accumulation_steps=K)
  trainer = training.Trainer(strategy, model, optimizer, settings, step_fn=step, log_fn=log_fn)
  start = trainer.restore_or_initialize()
  trainer.train(toy_train.dataset_fn(BATCH, start))
  return {"start_step": start, "final_step": int(trainer.global_step.numpy())}


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--model_dir", required=True)
  p.add_argument("--kill_update", type=int, required=True)
  p.add_argument("--kill_micro_batch", type=int, required=True)
  args = p.parse_args()
  run(args.model_dir, args.kill_update * K + args.kill_micro_batch)


if __name__ == "__main__":
  main()
