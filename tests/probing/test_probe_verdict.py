"""The probe's verdict (electra_tf/probing/paired.py, verdict.py): the exact test against values
worked by hand, its interval agreeing with its p-value, "not above random init" for random
features in at least 95% of probes, and the run's words."""

import math

import numpy as np
import pytest

from electra_tf.probing import during_pretraining as dp
from electra_tf.probing import paired, ridge, verdict


def test_binomial_tail_and_mcnemar_match_hand_counts():
  assert paired.binomial_upper_tail(3, 5, 0.5) == pytest.approx(16 / 32)  # C(5,3..5) = 10+5+1
  assert paired.binomial_upper_tail(2, 3, 0.2) == pytest.approx(3 * 0.2**2 * 0.8 + 0.2**3)
  assert paired.binomial_upper_tail(0, 4, 0.3) == 1.0
  assert paired.binomial_upper_tail(5, 4, 0.3) == 0.0
  # discordant pairs 0 / 5: both tails of Binomial(5, 1/2) at 0 and 5, 2 / 32
  assert paired.mcnemar_exact(0, 5) == pytest.approx(2 / 32)
  # 1 / 9: P(X >= 9) = (C(10,9) + C(10,10)) / 1024 = 11 / 1024, doubled
  assert paired.mcnemar_exact(1, 9) == pytest.approx(22 / 1024)
  assert paired.mcnemar_exact(3, 3) == 1.0 and paired.mcnemar_exact(0, 0) == 1.0
  # a large table stays finite (log space): 600 / 400 of 1000 discordant rows
  assert 0 < paired.mcnemar_exact(600, 400) < 1e-9


def test_clopper_pearson_matches_closed_forms_and_tables():
  # k = 0 and k = n have closed forms: 1 - alpha^(1/n) and alpha^(1/n)
  assert paired.clopper_pearson(0, 10, 0.025) == pytest.approx((0.0, 1 - 0.025 ** 0.1))
  assert paired.clopper_pearson(10, 10, 0.025) == pytest.approx((0.025 ** 0.1, 1.0))
  # 5 of 10, 95% two-sided: (0.1871, 0.8129) in the published tables
  low, high = paired.clopper_pearson(5, 10, 0.025)
  assert (round(low, 4), round(high, 4)) == (0.1871, 0.8129)


def test_the_interval_clears_zero_exactly_when_the_exact_test_rejects():
  rows = 100
  for better in range(0, 40, 3):
    for worse in range(0, 40, 4):
      losses = np.r_[np.zeros(better), np.ones(worse), np.zeros(rows - better - worse)]
      reference = np.r_[np.ones(better), np.zeros(worse), np.zeros(rows - better - worse)]
      c = paired.compare(losses, reference, 0.01)
      assert (c.better, c.worse, c.difference) == (better, worse, (better - worse) / rows)
      assert c.low <= c.difference <= c.high
      assert c.above == (c.p_value < 0.01), (better, worse, c)
  with pytest.raises(ValueError, match=r"same rows; got \(3,\) and \(2,\)"):
    paired.compare([0, 1, 0], [0, 1], 0.05)


def test_above_only_against_every_seed():
  probe_losses = np.r_[np.zeros(60), np.ones(40)]
  weak = np.ones(100)  # the probe is right on 60 rows this seed gets wrong
  strong = probe_losses.copy()  # identical: no discordant row
  assert paired.against_every(probe_losses, [weak], 0.05).above
  both = paired.against_every(probe_losses, [weak, strong], 0.05)
  assert not both.above and both.difference == 0.0


def _random_init_features(tokens, seed, width=48):
  """A random-init encoder stand-in: random embeddings, a random tanh layer, mean-pooled; it
  reads the planted tokens as a random-init transformer does, only as well as its draw."""
  rng = np.random.default_rng(seed)
  embeddings = rng.normal(size=(tokens.max() + 1, width))
  layer = rng.normal(size=(width, width)) / math.sqrt(width)
  return np.tanh(embeddings[tokens] @ layer).mean(1)


def _planted(rows, rng):
  """Rows of 12 random tokens (ids 10..199), one of 3 class words (ids 1..3) planted in 30%."""
  labels = rng.integers(0, 3, rows)
  tokens = rng.integers(10, 200, (rows, 12))
  planted = rng.random(rows) < 0.3
  tokens[planted, rng.integers(0, 12, rows)[planted]] = 1 + labels[planted]
  return tokens, labels


def _losses(tokens, labels, seed, train=384):
  x = _random_init_features(tokens, seed)
  predictions = ridge.probe_predictions(x[:train], labels[:train], x[train:], 3, ridge.accuracy)
  return paired.row_losses(labels[train:], predictions, classifier=True)


def test_random_features_are_not_above_random_init_in_at_least_95_percent_of_probes():
  """The demo's sizes (384 train / 384 dev rows, the run's 5 reference seeds, 8 probes): a
  random-init draw (seeds 6..) probed against the reference seeds 1-5 is "not above" at each
  probe's level 0.05/8, and in at least 95% of draws at 0.05 (a run that probes once)."""
  tokens, labels = _planted(768, np.random.default_rng(0))
  references = [_losses(tokens, labels, seed) for seed in dp.SEEDS]
  accuracies = [1 - r.mean() for r in references]
  assert max(accuracies) > 0.45 and np.std(accuracies) > 0.005  # signal, and seeds differ
  draws = [_losses(tokens, labels, seed) for seed in range(6, 126)]
  for alpha, most in ((paired.probe_alpha(8), 0), (paired.ALPHA, 6)):  # 6 of 120 = 5%
    above = sum(paired.against_every(d, references, alpha).above for d in draws)
    assert above <= most, (alpha, above)
  # a draw scored against ONE seed, the weakest, is above far more often: what the test needs
  # every seed for
  weakest = references[int(np.argmin(accuracies))]
  assert sum(paired.compare(d, weakest, paired.ALPHA).above for d in draws) > 6


def _entry(step, cls, mean, better, worse, rows=384, probes=8):
  losses = np.r_[np.zeros(better), np.ones(worse), np.zeros(rows - better - worse)]
  reference = np.r_[np.ones(better), np.zeros(worse), np.zeros(rows - better - worse)]
  compared = paired.compare(losses, reference, paired.probe_alpha(probes))
  return verdict.probe_record(step, {"cls": cls, "mean": mean}, compared)


def test_the_run_words_say_what_was_measured():
  assert verdict.num_probes(800, 100) == 8 and verdict.num_probes(801, 100) == 9
  assert verdict.num_probes(5, 10) == 1
  never = [_entry(100, 0.3, 0.53, 20, 15), _entry(200, 0.35, 0.52, 18, 18)]
  said = verdict.run_words(never, 8)
  assert said.startswith("above random init in 0 of 2 probe(s), steps 100-200: no gain over "
                         "random init shown")
  assert "no more of this task than a random one" not in said  # low power is not equivalence
  # 36 discordant rows at level 0.05/8: the exact test needs 26 better of 36 (P(X >= 26) =
  # 0.0057 < 0.00625, 25 gives 0.0144), so the smallest gain these rows show is
  # (26 - 10) / 384 = +0.042
  assert said.endswith("at step 200 mean-pooled 0.520 minus random init: 18 dev rows better, "
                       "18 worse of 384, +0.000 [-0.039, +0.039]: not above random init, which "
                       "is no evidence of no gain: these rows show one only from +0.042 (paired "
                       "exact test on 384 dev rows against each random-init seed, each bound at "
                       "level 0.05/8)")
  always = [_entry(100, 0.3, 0.70, 90, 10), _entry(200, 0.3, 0.72, 95, 8)]
  assert all(e["above"] for e in always)
  said = verdict.run_words(always, 8)
  assert said.startswith("above random init in 2 of 2 probe(s), steps 100-200; at step 200 "
                         "mean-pooled 0.720 minus random init: 95 dev rows better, 8 worse of "
                         "384, +0.227 [")
  assert "no evidence" not in said and "show one only from" not in said
  assert "edge" not in said and "at times" not in said
  lost = [always[0], never[1]]
  assert verdict.run_words(lost, 8).startswith(
      "above random init in 1 of 2 probe(s), steps 100-200 (first at step 100); at step 200")


def test_the_detectable_gain_is_the_exact_tests_boundary():
  # by hand: 8 discordant rows all better, P = 2^-8 = 0.0039 < 0.01 (7 of 8: 9/256 = 0.035)
  assert paired.detectable(8, 100, 0.01) == pytest.approx(8 / 100)
  # too few discordant rows for any k: 7 rows all better are the least that can show a gain
  assert paired.detectable(3, 100, 0.01) == pytest.approx(7 / 100)  # 2^-7 < 0.01 < 2^-6
  rows, alpha = 384, paired.probe_alpha(8)
  for n in (8, 20, 36, 100, 150, 300):
    gain = paired.detectable(n, rows, alpha)
    k = round((gain * rows + n) / 2)  # better rows at the boundary, worse = n - k
    def table(better, worse):
      losses = np.r_[np.zeros(better), np.ones(worse), np.zeros(rows - better - worse)]
      return paired.compare(losses, np.r_[np.ones(better), np.zeros(worse),
                                          np.zeros(rows - better - worse)], alpha)
    assert table(k, n - k).above and not table(k - 1, n - k + 1).above, n
    assert table(k, n - k).detectable == pytest.approx(gain)
  # the demo's sizes: 384 dev rows at 0.05/8 with 100-200 discordant rows show 7-10 points
  assert 0.06 < paired.detectable(100, 384, alpha) < paired.detectable(200, 384, alpha) < 0.10


def test_the_printed_difference_is_the_tested_one_beside_its_figures():
  """A classifier against three seeds: the verdict tests the least favourable seed; the words
  give that seed, its accuracy, and a difference equal to mean-pooled minus that accuracy."""
  rng = np.random.default_rng(3)
  right = rng.random((4, 384))
  losses = (right[0] > 0.70).astype(float)  # accuracy ~0.70
  references = [(r > q).astype(float) for r, q in zip(right[1:], (0.50, 0.66, 0.58), strict=True)]
  accuracies = [1 - r.mean() for r in references]
  compared = paired.against_every(losses, references, paired.probe_alpha(8))
  lows = [paired.compare(losses, r, paired.probe_alpha(8)).low for r in references]
  assert compared.reference == int(np.argmin(lows)) == int(np.argmax(accuracies))
  seeds = (11, 12, 13)
  mean = 1 - losses.mean()
  tested = accuracies[compared.reference]
  entry = verdict.probe_record(800, {"cls": 0.5, "mean": mean}, compared,
                               seeds[compared.reference], tested)
  assert entry["difference"] == pytest.approx(mean - tested, abs=1e-12)
  assert entry["difference"] != pytest.approx(mean - np.mean(accuracies), abs=1e-3)
  said = verdict.probe_sentence(entry, 8)
  assert said.startswith(f"mean-pooled {mean:.3f} minus random init seed "
                         f"{seeds[compared.reference]} ({tested:.3f}, the least favourable "
                         f"seed): {compared.better} dev rows better, {compared.worse} worse of "
                         f"384, {mean - tested:+.3f} [")
