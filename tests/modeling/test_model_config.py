"""get_config / from_config of the two models: the config is JSON, a rebuilt (or
``tf_keras.models.clone_model``) model has the same variables in the same order, tied
embeddings stay one table, and with the original's weights it computes the same outputs and
exports the same SavedModel; a ``.keras`` file saves and loads the model with its weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from electra_tf.config import PretrainingConfig
from electra_tf.finetuning import registry
from electra_tf.finetuning.features import all_feature_specs
from electra_tf.finetuning.finetuning_model import FinetuningModel
from electra_tf.interop.finetuned_saved_model import export_finetuned_saved_model
from electra_tf.interop.saved_model import export_saved_model
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.pretraining.builder import build_pretraining_model
from electra_tf.pretraining.masking import Inputs
from electra_tf.pretraining.objective import Objective
from electra_tf.pretraining.pretraining_model import PretrainingModel

T = 24  # >= the SQuAD head's beam size (20)
TINY = dict(vocab_size=30, max_seq_length=16, embedding_size=8, generator_hidden_size=0.5,
            model_hparam_overrides={"hidden_size": 16, "num_hidden_layers": 1,
                                    "num_attention_heads": 2, "max_position_embeddings": 32})
VOCAB = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
DISC = "discriminator"
# name -> (flags, {part: part whose Embeddings layer it reads}, word-embedding tables)
PRETRAINING = {
    "electra": ({}, {"generator": DISC, "generator_head": DISC}, 1),
    "electra_untied_embeddings": ({"untied_generator_embeddings": True},
                                  {"generator_head": "generator"}, 2),
    "electra_tied_generator": ({"untied_generator": False}, {"generator_head": DISC}, 1),
    "electric": ({"electra_objective": False, "electric_objective": True},
                 {"generator_ltr": DISC, "generator_rtl": DISC, "cloze_head": DISC}, 1),
    "electric_untied": ({"electra_objective": False, "electric_objective": True,
                         "untied_generator_embeddings": True}, {"cloze_head": "generator_ltr"}, 3),
    "mlm": ({"electra_objective": False}, {"generator_head": DISC}, 1),
    "uniform": ({"uniform_generator": True}, {}, 1),
}
EXPORTED = ["electra", "electric", "mlm", "uniform"]  # one of each set of signatures / towers


def _json_round_trip(config):
  return json.loads(json.dumps(config))


def _variables(model):
  """(name, shape) of every model variable, in the model's order (the one set_weights uses)."""
  return [(v.name, tuple(v.shape.as_list())) for v in model.variables]


def _copy_weights(source, target):
  target.set_weights(source.get_weights())
  for a, b in zip(source.variables, target.variables, strict=True):
    np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)


def _assert_same_outputs(a, b):
  assert sorted(a) == sorted(b)
  for key in a:
    if isinstance(a[key], dict):
      _assert_same_outputs(a[key], b[key])
    else:
      np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=key)


def _inputs(batch=3, vocab=30, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, vocab, (batch, T)).astype(np.int32)
  ids[:, 0] = 2
  mask = np.ones((batch, T), np.int32)
  mask[1, 15:] = 0
  ids[1, 15:] = 0
  segments = np.zeros((batch, T), np.int32)
  segments[:, 10:15] = 1
  return ids, mask, segments


def _word_tables(model):
  return [v for v in model.variables if "word_embeddings" in v.name]


# ------------------------------------------------------------------------------ pre-training


@pytest.fixture(scope="module", params=sorted(PRETRAINING))
def pretraining(request, tmp_path_factory):
  """(variant, original model with random weights, model rebuilt from its JSON config)."""
  flags = PRETRAINING[request.param][0]
  config = PretrainingConfig("m", str(tmp_path_factory.mktemp("m")), **TINY, **flags, seed=5)
  tf.random.set_seed(1)
  model = build_pretraining_model(config, VOCAB)
  rebuilt = PretrainingModel.from_config(_json_round_trip(model.get_config()))
  return request.param, model, rebuilt


def test_pretraining_config_rebuilds_the_same_model(pretraining):
  _, model, rebuilt = pretraining
  assert type(rebuilt) is PretrainingModel
  assert _json_round_trip(rebuilt.get_config()) == _json_round_trip(model.get_config())
  assert rebuilt.objective == model.objective
  assert _variables(rebuilt) == _variables(model)
  assert sorted(rebuilt.tf1_variables()) == sorted(model.tf1_variables())  # no duplicate names
  assert len(rebuilt.tf1_variables()) == len(rebuilt.variables)


def test_tied_embeddings_stay_one_layer(pretraining):
  variant, model, rebuilt = pretraining
  _, shared, n_tables = PRETRAINING[variant]
  assert model.get_config()["shared_embeddings"] == shared
  for name, owner in shared.items():
    assert getattr(model, name).embeddings is getattr(model, owner).embeddings, name
    assert getattr(rebuilt, name).embeddings is getattr(rebuilt, owner).embeddings, name
  assert len(_word_tables(model)) == len(_word_tables(rebuilt)) == n_tables


def test_rebuilt_pretraining_model_computes_the_same_step(pretraining):
  _, model, rebuilt = pretraining
  _copy_weights(model, rebuilt)
  ids, mask, segments = _inputs()
  features = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
  want = model(features, training=False, seed=7, return_intermediates=True)
  got = rebuilt(features, training=False, seed=7, return_intermediates=True)
  _assert_same_outputs({k: v.numpy() for k, v in want.items()},
                       {k: v.numpy() for k, v in got.items()})


def test_clone_model_of_a_pretraining_model(pretraining):
  _, model, _ = pretraining
  clone = tf_keras.models.clone_model(model)
  assert type(clone) is PretrainingModel
  assert _json_round_trip(clone.get_config()) == _json_round_trip(model.get_config())
  assert _variables(clone) == _variables(model)
  assert not {id(v) for v in clone.variables} & {id(v) for v in model.variables}


def _assert_keras_file_round_trip(model, path):
  """``model.save(<file>.keras)`` + ``load_model``: same class, variables and values."""
  model.save(path)
  loaded = tf_keras.models.load_model(path)
  assert type(loaded) is type(model)
  assert _variables(loaded) == _variables(model)
  for a, b in zip(model.variables, loaded.variables, strict=True):
    np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)


def test_pretraining_model_keras_file_round_trip(pretraining, tmp_path):
  _assert_keras_file_round_trip(pretraining[1], str(tmp_path / "model.keras"))


@pytest.mark.parametrize("pretraining", EXPORTED, indirect=True)
def test_rebuilt_pretraining_model_exports(pretraining, tmp_path):
  variant, model, rebuilt = pretraining
  _copy_weights(model, rebuilt)
  names = export_saved_model(rebuilt, str(tmp_path / "export"))
  loaded = tf.saved_model.load(str(tmp_path / "export"))
  ids, mask, segments = (tf.constant(x) for x in _inputs())
  inputs = Inputs(ids, mask, segments)
  assert ("rtd" in names) == (variant != "mlm")
  if "rtd" in names:
    got = loaded.signatures["rtd"](input_ids=ids, input_mask=mask, segment_ids=segments)
    sequence_output, logits = model.rtd_logits(inputs)
    np.testing.assert_allclose(got["rtd_logits"], logits, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got["sequence_output"], sequence_output, rtol=0, atol=1e-5)
  assert ("mlm" in names) == (variant != "uniform")
  if "mlm" not in names:
    return
  positions = tf.constant([[1, 2], [3, 4], [5, 6]], tf.int32)
  got = loaded.signatures["mlm"](input_ids=ids, input_mask=mask, segment_ids=segments,
                                 masked_lm_positions=positions)
  hidden = model.generator_hidden(inputs)
  want = model.mlm_head(tf.gather(hidden, positions, batch_dims=1))
  np.testing.assert_allclose(got["mlm_logits"], want, rtol=0, atol=1e-5)


def test_objective_dict_round_trip_and_unknown_field():
  objective = Objective("electra", "own_tower", 30, special_ids=(("[CLS]", 2), ("[SEP]", 3)),
                        seed=4)
  assert Objective.from_dict(_json_round_trip(objective.to_dict())) == objective
  with pytest.raises(ValueError, match="unknown Objective field.*: mask_rate$"):
    Objective.from_dict({**objective.to_dict(), "mask_rate": 0.2})


# ------------------------------------------------------------------------------ fine-tuning

FT_TASKS = ["rte", "chunk", "squad"]
CHUNK_TAGS = ["B-NP", "E-NP", "O", "S-NP", "S-VP"]


@pytest.fixture(scope="module")
def finetuning(tmp_path_factory):
  """(tasks, original model with random weights, rebuilt model, a batch for every head)."""
  tmp = tmp_path_factory.mktemp("ft")
  (tmp / "chunk_label_mapping.json").write_text(json.dumps(
      {t: i for i, t in enumerate(CHUNK_TAGS)}))
  tasks = registry.get_tasks(FT_TASKS, None, str(tmp / "absent"), T,
                             preprocessed_data_dir=str(tmp))
  bert = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32)
  tf.random.set_seed(2)
  model = FinetuningModel(bert, tasks, embedding_size=8)
  rebuilt = FinetuningModel.from_config(_json_round_trip(model.get_config()))
  ids, mask, segments = _inputs(vocab=50)
  rng = np.random.default_rng(3)
  batch = {s.name: np.zeros((3,) + s.shape, np.int32) for s in all_feature_specs(tasks, T)}
  batch.update(input_ids=ids, input_mask=mask, segment_ids=segments,
               task_id=np.array([0, 1, 2], np.int32),
               rte_label_ids=np.array([1, 0, 1], np.int32),
               chunk_labeled_positions=np.tile(np.arange(T, dtype=np.int32), [3, 1]),
               chunk_labels=rng.integers(0, len(CHUNK_TAGS), (3, T)).astype(np.int32),
               chunk_labels_mask=mask, squad_start_positions=np.array([11, 0, 12], np.int32),
               squad_end_positions=np.array([13, 0, 12], np.int32))
  return tasks, model, rebuilt, {k: tf.constant(v) for k, v in batch.items()}


def test_finetuning_config_is_json_and_rebuilds_the_same_model(finetuning):
  _, model, rebuilt, _ = finetuning
  config = model.get_config()
  assert [h["config"]["task_name"] for h in config["heads"]] == FT_TASKS
  assert config["heads"][1]["config"]["num_tags"] == len(CHUNK_TAGS)
  assert type(rebuilt) is FinetuningModel
  assert _json_round_trip(rebuilt.get_config()) == _json_round_trip(config)
  assert rebuilt.task_names == FT_TASKS
  assert _variables(rebuilt) == _variables(model)
  assert sorted(rebuilt.tf1_variables()) == sorted(model.tf1_variables())
  assert len(rebuilt.tf1_variables()) == len(rebuilt.variables)


def test_rebuilt_finetuning_model_computes_the_same_outputs(finetuning):
  _, model, rebuilt, batch = finetuning
  _copy_weights(model, rebuilt)
  want = model(batch, training=False)
  got = rebuilt(batch, training=False)
  assert set(FT_TASKS) <= set(want)
  _assert_same_outputs(tf.nest.map_structure(np.asarray, want),
                       tf.nest.map_structure(np.asarray, got))


def test_clone_model_of_a_finetuning_model(finetuning):
  _, model, _, _ = finetuning
  clone = tf_keras.models.clone_model(model)
  assert type(clone) is FinetuningModel
  assert _json_round_trip(clone.get_config()) == _json_round_trip(model.get_config())
  assert _variables(clone) == _variables(model)


def test_finetuning_model_keras_file_round_trip(finetuning, tmp_path):
  _assert_keras_file_round_trip(finetuning[1], str(tmp_path / "model.keras"))


def test_rebuilt_finetuning_model_exports(finetuning, tmp_path):
  tasks, model, rebuilt, batch = finetuning
  _copy_weights(model, rebuilt)
  names = export_finetuned_saved_model(rebuilt, tasks, str(tmp_path / "export"))
  assert names == ["classify", "squad", "tag"]
  loaded = tf.saved_model.load(str(tmp_path / "export"))
  inputs = {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
  want = model(batch, training=False)
  np.testing.assert_allclose(loaded.signatures["classify"](**inputs)["logits"],
                             want["rte"]["logits"], rtol=0, atol=1e-5)
  np.testing.assert_allclose(loaded.signatures["tag"](**inputs)["logits"],
                             want["chunk"]["logits"], rtol=0, atol=1e-5)
  np.testing.assert_allclose(loaded.signatures["squad"](**inputs)["start_logits"],
                             want["squad"]["start_logits"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("masking", ["whole_word", "span"])
def test_rebuilt_word_masking_model_keeps_its_continuation_table_and_trains(masking, tmp_path):
  """The ``##`` table is in the config: a rebuilt or cloned whole-word / span model masks the
  same words and takes a training step (without the table it stops with an error)."""
  tokens = list(VOCAB) + [f"w{i}" for i in range(15)] + [f"##p{i}" for i in range(10)]
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("\n".join(tokens) + "\n")
  config = PretrainingConfig("m", str(tmp_path), **TINY, masking=masking,
                             vocab_file=str(vocab_file), seed=5)
  model = build_pretraining_model(config, VOCAB)
  table = np.array([t.startswith("##") for t in tokens])
  ids, mask, segments = _inputs()
  features = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
  want = model(features, training=False, seed=7)
  for copy in (PretrainingModel.from_config(_json_round_trip(model.get_config())),
               tf_keras.models.clone_model(model)):
    np.testing.assert_array_equal(copy.continuation.numpy(), table)
    _copy_weights(model, copy)
    with tf.GradientTape() as tape:
      got = copy(features, training=True, seed=7)
    grads = tape.gradient(got["total_loss"], copy.trainable_variables)
    assert np.isfinite(got["total_loss"].numpy())
    assert any(g is not None for g in grads)
    np.testing.assert_array_equal(copy(features, training=False, seed=7)["masked_lm_positions"],
                                  want["masked_lm_positions"])
