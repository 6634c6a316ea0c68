"""The convert CLI: TF1 -> TF2 / SavedModel / TF1, golden outputs through the signatures."""

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers.checkpoint_asserts import assert_same_checkpoint, max_diff
from helpers.paths import REPO_ROOT

from electra_tf.interop.conversion import convert, convert_finetuned
from electra_tf.interop.hf_export import load_hf_export

ATOL = 1e-5




@pytest.mark.parametrize("folder_name", ["electra_small_2l", "electric_2l"])
def test_convert_reproduces_golden_outputs(reference_dir, tmp_path, folder_name):
  folder = reference_dir / folder_name
  g = dict(np.load(folder / "golden.npz"))
  out = tmp_path / "out"
  result = convert(str(folder / "model.ckpt"), str(folder / "hparams.json"), str(out), hf=True)
  assert result["signatures"] == ["mlm", "rtd"]
  assert_same_checkpoint(str(folder / "model.ckpt"), result["tf1"])  # TF1 -> ours -> TF1
  if folder_name == "electric_2l":
    assert result["hf"] is None  # no Hugging Face class for the two-tower generator
  else:
    reader = tf.train.load_checkpoint(str(folder / "model.ckpt"))
    hf_tensors = load_hf_export(result["hf"])
    assert set(hf_tensors) == set(reader.get_variable_to_shape_map()) - {"global_step"}
    for name, value in hf_tensors.items():
      np.testing.assert_array_equal(value, reader.get_tensor(name), name)

  loaded = tf.saved_model.load(result["saved_model"])
  rtd, mlm = loaded.signatures["rtd"], loaded.signatures["mlm"]
  clean = rtd(input_ids=tf.constant(g["input_ids"]), input_mask=tf.constant(g["input_mask"]),
              segment_ids=tf.constant(g["segment_ids"]))
  assert max_diff(clean["rtd_logits"], g["clean_disc_logits"]) <= ATOL
  assert max_diff(clean["sequence_output"], g["clean_disc_sequence_output"]) <= ATOL
  electric = folder_name == "electric_2l"
  # ELECTRA's generator reads the masked input; Electric's cloze towers the original one.
  gen_ids = g["input_ids"] if electric else g["masked_input_ids"]
  gen = mlm(input_ids=tf.constant(gen_ids), input_mask=tf.constant(g["input_mask"]),
            segment_ids=tf.constant(g["segment_ids"]),
            masked_lm_positions=tf.constant(g["masked_lm_positions"]))
  rows, slots = g["gen_mlm_logits_real_index"].T
  assert max_diff(gen["mlm_logits"].numpy()[rows, slots], g["gen_mlm_logits_real"]) <= ATOL
  assert max_diff(gen["mlm_logits"].numpy().max(-1), g["gen_mlm_logits_max"]) <= ATOL
  expected_hidden = g["gen_sequence_output"] if electric else g["gen_all_layer_outputs"][-1]
  assert max_diff(gen["sequence_output"], expected_hidden) <= ATOL
  if not electric:
    fake = rtd(input_ids=tf.constant(g["fake_input_ids"]),
               input_mask=tf.constant(g["input_mask"]), segment_ids=tf.constant(g["segment_ids"]))
    assert max_diff(fake["rtd_logits"], g["disc_logits"]) <= ATOL

  # Dynamic batch and sequence length.
  short = rtd(input_ids=tf.constant(g["input_ids"][:2, :40]),
              input_mask=tf.constant(g["input_mask"][:2, :40]),
              segment_ids=tf.constant(g["segment_ids"][:2, :40]))
  assert short["rtd_logits"].shape == (2, 40)

  # Our own TF2 checkpoint converts back to the same TF1 tensors.
  again = convert(result["tf2"], str(folder / "hparams.json"), str(tmp_path / "again"))
  assert_same_checkpoint(str(folder / "model.ckpt"), again["tf1"])


def test_convert_with_wrong_generator_size_fails_on_one_line(reference_dir, tmp_path):
  folder = reference_dir / "electra_small_2l"
  hparams = json.loads((folder / "hparams.json").read_text())
  hparams["generator_hidden_size"] = 1.0
  with pytest.raises(ValueError) as err:
    convert(str(folder / "model.ckpt"), hparams, str(tmp_path))
  # The folder's hparams.json describes the checkpoint: the contradiction is named up front.
  assert str(err.value) == (f"hparams.json in {folder} says generator_hidden_size 0.25 but "
                            "--hparams gives 1.0")


def test_convert_with_other_objective_fails(reference_dir, tmp_path):
  # The Electric checkpoint read as a plain ELECTRA model: its hparams.json says otherwise.
  folder = reference_dir / "electric_2l"
  hparams = json.loads((reference_dir / "electra_small_2l" / "hparams.json").read_text())
  hparams.update(electra_objective=True, electric_objective=False, two_tower_generator=False)
  with pytest.raises(ValueError) as err:
    convert(str(folder / "model.ckpt"), hparams, str(tmp_path))
  assert str(err.value) == (f"hparams.json in {folder} says electra_objective false but "
                            "--hparams gives true")


@pytest.mark.slow
def test_cli_reports_missing_checkpoint(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "electra_tf.convert", f"--checkpoint={tmp_path}/nope",
       f"--output_dir={tmp_path}/out", '--hparams={"model_size": "small"}'],
      cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
  assert proc.returncode != 0
  assert "checkpoint not found" in proc.stderr


def test_encoder_export_is_hub_style(reference_dir, tmp_path):
  folder = reference_dir / "electra_small_2l"
  g = dict(np.load(folder / "golden.npz"))
  result = convert(str(folder / "model.ckpt"), str(folder / "hparams.json"), str(tmp_path))
  encoder = tf.saved_model.load(str(tmp_path / "encoder"))
  inputs = {"input_word_ids": tf.constant(g["input_ids"]),
            "input_mask": tf.constant(g["input_mask"]),
            "input_type_ids": tf.constant(g["segment_ids"])}
  out = encoder(inputs, False)
  assert max_diff(out["sequence_output"], g["clean_disc_sequence_output"]) <= ATOL
  assert max_diff(out["pooled_output"], g["clean_disc_sequence_output"][:, 0]) <= ATOL
  assert len(out["encoder_outputs"]) == 2
  names = {v.name.split(":")[0] for v in encoder.trainable_variables}
  assert "electra/encoder/layer_1/output/dense/kernel" in names
  assert not any(n.startswith("generator") for n in names)
  served = encoder.signatures["serving_default"](**inputs)
  assert max_diff(served["pooled_output"], g["clean_disc_sequence_output"][:, 0]) <= ATOL
  assert result["tf1"]


def test_convert_finetuned_model_task_signatures(reference_dir, tmp_path):
  folder = reference_dir / "finetune_heads"
  g = dict(np.load(folder / "golden.npz"))
  data_dir = tmp_path / "data"
  (data_dir / "finetuning_data").mkdir(parents=True)
  (data_dir / "vocab.txt").symlink_to(reference_dir / "vocab.txt")
  for task in ("rte", "sts", "squad"):
    (data_dir / "finetuning_data" / task).symlink_to(folder / "raw" / task)
  hparams = json.loads((folder / "hparams.json").read_text())
  hparams["task_names"] = ["rte", "sts", "squad"]  # chunk's head is then left unused
  result = convert_finetuned(str(folder / "model.ckpt"), hparams, str(tmp_path / "out"),
                             str(data_dir))
  assert result["signatures"] == ["classify_rte", "classify_sts", "classify_text_rte",
                                  "classify_text_sts", "squad"]
  loaded = tf.saved_model.load(result["saved_model"])

  def run(name, task):
    return loaded.signatures[name](**{k: tf.constant(g[f"{task}/in/{k}"])
                                      for k in ("input_ids", "input_mask", "segment_ids")})

  rte = run("classify_rte", "rte")
  assert max_diff(rte["logits"], g["rte/out/logits"]) <= ATOL
  assert max_diff(tf.reduce_sum(rte["probabilities"], -1), np.ones(3)) <= 1e-6
  assert max_diff(run("classify_sts", "sts")["logits"], g["sts/out/predictions"]) <= ATOL
  squad = run("squad", "squad")
  assert max_diff(squad["start_logits"], g["squad/out/start_logits"]) <= 3e-5  # -1000 region
  assert max_diff(squad["answerable_logit"], g["squad/out/answerable_logit"]) <= ATOL
  np.testing.assert_array_equal(squad["start_top_index"], g["squad/out/start_top_index"])
  reader = tf.train.load_checkpoint(result["tf1"])
  original = tf.train.load_checkpoint(str(folder / "model.ckpt"))
  for name in reader.get_variable_to_shape_map():
    if name != "global_step":
      np.testing.assert_array_equal(reader.get_tensor(name), original.get_tensor(name), name)
