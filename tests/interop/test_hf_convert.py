"""convert with a Hugging Face folder in: golden outputs through the SavedModel signatures,
exact round trips HF -> ours -> HF and TF1 -> ours -> HF -> ours -> TF1, self-describing output
folders, the tokenizer in every export, shape inference for official checkpoints."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from helpers.checkpoint_asserts import assert_same_checkpoint, max_diff
from safetensors.numpy import load_file

from electra_tf.config import PretrainingConfig
from electra_tf.interop.conversion import EXPORTS, convert
from electra_tf.model_sizes import get_bert_config, get_generator_config
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.reading import checkpoint_hparams, model_dir

ATOL = 1e-5  # HF (PyTorch) and TF sum in different orders, see the reference README


@pytest.fixture(scope="module")
def hf_ref(reference_dir):
  return reference_dir / "hf_electra_2l"


@pytest.fixture(scope="module")
def hf_out(hf_ref, tmp_path_factory):
  """convert --checkpoint hf_electra_2l --output_dir <out> (no hparams)."""
  out = tmp_path_factory.mktemp("hf_in") / "out"
  return out, convert(str(hf_ref), {}, str(out), hf=True)




def test_hf_signatures_reproduce_transformers(hf_ref, hf_out):
  out, result = hf_out
  assert result["signatures"] == ["mlm", "rtd"]
  g = dict(np.load(hf_ref / "golden.npz"))
  inputs = {k: tf.constant(g[k]) for k in ("input_ids", "input_mask", "segment_ids")}
  loaded = tf.saved_model.load(str(out / "saved_model"))
  rtd = loaded.signatures["rtd"](**inputs)
  assert max_diff(rtd["rtd_logits"], g["disc_logits"]) <= ATOL
  assert max_diff(rtd["sequence_output"], g["disc_sequence_output"]) <= ATOL
  batch, length = g["input_ids"].shape
  every = tf.constant(np.tile(np.arange(length, dtype=np.int32), (batch, 1)))
  mlm = loaded.signatures["mlm"](**inputs, masked_lm_positions=every)
  assert mlm["mlm_logits"].shape == g["gen_logits"].shape
  assert max_diff(mlm["mlm_logits"], g["gen_logits"]) <= ATOL
  assert max_diff(mlm["sequence_output"], g["gen_sequence_output"]) <= ATOL


def test_hf_round_trip_is_exact_and_ships_the_tokenizer(hf_ref, hf_out):
  out, _ = hf_out
  for name in ("discriminator", "generator"):
    ref, ours = hf_ref / name, out / "hf" / name
    a, b = load_file(str(ref / "model.safetensors")), load_file(str(ours / "model.safetensors"))
    assert sorted(a) == sorted(b), name
    for key in a:
      assert a[key].dtype == b[key].dtype, key
      np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    cfg_in, cfg_out = (json.load(open(d / "config.json")) for d in (ref, ours))
    for key in set(cfg_in) & set(cfg_out):
      assert cfg_in[key] == cfg_out[key], key
    for tokenizer_file in ("tokenizer_config.json", "special_tokens_map.json"):
      expected = json.load(open(ref / tokenizer_file))
      got = json.load(open(ours / tokenizer_file))
      if tokenizer_file == "tokenizer_config.json":  # ours: the position table's length
        assert got.pop("model_max_length") == cfg_in["max_position_embeddings"]
        expected.pop("model_max_length")
      assert got == expected, (name, tokenizer_file)
    assert (ours / "vocab.txt").read_bytes() == (ref / "vocab.txt").read_bytes()


def test_output_folders_describe_themselves(hf_ref, hf_out):
  out, _ = hf_out
  vocab = (hf_ref / "discriminator" / "vocab.txt").read_bytes()
  stored = model_dir.read_model_hparams(str(out))
  vocab_size = json.load(open(hf_ref / "discriminator" / "config.json"))["vocab_size"]
  assert stored["do_lower_case"] is True and stored["vocab_size"] == vocab_size
  for sub in ("",) + EXPORTS:
    assert (out / sub / "vocab.txt").read_bytes() == vocab, sub
    assert model_dir.read_model_hparams(str(out / sub)) == stored, sub
  for saved_model in ("saved_model", "encoder"):
    assert (out / saved_model / "assets" / "vocab.txt").read_bytes() == vocab
    loaded = tf.saved_model.load(str(out / saved_model))
    assert open(loaded.vocab_file.asset_path.numpy().decode(), "rb").read() == vocab
  config = PretrainingConfig("x", "/x", **stored)
  bert = get_bert_config(config)
  disc_cfg = json.load(open(hf_ref / "discriminator" / "config.json"))
  gen_cfg = json.load(open(hf_ref / "generator" / "config.json"))
  for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
    assert getattr(bert, key) == disc_cfg[key], key
    assert getattr(get_generator_config(config, bert), key) == gen_cfg[key], key
  # The output folder is itself a model path: converting it again needs nothing else.
  again = convert(str(out), {}, str(out.parent / "again"))
  assert_same_checkpoint(str(out / "tf1" / "model.ckpt"), again["tf1"])


def test_tf1_to_hf_and_back_is_bit_identical(reference_dir, tmp_path, vocab_file):
  folder = reference_dir / "electra_small_2l"
  first = convert(str(folder / "model.ckpt"), {}, str(tmp_path / "a"), hf=True,
                  vocab_file=vocab_file)
  assert first["hf"] == str(tmp_path / "a" / "hf")
  second = convert(first["hf"], {}, str(tmp_path / "b"), hf=True)
  assert_same_checkpoint(str(folder / "model.ckpt"), second["tf1"])
  for name in ("discriminator", "generator"):
    a = load_file(str(tmp_path / "a" / "hf" / name / "model.safetensors"))
    b = load_file(str(tmp_path / "b" / "hf" / name / "model.safetensors"))
    assert sorted(a) == sorted(b)
    for key in a:
      np.testing.assert_array_equal(a[key], b[key], err_msg=key)
  assert (tmp_path / "b" / "vocab.txt").read_bytes() == open(vocab_file, "rb").read()


def test_official_checkpoint_without_hparams_is_inferred(reference_dir, tmp_path, capsys):
  folder = reference_dir / "electra_small_2l"
  copy = tmp_path / "released"
  copy.mkdir()
  for name in os.listdir(folder):
    if name.startswith("model.ckpt") or name == "checkpoint":
      shutil.copy(folder / name, copy / name)
  shutil.copy(reference_dir / "vocab.txt", copy / "vocab.txt")  # as in the released zips
  result = convert(str(copy), {}, str(tmp_path / "out"))
  # The lane's shapes, from the files the official code wrote beside its checkpoint.
  resolved = json.load(open(folder / "pretraining_config_resolved.json"))
  disc_json = json.load(open(folder / "bert_config.json"))
  gen_json = json.load(open(folder / "generator_bert_config.json"))
  line = (f"inferred from checkpoint: vocab_size {resolved['vocab_size']}, embedding_size "
          f"{resolved['embedding_size']}, hidden {disc_json['hidden_size']} x "
          f"{disc_json['num_hidden_layers']} layers, generator "
          f"{resolved['generator_hidden_size']:g} x {gen_json['num_hidden_layers']} layers "
          "(tied embeddings)")
  assert line in capsys.readouterr().out.splitlines()
  assert_same_checkpoint(str(folder / "model.ckpt"), result["tf1"])
  stored = model_dir.read_model_hparams(str(tmp_path / "out"))
  config = PretrainingConfig("x", "/x", **stored)
  bert = get_bert_config(config)
  # A checkpoint has no head count (shapes cannot tell): the official rule, heads_for(hidden),
  # gives it. The extended lane's file has exactly that (4 for 256); the golden lane's tiny
  # electra_small_2l overrides it (2 heads at hidden 32; the rule gives 1), so take the rule's.
  heads = checkpoint_hparams.heads_for(disc_json["hidden_size"])
  assert bert.num_attention_heads == heads
  assert bert == BertConfig.from_dict({**disc_json, "num_attention_heads": heads})
  assert get_generator_config(config, bert) == BertConfig.from_json_file(
    str(folder / "generator_bert_config.json"))
  for field in ("vocab_size", "embedding_size", "generator_hidden_size", "generator_layers",
                "electra_objective", "untied_generator_embeddings", "do_lower_case"):
    assert stored[field] == resolved[field], field
  # The same inference when the checkpoint starts a pre-training or fine-tuning run.
  from electra_tf.reading.model_source import finetuning_config, pretraining_config

  lines = []
  pre = pretraining_config("m", str(tmp_path), {"init_checkpoint": str(copy)}, lines.append)
  assert lines == [line] and pre.embedding_size == resolved["embedding_size"] and \
      pre.generator_hidden_size == resolved["generator_hidden_size"]
  (tmp_path / "finetuning_data" / "rte").mkdir(parents=True)
  ft = finetuning_config("m", str(tmp_path), {"init_checkpoint": str(copy),
                                             "task_names": ["rte"]})
  assert get_bert_config(ft) == bert and ft.vocab_file == str(copy / "vocab.txt")
  # A contradicting shape is one line naming both values.
  with pytest.raises(ValueError) as e:
    convert(str(copy), {"generator_hidden_size": 1.0}, str(tmp_path / "bad"))
  assert str(e.value) == (f"checkpoint {copy}/model.ckpt says generator_hidden_size "
                          f"{resolved['generator_hidden_size']:g} but --hparams gives 1.0")


@pytest.mark.parametrize("start", ["hf_folder", "convert_output"])
def test_finetuning_and_pretraining_start_from_hf(hf_ref, hf_out, tmp_path, start):
  """init_checkpoint = the HF folder itself, or convert's output folder: shape, vocabulary and
  weights come from it."""
  from electra_tf.finetuning import registry
  from electra_tf.finetuning.finetuning_model import create_model, load_init_checkpoint
  from electra_tf.pretraining.builder import build_pretraining_model
  from electra_tf.pretraining.task import init_from_checkpoint
  from electra_tf.reading.model_source import finetuning_config, pretraining_config

  out, _ = hf_out
  disc_cfg, gen_cfg = (json.load(open(hf_ref / name / "config.json"))
                       for name in ("discriminator", "generator"))
  path = str(hf_ref if start == "hf_folder" else out)
  (tmp_path / "finetuning_data" / "rte").mkdir(parents=True)
  lines = []
  config = finetuning_config("m", str(tmp_path), {"init_checkpoint": path, "task_names": ["rte"]},
                             lines.append)
  assert lines[0].startswith("Hugging Face ELECTRA: " if start == "hf_folder" else
                             f"model shape from hparams.json in {out}")
  assert (config.embedding_size, config.vocab_size) == (disc_cfg["embedding_size"],
                                                        disc_cfg["vocab_size"])
  assert open(config.vocab_file, "rb").read() == (hf_ref / "discriminator" /
                                                  "vocab.txt").read_bytes()
  model = create_model(config, registry.build_tasks(config))
  report = load_init_checkpoint(model, path)
  assert report.missing == ("task_specific/rte/dense/bias", "task_specific/rte/dense/kernel")
  reader = tf.train.load_checkpoint(str(out / "tf1" / "model.ckpt"))
  for name, variable in model.tf1_variables().items():
    if name.startswith("electra/"):
      np.testing.assert_array_equal(variable.numpy(), reader.get_tensor(name), name)
  # Continued pre-training: the same shape, every weight loaded, step 0.
  pre = pretraining_config("m", str(tmp_path), {"init_checkpoint": path, "learning_rate": 1e-4})
  assert (pre.generator_hidden_size, pre.embedding_size) == (
    gen_cfg["hidden_size"] / disc_cfg["hidden_size"], disc_cfg["embedding_size"])
  model = build_pretraining_model(pre, vocab={})

  class NoSlots:
    iterations = tf.Variable(5, dtype=tf.int64)

    def tf1_slot_variables(self):
      return {}

  assert init_from_checkpoint(model, NoSlots(), path, log_fn=lines.append) == 0
  for name, variable in model.tf1_variables().items():
    np.testing.assert_array_equal(variable.numpy(), reader.get_tensor(name), name)
