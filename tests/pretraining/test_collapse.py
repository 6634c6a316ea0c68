"""Discriminator-collapse warning: the decision over interval metrics (fires once, not during
warmup, not while recall is healthy or the AUC climbs, never without a discriminator), its
TensorBoard record, and a real run_pretraining.py whose discriminator collapses."""

import json
import os
import pathlib
import subprocess
import sys

import pytest
import tensorflow as tf
from helpers import pretrain_data
from helpers.paths import REPO_ROOT

from electra_tf.pretraining import collapse
from electra_tf.pretraining.collapse import CollapseWatch, collapse_message


def _interval(recall, auc=0.62, **extra):
  return {"disc_recall": recall, "disc_auc": auc, "mlm_loss": 5.0, **extra}


def _feed(watch, steps_and_values):
  for step, values in steps_and_values:
    watch(step, values)


def _events(folder):
  """tag -> [(step, value)] of every summary in folder's event files (text as str)."""
  out = {}
  for path in sorted(pathlib.Path(folder).glob("events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(str(path)):
      for value in event.summary.value:
        array = tf.make_ndarray(value.tensor)
        item = array.item() if array.size == 1 else array
        if isinstance(item, bytes):
          item = item.decode("utf-8")
        out.setdefault(value.tag, []).append((event.step, item))
  return out


def test_fires_once_after_patience_intervals_past_warmup():
  lines = []
  watch = CollapseWatch(warmup_steps=100, log_fn=lines.append)
  _feed(watch, [(s, _interval(0.0)) for s in range(50, 501, 50)])
  assert len(lines) == 1 and watch.fired_at == 250  # 150, 200, 250: three intervals after 100
  assert lines[0].startswith("Discriminator collapse at step 250: disc_recall below 0.01")
  assert "\n" not in lines[0] and '"generator_hidden_size": 0.125' in lines[0]
  assert "learning_rate" in lines[0] and "disc_weight" in lines[0]


def test_silent_during_warmup():
  history = [(s, _interval(0.0)) for s in (50, 100, 150, 200)]
  assert collapse_message(history, warmup_steps=200) is None
  assert collapse_message(history, warmup_steps=100) is None  # only 150 and 200 are past it
  assert collapse_message(history, warmup_steps=50) is not None


def test_silent_while_recall_is_healthy_or_one_interval_recovers():
  healthy = [(s, _interval(0.2)) for s in range(100, 1001, 100)]
  assert collapse_message(healthy, warmup_steps=0) is None
  dip = [(100, _interval(0.0)), (200, _interval(0.02)), (300, _interval(0.0))]
  assert collapse_message(dip, warmup_steps=0) is None


def test_silent_while_the_auc_still_climbs():
  rising = [(100, _interval(0.0, 0.60)), (200, _interval(0.005, 0.63)),
            (300, _interval(0.009, 0.66))]
  assert collapse_message(rising, warmup_steps=0) is None
  falling = [(100, _interval(0.0, 0.759)), (200, _interval(0.0, 0.70)),
             (300, _interval(0.0, 0.668))]
  assert "disc_auc 0.759 -> 0.668" in collapse_message(falling, warmup_steps=0)


def test_never_fires_for_masked_lm_only(tmp_path):
  lines = []
  watch = CollapseWatch(warmup_steps=0, log_fn=lines.append)
  writer = tf.summary.create_file_writer(str(tmp_path))
  with writer.as_default():
    _feed(watch, [(s, {"mlm_loss": 5.0, "masked_lm_accuracy": 0.1}) for s in range(10, 200, 10)])
  writer.close()
  assert lines == [] and watch.fired_at is None and _events(tmp_path) == {}


def test_records_text_and_flag_in_tensorboard_once(tmp_path):
  lines = []
  watch = CollapseWatch(warmup_steps=10, log_fn=lines.append, patience=2)
  writer = tf.summary.create_file_writer(str(tmp_path))
  with writer.as_default():
    _feed(watch, [(s, _interval(0.001)) for s in (10, 20, 30, 40, 50)])
  writer.close()
  events = _events(tmp_path)
  assert events[collapse.SUMMARY_FLAG] == [(30, 1.0)]
  assert events[collapse.SUMMARY_TEXT] == [(30, lines[0])] and len(lines) == 1


@pytest.mark.slow
def test_run_pretraining_says_once_that_the_discriminator_collapsed(tmp_path, data_dir,
                                                                   vocab_file):
  """A tiny ELECTRA at learning rate 0.1: its discriminator answers "original" everywhere."""
  pretrain_data.build_data_dir(tmp_path, vocab_file, pretrain_data.emma_and_wiki(data_dir),
                               num_out_files=2)
  hparams = {"model_size": "small", "embedding_size": 16, "max_seq_length": 32,
             "model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2},
             "train_batch_size": 8, "num_train_steps": 40, "iterations_per_loop": 5,
             "save_checkpoints_steps": 40, "num_warmup_steps": 5, "learning_rate": 0.1,
             "seed": 3, "vocab_size": pretrain_data.vocab_size(vocab_file)}
  env = {**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "TF_USE_LEGACY_KERAS": "1"}
  proc = subprocess.run(
      [sys.executable, str(REPO_ROOT / "run_pretraining.py"), "--data_dir", str(tmp_path),
       "--model_name", "collapsed", "--hparams", json.dumps(hparams)],
      env=env, cwd=REPO_ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
      timeout=900)
  assert proc.returncode == 0, proc.stdout[-3000:]
  lines = [line for line in proc.stdout.splitlines() if "Discriminator collapse" in line]
  assert len(lines) == 1, proc.stdout[-3000:]
  assert lines[0].startswith("Discriminator collapse at step ") and collapse.ADVICE in lines[0]
  step = int(lines[0].split()[4].rstrip(":"))
  assert 5 < step <= hparams["num_train_steps"]
  events = _events(tmp_path / "models" / "collapsed")
  assert events[collapse.SUMMARY_TEXT] == [(step, lines[0])]
  assert events[collapse.SUMMARY_FLAG] == [(step, 1.0)]
