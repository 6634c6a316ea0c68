"""Tests for electra_tf.training with a toy model (tests/helpers/toy_train.py).

Subprocesses cover what one pytest process cannot: SIGKILL, logical CPU devices (must be set
before TensorFlow initialises) and two-process MultiWorkerMirroredStrategy.
"""

import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from helpers import ports, procs, toy_train
from helpers.paths import HELPERS, REPO_ROOT

from electra_tf import training
from electra_tf.training import checkpoint_files

TOY = HELPERS / "toy_train.py"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1"}
# Mirrored / multi-worker vs one device at the same global batch: the only difference is the
# order of float32 sums (two half-batch gradients summed vs one full-batch mean), measured at
# <= 1.2e-7 on weights of magnitude ~1 after 30 Adam steps; 1e-6 is ~8 float32 ulps at 1.0.
REPLICA_ATOL = 1e-6


def _toy(*args: str, **kwargs) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, str(TOY), *args], env=kwargs.pop("env", ENV),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def _tensors(prefix: str) -> dict[str, np.ndarray]:
  """All tensors of a checkpoint except bookkeeping (save_counter, object graph)."""
  reader = tf.train.load_checkpoint(prefix)
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if "save_counter" not in k and "_CHECKPOINTABLE_OBJECT_GRAPH" not in k}


def _one_device():
  return training.get_strategy("one_device", num_gpus=0)


def _quiet(_):
  pass


def _state_step(model_dir) -> int:
  return checkpoint_files.step_of(training.latest_checkpoint(str(model_dir)))


@pytest.mark.slow
def test_resume_after_sigkill_matches_uninterrupted_run(tmp_path):
  killed_dir = tmp_path / "killed"
  # ~0.05 s per step keeps the run alive long after the first checkpoint (step 10 of 30).
  proc = _toy("--model_dir", str(killed_dir), "--step_sleep", "0.05")
  procs.sigkill_after_first_checkpoint(proc, killed_dir, timeout=120, poll=0.02)
  saved = _state_step(killed_dir)
  assert saved in (10, 20), saved  # killed mid-run, after at least one checkpoint

  lines = []  # rerun (in this process: a fresh model and Trainer that only see the files)
  resumed = toy_train.run(_one_device(), str(killed_dir), 30, log_fn=lines.append)
  assert (resumed["start_step"], resumed["final_step"]) == (saved, 30)
  assert procs.took_over_lock(lines[0], killed_dir), lines[0]  # the SIGKILLed run's lock
  assert lines[1] == f"Restored {killed_dir}/ckpt-{saved} at step {saved}"

  clean_dir = tmp_path / "clean"
  toy_train.run(_one_device(), str(clean_dir), 30, log_fn=_quiet)
  got, want = _tensors(str(killed_dir / "ckpt-30")), _tensors(str(clean_dir / "ckpt-30"))
  assert sorted(got) == sorted(want)
  for key in want:  # deterministic toy on CPU: a resumed run is bit-identical
    np.testing.assert_array_equal(got[key], want[key], err_msg=key)
  step_key = next(k for k in got if k.startswith("step/"))
  assert got[step_key] == 30
  assert got["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"] == 30


@pytest.mark.slow
# The newest complete checkpoint on disk is resumed, whatever the state file says; a
# kill after ckpt-20's files are complete ("state") resumes from ckpt-20 (was: from ckpt-10).
@pytest.mark.parametrize("kill_at,orphan,resumed", [("merge", "ckpt-20_temp", 10),
                                                    ("state", "ckpt-20.index", 20)])
def test_kill_inside_a_save_leaves_state_on_last_complete_checkpoint(tmp_path, kill_at, orphan,
                                                                     resumed):
  model_dir = tmp_path / "run"
  proc = _toy("--model_dir", str(model_dir), "--kill_at", kill_at, "--kill_step", "20")
  log = procs.finish(proc)
  assert proc.returncode == -signal.SIGKILL, log
  assert (model_dir / orphan).exists()  # the kill really hit the middle of the ckpt-20 save
  assert training.latest_checkpoint(str(model_dir)) == str(model_dir / f"ckpt-{resumed}")

  summary = toy_train.run(_one_device(), str(model_dir), 30, log_fn=_quiet)
  assert summary["start_step"] == resumed and summary["final_step"] == 30
  assert not list(model_dir.glob("*_temp"))  # the resave of ckpt-20 replaced the orphans
  clean_dir = tmp_path / "clean"
  toy_train.run(_one_device(), str(clean_dir), 30, log_fn=_quiet)
  got, want = _tensors(str(model_dir / "ckpt-30")), _tensors(str(clean_dir / "ckpt-30"))
  for key in want:
    np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_state_file_naming_a_missing_checkpoint_falls_back_to_the_files_on_disk(tmp_path):
  # The state file is advisory; what is complete on disk decides (was: an error)
  toy_train.run(_one_device(), str(tmp_path), 20, log_fn=_quiet)
  for f in tmp_path.glob("ckpt-20.*"):
    f.unlink()
  assert training.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-10")


def test_nan_loss_stops_without_saving(tmp_path):
  with pytest.raises(training.NonFiniteLossError,
                     match=r"NaN or Inf at step 13; .*latest checkpoint is .*ckpt-10"):
    toy_train.run(_one_device(), str(tmp_path), 30, iterations_per_loop=4,
                  save_checkpoints_steps=5, nan_at_step=13, log_fn=_quiet)
  assert training.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-10")
  assert sorted(p.name for p in tmp_path.glob("*.index")) == ["ckpt-10.index", "ckpt-5.index"]
  assert all(np.isfinite(v).all() for v in _tensors(str(tmp_path / "ckpt-10")).values())


def test_unusable_model_dir_fails_before_training(tmp_path, monkeypatch):
  blocker = tmp_path / "a_file"
  blocker.write_text("not a directory")
  with pytest.raises(training.ModelDirError, match="cannot be created"):
    toy_train.run(_one_device(), str(blocker / "model"), 10, log_fn=_quiet)
  with pytest.raises(training.ModelDirError, match="created: .*a_file is not a directory"):
    toy_train.run(_one_device(), str(blocker), 10, log_fn=_quiet)

  full = tmp_path / "full_disk"
  monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(1, 1, 100))
  with pytest.raises(training.ModelDirError, match=r"not enough free disk space .* 0\.0 MiB free"):
    toy_train.run(_one_device(), str(full), 10, log_fn=_quiet)
  assert os.listdir(full) == []  # nothing written, no step run


def test_tensorboard_scalars_are_interval_averages(tmp_path):
  lines = []
  toy_train.run(_one_device(), str(tmp_path), 10, flops_per_step=1e6, peak_flops=1e9,
                log_fn=lines.append)
  scalars: dict[str, dict[int, float]] = {}
  for event_file in tmp_path.glob("events.out.tfevents.*"):
    for event in tf.compat.v1.train.summary_iterator(str(event_file)):
      for value in event.summary.value:
        scalars.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
  assert set(scalars) == {"total_loss", "mean_abs_error", "seed_step", "learning_rate",
                          "steps_per_second", "examples_per_second", "model_flops_utilization"}
  assert all(sorted(steps) == [5, 10] for steps in scalars.values())
  # seed_step is the step index 0..9: the logged value is the mean over each interval.
  assert scalars["seed_step"] == {5: 2.0, 10: 7.0}
  schedule = tf_keras.optimizers.schedules.PolynomialDecay(0.05, 10, 0.0)
  assert scalars["learning_rate"][10] == pytest.approx(float(schedule(9)), rel=1e-6)
  for step in (5, 10):
    assert scalars["examples_per_second"][step] == pytest.approx(
        8 * scalars["steps_per_second"][step], rel=1e-6)
    assert scalars["model_flops_utilization"][step] == pytest.approx(
        1e6 * scalars["steps_per_second"][step] / 1e9, rel=1e-6)
  assert lines[0].startswith("5/10 = 50.0%, SPS: ") and "ETA: " in lines[0]
  assert " - total_loss: " in lines[0] and "predictions" not in lines[0]


def test_evaluate_averages_batches_and_writes_results(tmp_path):
  strategy = _one_device()
  model, optimizer = toy_train.build(strategy, 10)
  with strategy.scope():
    streaming_mae = tf_keras.metrics.MeanAbsoluteError(name="streaming_mae")
  trainer = training.Trainer(strategy, model, optimizer,
                             training.TrainSettings(str(tmp_path), 10, 8), log_fn=_quiet)

  def eval_step(features, seed):
    out = model(features, training=False)
    streaming_mae.update_state(features["y"], out["predictions"])
    return out

  batches = [toy_train.global_batch(tf.constant(100 + i, tf.int64), 8) for i in range(3)]
  dataset = tf.data.Dataset.from_tensor_slices(
      {k: tf.stack([b[k] for b in batches]) for k in ("x", "y")})
  results_file = tmp_path / "results" / "unsup_results.txt"
  results = trainer.evaluate(lambda ctx: dataset, num_steps=5, step_fn=eval_step,
                             metrics=[streaming_mae], results_file=str(results_file))

  per_batch = [model(b, training=False) for b in batches]  # the data has 3 of the 5 batches
  assert results["loss"] == pytest.approx(np.mean([o["total_loss"] for o in per_batch]), 1e-6)
  assert results["mean_abs_error"] == pytest.approx(
      np.mean([o["mean_abs_error"] for o in per_batch]), rel=1e-6)
  assert results["streaming_mae"] == pytest.approx(results["mean_abs_error"], rel=1e-6)
  assert results["global_step"] == 0
  lines = results_file.read_text().splitlines()
  assert [line.split(" = ")[0] for line in lines] == sorted(results)
  assert {k: float(v) for k, v in (line.split(" = ") for line in lines)} == pytest.approx(results)


@pytest.mark.slow
def test_mirrored_over_two_cpus_matches_one_device(tmp_path):
  one, two = tmp_path / "one_device", tmp_path / "mirrored"
  out_json = tmp_path / "out.json"
  log = procs.finish(_toy("--num_cpus", "2", "--strategy", "one_device,mirrored",
                     "--model_dir", f"{one},{two}", "--out_json", str(out_json)))
  single, mirrored = json.loads(out_json.read_text()) if out_json.exists() else pytest.fail(log)
  assert (single["num_replicas"], mirrored["num_replicas"]) == (1, 2)
  got, want = _tensors(str(two / "ckpt-30")), _tensors(str(one / "ckpt-30"))
  for key in want:
    np.testing.assert_allclose(got[key], want[key], rtol=0, atol=REPLICA_ATOL, err_msg=key)
  assert mirrored["logged"]["total_loss"] == pytest.approx(single["logged"]["total_loss"], 1e-5)


@pytest.mark.slow
def test_multi_worker_mirrored_two_processes(tmp_path):
  model_dir = tmp_path / "mwms"
  runs = [_toy("--strategy", "multi_worker_mirrored", "--model_dir", str(model_dir),
               "--num_train_steps", "10", "--save_checkpoints_steps", "10",
               "--out_json", str(tmp_path / f"worker{index}.json"),
               env={**ENV, "TF_CONFIG": tf_config})
          for index, tf_config in enumerate(ports.two_worker_tf_configs())]
  logs = [procs.finish(p, timeout=240) for p in runs]
  assert [p.returncode for p in runs] == [0, 0], "\n".join(log[-2000:] for log in logs)
  summaries = [json.loads((tmp_path / f"worker{i}.json").read_text())[0] for i in range(2)]
  assert [(s["is_chief"], s["num_replicas"], s["final_step"]) for s in summaries] == [
      (True, 2, 10), (False, 2, 10)]
  assert sorted(p.name for p in model_dir.iterdir() if not p.name.startswith("events")) == [
      "checkpoint", "ckpt-10.data-00000-of-00001", "ckpt-10.index"]  # no worker scratch left

  one = tmp_path / "one_device"
  toy_train.run(_one_device(), str(one), 10, save_checkpoints_steps=10, log_fn=_quiet)
  got, want = _tensors(str(model_dir / "ckpt-10")), _tensors(str(one / "ckpt-10"))
  for key in want:
    np.testing.assert_allclose(got[key], want[key], rtol=0, atol=REPLICA_ATOL, err_msg=key)


def test_jit_compiled_step_matches_graph_step(tmp_path):
  # XLA fuses and orders float32 ops differently; measured max difference 1.2e-7 after 10 steps.
  plain = toy_train.run(_one_device(), str(tmp_path / "plain"), 10, log_fn=_quiet)
  xla = toy_train.run(_one_device(), str(tmp_path / "xla"), 10, jit_compile=True, log_fn=_quiet)
  for key, value in plain["weights"].items():
    np.testing.assert_allclose(xla["weights"][key], value, rtol=0, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_mixed_precision_trains(tmp_path, precision):
  try:
    assert training.set_mixed_precision_policy(precision) == f"mixed_{precision}"
    strategy = _one_device()
    model, optimizer = toy_train.build(strategy, 10)
    with strategy.scope():
      optimizer = training.wrap_optimizer(optimizer, precision)
    assert model.hidden.compute_dtype == precision
    trainer = training.Trainer(strategy, model, optimizer,
                               training.TrainSettings(str(tmp_path), 10, 8), log_fn=_quiet)
    before = [v.numpy() for v in model.trainable_variables]
    logged = trainer.train(toy_train.dataset_fn(8))
  finally:
    training.set_mixed_precision_policy(None)
  assert np.isfinite(logged["total_loss"])
  assert all(v.dtype == tf.float32 for v in model.trainable_variables)  # float32 master weights
  after = [v.numpy() for v in model.trainable_variables]
  assert not any(np.array_equal(b, a) for b, a in zip(before, after, strict=True))
  keys = tf.train.load_checkpoint(str(tmp_path / "ckpt-10")).get_variable_to_shape_map()
  assert any("loss_scale" in k for k in keys) == (precision == "float16")


def test_both_training_scripts_take_the_one_strategy_list(tmp_path):
  """An unknown --distribution_strategy is the same one line from both scripts, naming the
  names of runtime.STRATEGIES, before any data is read."""
  from electra_tf.training.runtime import STRATEGIES

  expected = ("flag --distribution_strategy=parameter_server: value should be one of "
              f"<{'|'.join(STRATEGIES)}>")
  for script in ("run_pretraining.py", "run_finetuning.py"):
    proc = subprocess.run([sys.executable, str(REPO_ROOT / script), "--data_dir", str(tmp_path),
                           "--model_name", "m", "--distribution_strategy=parameter_server"],
                          env=ENV, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr
    assert proc.stderr.splitlines() == [f"{script}: error: {expected}"]


def test_get_strategy_and_settings_validation():
  assert isinstance(training.get_strategy("one_device", num_gpus=0),
                    tf.distribute.OneDeviceStrategy)
  assert isinstance(training.get_strategy("MIRRORED", num_gpus=0), tf.distribute.MirroredStrategy)
  with pytest.raises(ValueError, match="must be one of one_device, mirrored"):
    training.get_strategy("parameter_server")
  with pytest.raises(ValueError, match="needs tpu"):
    training.get_strategy("tpu")
  with pytest.raises(ValueError, match="iterations_per_loop must be >= 1"):
    training.TrainSettings("/tmp/x", 10, 8, iterations_per_loop=0)
  with pytest.raises(ValueError, match="mixed_precision must be one of"):
    training.set_mixed_precision_policy("int8")
  assert [training.secs_to_str(s) for s in (0, 5, 65, 600, 3725)] == [
      "0", "5", "1:05", "10:00", "1:02:05"]


def test_model_built_outside_the_strategy_scope_is_rejected(tmp_path):
  model = toy_train.ToyModel()
  model(toy_train.global_batch(tf.constant(0, tf.int64), 2))
  strategy = training.get_strategy("mirrored", num_gpus=0)
  with strategy.scope():
    optimizer = tf_keras.optimizers.Adam()
  with pytest.raises(ValueError, match="not created under this strategy's scope"):
    training.Trainer(strategy, model, optimizer, training.TrainSettings(str(tmp_path), 10, 8))
  with pytest.raises(ValueError, match="no trainable variables yet"):
    training.Trainer(strategy, toy_train.ToyModel(), optimizer,
                     training.TrainSettings(str(tmp_path), 10, 8))


def test_init_fn_runs_only_without_a_checkpoint(tmp_path):
  calls = []

  def make_trainer():
    strategy = _one_device()
    model, optimizer = toy_train.build(strategy, 10)

    def init_fn():  # stands in for loading official TF1 weights
      calls.append(1)
      for v in model.trainable_variables:
        v.assign(tf.fill(v.shape, 0.25))

    return model, training.Trainer(strategy, model, optimizer,
                                   training.TrainSettings(str(tmp_path), 10, 8),
                                   init_fn=init_fn, log_fn=_quiet)

  model, trainer = make_trainer()
  assert trainer.restore_or_initialize() == 0 and calls == [1]
  assert all((v.numpy() == 0.25).all() for v in model.trainable_variables)
  trainer.train(toy_train.dataset_fn(8))
  trained = [v.numpy() for v in model.trainable_variables]

  model, trainer = make_trainer()
  assert trainer.restore_or_initialize() == 10 and calls == [1]  # restored, init_fn not called
  for want, v in zip(trained, model.trainable_variables, strict=True):
    np.testing.assert_array_equal(v.numpy(), want)


def test_init_fn_step_becomes_the_global_step(tmp_path):
  """An init_fn that loads a checkpoint returns its step: training continues from there."""
  strategy = _one_device()
  model, optimizer = toy_train.build(strategy, 10)
  settings = training.TrainSettings(str(tmp_path), 10, 8, save_checkpoints_steps=10)
  trainer = training.Trainer(strategy, model, optimizer, settings, init_fn=lambda: 7,
                             log_fn=_quiet)
  assert trainer.restore_or_initialize() == 7
  assert int(trainer.global_step.numpy()) == 7
  trainer.train(toy_train.dataset_fn(8, start_step=7))
  assert training.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-10")


@pytest.mark.parametrize("batches", [7, 5])  # mid-loop; exactly at a loop boundary
def test_training_stops_and_saves_when_the_data_runs_out(tmp_path, batches):
  strategy = _one_device()
  model, optimizer = toy_train.build(strategy, 30)
  lines = []
  trainer = training.Trainer(strategy, model, optimizer,
                             training.TrainSettings(str(tmp_path), 30, 8, iterations_per_loop=5),
                             step_fn=toy_train.toy_step_fn(model), log_fn=lines.append)
  finite_data = toy_train.dataset_fn(8)
  logged = trainer.train(lambda ctx: finite_data(ctx).take(batches))
  assert int(trainer.global_step.numpy()) == batches
  assert training.latest_checkpoint(str(tmp_path)) == str(tmp_path / f"ckpt-{batches}")
  assert any(f"Training data ran out at step {batches}" in line for line in lines)
  if batches == 7:
    assert logged["seed_step"] == pytest.approx(5.5)  # steps 5 and 6 since the last log


def test_train_loop_holds_the_step_once(tmp_path):
  """The step is traced into the loop body only: no copy of it runs before the loop."""
  strategy = _one_device()
  model, optimizer = toy_train.build(strategy, 4)
  trainer = training.Trainer(strategy, model, optimizer,
                             training.TrainSettings(str(tmp_path), 4, 8),
                             step_fn=toy_train.toy_step_fn(model), log_fn=_quiet)
  trainer.train(toy_train.dataset_fn(8))
  iterator = iter(strategy.distribute_datasets_from_function(toy_train.dataset_fn(8)))
  graph = trainer._train_loop.get_concrete_function(iterator, tf.constant(2)).graph.as_graph_def()

  def matmuls(nodes):
    return sum(node.op in ("MatMul", "_MklMatMul") for node in nodes)

  per_function = [matmuls(f.node_def) for f in graph.library.function]
  assert matmuls(graph.node) == 0
  # one step of the toy model: 2 forward matmuls, both weight gradients, the head's input gradient
  assert sorted(n for n in per_function if n) == [5]



def test_a_trainer_that_lost_its_lease_after_the_restore_writes_nothing(tmp_path):
  """Paused right after its restore past the lease, the run another run took over: training
  stops with the one line before any TensorBoard event or progress line, evaluation too."""
  from electra_tf import folder_lock

  strategy = _one_device()
  model, optimizer = toy_train.build(strategy, 4)
  lines = []
  trainer = training.Trainer(strategy, model, optimizer,
                             training.TrainSettings(str(tmp_path), 4, 2),
                             step_fn=toy_train.toy_step_fn(model), log_fn=lines.append)
  assert trainer.restore_or_initialize() == 0
  before = sorted(os.listdir(tmp_path))
  lost = rf"^this run lost its lock on {tmp_path} to another run \(host node-2, .*; stopping"
  with procs.renewed_lock(tmp_path / folder_lock.LOCK_NAME, host="node-2"):
    with pytest.raises(folder_lock.LostLockError, match=lost):
      trainer.train(toy_train.dataset_fn(8))
    with pytest.raises(folder_lock.LostLockError, match=lost):
      trainer.evaluate(toy_train.dataset_fn(8), num_steps=1)
    assert sorted(os.listdir(tmp_path)) == before and lines == []
  folder_lock.release(str(tmp_path))
