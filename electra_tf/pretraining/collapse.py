"""Says when the discriminator has collapsed to answering "original" for (almost) every token.

A collapsed ELECTRA or Electric discriminator keeps a good-looking ``disc_accuracy`` (most tokens
are original) while its ``disc_recall`` sits near 0 and its ``disc_auc`` stops rising; the
generator keeps learning, so the losses look healthy too. ``CollapseWatch`` reads the metrics of
each log interval (the values ``monitoring.Progress.log`` writes) and, once per run, prints one
line naming the collapse and what to try, and records it in TensorBoard:

  watch = CollapseWatch(warmup_steps=config.num_warmup_steps, log_fn=log)
  trainer = Trainer(..., interval_hooks=[watch])  # called as watch(step, values)

``collapse_message`` is the decision itself, a pure function of the interval history.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import tensorflow as tf

MIN_RECALL = 0.01  # a discriminator flagging < 1% of the replaced tokens has stopped detecting
PATIENCE = 3  # consecutive log intervals after warmup
MIN_AUC_GAIN = 0.01  # AUC rising at least this much over those intervals: still learning
SUMMARY_TEXT = "disc_collapse"
SUMMARY_FLAG = "disc_collapsed"
# What keeps the discriminator learning (docs/demo_tuning.md, docs/pretraining_results.md,
# docs/transfer.md).
ADVICE = ('try a smaller generator ("generator_hidden_size": 0.125), sampling it at a higher '
          '"temperature" (3), a lower learning_rate or longer num_warmup_steps, longer documents '
          "(max_seq_length 128), or a different disc_weight (docs/collapse.md)")


def collapse_message(history: Sequence[tuple[int, Mapping[str, float]]], warmup_steps: int,
                     patience: int = PATIENCE, min_recall: float = MIN_RECALL,
                     min_auc_gain: float = MIN_AUC_GAIN) -> str | None:
  """The one-line warning when the discriminator has collapsed, else None.

  ``history``: (step, interval metrics) of the log intervals so far, oldest first. Collapsed
  means: the last ``patience`` intervals all end after ``warmup_steps``, have ``disc_recall``
  below ``min_recall``, and ``disc_auc`` rose by less than ``min_auc_gain`` across them (a
  recall still near 0 while the AUC climbs is a discriminator that is learning). Intervals
  without ``disc_recall`` (masked-LM only, ``disc_weight`` 0) never count.
  """
  window = [(step, values) for step, values in history[-patience:]
            if step > warmup_steps and "disc_recall" in values]
  if len(window) < patience or any(v["disc_recall"] >= min_recall for _, v in window):
    return None
  aucs = [v.get("disc_auc", 0.0) for _, v in window]
  if aucs[-1] - aucs[0] >= min_auc_gain:
    return None
  return (f"Discriminator collapse at step {window[-1][0]}: disc_recall below {min_recall:g} "
          f"for {patience} log intervals after warmup (steps {window[0][0]}-{window[-1][0]}, "
          f"disc_auc {aucs[0]:.3f} -> {aucs[-1]:.3f}): it answers \"original\" for almost every "
          f"token and pre-training is no longer teaching it; {ADVICE}")


class CollapseWatch:
  """Interval hook: prints ``collapse_message`` once per run and records it in TensorBoard.

  Called as ``watch(step, values)`` after each log interval with the run's summary writer as
  the default writer. When it fires it writes, at that step, the text ``disc_collapse`` (the
  line) and the scalar ``disc_collapsed`` = 1 (nothing before: a healthy run's TensorBoard
  tags are unchanged).
  """

  def __init__(self, warmup_steps: int, log_fn: Callable[[str], None],
               patience: int = PATIENCE, min_recall: float = MIN_RECALL,
               min_auc_gain: float = MIN_AUC_GAIN):
    self.warmup_steps, self.log_fn = warmup_steps, log_fn
    self.patience, self.min_recall, self.min_auc_gain = patience, min_recall, min_auc_gain
    self.history: list[tuple[int, dict[str, float]]] = []
    self.fired_at: int | None = None

  def __call__(self, step: int, values: Mapping[str, float]) -> None:
    if "disc_recall" not in values:
      return
    self.history = self.history[-(self.patience - 1):] + [(step, dict(values))]
    if self.fired_at is None:
      message = collapse_message(self.history, self.warmup_steps, self.patience,
                                 self.min_recall, self.min_auc_gain)
      if message:
        self.fired_at = step
        self.log_fn(message)
        tf.summary.text(SUMMARY_TEXT, message, step=step)
        tf.summary.scalar(SUMMARY_FLAG, 1.0, step=step)
