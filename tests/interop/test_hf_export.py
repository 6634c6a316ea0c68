"""Hugging Face export: names, shapes, transposes, config.json, round trip, HF-semantics forward.

The forward check runs a numpy re-implementation of HF's ``ElectraForPreTraining`` /
``ElectraForMaskedLM`` (``x @ W.T + b``, LayerNorm eps from config.json, erf gelu, the
``finfo.min`` attention mask) that reads only the exported folder, and compares it with our TF
model and the official golden outputs.
"""

import json
import math
import re

import numpy as np
import pytest
from safetensors.numpy import load_file

from electra_tf import checkpoints
from electra_tf.interop import hf_export
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.encoder import Transformer
from electra_tf.modeling.heads import DiscriminatorHead, MaskedLMHead

ATOL = 1e-5


# ---------------------------------------------------------------- models under test


def _build(disc_cfg, gen_cfg, embedding_size, generator="small", untied_embeddings=False):
  """Our towers and heads. generator: "small" (generator/ tower), "tied" (head on electra/),
  "electric" (two towers), None (discriminator only)."""
  disc = Transformer(disc_cfg, embedding_size=embedding_size, scope="electra")
  disc_head = DiscriminatorHead(disc_cfg.hidden_size, disc_cfg.hidden_act)
  disc.build(None)
  disc_head.build([None, disc_cfg.hidden_size])
  layers = {"disc": disc, "disc_head": disc_head}
  if generator == "small":
    shared = None if untied_embeddings else disc.embeddings
    gen = Transformer(gen_cfg, embedding_size=gen_cfg.hidden_size, embeddings=shared,
                      scope="generator")
    gen.build(None)
    layers["gen"] = gen
  elif generator == "tied":
    layers["gen"] = disc
  elif generator == "electric":
    for t, s in (("ltr", "generator_ltr"), ("rtl", "generator_rtl")):
      layers[s] = Transformer(gen_cfg, embeddings=disc.embeddings, attention_type=t, scope=s)
      layers[s].build(None)
    layers["cloze"] = MaskedLMHead(disc.embeddings, disc_cfg.hidden_act, scope="cloze_predictions")
    layers["cloze"].build([None, 2 * gen_cfg.hidden_size])
  if "gen" in layers:
    layers["gen_head"] = MaskedLMHead(layers["gen"].embeddings, disc_cfg.hidden_act)
    layers["gen_head"].build([None, layers["gen"].config.hidden_size])
  variables = checkpoints.variables_by_name(
      v for layer in layers.values() for v in layer.weights)
  return layers, variables


@pytest.fixture(scope="module")
def reference(reference_dir, tmp_path_factory):
  """The official electra_small_2l checkpoint in our model, exported once."""
  folder = reference_dir / "electra_small_2l"
  disc_cfg = BertConfig.from_json_file(str(folder / "bert_config.json"))
  gen_cfg = BertConfig.from_json_file(str(folder / "generator_bert_config.json"))
  # 128 in the big set, 16 in tests/golden
  e = json.loads((folder / "pretraining_config_resolved.json").read_text())["embedding_size"]
  layers, variables = _build(disc_cfg, gen_cfg, e)
  report = checkpoints.load_tf1_checkpoint(variables, str(folder / "model.ckpt"),
                                           allow_unused=False)
  assert not report.missing and not report.unused_other
  out = tmp_path_factory.mktemp("hf")
  written = hf_export.export_hf(variables, disc_cfg, gen_cfg, e, str(out))
  return {"layers": layers, "variables": variables, "disc_cfg": disc_cfg, "gen_cfg": gen_cfg,
          "embedding_size": e, "out": out, "written": written,
          "golden": dict(np.load(folder / "golden.npz"))}


def _randomize(variables, seed):
  """Every variable random (biases, betas non-zero, gammas != 1) so a swap cannot hide."""
  rng = np.random.RandomState(seed)
  for name in sorted(variables):
    v = variables[name]
    scale = 0.2 if name.endswith(("kernel", "_embeddings")) else 0.1
    value = rng.normal(0.0, scale, v.shape.as_list())
    if name.endswith("gamma"):
      value += 1.0
    v.assign(value.astype(np.float32))


# ---------------------------------------------------------------- independent name mapping


def _expected_tf_name(hf_name, tower, embeddings):
  """HF name -> (TF1 name, transposed?), written independently of hf_export's tables."""
  n = hf_name
  n = n.replace("discriminator_predictions.dense_prediction", "discriminator_predictions.dense_1")
  n = n.replace("generator_lm_head.bias", "generator_predictions.output_bias")
  if n.startswith("electra.embeddings."):
    n = embeddings.replace("/", ".") + n[len("electra.embeddings"):]
  elif n.startswith("electra."):
    n = tower + n[len("electra"):]
  n = re.sub(r"\.layer\.(\d+)\.", r".layer_\1.", n)
  parts = n.split(".")
  leaf = parts.pop()
  if parts[-1].endswith("_embeddings"):
    return "/".join(parts), False
  if parts[-1] == "LayerNorm":
    return "/".join(parts + [{"weight": "gamma", "bias": "beta"}[leaf]]), False
  if leaf == "output_bias":
    return "/".join(parts + [leaf]), False
  return "/".join(parts + [{"weight": "kernel", "bias": "bias"}[leaf]]), leaf == "weight"


def _check_tensors(folder, variables, tower, embeddings, n_layers, has_project):
  tensors = load_file(str(folder / "model.safetensors"))
  covered = set()
  for hf_name, array in tensors.items():
    assert array.dtype == np.float32, hf_name
    if hf_name == "generator_lm_head.weight":
      tf_name, transposed = embeddings + "/word_embeddings", False
    else:
      tf_name, transposed = _expected_tf_name(hf_name, tower, embeddings)
    ours = variables[tf_name].numpy()
    np.testing.assert_array_equal(array, ours.T if transposed else ours, err_msg=hf_name)
    covered.add(tf_name)
  # Every tensor HF's model holds is there.
  per_layer = 16  # q, k, v, attention out: 2 each; 2 LayerNorms: 2 each; 2 dense: 2 each
  # generator head: dense, LayerNorm, output bias; the tied lm_head.weight is not stored
  head = 4 if "discriminator_predictions.dense.weight" in tensors else 5
  assert len(tensors) == 5 + 2 * has_project + per_layer * n_layers + head
  return covered


# ---------------------------------------------------------------- numpy HF forward pass

_erf = np.vectorize(math.erf)
_ACT = {"gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
        "relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh, "linear": lambda x: x}


def _hf_params(folder):
  cfg = json.loads((folder / "config.json").read_text())
  tensors = load_file(str(folder / "model.safetensors"))
  return cfg, {k: v.astype(np.float64) for k, v in tensors.items()}


def _linear(p, name, x):
  return x @ p[name + ".weight"].T + p[name + ".bias"]


def _layer_norm(p, name, x, eps):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * p[name + ".weight"] + p[name + ".bias"]


def _hf_electra_model(cfg, p, input_ids, attention_mask, token_type_ids):
  """HF ``ElectraModel.forward`` in eval mode: [B, T] ids -> [B, T, hidden]."""
  eps, act = cfg["layer_norm_eps"], _ACT[cfg["hidden_act"]]
  seq = input_ids.shape[1]
  x = (p["electra.embeddings.word_embeddings.weight"][input_ids]
       + p["electra.embeddings.token_type_embeddings.weight"][token_type_ids]
       + p["electra.embeddings.position_embeddings.weight"][np.arange(seq)][None])
  x = _layer_norm(p, "electra.embeddings.LayerNorm", x, eps)
  if cfg["embedding_size"] != cfg["hidden_size"]:
    x = _linear(p, "electra.embeddings_project", x)
  heads = cfg["num_attention_heads"]
  d = cfg["hidden_size"] // heads
  mask = (1.0 - attention_mask[:, None, None, :]) * np.finfo(np.float32).min
  split = lambda t: t.reshape(t.shape[0], seq, heads, d).transpose(0, 2, 1, 3)
  for i in range(cfg["num_hidden_layers"]):
    pre = f"electra.encoder.layer.{i}"
    q, k, v = (split(_linear(p, f"{pre}.attention.self.{n}", x)) for n in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + mask
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape[0], seq, -1)
    att = _layer_norm(p, f"{pre}.attention.output.LayerNorm",
                      _linear(p, f"{pre}.attention.output.dense", ctx) + x, eps)
    inter = act(_linear(p, f"{pre}.intermediate.dense", att))
    x = _layer_norm(p, f"{pre}.output.LayerNorm", _linear(p, f"{pre}.output.dense", inter) + att,
                    eps)
  return x


def hf_discriminator_logits(folder, input_ids, attention_mask, token_type_ids):
  """HF ``ElectraForPreTraining`` logits [B, T] from the exported folder only."""
  cfg, p = _hf_params(folder)
  assert cfg["architectures"] == ["ElectraForPreTraining"]
  x = _hf_electra_model(cfg, p, input_ids, attention_mask, token_type_ids)
  x = _ACT[cfg["hidden_act"]](_linear(p, "discriminator_predictions.dense", x))
  return _linear(p, "discriminator_predictions.dense_prediction", x)[..., 0]


def hf_generator_logits(folder, input_ids, attention_mask, token_type_ids):
  """HF ``ElectraForMaskedLM`` logits [B, T, V] (generator head: gelu, always)."""
  cfg, p = _hf_params(folder)
  assert cfg["architectures"] == ["ElectraForMaskedLM"]
  x = _hf_electra_model(cfg, p, input_ids, attention_mask, token_type_ids)
  x = _ACT["gelu"](_linear(p, "generator_predictions.dense", x))
  x = _layer_norm(p, "generator_predictions.LayerNorm", x, cfg["layer_norm_eps"])
  assert cfg["tie_word_embeddings"] and "generator_lm_head.weight" not in p
  tied = {**p, "generator_lm_head.weight": p["electra.embeddings.word_embeddings.weight"]}
  return _linear(tied, "generator_lm_head", x)  # tied output layer, as transformers loads it


# ---------------------------------------------------------------- tests on the reference model


def test_reference_export_tensors_match_ours(reference):
  out, variables = reference["out"], reference["variables"]
  assert reference["written"] == {"discriminator": str(out / "discriminator"),
                                  "generator": str(out / "generator")}
  covered = _check_tensors(out / "discriminator", variables, "electra", "electra/embeddings",
                           n_layers=2, has_project=True)
  covered |= _check_tensors(out / "generator", variables, "generator", "electra/embeddings",
                            n_layers=2, has_project=True)
  assert covered == set(variables)  # every model variable is exported somewhere
  # big set: E 128, H 256, h 64; tests/golden: E 16, H 32, h 8
  e, big, small = (reference["embedding_size"], reference["disc_cfg"].hidden_size,
                   reference["gen_cfg"].hidden_size)
  disc = load_file(str(out / "discriminator" / "model.safetensors"))
  assert disc["electra.embeddings_project.weight"].shape == (big, e)  # [out, in]
  assert disc["discriminator_predictions.dense_prediction.weight"].shape == (1, big)
  gen = load_file(str(out / "generator" / "model.safetensors"))
  assert gen["generator_predictions.dense.weight"].shape == (e, small)
  assert "generator_lm_head.weight" not in gen  # tied, as transformers writes it
  assert gen["electra.encoder.layer.1.intermediate.dense.weight"].shape == (4 * small, small)


def test_reference_config_json(reference):
  out, disc_cfg, gen_cfg = reference["out"], reference["disc_cfg"], reference["gen_cfg"]
  for sub, cfg, arch in (("discriminator", disc_cfg, "ElectraForPreTraining"),
                         ("generator", gen_cfg, "ElectraForMaskedLM")):
    got = json.loads((out / sub / "config.json").read_text())
    assert got["model_type"] == "electra"
    assert got["architectures"] == [arch]
    assert got["embedding_size"] == reference["embedding_size"]
    assert got["layer_norm_eps"] == 1e-12 and got["pad_token_id"] == 0
    for field, value in cfg.to_dict().items():
      assert got[field] == value, (sub, field)
  gen = json.loads((out / "generator" / "config.json").read_text())
  h = disc_cfg.hidden_size // 4  # generator_hidden_size 0.25: 64 (big set), 8 (tests/golden)
  assert (gen["hidden_size"], gen["num_attention_heads"], gen["intermediate_size"]) == (
      h, max(1, h // 64), 4 * h)


def test_reference_round_trip_bit_identical(reference):
  back = hf_export.load_hf_export(str(reference["out"]))
  variables = reference["variables"]
  assert set(back) == set(variables)
  for name, v in variables.items():
    assert back[name].dtype == np.float32 and back[name].shape == tuple(v.shape), name
    np.testing.assert_array_equal(back[name], v.numpy(), err_msg=name)
  # A single model folder reads back on its own too.
  disc_only = hf_export.load_hf_export(str(reference["out"] / "discriminator"))
  assert set(disc_only) == {n for n in variables if not n.startswith("generator")}


def test_reference_hf_forward_matches_ours_and_official(reference):
  g, layers = reference["golden"], reference["layers"]
  ids, mask, seg = g["fake_input_ids"], g["input_mask"], g["segment_ids"]
  hf = hf_discriminator_logits(reference["out"] / "discriminator", ids, mask, seg)
  ours = layers["disc_head"](layers["disc"](ids, mask, seg)["sequence_output"]).numpy()
  assert np.abs(hf - ours).max() <= ATOL
  assert np.abs(hf - g["disc_logits"]).max() <= ATOL
  # Generator: HF masked-LM logits at the official masked slots.
  logits = hf_generator_logits(reference["out"] / "generator", g["masked_input_ids"], mask, seg)
  rows, slots = g["gen_mlm_logits_real_index"].T
  positions = g["masked_lm_positions"][rows, slots]
  assert np.abs(logits[rows, positions] - g["gen_mlm_logits_real"]).max() <= ATOL


# ---------------------------------------------------------------- other layouts


def _tiny(hidden, heads=2, layers=2, act="gelu"):
  return BertConfig(vocab_size=37, hidden_size=hidden, num_hidden_layers=layers,
                    num_attention_heads=heads, intermediate_size=4 * hidden, hidden_act=act,
                    max_position_embeddings=16, type_vocab_size=3)


def _inputs(seed, batch=2, seq=9, vocab=37):
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, vocab, (batch, seq)).astype(np.int32)
  mask = np.ones((batch, seq), np.int32)
  mask[1, 6:] = 0
  seg = rng.randint(0, 3, (batch, seq)).astype(np.int32)
  return ids, mask, seg


@pytest.mark.parametrize("layout", ["untied_embeddings", "tied_generator", "e_equals_h"])
def test_other_layouts_round_trip_and_forward(tmp_path, layout):
  disc_cfg, gen_cfg, e = _tiny(24, heads=3, layers=3), _tiny(8, heads=2, layers=1), 12
  kwargs = {}
  if layout == "untied_embeddings":
    layers, variables = _build(disc_cfg, gen_cfg, e, untied_embeddings=True)
    kwargs["untied_generator_embeddings"] = True
  elif layout == "tied_generator":
    layers, variables = _build(disc_cfg, None, e, generator="tied")
  else:
    e = disc_cfg.hidden_size
    layers, variables = _build(disc_cfg, gen_cfg, e)
  _randomize(variables, seed=3)
  hf_export.export_hf(variables, disc_cfg, gen_cfg if layout != "tied_generator" else None,
                      e, str(tmp_path), **kwargs)

  back = hf_export.load_hf_export(str(tmp_path))
  assert set(back) == set(variables)
  for name, v in variables.items():
    np.testing.assert_array_equal(back[name], v.numpy(), err_msg=name)

  disc_tensors = load_file(str(tmp_path / "discriminator" / "model.safetensors"))
  assert ("electra.embeddings_project.weight" in disc_tensors) == (e != disc_cfg.hidden_size)
  gen_cfg_json = json.loads((tmp_path / "generator" / "config.json").read_text())
  gen_tower = layers["gen"]
  assert gen_cfg_json["hidden_size"] == gen_tower.config.hidden_size
  assert gen_cfg_json["embedding_size"] == gen_tower.embedding_size

  ids, mask, seg = _inputs(5)
  hf = hf_discriminator_logits(tmp_path / "discriminator", ids, mask, seg)
  ours = layers["disc_head"](layers["disc"](ids, mask, seg)["sequence_output"]).numpy()
  assert np.abs(hf - ours).max() <= ATOL
  hf_mlm = hf_generator_logits(tmp_path / "generator", ids, mask, seg)
  ours_mlm = layers["gen_head"](gen_tower(ids, mask, seg)["sequence_output"]).numpy()
  assert np.abs(hf_mlm - ours_mlm).max() <= ATOL


def test_discriminator_only_and_relu(tmp_path):
  """No generator (uniform generator): one folder; hidden_act relu carried into config.json."""
  disc_cfg = _tiny(16, act="relu")
  layers, variables = _build(disc_cfg, None, 8, generator=None)
  _randomize(variables, seed=4)
  written = hf_export.export_hf(variables, disc_cfg, None, 8, str(tmp_path))
  assert set(written) == {"discriminator"} and not (tmp_path / "generator").exists()
  cfg = json.loads((tmp_path / "discriminator" / "config.json").read_text())
  assert cfg["hidden_act"] == "relu"
  back = hf_export.load_hf_export(str(tmp_path))
  assert set(back) == set(variables)
  for name, v in variables.items():
    np.testing.assert_array_equal(back[name], v.numpy(), err_msg=name)
  ids, mask, seg = _inputs(6)
  hf = hf_discriminator_logits(tmp_path / "discriminator", ids, mask, seg)
  ours = layers["disc_head"](layers["disc"](ids, mask, seg)["sequence_output"]).numpy()
  assert np.abs(hf - ours).max() <= ATOL


# ---------------------------------------------------------------- errors


def test_electric_is_rejected(tmp_path):
  disc_cfg, gen_cfg = _tiny(16), _tiny(8)
  _, variables = _build(disc_cfg, gen_cfg, 8, generator="electric")
  with pytest.raises(ValueError, match="Electric"):
    hf_export.export_hf(variables, disc_cfg, gen_cfg, 8, str(tmp_path))
  assert not any(tmp_path.iterdir())


def test_bad_inputs_are_clear_errors(tmp_path):
  disc_cfg, gen_cfg = _tiny(16), _tiny(8)
  _, variables = _build(disc_cfg, gen_cfg, 8)
  arrays = {k: v.numpy() for k, v in variables.items()}
  arrays["global_step"] = np.int64(7)  # training state is ignored
  arrays["electra/embeddings/word_embeddings/adam_m"] = arrays["electra/embeddings/word_embeddings"]
  hf_export.export_hf(arrays, disc_cfg, gen_cfg, 8, str(tmp_path / "ok"))
  with pytest.raises(ValueError, match="shape of electra/embeddings/word_embeddings"):
    hf_export.export_hf(arrays, disc_cfg, gen_cfg, 16, str(tmp_path / "a"))
  with pytest.raises(ValueError, match="untied_generator_embeddings"):
    hf_export.export_hf(arrays, disc_cfg, gen_cfg, 8, str(tmp_path / "b"),
                        untied_generator_embeddings=True)
  with pytest.raises(ValueError, match="task_specific/rte/dense/kernel"):
    hf_export.export_hf({**arrays, "task_specific/rte/dense/kernel": np.zeros((16, 2))},
                        disc_cfg, gen_cfg, 8, str(tmp_path / "c"))
  missing = dict(arrays)
  del missing["generator/encoder/layer_1/output/dense/bias"]
  with pytest.raises(ValueError, match="generator/encoder/layer_1/output/dense/bias"):
    hf_export.export_hf(missing, disc_cfg, gen_cfg, 8, str(tmp_path / "d"))
  with pytest.raises(ValueError, match="gelu"):
    hf_export.export_hf(arrays, disc_cfg.replace(hidden_act="relu"), gen_cfg, 8,
                        str(tmp_path / "e"))
  with pytest.raises(ValueError, match="nothing to export"):
    hf_export.export_hf({k: v for k, v in arrays.items() if k.startswith("electra/")},
                        disc_cfg, gen_cfg, 8, str(tmp_path / "f"))
  with pytest.raises(FileNotFoundError, match="no HF export"):
    hf_export.load_hf_export(str(tmp_path / "a"))
  # A corrupted folder: the tied LM head no longer equals the word embeddings.
  from safetensors.numpy import save_file
  path = tmp_path / "ok" / "generator" / "model.safetensors"
  tensors = load_file(str(path))
  tensors["generator_lm_head.weight"] = tensors["electra.embeddings.word_embeddings.weight"] + 1
  save_file(tensors, str(path))
  with pytest.raises(ValueError, match="tied"):
    hf_export.load_hf_export(str(tmp_path / "ok"))
