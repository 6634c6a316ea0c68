"""Gradient accumulation (``gradient_accumulation_steps``): k micro-batches make exactly the
update of one batch (pre-training and fine-tuning, one device and MirroredStrategy over two
logical CPUs), a run SIGKILLed mid-update resumes exactly, the settings are checked.

Equality is asserted within 1e-6 (float32 sums in another order: the micro-batch shares and
the accumulators add the same terms as the one batch, regrouped).
"""

import os
import pathlib
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import accumulation_kill, accumulation_runs, procs, toy_train
from helpers.paths import HELPERS

from electra_tf import training
from electra_tf.config import FinetuningConfig, PretrainingConfig

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1"}
ATOL = 1e-6


def _quiet(_):
  pass


def _assert_same_update(results, case):
  """k = K against k = 1: loss, applied (clipped) gradients, new weights, Adam slots."""
  one = {k.split("/", 2)[2]: v for k, v in results.items() if k.startswith(f"{case}/k1/")}
  acc = {k.split("/", 2)[2]: v for k, v in results.items()
         if k.startswith(f"{case}/k{accumulation_runs.K}/")}
  assert sorted(one) == sorted(acc)
  assert {key.split("/")[0] for key in one} == {"loss", "init", "weight", "grad", "slot"}
  # The loss (~41 for pre-training) is compared relatively: float32 spacing there is 3.8e-6.
  np.testing.assert_allclose(acc.pop("loss"), one.pop("loss"), rtol=ATOL, err_msg=case)
  for key in sorted(one):
    np.testing.assert_allclose(acc[key], one[key], rtol=0, atol=ATOL, err_msg=f"{case} {key}")
  moved = max(np.abs(one[key] - one["init/" + key[len("weight/"):]]).max()
              for key in one if key.startswith("weight/"))
  assert moved > 1000 * ATOL  # the update really changed the weights
  clipped = np.sqrt(sum(np.sum(one[key] ** 2) for key in one if key.startswith("grad/")))
  assert clipped == pytest.approx(1.0, rel=1e-5)  # the norm was > 1: clipping was exercised


@pytest.fixture(scope="module")
def default_strategy_runs(vocab_file, tmp_path_factory):
  return accumulation_runs.all_runs(training.get_strategy("one_device", num_gpus=0),
                                    vocab_file, str(tmp_path_factory.mktemp("accum")))


@pytest.mark.parametrize("case", ["pretraining", "finetuning"])
def test_micro_batches_give_the_one_batch_update(default_strategy_runs, case):
  _assert_same_update(default_strategy_runs, case)


@pytest.mark.slow
def test_micro_batches_give_the_one_batch_update_mirrored(vocab_file, tmp_path):
  out = tmp_path / "mirrored.npz"
  proc = subprocess.Popen(
      [sys.executable, str(HELPERS / "accumulation_runs.py"), "--vocab_file", str(vocab_file),
       "--work_dir", str(tmp_path), "--out_npz", str(out)],
      env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  log = procs.finish(proc, timeout=600)
  assert proc.returncode == 0, log[-3000:]
  results = dict(np.load(out))
  for case in ("pretraining", "finetuning"):
    _assert_same_update(results, case)


def test_pretraining_shares_add_up_to_the_batch_loss(default_strategy_runs):
  # the logged loss of the accumulated update is the one-batch loss, not a mean of means
  for case in ("pretraining", "finetuning"):
    assert default_strategy_runs[f"{case}/k4/loss"] == pytest.approx(
        float(default_strategy_runs[f"{case}/k1/loss"]), rel=1e-6)


def _losses(model_dir: pathlib.Path, newest_only: bool) -> dict[int, float]:
  files = sorted(model_dir.glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime)
  out = {}
  for event_file in files[-1:] if newest_only else files:
    for event in tf.compat.v1.train.summary_iterator(str(event_file)):
      for value in event.summary.value:
        if value.tag == "total_loss":
          out[event.step] = float(tf.make_ndarray(value.tensor))
  return out


@pytest.mark.slow
def test_sigkill_mid_update_resumes_at_the_right_update(tmp_path):
  killed = tmp_path / "killed"
  proc = subprocess.Popen(
      [sys.executable, str(HELPERS / "accumulation_kill.py"), "--model_dir", str(killed),
       "--kill_update", "13", "--kill_micro_batch", "2"],
      env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  log = procs.finish(proc)
  assert proc.returncode == -signal.SIGKILL, log[-3000:]
  assert training.latest_checkpoint(str(killed)) == str(killed / "ckpt-10")
  assert max(_losses(killed, newest_only=True)) == 13  # died inside update 14, after 2 of 4

  lines = []
  resumed = accumulation_kill.run(str(killed), log_fn=lines.append)
  assert (resumed["start_step"], resumed["final_step"]) == (10, 20)
  assert procs.took_over_lock(lines[0], killed), lines[0]  # the SIGKILLed run's lock
  assert lines[1] == f"Restored {killed}/ckpt-10 at step 10"
  assert lines[2].startswith("Gradient accumulation: 4 micro-batches of 4 examples")
  clean = tmp_path / "clean"
  accumulation_kill.run(str(clean), log_fn=_quiet)
  after = _losses(killed, newest_only=True)
  want = _losses(clean, newest_only=False)
  assert sorted(after) == list(range(11, 21))
  for step in after:  # a deterministic toy on CPU: bit-identical
    assert after[step] == want[step], step
  reader = {p: tf.train.load_checkpoint(str(p / "ckpt-20")) for p in (killed, clean)}
  for key in reader[clean].get_variable_to_shape_map():
    np.testing.assert_array_equal(reader[killed].get_tensor(key), reader[clean].get_tensor(key),
                                  err_msg=key)


def test_toy_mean_loss_and_float16_loss_scaling(tmp_path):
  # mean losses (weight 1/k) give the one-batch update; float16 with dynamic loss scaling trains
  runs = {k: toy_train.run(training.get_strategy("one_device", num_gpus=0),
                           str(tmp_path / f"k{k}"), 4, batch_size=16,
                           gradient_accumulation_steps=k, log_fn=_quiet) for k in (1, 4)}
  for name, value in runs[1]["weights"].items():
    np.testing.assert_allclose(runs[4]["weights"][name], value, rtol=0, atol=ATOL, err_msg=name)
  assert runs[4]["logged"]["total_loss"] == pytest.approx(runs[1]["logged"]["total_loss"],
                                                          rel=1e-6)
  try:
    training.set_mixed_precision_policy("float16")
    strategy = training.get_strategy("one_device", num_gpus=0)
    model, optimizer = toy_train.build(strategy, 4)
    with strategy.scope():
      optimizer = training.wrap_optimizer(optimizer, "float16")
    lines = []
    trainer = training.Trainer(
        strategy, model, optimizer,
        training.TrainSettings(str(tmp_path / "fp16"), 4, 16, gradient_accumulation_steps=4),
        log_fn=lines.append)
    logged = trainer.train(toy_train.dataset_fn(16))
  finally:
    training.set_mixed_precision_policy(None)
  assert np.isfinite(logged["total_loss"]) and int(trainer.global_step.numpy()) == 4
  assert sum(line.startswith("Gradient accumulation: ") for line in lines) == 1


def test_settings_and_config_errors(tmp_path):
  with pytest.raises(ValueError, match="^train_batch_size 250 is not divisible by "
                                       "gradient_accumulation_steps 8"):
    PretrainingConfig("m", str(tmp_path), train_batch_size=250, gradient_accumulation_steps=8)
  with pytest.raises(ValueError, match="train_batch_size 32 is not divisible by "
                                       "gradient_accumulation_steps 3"):
    FinetuningConfig("m", str(tmp_path), gradient_accumulation_steps=3)
  with pytest.raises(ValueError, match="Unknown optimizer 'sgd'; expected one of adamw, lamb"):
    PretrainingConfig("m", str(tmp_path), optimizer="sgd")
  config = PretrainingConfig("m", str(tmp_path), model_size="base", train_batch_size=256,
                             gradient_accumulation_steps=8, optimizer="lamb")
  assert (config.gradient_accumulation_steps, config.optimizer) == (8, "lamb")
  assert FinetuningConfig("m", str(tmp_path)).gradient_accumulation_steps == 1
  with pytest.raises(ValueError, match="gradient_accumulation_steps must be >= 1"):
    training.TrainSettings(str(tmp_path), 10, 8, gradient_accumulation_steps=0)
  with pytest.raises(ValueError, match="micro_batch_losses must be one of mean, sum"):
    training.TrainSettings(str(tmp_path), 10, 8, micro_batch_losses="max")


@pytest.mark.slow
def test_full_depth_model_runs_accumulated_updates_over_several_loop_calls(vocab_file, tmp_path):
  """12 layers, k = 4, two loop calls of two updates. Grappler's AddOpsRewrite put
  TemporaryVariable ops in the micro-batch tf.while_loop whose names collided with the previous
  call's (AlreadyExistsError in the second call); the Trainer turns that rewrite off."""
  from electra_tf.optimization import create_optimizer
  from electra_tf.pretraining import masking, task
  from electra_tf.pretraining.builder import build_pretraining_model

  seq, batch_size = 32, 8
  config = PretrainingConfig("deep", str(tmp_path), model_size="small", vocab_file=vocab_file,
                             max_seq_length=seq, train_batch_size=batch_size,
                             generator_hidden_size=0.25, num_train_steps=4,
                             gradient_accumulation_steps=4, seed=1)
  strategy = training.get_strategy("one_device", num_gpus=0)
  with strategy.scope():
    model = build_pretraining_model(config, vocab=masking.read_special_ids(vocab_file))
    optimizer = create_optimizer(5e-4, 4, weight_decay_rate=0.01)
  trainer = training.Trainer(
      strategy, model, optimizer,
      training.TrainSettings(str(tmp_path / "model"), 4, batch_size, seed=1,
                             iterations_per_loop=2, gradient_accumulation_steps=4,
                             micro_batch_losses="sum"),
      step_fn=task.train_step_fn(model, []), log_fn=_quiet,
      batch_totals_fn=task.batch_totals_fn(model.objective))
  rng = np.random.default_rng(0)
  batch = {"input_ids": rng.integers(1000, 20000, [batch_size, seq]).astype(np.int32),
           "input_mask": np.ones([batch_size, seq], np.int32),
           "segment_ids": np.zeros([batch_size, seq], np.int32)}
  trainer.train(lambda ctx: tf.data.Dataset.from_tensors(batch).repeat())
  assert int(optimizer.iterations.numpy()) == 4
  assert tf.config.optimizer.get_experimental_options().get("arithmetic_optimization") is False
