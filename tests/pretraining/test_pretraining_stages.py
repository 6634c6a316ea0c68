"""The pre-training stages on hand-made tensors (no model), the Objective, the builder's mapping
from config flags to parts, and the model's check of the parts it is handed."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import PretrainingConfig
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.encoder import Transformer
from electra_tf.modeling.heads import DiscriminatorHead
from electra_tf.pretraining import masking
from electra_tf.pretraining import objective as obj
from electra_tf.pretraining.builder import build_objective, build_pretraining_model
from electra_tf.pretraining.pretraining_model import PretrainingModel

SPECIAL = (("[SEP]", 3), ("[CLS]", 2), ("[MASK]", 4))
V = 8


def _objective(**kw):
  return obj.Objective(**{"kind": obj.ELECTRA, "generator": obj.OWN_TOWER, "vocab_size": V,
                          "max_predictions_per_seq": 3, "special_ids": SPECIAL, **kw})


def _masked():
  """Two rows of length 6; row 0 masks positions 1, 4 (slot 3 unused), row 1 position 2 twice."""
  ids = tf.constant([[2, 5, 6, 7, 5, 3], [2, 6, 7, 3, 0, 0]])
  mask = tf.constant([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
  positions = tf.constant([[1, 4, 0], [2, 2, 0]])
  targets = tf.constant([[5, 5, 0], [7, 7, 0]])
  weights = tf.constant([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
  masked_ids = tf.constant([[2, 4, 6, 7, 4, 3], [2, 6, 4, 3, 0, 0]])
  return masking.Inputs(masked_ids, mask, tf.zeros_like(ids), positions, targets, weights), ids


def _uniform_for(winners):
  """Gumbel noise draws [2, 3, V] under which token ``winners[b][n]`` wins by a wide margin."""
  u = np.full((2, 3, V), 0.5, np.float32)
  for b, row in enumerate(winners):
    for n, token in enumerate(row):
      u[b, n, token] = 1.0 - 1e-7
  return tf.constant(u)


# ------------------------------------------------------------------------------ corrupt


def test_corrupt_writes_samples_and_labels_real_when_sample_is_original():
  masked, original = _masked()
  draws = _uniform_for([[5, 1, 0], [6, 6, 0]])  # row 0 slot 0 re-samples the original token 5
  out = obj.corrupt(masked, tf.zeros([2, 3, V]), _objective(), gumbel_uniform=draws)
  np.testing.assert_array_equal(out.sampled.numpy(), [[5, 1, 0], [6, 6, 0]])
  # slot 2 aims at position 0 (unused) and is ignored; everything else is the original input
  np.testing.assert_array_equal(out.inputs.input_ids.numpy(),
                                [[2, 5, 6, 7, 1, 3], [2, 6, 6, 3, 0, 0]])
  np.testing.assert_array_equal(out.labels.numpy(),
                                [[0, 0, 0, 0, 1, 0], [0, 0, 1, 0, 0, 0]])
  np.testing.assert_array_equal(out.inputs.input_mask.numpy(), masked.input_mask.numpy())
  assert not np.array_equal(original.numpy(), out.inputs.input_ids.numpy())


def test_corrupt_electric_labels_every_replaced_position():
  masked, _ = _masked()
  draws = _uniform_for([[5, 1, 0], [6, 6, 0]])
  out = obj.corrupt(masked, tf.zeros([2, 3, V]),
                    _objective(kind=obj.ELECTRIC, generator=obj.TWO_TOWERS), gumbel_uniform=draws)
  np.testing.assert_array_equal(out.labels.numpy(), [[0, 1, 0, 0, 1, 0], [0, 0, 1, 0, 0, 0]])


def test_corrupt_disallow_correct_and_temperature():
  masked, _ = _masked()
  logits = np.zeros((2, 3, V), np.float32)
  logits[..., 5] = 30.0  # token 5 dominates every slot
  logits[..., 7] = 29.0
  plain = obj.corrupt(masked, tf.constant(logits), _objective(),
                      gumbel_uniform=tf.fill([2, 3, V], 0.5))
  assert (plain.sampled.numpy() == 5).all()
  banned = obj.corrupt(masked, tf.constant(logits), _objective(disallow_correct=True),
                       gumbel_uniform=tf.fill([2, 3, V], 0.5))
  # row 0's target is 5 (7 wins instead; the unused slot's target 0 bans only 0); row 1's is 7
  np.testing.assert_array_equal(banned.sampled.numpy(), [[7, 7, 5], [5, 5, 5]])
  # a high temperature flattens the logits until the noise decides
  noise = _uniform_for([[1, 2, 3], [4, 6, 1]])
  hot = obj.corrupt(masked, tf.constant(logits), _objective(temperature=1000.0),
                    gumbel_uniform=noise)
  np.testing.assert_array_equal(hot.sampled.numpy(), [[1, 2, 3], [4, 6, 1]])


# ------------------------------------------------------------------------------ losses


def test_discriminator_losses_on_given_logits():
  logits = np.array([[2.0, -1.0, 0.0, 3.0], [0.5, -4.0, 9.0, 9.0]], np.float32)
  labels = np.array([[1, 0, 1, 0], [0, 1, 0, 0]], np.int32)
  mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], np.int32)
  out = obj.discriminator_losses(tf.constant(logits), tf.constant(labels), tf.constant(mask))
  x, z = logits.astype(np.float64), labels
  per_token = (np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x)))) * mask
  np.testing.assert_allclose(out.per_example_loss.numpy(),
                             per_token.sum(-1) / (mask.sum(-1) + 1e-6), rtol=1e-6)
  assert float(out.loss) == pytest.approx(per_token.sum() / (mask.sum() + 1e-6), rel=1e-6)
  np.testing.assert_allclose(out.probs.numpy(), 1 / (1 + np.exp(-x)), rtol=1e-6)
  np.testing.assert_array_equal(out.preds.numpy(), [[1, 0, 0, 1], [1, 0, 1, 1]])  # 0 -> 0


def test_electric_logits_add_log_q_and_prior_without_gradient():
  raw = tf.constant([[0.5, -1.0, 2.0]])
  log_probs = tf.Variable(tf.nn.log_softmax(tf.random.stateless_normal([1, 3, V], [1, 2])))
  ids = tf.constant([[3, 0, 7]])
  objective = _objective(kind=obj.ELECTRIC, generator=obj.TWO_TOWERS, mask_prob=0.2)
  with tf.GradientTape() as tape:
    logits, log_q = obj.electric_logits(raw, log_probs, ids, objective)
  want_q = np.take_along_axis(log_probs.numpy(), ids.numpy()[..., None], -1)[..., 0]
  np.testing.assert_array_equal(log_q.numpy(), want_q)
  np.testing.assert_allclose(logits.numpy(), raw.numpy() + want_q + np.log(0.2 / 0.8), rtol=1e-6)
  assert tape.gradient(logits, log_probs) is None


def test_generator_losses_cloze_is_the_generator_term():
  masked, original = _masked()
  logits = tf.random.stateless_normal([2, 3, V], [3, 4])
  mlm_only = obj.generator_losses(logits, masked)
  log_p = tf.nn.log_softmax(logits).numpy()
  per = -np.take_along_axis(log_p, masked.masked_lm_ids.numpy()[..., None], -1)[..., 0]
  np.testing.assert_allclose(mlm_only.mlm.per_example_loss.numpy(), per, rtol=1e-6)
  assert float(mlm_only.loss) == pytest.approx((per * masked.masked_lm_weights.numpy()).sum()
                                               / (4 + 1e-6), rel=1e-6)
  assert mlm_only.cloze is None
  cloze_logits = tf.random.stateless_normal([2, 6, V], [5, 6])
  weights = tf.cast(masked.input_mask, tf.float32)
  both = obj.generator_losses(logits, masked, cloze_logits, weights, original)
  assert float(both.loss) == float(both.cloze.loss) != float(both.mlm.loss)
  assert float(both.mlm.loss) == float(mlm_only.loss)


def test_mask_stage_uses_the_objective():
  inputs = masking.Inputs(tf.constant([[2, 5, 6, 7, 5, 3]]), tf.ones([1, 6], tf.int32),
                          tf.zeros([1, 6], tf.int32))
  objective = _objective(mask_prob=0.5)
  seed = tf.constant([1, 2], tf.int64)
  a, b = obj.mask(inputs, objective, seed=seed), obj.mask(inputs, objective, seed=seed)
  np.testing.assert_array_equal(a.masked_lm_positions.numpy(), b.masked_lm_positions.numpy())
  assert float(tf.reduce_sum(a.masked_lm_weights)) == 3  # round(6 tokens * 0.5)
  positions = a.masked_lm_positions.numpy()[a.masked_lm_weights.numpy() > 0]
  assert set(positions) <= {1, 2, 3, 4}  # never [CLS] / [SEP]
  with pytest.raises(ValueError, match=r"vocab has no \[SEP\] token"):
    obj.mask(inputs, _objective(special_ids=()), draws={
        "categorical_positions": tf.constant([[1, 2, 3]])})


# ------------------------------------------------------------------------------ Objective


def test_objective_validation_and_seeds():
  with pytest.raises(ValueError, match="kind must be one of"):
    _objective(kind="bert")
  with pytest.raises(ValueError, match="Electric objective needs the two-tower"):
    _objective(kind=obj.ELECTRIC)
  with pytest.raises(ValueError, match=r"mask_prob must be in \(0, 1\)"):
    _objective(mask_prob=1.0)
  with pytest.raises(ValueError, match="temperature must be > 0"):
    _objective(temperature=0.0)
  assert _objective().step_seeds(None) == (None, None)
  seeded = _objective(seed=3)
  first = [s.numpy() for s in seeded.step_seeds(tf.constant(5))]
  again = [s.numpy() for s in seeded.step_seeds(5)]
  pair = [s.numpy() for s in seeded.step_seeds(tf.constant([3, 5], tf.int64))]
  np.testing.assert_array_equal(first, again)
  np.testing.assert_array_equal(first, pair)  # scalar s means [model seed, s]
  assert not np.array_equal(first[0], first[1])
  with pytest.raises(ValueError, match="seed must be a scalar or shape"):
    seeded.step_seeds(tf.constant([1, 2, 3]))


# ------------------------------------------------------------------------------ builder, parts

TINY = dict(vocab_size=30, max_seq_length=16, embedding_size=8, generator_hidden_size=0.5,
            model_hparam_overrides={"hidden_size": 16, "num_hidden_layers": 1,
                                    "num_attention_heads": 2, "max_position_embeddings": 16})
VOCAB = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}


@pytest.mark.parametrize("flags, kind, generator, towers", [
    ({}, obj.ELECTRA, obj.OWN_TOWER, {"discriminator", "generator"}),
    ({"untied_generator": False}, obj.ELECTRA, obj.DISCRIMINATOR_TOWER, {"discriminator"}),
    ({"electra_objective": False}, obj.MLM, obj.DISCRIMINATOR_TOWER, {"discriminator"}),
    ({"uniform_generator": True}, obj.ELECTRA, obj.UNIFORM, {"discriminator"}),
    ({"electra_objective": False, "electric_objective": True}, obj.ELECTRIC, obj.TWO_TOWERS,
     {"discriminator", "generator_ltr", "generator_rtl"}),
    ({"two_tower_generator": True}, obj.ELECTRA, obj.TWO_TOWERS,
     {"discriminator", "generator_ltr", "generator_rtl"}),
])
def test_builder_maps_flags_to_objective_and_parts(flags, kind, generator, towers, tmp_path):
  config = PretrainingConfig("m", str(tmp_path), **TINY, **flags, disc_weight=7.0, seed=9)
  objective = build_objective(config, VOCAB)
  assert (objective.kind, objective.generator) == (kind, generator)
  assert objective.vocab == {"[SEP]": 3, "[CLS]": 2, "[MASK]": 4}
  assert (objective.disc_weight, objective.seed, objective.vocab_size) == (7.0, 9, 30)
  model = build_pretraining_model(config, VOCAB)
  present = {n for n in ("discriminator", "generator", "generator_ltr", "generator_rtl")
             if getattr(model, n) is not None}
  assert present == towers
  assert model.generator_is_discriminator == (generator == obj.DISCRIMINATOR_TOWER)
  assert (model.discriminator_head is None) == (kind == obj.MLM)


def test_model_rejects_parts_that_do_not_fit_the_objective():
  config = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=16)
  tower = Transformer(config, scope="electra")
  with pytest.raises(ValueError, match="missing: generator_head, unexpected: generator$"):
    PretrainingModel(_objective(kind=obj.MLM, generator=obj.DISCRIMINATOR_TOWER),
                     discriminator=tower, generator=tower)
  with pytest.raises(ValueError, match=r"parts not built .*: discriminator, discriminator_head$"):
    PretrainingModel(_objective(generator=obj.UNIFORM), discriminator=tower,
                     discriminator_head=DiscriminatorHead(16))


@pytest.mark.parametrize("flags", [{}, {"untied_generator_embeddings": True},
                                   {"two_tower_generator": True}])
def test_builder_uses_one_hot_word_embeddings_on_tpu(flags, tmp_path):
  """Official ``use_one_hot_embeddings = use_tpu`` on every tower of the pre-training model."""
  for use_tpu in (False, True):
    config = PretrainingConfig("m", str(tmp_path), **TINY, **flags, use_tpu=use_tpu)
    model = build_pretraining_model(config, VOCAB)
    towers = [getattr(model, n) for n in ("discriminator", "generator", "generator_ltr",
                                          "generator_rtl") if getattr(model, n) is not None]
    assert len(towers) >= 2
    assert {t.embeddings.use_one_hot_embeddings for t in towers} == {use_tpu}
