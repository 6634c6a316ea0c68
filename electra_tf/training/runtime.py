"""Process-level setup for training: distribution strategy, worker role, seed, mixed precision.

Everything here runs before the model is built: the strategy scope, the global seed (variable
initializers) and the Keras dtype policy all have to be in place when variables are created.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator, Sequence

import tensorflow as tf
import tf_keras
from official.common import distribute_utils
from tensorflow.python.eager import context

from electra_tf import console
from electra_tf.training import hardware, lost_worker

# The one list of strategy names: get_strategy's and both training scripts' flag.
STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")
MIXED_PRECISION = {None: "float32", "float32": "float32", "bfloat16": "mixed_bfloat16",
                   "float16": "mixed_float16"}


def define_strategy_flag(more_help: str = "") -> None:
  """``--distribution_strategy`` of both training scripts: one of ``STRATEGIES`` in any case
  (default one_device); any other name is absl's one flag error line, before any work."""
  from absl import flags

  flags.DEFINE_enum("distribution_strategy", "one_device", STRATEGIES,
                    f"tf.distribute strategy{more_help}.", case_sensitive=False)


def get_strategy(distribution_strategy: str = "one_device", num_gpus: int | None = None,
                 tpu: str | None = None, all_reduce_alg: str | None = None,
                 devices: Sequence[str] | None = None, worker_hosts: str | None = None,
                 task_index: int = -1, lost_worker_secs: float = lost_worker.DEFAULT_SECS
                 ) -> tf.distribute.Strategy:
  """Returns a `tf.distribute.Strategy` by name (tf-models-official `get_distribution_strategy`).

  Args:
    distribution_strategy: one_device | mirrored | multi_worker_mirrored | tpu.
    num_gpus: GPUs to use; None means every visible GPU (0 on a CPU-only machine, then the
      strategy runs on CPU:0). one_device uses GPU:0 whenever num_gpus >= 1.
    tpu: TPU name or address for `tpu` ("" or "local" for TPUs attached to this host).
    all_reduce_alg: passed through (mirrored: nccl | hierarchical_copy; multi-worker: ring | nccl).
    devices: explicit device list for `mirrored` (e.g. two logical CPUs in tests); overrides
      num_gpus.
    worker_hosts, task_index: multi-worker cluster as flags; ignored when TF_CONFIG is set
      (tf-models-official `configure_cluster` writes TF_CONFIG from them otherwise).
    lost_worker_secs: multi-worker: a worker without heartbeat this long is lost (lost_worker.py).
  """
  name = (distribution_strategy or "").lower()
  if name not in STRATEGIES:
    raise ValueError(f"distribution_strategy must be one of {', '.join(STRATEGIES)}; "
                     f"got {distribution_strategy!r}")
  if num_gpus is None:
    num_gpus = len(tf.config.list_physical_devices("GPU"))
  if name == "one_device":
    num_gpus = min(num_gpus, 1)
  if name == "tpu" and tpu is None:
    raise ValueError("distribution_strategy='tpu' needs tpu (a TPU name, or '' for local TPUs)")
  if name == "mirrored" and devices:
    return tf.distribute.MirroredStrategy(devices=list(devices))
  if name == "multi_worker_mirrored":
    distribute_utils.configure_cluster(worker_hosts, task_index)
    lost_worker.configure(lost_worker_secs)
  with console.native_logs_hidden(), _sigterm_kept() as kept:  # gRPC's "Started server ..."
    strategy = distribute_utils.get_distribution_strategy(
        distribution_strategy=name, num_gpus=num_gpus, all_reduce_alg=all_reduce_alg,
        tpu_address=tpu)
  if name == "multi_worker_mirrored" and kept:
    _resend_noticed_sigterm(strategy)
  return strategy


@contextlib.contextmanager
def _sigterm_kept() -> Iterator[bool]:
  """Puts SIGTERM's handler back as it was: a multi-worker strategy's coordination service
  installs TensorFlow's own C handler (its preemption notice), which only records the signal,
  so a SIGTERM before or after training was ignored and the run went on. Training installs
  its own handlers meanwhile (interrupt.StopRequest.watching). Yields whether it could (only
  the main thread sets handlers)."""
  main = threading.current_thread() is threading.main_thread()
  before = signal.getsignal(signal.SIGTERM) if main else None
  try:
    yield before is not None
  finally:
    if before is not None:
      signal.signal(signal.SIGTERM, before)


# Where TensorFlow's preemption sync manager writes the task whose SIGTERM its handler took
# (what tf.distribute.experimental.PreemptionWatcher waits on).
PREEMPTION_NOTICE_KEY = "TF_DEFAULT_PREEMPTION_NOTICE_KEY"
_notice_watched = threading.Event()  # one watcher a process: two would send a second SIGTERM


def _resend_noticed_sigterm(strategy: tf.distribute.Strategy) -> None:
  """Sends a SIGTERM that came while the cluster formed once more: TensorFlow's handler held
  the signal then, and only wrote this task's name under `PREEMPTION_NOTICE_KEY` (within about
  a second). A daemon thread waits for that notice and signals the process again, now to the
  handler `_sigterm_kept` put back, so the run stops as after any SIGTERM (a signal on one
  worker stops them all: interrupt.py)."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.cluster_spec().as_dict() or _notice_watched.is_set():
    return  # no cluster (TensorFlow never took the signal), or a watcher already waits
  _notice_watched.set()
  task = f"/job:{resolver.task_type}/task:{resolver.task_id or 0}"

  def wait_for_notice() -> None:
    try:
      noticed = context.context().get_config_key_value(PREEMPTION_NOTICE_KEY)
    except Exception:  # noqa: BLE001 - the cluster ended first: no notice will come
      return
    if noticed == task:
      os.kill(os.getpid(), signal.SIGTERM)

  threading.Thread(target=wait_for_notice, name="sigterm-notice", daemon=True).start()


def uses_tpu(use_tpu: bool = False) -> bool:
  """True when ``use_tpu`` is set or the current ``tf.distribute`` strategy is a TPU strategy:
  the official graph then looks word embeddings up by one-hot matmul
  (``use_one_hot_embeddings = use_tpu``)."""
  tpu_strategies = (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy)
  return bool(use_tpu) or isinstance(tf.distribute.get_strategy(), tpu_strategies)


def worker_role(strategy: tf.distribute.Strategy) -> tuple[bool, int]:
  """(is_chief, task_id) of this process; single-process strategies are always the chief.

  The chief is task `chief`, or `worker` 0 when the cluster has no `chief` job (the
  tf.distribute convention). Only the chief writes checkpoints and summaries into model_dir.
  """
  resolver = getattr(strategy, "cluster_resolver", None)
  task_type = getattr(resolver, "task_type", None)
  task_id = getattr(resolver, "task_id", None) or 0
  if resolver is None or task_type is None or task_type == "chief":
    return True, task_id
  has_chief_job = "chief" in resolver.cluster_spec().as_dict()
  return (task_type == "worker" and task_id == 0 and not has_chief_job), task_id


def set_seed(seed: int) -> None:
  """Seeds python `random`, numpy and `tf.random.set_seed` (variable initializers, dropout).

  Call before building the model. Stateful random ops (Keras dropout) restart their sequence
  in a resumed process; ops that need resume-exact randomness use the per-step seed that the
  training loop passes to the step function (see `loop.Trainer`).
  """
  tf_keras.utils.set_random_seed(seed)


def resolve_precision(mixed_precision: str | None) -> tuple[str | None, str]:
  """(--mixed_precision to use, what the settings block says of it).

  "auto": "bfloat16" where the training device has bfloat16 units
  (``hardware.device_bfloat16_units``: AMX or AVX512-BF16 CPUs, GPUs of compute capability 8.0
  and later, TPUs), else None (float32), so that it stays float32 where bfloat16 would be
  emulated and slower. Any other value is returned as it is ("float32" as None).
  """
  if mixed_precision != "auto":
    name = "float32" if mixed_precision in (None, "float32") else f"mixed {mixed_precision}"
    return (None if mixed_precision == "float32" else mixed_precision), name
  units = hardware.device_bfloat16_units()
  if units:
    return "bfloat16", f"mixed bfloat16 (auto: {units})"
  return None, "float32 (auto: no bfloat16 units on this device)"


def set_mixed_precision_policy(mixed_precision: str | None) -> str:
  """Sets the tf_keras global dtype policy from --mixed_precision; returns the policy name.

  None | "float32" -> float32; "bfloat16" -> mixed_bfloat16; "float16" -> mixed_float16
  (then wrap the optimizer with `wrap_optimizer`). Call before building the model: layers
  read the policy when they are created.
  """
  if mixed_precision not in MIXED_PRECISION:
    raise ValueError("mixed_precision must be one of bfloat16, float16, float32 or None "
                     "(resolve 'auto' with resolve_precision first); "
                     f"got {mixed_precision!r}")
  policy = MIXED_PRECISION[mixed_precision]
  tf_keras.mixed_precision.set_global_policy(policy)
  return policy


def wrap_optimizer(optimizer: tf_keras.optimizers.Optimizer,
                   mixed_precision: str | None) -> tf_keras.optimizers.Optimizer:
  """Adds dynamic loss scaling for float16 (bfloat16 has float32's exponent range, needs none)."""
  if mixed_precision == "float16":
    return tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
  return optimizer
