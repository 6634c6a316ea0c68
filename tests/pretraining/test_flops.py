"""FLOPs counts equal the official flops_computation.py formulas and the paper's totals."""

import pytest

from electra_tf.pretraining import flops


def _small_disc_block_per_token():
  """ELECTRA-Small discriminator layer, by hand: h=256, heads=4, ffn=1024, seq=128."""
  h, s, i, heads = 256, 128, 1024, 4
  return (3 * 2 * h * h + 3 * h  # q/k/v kernels + biases
          + 2 * h * s + 5 * s * heads + 4 * s * heads + s * heads  # scores, softmax, drop, scale
          + 2 * h * s  # weighted values
          + 2 * h * h + h + 4 * h + h + 5  # attn output dense, bias, dropout, residual, LN (sic)
          + 2 * h * i + 8 * i + i  # intermediate, GELU, bias
          + 2 * h * i + h + 4 * h + h + 5 * h)  # output, bias, dropout, residual, LayerNorm


def test_electra_small_by_hand():
  s, v, e = 128, 30522, 128
  disc_block = _small_disc_block_per_token()
  gh, gi, gheads = 64, 256, 1  # generator: hidden 64, ffn 4*64, max(64 // 64, 1) heads
  gen_block = (3 * 2 * gh * gh + 3 * gh + 2 * gh * s + 10 * s * gheads + 2 * gh * s
               + 2 * gh * gh + gh + 4 * gh + gh + 5
               + 2 * gh * gi + 8 * gi + gi + 2 * gh * gi + gh + 4 * gh + gh + 5 * gh)
  embed = 2 * e * v + 2 * e * (s + 2) + 2 * e + 5 * e + 4 * e  # one-hot, type+pos, add, LN, drop
  disc_embed = embed + 2 * 256 * e + 256  # embeddings_project 128 -> 256
  gen_embed = embed + 2 * gh * e + gh  # tied table, projected 128 -> 64
  disc_head = 2 * 256 * 256 + 256 + 8 * 256 + 2 * 256
  gen_head = 0.15625 * (2 * e * v + 2 * gh * e + e + 8 * e + 5 * e + 5 * v + 2 * v)
  per_example = 2 * s * (12 * disc_block + disc_embed + disc_head
                         + 12 * gen_block + gen_embed + gen_head)

  ours = flops.pretraining_train_flops_per_example(
      hidden_size=256, num_layers=12, generator_hidden_size=64, seq_length=128,
      embedding_size=128)
  assert ours == pytest.approx(per_example, rel=1e-12)
  assert flops.block_flops(256, 128) == 128 * disc_block
  assert flops.flops_per_train_step(128, hidden_size=256, num_layers=12,
                                    generator_hidden_size=64, seq_length=128,
                                    embedding_size=128) == pytest.approx(128 * per_example,
                                                                         rel=1e-12)
  total = flops.electra_train_flops(256, 12, 64, 12, batch_size=128, train_steps=1e6,
                                    embedding_size=128, seq_length=128)
  assert total == pytest.approx(128 * 1e6 * per_example, rel=1e-12)


# Totals quoted in the ELECTRA paper (Tables 1 and 8), with the official MODEL_FLOPS settings.
@pytest.mark.parametrize("quoted,kwargs", [
    ("6.4e+19", dict(hidden_size=768, num_layers=12, generator_hidden_size=256,
                     generator_num_layers=12, batch_size=256, train_steps=766000)),
    ("7.1e+20", dict(hidden_size=1024, num_layers=24, generator_hidden_size=256,
                     generator_num_layers=24, batch_size=2048, train_steps=400000)),
    ("3.1e+21", dict(hidden_size=1024, num_layers=24, generator_hidden_size=256,
                     generator_num_layers=24, batch_size=2048, train_steps=1750000)),
])
def test_electra_paper_totals(quoted, kwargs):
  assert f"{flops.electra_train_flops(**kwargs):.1e}" == quoted


def test_electra_small_official_total():
  # The official main prints 1.29e18 for electra_small (1M steps, batch 128, seq 128); the
  # 1.4e18 quoted next to ELECTRA-Small in the paper is BERT-Small's (1.45M steps) total.
  small = flops.electra_train_flops(256, 12, 64, 12, batch_size=128, train_steps=1e6,
                                    embedding_size=128, seq_length=128)
  assert f"{small:.2e}" == "1.29e+18"
  bert_small = 128 * 1.45e6 * flops.transformer_train_flops_per_example(
      256, 12, seq_length=128, embedding_size=128)
  assert f"{bert_small:.1e}" == "1.4e+18"


@pytest.mark.parametrize("quoted,batch,steps,kwargs", [
    ("6.4e+19", 256, 1e6, dict(hidden_size=768, num_layers=12)),  # BERT-Base
    ("1.9e+20", 256, 1e6, dict(hidden_size=1024, num_layers=24)),  # BERT-Large
    ("4.0e+19", 128, 960800, dict(hidden_size=768, num_layers=12, vocab_size=40000,
                                  output_frac=1.0)),  # GPT
    ("3.2e+21", 8000, 500000, dict(hidden_size=1024, num_layers=24, vocab_size=50265)),  # RoBERTa
    ("3.1e+22", 4096, 1.5e6, dict(hidden_size=4096, num_layers=12, vocab_size=30000,
                                  embedding_size=128)),  # ALBERT
])
def test_mlm_paper_totals(quoted, batch, steps, kwargs):
  assert f"{batch * steps * flops.transformer_train_flops_per_example(**kwargs):.1e}" == quoted


@pytest.mark.parametrize("quoted,kwargs", [
    ("3.7e+09", dict(hidden_size=256, num_layers=12, embedding_size=128)),  # BERT/ELECTRA-Small
    ("2.9e+10", dict(hidden_size=768, num_layers=12)),  # BERT/ELECTRA-Base
    ("3.0e+10", dict(hidden_size=768, num_layers=12, vocab_size=40000)),  # GPT
])
def test_inference_paper_values(quoted, kwargs):
  assert f"{flops.inference_flops_per_example(seq_length=128, **kwargs):.1e}" == quoted


def test_untied_generator_and_options_change_counts():
  base = dict(hidden_size=256, num_layers=2, generator_hidden_size=64, seq_length=128,
              embedding_size=128)
  tied = flops.pretraining_train_flops_per_example(**base)
  untied = flops.pretraining_train_flops_per_example(tied_embeddings=False, **base)
  # untied: the generator's own table is 64 wide (cheaper one-hot lookups, no projection)
  assert untied < tied
  assert flops.block_flops(256, 128, decoder=True) > flops.block_flops(256, 128)
  assert flops.input_embedding_flops(256, 128, sparse_embed_lookup=True) < \
      flops.input_embedding_flops(256, 128)


def test_bad_values_raise():
  with pytest.raises(ValueError, match="hidden_size"):
    flops.block_flops(0, 128)
  with pytest.raises(ValueError, match="head_size needs num_heads"):
    flops.block_flops(256, 128, head_size=64)
  with pytest.raises(ValueError, match="batch_size"):
    flops.flops_per_train_step(0, hidden_size=256, num_layers=2, generator_hidden_size=64)


def _model(tmp_path, **hparams):
  from electra_tf.config import PretrainingConfig
  from electra_tf.pretraining.builder import build_pretraining_model

  config = PretrainingConfig("m", str(tmp_path), model_size="small", max_seq_length=128,
                             model_hparam_overrides={"num_hidden_layers": 2}, **hparams)
  return config, build_pretraining_model(config, vocab={})


def test_model_count_is_the_official_count_with_gathered_lookups(tmp_path):
  # mask_prob 0.155 gives 20 predictions per 128 tokens: the official output_frac
  config, model = _model(tmp_path, mask_prob=0.155)
  assert config.max_predictions_per_seq == 20
  ours = flops.train_flops_per_example(model, 128)
  official = flops.pretraining_train_flops_per_example(
      hidden_size=256, num_layers=2, generator_hidden_size=64, seq_length=128,
      embedding_size=128)
  one_hot_lookup = 2.0 * 128 * (2 * 128 * 30522)  # train x2, per token 2 e V, per tower
  assert official - ours == pytest.approx(2 * one_hot_lookup, rel=1e-9)


def test_model_count_follows_the_towers_each_variant_runs(tmp_path):
  def count(**hparams):
    return flops.train_flops_per_example(_model(tmp_path, **hparams)[1], 128)

  disc = flops.TowerShape(256, 2, 128, 1024, 4)
  frac = 19 / 128
  only_disc = flops.pretraining_flops_per_example(128, 30522, disc, None,
                                                  sparse_embed_lookup=True)
  disc_as_mlm = flops.pretraining_flops_per_example(128, 30522, None, disc, output_frac=frac,
                                                    sparse_embed_lookup=True)
  assert count(uniform_generator=True) == only_disc
  assert count(electra_objective=False) == disc_as_mlm
  assert count(untied_generator=False) == only_disc + disc_as_mlm
  electric = count(electra_objective=False, electric_objective=True)
  two_towers = electric - only_disc
  tower = 2 * flops.block_flops(64, 128, 256, 1) + flops.input_embedding_flops(
      64, 128, 30522, 128, sparse_embed_lookup=True)
  cloze_head = flops.mlm_output_flops(128, 128, 30522, 128, output_frac=1.0)
  assert two_towers == pytest.approx(2 * (2 * tower + cloze_head), rel=1e-12)
