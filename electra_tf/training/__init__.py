"""Strategy-agnostic training: setup (runtime), checkpoints, the loop, progress reporting."""

from electra_tf.training.checkpoint_files import latest_checkpoint
from electra_tf.training.checkpoint_restore import (
    NonFiniteCheckpointError,
    RestoreDisagreementError,
)
from electra_tf.training.checkpointing import CheckpointSaveError, ModelDirError, check_model_dir
from electra_tf.training.errors import InputDataError, NonFiniteLossError
from electra_tf.training.interrupt import Interrupted
from electra_tf.training.loop import Trainer, model_step_fn
from electra_tf.training.monitoring import secs_to_str, write_results
from electra_tf.training.runtime import (
    get_strategy,
    resolve_precision,
    set_mixed_precision_policy,
    set_seed,
    worker_role,
    wrap_optimizer,
)
from electra_tf.training.settings import TrainSettings

__all__ = [
    "CheckpointSaveError", "InputDataError", "Interrupted", "ModelDirError",
    "NonFiniteCheckpointError", "NonFiniteLossError", "RestoreDisagreementError",
    "TrainSettings", "Trainer",
    "check_model_dir", "get_strategy", "latest_checkpoint", "model_step_fn", "resolve_precision",
    "secs_to_str", "set_mixed_precision_policy", "set_seed", "worker_role", "wrap_optimizer",
    "write_results",
]
