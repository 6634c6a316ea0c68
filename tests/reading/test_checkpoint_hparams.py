"""The hparams that describe a model path (``electra_tf.reading.checkpoint_hparams``): inferred
from official checkpoints' shapes (reference folders and our own variants), preferred from
``hparams.json``, and merged with a run's hparams."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from helpers.paths import GOLDEN, REPO_ROOT

from electra_tf import checkpoints
from electra_tf.config import FinetuningConfig, PretrainingConfig
from electra_tf.model_sizes import get_bert_config, get_generator_config
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.pretraining.builder import build_pretraining_model
from electra_tf.reading import checkpoint_hparams, model_dir

SMALL_2L = {"model_size": "small", "model_hparam_overrides": {"num_hidden_layers": 2}}


def _configs(hparams):
  """(discriminator BertConfig, generator BertConfig or None) the hparams build."""
  config = PretrainingConfig("m", "/nonexistent", **hparams)
  bert = get_bert_config(config)
  small = (config.electra_objective or config.electric_objective) and config.untied_generator
  gen = (get_generator_config(config, bert)
         if small and not config.uniform_generator else None)
  return config, bert, gen


def _copy_checkpoint(src, dst):
  dst.mkdir()
  for name in os.listdir(src):
    if name.startswith("model.ckpt") or name == "checkpoint":
      shutil.copy(src / name, dst / name)
  return dst


SHAPES = {"extended": "vocab_size 30522, embedding_size 128, hidden 256 x 2 layers",
          "golden": "vocab_size 1016, embedding_size 16, hidden 32 x 2 layers"}


def _lane(reference_dir):
  return "golden" if reference_dir == GOLDEN else "extended"


@pytest.mark.parametrize("folder_name, summary", [
  ("electra_small_2l", "inferred from checkpoint: {shape}, "
   "generator 0.25 x 2 layers (tied embeddings)"),
  ("electric_2l", "inferred from checkpoint: {shape}, "
   "generator 0.25 x 2 layers (two-tower, Electric)"),
])
def test_infer_reference_pretraining(reference_dir, tmp_path, folder_name, summary):
  summary = summary.format(shape=SHAPES[_lane(reference_dir)])
  folder = reference_dir / folder_name
  copy = _copy_checkpoint(folder, tmp_path / folder_name)
  values, source = checkpoint_hparams.model_hparams(str(copy))
  assert source.startswith(f"checkpoint {copy}/model.ckpt (inferred")
  inferred, text = checkpoint_hparams.infer_hparams_from_checkpoint(str(copy / "model.ckpt"))
  assert values == inferred and text == summary
  config, bert, gen = _configs(inferred)
  assert bert == _heads_by_rule(BertConfig.from_json_file(str(folder / "bert_config.json")))
  assert gen == _heads_by_rule(
      BertConfig.from_json_file(str(folder / "generator_bert_config.json")))
  resolved = json.load(open(folder / "pretraining_config_resolved.json"))
  for field in model_dir.SHAPE_FIELDS:
    if field != "model_hparam_overrides":
      assert getattr(config, field) == resolved[field], field
  hparams = json.load(open(folder / "hparams.json"))
  guess = inferred["model_hparam_overrides"].get("num_attention_heads")
  given = hparams["model_hparam_overrides"].get("num_attention_heads", guess)
  assert {**inferred["model_hparam_overrides"], "num_attention_heads": given} == {
      **hparams["model_hparam_overrides"], "num_attention_heads": given}
  # The inferred values agree with what the run was given (no contradiction); the heads, which
  # no tensor shape records, are the run's.
  merged = model_dir.merge_hparams(inferred, hparams, inferred=True)
  assert _configs(merged)[1] == BertConfig.from_json_file(str(folder / "bert_config.json"))
  if given != guess:
    with pytest.raises(ValueError, match="num_attention_heads"):
      model_dir.merge_hparams(inferred, hparams)


def _heads_by_rule(bert: BertConfig) -> BertConfig:
  """``bert`` with the attention heads that inference guesses for its width (``heads_for``)."""
  return BertConfig(**{**bert.to_dict(),
                       "num_attention_heads": checkpoint_hparams.heads_for(bert.hidden_size)})


def test_infer_reference_finetuned(reference_dir, tmp_path):
  folder = reference_dir / "finetune_heads"
  copy = _copy_checkpoint(folder, tmp_path / "ft")
  inferred, text = checkpoint_hparams.infer_hparams_from_checkpoint(str(copy / "model.ckpt"))
  assert text.endswith("no discriminator head, fine-tuned heads: chunk, rte, squad, sts")
  hparams = json.load(open(folder / "hparams.json"))
  # The heads, which no tensor shape records, come from the run where it names them.
  heads = {k: v for k, v in hparams["model_hparam_overrides"].items()
           if k == "num_attention_heads"}
  user = {"task_names": hparams["task_names"],
          **({"model_hparam_overrides": heads} if heads else {})}
  merged = model_dir.merge_hparams(inferred, user, target="finetuning", inferred=True)
  config = FinetuningConfig("f", "/x", **merged)
  assert get_bert_config(config) == BertConfig.from_json_file(str(folder / "bert_config.json"))
  resolved = json.load(open(folder / "finetuning_config_resolved.json"))
  for field in ("model_size", "vocab_size", "embedding_size", "do_lower_case",
                "model_hparam_overrides", "learning_rate", "layerwise_lr_decay"):
    assert getattr(config, field) == resolved[field], field


VARIANTS = {
  # the released ELECTRA-Small: generator as wide as the discriminator
  "released_small": {**json.load(open(REPO_ROOT / "configs" / "electra_small_released.json")),
                     "model_hparam_overrides": {"num_hidden_layers": 2}},
  "untied_embeddings": {**SMALL_2L, "untied_generator_embeddings": True},
  "fully_tied": {**SMALL_2L, "untied_generator": False},
  "mlm_only": {**SMALL_2L, "electra_objective": False},
  "uniform": {**SMALL_2L, "uniform_generator": True},
  "e_equals_h_3l": {"model_size": "base", "generator_hidden_size": 0.5, "generator_layers": 0.34,
                    "model_hparam_overrides": {"hidden_size": 128, "num_hidden_layers": 3}},
  "odd_heads": {**SMALL_2L, "model_hparam_overrides": {
    "hidden_size": 96, "num_hidden_layers": 1, "intermediate_size": 200}},
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_infer_rebuilds_our_models(tmp_path, name):
  hparams = {**VARIANTS[name], "vocab_size": 64}
  config, bert, gen = _configs(hparams)
  model = build_pretraining_model(config, vocab={})
  prefix = checkpoints.save_tf1_checkpoint(model.tf1_variables(), str(tmp_path))
  inferred, summary = checkpoint_hparams.infer_hparams_from_checkpoint(prefix)
  assert summary.startswith("inferred from checkpoint: vocab_size 64")
  config2, bert2, gen2 = _configs(inferred)
  assert (bert2, gen2) == (bert, gen)
  shapes = {k: v.shape.as_list() for k, v in model.tf1_variables().items()}
  rebuilt = build_pretraining_model(config2, vocab={})
  assert {k: v.shape.as_list() for k, v in rebuilt.tf1_variables().items()} == shapes
  for field in ("electra_objective", "untied_generator_embeddings", "uniform_generator",
                "two_tower_generator"):
    assert getattr(config2, field) == getattr(config, field), field
  assert config2.embedding_size == (config.embedding_size or bert.hidden_size)
  if name == "released_small":
    assert inferred["generator_hidden_size"] == 1.0 and inferred["model_size"] == "small"
    assert "generator 1 x 2 layers (tied embeddings)" in summary
  if name == "e_equals_h_3l":
    assert inferred["embedding_size"] == 128 and inferred["generator_hidden_size"] == 0.5


def test_infer_rejects_object_checkpoints_and_other_models(tmp_path):
  v = tf.Variable(np.zeros([2], np.float32))
  prefix = tf.train.Checkpoint(v=v).write(str(tmp_path / "tf2" / "ckpt"))
  with pytest.raises(ValueError, match="object-based .TF2. checkpoint"):
    checkpoint_hparams.infer_hparams_from_checkpoint(prefix)
  other = checkpoints.save_tf1_checkpoint({"bert/x": np.zeros([2], np.float32)},
                                          str(tmp_path / "tf1"))
  with pytest.raises(ValueError, match="not an ELECTRA checkpoint"):
    checkpoint_hparams.infer_hparams_from_checkpoint(other)
  assert checkpoint_hparams.model_hparams(str(tmp_path / "empty")) == (None, "")


def test_fraction_prefers_the_released_sizes():
  assert checkpoint_hparams.fraction(256, 768) == 0.33333
  assert checkpoint_hparams.fraction(64, 256) == 0.25
  assert checkpoint_hparams.fraction(256, 256) == 1.0
  f = checkpoint_hparams.fraction(100, 768)
  assert int(round(768 * f)) == 100
  assert checkpoint_hparams.heads_for(768) == 12 and checkpoint_hparams.heads_for(1024) == 16
  assert checkpoint_hparams.heads_for(128) == 2 and checkpoint_hparams.heads_for(32) == 1


def test_hparams_for_run_precedence(reference_dir, tmp_path, vocab_file):
  ckpt = _copy_checkpoint(reference_dir / "electra_small_2l", tmp_path / "init")
  run_dir = tmp_path / "models" / "demo"
  # No model_dir yet: the init checkpoint's shapes describe the model.
  merged, source = checkpoint_hparams.hparams_for_run({"learning_rate": 1e-3},
                                             [str(run_dir), None, str(ckpt / "model.ckpt")])
  assert source.startswith("checkpoint ") and merged["learning_rate"] == 1e-3
  stored = json.load(open(reference_dir / "electra_small_2l" / "hparams.json"))
  assert merged["model_hparam_overrides"] == {  # heads: not in the shapes (hidden // 64)
      k: v for k, v in stored["model_hparam_overrides"].items() if k != "num_attention_heads"}
  # Once the run wrote its files, they win; a contradiction names them.
  config = PretrainingConfig("demo", str(tmp_path), **merged)
  model_dir.write_model_files(str(run_dir), config, vocab_file)
  merged, source = checkpoint_hparams.hparams_for_run({}, [str(run_dir), str(ckpt / "model.ckpt")])
  assert source == f"hparams.json in {run_dir}"
  assert merged["embedding_size"] == stored.get("embedding_size", 128)  # small: 128
  vocab_size = stored["vocab_size"]
  with pytest.raises(ValueError, match=f"^hparams.json in {run_dir} says vocab_size {vocab_size} "
                     "but --hparams gives 100$"):
    checkpoint_hparams.hparams_for_run({"vocab_size": 100}, [str(run_dir)])
  empty = checkpoint_hparams.hparams_for_run({"a": 1}, [str(tmp_path / "none"), None])
  assert empty == ({"a": 1}, "")


def test_a_run_names_the_heads_that_a_bare_checkpoint_cannot(tmp_path):
  """Heads are guessed from the width (``heads_for``); the run's own value wins, not a clash."""
  copy = _copy_checkpoint(GOLDEN / "electra_small_2l", tmp_path / "bare")
  guess = _configs(checkpoint_hparams.model_hparams(str(copy))[0])[1].num_attention_heads
  user = {"model_hparam_overrides": {"num_attention_heads": 2 * guess}}
  merged, source = checkpoint_hparams.hparams_for_run(user, [str(copy)])
  assert source.startswith("checkpoint ")
  assert merged["model_hparam_overrides"]["num_attention_heads"] == 2 * guess
  with pytest.raises(ValueError, match="hidden_size"):  # a size is still checked
    checkpoint_hparams.hparams_for_run({"model_hparam_overrides": {"hidden_size": 48}}, [str(copy)])
