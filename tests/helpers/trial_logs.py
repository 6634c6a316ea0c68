"""What a fine-tuning run's log says each trial trained: steps counted from the progress lines
(``5/5 = 100.0%, ...``) against the step it restored, not from headings."""

from __future__ import annotations

import re

_HEADING = re.compile(r"^Start training: model=\S+, trial (\d+)/-?\d+$", re.M)
_RESTORED = re.compile(r"^Restored \S+ at step (\d+)$", re.M)
_PROGRESS = re.compile(r"^(\d+)/\d+ = ", re.M)


def steps_trained(log: str) -> dict[int, int]:
  """{trial: steps trained in this run} for each trial whose training started in ``log``."""
  heads = list(_HEADING.finditer(log))
  trained = {}
  for i, head in enumerate(heads):
    block = log[head.end():heads[i + 1].start() if i + 1 < len(heads) else len(log)]
    block = block.split("Run dev set evaluation", 1)[0]
    restored = _RESTORED.search(block)
    start = int(restored.group(1)) if restored else 0
    reached = [int(m.group(1)) for m in _PROGRESS.finditer(block)]
    trained[int(head.group(1))] = (max(reached) - start) if reached else 0
  return trained
