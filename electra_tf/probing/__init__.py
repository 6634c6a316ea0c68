"""The linear probe: how much of a labelled task a frozen encoder's features carry.

``ridge`` is the closed-form read-out, ``probe`` encodes a task's rows and scores an encoder,
``during_pretraining`` runs it at intervals of a pre-training run. The TensorBoard tags are
``probe/<task>/<name>``, named here so that the learning-curve picture finds them without
importing TensorFlow.
"""

from __future__ import annotations

TAG_PREFIX = "probe"
# what a run logs per task: the two poolings, the random-init reference and its spread
TAG_NAMES = ("cls", "mean", "random_init", "random_init_spread")


def tag(task: str, name: str) -> str:
  """``probe/<task>/<name>``."""
  return f"{TAG_PREFIX}/{task}/{name}"


def parse_tag(name: str) -> tuple[str, str] | None:
  """(task, name) of a probe tag, else None."""
  prefix, _, rest = name.partition("/")
  task, _, what = rest.rpartition("/")
  if prefix != TAG_PREFIX or not task or what not in TAG_NAMES:
    return None
  return task, what
