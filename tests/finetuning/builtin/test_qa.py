"""SQuAD / MRQA reading, windowing and n-best decoding on a SQuAD 2.0 dev-layout sample
(tests/data/squad)."""

import copy
import errno
import json
import os

import numpy as np
import pytest

from electra_tf.finetuning import registry
from electra_tf.finetuning.builtin import qa

BEAM = 5


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
  return registry.make_tokenizer(vocab_file)


@pytest.fixture(scope="module")
def squad_json(data_dir):
  return json.loads((data_dir / "squad" / "dev-v2.0-small.json").read_text())


def _write(folder, name, text):
  folder.mkdir(parents=True, exist_ok=True)
  (folder / name).write_text(text)


def _oracle_results(task, split):
  """Head outputs that put all probability on the gold span of every window that holds it.

  Gold windows come from the training featurisation; other beam slots point at position 1
  (a question token, which decoding must reject).
  """
  results = {}
  for example in task.get_examples(split):
    for f in task.featurize(example, is_training=True):
      start, end = f[task.name + "_start_positions"], f[task.name + "_end_positions"]
      start_idx = np.full([BEAM], 1, np.int32)
      end_idx = np.full([BEAM, BEAM], 1, np.int32)
      start_lp = np.full([BEAM], -50.0, np.float32)
      end_lp = np.full([BEAM, BEAM], -50.0, np.float32)
      if start > 0:
        start_idx[0], end_idx[0, 0], start_lp[0], end_lp[0, 0] = start, end, 0.0, 0.0
      results[f[task.name + "_eid"]] = {
          "eid": f[task.name + "_eid"], "loss": 0.25,
          "start_logits": np.zeros([task.max_seq_length], np.float32),
          "end_logits": np.zeros([task.max_seq_length], np.float32),
          "answerable_logit": np.float32(5.0 if example.is_impossible else -5.0),
          "start_top_index": start_idx, "end_top_index": end_idx,
          "start_top_log_probs": start_lp, "end_top_log_probs": end_lp}
  return results


def _score(task, split, results, tmp_path):
  scorer = task.get_scorer(split, preds_path=str(tmp_path / "preds.json"),
                           na_path=str(tmp_path / "na.json"))
  for r in results.values():
    scorer.update(r)
  assert scorer.get_loss() == pytest.approx(0.25)
  return dict(scorer.get_results()), json.loads((tmp_path / "preds.json").read_text())


def test_squad_v2_windows_and_oracle_decoding(squad_json, tokenizer, tmp_path):
  """Short windows (several per question) and the official answer search recover every gold
  answer text; the answerable logit (> qa_na_threshold) marks the impossible ones."""
  _write(tmp_path / "squad", "train.json", json.dumps(squad_json))
  task = qa.SQuAD(str(tmp_path / "squad"), tokenizer, max_seq_length=96, doc_stride=48,
                  beam_size=BEAM, n_best_size=BEAM)
  examples = task.get_examples("train")
  n_qas = sum(len(p["qas"]) for a in squad_json["data"] for p in a["paragraphs"])
  assert len(examples) == n_qas == 14 and task.example_failures["train"] == 0
  feats = [f for ex in examples for f in task.featurize(ex, is_training=True)]
  assert len(feats) > len(examples)  # long contexts need several windows
  for f in feats:
    assert len(f["input_ids"]) == len(f["input_mask"]) == len(f["segment_ids"]) == 96
    assert f["squad_eid"] // 1000 < len(examples)
  results = _oracle_results(task, "train")
  metrics, preds = _score(task, "train", results, tmp_path)
  assert metrics["exact"] == pytest.approx(100.0) and metrics["f1"] == pytest.approx(100.0)
  assert metrics["HasAns_total"] + metrics["NoAns_total"] == 14
  assert metrics["NoAns_total"] > 0
  gold = {qa_["id"]: qa_["answers"][0]["text"] for a in squad_json["data"]
          for p in a["paragraphs"] for qa_ in p["qas"] if qa_["answers"]}
  for qid, text in gold.items():
    assert preds[qid] == text  # character-exact, via get_final_text
  na = json.loads((tmp_path / "na.json").read_text())
  assert {k for k, v in na.items() if v > 0} == set(preds) - set(gold)


def _answerable_only(squad_json):
  data = copy.deepcopy(squad_json)
  for article in data["data"]:
    for p in article["paragraphs"]:
      p["qas"] = [q for q in p["qas"] if q["answers"]]
  return data


def test_squadv1_oracle_and_wrong_spans(squad_json, tokenizer, tmp_path):
  data = _answerable_only(squad_json)
  _write(tmp_path / "squadv1", "train.json", json.dumps(data))
  task = qa.SQuADv1(str(tmp_path / "squadv1"), tokenizer, max_seq_length=128,
                    beam_size=BEAM, n_best_size=BEAM)
  results = _oracle_results(task, "train")
  metrics, _ = _score(task, "train", results, tmp_path)
  assert metrics == pytest.approx({"exact_match": 100.0, "f1": 100.0})
  for r in results.values():  # every span rejected: start inside the question
    r["start_top_index"][:] = 1
  metrics, preds = _score(task, "train", results, tmp_path)
  assert set(preds.values()) == {"empty"} and metrics["exact_match"] == 0.0


def test_predictions_are_written_whole_or_not_at_all(squad_json, tokenizer, tmp_path,
                                                     monkeypatch):
  """A write that fails (a full disk, a kill) leaves the earlier predictions whole, and no
  temporary file."""
  _write(tmp_path / "squad", "train.json", json.dumps(squad_json))
  task = qa.SQuAD(str(tmp_path / "squad"), tokenizer, max_seq_length=96, doc_stride=48,
                  beam_size=BEAM, n_best_size=BEAM)
  task.get_examples("train")
  results = _oracle_results(task, "train")
  (tmp_path / "preds.json").write_text('{"earlier": "run"}')

  def full_disk(*args):
    raise OSError(errno.ENOSPC, "No space left on device")

  monkeypatch.setattr(os, "replace", full_disk)
  with pytest.raises(OSError, match="No space left"):
    _score(task, "train", results, tmp_path)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["preds.json", "squad"]
  assert (tmp_path / "preds.json").read_text() == '{"earlier": "run"}'


def test_mrqa_jsonl_reader_and_decoding(squad_json, tokenizer, tmp_path):
  """MRQA layout (header line, ``qid``, ``detected_answers`` char spans, string answers)."""
  lines = [json.dumps({"header": {"dataset": "NewsQA", "split": "train"}})]
  for article in _answerable_only(squad_json)["data"]:
    for p in article["paragraphs"]:
      qas = [{"qid": q["id"], "question": q["question"],
              "answers": [a["text"] for a in q["answers"]],
              "detected_answers": [{"text": a["text"], "char_spans": [
                  [a["answer_start"], a["answer_start"] + len(a["text"]) - 1]]}
                  for a in q["answers"]]} for q in p["qas"]]
      lines.append(json.dumps({"context": p["context"], "qas": qas}))
  _write(tmp_path / "finetuning_data" / "newsqa", "train.jsonl", "\n".join(lines) + "\n")
  task = registry.get_task("newsqa", tokenizer, str(tmp_path), 128, beam_size=BEAM,
                           n_best_size=BEAM)
  examples = task.get_examples("train")
  n_answerable = sum(1 for line in lines[1:] for _ in json.loads(line)["qas"])
  assert len(examples) == n_answerable > 0
  assert all(ex.qid and ex.qas_id is None for ex in examples)
  metrics, preds = _score(task, "train", _oracle_results(task, "train"), tmp_path)
  assert metrics == pytest.approx({"exact_match": 100.0, "f1": 100.0})
  assert set(preds) == {ex.qid for ex in examples}


def test_dev_split_has_no_positions(squad_json, tokenizer, tmp_path):
  """Answers are read for ``train`` only (official); dev features carry no labels."""
  _write(tmp_path / "squad", "dev.json", json.dumps(squad_json))
  task = qa.SQuAD(str(tmp_path / "squad"), tokenizer, max_seq_length=128)
  ex = task.get_examples("dev")[0]
  assert ex.start_position is None and not ex.is_impossible
  f = task.featurize(ex, is_training=False)[0]
  assert "squad_start_positions" not in f and f["squad_eid"] == 0


def _decode_hand_case(max_answer_length, n_best_size):
  """One window of ten single-piece words; start / end logits (not joint) rank the spans."""
  from electra_tf.finetuning.builtin import qa_decoding
  from electra_tf.full_tokenizer import BasicTokenizer
  words = [f"w{i}" for i in range(9)]
  window = {"t_tokens": ["[CLS]", *words], "t_eid": 0,
            "t_token_to_orig_map": {i + 1: i for i in range(9)},
            "t_token_is_max_context": {i + 1: True for i in range(9)}}
  start = np.full([10], -10.0, np.float32)
  end = np.full([10], -10.0, np.float32)
  start[[1, 2, 5]] = [3.0, 2.0, 1.0]
  end[[4, 3, 6]] = [3.0, 2.5, 1.0]
  result = {"start_logits": start, "end_logits": end}
  options = qa_decoding.DecodeOptions("t", False, False, False, n_best_size, max_answer_length,
                                      BasicTokenizer())
  question = qa_decoding.Question("q", words, [window])
  predictions, nbest, _ = qa_decoding.decode_predictions([question], {0: result}, options)
  return predictions["q"], [e["text"] for e in nbest["q"]]


def test_decoder_max_answer_length_and_n_best_are_official():
  """Official ``qa_metrics``: a span of ``end - start + 1 > max_answer_length`` pieces is
  dropped and the n-best list stops at ``n_best_size`` answers."""
  # the best-scoring span w0..w3 has 4 pieces; at max_answer_length 3 the best is w0..w2
  best, texts = _decode_hand_case(max_answer_length=4, n_best_size=20)
  assert best == "w0 w1 w2 w3"
  best, texts = _decode_hand_case(max_answer_length=3, n_best_size=20)
  assert best == "w0 w1 w2" and "w0 w1 w2 w3" not in texts
  assert all(len(text.split()) <= 3 for text in texts)
  _, texts = _decode_hand_case(max_answer_length=30, n_best_size=2)
  assert texts == ["w0 w1 w2 w3", "w0 w1 w2"]
