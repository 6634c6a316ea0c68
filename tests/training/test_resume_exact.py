"""Resume-exact training: dropout masks drawn from the per-step seed, seeded data streams that
continue after a resume, and a run SIGKILLed three times (once inside a save) that ends
bit-identical to an uninterrupted one.
"""

import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from helpers import pretrain_data, procs
from helpers.paths import HELPERS, REPO_ROOT

from electra_tf import training
from electra_tf.config import PretrainingConfig
from electra_tf.finetuning import features
from electra_tf.finetuning.builtin import classification
from electra_tf.finetuning.finetuning_model import FinetuningModel
from electra_tf.modeling import dropout as dropout_lib
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.encoder import Transformer
from electra_tf.pretraining.builder import build_pretraining_model
from electra_tf.pretraining.data import pretraining_dataset
from electra_tf.training.checkpoint_files import step_of

REPO = REPO_ROOT
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1"}
SPECIAL = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[MASK]": 3}


def _tower(layers: int = 2) -> Transformer:
  config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=layers,
                      num_attention_heads=2, intermediate_size=32, max_position_embeddings=16,
                      hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
  tower = Transformer(config)
  tower.build(None)
  return tower


def _trainer_seed(seed: int, step: int, replica: int, replicas: int = 2) -> tf.Tensor:
  """The Trainer's per-step, per-replica seed (see electra_tf/training/loop.py)."""
  return tf.constant([seed, step * replicas + replica], tf.int64)


@pytest.fixture(scope="module")
def tower_inputs():
  ids = tf.constant(np.random.RandomState(0).randint(4, 50, size=[3, 12]), tf.int32)
  return ids, tf.ones_like(ids), tf.zeros_like(ids)


def test_dropout_masks_follow_the_seed(tower_inputs):
  tower = _tower()
  run = lambda **kw: tower(*tower_inputs, **kw)["sequence_output"].numpy()
  a = run(training=True, seed=_trainer_seed(7, 5, 1))
  np.testing.assert_array_equal(a, run(training=True, seed=_trainer_seed(7, 5, 1)))
  for other in (_trainer_seed(7, 6, 1), _trainer_seed(7, 5, 0), _trainer_seed(8, 5, 1)):
    assert not np.array_equal(a, run(training=True, seed=other))  # step, replica, seed
  evaluated = run(training=False)
  np.testing.assert_array_equal(evaluated, run(training=False, seed=_trainer_seed(7, 5, 1)))
  assert not np.array_equal(a, evaluated)
  # No seed: the Keras layers' stateful dropout, a new mask every call.
  b, c = run(training=True), run(training=True)
  assert not np.array_equal(b, c) and not np.array_equal(b, evaluated)


def test_each_dropout_site_of_a_step_draws_its_own_mask(tower_inputs, monkeypatch):
  """The tied generator runs the discriminator tower twice: every one of the 2 runs x
  (embeddings + 2 layers x 3 sites) dropout calls gets a different seed."""
  config = PretrainingConfig("M", "D", vocab_size=50, untied_generator=False, seed=3,
                             model_hparam_overrides={"hidden_size": 16, "num_hidden_layers": 2,
                                                     "num_attention_heads": 2,
                                                     "intermediate_size": 32},
                             max_seq_length=12)
  model = build_pretraining_model(config, SPECIAL)
  seeds = []
  original = dropout_lib.seeded_dropout

  def recording(x, rate, seed):
    seeds.append(tuple(seed.numpy()))
    return original(x, rate, seed)

  monkeypatch.setattr(dropout_lib, "seeded_dropout", recording)
  ids, mask, segments = tower_inputs
  features = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
  model(features, training=True, seed=_trainer_seed(3, 0, 0))
  assert len(seeds) == 2 * (1 + 2 * 3) and len(set(seeds)) == len(seeds)
  first = list(seeds)
  seeds.clear()
  model(features, training=True, seed=_trainer_seed(3, 1, 0))
  assert not set(first) & set(seeds)  # the next step draws new masks everywhere
  seeds.clear()
  model(features, training=False, seed=_trainer_seed(3, 0, 0))
  assert not seeds  # eval: no dropout


VOCAB = pretrain_data.CHAR_VOCAB


@pytest.fixture(scope="module")
def pretrain_dir(tmp_path_factory, reference_dir) -> pathlib.Path:
  """A data_dir in the official layout: vocab.txt + 2 TFRecord shards of real text, length 32."""
  return pretrain_data.char_vocab_data_dir(tmp_path_factory.mktemp("resume"),
                                          reference_dir / "pretrain_data" / "corpus")


def test_seeded_stream_skipping_consumed_steps_continues_the_uninterrupted_one(pretrain_dir):
  pattern = str(pretrain_dir / "pretrain_tfrecords" / "*")
  stream = lambda skip: pretraining_dataset(pattern, 8, 32, seed=5, skip_steps=skip)
  n_examples = sum(1 for _ in tf.data.TFRecordDataset(tf.io.gfile.glob(pattern)))
  skip = n_examples // 8 + 3  # past the first pass over the data
  whole = [b["input_ids"].numpy() for b in stream(0).take(skip + 4)]
  resumed = [b["input_ids"].numpy() for b in stream(skip).take(4)]
  for want, got in zip(whole[skip:], resumed, strict=True):
    np.testing.assert_array_equal(got, want)
  assert not np.array_equal(whole[0], resumed[0])


def test_finetuning_seeded_stream_and_dropout_resume_exactly(tmp_path, tower_inputs):
  specs = [features.FeatureSpec("eid")]
  path = str(tmp_path / "train.tfrecord")
  features.write_tfrecord(({"eid": i} for i in range(37)), specs, path)
  stream = lambda skip, n: np.stack([b["eid"].numpy() for b in features.input_dataset(
      path, specs, 4, is_training=True, seed=3, skip_examples=skip).take(n)])
  whole = stream(0, 13)  # past the first pass over the 37 records
  np.testing.assert_array_equal(stream(7 * 4, 6), whole[7:13])  # resumed at step 7

  task = classification.SST("unused", None, 12)  # binary classification: a head with dropout
  model = FinetuningModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32,
                                     max_position_embeddings=16), [task])
  ids, mask, segments = tower_inputs
  batch = {"input_ids": ids, "input_mask": mask, "segment_ids": segments,
           "task_id": tf.zeros([3], tf.int32), "sst_label_ids": tf.constant([0, 1, 1]),
           "sst_eid": tf.range(3)}
  loss = lambda seed: float(model(batch, training=True, seed=seed)["loss"])
  assert loss(_trainer_seed(3, 4, 0)) == loss(_trainer_seed(3, 4, 0))
  assert loss(_trainer_seed(3, 4, 0)) != loss(_trainer_seed(3, 5, 0))
  assert float(model(batch)["loss"]) == float(model(batch, seed=_trainer_seed(3, 4, 0))["loss"])


# ------------------------------------------------------------------------------ the drill

NUM_STEPS = 40
HPARAMS = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2},
           "embedding_size": 16, "max_seq_length": 32, "train_batch_size": 8,
           "num_train_steps": NUM_STEPS, "iterations_per_loop": 2, "save_checkpoints_steps": 2,
           "keep_checkpoint_max": 3, "num_warmup_steps": 4, "vocab_size": len(VOCAB),
           "seed": 11}  # dropout 0.1 (default)


TIMEOUT = 600  # seconds per process: generous, for a loaded machine


def _run(data_dir, name, kill_in_save_step=None, log_file=None) -> subprocess.Popen:
  """run_pretraining.py in a subprocess, its output piped (or written to ``log_file``)."""
  args = ["--data-dir", str(data_dir), "--model-name", name, "--hparams", json.dumps(HPARAMS)]
  script = [str(REPO / "run_pretraining.py")]
  if kill_in_save_step is not None:
    script = [str(HELPERS / "kill_in_save.py"), str(kill_in_save_step)]
  return subprocess.Popen([sys.executable, *script, *args], env=ENV,
                          stdout=log_file or subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _latest_step(model_dir: pathlib.Path) -> int:
  path = training.latest_checkpoint(str(model_dir)) if model_dir.exists() else None
  return 0 if path is None else step_of(path)


def _kill_after(proc, model_dir, step: int, delay: float) -> None:
  """SIGKILLs ``proc`` ``delay`` s after a checkpoint at or past ``step`` exists (mid-run)."""
  deadline = time.time() + TIMEOUT
  while _latest_step(model_dir) < step:
    if proc.poll() is not None or time.time() > deadline:
      pytest.fail(f"no checkpoint {step} before exit/timeout:\n{procs.finish(proc)[-3000:]}")
    time.sleep(0.01)
  time.sleep(delay)
  proc.send_signal(signal.SIGKILL)
  log = procs.finish(proc, TIMEOUT)
  assert proc.returncode == -signal.SIGKILL, f"the run ended before the kill:\n{log[-3000:]}"


def _tensors(model_dir: pathlib.Path) -> dict[str, np.ndarray]:
  """Every variable of the final checkpoint (model, Adam slots, steps), not the save counter."""
  prefix = str(model_dir / f"ckpt-{NUM_STEPS}")
  return {k: tf.train.load_variable(prefix, k) for k, _ in tf.train.list_variables(prefix)
          if "save_counter" not in k and "_CHECKPOINTABLE_OBJECT_GRAPH" not in k}


@pytest.mark.slow
def test_run_killed_three_times_ends_bit_identical_to_an_uninterrupted_one(pretrain_dir,
                                                                           tmp_path):
  rng = random.Random()
  seed = rng.randrange(10**6)
  rng.seed(seed)
  models = pretrain_dir / "models"
  clean_log = open(tmp_path / "clean.log", "w")  # noqa: SIM115 - closed after the run
  clean = _run(pretrain_dir, "clean", log_file=clean_log)  # runs alongside the killed chain
  killed_dir = models / "killed"
  history = []  # (kill, resumed from)

  in_save = rng.choice([4, 6, 8])
  proc = _run(pretrain_dir, "killed", kill_in_save_step=in_save)
  log = procs.finish(proc, TIMEOUT)
  assert proc.returncode == -signal.SIGKILL, log[-3000:]
  assert (killed_dir / f"ckpt-{in_save}_temp").exists()  # the kill hit the middle of the save
  assert _latest_step(killed_dir) == in_save - 2
  history.append((f"in the save of ckpt-{in_save}", in_save - 2))

  for _ in range(2):  # at random moments, after at least one new checkpoint
    start = _latest_step(killed_dir)
    target, delay = start + rng.choice([2, 4, 6]), rng.uniform(0.0, 0.3)
    _kill_after(_run(pretrain_dir, "killed"), killed_dir, target, delay)
    history.append((f"{delay:.2f}s after ckpt-{target}", _latest_step(killed_dir)))
    assert history[-1][1] > start

  final = _run(pretrain_dir, "killed")
  log = procs.finish(final, TIMEOUT)
  assert final.returncode == 0, log[-3000:]
  assert f"Running training from step {history[-1][1]}" in log
  procs.finish(clean, TIMEOUT)
  clean_log.close()
  assert clean.returncode == 0, (tmp_path / "clean.log").read_text()[-3000:]

  got, want = _tensors(killed_dir), _tensors(models / "clean")
  assert sorted(got) == sorted(want)
  n_weights = sum(k.startswith("model/") for k in want)
  assert sum(k.startswith("optimizer/_variables/") for k in want) == 2 * n_weights  # Adam m, v
  assert {"step/.ATTRIBUTES/VARIABLE_VALUE", "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"
          } <= set(want)
  for key in want:
    np.testing.assert_array_equal(got[key], want[key],
                                  err_msg=f"{key} (rng seed {seed}, kills {history})")
