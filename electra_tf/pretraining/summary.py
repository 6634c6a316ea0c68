"""The summary block a pre-training run ends with (run_pretraining.py)."""

from __future__ import annotations

from typing import Any

from electra_tf import console
from electra_tf.config import PretrainingConfig
from electra_tf.training.checkpoint_files import latest_checkpoint, step_of


def print_summary(config: PretrainingConfig, results: dict[str, dict[str, float]],
                  seconds: float, probe: Any = None) -> None:
  """The block a run ends with: steps trained (from the step `train_or_eval` restored, its
  `results["start"]`), last train interval, the probe (`probing.during_pretraining.RunProbe`,
  when the run probes), eval metrics, where to look.

  The eval metrics are printed here only (one ``key = value`` line each, as the official code).
  """
  lines: list[str] = []
  start_step = results["start"]["global_step"]
  latest = latest_checkpoint(config.model_dir)
  step = step_of(latest) if latest else start_step
  if config.do_train:
    lines.append(f"  trained steps {start_step} -> {step} of {config.num_train_steps} in "
                 f"{seconds:.0f} s; checkpoint {latest}")
  train = results.get("train") or {}
  shown = [k for k in ("mlm_loss", "disc_loss", "masked_lm_accuracy", "disc_auc", "disc_recall")
           if k in train]
  if shown:
    lines.append("  last train interval: " + ", ".join(f"{k} {train[k]:.4g}" for k in shown))
  lines += probe.summary_lines() if probe is not None else []
  if "eval" in results:
    lines.append(f"  eval ({config.num_eval_steps} batches of {config.eval_batch_size}):")
    lines += [f"    {k} = {results['eval'][k]}" for k in sorted(results["eval"])]
    lines.append(f"  results: {config.results_txt}")
  lines.append(f"  TensorBoard: {console.venv_command('tensorboard', 'tensorboard.main')} "
               f"--logdir {config.model_dir}")
  console.summary(f"Summary: model {config.model_name}, step {step}", lines)
