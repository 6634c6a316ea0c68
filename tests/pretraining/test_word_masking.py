"""Whole-word and span masking: words masked whole, the budget filled by the skip rule, the
masked fraction, the span length distribution, specials never masked, XLA, and the model
(every objective, seeds) with each setting."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import accumulation_runs, pretrain_data, procs
from helpers.paths import GOLDEN, HELPERS, REPO_ROOT
from scipy import stats

from electra_tf import optimization, training
from electra_tf.config import PretrainingConfig
from electra_tf.pretraining import masking, task, word_masking
from electra_tf.pretraining import objective as objective_lib
from electra_tf.pretraining.builder import build_pretraining_model
from electra_tf.training.accumulation import BATCH_TOTALS
from electra_tf.training.replica_step import ReplicaStep

REPO = REPO_ROOT
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1"}

VOCAB = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
V = 60
CONTINUATION = np.arange(V) >= 45  # ids 45.. are "##" pieces
PROBS = word_masking.span_length_probs(5.0, 10)


def _batch(rng, batch, seq_len, cont_frac=0.3, pad=True):
  """[CLS] a [SEP] b [SEP] rows with padding; pieces are continuations with ``cont_frac``."""
  ids = np.where(rng.random((batch, seq_len)) < cont_frac, rng.integers(45, V, (batch, seq_len)),
                 rng.integers(5, 45, (batch, seq_len))).astype(np.int32)
  mask = np.ones((batch, seq_len), np.int32)
  seg = np.zeros((batch, seq_len), np.int32)
  for b in range(batch):
    n = int(rng.integers(seq_len // 2, seq_len + 1)) if pad else seq_len
    sep = int(rng.integers(3, n - 2))
    ids[b, 0], ids[b, sep], ids[b, n - 1] = 2, 3, 3
    seg[b, sep + 1:n] = 1
    ids[b, n:], mask[b, n:] = 0, 0
  return masking.Inputs(tf.constant(ids), tf.constant(mask), tf.constant(seg))


def _words(ids, mask):
  """Lists of positions, one per word of a row (numpy reference of ``word_starts``)."""
  words, prev_cand = [], False
  for t, (i, m) in enumerate(zip(ids, mask, strict=True)):
    cand = bool(m) and i not in (2, 3, 4)
    if cand and CONTINUATION[i] and prev_cand:
      words[-1].append(t)
    elif cand:
      words.append([t])
    prev_cand = cand
  return words


def _mask(inputs, kind, prob=0.15, n=None, draws=None, seed=(5, 6)):
  n = n or int((prob + 0.005) * inputs.input_ids.shape[1])
  return word_masking.mask_units(inputs, prob, n, VOCAB, tf.constant(CONTINUATION), kind, PROBS,
                                 draws=draws, seed=None if seed is None else tf.constant(seed))


def _chosen(out):
  """Per row, the set of masked positions."""
  pos, w = out.masked_lm_positions.numpy(), out.masked_lm_weights.numpy()
  return [set(p[wr > 0].tolist()) for p, wr in zip(pos, w, strict=True)]


@pytest.mark.parametrize("kind", [word_masking.WHOLE_WORD, word_masking.SPAN])
def test_every_masked_piece_has_its_whole_word_masked(kind):
  inputs = _batch(np.random.default_rng(0), 64, 48, cont_frac=0.4)
  out = _mask(inputs, kind)
  ids, mask = inputs.input_ids.numpy(), inputs.input_mask.numpy()
  whole = 0
  for b, chosen in enumerate(_chosen(out)):
    for word in _words(ids[b], mask[b]):
      hit = len(chosen & set(word))
      assert hit in (0, len(word)), (b, word, sorted(chosen))
      whole += hit == len(word) > 1
    # targets are the original pieces; [MASK] or the original token at each masked position
    pos = sorted(chosen)
    np.testing.assert_array_equal(out.masked_lm_ids.numpy()[b, :len(pos)], ids[b, pos])
    assert set(out.input_ids.numpy()[b, pos]) <= {4} | set(ids[b, pos].tolist())
    untouched = [t for t in range(ids.shape[1]) if t not in chosen]
    np.testing.assert_array_equal(out.input_ids.numpy()[b, untouched], ids[b, untouched])
  assert whole > 20  # multi-piece words were masked, whole


def _greedy(ids, mask, order_uniform, budget):
  """Loop reference: words in the order of their first piece's draw, each taken when it fits
  what is left of the budget, else skipped (Hugging Face's whole-word collator)."""
  words = _words(ids, mask)
  words.sort(key=lambda w: order_uniform[w[0]])
  chosen = set()
  for word in words:
    if len(chosen) + len(word) <= budget:
      chosen |= set(word)
  return chosen


def test_whole_words_fill_the_budget_by_the_skip_rule():
  rng = np.random.default_rng(1)
  inputs = _batch(rng, 200, 40, cont_frac=0.6)  # long words: the skip rule is exercised
  uniform = rng.random((200, 40)).astype(np.float32)
  out = _mask(inputs, word_masking.WHOLE_WORD, n=6, draws={"unit_uniform": uniform})
  budget = masking.num_to_predict(inputs.input_mask, 0.15, 6).numpy()
  ids, mask = inputs.input_ids.numpy(), inputs.input_mask.numpy()
  short = 0
  for b, chosen in enumerate(_chosen(out)):
    assert chosen == _greedy(ids[b], mask[b], uniform[b], budget[b]), b
    short += len(chosen) < budget[b]
  assert 0 < short < 100  # some rows cannot be filled exactly by whole words


def test_masked_fraction_is_mask_prob_within_binomial_noise():
  rng = np.random.default_rng(2)
  inputs = _batch(rng, 1000, 64)
  prob = 0.15
  out = _mask(inputs, word_masking.WHOLE_WORD, prob, n=20)  # the cap never binds
  masked = float(out.masked_lm_weights.numpy().sum())
  tokens = float(inputs.input_mask.numpy().sum())
  sigma = np.sqrt(prob * (1 - prob) / tokens)
  assert abs(masked / tokens - prob) < 3 * sigma, (masked / tokens, sigma)
  # positions: no bias toward the start or end of a row
  positions = out.masked_lm_positions.numpy()[out.masked_lm_weights.numpy() > 0]
  half = inputs.input_mask.numpy().sum(1).mean() / 2
  assert abs(np.mean(positions < half) - 0.5) < 0.05


def test_span_lengths_follow_the_truncated_geometric():
  rng = np.random.default_rng(3)
  batch, seq_len = 400, 128
  ids = rng.integers(5, 45, (batch, seq_len)).astype(np.int32)  # one piece a word
  ids[:, 0] = 2
  candidates = tf.constant(ids != 2)
  starts = word_masking.word_starts(tf.constant(ids), candidates, tf.constant(CONTINUATION))
  spans = word_masking.span_starts(starts, candidates, tf.random.stateless_uniform(
      [batch, seq_len], [7, 8]), PROBS).numpy()
  lengths = []
  for row in spans:
    begins = np.flatnonzero(row)
    lengths += np.diff(begins).tolist()  # the last span of a row is cut by its end: left out
  counts = np.bincount(lengths, minlength=11)[1:]
  assert counts.sum() > 5000 and max(lengths) <= 10
  geometric = 0.2 * 0.8 ** np.arange(10)  # SpanBERT: p = 0.2, lengths 1..10, renormalised
  _, p_value = stats.chisquare(counts, geometric / geometric.sum() * counts.sum())
  assert p_value > 0.01, (counts, p_value)
  mean = np.mean(lengths)
  assert mean == pytest.approx(3.8, abs=0.1)  # SpanBERT's mean span length


def test_spans_begin_at_words_and_after_sep():
  inputs = _batch(np.random.default_rng(4), 64, 48, cont_frac=0.3)
  ids = inputs.input_ids
  candidates = masking.get_candidates_mask(inputs, VOCAB)
  starts = word_masking.word_starts(ids, candidates, tf.constant(CONTINUATION))
  spans = word_masking.span_starts(starts, candidates, tf.random.stateless_uniform(
      ids.shape, [1, 1]), PROBS).numpy()
  starts, candidates = starts.numpy(), candidates.numpy()
  assert not (spans & ~starts).any()  # a span starts at a word start
  after_gap = starts & ~np.pad(candidates[:, :-1], [[0, 0], [1, 0]])
  assert (spans[after_gap]).all()  # the first word after [CLS] / [SEP] begins a span
  assert spans.sum() < 0.5 * starts.sum()  # spans group several words


@pytest.mark.parametrize("kind", [word_masking.WHOLE_WORD, word_masking.SPAN])
def test_special_tokens_and_padding_are_never_masked(kind):
  inputs = _batch(np.random.default_rng(5), 128, 32, cont_frac=0.5)
  ids, mask = inputs.input_ids.numpy(), inputs.input_mask.numpy()
  ids[:, 5] = 4  # a [MASK] token in the input is not a candidate either
  inputs = inputs._replace(input_ids=tf.constant(ids))
  out = _mask(inputs, kind, prob=0.5, n=16)
  for b, chosen in enumerate(_chosen(out)):
    for p in chosen:
      assert mask[b, p] == 1 and ids[b, p] not in (2, 3, 4), (b, p)
  changed = out.input_ids.numpy() != ids
  assert not (changed & ((mask == 0) | np.isin(ids, [2, 3, 4]))).any()


def test_row_without_candidates_masks_nothing():
  ids = tf.constant([[2, 3, 0, 0], [2, 7, 3, 0]], tf.int32)
  mask = tf.constant([[1, 1, 0, 0], [1, 1, 1, 0]], tf.int32)
  out = _mask(masking.Inputs(ids, mask, tf.zeros_like(ids)), word_masking.WHOLE_WORD, n=2)
  np.testing.assert_array_equal(out.masked_lm_weights.numpy(), [[0, 0], [1, 0]])
  np.testing.assert_array_equal(out.masked_lm_positions.numpy(), [[0, 0], [1, 0]])


@pytest.mark.parametrize("kind", [word_masking.WHOLE_WORD, word_masking.SPAN])
def test_seeded_and_xla_compiled(kind):
  inputs = _batch(np.random.default_rng(6), 16, 32, cont_frac=0.4)
  first, again = _mask(inputs, kind), _mask(inputs, kind)
  np.testing.assert_array_equal(first.input_ids.numpy(), again.input_ids.numpy())
  other = _mask(inputs, kind, seed=(5, 7))
  assert (other.masked_lm_positions.numpy() != first.masked_lm_positions.numpy()).any()

  @tf.function(jit_compile=True)
  def run(ids, mask, seg, seed):
    out = word_masking.mask_units(masking.Inputs(ids, mask, seg), 0.15, 4, VOCAB,
                                  tf.constant(CONTINUATION), kind, PROBS, seed=seed)
    return out.masked_lm_positions, out.masked_lm_weights

  positions, weights = run(*inputs[:3], tf.constant([1, 2], tf.int64))
  assert positions.shape == (16, 4)
  ids, mask = inputs.input_ids.numpy(), inputs.input_mask.numpy()
  for b in range(16):
    chosen = set(positions.numpy()[b][weights.numpy()[b] > 0].tolist())
    assert chosen
    for word in _words(ids[b], mask[b]):
      assert len(chosen & set(word)) in (0, len(word))


def test_continuation_table_and_objective_settings(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[CLS]\nplay\n##ing\n##s\n#\n")
  np.testing.assert_array_equal(word_masking.continuation_table(str(vocab)),
                                [False, False, False, True, True, False])
  with pytest.raises(ValueError, match="masking must be one of token, whole_word, span, got "
                                       "'words'"):
    objective_lib.Objective(objective_lib.ELECTRA, objective_lib.OWN_TOWER, V, masking="words")
  with pytest.raises(ValueError, match="Unknown masking 'words'; expected one of token, "
                                       "whole_word, span"):
    PretrainingConfig("m", str(tmp_path), masking="words")
  with pytest.raises(ValueError, match="span_mean_length must be >= 1"):
    objective_lib.Objective(objective_lib.ELECTRA, objective_lib.OWN_TOWER, V,
                            span_mean_length=0.5)
  obj = objective_lib.Objective(objective_lib.ELECTRA, objective_lib.OWN_TOWER, V,
                                special_ids=tuple((k, VOCAB[k]) for k in ("[CLS]", "[SEP]",
                                                                          "[MASK]")),
                                masking=word_masking.WHOLE_WORD)
  inputs = _batch(np.random.default_rng(7), 2, 16)
  with pytest.raises(ValueError, match="whole_word masking needs the vocabulary's continuation"):
    objective_lib.mask(inputs, obj)
  assert objective_lib.Objective.from_dict(obj.to_dict()) == obj


OBJECTIVES = {"electra": {}, "electric": {"electra_objective": False, "electric_objective": True},
              "mlm": {"electra_objective": False}}
TINY = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 1},
        "embedding_size": 16, "max_seq_length": 32, "train_batch_size": 8, "eval_batch_size": 8,
        "num_train_steps": 2, "iterations_per_loop": 1, "save_checkpoints_steps": 2,
        "num_warmup_steps": 1, "seed": 3, "vocab_size": pretrain_data.vocab_size(GOLDEN /
                                                                                  "vocab.txt")}


@pytest.mark.parametrize("kind", [word_masking.WHOLE_WORD, word_masking.SPAN])
@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_every_objective_masks_whole_words(tmp_path, vocab_file, name, kind):
  config = PretrainingConfig("m", str(tmp_path), **TINY, **OBJECTIVES[name], masking=kind,
                             vocab_file=vocab_file)
  model = build_pretraining_model(config)
  table = word_masking.continuation_table(vocab_file)
  rng = np.random.default_rng(8)
  ids = np.where(rng.random((8, 32)) < 0.3, rng.choice(np.flatnonzero(table), (8, 32)),
                 rng.integers(1000, 1016, (8, 32))).astype(np.int32)
  ids[:, 0], ids[:, 15], ids[:, 31] = 101, 102, 102
  features = {"input_ids": tf.constant(ids), "input_mask": tf.ones_like(ids),
              "segment_ids": tf.zeros_like(ids)}

  with tf.GradientTape() as tape:  # eager: XLA is exercised by the run below
    out = model(features, training=True, seed=tf.constant([3, 1], tf.int64))
  grads = tape.gradient(out["total_loss"], model.trainable_variables)
  norm = tf.linalg.global_norm([g for g in grads if g is not None])
  assert np.isfinite(out["total_loss"].numpy()) and norm.numpy() > 0
  weights = out["masked_lm_weights"].numpy()
  assert weights.sum() >= 8  # something masked in every row
  for b in range(8):
    chosen = set(out["masked_lm_positions"].numpy()[b][weights[b] > 0].tolist())
    words, prev = [], False
    for t, i in enumerate(ids[b]):
      cand = i not in (101, 102)
      if cand and table[i] and prev:
        words[-1].append(t)
      elif cand:
        words.append([t])
      prev = cand
    assert all(len(chosen & set(w)) in (0, len(w)) for w in words), (b, sorted(chosen))


def _word_features(table, rng, batch=8, seq=32, cont_frac=0.3):
  """[CLS] a [SEP] b [SEP] rows of the golden vocabulary, ``cont_frac`` of them ``##`` pieces."""
  ids = np.where(rng.random((batch, seq)) < cont_frac, rng.choice(np.flatnonzero(table),
                                                                  (batch, seq)),
                 rng.integers(1000, 1016, (batch, seq))).astype(np.int32)
  ids[:, 0], ids[:, seq // 2 - 1], ids[:, -1] = 101, 102, 102
  return {"input_ids": tf.constant(ids), "input_mask": tf.ones_like(ids),
          "segment_ids": tf.zeros_like(ids)}


@pytest.mark.parametrize("kind", [word_masking.WHOLE_WORD, word_masking.SPAN])
def test_accumulated_totals_count_the_pieces_the_micro_batches_mask(tmp_path, vocab_file, kind):
  """With 2 micro-batches, the update's generator total is the sum of the pieces the two
  micro-batch steps mask (rows left short of the budget included), at every step."""
  k = 2
  config = PretrainingConfig("m", str(tmp_path), **TINY, masking=kind, vocab_file=vocab_file,
                             gradient_accumulation_steps=k)
  model = build_pretraining_model(config)
  features = _word_features(word_masking.continuation_table(vocab_file),
                            np.random.default_rng(4), cont_frac=0.8)

  def step_fn(micro, seed):
    out = model(micro, training=True, seed=seed)
    return {"total_loss": out["total_loss"], "update_gen": micro[BATCH_TOTALS]["gen"],
            "own_gen": tf.reduce_sum(out["masked_lm_weights"])}

  replica_step = ReplicaStep(model, None, step_fn, seed=3, num_replicas=1, micro_batches=k,
                             loss_weight=1.0,
                             batch_totals_fn=task.batch_totals_fn(model.objective,
                                                                  model.continuation))
  gradients = tf.function(replica_step.gradients)
  seen = set()
  for index in range(6):
    _, outputs = gradients(features, tf.constant(index, tf.int64))
    own = k * outputs["own_gen"].numpy()  # outputs are means over the micro-batches
    assert outputs["update_gen"].numpy() == pytest.approx(own, abs=1e-5), index
    seen.add(float(own))
  assert len(seen) > 1  # the draws change how many pieces fit


@pytest.mark.slow  # two Trainer runs of one update each: ~15 s
@pytest.mark.parametrize("kind", [word_masking.WHOLE_WORD, word_masking.SPAN])
def test_two_micro_batches_give_the_one_batch_update(tmp_path, vocab_file, kind):
  """Trainer update with gradient_accumulation_steps 2 == the update on the whole batch, with
  the same injected masking / sampling draws per row and no dropout (loss, weights, slots)."""
  batch = accumulation_runs.BATCH
  config = PretrainingConfig("m", str(tmp_path), **{
      **TINY, "model_hparam_overrides": {**TINY["model_hparam_overrides"],
                                         **accumulation_runs.NO_DROPOUT}},
      masking=kind, vocab_file=vocab_file)
  rng = np.random.default_rng(6)
  features = {k: v.numpy() for k, v in _word_features(
      word_masking.continuation_table(vocab_file), rng, batch=batch, cont_frac=0.8).items()}
  n, seq = config.max_predictions_per_seq, config.max_seq_length
  features.update({name: rng.random(shape).astype(np.float32) for name, shape in (
      ("unit_uniform", [batch, seq]), ("span_uniform", [batch, seq]),
      ("mask_uniform", [batch, n]), ("gumbel_uniform", [batch, n, config.vocab_size]))})

  def build(strategy):
    training.set_seed(5)
    with strategy.scope():
      model = build_pretraining_model(config)
      optimizer = accumulation_runs.RecordingAdamW(
          optimization.WarmupPolynomialDecay(1e-3, 10, 0.0, step_offset=1),
          weight_decay_rate=0.01)
    return (model, optimizer, task.train_step_fn(model, []),
            task.batch_totals_fn(model.objective, model.continuation))

  strategy = training.get_strategy("one_device", num_gpus=0)
  one, two = (accumulation_runs.one_update(strategy, build, features, k, str(tmp_path / f"k{k}"))
              for k in (1, 2))
  np.testing.assert_allclose(two.pop("loss"), one.pop("loss"), rtol=1e-6)
  assert sorted(one) == sorted(two)
  for key in sorted(one):
    np.testing.assert_allclose(two[key], one[key], rtol=0, atol=1e-6, err_msg=key)


@pytest.fixture(scope="module")
def pretrain_dir(tmp_path_factory, data_dir, vocab_file) -> pathlib.Path:
  return pretrain_data.build_data_dir(tmp_path_factory.mktemp("pretrain_words"), vocab_file,
                                      pretrain_data.emma_and_wiki(data_dir, 20000))


def _run(data_dir, name, hparams, *flags):
  proc = subprocess.Popen(
      [sys.executable, str(REPO / "run_pretraining.py"), "--data-dir", str(data_dir),
       "--model-name", name, "--hparams", json.dumps(hparams), *flags],
      env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  return proc, procs.finish(proc, 300)


@pytest.mark.slow
@pytest.mark.parametrize("kind, flags", [
    (word_masking.WHOLE_WORD, ["--jit_compile"]),
    (word_masking.SPAN, ["--mixed_precision", "bfloat16", "--xla_elementwise"])])
def test_run_pretraining_trains_records_and_keeps_the_masking(pretrain_dir, kind, flags):
  """Through run_pretraining.py (default strategy, 2 micro-batches an update, XLA, or bf16 with
  XLA on the elementwise work): the run trains, shows and records the masking and its compute
  setting; resuming with another masking is one line."""
  hparams = {**TINY, "masking": kind, "gradient_accumulation_steps": 2}
  proc, log = _run(pretrain_dir, kind, hparams, *flags)
  assert proc.returncode == 0, log[-3000:]
  assert "2/2 = 100.0%" in log
  settings = log[:log.index("1/2 = ")]
  assert f"mask_prob 0.15, masking {kind}" in settings, settings
  compute = ("float32, XLA" if "--jit_compile" in flags
             else "mixed bfloat16, XLA on elementwise work")
  assert f"  compute: {compute}\n" in settings, settings
  home = pretrain_dir / "models" / kind
  stored = json.loads((home / "hparams.json").read_text())
  assert (stored["masking"], stored["span_mean_length"], stored["span_max_length"]) == (
      kind, 5.0, 10)
  other = word_masking.SPAN if kind == word_masking.WHOLE_WORD else word_masking.TOKEN
  proc, log = _run(pretrain_dir, kind, {**hparams, "masking": other, "num_train_steps": 4})
  assert proc.returncode != 0
  lines = [line for line in log.splitlines() if line.strip()]
  assert lines[-1].endswith(f"hparams.json in {home} says masking \"{kind}\" but --hparams "
                            f"gives \"{other}\""), log[-2000:]
  assert "Traceback" not in log


@pytest.mark.slow
def test_mirrored_two_replicas_train_whole_words(pretrain_dir):
  """MirroredStrategy over 2 logical CPUs, 2 micro-batches an update: each replica masks
  whole words of its own batch and the run trains to the end."""
  hparams = {**TINY, "masking": word_masking.WHOLE_WORD, "gradient_accumulation_steps": 2}
  proc = subprocess.Popen(
      [sys.executable, str(HELPERS / "mirrored_pretraining.py"),
       "--distribution_strategy=mirrored", "--data-dir", str(pretrain_dir),
       "--model-name", "mirrored_words", "--hparams", json.dumps(hparams)],
      env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  log = procs.finish(proc, 300)
  assert proc.returncode == 0, log[-3000:]
  assert "2 micro-batches of 2 examples per replica per update (global batch 8)" in log, log
  assert "2/2 = 100.0%" in log, log[-3000:]
  assert "masking whole_word" in log
  assert (pretrain_dir / "models" / "mirrored_words" / "checkpoint").exists()
