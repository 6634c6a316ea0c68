"""A tiny deterministic model + data set to exercise electra_tf.training, runnable as a script.

Data: global batch `i` (0-based step) is a pure function of `i` (stateless RNG), so any strategy,
any number of replicas and any resume point see the same global batches. Each input pipeline
slices its replicas' rows out of the global batch.

    python tests/helpers/toy_train.py --model_dir D --num_train_steps 30 [--strategy mirrored ...]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from electra_tf import training  # noqa: E402

TRUE_W = (1.0, -2.0, 0.5)


class ToyModel(tf_keras.Model):
  """x [batch, 3] -> tanh dense 4 -> dense 1; returns losses and a non-scalar output."""

  def __init__(self):
    super().__init__(name="toy")
    self.hidden = tf_keras.layers.Dense(4, activation="tanh", name="hidden")
    self.head = tf_keras.layers.Dense(1, name="head")

  def call(self, features, training=False):
    pred = tf.cast(self.head(self.hidden(features["x"]))[:, 0], tf.float32)
    err = pred - tf.cast(features["y"], tf.float32)
    return {"total_loss": tf.reduce_mean(err * err), "mean_abs_error": tf.reduce_mean(tf.abs(err)),
            "predictions": pred}


def global_batch(i, batch_size: int, nan_at_step: int | None = None):
  """Features of global step i (0-based): x [batch, 3] ~ N(0, 1), y [batch] = x . TRUE_W + 0.1."""
  x = tf.random.stateless_normal([batch_size, 3], seed=tf.stack([tf.constant(7, tf.int64), i]))
  if nan_at_step is not None:  # 1-based step number whose batch is poisoned
    x = tf.where(tf.equal(i + 1, nan_at_step), x * float("nan"), x)
  y = tf.reduce_sum(x * tf.constant(TRUE_W), axis=-1) + 0.1
  return {"x": x, "y": y}


def dataset_fn(batch_size: int, start_step: int = 0, nan_at_step: int | None = None,
               step_sleep: float = 0.0):
  """dataset_fn(input_context) for Trainer.train: per-replica slices of the global batches."""

  def fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
    per_replica = ctx.get_per_replica_batch_size(batch_size)
    replicas_here = ctx.num_replicas_in_sync // ctx.num_input_pipelines
    first_slice = ctx.input_pipeline_id * replicas_here

    def element(k):
      i = start_step + k // replicas_here
      j = first_slice + k % replicas_here
      batch = global_batch(i, batch_size, nan_at_step)
      out = {name: t[j * per_replica:(j + 1) * per_replica] for name, t in batch.items()}
      if step_sleep:  # a control dependency, so values and static shapes stay the same
        with tf.control_dependencies([tf.py_function(lambda: time.sleep(step_sleep), [], [])]):
          out = {name: tf.identity(t) for name, t in out.items()}
      return out

    return tf.data.Dataset.range(10**9).map(element)

  return fn


def build(strategy, num_train_steps: int, learning_rate: float = 0.05):
  """Builds model + Adam (polynomial-decay LR) under the strategy; returns (model, optimizer).

  The initial weights depend only on the fixed seed, so every build starts from the same point.
  """
  training.set_seed(1234)
  with strategy.scope():
    model = ToyModel()
    model(global_batch(tf.constant(0, tf.int64), 2))
    optimizer = tf_keras.optimizers.Adam(
        tf_keras.optimizers.schedules.PolynomialDecay(learning_rate, num_train_steps, 0.0),
        jit_compile=False)
  return model, optimizer


def toy_step_fn(model):
  """Model outputs plus `seed_step` = the per-step seed's second component (checks plumbing)."""
  def step(features, seed):
    return {**model(features, training=True), "seed_step": tf.cast(seed[1], tf.float32)}
  return step


def install_kill(kill_at: str, kill_step: int) -> None:
  """SIGKILLs this process inside the save of step `kill_step`, at a chosen point."""
  state = {"step": None}
  if kill_at == "merge":  # shards written to <prefix>_temp/, index not yet written
    from tensorflow.python.ops import gen_io_ops
    original = gen_io_ops.merge_v2_checkpoints

    def merge(checkpoint_prefixes, destination_prefix, *args, **kwargs):
      if destination_prefix.numpy().decode().endswith(f"ckpt-{kill_step}"):
        os.kill(os.getpid(), signal.SIGKILL)
      return original(checkpoint_prefixes, destination_prefix, *args, **kwargs)

    gen_io_ops.merge_v2_checkpoints = merge
  elif kill_at == "state":  # checkpoint files complete, `checkpoint` state file not yet updated
    from tensorflow.python.checkpoint import checkpoint_management
    original = checkpoint_management.update_checkpoint_state_internal

    def update(save_dir, model_checkpoint_path, *args, **kwargs):
      if model_checkpoint_path.endswith(f"ckpt-{kill_step}"):
        os.kill(os.getpid(), signal.SIGKILL)
      return original(save_dir, model_checkpoint_path, *args, **kwargs)

    checkpoint_management.update_checkpoint_state_internal = update
  del state


def run(strategy, model_dir: str, num_train_steps: int, batch_size: int = 8,
        iterations_per_loop: int = 5, save_checkpoints_steps: int = 10,
        continue_data: bool = True, nan_at_step: int | None = None, step_sleep: float = 0.0,
        jit_compile: bool = False, log_fn=print, **settings) -> dict:
  """Trains the toy model in model_dir (resuming if possible); returns a summary dict."""
  model, optimizer = build(strategy, num_train_steps)
  trainer = training.Trainer(
      strategy, model, optimizer,
      training.TrainSettings(model_dir=model_dir, num_train_steps=num_train_steps,
                             train_batch_size=batch_size, iterations_per_loop=iterations_per_loop,
                             save_checkpoints_steps=save_checkpoints_steps,
                             jit_compile=jit_compile, **settings),
      step_fn=toy_step_fn(model), log_fn=log_fn)
  start = trainer.restore_or_initialize()
  logged = trainer.train(dataset_fn(batch_size, start if continue_data else 0, nan_at_step,
                                    step_sleep))
  return {"start_step": start, "final_step": int(trainer.global_step.numpy()), "logged": logged,
          "weights": {v.name: v.numpy().tolist() for v in model.variables}}


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--model_dir", required=True, help="comma-separated, one per --strategy")
  p.add_argument("--strategy", default="one_device", help="comma-separated strategies to run")
  p.add_argument("--num_cpus", type=int, default=1, help="logical CPU devices to create")
  p.add_argument("--num_train_steps", type=int, default=30)
  p.add_argument("--batch_size", type=int, default=8)
  p.add_argument("--iterations_per_loop", type=int, default=5)
  p.add_argument("--save_checkpoints_steps", type=int, default=10)
  p.add_argument("--step_sleep", type=float, default=0.0)
  p.add_argument("--kill_at", choices=["merge", "state"])
  p.add_argument("--kill_step", type=int, default=20)
  p.add_argument("--out_json")
  args = p.parse_args()

  if args.num_cpus > 1:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * args.num_cpus)
  if args.kill_at:
    install_kill(args.kill_at, args.kill_step)
  results = []
  for name, model_dir in zip(args.strategy.split(","), args.model_dir.split(","), strict=True):
    devices = [f"CPU:{i}" for i in range(args.num_cpus)] if name == "mirrored" else None
    strategy = training.get_strategy(name, num_gpus=0, devices=devices)
    summary = run(strategy, model_dir, args.num_train_steps, args.batch_size,
                  args.iterations_per_loop, args.save_checkpoints_steps,
                  step_sleep=args.step_sleep)
    summary.update(strategy=name, num_replicas=strategy.num_replicas_in_sync,
                   is_chief=training.worker_role(strategy)[0])
    results.append(summary)
  if args.out_json:
    with open(args.out_json, "w") as f:
      json.dump(results, f)


if __name__ == "__main__":
  from electra_tf import console

  with console.one_line_errors("toy_train.py"):  # a stop signal: its line and 128 + signal
    main()
