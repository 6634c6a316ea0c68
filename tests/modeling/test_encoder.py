"""Encoder and head parity with the official TF1 graph (tests/golden and ../shared/reference)."""

import json

import numpy as np
import pytest
import tensorflow as tf
from helpers.paths import GOLDEN

from electra_tf import checkpoints, names
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.encoder import Transformer
from electra_tf.modeling.heads import DiscriminatorHead, MaskedLMHead

ATOL = 1e-5


def embedding_size(folder) -> int:
  """The folder's resolved ``embedding_size`` (128 for the big set, 16 for tests/golden)."""
  return json.loads((folder / "pretraining_config_resolved.json").read_text())["embedding_size"]


def _towers(folder, two_tower=False, untied=False):
  """The official towers of a reference folder, built and loaded by name."""
  disc_cfg = BertConfig.from_json_file(str(folder / "bert_config.json"))
  gen_cfg = BertConfig.from_json_file(str(folder / "generator_bert_config.json"))
  disc = Transformer(disc_cfg, embedding_size=embedding_size(folder), scope="electra")
  if untied:  # the generator's own generator/embeddings (width h), no embeddings_project
    gens = [Transformer(gen_cfg, scope="generator")]
    head = MaskedLMHead(gens[0].embeddings, scope="generator_predictions")
    head_width = gen_cfg.hidden_size
  elif two_tower:
    gens = [Transformer(gen_cfg, embeddings=disc.embeddings, attention_type=t, scope=s)
            for t, s in (("ltr", "generator_ltr"), ("rtl", "generator_rtl"))]
    head = MaskedLMHead(disc.embeddings, scope="cloze_predictions")
    head_width = 2 * gen_cfg.hidden_size
  else:
    gens = [Transformer(gen_cfg, embeddings=disc.embeddings, scope="generator")]
    head = MaskedLMHead(disc.embeddings, scope="generator_predictions")
    head_width = gen_cfg.hidden_size
  disc_head = DiscriminatorHead(disc_cfg.hidden_size)
  disc.build(None)
  for g in gens:
    g.build(None)
  head.build([None, head_width])
  disc_head.build([None, disc_cfg.hidden_size])
  layers = [disc, *gens, head, disc_head]
  report = checkpoints.load_tf1_checkpoint(
      [v for layer in layers for v in layer.weights], str(folder / "model.ckpt"),
      allow_unused=False)
  assert report.unused_optimizer_state == ("global_step",)
  assert not report.missing and not report.unused_other
  return disc, gens, head, disc_head


@pytest.fixture(scope="module")
def small(reference_dir):
  folder = reference_dir / "electra_small_2l"
  return _towers(folder), dict(np.load(folder / "golden.npz"))


@pytest.fixture(scope="module")
def untied():
  """Untied generator embeddings: a tests/golden folder only (the big set has none)."""
  folder = GOLDEN / "electra_untied_2l"
  return _towers(folder, untied=True), dict(np.load(folder / "golden.npz"))


@pytest.fixture(scope="module")
def electric(reference_dir):
  folder = reference_dir / "electric_2l"
  return _towers(folder, two_tower=True), dict(np.load(folder / "golden.npz"))


def _close(actual, expected, name):
  actual = np.asarray(actual)
  assert actual.shape == expected.shape, name
  err = np.abs(actual.astype(np.float64) - expected).max()
  assert err <= ATOL, f"{name}: max abs diff {err}"


TOWER_KEYS = ("token_embeddings", "embedding_postprocessed", "embedding_output",
              "all_layer_outputs")


@pytest.mark.parametrize("mode", ["eager", "tf_function"])
def test_electra_small_towers_match_golden(small, mode):
  _check_electra_towers(small, mode)


@pytest.mark.parametrize("mode", ["eager", "tf_function"])
def test_untied_generator_towers_match_golden(untied, mode):
  """Generator with its own generator/embeddings (untied_generator_embeddings=true)."""
  _check_electra_towers(untied, mode)


def _check_electra_towers(towers, mode):
  (disc, (gen,), head, disc_head), g = towers
  run = (lambda f: f) if mode == "eager" else tf.function
  gen_out = run(lambda: gen(g["masked_input_ids"], g["input_mask"], g["segment_ids"]))()
  disc_out = run(lambda: disc(g["fake_input_ids"], g["input_mask"], g["segment_ids"]))()
  for key in TOWER_KEYS:
    _close(gen_out[key], g["gen_" + key], "gen_" + key)
    _close(disc_out[key], g["disc_" + key], "disc_" + key)
  _close(run(lambda: disc_head(disc_out["sequence_output"]))(), g["disc_logits"], "disc_logits")
  hidden = tf.gather(gen_out["sequence_output"], g["masked_lm_positions"], batch_dims=1)
  logits = run(lambda: head(hidden))().numpy()  # [3, max_predictions_per_seq, V]
  rows, slots = g["gen_mlm_logits_real_index"].T
  _close(logits[rows, slots], g["gen_mlm_logits_real"], "gen_mlm_logits_real")
  _close(logits.max(-1), g["gen_mlm_logits_max"], "gen_mlm_logits_max")
  lse = tf.reduce_logsumexp(logits.astype(np.float64), -1)
  _close(lse, g["gen_mlm_logits_logsumexp"], "gen_mlm_logits_logsumexp")
  clean = disc(g["input_ids"], g["input_mask"], g["segment_ids"])["sequence_output"]
  _close(clean, g["clean_disc_sequence_output"], "clean_disc_sequence_output")
  _close(disc_head(clean), g["clean_disc_logits"], "clean_disc_logits")


def test_electric_two_towers_match_golden(electric):
  (disc, (ltr, rtl), head, disc_head), g = electric
  ltr_out = ltr(g["ltr_input_ids"], g["input_mask"], g["segment_ids"])
  rtl_out = rtl(g["rtl_input_ids"], g["input_mask"], g["segment_ids"])
  for key in TOWER_KEYS:
    _close(ltr_out[key], g["ltr_" + key], "ltr_" + key)
  for key in ("embedding_output", "all_layer_outputs"):
    _close(rtl_out[key], g["rtl_" + key], "rtl_" + key)
  # Position t sees the LTR state of t-1 and the RTL state of t+1 (wrapping), as the official.
  cloze_hidden = tf.concat([tf.roll(ltr_out["sequence_output"], 1, axis=1),
                            tf.roll(rtl_out["sequence_output"], -1, axis=1)], -1)
  _close(cloze_hidden, g["gen_sequence_output"], "gen_sequence_output")
  logits = head(cloze_hidden).numpy()  # [3, max_seq_length, V]
  _close(logits[0, :4], g["cloze_logits_row0_pos0to3"], "cloze_logits_row0_pos0to3")
  _close(logits.max(-1), g["cloze_logits_max"], "cloze_logits_max")
  disc_out = disc(g["fake_input_ids"], g["input_mask"], g["segment_ids"])
  _close(disc_out["all_layer_outputs"], g["disc_all_layer_outputs"], "disc_all_layer_outputs")
  _close(disc_head(disc_out["sequence_output"]), g["disc_logits_raw"], "disc_logits_raw")


def test_causal_masks_block_the_other_direction():
  cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                   intermediate_size=32, max_position_embeddings=16)
  ids = tf.constant([[5, 6, 7, 8, 9, 10]])
  mask, seg = tf.ones_like(ids), tf.zeros_like(ids)
  changed = tf.constant([[5, 6, 7, 8, 9, 11]])  # only the last token differs
  for attention_type, unchanged in (("ltr", slice(0, 5)), ("rtl", slice(5, 6))):
    tower = Transformer(cfg, attention_type=attention_type, scope="t_" + attention_type)
    a = tower(ids, mask, seg)["sequence_output"].numpy()
    b = tower(changed, mask, seg)["sequence_output"].numpy()
    np.testing.assert_array_equal(a[0, unchanged] if attention_type == "ltr" else a[0, :0],
                                  b[0, unchanged] if attention_type == "ltr" else b[0, :0])
    if attention_type == "ltr":
      assert not np.allclose(a[0, 5], b[0, 5])
    else:  # every rtl position t <= 5 sees position 5, so all change
      assert not np.allclose(a[0, :5], b[0, :5])


def test_any_config_builds_with_expected_names():
  cfg = BertConfig(vocab_size=37, hidden_size=24, num_hidden_layers=3, num_attention_heads=3,
                   intermediate_size=40, max_position_embeddings=20, type_vocab_size=3)
  tower = Transformer(cfg, embedding_size=8, scope="electra")
  out = tower(tf.zeros([2, 11], tf.int32), tf.ones([2, 11], tf.int32), tf.zeros([2, 11], tf.int32))
  assert out["sequence_output"].shape == (2, 11, 24)
  assert out["all_layer_outputs"].shape == (3, 2, 11, 24)
  shapes = {names.tf1_name(v): v.shape.as_list() for v in tower.weights}
  assert shapes["electra/embeddings/word_embeddings"] == [37, 8]
  assert shapes["electra/embeddings/token_type_embeddings"] == [3, 8]
  assert shapes["electra/embeddings_project/kernel"] == [8, 24]
  assert shapes["electra/encoder/layer_2/intermediate/dense/kernel"] == [24, 40]
  assert len(shapes) == 5 + 2 + 3 * 16
  # No projection when E == H; distinct random init per variable.
  same = Transformer(cfg.replace(hidden_size=8, num_attention_heads=2), embedding_size=8,
                     scope="other")
  same.build(None)
  assert not any("embeddings_project" in v.name for v in same.weights)
  q = same.blocks[0].query.kernel.numpy()
  k = same.blocks[0].key.kernel.numpy()
  assert not np.array_equal(q, k)


def test_untied_generator_embeddings_scope():
  cfg = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=1,
                   intermediate_size=64, max_position_embeddings=8)
  gen = Transformer(cfg, scope="generator")
  gen.build(None)
  got = sorted(names.tf1_name(v) for v in gen.weights)
  assert "generator/embeddings/word_embeddings" in got
  assert not any("embeddings_project" in n for n in got)
