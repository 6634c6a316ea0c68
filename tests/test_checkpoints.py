"""TF1 name-based checkpoint reading and writing."""

import json

import numpy as np
import pytest
import tensorflow as tf

from electra_tf import checkpoints
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.encoder import Transformer
from electra_tf.modeling.heads import DiscriminatorHead, MaskedLMHead


def _embedding_size(folder) -> int:
  """The folder's resolved ``embedding_size`` (128 for the big set, 16 for tests/golden)."""
  return json.loads((folder / "pretraining_config_resolved.json").read_text())["embedding_size"]


def _small_towers(folder, generator_hidden=None):
  disc_cfg = BertConfig.from_json_file(str(folder / "bert_config.json"))
  gen_cfg = BertConfig.from_json_file(str(folder / "generator_bert_config.json"))
  if generator_hidden:
    gen_cfg = gen_cfg.replace(hidden_size=generator_hidden, intermediate_size=4 * generator_hidden,
                              num_attention_heads=max(1, generator_hidden // 64))
  disc = Transformer(disc_cfg, embedding_size=_embedding_size(folder))
  gen = Transformer(gen_cfg, embeddings=disc.embeddings, scope="generator")
  head = MaskedLMHead(disc.embeddings)
  disc_head = DiscriminatorHead(disc_cfg.hidden_size)
  disc.build(None)
  gen.build(None)
  head.build([None, gen_cfg.hidden_size])
  disc_head.build([None, disc_cfg.hidden_size])
  return checkpoints.variables_by_name(
      v for layer in (disc, gen, head, disc_head) for v in layer.weights)


def test_round_trip_is_bit_identical(reference_dir, tmp_path):
  folder = reference_dir / "electra_small_2l"
  variables = _small_towers(folder)
  report = checkpoints.load_tf1_checkpoint(variables, str(folder))
  assert len(report.loaded) == len(variables)
  prefix = checkpoints.save_tf1_checkpoint(variables, str(tmp_path / "out"))
  state = (tmp_path / "out" / "checkpoint").read_text()
  assert state.startswith('model_checkpoint_path: "model.ckpt"')
  assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".tmp")]
  original = tf.train.load_checkpoint(str(folder / "model.ckpt"))
  written = tf.train.load_checkpoint(prefix)
  names = original.get_variable_to_shape_map()
  assert names == written.get_variable_to_shape_map()
  assert original.get_variable_to_dtype_map() == written.get_variable_to_dtype_map()
  for name in names:
    np.testing.assert_array_equal(original.get_tensor(name), written.get_tensor(name), name)
  # The official variable list, as the official code would see it.
  expected = [line.split("\t")[0] for line in
              (folder / "variables.tsv").read_text().splitlines()[1:]]
  assert sorted(names) == sorted(expected)


def test_shape_mismatch_names_variable_and_shapes(reference_dir):
  # Released ELECTRA-Small used generator_hidden_size 1.0; the checkpoint here used 0.25.
  folder = reference_dir / "electra_small_2l"
  big = BertConfig.from_json_file(str(folder / "bert_config.json")).hidden_size
  small = BertConfig.from_json_file(str(folder / "generator_bert_config.json")).hidden_size
  e = _embedding_size(folder)
  assert small != big
  variables = _small_towers(folder, generator_hidden=big)
  with pytest.raises(ValueError) as err:
    checkpoints.load_tf1_checkpoint(variables, str(folder))
  message = str(err.value)
  assert "\n" not in message
  assert "shape mismatch for generator/" in message
  # big set: [128, 64] vs [128, 256]; tests/golden: [16, 8] vs [16, 32]
  assert f"[{e}, {small}]" in message and f"[{e}, {big}]" in message


def test_missing_checkpoint_is_one_line_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="checkpoint not found"):
    checkpoints.load_tf1_checkpoint({}, str(tmp_path / "nope" / "model.ckpt"))
  with pytest.raises(FileNotFoundError, match="no checkpoint found in directory"):
    checkpoints.load_tf1_checkpoint({}, str(tmp_path))


def test_unused_and_missing_are_reported(reference_dir):
  folder = reference_dir / "electra_small_2l"
  disc = Transformer(BertConfig.from_json_file(str(folder / "bert_config.json")),
                     _embedding_size(folder))
  disc.build(None)
  extra = tf.Variable(tf.zeros([3]), name="task_specific/rte/dense/bias")
  variables = {**checkpoints.variables_by_name(disc.weights), "task_specific/rte/dense/bias": extra}
  with pytest.raises(ValueError, match="lacks 1 model variable"):
    checkpoints.load_tf1_checkpoint(variables, str(folder))
  with pytest.raises(ValueError, match="does not use"):
    checkpoints.load_tf1_checkpoint(variables, str(folder), allow_missing=True, allow_unused=False)
  report = checkpoints.load_tf1_checkpoint(variables, str(folder), allow_missing=True)
  assert report.missing == ("task_specific/rte/dense/bias",)
  assert report.unused_optimizer_state == ("global_step",)
  assert all(n.startswith(("generator", "discriminator_predictions"))
             for n in report.unused_other)
  n_tensors = len((folder / "variables.tsv").read_text().splitlines()) - 1  # 83 in both sets
  assert n_tensors == 83
  assert len(report.loaded) + len(report.unused_other) + 1 == n_tensors
