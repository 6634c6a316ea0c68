"""Pre-training / fine-tuning configs and transformer sizes vs the official code and golden data."""

import json
import os

import pytest
from helpers.paths import GOLDEN, REPO_ROOT

from electra_tf import config as C
from electra_tf.hparams_input import load_hparams
from electra_tf.model_sizes import get_bert_config, get_generator_config
from electra_tf.modeling.bert_config import BertConfig

REPO_CONFIGS = str(REPO_ROOT / "configs")

# google-research/electra configure_pretraining.py (commit f93f3f8, with Electric): the values
# after PretrainingConfig(model_name, data_dir) with no hparams. Paths use data_dir="D",
# model_name="M". "seed", "init_checkpoint" and the OURS_UPDATE hparams are ours.
OFFICIAL_PRETRAINING_DEFAULTS = {
  "model_name": "M", "debug": False, "do_train": True, "do_eval": False,
  "electra_objective": True, "electric_objective": False, "gen_weight": 1.0,
  "disc_weight": 50.0, "mask_prob": 0.15, "learning_rate": 5e-4, "lr_decay_power": 1.0,
  "weight_decay_rate": 0.01, "num_warmup_steps": 10000, "iterations_per_loop": 200,
  "save_checkpoints_steps": 1000, "num_train_steps": 1000000, "num_eval_steps": 100,
  "keep_checkpoint_max": 5, "model_size": "small", "model_hparam_overrides": {},
  "embedding_size": 128, "vocab_size": 30522, "do_lower_case": True,
  "uniform_generator": False, "two_tower_generator": False,
  "untied_generator_embeddings": False, "untied_generator": True, "generator_layers": 1.0,
  "generator_hidden_size": 0.25, "disallow_correct": False, "temperature": 1.0,
  "max_seq_length": 128, "train_batch_size": 128, "eval_batch_size": 128, "use_tpu": False,
  "num_tpu_cores": 1, "tpu_job_name": None, "tpu_name": None, "tpu_zone": None,
  "gcp_project": None,
  "pretrain_tfrecords": "D/pretrain_tfrecords/pretrain_data.tfrecord*",
  "vocab_file": "D/vocab.txt", "model_dir": "D/models/M",
  "results_txt": "D/models/M/results/unsup_results.txt",
  "results_pkl": "D/models/M/results/unsup_results.pkl",
  "max_predictions_per_seq": 19, "seed": None, "init_checkpoint": None,
  "optimizer": "adamw", "gradient_accumulation_steps": 1,
  "masking": "token", "span_mean_length": 5.0, "span_max_length": 10,
}
OURS_UPDATE = {"optimizer", "gradient_accumulation_steps"}  # LAMB, gradient accumulation
OURS_MASKING = {"masking", "span_mean_length", "span_max_length"}  # whole-word / span masking
# The paths the reference's *_config_resolved.json files leave out, plus our seed.
PRETRAINING_PATHS = {"model_name", "pretrain_tfrecords", "vocab_file", "model_dir",
                     "results_txt", "results_pkl"}

# google-research/electra configure_finetuning.py (commit ac8d487): the values after
# FinetuningConfig("M", "D") with no hparams (task_names ["chunk"] -> the chunk preset: 256
# tokens). No D/models/M/vocab.txt exists, so vocab_file falls back to D/vocab.txt.
OFFICIAL_FINETUNING_DEFAULTS = {
  "model_name": "M", "debug": False, "log_examples": False, "num_trials": 1, "do_train": True,
  "do_eval": True, "keep_all_models": True, "model_size": "small", "task_names": ["chunk"],
  "model_hparam_overrides": {}, "embedding_size": 128, "vocab_size": 30522,
  "do_lower_case": True, "learning_rate": 1e-4, "weight_decay_rate": 0.01,
  "layerwise_lr_decay": 0.8, "num_train_epochs": 3.0, "warmup_proportion": 0.1,
  "save_checkpoints_steps": 1000000, "iterations_per_loop": 1000,
  "use_tfrecords_if_existing": True, "write_test_outputs": False, "n_writes_test": 5,
  "max_seq_length": 256, "train_batch_size": 32, "eval_batch_size": 32,
  "predict_batch_size": 32, "double_unordered": True, "max_query_length": 64,
  "doc_stride": 128, "n_best_size": 20, "max_answer_length": 30,
  "answerable_classifier": True, "answerable_uses_start_logits": True,
  "answerable_weight": 0.5, "joint_prediction": True, "beam_size": 20,
  "qa_na_threshold": -2.75, "use_tpu": False, "num_tpu_cores": 1, "tpu_job_name": None,
  "tpu_name": None, "tpu_zone": None, "gcp_project": None,
  "data_dir": "D", "raw_data_dir": "D/finetuning_data/{:}", "vocab_file": "D/vocab.txt",
  "init_checkpoint": "D/models/M", "model_dir": "D/models/M/finetuning_models/chunk_model",
  "results_txt": "D/models/M/results/chunk_results.txt",
  "results_pkl": "D/models/M/results/chunk_results.pkl",
  "qa_eval_file": "D/models/M/results/chunk_qa/{:}_eval.json",
  "qa_preds_file": "D/models/M/results/chunk_qa/{:}_preds.json",
  "qa_na_file": "D/models/M/results/chunk_qa/{:}_null_odds.json",
  "preprocessed_data_dir": "D/models/M/finetuning_tfrecords/chunk_tfrecords",
  "test_predictions": "D/models/M/test_predictions/{:}_{:}_{:}_predictions.pkl",
  "seed": None, "optimizer": "adamw", "gradient_accumulation_steps": 1,
  "jit_compile": False, "mixed_precision": None, "xla_elementwise": False,
}
OURS_SPEED = {"jit_compile", "mixed_precision", "xla_elementwise"}  # XLA and bfloat16 settings
FINETUNING_PATHS = {"model_name", "data_dir", "raw_data_dir", "vocab_file", "init_checkpoint",
                    "model_dir", "results_txt", "results_pkl", "qa_eval_file", "qa_preds_file",
                    "qa_na_file", "preprocessed_data_dir", "test_predictions"}


def _load(path):
  with open(path) as f:
    return json.load(f)


def _assert_same(ours: dict, expected: dict):
  """Equal values of equal JSON type (1 and 1.0 differ)."""
  for key, value in expected.items():
    assert key in ours, key
    assert ours[key] == value and type(ours[key]) is type(value), (key, ours[key], value)


# ---------------------------------------------------------------- pre-training

def test_pretraining_official_defaults():
  ours = C.PretrainingConfig("M", "D").to_dict()
  _assert_same(ours, OFFICIAL_PRETRAINING_DEFAULTS)
  assert set(ours) == set(OFFICIAL_PRETRAINING_DEFAULTS)


@pytest.mark.parametrize("folder", ["electra_small_2l", "electric_2l"])
def test_pretraining_matches_reference(reference_dir, folder):
  _check_pretraining_folder(reference_dir / folder)


def test_untied_generator_embeddings_matches_golden():
  """electra_untied_2l (untied_generator_embeddings=true): a tests/golden folder only."""
  _check_pretraining_folder(GOLDEN / "electra_untied_2l")


def _check_pretraining_folder(ref):
  cfg = C.PretrainingConfig("M", "D", **load_hparams(str(ref / "hparams.json")))
  resolved = _load(ref / "pretraining_config_resolved.json")
  ours = cfg.to_dict()
  _assert_same(ours, resolved)
  assert set(ours) - set(resolved) == (PRETRAINING_PATHS | {"seed", "init_checkpoint"}
                                      | OURS_UPDATE | OURS_MASKING)

  bert = get_bert_config(cfg)
  assert bert == BertConfig.from_json_file(str(ref / "bert_config.json"))
  generator = get_generator_config(cfg, bert)
  assert generator == BertConfig.from_json_file(str(ref / "generator_bert_config.json"))


def test_pretraining_derived_values():
  cfg = C.PretrainingConfig("M", "D", model_size="large", mask_prob=0.25, max_seq_length=512)
  assert cfg.max_predictions_per_seq == int((0.25 + 0.005) * 512) == 130
  assert cfg.embedding_size is None  # only the small preset sets it
  assert C.PretrainingConfig("M", "D", max_seq_length=77).max_predictions_per_seq == 11


def test_pretraining_debug_then_hparams_win():
  cfg = C.PretrainingConfig("M", "D", debug=True, num_train_steps=50)
  assert (cfg.train_batch_size, cfg.eval_batch_size, cfg.iterations_per_loop,
          cfg.num_eval_steps) == (8, 4, 1, 2)
  assert cfg.num_train_steps == 50
  assert C.PretrainingConfig("M", "D", embedding_size=64).embedding_size == 64


def test_electric_implies_two_tower_unless_overridden():
  assert C.PretrainingConfig("M", "D", electric_objective=True).two_tower_generator
  cfg = C.PretrainingConfig("M", "D", electric_objective=True, two_tower_generator=False)
  assert not cfg.two_tower_generator


def test_hparams_are_copied():
  overrides = {"num_hidden_layers": 2}
  cfg = C.PretrainingConfig("M", "D", model_hparam_overrides=overrides)
  overrides["num_hidden_layers"] = 5
  assert cfg.model_hparam_overrides == {"num_hidden_layers": 2}


@pytest.mark.parametrize("kwargs, words", [
  ({"lerning_rate": 1e-3}, ["'lerning_rate'", "did you mean 'learning_rate'"]),
  ({"zzz": 1}, ["Unknown hparam 'zzz'"]),
  ({"max_predictions_per_seq": 20}, ["'max_predictions_per_seq'", "mask_prob"]),
  ({"learning_rate": "1e-3"}, ["'learning_rate'", "float", "str"]),
  ({"debug": 1}, ["'debug'", "bool"]),
  ({"num_train_steps": 1e6}, ["'num_train_steps'", "int"]),
  ({"model_size": "huge"}, ["model_size", "'huge'"]),
])
def test_pretraining_bad_hparams(kwargs, words):
  with pytest.raises(ValueError) as info:
    C.PretrainingConfig("M", "D", **kwargs)
  message = str(info.value)
  assert "\n" not in message
  for word in words:
    assert word in message


def test_to_json_round_trips():
  cfg = C.PretrainingConfig("M", "D", seed=3, model_hparam_overrides={"hidden_size": 64})
  assert json.loads(cfg.to_json()) == cfg.to_dict()
  assert cfg.to_dict()["seed"] == 3


# ---------------------------------------------------------------- fine-tuning

def test_finetuning_official_defaults():
  ours = C.FinetuningConfig("M", "D").to_dict()
  _assert_same(ours, OFFICIAL_FINETUNING_DEFAULTS)
  assert set(ours) == set(OFFICIAL_FINETUNING_DEFAULTS)


def test_finetuning_matches_reference(reference_dir):
  ref = reference_dir / "finetune_heads"
  cfg = C.FinetuningConfig("M", "D", **load_hparams(str(ref / "hparams.json")))
  resolved = _load(ref / "finetuning_config_resolved.json")
  ours = cfg.to_dict()
  _assert_same(ours, resolved)
  assert set(ours) - set(resolved) == FINETUNING_PATHS | {"seed"} | OURS_UPDATE | OURS_SPEED
  assert get_bert_config(cfg) == BertConfig.from_json_file(str(ref / "bert_config.json"))
  # official layout of the paths the resolved file leaves out, for the multi-task name
  assert cfg.model_dir == "D/models/M/finetuning_models/rte,sts,squad,chunk_model"
  assert cfg.qa_preds_file("squad") == "D/models/M/results/rte,sts,squad,chunk_qa/squad_preds.json"


@pytest.mark.parametrize("task, epochs, seq_len", [
  ("rte", 10.0, 128), ("sts", 10.0, 128), ("squad", 2.0, 512), ("squadv1", 2.0, 512),
  ("newsqa", 2.0, 512), ("chunk", 3.0, 256), ("mnli", 3.0, 128), ("qnli", 3.0, 128),
])
def test_finetuning_single_task_presets(task, epochs, seq_len):
  cfg = C.FinetuningConfig("M", "D", task_names=[task])
  assert (cfg.num_train_epochs, cfg.max_seq_length) == (epochs, seq_len)


def test_finetuning_presets_yield_to_hparams():
  cfg = C.FinetuningConfig("M", "D", task_names=["squad"], write_test_outputs=True,
                           max_seq_length=384)
  assert (cfg.max_seq_length, cfg.num_train_epochs, cfg.write_test_outputs) == (384, 2.0, True)
  multi = C.FinetuningConfig("M", "D", task_names=["rte", "squad"])
  assert (multi.num_train_epochs, multi.max_seq_length) == (3.0, 128)


@pytest.mark.parametrize("size, lr, decay, emb", [
  ("small", 1e-4, 0.8, 128), ("base", 1e-4, 0.8, None), ("large", 5e-5, 0.9, None),
])
def test_finetuning_size_presets(size, lr, decay, emb):
  cfg = C.FinetuningConfig("M", "D", model_size=size, task_names=["mnli"])
  assert (cfg.learning_rate, cfg.layerwise_lr_decay, cfg.embedding_size) == (lr, decay, emb)
  assert C.FinetuningConfig("M", "D", model_size=size, learning_rate=3e-4).learning_rate == 3e-4


def test_finetuning_debug():
  cfg = C.FinetuningConfig("M", "D", debug=True, task_names=["rte"], num_trials=4,
                           train_batch_size=16)
  assert (cfg.use_tfrecords_if_existing, cfg.iterations_per_loop, cfg.num_train_epochs,
          cfg.log_examples) == (False, 1, 3.0, True)
  assert (cfg.num_trials, cfg.train_batch_size) == (4, 16)
  # official quirk: debug is read before hparams, so these keep their non-debug values
  assert cfg.init_checkpoint == "D/models/M"
  assert cfg.preprocessed_data_dir == "D/models/M/finetuning_tfrecords/rte_tfrecords"
  assert C.FinetuningConfig("M", "D", init_checkpoint=None).init_checkpoint is None


def test_finetuning_vocab_file_prefers_model_folder(tmp_path):
  data_dir = str(tmp_path)
  assert C.FinetuningConfig("M", data_dir).vocab_file == os.path.join(data_dir, "vocab.txt")
  model_vocab = tmp_path / "models" / "M" / "vocab.txt"
  model_vocab.parent.mkdir(parents=True)
  model_vocab.write_text("[PAD]\n")
  assert C.FinetuningConfig("M", data_dir).vocab_file == str(model_vocab)


def test_finetuning_path_templates():
  cfg = C.FinetuningConfig("M", "D", task_names=["rte"])
  assert cfg.raw_data_dir("rte") == "D/finetuning_data/rte"
  assert cfg.qa_eval_file("squad") == "D/models/M/results/rte_qa/squad_eval.json"
  assert cfg.qa_na_file("squad") == "D/models/M/results/rte_qa/squad_null_odds.json"
  assert (cfg.test_predictions("rte", "test", 2)
          == "D/models/M/test_predictions/rte_test_2_predictions.pkl")
  assert C.FinetuningConfig("M", "D", raw_data_dir="/glue").raw_data_dir("rte") == "/glue/rte"
  cfg = C.FinetuningConfig("M", "D", raw_data_dir="/data/{}_v2")
  assert cfg.raw_data_dir("rte") == "/data/rte_v2"
  with pytest.raises(ValueError, match="'test_predictions'.*3"):
    C.FinetuningConfig("M", "D", test_predictions="/p/{}.pkl")


@pytest.mark.parametrize("kwargs, words", [
  ({"task_name": ["rte"]}, ["'task_name'", "did you mean 'task_names'"]),
  ({"task_names": "rte"}, ["'task_names'", "list[str]"]),
  ({"task_names": []}, ["task_names"]),
  ({"qa_eval_file": 3}, ["'qa_eval_file'"]),
  ({"model_size": "medium"}, ["'medium'"]),
])
def test_finetuning_bad_hparams(kwargs, words):
  with pytest.raises(ValueError) as info:
    C.FinetuningConfig("M", "D", **kwargs)
  assert "\n" not in str(info.value)
  for word in words:
    assert word in str(info.value)


# ---------------------------------------------------------------- configs/

def _config_file(name):
  return os.path.join(REPO_CONFIGS, name)


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(REPO_CONFIGS)
                                        if f.endswith(".json")))
def test_repo_configs_load(name):
  cfg = C.PretrainingConfig("M", "D", **load_hparams(_config_file(name)))
  bert = get_bert_config(cfg)
  assert cfg.max_seq_length <= bert.max_position_embeddings
  assert bert.hidden_size % bert.num_attention_heads == 0
  gen = get_generator_config(cfg, bert)
  assert gen.hidden_size % gen.num_attention_heads == 0


def test_repo_config_values():
  # official configure_pretraining.py: base/large values from its commented-out presets
  base = C.PretrainingConfig("M", "D", **load_hparams(_config_file("electra_base.json")))
  assert (base.max_seq_length, base.learning_rate, base.embedding_size,
          base.generator_hidden_size, base.train_batch_size) == (512, 2e-4, 768, 0.33333, 256)
  large = C.PretrainingConfig("M", "D", **load_hparams(_config_file("electra_large.json")))
  assert (large.mask_prob, large.embedding_size, large.train_batch_size,
          large.max_predictions_per_seq) == (0.25, 1024, 2048, 130)
  electric = C.PretrainingConfig("M", "D", **load_hparams(_config_file("electric_base.json")))
  assert electric.electric_objective and electric.two_tower_generator
  assert not electric.electra_objective
  mlm = C.PretrainingConfig("M", "D", **load_hparams(_config_file("mlm_base.json")))
  assert not mlm.electra_objective and not mlm.electric_objective
  # official README: continuing from released ELECTRA-Small needs generator_hidden_size 1.0
  released = C.PretrainingConfig(
    "M", "D", **load_hparams(_config_file("electra_small_released.json")))
  gen = get_generator_config(released, get_bert_config(released))
  assert (gen.hidden_size, released.embedding_size) == (256, 128)
