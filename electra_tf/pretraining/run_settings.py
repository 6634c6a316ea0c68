"""What a pre-training run says about its settings before its first progress line.

``settings_lines`` is the short block ``run_pretraining.py`` starts with (the shape of
fine-tuning's, ``electra_tf/finetuning/run_settings.py``, with the console's ``wrapped``
lines): the model's shape, the objective, the training (or evaluation) settings, the data,
the model folder, any other setting not at its default and where the full config is written.
``write_full_config`` writes every hparam of the run, resolved (presets and paths included),
as JSON: ``config.json`` in the model folder for a training run, ``results/unsup_config.json``
(beside ``unsup_results.txt``) for an evaluation-only one, so that evaluating never replaces
the config the model was trained with. ``--verbose`` also prints the JSON.
"""

from __future__ import annotations

import os

from electra_tf import atomic_io
from electra_tf.config import PretrainingConfig
from electra_tf.console import setting_value, wrapped
from electra_tf.model_sizes import get_bert_config, get_generator_config

CONFIG_FILE = "config.json"
TRAINING = ("train_batch_size", "num_train_steps", "learning_rate", "num_warmup_steps",
            "max_seq_length", "mask_prob", "masking")
EVALUATION = ("eval_batch_size", "num_eval_steps", "max_seq_length", "mask_prob", "masking")
# Shown in the heading, the model / generator lines, or as a path.
_SHOWN_ELSEWHERE = ("model_name", "model_size", "vocab_size", "embedding_size",
                    "model_hparam_overrides", "do_lower_case", "electra_objective",
                    "electric_objective", "uniform_generator", "two_tower_generator",
                    "untied_generator", "generator_layers", "generator_hidden_size",
                    "init_checkpoint", "seed", "do_train", "do_eval", "pretrain_tfrecords",
                    "vocab_file", "model_dir", "results_txt", "results_pkl",
                    "max_predictions_per_seq", "eval_batch_size", "num_eval_steps")


def full_config_path(config: PretrainingConfig) -> str:
  """``<model_dir>/config.json`` for a training run; ``<results dir>/unsup_config.json``
  (beside ``unsup_results.txt``) for an evaluation-only run."""
  if config.do_train:
    return os.path.join(config.model_dir, CONFIG_FILE)
  base = os.path.splitext(config.results_txt)[0]
  base = base[:-len("_results")] if base.endswith("_results") else base
  return base + "_config.json"


def write_full_config(config: PretrainingConfig, is_chief: bool = True) -> str:
  """Writes every hparam of the run as JSON, atomically (the chief only: other workers of a
  multi-worker run write nothing); returns the file's path either way. ``run_pretraining``
  calls it once the setup checks passed and the checkpoint is restored, so a run that fails
  at once leaves no file behind."""
  path = full_config_path(config)
  if is_chief:
    if "://" not in path:
      os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    else:
      import tensorflow as tf

      tf.io.gfile.makedirs(os.path.dirname(path))
    atomic_io.write_text(path, config.to_json() + "\n")
  return path


def objective(config: PretrainingConfig) -> str:
  """ELECTRA, Electric or masked LM, and how replacements are sampled."""
  if config.electric_objective:
    return "Electric" + (", two-tower generator" if config.two_tower_generator else "")
  if not config.electra_objective:
    return "masked LM (no discriminator)"
  if config.uniform_generator:
    return "ELECTRA, uniform replacements: no generator"
  return "ELECTRA" + ("" if config.untied_generator else
                      ", generator sharing the discriminator's weights")


def _generator(config: PretrainingConfig) -> str:
  if not config.electra_objective and not config.electric_objective:
    return ""
  if config.uniform_generator or not config.untied_generator:
    return ""
  try:
    gen = get_generator_config(config, get_bert_config(config))
  except ValueError:
    return ""  # the run's setup check says why, in one line
  return (f"  generator: {gen.num_hidden_layers} layers, hidden {gen.hidden_size}, "
          f"{gen.num_attention_heads} heads")


def _not_default(config: PretrainingConfig, shown: tuple[str, ...]) -> list[str]:
  default = PretrainingConfig(config.model_name, "", model_size=config.model_size,
                              debug=config.debug).to_dict()
  skip = set(_SHOWN_ELSEWHERE + shown)
  return [f"{name} {setting_value(value)}" for name, value in sorted(config.to_dict().items())
          if name not in skip and value != default.get(name)]


def _start(config: PretrainingConfig, latest: str | None) -> str:
  """Where the weights come from: the model folder's newest checkpoint wins over
  ``init_checkpoint`` (as ``Trainer.restore_or_initialize``)."""
  if latest:
    name = os.path.basename(latest)
    return f"resuming from {name}" if config.do_train else f"at {name}"
  return f"from {config.init_checkpoint or 'random initialisation'}"


def settings_lines(config: PretrainingConfig, full_config: str, latest: str | None = None
                   ) -> list[str]:
  """The block a run starts with (a few lines, at most ``console.WIDTH`` characters each).
  ``latest``: the newest checkpoint in the model folder, if any (the run resumes from it)."""
  bert = get_bert_config(config)
  embedding = config.embedding_size or bert.hidden_size
  what = "Pre-training" if config.do_train else "Evaluating"
  also = " then evaluating" if config.do_train and config.do_eval else ""
  seed = "unseeded" if config.seed is None else f"seed {config.seed}"
  lines = [f"{what}{also} {config.model_name} ({objective(config)}) {_start(config, latest)}, "
           f"{seed}",
           f"  model: {bert.num_hidden_layers} layers, hidden {bert.hidden_size}, "
           f"{bert.num_attention_heads} heads, embedding {embedding}, vocabulary "
           f"{bert.vocab_size}{'' if config.do_lower_case else ', cased'}"]
  if _generator(config):
    lines.append(_generator(config))
  shown = TRAINING if config.do_train else EVALUATION
  settings = [f"{k} {setting_value(getattr(config, k))}" for k in shown]
  if config.do_train and config.do_eval:
    settings += [f"{k} {setting_value(getattr(config, k))}"
                 for k in ("eval_batch_size", "num_eval_steps")]
  lines += wrapped("training" if config.do_train else "evaluation", settings)
  others = _not_default(config, shown)
  if others:
    lines += wrapped("other settings not at their defaults", others)
  lines.append(f"  data: {config.pretrain_tfrecords}")
  lines.append(f"  model_dir: {config.model_dir}")
  lines.append(f"  full config: {full_config}")
  return lines
