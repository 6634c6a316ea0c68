"""Hugging Face import: golden outputs of a transformers-written pair, exact round trips with the
exporter, other shapes, single folders, errors; tokenizer files for HF folders."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file, save_file

from electra_tf.config import PretrainingConfig
from electra_tf.interop import hf_export, hf_tokenizer
from electra_tf.model_sizes import get_bert_config, get_generator_config
from electra_tf.pretraining import masking
from electra_tf.pretraining.builder import build_pretraining_model
from electra_tf.reading import hf_import

ATOL = 1e-5


def _model(hparams, variables=None):
  """Our PretrainingModel built from imported hparams, loaded with ``variables`` (all of them,
  nothing left over)."""
  config = PretrainingConfig("hf", "/nonexistent", **hparams)
  model = build_pretraining_model(config, vocab={})
  if variables is not None:
    ours = model.tf1_variables()
    assert set(ours) == set(variables)
    for name, v in ours.items():
      v.assign(variables[name])
  return config, model


def _inputs(ids, mask, segments):
  return masking.Inputs(tf.constant(ids, tf.int32), tf.constant(mask, tf.int32),
                        tf.constant(segments, tf.int32))


@pytest.fixture(scope="module")
def hf_ref(reference_dir):
  return reference_dir / "hf_electra_2l"


def _configs(hf_ref):
  """The lane's (discriminator, generator) config.json: shapes are read, never hard-coded."""
  return tuple(json.loads((hf_ref / name / "config.json").read_text())
               for name in ("discriminator", "generator"))


def test_import_reproduces_transformers_outputs(hf_ref):
  d, g = _configs(hf_ref)
  result = hf_import.import_hf(str(hf_ref))
  assert result.summary == (
    f"Hugging Face ELECTRA: vocab_size {d['vocab_size']}, embedding_size {d['embedding_size']}, "
    f"hidden {d['hidden_size']} x {d['num_hidden_layers']} layers, "
    f"{d['num_attention_heads']} heads, generator {g['hidden_size'] / d['hidden_size']:g} x "
    f"{g['num_hidden_layers']} layers (tied embeddings)")
  assert g["hidden_size"] / d["hidden_size"] == 0.25  # both lanes: the official small ratio
  assert result.hparams["do_lower_case"] is True
  assert result.vocab_file == str(hf_ref / "discriminator" / "vocab.txt")
  assert result.hparams["untied_generator_embeddings"] is False
  assert "generator/embeddings/word_embeddings" not in result.variables
  _, model = _model(result.hparams, result.variables)
  g = dict(np.load(hf_ref / "golden.npz"))
  inputs = _inputs(g["input_ids"], g["input_mask"], g["segment_ids"])
  sequence, logits = model.rtd_logits(inputs)
  np.testing.assert_allclose(sequence.numpy(), g["disc_sequence_output"], rtol=0, atol=ATOL)
  np.testing.assert_allclose(logits.numpy(), g["disc_logits"], rtol=0, atol=ATOL)
  hidden = model.generator_hidden(inputs)
  np.testing.assert_allclose(hidden.numpy(), g["gen_sequence_output"], rtol=0, atol=ATOL)
  gen_logits = model.generator_head(hidden).numpy()
  assert gen_logits.shape == g["gen_logits"].shape
  np.testing.assert_allclose(gen_logits, g["gen_logits"], rtol=0, atol=ATOL)


def test_hf_ours_hf_is_bit_identical(hf_ref, tmp_path):
  result = hf_import.import_hf(str(hf_ref))
  config = PretrainingConfig("hf", "/nonexistent", **result.hparams)
  bert = get_bert_config(config)
  written = hf_export.export_hf(result.variables, bert, get_generator_config(config, bert),
                                config.embedding_size, str(tmp_path))
  for name, folder in written.items():
    original = load_file(str(hf_ref / name / "model.safetensors"))
    again = load_file(os.path.join(folder, "model.safetensors"))
    assert sorted(again) == sorted(original), name  # the tied lm_head.weight is not stored
    for key, value in original.items():
      assert again[key].dtype == value.dtype and again[key].shape == value.shape, key
      np.testing.assert_array_equal(again[key], value, err_msg=key)
    cfg_in = json.load(open(hf_ref / name / "config.json"))
    cfg_out = json.load(open(os.path.join(folder, "config.json")))
    assert set(cfg_out) - set(cfg_in) == {"tie_word_embeddings"}  # transformers' default: true
    for key in set(cfg_out) & set(cfg_in):
      assert cfg_out[key] == cfg_in[key], key
  # ... and back again gives the same TF1 tensors.
  back = hf_import.import_hf(str(tmp_path))
  assert sorted(back.variables) == sorted(result.variables)
  for key, value in result.variables.items():
    np.testing.assert_array_equal(back.variables[key], value, err_msg=key)
  assert back.hparams == {**result.hparams, "do_lower_case": True}


def _randomize(model, seed):
  rng = np.random.RandomState(seed)
  for name, v in sorted(model.tf1_variables().items()):
    value = rng.normal(0.0, 0.2, v.shape.as_list())
    v.assign((value + 1.0 if name.endswith("gamma") else value).astype(np.float32))


@pytest.mark.parametrize("untied", [False, True])
def test_synthetic_export_imports_without_fixed_shapes(tmp_path, untied):
  """E == H, 3 layers, a half-width generator with 2 layers, vocab 97: exported by us, imported
  back exactly, and the rebuilt model computes the same outputs."""
  hparams = {"model_size": "base", "vocab_size": 97, "generator_hidden_size": 0.5,
             "generator_layers": 0.67, "untied_generator_embeddings": untied,
             "model_hparam_overrides": {"hidden_size": 128, "num_hidden_layers": 3}}
  config, model = _model(hparams)
  _randomize(model, 3)
  variables = {k: v.numpy() for k, v in model.tf1_variables().items()}
  hf_export.export_hf(variables, model.discriminator.config, model.generator_config, None,
                      str(tmp_path), untied_generator_embeddings=untied)
  disc_cfg = json.load(open(tmp_path / "discriminator" / "config.json"))
  assert disc_cfg["embedding_size"] == disc_cfg["hidden_size"] == 128
  assert disc_cfg["num_hidden_layers"] == 3
  result = hf_import.import_hf(str(tmp_path))
  assert sorted(result.variables) == sorted(variables)
  for key, value in variables.items():
    np.testing.assert_array_equal(result.variables[key], value, err_msg=key)
  h = result.hparams
  assert (h["vocab_size"], h["embedding_size"], h["generator_hidden_size"]) == (97, 128, 0.5)
  assert h["untied_generator_embeddings"] is untied
  assert result.vocab_file is None
  config2, model2 = _model(h, result.variables)
  assert model2.discriminator.config == model.discriminator.config
  assert model2.generator_config == model.generator_config
  rng = np.random.RandomState(0)
  inputs = _inputs(rng.randint(0, 97, [2, 9]), np.ones([2, 9]), np.zeros([2, 9]))
  for a, b in zip(model.rtd_logits(inputs), model2.rtd_logits(inputs), strict=True):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  np.testing.assert_array_equal(model.generator_head(model.generator_hidden(inputs)).numpy(),
                                model2.generator_head(model2.generator_hidden(inputs)).numpy())


def test_single_folders(hf_ref, tmp_path):
  disc = hf_import.import_hf(str(hf_ref / "discriminator"))
  assert disc.hparams["uniform_generator"] is True
  assert not any(k.startswith("generator") for k in disc.variables)
  _model(disc.hparams, disc.variables)
  gen = hf_import.import_hf(str(hf_ref / "generator"))
  assert gen.hparams["electra_objective"] is False and gen.summary.endswith("masked LM only")
  gen_cfg = _configs(hf_ref)[1]
  assert gen.hparams["model_hparam_overrides"] == {
    "hidden_size": gen_cfg["hidden_size"], "num_hidden_layers": gen_cfg["num_hidden_layers"]}
  _model(gen.hparams, gen.variables)  # masked-LM head on the electra tower
  pair = hf_import.import_hf(str(hf_ref / "discriminator"), generator=str(hf_ref / "generator"))
  assert pair.summary == hf_import.import_hf(str(hf_ref)).summary
  # A bare ElectraModel: no head, names without the "electra." prefix.
  bare = tmp_path / "bare"
  bare.mkdir()
  tensors = load_file(str(hf_ref / "discriminator" / "model.safetensors"))
  save_file({k[len("electra."):]: v for k, v in tensors.items() if k.startswith("electra.")},
            str(bare / "model.safetensors"))
  cfg = json.load(open(hf_ref / "discriminator" / "config.json"))
  json.dump({**cfg, "architectures": ["ElectraModel"]}, open(bare / "config.json", "w"))
  result = hf_import.import_hf(str(bare))
  assert "no discriminator head (ElectraModel)" in result.summary
  assert sorted(result.variables) == sorted(k for k in disc.variables
                                            if not k.startswith("discriminator_predictions"))


def _copy(src, dst):
  shutil.copytree(src, dst)
  return dst


def test_errors_are_one_line(hf_ref, tmp_path):
  folder = _copy(hf_ref / "discriminator", tmp_path / "d")
  os.rename(folder / "model.safetensors", folder / "pytorch_model.bin")
  with pytest.raises(ValueError, match=r"pytorch_model.bin needs PyTorch, which is not "
                     r"installed; convert it to model.safetensors"):
    hf_import.import_hf(str(folder))
  os.rename(folder / "pytorch_model.bin", folder / "tf_model.h5")
  with pytest.raises(ValueError, match="has only tf_model.h5"):
    hf_import.import_hf(str(folder))
  with pytest.raises(FileNotFoundError, match="no Hugging Face model in"):
    hf_import.import_hf(str(tmp_path / "nothing"))
  bert = _copy(hf_ref / "discriminator", tmp_path / "b")
  json.dump({**json.load(open(bert / "config.json")), "model_type": "bert"},
            open(bert / "config.json", "w"))
  with pytest.raises(ValueError, match="model_type is 'bert', not 'electra'"):
    hf_import.import_hf(str(bert))
  short = _copy(hf_ref / "discriminator", tmp_path / "s")
  json.dump({**json.load(open(short / "config.json")), "num_hidden_layers": 3},
            open(short / "config.json", "w"))
  with pytest.raises(ValueError, match=r"the weights lack electra.encoder.layer.2"):
    hf_import.import_hf(str(short))
  extra = _copy(hf_ref / "discriminator", tmp_path / "e")
  json.dump({**json.load(open(extra / "config.json")), "num_hidden_layers": 1},
            open(extra / "config.json", "w"))
  with pytest.raises(ValueError, match=r"unexpected tensor\(s\) \['electra.encoder.layer.1"):
    hf_import.import_hf(str(extra))
  wide = _copy(hf_ref / "generator", tmp_path / "g")
  json.dump({**json.load(open(wide / "config.json")), "num_attention_heads": 2},
            open(wide / "config.json", "w"))
  h = _configs(hf_ref)[1]["hidden_size"]  # the official generator: 4 h / max(1, h // 64)
  with pytest.raises(ValueError, match=f"the official generator has {4 * h} / {max(1, h // 64)} "
                     f"for hidden_size {h}"):
    hf_import.import_hf(str(hf_ref / "discriminator"), generator=str(wide))


# ---------------------------------------------------------------- tokenizer files


def test_tokenizer_files_follow_transformers(hf_ref, reference_dir, tmp_path):
  vocab_file = str(reference_dir / "vocab.txt")  # the lane's vocabulary, which hf_ref ships
  paths = hf_tokenizer.write_tokenizer_files(str(tmp_path), vocab_file, do_lower_case=True,
                                             model_max_length=int(1e30))
  assert sorted(os.listdir(tmp_path)) == ["special_tokens_map.json", "tokenizer_config.json",
                                          "vocab.txt"]
  assert [os.path.basename(p) for p in paths] == ["vocab.txt", "tokenizer_config.json",
                                                  "special_tokens_map.json"]
  template = hf_ref / "discriminator"
  for name in ("tokenizer_config.json", "special_tokens_map.json"):
    assert json.load(open(tmp_path / name)) == json.load(open(template / name)), name
  assert open(tmp_path / "vocab.txt", "rb").read() == open(template / "vocab.txt", "rb").read()
  cased = hf_tokenizer.tokenizer_config({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3,
                                         "[MASK]": 4, "a": 5}, False)
  assert cased["do_lower_case"] is False and cased["model_max_length"] == 512
  assert sorted(cased["added_tokens_decoder"]) == ["0", "1", "2", "3", "4"]
  assert cased["added_tokens_decoder"]["4"]["content"] == "[MASK]"
  with pytest.raises(ValueError, match=r"the vocabulary lacks special token\(s\) \[MASK\]"):
    hf_tokenizer.tokenizer_config({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}, True)


def test_is_hf_folder_and_assign(hf_ref, reference_dir, tmp_path):
  assert hf_import.is_hf_folder(str(hf_ref))
  assert hf_import.is_hf_folder(str(hf_ref / "generator"))
  assert not hf_import.is_hf_folder(str(reference_dir / "electra_small_2l"))
  assert not hf_import.is_hf_folder(str(tmp_path))
  result = hf_import.import_hf(str(hf_ref))
  _, model = _model(result.hparams)
  hf_import.assign(model.tf1_variables(), result.variables)
  name = "electra/embeddings/word_embeddings"
  np.testing.assert_array_equal(model.tf1_variables()[name].numpy(), result.variables[name])
  partial = dict(result.variables)
  del partial["generator_predictions/output_bias"]
  with pytest.raises(ValueError, match=r"1 variable\(s\) missing .first: "
                     r"\['generator_predictions/output_bias'\]\), 0 unused"):
    hf_import.assign(model.tf1_variables(), partial)


def test_sharded_safetensors(hf_ref, tmp_path):
  folder = _copy(hf_ref / "discriminator", tmp_path / "sharded")
  tensors = load_file(str(folder / "model.safetensors"))
  os.remove(folder / "model.safetensors")
  names = sorted(tensors)
  for i, part in enumerate((names[::2], names[1::2])):
    shard = folder / f"model-0000{i + 1}-of-00002.safetensors"
    save_file({k: tensors[k] for k in part}, str(shard))
  assert sorted(hf_import.load_weights(str(folder))) == names
  whole = hf_import.import_hf(str(hf_ref / "discriminator"))
  result = hf_import.import_hf(str(folder))
  for key, value in whole.variables.items():
    np.testing.assert_array_equal(result.variables[key], value, err_msg=key)
