"""Closed-form ridge regression: the probe's linear read-out (numpy; no gradients, no SGD).

Features x [N, D] are standardised with the fitting rows' mean and standard deviation. A
classifier fits one-vs-all targets (one-hot rows [N, K]) and predicts the arg max; a regressor
fits the score and adds the mean score back (the features are centred, so the weights are
those of the centred score). The weights W [D, K] solve

    (A^T A + ridge I) W = A^T Y      over the D features (primal), or
    W = A^T (A A^T + ridge I)^-1 Y   over the N rows when N < D (dual),

the same solution at the cost of the smaller system.

``choose_ridge`` picks the penalty among ``RIDGES`` on a split of the training rows (a seeded
fifth held out, the rest fitted); the dev rows are never looked at. ``fit`` then fits on every
training row with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence

import numpy as np

try:  # optional (scikit-learn's): see one_blas_thread
  from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - the BLAS keeps its own threads
  threadpool_limits = None

RIDGES = (0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0)
HELD_OUT = 0.2  # fraction of the training rows that scores each candidate penalty
SPLIT_SEED = 0

Metric = Callable[[np.ndarray, np.ndarray], float]  # (labels [N], predictions [N]) -> score


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
  """numpy's BLAS on one thread: on a busy machine OpenBLAS threads waiting for each other make
  these small products and solves (D <= 1024) about 100x slower; one thread takes milliseconds."""
  if threadpool_limits is None:
    yield
    return
  with threadpool_limits(limits=1, user_api="blas"):
    yield


def ridge_weights(a: np.ndarray, targets: np.ndarray, ridge: float) -> np.ndarray:
  """W [D, K] minimising |A W - Y|^2 + ridge |W|^2 for A [N, D], Y [N, K]."""
  if len(a) < a.shape[1]:
    return a.T @ np.linalg.solve(a @ a.T + ridge * np.eye(len(a)), targets)
  return np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ targets)


@dataclasses.dataclass(frozen=True)
class Readout:
  """A fitted probe: standardisation, weights [D, K] and, for a regressor, the mean score."""

  mean: np.ndarray
  std: np.ndarray
  weights: np.ndarray
  offset: float | None  # None: a classifier (arg max over K columns)

  def predict(self, x: np.ndarray) -> np.ndarray:
    """Class ids [N] (int) or scores [N] (float) of features x [N, D]."""
    out = ((x - self.mean) / self.std) @ self.weights
    if self.offset is None:
      return out.argmax(1)
    return out[:, 0] + self.offset


def fit(x: np.ndarray, y: np.ndarray, ridge: float, num_classes: int | None) -> Readout:
  """Fits on features x [N, D] and labels y [N]: class ids when ``num_classes`` is given
  (one-vs-all), else real-valued scores."""
  mean, std = x.mean(0), x.std(0) + 1e-6  # in the features' dtype (float32 from an encoder)
  a = (x - mean) / std
  if num_classes is None:
    offset = float(np.mean(y))
    targets = (np.asarray(y, np.float64) - offset)[:, None]
  else:
    offset, targets = None, np.eye(num_classes)[np.asarray(y, np.int64)]
  return Readout(mean, std, ridge_weights(a, targets, ridge), offset)


def choose_ridge(x: np.ndarray, y: np.ndarray, num_classes: int | None, metric: Metric,
                 ridges: Sequence[float] = RIDGES) -> float:
  """The penalty of ``ridges`` whose read-out, fitted on a seeded 80% of the training rows,
  scores best on the other 20% (ties: the stronger penalty)."""
  order = np.random.default_rng(SPLIT_SEED).permutation(len(x))
  held = max(1, int(round(HELD_OUT * len(x))))
  fit_rows, held_rows = order[held:], order[:held]
  best, best_score = None, -np.inf
  for ridge in sorted(ridges, reverse=True):
    readout = fit(x[fit_rows], y[fit_rows], ridge, num_classes)
    score = metric(y[held_rows], readout.predict(x[held_rows]))
    if score > best_score:
      best, best_score = ridge, score
  return best


def probe_predictions(train_x: np.ndarray, train_y: np.ndarray, dev_x: np.ndarray,
                      num_classes: int | None, metric: Metric,
                      ridge: float | None = None) -> np.ndarray:
  """Dev predictions of a ridge read-out fitted on every training row; ``ridge`` None: chosen
  by ``choose_ridge`` (with ``metric``) on the training rows."""
  with one_blas_thread():
    if ridge is None:
      ridge = choose_ridge(train_x, train_y, num_classes, metric)
    return fit(train_x, train_y, ridge, num_classes).predict(dev_x)


def probe_score(train_x: np.ndarray, train_y: np.ndarray, dev_x: np.ndarray, dev_y: np.ndarray,
                metric: Metric, num_classes: int | None,
                ridge: float | None = None) -> float:
  """Dev ``metric`` of ``probe_predictions``."""
  return float(metric(dev_y, probe_predictions(train_x, train_y, dev_x, num_classes, metric,
                                               ridge)))


def accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
  """Fraction of equal entries."""
  return float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def bag_of_words_accuracy(train_ids: np.ndarray, train_y: np.ndarray, dev_ids: np.ndarray,
                          dev_y: np.ndarray, vocab_size: int, ridge: float = 1.0,
                          ignore_ids: Sequence[int] = (0, 1, 2, 3, 4)) -> float:
  """Dev accuracy of a one-vs-all ridge read-out of binary WordPiece presence (ids [N, T]):
  what the labelled rows teach without any encoder. ``ignore_ids``: the special tokens' ids
  (default: a ``learn_vocab.py`` vocabulary's); presence is not standardised."""
  def presence(ids):
    x = np.zeros((len(ids), vocab_size), np.float32)
    np.put_along_axis(x, ids, 1.0, axis=1)
    x[:, list(ignore_ids)] = 0.0
    return x

  num_classes = int(max(train_y.max(), dev_y.max())) + 1
  with one_blas_thread():
    weights = ridge_weights(presence(train_ids), np.eye(num_classes)[train_y], ridge)
    return accuracy(dev_y, (presence(dev_ids) @ weights).argmax(1))
