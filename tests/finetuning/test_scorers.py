"""Metrics against hand-computed values (official ELECTRA / GLUE / SQuAD / MRQA semantics)."""

import json

import numpy as np
import pytest

from electra_tf.finetuning import scorers


def test_matthews_corrcoef_hand_value():
  # TP=2, FN=1, TN=1, FP=1 -> (2*1 - 1*1) / sqrt(3*3*2*2) = 1/6
  labels, preds = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
  assert scorers.matthews_corrcoef(labels, preds) == pytest.approx(1 / 6)
  assert scorers.matthews_corrcoef([0, 1, 0], [0, 0, 0]) == 0.0  # undefined -> 0 (sklearn)
  assert scorers.matthews_corrcoef([0, 1, 2, 2], [0, 1, 2, 2]) == pytest.approx(1.0)
  s = scorers.MCCScorer()
  for y, p in zip(labels, preds, strict=True):
    s.update({"loss": 0.5, "label_ids": np.int32(y), "predictions": np.int64(p)})
  assert dict(s.get_results()) == pytest.approx({"mcc": 100 / 6, "loss": 0.5})


def test_pearson_spearman_hand_values():
  # xc=[-1.5,-.5,.5,1.5], yc=[-3,-1,0,4]: 11 / sqrt(5 * 26)
  assert scorers.pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / np.sqrt(130))
  # tie-averaged ranks [1, 2.5, 2.5, 4] vs [1, 3, 2, 4]: 4.5 / sqrt(4.5 * 5)
  assert scorers.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / np.sqrt(22.5))
  s = scorers.RegressionScorer()
  for y, p in zip([0.2, 0.4, 0.6, 0.8], [0.1, 0.5, 0.4, 0.9], strict=True):
    s.update({"loss": (y - p) ** 2, "targets": np.float32(y), "predictions": np.float32(p)})
  r = dict(s.get_results())
  assert r["spearman"] == pytest.approx(80.0)  # ranks [1,2,3,4] vs [1,3,2,4]: 4 / 5
  assert r["mse"] == pytest.approx(np.mean([0.01, 0.01, 0.04, 0.01]), rel=1e-5)


def test_against_scipy_and_sklearn_on_random_data():
  """Independent implementations agree (both are installed with tf-models-official)."""
  scipy_stats = pytest.importorskip("scipy.stats")
  sk_metrics = pytest.importorskip("sklearn.metrics")
  rng = np.random.default_rng(0)
  x, y = rng.integers(0, 6, 50).astype(float), rng.normal(size=50)
  assert scorers.pearson(x, y) == pytest.approx(scipy_stats.pearsonr(x, y)[0])
  assert scorers.spearman(x, y) == pytest.approx(scipy_stats.spearmanr(x, y)[0])
  a, b = rng.integers(0, 3, 80), rng.integers(0, 3, 80)
  assert scorers.matthews_corrcoef(a, b) == pytest.approx(sk_metrics.matthews_corrcoef(a, b))


def test_accuracy_and_f1_scorers():
  s = scorers.AccuracyF1Scorer()
  # labels 1 1 0 0 1, preds 1 0 0 1 1: acc 3/5; positive P = 2/3, R = 2/3
  for y, p in zip([1, 1, 0, 0, 1], [1, 0, 0, 1, 1], strict=True):
    s.update({"loss": 1.0, "label_ids": y, "predictions": p})
  r = dict(s.get_results())
  assert r["accuracy"] == pytest.approx(60.0)
  assert r["precision"] == pytest.approx(200 / 3) and r["f1"] == pytest.approx(200 / 3)
  assert s.results_str().startswith("accuracy: 60.00")


def test_squad_normalization_rules():
  n = scorers.normalize_answer
  assert n("The  Cat's  HAT!") == "cats hat"  # lower, punctuation, article, whitespace
  assert n("An apple, a pear and the plum.") == "apple pear and plum"
  assert n("Anderson theatre") == "anderson theatre"  # only whole-word articles
  assert n("U.S.A.") == "usa"
  assert n("a\u2014b") == "\u2014b"  # non-ASCII dash is kept, so "a" is a whole word
  assert n("\tthe\n") == ""
  assert scorers.exact_match("The Cat's hat!", "cats   hat") == 1
  assert scorers.exact_match("cat", "cats") == 0


def test_squad_f1_v1_and_v2_empty_answers():
  # gold [cat, sat, on, mat], pred [cat, on, mat]: P 1, R 3/4
  assert scorers.f1_v1("the cat sat on the mat", "cat on mat") == pytest.approx(6 / 7)
  assert scorers.f1_v1("x b b", "b b c") == pytest.approx(2 / 3)  # counts repeated tokens
  assert scorers.f1_v1("a b b", "b b c") == pytest.approx(0.8)  # "a" is an article: gold [b, b]
  assert scorers.f1_v1("", "") == 0.0  # v1.1: an empty side scores 0
  assert scorers.f1_v2("", "") == 1.0  # v2.0: agreeing on "no answer" scores 1
  assert scorers.f1_v2("", "something") == 0.0
  assert scorers.f1_v2("the", "") == 1.0  # "the" normalizes to nothing


def _dataset(qas):
  return [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]


def test_squad_v2_no_answer_threshold_and_best_thresholds():
  dataset = _dataset([
      {"id": "q1", "answers": [{"text": "Denmark"}, {"text": "denmark and norway"}]},
      {"id": "q2", "answers": []},
      {"id": "q3", "answers": [{"text": "10th century"}]},
  ])
  preds = {"q1": "Denmark and Norway", "q2": "something", "q3": "the 11th century"}
  na = {"q1": -5.0, "q2": 0.0, "q3": -3.0}
  r = scorers.squad_v2_evaluate(dataset, preds, na, na_threshold=-2.75)
  # q1 answered (EM 1), q2 predicted no-answer (0 > -2.75: correct), q3 F1 1/2
  assert r["exact"] == pytest.approx(200 / 3) and r["f1"] == pytest.approx(250 / 3)
  assert (r["total"], r["HasAns_total"], r["NoAns_total"]) == (3, 2, 1)
  assert r["HasAns_exact"] == pytest.approx(50) and r["HasAns_f1"] == pytest.approx(75)
  assert r["NoAns_exact"] == pytest.approx(100) and r["NoAns_f1"] == pytest.approx(100)
  # sweep by na score q1(-5), q3(-3), q2(0) from 1 (all no-answer): exact 2 at -5; f1 2.5 at -3
  assert r["best_exact"] == pytest.approx(200 / 3) and r["best_exact_thresh"] == -5.0
  assert r["best_f1"] == pytest.approx(250 / 3) and r["best_f1_thresh"] == -3.0
  r_hi = scorers.squad_v2_evaluate(dataset, preds, na, na_threshold=1.0)
  assert r_hi["NoAns_exact"] == 0.0  # "something" counts against the impossible question


def test_squad_v2_matches_tf_models_script_on_real_dev(data_dir):
  """With tf-models' fixed threshold 1.0 both implementations of the official script agree."""
  from official.nlp.tools import squad_evaluate_v2_0
  dataset = json.loads((data_dir / "squad" / "dev-v2.0-small.json").read_text())["data"]
  qas = [qa for a in dataset for p in a["paragraphs"] for qa in p["qas"]]
  rng = np.random.default_rng(4)
  preds, na = {}, {}
  for i, qa in enumerate(qas):
    texts = [a["text"] for a in qa["answers"]] or ["France"]
    preds[qa["id"]] = ["", texts[0], "the " + texts[-1].upper(), "wrong"][i % 4]
    na[qa["id"]] = float(rng.uniform(0, 2))
  want = squad_evaluate_v2_0.evaluate(dataset, preds, na)
  got = scorers.squad_v2_evaluate(dataset, preds, na, na_threshold=1.0)
  compared = 0
  for key, value in want.items():
    if key.startswith("pr_"):  # precision-recall AP: ELECTRA's run does not compute it
      continue
    key = key.replace("final_", "best_")  # tf-models renames the official best_* keys
    assert got[key] == pytest.approx(value), key
    compared += 1
  assert compared == len(got) == 13


def test_squad_v1_and_mrqa():
  dataset = _dataset([{"id": "q1", "answers": [{"text": "Denmark"}]},
                      {"id": "q3", "answers": [{"text": "the 10th century"}, {"text": "x"}]}])
  # q3 missing: v1.1 counts it as 0
  assert scorers.squad_v1_evaluate(dataset, {"q1": "denmark."}) == pytest.approx(
      {"exact_match": 50.0, "f1": 50.0})
  # MRQA as ELECTRA calls it skips unanswered questions; F1 of [x] vs [x, y] = 2/3
  r = scorers.mrqa_evaluate({"a": ["x y"], "b": ["z"]}, {"a": "x"})
  assert r == pytest.approx({"exact_match": 0.0, "f1": 200 / 3})
  r = scorers.mrqa_evaluate({"a": ["x y"], "b": ["z"]}, {"a": "x"}, skip_no_answer=False)
  assert r == pytest.approx({"exact_match": 0.0, "f1": 100 / 3})


def test_span_labels_rules_worked_by_hand():
  tags = ["B-NP", "I-NP", "O", "B-VP", "S-PP", "I-NP", "E-NP"]
  # an I- tag after S-PP does not open a span: it extends the one opened at 4 (type of last tag)
  assert scorers.get_span_labels(tags) == [(0, 1, "NP"), (3, 3, "VP"), (4, 6, "NP")]
  assert scorers.get_tags([(0, 1, "NP"), (3, 3, "VP")], 5) == ["B-NP", "E-NP", "O", "S-VP", "O"]
  assert scorers.get_tags([(0, 2, "NP")], 3, "BIO") == ["B-NP", "I-NP", "I-NP"]
  assert scorers.get_span_labels([]) == []


def test_entity_f1_scorer_uses_masked_words_only():
  mapping = {"B-NP": 0, "E-NP": 1, "O": 2, "S-VP": 3}
  s = scorers.EntityLevelF1Scorer(mapping)
  pad = [2] * 4
  s.update({"loss": 2.0, "labels": np.array([0, 1, 2, 3] + pad),
            "predictions": np.array([0, 1, 2, 2] + pad),
            "labels_mask": np.array([1.0] * 4 + [0.0] * 4)})
  s.update({"loss": 1.0, "labels": np.array([3, 2, 0, 1] + pad),
            "predictions": np.array([3, 2, 3, 3] + pad),  # words 3-4 are masked out
            "labels_mask": np.array([1.0] * 2 + [0.0] * 6)})
  r = dict(s.get_results())
  # gold spans: 2 + 1; predicted: 1 + 1; correct: 1 + 1
  assert r["precision"] == pytest.approx(100.0) and r["recall"] == pytest.approx(200 / 3)
  assert r["f1"] == pytest.approx(80.0)
  assert r["loss"] == pytest.approx(3.0 / 6)
  acc = scorers.WordAccuracyScorer()
  acc.update({"loss": 1.0, "labels": np.array([1, 2, 3]), "predictions": np.array([1, 0, 3]),
              "labels_mask": np.array([1.0, 1.0, 1.0])})
  assert dict(acc.get_results())["accuracy"] == pytest.approx(200 / 3)
