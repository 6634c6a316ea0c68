"""Model directories: hparams.json + vocab.txt written, read, and merged with --hparams."""

import json
import os
import shutil

import pytest

from electra_tf.config import FinetuningConfig, PretrainingConfig
from electra_tf.hparams_input import load_hparams
from electra_tf.model_sizes import get_bert_config, get_generator_config
from electra_tf.reading import model_dir

SMALL_2L = {"model_size": "small", "model_hparam_overrides": {"num_hidden_layers": 2}}


# ---------------------------------------------------------------- write / read


def test_write_model_files_stores_resolved_shape(tmp_path, vocab_file):
  config = PretrainingConfig("demo", str(tmp_path), learning_rate=1e-3, **SMALL_2L)
  path = model_dir.write_model_files(str(tmp_path / "m"), config, vocab_file)
  assert sorted(os.listdir(tmp_path / "m")) == ["hparams.json", "vocab.txt"]  # no temp files
  with open(vocab_file, "rb") as f, open(tmp_path / "m" / "vocab.txt", "rb") as g:
    assert f.read() == g.read()
  stored = json.load(open(path))
  assert stored["vocab_size"] == 30522 and stored["embedding_size"] == 128
  assert stored["model_hparam_overrides"] == {
    "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
    "intermediate_size": 1024}
  assert stored["learning_rate"] == 1e-3 and stored["max_seq_length"] == 128
  for field in ("vocab_file", "model_dir", "pretrain_tfrecords", "max_predictions_per_seq",
                "model_name", "init_checkpoint"):
    assert field not in stored, field
  # The file is a valid --hparams and rebuilds the same towers.
  again = PretrainingConfig("other", "/elsewhere", **load_hparams(path))
  assert get_bert_config(again) == get_bert_config(config)
  assert get_generator_config(again, get_bert_config(again)) == get_generator_config(
    config, get_bert_config(config))
  assert model_dir.read_model_hparams(str(tmp_path / "m")) == stored
  # Written again over itself (vocab already in place) without error.
  model_dir.write_model_files(str(tmp_path / "m"), config, str(tmp_path / "m" / "vocab.txt"))


def test_write_model_files_debug_and_finetuning(tmp_path):
  debug = PretrainingConfig("d", str(tmp_path), debug=True, model_size="base")
  stored = model_dir.stored_hparams(debug)
  assert stored["model_hparam_overrides"] == {
    "hidden_size": 144, "num_hidden_layers": 3, "num_attention_heads": 4,
    "intermediate_size": 576}
  assert stored["embedding_size"] == 144  # base: None -> the (debug) hidden size
  ft = FinetuningConfig("f", str(tmp_path), task_names=["rte"], **SMALL_2L)
  stored = model_dir.stored_hparams(ft)
  assert stored["task_names"] == ["rte"] and stored["embedding_size"] == 128
  assert "raw_data_dir" not in stored and "preprocessed_data_dir" not in stored
  assert get_bert_config(FinetuningConfig("g", "/x", **stored)) == get_bert_config(ft)


def test_write_model_files_rejects_vocab_larger_than_vocab_size(tmp_path, vocab_file):
  config = PretrainingConfig("demo", str(tmp_path), vocab_size=100)
  with open(vocab_file, encoding="utf-8") as f:
    n_tokens = sum(1 for _ in f)  # 1016 (tests/golden/vocab.txt)
  with pytest.raises(ValueError, match=rf"has {n_tokens} tokens but vocab_size is 100"):
    model_dir.write_model_files(str(tmp_path / "m"), config, vocab_file)


def test_read_model_hparams_locations_and_errors(tmp_path):
  d = tmp_path / "models" / "demo"
  d.mkdir(parents=True)
  assert model_dir.read_model_hparams(str(d)) is None
  (d / "hparams.json").write_text('{"vocab_size": 5}')
  for path in (d, d / "ckpt-10", d / "ckpt-10.index", d / "model.ckpt.data-00000-of-00001"):
    assert model_dir.read_model_hparams(str(path)) == {"vocab_size": 5}, path
  assert model_dir.hparams_source(str(d / "ckpt-10")) == f"hparams.json in {d}"
  (d / "hparams.json").write_text("[1]")
  with pytest.raises(ValueError, match="must hold a JSON object, got list"):
    model_dir.read_model_hparams(str(d))
  (d / "hparams.json").write_text("{")
  with pytest.raises(ValueError, match="cannot read .*hparams.json"):
    model_dir.read_model_hparams(str(d))


# ---------------------------------------------------------------- merge


STORED = {"model_size": "small", "vocab_size": 2066, "embedding_size": 128,
          "model_hparam_overrides": {"hidden_size": 256, "num_hidden_layers": 2,
                                     "num_attention_heads": 4, "intermediate_size": 1024},
          "generator_hidden_size": 0.25, "generator_layers": 1.0, "electra_objective": True,
          "electric_objective": False, "two_tower_generator": False, "untied_generator": True,
          "untied_generator_embeddings": False, "uniform_generator": False,
          "do_lower_case": True, "learning_rate": 5e-4, "max_seq_length": 128}


def test_merge_uses_stored_shape_and_keeps_training_free():
  merged = model_dir.merge_hparams(STORED, {"learning_rate": 1e-3, "max_seq_length": 512,
                                            "model_hparam_overrides": {"hidden_dropout_prob": 0}})
  assert merged["learning_rate"] == 1e-3 and merged["max_seq_length"] == 512
  assert merged["vocab_size"] == 2066 and merged["embedding_size"] == 128
  assert merged["model_hparam_overrides"] == {**STORED["model_hparam_overrides"],
                                              "hidden_dropout_prob": 0}
  # Stored training values are a record, not defaults.
  assert "learning_rate" not in model_dir.merge_hparams(STORED, {})
  assert model_dir.merge_hparams(None, {"vocab_size": 7}) == {"vocab_size": 7}
  # Same shape said another way is no contradiction.
  same = {"vocab_size": 2066, "generator_layers": 1, "model_size": "small",
          "model_hparam_overrides": {"num_hidden_layers": 2}}
  assert model_dir.merge_hparams(STORED, same)["generator_layers"] == 1
  wide = {**STORED, "embedding_size": 256}
  assert model_dir.merge_hparams(wide, {"embedding_size": None})["embedding_size"] is None


@pytest.mark.parametrize("user, message", [
  ({"vocab_size": 30522},
   "hparams.json in models/demo says vocab_size 2066 but --hparams gives 30522"),
  ({"model_hparam_overrides": {"num_hidden_layers": 12}},
   "hparams.json in models/demo says model_hparam_overrides.num_hidden_layers 2 but --hparams "
   "gives 12"),
  ({"model_hparam_overrides": {"vocab_size": 5}},
   "hparams.json in models/demo says vocab_size 2066 but --hparams gives 5"),
  ({"model_hparam_overrides": {"hidden_size": 512}},
   "hparams.json in models/demo says model_hparam_overrides.hidden_size 256 but --hparams "
   "gives 512"),
  ({"generator_hidden_size": 1.0},
   "hparams.json in models/demo says generator_hidden_size 0.25 but --hparams gives 1.0"),
  ({"model_size": "base"},
   'hparams.json in models/demo says model_size "small" but --hparams gives "base"'),
  ({"untied_generator_embeddings": True},
   "hparams.json in models/demo says untied_generator_embeddings false but --hparams gives "
   "true"),
  ({"embedding_size": None},
   "hparams.json in models/demo says embedding_size 128 but --hparams gives null"),
  ({"do_lower_case": False},
   "hparams.json in models/demo says do_lower_case true but --hparams gives false"),
])
def test_merge_contradiction_is_one_line_error(user, message):
  with pytest.raises(ValueError) as e:
    model_dir.merge_hparams(STORED, user, source="hparams.json in models/demo")
  assert str(e.value) == message


def test_merge_compares_sizes_the_presets_imply():
  inferred = {"model_size": "small", "model_hparam_overrides": {"num_hidden_layers": 2}}
  with pytest.raises(ValueError) as e:
    model_dir.merge_hparams(inferred, {"model_hparam_overrides": {"hidden_size": 512}},
                            source="checkpoint c")
  assert str(e.value) == "checkpoint c says hidden_size 256 but --hparams gives 512"
  with pytest.raises(ValueError, match="says intermediate_size 1024 but --hparams gives 1000"):
    model_dir.merge_hparams(inferred, {"model_hparam_overrides": {"intermediate_size": 1000}})
  same = {"model_hparam_overrides": {"hidden_size": 256, "num_attention_heads": 4}}
  assert model_dir.merge_hparams(inferred, same)["model_hparam_overrides"] == {
    "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4}


def test_merge_debug_and_finetuning_target():
  with pytest.raises(ValueError, match="sets debug, which shrinks the model"):
    model_dir.merge_hparams(STORED, {"debug": True})
  debug_stored = {**STORED, "model_hparam_overrides": {
    "hidden_size": 144, "num_hidden_layers": 3, "num_attention_heads": 4,
    "intermediate_size": 576}}
  assert model_dir.merge_hparams(debug_stored, {"debug": True})["debug"] is True
  merged = model_dir.merge_hparams(STORED, {"task_names": ["rte"]}, target="finetuning")
  assert set(merged) == {"task_names", "model_size", "vocab_size", "embedding_size",
                         "model_hparam_overrides", "do_lower_case"}
  FinetuningConfig("f", "/x", **merged)  # every field is a FinetuningConfig hparam
  # Generator fields are not the fine-tuning config's business.
  model_dir.merge_hparams(STORED, {"generator_hidden_size": 1.0}, target="finetuning")



def test_tasks_json_records_data_relative_to_the_model_folder(tmp_path):
  from electra_tf.reading import model_tasks

  root = tmp_path / "work"
  (root / "finetuning_data" / "topic").mkdir(parents=True)
  model = root / "models" / "m"
  definition = {"name": "topic", "kind": "classification", "labels": ["a", "b"],
                "data": str(root / "finetuning_data" / "topic")}
  path = model_tasks.write_tasks(str(model), [definition])
  text = open(path, encoding="utf-8").read()
  assert str(tmp_path) not in text
  assert json.loads(text)["tasks"][0]["data"] == os.path.join("..", "..", "finetuning_data",
                                                              "topic")
  assert model_tasks.read_tasks(str(model))["topic"] == definition
  moved = tmp_path / "elsewhere"  # model and data moved together: still found
  shutil.move(str(root), str(moved))
  assert model_tasks.read_tasks(str(moved / "models" / "m"))["topic"]["data"] == str(
      moved / "finetuning_data" / "topic")
  # a file written before (an absolute path) still reads; so does one without data
  old = {"tasks": [{**definition, "data": "/abs/data/topic"}, {"name": "x", "kind": "tagging"}]}
  (moved / "models" / "m" / "tasks.json").write_text(json.dumps(old), encoding="utf-8")
  read = model_tasks.read_tasks(str(moved / "models" / "m"))
  assert read["topic"]["data"] == "/abs/data/topic" and "data" not in read["x"]


@pytest.mark.parametrize("damage", [b"", b"\0" * 64, b'{\n  "embedding_size": 1'])
def test_a_run_resumes_past_an_hparams_json_a_power_cut_cut_short(tmp_path, damage):
  from electra_tf.reading.model_source import pretraining_config

  home = tmp_path / "models" / "demo"
  home.mkdir(parents=True)
  (home / model_dir.HPARAMS_FILE).write_bytes(damage)
  said = []
  config = pretraining_config("demo", str(tmp_path), {"embedding_size": 16}, said.append)
  assert config.embedding_size == 16  # these settings, not the damaged record
  what = "cut short" if damage else "empty"
  assert said == [f"{home / model_dir.HPARAMS_FILE} is {what} ({len(damage)} bytes), as a power "
                  "cut leaves it: the model shape comes from these settings, and the file is "
                  "written again"]
  (home / model_dir.HPARAMS_FILE).write_text('{"embedding_size": 16,, "x": 1}')  # a typo
  with pytest.raises(ValueError, match="cannot read .*hparams.json"):
    pretraining_config("demo", str(tmp_path), {}, said.append)
