"""What a fine-tuning run prints and writes to TensorBoard: a short settings block (the whole
config in a file) and at most 20 lines before the first progress line, bad settings refused
before any cache is built, one line on what initialisation left unused, the train loss as a
per-example mean (the optimizer still gets the official batch sum) and progress lines in short
runs."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers.paths import REPO_ROOT

import run_finetuning as rf
from electra_tf.checkpoints import LoadReport
from electra_tf.config import FinetuningConfig
from electra_tf.finetuning import registry, run_settings
from electra_tf.finetuning.init_report import init_lines
from electra_tf.finetuning.runner import LOGGED_TRAIN_LOSS, train_step_outputs

TINY = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2},
        "embedding_size": 16, "max_seq_length": 32, "train_batch_size": 8,
        "eval_batch_size": 8, "init_checkpoint": None, "seed": 3, "task_names": ["rte"]}


def test_default_iterations_per_loop_reports_every_tenth_of_a_short_run():
  config = FinetuningConfig("m", "D", task_names=["rte"])
  assert config.iterations_per_loop == 1000  # the official default is kept in the config
  assert [config.train_iterations_per_loop(n) for n in (5, 10, 95, 5000, 20000, 10**6)] == [
      1, 1, 9, 500, 1000, 1000]
  user = FinetuningConfig("m", "D", task_names=["rte"], iterations_per_loop=1000)
  assert [user.train_iterations_per_loop(n) for n in (5, 95, 5000)] == [5, 95, 1000]
  assert FinetuningConfig("m", "D", task_names=["rte"],
                          iterations_per_loop=7).train_iterations_per_loop(95) == 7
  config.iterations_per_loop = 20  # set after construction: also the user's value
  assert config.train_iterations_per_loop(95) == 20
  debug = FinetuningConfig("m", "D", task_names=["rte"], debug=True)
  assert debug.train_iterations_per_loop(5000) == 1


def test_train_step_outputs_mean_skips_padding():
  loss = tf.constant(6.0)
  out = train_step_outputs(loss, tf.constant([0, 1, 0, 2, 2]), n_tasks=2)  # 2 = padding
  assert float(out["total_loss"]) == 6.0 and float(out[LOGGED_TRAIN_LOSS]) == 2.0
  only_padding = train_step_outputs(tf.constant(0.0), tf.constant([2, 2]), n_tasks=2)
  assert float(only_padding[LOGGED_TRAIN_LOSS]) == 0.0


def _rows(path, start, stop):
  with open(path, encoding="utf-8") as f:
    rows = f.read().split("\n")
  return "\n".join([rows[0]] + rows[start:stop]) + "\n"


def _tensorboard_tags(model_dir):
  tags = {}
  for path in tf.io.gfile.glob(f"{model_dir}/events.out.tfevents.*"):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        tags.setdefault(value.tag, []).append(
            float(tf.make_ndarray(value.tensor)) if value.HasField("tensor")
            else value.simple_value)
  return tags


@pytest.mark.slow
def test_short_run_logs_mean_loss_often(data_dir, vocab_file, tmp_path, capsys):
  rte = tmp_path / "finetuning_data" / "rte"
  rte.mkdir(parents=True)
  (rte / "train.tsv").write_text(_rows(data_dir / "glue" / "RTE" / "train.tsv", 1, 17))
  (rte / "dev.tsv").write_text(_rows(data_dir / "glue" / "RTE" / "dev.tsv", 1, 9))
  config = FinetuningConfig("m", str(tmp_path), **TINY, vocab_file=vocab_file,
                            num_train_epochs=5.0)  # 16 rows / batch 8 * 5 = 10 steps
  results = rf.run_finetuning(config)
  out = capsys.readouterr().out
  progress = [line for line in out.splitlines() if re.match(r"\d+/10 = ", line)]
  assert [line.split("/")[0] for line in progress] == [str(i) for i in range(1, 11)]
  means = []
  for line in progress:
    assert "total_loss" not in line
    means.append(float(re.search(LOGGED_TRAIN_LOSS + r": ([0-9.e+-]+)", line).group(1)))
  # two-class cross-entropy of a tiny model near initialisation: about ln 2 = 0.69 per example
  # on average (the batch sum logged before was about 8 times that)
  assert all(m > 0 for m in means) and 0.3 < np.mean(means) < 1.5
  assert '"model_name"' not in out  # the config goes to a file, named once
  config_file = run_settings.full_config_path(config)
  assert out.count(f"  full config: {config_file}\n") == 1
  with open(config_file, encoding="utf-8") as f:
    assert json.load(f) == json.loads(config.to_json())
  tags = _tensorboard_tags(config.model_dir + "_1")
  assert "total_loss" not in tags and len(tags[LOGGED_TRAIN_LOSS]) == 10
  assert np.all(np.isfinite(tags[LOGGED_TRAIN_LOSS]))
  assert 0.3 < results[0]["rte"]["loss"] < 1.5  # the dev loss: same unit


PROGRESS = re.compile(r"^\d+/\d+ = ")


def _write_rte(folder, data_dir):
  rte = folder / "finetuning_data" / "rte"
  rte.mkdir(parents=True)
  (rte / "train.tsv").write_text(_rows(data_dir / "glue" / "RTE" / "train.tsv", 1, 17))
  (rte / "dev.tsv").write_text(_rows(data_dir / "glue" / "RTE" / "dev.tsv", 1, 9))


def _run_finetuning(data_dir, hparams):
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  env.update(PYTHONPATH=str(REPO_ROOT), CUDA_VISIBLE_DEVICES="-1")
  return subprocess.run(
      [sys.executable, "run_finetuning.py", "--data_dir", str(data_dir), "--model_name", "m",
       "--hparams", json.dumps(hparams)], cwd=REPO_ROOT, env=env, capture_output=True,
      text=True, timeout=600)


@pytest.mark.slow
def test_run_checks_settings_first_and_prints_little_before_progress(
    reference_dir, data_dir, tmp_path):
  _write_rte(tmp_path, data_dir)
  hparams = {"task_names": ["rte"], "init_checkpoint": str(reference_dir / "electra_small_2l"),
             "vocab_file": str(reference_dir / "vocab.txt"), "train_batch_size": 8,
             "eval_batch_size": 8, "num_train_epochs": 1.0, "seed": 1, "doc_stride": 64}
  # A bad max_seq_length: one error line, before any config, cache or model file is written.
  bad = _run_finetuning(tmp_path, {**hparams, "max_seq_length": 4096})
  assert bad.returncode == 1, bad.stderr[-3000:]
  assert bad.stderr.splitlines() == [
      "run_finetuning.py: error: max_seq_length 4096 exceeds the model's "
      "max_position_embeddings 512: set \"max_seq_length\" to at most 512 in --hparams"]
  assert len(bad.stdout.splitlines()) <= 1  # at most where the model's shape came from
  assert not (tmp_path / "models").exists()

  proc = _run_finetuning(tmp_path, {**hparams, "max_seq_length": 32})
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stdout.splitlines()
  first_progress = next(i for i, line in enumerate(lines) if PROGRESS.match(line))
  assert first_progress <= 20, "\n".join(lines[:first_progress])
  before = "\n".join(lines[:first_progress])
  assert '"model_name"' not in before and "{" not in before  # no JSON config on the console
  # settings of question answering do not matter for rte, even when set
  for qa_setting in ("doc_stride", "max_query_length", "answerable", "qa_"):
    assert qa_setting not in before, before
  assert "  training: max_seq_length 32, train_batch_size 8, num_train_epochs 1.0" in before
  config_file = next(line.split(": ", 1)[1] for line in lines
                     if line.startswith("  full config: "))
  with open(config_file, encoding="utf-8") as f:
    assert json.load(f)["doc_stride"] == 64
  # the official pre-training checkpoint's generator, heads and Adam slots: one line, no list
  keys = [k for k, _ in tf.train.list_variables(str(reference_dir / "electra_small_2l"))]
  encoder = sum(k.startswith("electra/") for k in keys)
  heads = sum(k.split("/")[0] in ("generator", "generator_predictions",
                                  "discriminator_predictions") for k in keys)
  assert encoder + heads + 1 == len(keys)  # + global_step
  init = [line for line in lines if line.startswith("Initialised from ")]
  assert init == [f"Initialised from {reference_dir / 'electra_small_2l'}: {encoder} tensors "
                  f"loaded; unused as expected: pre-training heads and generator ({heads}), "
                  "optimizer state (1); new: rte head"]
  assert not [line for line in lines if "not used" in line or line.startswith("warning:")]


def test_init_lines_count_the_expected_leftovers_and_name_the_others():
  value = "/.ATTRIBUTES/VARIABLE_VALUE"
  report = LoadReport(
      loaded=("electra/embeddings/word_embeddings",) * 3,
      unused_optimizer_state=("global_step", "electra/encoder/layer_0/output/dense/kernel/adam_m"),
      unused_other=(f"model/discriminator_head/dense/bias{value}",
                    f"model/generator/blocks/0/attention_norm/beta{value}",
                    f"model/generator_head/output_bias{value}",
                    "generator_predictions/output_bias", "discriminator_predictions/dense/bias",
                    "generator/encoder/layer_0/output/dense/bias",
                    "task_specific/sst/dense/bias", f"model/heads/mnli/dense/kernel{value}"),
      missing=("task_specific/rte/dense/bias", "task_specific/rte/dense/kernel"))
  assert init_lines("M", report, ["rte"]) == [
      "Initialised from M: 3 tensors loaded; unused as expected: pre-training heads and "
      "generator (6), other tasks' heads (2), optimizer state (2); new: rte head"]
  surprising = LoadReport(loaded=("a",), unused_optimizer_state=(),
                          unused_other=("somewhere/else/kernel", "x/y", "p/q", "r/s"),
                          missing=("electra/pooler/dense/bias",))
  assert init_lines("M", surprising, ["rte"]) == [
      "Initialised from M: 1 tensors loaded",
      "warning: not used: somewhere/else/kernel, x/y, p/q ... (4 in all)",
      "warning: not in the checkpoint (initialised randomly): electra/pooler/dense/bias"]


def _tasks(config, vocab_file):
  tokenizer = registry.make_tokenizer(vocab_file, True)
  return registry.get_tasks(config.task_names, tokenizer, config.data_dir,
                            config.max_seq_length)


def test_settings_block_is_short_and_shows_the_settings_of_the_run_task_kinds(vocab_file):
  changed = {"doc_stride": 64, "max_answer_length": 20, "double_unordered": False,
             "keep_all_models": False, "model_hparam_overrides": {"num_hidden_layers": 2}}
  for tasks, qa_shown in ((["rte"], False), (["squad"], True)):
    config = FinetuningConfig("m", "D", task_names=tasks, vocab_file=vocab_file, **changed)
    lines = run_settings.settings_lines(config, _tasks(config, vocab_file), "F")
    assert 5 <= len(lines) <= 8 and max(map(len, lines)) <= run_settings.WIDTH, lines
    text = "\n".join(lines)
    assert lines[0].startswith(f"Fine-tuning {tasks[0]} from D/models/m: 1 trial(s), unseeded")
    assert lines[1] == "  model: 2 layers, hidden 256, 4 heads, embedding 128, vocabulary 30522"
    assert ("doc_stride 64" in text) == ("max_answer_length 20" in text) == qa_shown
    assert ("question answering:" in text) == qa_shown
    assert "double_unordered" not in text  # neither is a symmetric pair task
    assert "keep_all_models false" in text and lines[-1] == "  full config: F"
  mrpc = FinetuningConfig("m", "D", task_names=["mrpc"], vocab_file=vocab_file, **changed)
  assert "double_unordered false" in "\n".join(
      run_settings.settings_lines(mrpc, _tasks(mrpc, vocab_file), "F"))
