"""Fine-tuning's speed settings (hparams ``jit_compile``, ``mixed_precision``,
``xla_elementwise``): refused
values, the settings block, float32 heads under bfloat16, and runs within a stated tolerance
of the float32 run."""

from __future__ import annotations

import pathlib
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from electra_tf import training
from electra_tf.config import FinetuningConfig
from electra_tf.finetuning import finetuning_model as model_lib
from electra_tf.finetuning import registry, run_settings
from electra_tf.training import hardware

# Encoder dropout off: the runs then differ only by arithmetic and by the classifier's dropout
# masks, which XLA draws from the same seeds with another generator.
TINY = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2,
                                   "hidden_dropout_prob": 0.0,
                                   "attention_probs_dropout_prob": 0.0},
        "embedding_size": 16, "max_seq_length": 64, "train_batch_size": 8, "eval_batch_size": 8,
        "init_checkpoint": None, "seed": 3, "task_names": ["rte"], "num_train_epochs": 3.0}
# The stated tolerance: dev loss within 1% (relative) of the float32 run's; measured on an AMD
# EPYC (avx512_bf16): XLA 0.3%, bfloat16 0.04%, XLA + bfloat16 0.4%.
LOSS_RTOL = 0.01


def test_an_unsupported_precision_is_refused_in_one_line():
  config = FinetuningConfig("m", "D", task_names=["rte"], mixed_precision="float16")
  with pytest.raises(ValueError, match=r"^mixed_precision 'float16' is not supported for "
                                       r"fine-tuning: set \"mixed_precision\" to \"bfloat16\""):
    run_settings.check_settings(config)
  for accepted in ("bfloat16", "auto"):
    run_settings.check_settings(FinetuningConfig("m", "D", task_names=["rte"],
                                                 mixed_precision=accepted))


def test_the_settings_block_shows_the_speed_settings(vocab_file):
  config = FinetuningConfig("m", "D", task_names=["rte"], vocab_file=vocab_file,
                            jit_compile=True, mixed_precision="bfloat16", xla_elementwise=True)
  tasks = registry.get_tasks(["rte"], registry.make_tokenizer(vocab_file), "D", 128)
  text = "\n".join(run_settings.settings_lines(config, tasks, "F"))
  assert "jit_compile true" in text and "mixed_precision bfloat16" in text, text
  assert "xla_elementwise true" in text, text


@pytest.mark.parametrize("units, compute", [
    ("avx512_bf16 in /proc/cpuinfo",
     "compute: mixed bfloat16 (auto: avx512_bf16 in /proc/cpuinfo)"),
    (None, "compute: float32 (auto: no bfloat16 units on this device)")])
def test_auto_precision_is_resolved_and_said(monkeypatch, vocab_file, units, compute):
  """"auto" is bfloat16 where the device has the units, float32 elsewhere: the block says which
  and the runner builds the model under that policy."""
  monkeypatch.setattr(hardware, "device_bfloat16_units", lambda: units)
  config = FinetuningConfig("m", "D", task_names=["rte"], vocab_file=vocab_file,
                            mixed_precision="auto")
  tasks = registry.get_tasks(["rte"], registry.make_tokenizer(vocab_file), "D", 128)
  text = "\n".join(run_settings.settings_lines(config, tasks, "F"))
  assert compute in text, text
  assert training.resolve_precision("auto")[0] == ("bfloat16" if units else None)


def test_heads_run_in_float32_under_bfloat16(tmp_path, vocab_file, reference_dir):
  """The encoder computes in bfloat16, each head's outputs and the loss are float32."""
  shutil.copy(reference_dir / "finetune_heads" / "chunk_label_mapping.json", tmp_path)
  names = ["rte", "sts", "chunk"]
  config = FinetuningConfig("m", str(tmp_path), task_names=names, vocab_file=vocab_file,
                            **{k: TINY[k] for k in ("model_hparam_overrides", "embedding_size",
                                                    "max_seq_length")})
  tasks = registry.get_tasks(names, registry.make_tokenizer(vocab_file), str(tmp_path), 64,
                             preprocessed_data_dir=str(tmp_path))
  training.set_mixed_precision_policy("bfloat16")
  try:
    model = model_lib.create_model(config, tasks)
  finally:
    training.set_mixed_precision_policy(None)
  assert tf_keras.mixed_precision.global_policy().name == "float32"
  batch, length = 4, 64
  features = {"input_ids": tf.ones([batch, length], tf.int32),
              "input_mask": tf.ones([batch, length], tf.int32),
              "segment_ids": tf.zeros([batch, length], tf.int32),
              "task_id": tf.constant([0, 1, 2, 0]), "rte_label_ids": tf.zeros([batch], tf.int32),
              "sts_targets": tf.ones([batch]), "chunk_labels": tf.zeros([batch, length], tf.int32),
              "chunk_labeled_positions": tf.zeros([batch, length], tf.int32),
              "chunk_labels_mask": tf.ones([batch, length], tf.int32)}
  features.update({f"{n}_eid": tf.range(batch) for n in names})
  out = model(features, training=True)
  assert out["sequence_output"].dtype == tf.bfloat16
  assert out["loss"].dtype == tf.float32 and np.isfinite(out["loss"].numpy())
  assert out["rte"]["logits"].dtype == out["sts"]["predictions"].dtype == tf.float32
  assert out["chunk"]["logits"].dtype == tf.float32
  assert all(v.dtype == tf.float32 for v in model.trainable_variables)


def _run(root: pathlib.Path, name: str, vocab_file: str, **more) -> float:
  """Dev loss of one tiny RTE run (15 steps from random initialisation, seed 3)."""
  from electra_tf.finetuning.trials import run_finetuning

  results = run_finetuning(FinetuningConfig(name, str(root), vocab_file=vocab_file,
                                            **{**TINY, **more}))
  return results[0]["rte"]["loss"]


@pytest.mark.slow
def test_xla_and_bfloat16_runs_end_within_the_tolerance_of_float32(data_dir, vocab_file,
                                                                   tmp_path, capsys):
  rte = tmp_path / "finetuning_data" / "rte"
  rte.mkdir(parents=True)
  for split, stop in (("train", 41), ("dev", 17)):
    lines = (data_dir / "glue" / "RTE" / f"{split}.tsv").read_text(encoding="utf-8").split("\n")
    (rte / f"{split}.tsv").write_text("\n".join(lines[:stop]) + "\n", encoding="utf-8")
  float32 = _run(tmp_path, "f32", vocab_file)
  losses = {}
  for name, more in (("xla", {"jit_compile": True}), ("bf16", {"mixed_precision": "bfloat16"}),
                     ("bf16_fused", {"mixed_precision": "bfloat16", "xla_elementwise": True})):
    loss = losses[name] = _run(tmp_path, name, vocab_file, **more)
    # not the float32 graph (the setting took effect), and within the tolerance
    assert loss != float32 and abs(loss - float32) <= LOSS_RTOL * float32, (name, loss, float32)
  assert losses["bf16_fused"] != losses["bf16"]  # XLA's own arithmetic: the fusion took effect
  assert "Traceback" not in capsys.readouterr().out
