"""The probe's verdict in words, from what a run keeps in ``<model_dir>/probe/<task>.json``
(no TensorFlow: the demo's summary reads it too).

A probe is "above random init" when the lower bound of its paired interval against every
random-init seed clears zero (``paired.against_every``), each bound at level
``paired.ALPHA / num_probes``: over a whole run, the chance that any probe says "above" for
features no better than random init stays below ``paired.ALPHA``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from electra_tf.probing import paired


def num_probes(num_train_steps: int, every: int) -> int:
  """The probes of a run: at each multiple of ``every`` up to the end, and at the end."""
  return max(1, math.ceil(num_train_steps / max(1, every)))


def entry(step: int, scores: Mapping[str, float], compared: paired.Paired) -> dict[str, Any]:
  """One probe as the state file keeps it."""
  return {"step": int(step), "cls": float(scores["cls"]), "mean": float(scores["mean"]),
          "difference": compared.difference, "low": compared.low, "high": compared.high,
          "p_value": compared.p_value, "better": compared.better, "worse": compared.worse,
          "rows": compared.rows, "above": compared.above}


def interval(probe: Mapping[str, Any]) -> str:
  """'+0.014 [-0.030, +0.058]': mean-pooled minus random init, with its interval."""
  return f"{probe['difference']:+.3f} [{probe['low']:+.3f}, {probe['high']:+.3f}]"


def words(probe: Mapping[str, Any], probes: int | None = None) -> str:
  """One probe's verdict; with ``probes``, how its interval was made."""
  said = "above random init" if probe["above"] else "not above random init"
  how = (f" (paired exact test on {probe['rows']} dev rows against each random-init seed, "
         f"each bound at level {paired.ALPHA}/{probes})" if probes else "")
  return f"mean-pooled minus random init {interval(probe)}: {said}{how}"


def run_words(history: Sequence[Mapping[str, Any]], probes: int) -> str:
  """A run's probes in one sentence: the last probe's verdict and the steps that were above."""
  last = history[-1]
  above = [h["step"] for h in history if h["above"]]
  span = (f"steps {history[0]['step']}-{last['step']}" if len(history) > 1
          else f"step {last['step']}")
  count = f"above random init in {len(above)} of {len(history)} probe(s), {span}"
  if last["above"]:
    return f"{count}; at step {last['step']} {words(last, probes)}"
  if above:
    return (f"{count} (first at step {above[0]}); at step {last['step']} "
            f"{words(last, probes)}")
  return (f"{count}: the losses can improve while the encoder carries no more of this task "
          f"than a random one; at step {last['step']} {words(last, probes)}")
