"""Model directories end to end: run_pretraining.py writes hparams.json + vocab.txt, then
run_finetuning.py and convert take the model's shape from them with no shape hparams given;
a contradicting shape is a one-line error; convert is quiet."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf
from helpers.paths import REPO_ROOT

from data_prep import build_pretraining_dataset as bpd
from electra_tf.interop.conversion import convert_finetuned
from electra_tf.reading import model_dir
from electra_tf.reading.model_source import finetuning_config, pretraining_config

REPO = REPO_ROOT
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1"}
VOCAB_SIZE = 1000  # the first lines of the vocab_file fixture's 1016: not the default 30522
SHAPE = {"vocab_size": VOCAB_SIZE, "embedding_size": 16,
         "model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 3}}
TRAINING = {"max_seq_length": 32, "train_batch_size": 8, "eval_batch_size": 8,
            "num_train_steps": 2, "iterations_per_loop": 1, "save_checkpoints_steps": 2,
            "num_warmup_steps": 1, "seed": 3}
WARNING = "Value in checkpoint could not be found"
pytestmark = pytest.mark.slow  # subprocesses: a pre-training, a fine-tuning and two converts


def _run(*args, timeout=300):
  return subprocess.run([sys.executable, *args], cwd=REPO, env=ENV, capture_output=True,
                        text=True, timeout=timeout)


def _rows(path, n):
  with open(path, encoding="utf-8") as f:
    return "\n".join(f.read().split("\n")[:n + 1]) + "\n"


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, data_dir, vocab_file):
  """data_dir with a model pre-trained by run_pretraining.py (models/tiny) and RTE rows."""
  root = tmp_path_factory.mktemp("model_dirs")
  with open(vocab_file, encoding="utf-8") as f:
    (root / "vocab.txt").write_text("".join(f.readlines()[:VOCAB_SIZE]), encoding="utf-8")
  corpus = root / "corpus"
  corpus.mkdir()
  with open(data_dir / "gutenberg" / "austen-emma.txt", encoding="utf-8") as f:
    (corpus / "emma.txt").write_text(f.read(20000), encoding="utf-8")
  bpd.build(bpd.BuildArgs(corpus_dir=str(corpus), vocab_file=str(root / "vocab.txt"),
                          output_dir=str(root / "pretrain_tfrecords"), max_seq_length=32,
                          num_out_files=1, seed=1))
  rte = root / "finetuning_data" / "rte"
  rte.mkdir(parents=True)
  for split, n in (("train", 16), ("dev", 8)):
    (rte / f"{split}.tsv").write_text(_rows(data_dir / "glue" / "RTE" / f"{split}.tsv", n),
                                      encoding="utf-8")
  proc = _run("run_pretraining.py", f"--data_dir={root}", "--model_name=tiny",
              f"--hparams={json.dumps({**SHAPE, **TRAINING})}")
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  return root


def test_pretraining_writes_hparams_and_vocab(pretrained):
  home = pretrained / "models" / "tiny"
  assert (home / "vocab.txt").read_bytes() == (pretrained / "vocab.txt").read_bytes()
  stored = model_dir.read_model_hparams(str(home))
  assert stored["vocab_size"] == VOCAB_SIZE and stored["embedding_size"] == 16
  assert stored["model_hparam_overrides"] == {"hidden_size": 32, "num_hidden_layers": 3,
                                              "num_attention_heads": 1, "intermediate_size": 128}
  assert stored["num_train_steps"] == 2 and tf.train.latest_checkpoint(str(home))
  # Resuming needs no shape; a contradicting one is an error naming both values.
  lines = []
  config = pretraining_config("tiny", str(pretrained), {"num_train_steps": 4}, lines.append)
  assert lines == [f"model shape from hparams.json in {home}"]
  assert config.vocab_size == VOCAB_SIZE and config.embedding_size == 16
  with pytest.raises(ValueError) as e:
    pretraining_config("tiny", str(pretrained), {"vocab_size": 30522})
  assert str(e.value) == (f"hparams.json in {home} says vocab_size {VOCAB_SIZE} but --hparams "
                          "gives 30522")


def test_finetuning_takes_the_shape_from_the_model_dir(pretrained):
  hparams = {"task_names": ["rte"], "max_seq_length": 32, "train_batch_size": 8,
             "eval_batch_size": 8, "num_train_epochs": 1.0, "seed": 1}
  config = finetuning_config("tiny", str(pretrained), hparams)
  assert (config.vocab_size, config.embedding_size) == (VOCAB_SIZE, 16)
  proc = _run("run_finetuning.py", f"--data_dir={pretrained}", "--model_name=tiny",
              f"--hparams={json.dumps(hparams)}")
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  home = pretrained / "models" / "tiny"
  assert f"model shape from hparams.json in {home}" in proc.stdout
  assert "rte: accuracy" in proc.stdout
  trial = home / "finetuning_models" / "rte_model_1"
  for folder in (trial, trial / "tf1"):
    stored = model_dir.read_model_hparams(str(folder))
    assert stored["task_names"] == ["rte"] and stored["vocab_size"] == VOCAB_SIZE
    assert (folder / "vocab.txt").read_bytes() == (pretrained / "vocab.txt").read_bytes()
  # The fine-tuned model converts with nothing but its folder (and the data for label lists).
  out = pretrained / "converted_rte"
  result = convert_finetuned(str(trial), {}, str(out), str(pretrained))
  assert result["signatures"] == ["classify", "classify_text"]
  assert model_dir.read_model_hparams(str(out))["task_names"] == ["rte"]
  assert (out / "saved_model" / "assets" / "vocab.txt").exists()
  # A contradicting shape: one line naming both values.
  bad = {**hparams, "model_hparam_overrides": {"num_hidden_layers": 12}}
  with pytest.raises(ValueError) as e:
    finetuning_config("tiny", str(pretrained), bad)
  assert str(e.value) == (f"hparams.json in {home} says model_hparam_overrides.num_hidden_layers"
                          " 3 but --hparams gives 12")


def test_convert_takes_the_shape_from_the_model_dir_quietly(pretrained):
  home = pretrained / "models" / "tiny"
  out = pretrained / "converted"
  proc = _run("-m", "electra_tf.convert", f"--checkpoint={home}", f"--output_dir={out}")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.splitlines()[0] == f"model shape from hparams.json in {home}"
  assert WARNING not in proc.stdout + proc.stderr
  assert proc.stderr == ""
  stored = model_dir.read_model_hparams(str(out))
  assert stored == model_dir.read_model_hparams(str(home))  # shape and training record
  reader = tf.train.load_checkpoint(str(out / "tf1" / "model.ckpt"))
  shapes = reader.get_variable_to_shape_map()
  assert shapes["electra/embeddings/word_embeddings"] == [VOCAB_SIZE, 16]
  assert "electra/encoder/layer_2/output/dense/kernel" in shapes
  assert int(reader.get_tensor("global_step")) == 2
  for name in ("discriminator", "generator"):
    assert (out / "hf" / name / "tokenizer_config.json").exists()
  proc = _run("-m", "electra_tf.convert", f"--checkpoint={home}", f"--output_dir={out}_bad",
              '--hparams={"vocab_size": 30522}')
  assert proc.returncode == 1 and proc.stdout == ""
  assert proc.stderr.strip() == (f"convert: error: hparams.json in {home} says vocab_size "
                                 f"{VOCAB_SIZE} but --hparams gives 30522")


def test_undescribed_checkpoint_with_wrong_shape_fails_on_one_line(pretrained, tmp_path):
  """Our TF2 checkpoint without its hparams.json, converted with the default shape: the
  issue's case. One error line, none of TensorFlow's restore warnings."""
  home = pretrained / "models" / "tiny"
  bare = tmp_path / "bare"
  bare.mkdir()
  for path in home.iterdir():
    if path.name.startswith("ckpt-") or path.name == "checkpoint":
      (bare / path.name).write_bytes(path.read_bytes())
  proc = _run("-m", "electra_tf.convert", f"--checkpoint={bare}", f"--output_dir={tmp_path}/o")
  assert proc.returncode == 1 and WARNING not in proc.stdout + proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("convert: error: "), proc.stderr[-3000:]
