"""Masking / sampling helpers: official semantics, golden draws, statistics, XLA."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.pretraining import masking

VOCAB = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}
GOLDEN_DIRS = ["electra_small_2l", "electric_2l"]


@pytest.fixture(scope="module", params=GOLDEN_DIRS)
def golden(request, reference_dir):
  return dict(np.load(reference_dir / request.param / "golden.npz"))


def _inputs(g):
  return masking.Inputs(*(tf.constant(g[k]) for k in ("input_ids", "input_mask", "segment_ids")))


def _np_scatter_update(sequence, updates, positions):
  """Loop version of the official scatter_update (sum duplicates, divide by count)."""
  seq = np.array(sequence)
  total = np.zeros_like(seq)
  count = np.zeros(seq.shape[:2], np.int64)
  for b in range(positions.shape[0]):
    for n in range(positions.shape[1]):
      p = positions[b, n]
      if p == 0:
        continue
      total[b, p] += updates[b, n]
      count[b, p] += 1
  out = seq.copy()
  for b, p in zip(*np.nonzero(count), strict=True):
    out[b, p] = total[b, p] // count[b, p] if seq.dtype.kind == "i" else total[b, p] / count[b, p]
  return out, np.minimum(count, 1)


def test_read_special_ids_matches_vocab_file(vocab_file):
  assert masking.read_special_ids(vocab_file) == VOCAB


def test_gather_positions_2d_and_3d():
  rng = np.random.RandomState(0)
  seq3 = rng.randn(3, 7, 5).astype(np.float32)
  seq2 = rng.randint(0, 100, (3, 7)).astype(np.int32)
  pos = rng.randint(0, 7, (3, 4)).astype(np.int32)
  rows = np.arange(3)[:, None]
  np.testing.assert_array_equal(masking.gather_positions(seq3, pos).numpy(), seq3[rows, pos])
  np.testing.assert_array_equal(masking.gather_positions(seq2, pos).numpy(), seq2[rows, pos])
  with pytest.raises(ValueError, match="rank-2 or rank-3"):
    masking.gather_positions(tf.zeros([7]), pos)


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
def test_scatter_update_duplicates_and_position_zero(dtype):
  rng = np.random.RandomState(1)
  seq = rng.randint(0, 1000, (4, 9)).astype(dtype)
  pos = np.array([[3, 3, 0, 5], [1, 1, 1, 0], [0, 0, 0, 0], [8, 2, 8, 7]], np.int32)
  upd = rng.randint(0, 1000, (4, 4)).astype(dtype)
  got, got_mask = masking.scatter_update(tf.constant(seq), tf.constant(upd), tf.constant(pos))
  want, want_mask = _np_scatter_update(seq, upd, pos)
  np.testing.assert_array_equal(got_mask.numpy(), want_mask)
  if dtype == np.int32:
    np.testing.assert_array_equal(got.numpy(), want)
    # two different updates at one position give their floor mean, not either of them
    assert got.numpy()[0, 3] == (int(upd[0, 0]) + int(upd[0, 1])) // 2
  else:
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-5)
  np.testing.assert_array_equal(got.numpy()[:, 0], seq[:, 0])  # position 0 never updated


def test_scatter_update_3d():
  rng = np.random.RandomState(2)
  seq = rng.randn(2, 6, 3).astype(np.float32)
  upd = rng.randn(2, 3, 3).astype(np.float32)
  pos = np.array([[2, 2, 4], [0, 5, 1]], np.int32)
  got, got_mask = masking.scatter_update(tf.constant(seq), tf.constant(upd), tf.constant(pos))
  want, want_mask = _np_scatter_update(seq, upd, pos)
  np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-6)
  np.testing.assert_array_equal(got_mask.numpy(), want_mask)


def test_golden_masking(golden):
  g = golden
  draws = {"categorical_positions": g["inject_categorical_positions"],
           "mask_uniform": g["inject_mask_uniform"]}
  n = g["masked_lm_positions"].shape[1]
  inputs = _inputs(g)
  masked = masking.mask(inputs, 0.15, n, VOCAB, draws=draws)
  np.testing.assert_array_equal(masked.input_ids.numpy(), g["masked_input_ids"])
  np.testing.assert_array_equal(masked.masked_lm_positions.numpy(), g["masked_lm_positions"])
  np.testing.assert_array_equal(masked.masked_lm_ids.numpy(), g["masked_lm_ids"])
  np.testing.assert_array_equal(masked.masked_lm_weights.numpy(), g["masked_lm_weights"])
  np.testing.assert_array_equal(
      masking.num_to_predict(inputs.input_mask, 0.15, n).numpy(), g["num_to_predict"])
  logits = masking.candidates_log_probs(masking.get_candidates_mask(inputs, VOCAB)).numpy()
  want = g["candidates_sample_logits"]
  np.testing.assert_array_equal(np.isneginf(logits), np.isneginf(want))
  finite = np.isfinite(want)
  np.testing.assert_allclose(logits[finite], want[finite], rtol=0, atol=1e-5)
  # unmask restores the original ids
  np.testing.assert_array_equal(masking.unmask(masked).input_ids.numpy(), g["input_ids"])


def test_golden_fake_ids_average_duplicate_samples(golden):
  """Golden row 1: one position drawn twice gets the floor mean of its two samples."""
  g = golden
  fake, replaced = masking.scatter_update(
      tf.constant(g["input_ids"]), tf.constant(g["sampled_tokids"]),
      tf.constant(g["masked_lm_positions"]))
  np.testing.assert_array_equal(fake.numpy(), g["fake_input_ids"])
  pos = g["masked_lm_positions"]
  dups = [(b, i, j) for b in range(pos.shape[0]) for i in range(pos.shape[1])
          for j in range(i + 1, pos.shape[1]) if pos[b, i] == pos[b, j] != 0]
  assert dups, "the golden batch should contain a duplicate position"
  for b, i, j in dups:
    s = g["sampled_tokids"]
    assert s[b, i] != s[b, j]
    assert fake.numpy()[b, pos[b, i]] == (int(s[b, i]) + int(s[b, j])) // 2
  labels = replaced.numpy()
  if "cloze_loss" not in g:  # ELECTRA: a sample equal to the original is real
    labels = labels * (fake.numpy() != g["input_ids"])
  np.testing.assert_array_equal(labels, g["disc_labels"])


def test_golden_sampler_cases(golden):
  g = golden
  logits, uniform, disallow = g["sampler_logits"], g["sampler_uniform"], g["sampler_disallow"]
  vocab = logits.shape[-1]
  got = masking.sample_from_softmax(logits, uniform_noise=uniform).numpy()
  np.testing.assert_array_equal(np.eye(vocab, dtype=np.float32)[got], g["sampler_out"])
  got_d = masking.sample_from_softmax(logits, disallow=disallow, uniform_noise=uniform).numpy()
  np.testing.assert_array_equal(np.eye(vocab, dtype=np.float32)[got_d], g["sampler_out_disallow"])
  assert not np.any(np.take_along_axis(disallow, got_d[..., None], -1))


def _random_batch(rng, batch, seq_len):
  """Rows of [CLS] a [SEP] (b [SEP]) with random lengths, some [MASK]/[SEP] inside, padding."""
  ids = np.zeros((batch, seq_len), np.int32)
  mask = np.zeros((batch, seq_len), np.int32)
  for b in range(batch):
    length = rng.randint(3, seq_len + 1)
    row = rng.randint(1000, 30000, length)
    row[0], row[-1] = VOCAB["[CLS]"], VOCAB["[SEP]"]
    specials = rng.rand(length) < 0.05
    row[1:-1][specials[1:-1]] = rng.choice([VOCAB["[MASK]"], VOCAB["[SEP]"], VOCAB["[UNK]"]],
                                           specials[1:-1].sum())
    ids[b, :length], mask[b, :length] = row, 1
  return ids, mask


def test_masking_statistics_over_many_rows():
  rng = np.random.RandomState(3)
  batch, seq_len, n, prob = 2000, 64, 10, 0.15
  ids, mask = _random_batch(rng, batch, seq_len)
  inputs = masking.Inputs(tf.constant(ids), tf.constant(mask), tf.zeros_like(tf.constant(ids)))
  out = masking.mask(inputs, prob, n, VOCAB, seed=tf.constant([7, 11]))
  pos = out.masked_lm_positions.numpy()
  w = out.masked_lm_weights.numpy()
  lm_ids = out.masked_lm_ids.numpy()
  new = out.input_ids.numpy()

  # exact official count per row (float32 product, round half to even)
  count = np.maximum(1, np.minimum(n, np.round(
      mask.sum(-1).astype(np.float32) * np.float32(prob)).astype(np.int32)))
  candidates = (mask == 1) & ~np.isin(ids, [VOCAB["[CLS]"], VOCAB["[SEP]"], VOCAB["[MASK]"]])
  count = count * candidates.any(-1)
  np.testing.assert_array_equal(w.sum(-1), count)
  np.testing.assert_array_equal(w, (np.arange(n)[None] < count[:, None]).astype(np.float32))
  rows = np.arange(batch)[:, None]
  active = w == 1
  assert candidates[rows, pos][active].all()  # never special tokens or padding
  assert (pos[~active] == 0).all() and (lm_ids[~active] == 0).all()
  np.testing.assert_array_equal(lm_ids[active], ids[rows, pos][active])

  changed = new != ids
  assert (new[changed] == VOCAB["[MASK]"]).all()  # no random-token replacement
  chosen = np.zeros_like(changed)
  chosen[np.repeat(rows, n, 1)[active], pos[active]] = True
  assert not (changed & ~chosen).any()
  # ~85% of chosen positions masked (4 sigma of a binomial)
  frac = changed.sum() / chosen.sum()
  sigma = np.sqrt(0.85 * 0.15 / chosen.sum())
  assert abs(frac - 0.85) < 4 * sigma, frac
  # positions uniform over candidates: mean relative position near the middle
  rel = (pos[active] / mask.sum(-1)[np.repeat(rows, n, 1)[active]])
  assert abs(rel.mean() - 0.5) < 0.02


def test_round_half_to_even_counts():
  # 10 tokens * 0.15 = 1.5 -> 2; 30 * 0.15 -> 4.5 in float32 -> 4 (half to even); 3 -> max(1, .)
  lengths = np.array([10, 30, 3, 50, 128])
  mask = (np.arange(128)[None] < lengths[:, None]).astype(np.int32)
  want = np.maximum(1, np.minimum(19, np.round(lengths.astype(np.float32) * np.float32(0.15))))
  np.testing.assert_array_equal(masking.num_to_predict(mask, 0.15, 19).numpy(), want)


def test_row_without_candidates_predicts_nothing():
  ids = np.array([[101, 102, 0, 0], [101, 7, 8, 102]], np.int32)
  mask = (ids != 0).astype(np.int32)
  out = masking.mask(masking.Inputs(ids, mask, np.zeros_like(ids)), 0.5, 2, VOCAB,
                     seed=tf.constant([1, 2]))
  assert out.masked_lm_weights.numpy()[0].sum() == 0
  np.testing.assert_array_equal(out.input_ids.numpy()[0], ids[0])
  assert out.masked_lm_weights.numpy()[1].sum() == 2
  assert set(out.masked_lm_positions.numpy()[1]) <= {1, 2}


def test_seeds_are_reproducible():
  rng = np.random.RandomState(4)
  ids, mask = _random_batch(rng, 16, 32)
  inputs = masking.Inputs(tf.constant(ids), tf.constant(mask), tf.zeros_like(tf.constant(ids)))
  a = masking.mask(inputs, 0.15, 5, VOCAB, seed=tf.constant([1, 2]))
  b = masking.mask(inputs, 0.15, 5, VOCAB, seed=tf.constant([1, 2]))
  c = masking.mask(inputs, 0.15, 5, VOCAB, seed=tf.constant([1, 3]))
  for x, y in zip(a, b, strict=True):
    np.testing.assert_array_equal(x.numpy(), y.numpy())
  assert not np.array_equal(a.masked_lm_positions.numpy(), c.masked_lm_positions.numpy())
  logits = tf.constant(rng.randn(4, 5, 50).astype(np.float32))
  s1 = masking.sample_from_softmax(logits, seed=tf.constant([3, 4]))
  s2 = masking.sample_from_softmax(logits, seed=tf.constant([3, 4]))
  np.testing.assert_array_equal(s1.numpy(), s2.numpy())


def test_sampling_frequencies_follow_softmax():
  logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], np.float32))
  tiled = tf.tile(tf.constant(logits), [20000, 1])
  ids = masking.sample_from_softmax(tiled, seed=tf.constant([5, 6])).numpy()
  freq = np.bincount(ids, minlength=4) / ids.size
  np.testing.assert_allclose(freq, np.exp(logits[0]), atol=0.015)


def test_mask_and_sample_compile_with_xla_static_shapes():
  rng = np.random.RandomState(5)
  ids, mask = _random_batch(rng, 8, 32)

  @tf.function(jit_compile=True)
  def run(ids, mask, seed):
    out = masking.mask(masking.Inputs(ids, mask, tf.zeros_like(ids)), 0.15, 5, VOCAB, seed=seed)
    logits = tf.zeros([8, 5, 40])
    sampled = masking.sample_from_softmax(logits, seed=seed + 1)
    new_ids, _ = masking.scatter_update(out.input_ids, sampled, out.masked_lm_positions)
    return out, new_ids

  out, new_ids = run(tf.constant(ids), tf.constant(mask), tf.constant([1, 2]))
  concrete = run.get_concrete_function(tf.constant(ids), tf.constant(mask), tf.constant([1, 2]))
  for t in tf.nest.flatten(concrete.structured_outputs):
    assert t.shape.is_fully_defined(), t
  w = out.masked_lm_weights.numpy()
  assert (w.sum(-1) >= 1).all()
  assert new_ids.shape == (8, 32)


def test_features_to_inputs_casts_int64_and_names_missing():
  ids = np.array([[101, 7, 102]], np.int64)
  inputs = masking.features_to_inputs({"input_ids": ids, "input_mask": np.ones_like(ids),
                                       "segment_ids": np.zeros_like(ids)})
  assert inputs.input_ids.dtype == tf.int32 and inputs.masked_lm_ids is None
  with pytest.raises(ValueError, match="segment_ids"):
    masking.features_to_inputs({"input_ids": ids, "input_mask": ids})
