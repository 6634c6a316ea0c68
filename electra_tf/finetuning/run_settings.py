"""What a fine-tuning run checks and says about its settings before it touches any data.

``check_settings`` fails with one line on settings that cannot work with the model (checked
before any cache is built); ``settings_lines`` is the short block a run starts with: the model,
the training settings, the settings of the run's task kinds and any other setting not at its
default. The whole config goes to a file beside the results (``write_full_config``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import tensorflow as tf

from electra_tf import atomic_io, training
from electra_tf.config import FinetuningConfig
from electra_tf.console import WIDTH, setting_value, wrapped  # noqa: F401 -- WIDTH: re-exported
from electra_tf.finetuning.builtin.qa import QATask
from electra_tf.finetuning.task_base import Task
from electra_tf.model_sizes import get_bert_config
from electra_tf.training import hardware

TRAINING = ("max_seq_length", "train_batch_size", "num_train_epochs", "learning_rate",
            "layerwise_lr_decay")
QA = ("max_query_length", "doc_stride", "max_answer_length", "n_best_size")
QA_ONLY = QA + ("answerable_classifier", "answerable_uses_start_logits", "answerable_weight",
                "joint_prediction", "beam_size", "qa_na_threshold", "qa_eval_file",
                "qa_preds_file", "qa_na_file")
PAIRS_ONLY = ("double_unordered",)
# Shown in the heading and the model line, or the run's own name and folder.
_SHOWN_ELSEWHERE = ("model_name", "data_dir", "init_checkpoint", "task_names", "num_trials",
                    "seed", "model_size", "vocab_size", "embedding_size",
                    "model_hparam_overrides", "do_lower_case")


# mixed_precision values a fine-tuning run takes (float16 would need loss scaling, not offered;
# "auto": bfloat16 where the device has bfloat16 units, training.resolve_precision)
PRECISIONS = (None, "float32", "bfloat16", "auto")


def check_settings(config: FinetuningConfig) -> None:
  """One-line ValueError for settings the model cannot run (before any data is read)."""
  if config.mixed_precision not in PRECISIONS:
    raise ValueError(f"mixed_precision {config.mixed_precision!r} is not supported for "
                     "fine-tuning: set \"mixed_precision\" to \"bfloat16\", \"auto\", "
                     "\"float32\" or null in --hparams")
  positions = get_bert_config(config).max_position_embeddings
  if config.max_seq_length > positions:
    raise ValueError(f"max_seq_length {config.max_seq_length} exceeds the model's "
                     f"max_position_embeddings {positions}: set \"max_seq_length\" to at most "
                     f"{positions} in --hparams")


def full_config_path(config: FinetuningConfig) -> str:
  """``<results dir>/<tasks>_config.json``, beside ``<tasks>_results.txt``."""
  base = os.path.splitext(config.results_txt)[0]
  base = base[:-len("_results")] if base.endswith("_results") else base
  return base + "_config.json"


def write_full_config(config: FinetuningConfig) -> str:
  """Writes every hparam of the run (paths included) as JSON; returns the file's path."""
  path = full_config_path(config)
  tf.io.gfile.makedirs(os.path.dirname(path) or ".")
  atomic_io.write_text(path, config.to_json() + "\n")
  return path


def _symmetric_pairs(task: Task) -> bool:
  """Whether ``double_unordered`` applies: MRPC / STS, or a user task with symmetric pairs."""
  return bool(getattr(task, "pairs_unordered", False)
              or getattr(getattr(task, "spec", None), "symmetric", False))


def _not_default(config: FinetuningConfig, tasks: Sequence[Task]) -> list[str]:
  """``name value`` of the settings that differ from a run of the same tasks with defaults and
  matter for the run's task kinds."""
  default = FinetuningConfig(config.model_name, config.data_dir, task_names=config.task_names,
                             model_size=config.model_size).to_dict()
  skip = set(_SHOWN_ELSEWHERE + TRAINING)
  if not any(isinstance(t, QATask) for t in tasks):
    skip.update(QA_ONLY)
  if not any(_symmetric_pairs(t) for t in tasks):
    skip.update(PAIRS_ONLY)
  return [f"{name} {setting_value(value)}" for name, value in sorted(config.to_dict().items())
          if name not in skip and value != default.get(name)]


def settings_lines(config: FinetuningConfig, tasks: Sequence[Task], full_config: str
                   ) -> list[str]:
  """The block a run starts with (a few lines, at most ``WIDTH`` characters each)."""
  bert = get_bert_config(config)
  embedding = config.embedding_size or bert.hidden_size
  what = "Fine-tuning" if config.do_train else "Evaluating"
  seed = "unseeded" if config.seed is None else f"seed {config.seed} (trial t: seed + t - 1)"
  lines = [f"{what} {', '.join(config.task_names)} from "
           f"{config.init_checkpoint or 'random initialisation'}: {config.num_trials} trial(s), "
           f"{seed}",
           f"  model: {bert.num_hidden_layers} layers, hidden {bert.hidden_size}, "
           f"{bert.num_attention_heads} heads, embedding {embedding}, vocabulary "
           f"{bert.vocab_size}{'' if config.do_lower_case else ', cased'}"]
  lines += wrapped("training", [f"{k} {setting_value(getattr(config, k))}" for k in TRAINING])
  if any(isinstance(t, QATask) for t in tasks):
    lines += wrapped("question answering",
                     [f"{k} {setting_value(getattr(config, k))}" for k in QA])
  others = _not_default(config, tasks)
  if others:
    lines += wrapped("other settings not at their defaults", others)
  if config.mixed_precision == "auto":
    lines.append(f"  compute: {training.resolve_precision('auto')[1]}")
  note = hardware.low_precision_note(config.mixed_precision)  # bfloat16 emulated on this CPU
  if note:
    lines.append(f"  {note}")
  lines.append(f"  full config: {full_config}")
  return lines
