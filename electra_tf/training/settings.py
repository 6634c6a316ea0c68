"""What the training loop needs from a run's configuration, checked when it is made."""

from __future__ import annotations

import dataclasses

from electra_tf.training import accumulation


@dataclasses.dataclass(frozen=True)
class TrainSettings:
  """What the loop needs from the run configuration (official names where there is one)."""

  model_dir: str
  num_train_steps: int
  train_batch_size: int  # global batch of one optimizer update (all replicas and micro-batches)
  iterations_per_loop: int = 200  # steps per tf.function call = steps per log line
  save_checkpoints_steps: int = 1000
  keep_checkpoint_max: int = 5  # 0 keeps every checkpoint
  seed: int = 0  # first component of the per-step seed (see replica_step.py)
  jit_compile: bool = False  # XLA-compile forward + backward of each step
  flops_per_step: float | None = None  # model FLOPs of one update (all its micro-batches)
  peak_flops: float | None = None  # peak FLOP/s of one device, for model FLOPs utilisation
  # False: total_loss drives the optimizer but is not logged (the step function returns the
  # scalar to show instead, e.g. a per-example mean when total_loss is a sum over the batch)
  log_total_loss: bool = True
  gradient_accumulation_steps: int = 1  # micro-batches per update (see replica_step.py)
  micro_batch_losses: str = "mean"  # "mean" | "sum", see accumulation.py

  def __post_init__(self):
    for name in ("num_train_steps", "train_batch_size", "iterations_per_loop",
                 "save_checkpoints_steps", "gradient_accumulation_steps"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")
    if self.train_batch_size % self.gradient_accumulation_steps:
      raise ValueError(f"train_batch_size {self.train_batch_size} is not divisible by "
                       f"gradient_accumulation_steps {self.gradient_accumulation_steps}")
    accumulation.micro_batch_weight(self.micro_batch_losses, self.gradient_accumulation_steps)
    if self.keep_checkpoint_max < 0:
      raise ValueError(f"keep_checkpoint_max must be >= 0; got {self.keep_checkpoint_max}")
