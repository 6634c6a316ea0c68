"""The probe's verdict in words, from what a run keeps in ``<model_dir>/probe/<task>.json``
(no TensorFlow: the demo's summary reads it too).

A probe is "above random init" when the lower bound of its paired interval against every
random-init seed clears zero (``paired.against_every``), each bound at level
``paired.ALPHA / num_probes``: over a whole run, the chance that any probe says "above" for
features no better than random init stays below ``paired.ALPHA``.

The words give the figures the verdict tests: the seed it compares with (the one with the lowest
bound) and that seed's score, the dev rows the probe gets better and worse than it, their
difference with its interval; and, when the test does not reject, the smallest gain these rows
could have shown at that level (``paired.detectable``): a non-rejection is a lack of power up to
that size, not a finding that the encoder carries no more of the task than a random one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from electra_tf.probing import paired


def num_probes(num_train_steps: int, every: int) -> int:
  """The probes of a run: at each multiple of ``every`` up to the end, and at the end."""
  return max(1, math.ceil(num_train_steps / max(1, every)))


def probe_record(step: int, scores: Mapping[str, float], compared: paired.Paired,
                 seed: int | None = None, seed_score: float | None = None) -> dict[str, Any]:
  """One probe as the state file keeps it; ``seed`` / ``seed_score``: the random-init seed the
  verdict compared with (``compared.reference``) and its score."""
  return {"step": int(step), "cls": float(scores["cls"]), "mean": float(scores["mean"]),
          "difference": compared.difference, "low": compared.low, "high": compared.high,
          "p_value": compared.p_value, "better": compared.better, "worse": compared.worse,
          "rows": compared.rows, "above": compared.above, "detectable": compared.detectable,
          "seed": seed, "seed_score": None if seed_score is None else float(seed_score)}


def interval(probe: Mapping[str, Any]) -> str:
  """'+0.014 [-0.030, +0.058]': the tested difference (mean-pooled minus the random-init seed
  the verdict compares with), with its interval."""
  return f"{probe['difference']:+.3f} [{probe['low']:+.3f}, {probe['high']:+.3f}]"


def _tested(probe: Mapping[str, Any]) -> str:
  """'mean-pooled 0.640 minus random init seed 3 (0.619, the least favourable seed): 70 dev
  rows better, 62 worse of 384, +0.021 [-0.061, +0.101]'."""
  seed = (f" seed {probe['seed']} ({probe['seed_score']:.3f}, the least favourable seed)"
          if probe.get("seed") is not None and probe.get("seed_score") is not None else "")
  return (f"mean-pooled {probe['mean']:.3f} minus random init{seed}: {probe['better']} dev rows "
          f"better, {probe['worse']} worse of {probe['rows']}, {interval(probe)}")


def probe_sentence(probe: Mapping[str, Any], probes: int | None = None) -> str:
  """One probe's verdict and the figures it tests; after a non-rejection, the smallest gain
  these rows could have shown (``paired.detectable``); with ``probes``, how the test was made."""
  if probe["above"]:
    said = "above random init"
  else:
    detectable = probe.get("detectable")
    if detectable is None:  # a state file written before the figure was kept
      detectable = paired.detectable(probe["better"] + probe["worse"], probe["rows"],
                                     paired.probe_alpha(probes or 1))
    said = (f"not above random init, which is no evidence of no gain: these rows show one only "
            f"from {detectable:+.3f}")
  how = (f" (paired exact test on {probe['rows']} dev rows against each random-init seed, "
         f"each bound at level {paired.ALPHA}/{probes})" if probes else "")
  return f"{_tested(probe)}: {said}{how}"


def run_words(history: Sequence[Mapping[str, Any]], probes: int) -> str:
  """A run's probes in one sentence: the last probe's verdict and the steps that were above."""
  last = history[-1]
  above = [h["step"] for h in history if h["above"]]
  span = (f"steps {history[0]['step']}-{last['step']}" if len(history) > 1
          else f"step {last['step']}")
  count = f"above random init in {len(above)} of {len(history)} probe(s), {span}"
  if last["above"]:
    return f"{count}; at step {last['step']} {probe_sentence(last, probes)}"
  if above:
    return (f"{count} (first at step {above[0]}); at step {last['step']} "
            f"{probe_sentence(last, probes)}")
  return (f"{count}: no gain over random init shown (the losses can improve without one); at "
          f"step {last['step']} {probe_sentence(last, probes)}")
