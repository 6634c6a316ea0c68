"""The probe's verdict: a paired exact test of a probe against random-init probes on the same
dev rows (numpy only, no SciPy).

Each dev row gets a loss under each probe: 0 or 1 for a classifier (wrong or right), the squared
error for a regressor. Rows where the two losses differ are discordant: ``better`` rows where
the probe's loss is lower, ``worse`` where it is higher. If the probe carried no more of the
task than the reference, a discordant row would be a fair coin, so ``better`` ~ Binomial(n, 1/2)
with n = better + worse: the exact sign test, which for per-row correctness is McNemar's exact
test. For a classifier (better - worse) / rows is the accuracy difference; its interval is
(n / rows) (2 p - 1) over the Clopper-Pearson interval of p, each bound at level ``alpha``
(conditional on n). The lower bound is above 0 exactly when the one-sided exact p-value is
below ``alpha``: "above" means that bound clears zero.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

ALPHA = 0.05  # the family-wise level of one run's verdicts (all its probes together)


def _log_comb(n: int) -> np.ndarray:
  """log C(n, k) for k = 0..n."""
  k = np.arange(1, n + 1, dtype=np.float64)
  return np.concatenate([[0.0], np.cumsum(np.log(n - k + 1) - np.log(k))])


def binomial_upper_tail(k: int, n: int, p: float) -> float:
  """P(X >= k) for X ~ Binomial(n, p)."""
  if k <= 0:
    return 1.0
  if k > n or p <= 0.0:
    return 0.0
  if p >= 1.0:
    return 1.0
  ks = np.arange(k, n + 1, dtype=np.float64)
  logs = _log_comb(n)[k:] + ks * math.log(p) + (n - ks) * math.log1p(-p)
  return float(min(1.0, np.exp(logs).sum()))


def mcnemar_exact(better: int, worse: int) -> float:
  """Two-sided exact McNemar p-value of a 2x2 table's discordant counts."""
  n = better + worse
  return 1.0 if n == 0 else min(1.0, 2.0 * binomial_upper_tail(max(better, worse), n, 0.5))


def _solve(f, target: float) -> float:
  """p in [0, 1] with f(p) = target, f increasing (bisection to 1e-12)."""
  low, high = 0.0, 1.0
  for _ in range(45):
    mid = (low + high) / 2
    low, high = (mid, high) if f(mid) < target else (low, mid)
  return (low + high) / 2


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
  """Exact bounds of a binomial proportion from k of n, each one-sided at level ``alpha``."""
  if n <= 0:
    return 0.0, 1.0
  low = 0.0 if k == 0 else _solve(lambda p: binomial_upper_tail(k, n, p), alpha)
  high = 1.0 if k == n else _solve(lambda p: binomial_upper_tail(k + 1, n, p), 1.0 - alpha)
  return low, high


@dataclasses.dataclass(frozen=True)
class Paired:
  """A probe against one reference on the same rows."""

  rows: int
  better: int  # rows where the probe's loss is lower
  worse: int  # rows where it is higher
  low: float  # bounds of (better - worse) / rows, each at level alpha
  high: float
  p_value: float  # one-sided exact: P(better or more | no difference)
  alpha: float = ALPHA  # the level of each bound
  reference: int = 0  # which reference (random-init seed, 0-based) this compares with

  @property
  def difference(self) -> float:
    """(better - worse) / rows: the accuracy difference for a classifier."""
    return (self.better - self.worse) / self.rows if self.rows else 0.0

  @property
  def above(self) -> bool:
    return self.low > 0.0

  @property
  def detectable(self) -> float:
    """The smallest difference this test could have called above (``detectable``)."""
    return detectable(self.better + self.worse, self.rows, self.alpha)

  def __str__(self) -> str:
    return f"{self.difference:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"


def detectable(discordant: int, rows: int, alpha: float) -> float:
  """The minimum detectable difference: the smallest (better - worse) / rows that the exact
  test at level ``alpha`` calls above with ``discordant`` rows that differ out of ``rows``
  (the smallest k with P(X >= k | discordant, 1/2) < alpha, as 2 k - discordant rows). With too
  few discordant rows for any k, the least a run could show: m rows all better, m the smallest
  with 2^-m < alpha. A smaller gain than this is not ruled out by a non-rejection."""
  if rows <= 0:
    return math.inf
  for k in range(discordant // 2 + 1, discordant + 1):
    if binomial_upper_tail(k, discordant, 0.5) < alpha:
      return (2 * k - discordant) / rows
  return math.floor(math.log2(1 / alpha) + 1) / rows


def compare(losses: Sequence[float], reference_losses: Sequence[float], alpha: float) -> Paired:
  """The exact sign test of per-row ``losses`` against ``reference_losses`` (same rows)."""
  a, b = np.asarray(losses, np.float64), np.asarray(reference_losses, np.float64)
  if a.shape != b.shape or a.ndim != 1:
    raise ValueError(f"paired losses need the same rows; got {a.shape} and {b.shape}")
  better, worse = int(np.sum(a < b)), int(np.sum(a > b))
  n, rows = better + worse, len(a)
  p_low, p_high = clopper_pearson(better, n, alpha)
  scale = n / rows if rows else 0.0
  return Paired(rows, better, worse, scale * (2 * p_low - 1) if n else 0.0,
                scale * (2 * p_high - 1) if n else 0.0, binomial_upper_tail(better, n, 0.5),
                alpha)


def against_every(losses: Sequence[float], references: Sequence[Sequence[float]],
                  alpha: float) -> Paired:
  """The probe against each reference (random-init seeds); the comparison with the lowest
  bound, so ``above`` holds only when the probe is above every one of them (an
  intersection-union test: still level ``alpha``, no correction needed); its ``reference``
  says which."""
  if not references:
    raise ValueError("no random-init reference to compare the probe with")
  return min((dataclasses.replace(compare(losses, r, alpha), reference=i)
              for i, r in enumerate(references)), key=lambda c: c.low)


def probe_alpha(num_probes: int, alpha: float = ALPHA) -> float:
  """Each probe's level when a run makes ``num_probes`` (Bonferroni): the chance that any of
  them says "above" for features no better than random init stays below ``alpha``."""
  return alpha / max(1, num_probes)


def row_losses(labels: np.ndarray, predictions: np.ndarray, classifier: bool) -> np.ndarray:
  """Per-row loss: 1.0 for a wrong class (0.0 right), else the squared error."""
  labels, predictions = np.asarray(labels), np.asarray(predictions)
  if classifier:
    return (labels != predictions).astype(np.float64)
  return (labels.astype(np.float64) - predictions.astype(np.float64)) ** 2
