"""What initialising a fine-tuning model from a checkpoint used, said in one line.

A pre-training checkpoint holds more than the encoder a fine-tuning model takes: the
discriminator's head, the generator (or Electric's towers and cloze head) and the optimizer
state; a fine-tuned one may hold other tasks' heads. Those are expected to stay unused and are
counted, not listed; any other unused tensor is named in a warning line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from electra_tf import names
from electra_tf.checkpoints import LoadReport

# TF1 scopes (official, Hugging Face read through them) and our TF2 object paths
# (PretrainingModel attributes under ``model/``).
_TF1_PARTS = (names.GENERATOR, names.GENERATOR_LTR, names.GENERATOR_RTL, names.GENERATOR_HEAD,
              names.DISCRIMINATOR_HEAD, names.CLOZE_HEAD)
_TF2_PARTS = ("generator", "generator_head", "generator_ltr", "generator_rtl",
              "discriminator_head", "cloze_head")
_PRETRAINING_PARTS = re.compile(
    rf"^(({'|'.join(_TF1_PARTS)})/|model/({'|'.join(_TF2_PARTS)})/)")
_TASK_HEAD = re.compile(rf"^({names.TASK_SPECIFIC}|model/heads)/([^/]+)/")


def _head_task(name: str) -> str | None:
  match = _TASK_HEAD.match(name)
  return match.group(2) if match else None


def _listed(values: Sequence[str], limit: int = 3) -> str:
  return ", ".join(values[:limit]) + (f" ... ({len(values)} in all)" if len(values) > limit
                                      else "")


def init_lines(source: str, report: LoadReport, task_names: Sequence[str]) -> list[str]:
  """One line for an initialisation from ``source``; a ``warning:`` line more for each kind of
  surprise (unused tensors of unknown parts, missing variables that are not this run's heads).
  """
  pretraining = [n for n in report.unused_other if _PRETRAINING_PARTS.match(n)]
  other_heads = [n for n in report.unused_other
                 if not _PRETRAINING_PARTS.match(n) and _head_task(n) not in (None, *task_names)]
  unexpected = [n for n in report.unused_other if n not in set(pretraining + other_heads)]
  expected = [f"{what} ({len(found)})" for what, found in (
      ("pre-training heads and generator", pretraining), ("other tasks' heads", other_heads),
      ("optimizer state", report.unused_optimizer_state)) if found]
  new_heads = sorted({_head_task(n) for n in report.missing} - {None})
  line = f"Initialised from {source}: {len(report.loaded)} tensors loaded"
  if expected:
    line += f"; unused as expected: {', '.join(expected)}"
  if new_heads:
    line += f"; new: {', '.join(new_heads)} head{'s' if len(new_heads) > 1 else ''}"
  lines = [line]
  if unexpected:
    lines.append(f"warning: not used: {_listed(unexpected)}")
  missing_other = [n for n in report.missing if _head_task(n) is None]
  if missing_other:
    lines.append(f"warning: not in the checkpoint (initialised randomly): "
                 f"{_listed(missing_other)}")
  return lines
