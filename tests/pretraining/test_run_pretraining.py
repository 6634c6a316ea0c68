"""run_pretraining.py on real text (TFRecords built in tmp_path from tests/data): every
objective trains and logs every TensorBoard tag, eval writes the official metrics, SIGKILL +
rerun resumes, MirroredStrategy matches one device, init_checkpoint loads an official model.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import pretrain_data, procs
from helpers.paths import GOLDEN, HELPERS, REPO_ROOT

from electra_tf import console, training
from electra_tf.config import PretrainingConfig
from electra_tf.optimization import learning_rate_at
from electra_tf.pretraining import metrics as metrics_lib
from electra_tf.pretraining import task
from electra_tf.pretraining.metrics import metric_statistics, metrics, metrics_from_statistics
from electra_tf.pretraining.run import train_or_eval

REPO = REPO_ROOT
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1"}
TINY = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2},
        "embedding_size": 16, "max_seq_length": 32, "train_batch_size": 8, "eval_batch_size": 8,
        "num_train_steps": 2, "iterations_per_loop": 1, "save_checkpoints_steps": 1,
        "num_warmup_steps": 1, "seed": 3,
        "vocab_size": pretrain_data.vocab_size(GOLDEN / "vocab.txt")}  # the vocab_file fixture's
VARIANTS = {
    "electra": {},
    "electric": {"electra_objective": False, "electric_objective": True},
    "mlm": {"electra_objective": False},
    "uniform_generator": {"uniform_generator": True},
    "tied_generator": {"untied_generator": False},
}
LOSS_TAGS = {"total_loss", "mlm_loss", "learning_rate", "masked_lm_accuracy",
             "examples_per_second", "steps_per_second", "model_flops_utilization"}
DISC_TAGS = {"disc_loss", "sampled_masked_lm_accuracy", "disc_accuracy", "disc_precision",
             "disc_recall", "disc_auc"}
# Mirrored (2 replicas) vs one device at the same global batch: only float32 summation order
# differs (two half-batch gradients summed vs one full batch); measured max |diff| 3e-8 after 3
# Adam steps that move weights by up to 3.5e-3. 1e-6 is ~8 float32 ulps at 1.0.
REPLICA_ATOL = 1e-6


@pytest.fixture(scope="module")
def pretrain_dir(tmp_path_factory, data_dir, vocab_file) -> pathlib.Path:
  """data_dir in the official layout: vocab.txt + pretrain_tfrecords/ from real text."""
  return pretrain_data.build_data_dir(tmp_path_factory.mktemp("pretrain"), vocab_file,
                                      pretrain_data.emma_and_wiki(data_dir), num_out_files=2)


@pytest.fixture(scope="module")
def lane_pretrain_dir(tmp_path_factory, data_dir, reference_dir) -> pathlib.Path:
  """pretrain_dir's layout with the lane's vocabulary (reference_dir / "vocab.txt"): for
  models of the lane's official checkpoints."""
  return pretrain_data.build_data_dir(tmp_path_factory.mktemp("pretrain_lane"),
                                      str(reference_dir / "vocab.txt"),
                                      pretrain_data.emma_and_wiki(data_dir), num_out_files=2)


def _scalars(folder: pathlib.Path) -> dict[str, dict[int, float]]:
  out: dict[str, dict[int, float]] = {}
  for event_file in sorted(folder.glob("events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(str(event_file)):
      for value in event.summary.value:
        out.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
  return out


def _quiet(line):
  pass


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_objective_trains_checkpoints_and_logs_every_tag(pretrain_dir, variant):
  config = PretrainingConfig(variant, str(pretrain_dir), **TINY, **VARIANTS[variant])
  lines = []
  results = train_or_eval(config, log_fn=lines.append)
  model_dir = pretrain_dir / "models" / variant
  assert training.latest_checkpoint(str(model_dir)) == str(model_dir / "ckpt-2")
  assert (model_dir / "ckpt-1.index").exists()
  scalars = _scalars(model_dir)
  has_disc = variant != "mlm"
  assert set(scalars) == LOSS_TAGS | (DISC_TAGS if has_disc else set())
  assert all(sorted(steps) == [1, 2] for steps in scalars.values())
  assert all(np.isfinite(v) for steps in scalars.values() for v in steps.values())
  for step in (1, 2):  # as_run: the update after `step` steps used lr(step)
    want = float(learning_rate_at(step, 5e-4, 2, warmup_steps=1))
    assert scalars["learning_rate"][step] == pytest.approx(want, rel=1e-6)
  assert 0 < scalars["model_flops_utilization"][2] < 1
  if has_disc:
    assert scalars["total_loss"][1] == pytest.approx(
        scalars["mlm_loss"][1] + 50.0 * scalars["disc_loss"][1], rel=1e-5)
    for tag in ("disc_accuracy", "disc_auc", "sampled_masked_lm_accuracy"):
      assert 0 <= scalars[tag][2] <= 1
  assert results["train"]["total_loss"] == pytest.approx(scalars["total_loss"][2], rel=1e-6)
  console = [line for line in lines if line.startswith("2/2 = 100.0%")]
  assert console and " - mlm_loss: " in console[0] and "ETA: " in console[0]


def test_eval_mode_writes_the_official_streaming_metrics(pretrain_dir):
  hparams = {**TINY, "eval_batch_size": 4, "num_eval_steps": 2}
  train_or_eval(PretrainingConfig("eval", str(pretrain_dir), **hparams), log_fn=_quiet)
  config = PretrainingConfig("eval", str(pretrain_dir), **hparams, do_train=False, do_eval=True)
  results = train_or_eval(config, log_fn=_quiet)["eval"]
  lines = pathlib.Path(config.results_txt).read_text().splitlines()
  written = dict(line.split(" = ") for line in lines)
  assert sorted(written) == sorted(metrics_lib.metric_names(True, 50.0) +
                                   ["loss", "global_step"])
  assert float(written["global_step"]) == 2
  assert {k: float(v) for k, v in written.items()} == pytest.approx(results)

  # The same two eval batches by hand: sum the statistics, then the official formulas.
  run = task.build_run(config, log_fn=_quiet)
  assert run.trainer.restore_or_initialize() == 2
  batches = iter(task.dataset_fn(config, False, config.seed)(tf.distribute.InputContext()))
  sums, losses = {}, []
  for i in range(2):
    out = run.model(next(batches), training=False, seed=tf.constant([3, i], tf.int64))
    losses.append(float(out["total_loss"]))
    for k, v in metric_statistics(out, 50.0).items():
      sums[k] = sums.get(k, 0) + v
  want = {k: float(v) for k, v in metrics_from_statistics(sums).items()}
  want.update(loss=np.mean(losses), global_step=2)
  assert results == pytest.approx(want, rel=1e-5, abs=1e-6)

  # Eval only, starting from that run's TF2 checkpoint: the same weights, step and metrics.
  copy = PretrainingConfig("eval_copy", str(pretrain_dir), **hparams, do_train=False,
                           do_eval=True, init_checkpoint=str(pathlib.Path(config.model_dir)))
  assert train_or_eval(copy, log_fn=_quiet)["eval"] == results


def test_streaming_metric_equals_metric_fn_on_all_batches():
  rng = np.random.RandomState(0)

  def batch(n):
    ids = rng.randint(0, 50, [n, 4]).astype(np.int32)
    return {"masked_lm_ids": ids, "masked_lm_weights": (rng.rand(n, 4) > 0.3).astype(np.float32),
            "gen_mlm_preds": np.where(rng.rand(n, 4) > 0.5, ids, 0).astype(np.int32),
            "gen_mlm_per_example_loss": rng.rand(n, 4).astype(np.float32),
            "sampled_tokids": np.where(rng.rand(n, 4) > 0.7, ids, 1).astype(np.int32),
            "disc_per_example_loss": rng.rand(n).astype(np.float32),
            "input_mask": (rng.rand(n, 6) > 0.2).astype(np.int32),
            "disc_labels": (rng.rand(n, 6) > 0.7).astype(np.int32),
            "disc_probs": rng.rand(n, 6).astype(np.float32),
            "disc_preds": (rng.rand(n, 6) > 0.5).astype(np.int32)}

  a, b = batch(3), batch(5)
  streamed = metrics_lib.official_metrics(metrics_lib.metric_names(True, 1.0))
  for outputs in (a, b):
    stats = metric_statistics(outputs, 1.0)
    for m in streamed:
      m.update_state(stats)
  both = {k: np.concatenate([a[k], b[k]]) for k in a}
  want = metrics(both, 1.0)
  assert {m.name: float(m.result()) for m in streamed} == pytest.approx(
      {k: float(v) for k, v in want.items()}, rel=1e-6)
  for m in streamed:
    m.reset_state()
  assert all(float(m.result()) == 0 for m in streamed if m.name != "disc_auc")


def test_init_checkpoint_loads_official_tf1_weights_at_step_0(lane_pretrain_dir, reference_dir):
  folder = reference_dir / "electra_small_2l"
  hparams = json.loads((folder / "hparams.json").read_text())
  ckpt = str(folder / "model.ckpt")
  config = PretrainingConfig("from_official", str(lane_pretrain_dir), **hparams,
                             init_checkpoint=ckpt, seed=1, train_batch_size=8)
  lines = []
  run = task.build_run(config, log_fn=lines.append)
  assert run.trainer.restore_or_initialize() == 0
  assert int(run.optimizer.iterations.numpy()) == 0
  reader = tf.train.load_checkpoint(ckpt)
  variables = run.model.tf1_variables()
  assert sorted(variables) == sorted(k for k in reader.get_variable_to_shape_map()
                                     if k != "global_step")
  for name, var in variables.items():
    np.testing.assert_array_equal(var.numpy(), reader.get_tensor(name), err_msg=name)
  assert any("(TF1) at step 0: loaded 82 tensors" in line for line in lines), lines


def test_bad_setup_is_a_one_line_error(pretrain_dir, tmp_path):
  n = pretrain_data.vocab_size(pretrain_dir / "vocab.txt")
  assert n != 1000
  with pytest.raises(ValueError, match=rf"has {n} tokens but the vocab_size hparam is 1000; "
                                       rf"set \"vocab_size\": {n}"):
    task.check_inputs(PretrainingConfig("x", str(pretrain_dir), vocab_size=1000))
  with pytest.raises(ValueError, match="nothing to do"):
    task.check_inputs(PretrainingConfig("x", str(pretrain_dir), vocab_size=n, do_train=False))
  shutil.copy(pretrain_dir / "vocab.txt", tmp_path / "vocab.txt")
  with pytest.raises(ValueError, match="no files match .*pretrain_data.tfrecord"):
    task.check_inputs(PretrainingConfig("x", str(tmp_path), vocab_size=n))
  with pytest.raises(ValueError, match="nothing to evaluate: no checkpoint"):
    train_or_eval(PretrainingConfig("x", str(pretrain_dir), vocab_size=n, do_train=False,
                                    do_eval=True))

  script = str(REPO / "run_pretraining.py")
  for args, message in (
      (["--data-dir", "d", "--model-name", "m", "--hparams", '{"num_train_step": 5}'],
       "run_pretraining.py: error: Unknown hparam 'num_train_step' for PretrainingConfig "
       "(did you mean 'num_train_steps'?)"),
      (["--data_dir", "d", "--model_name", "m", "--num_gpu", "1"],
       "Unknown command line flag 'num_gpu'"),
      (["--data_dir", "d"], "--data_dir and --model_name are required"),
      (["--data_dir", "d", "--model_name", "m", "stray"], "unexpected arguments: stray"),
      (["--data_dir", "d", "--data-dir", "e", "--model_name", "m"],
       "--data_dir and --data-dir disagree: 'd' vs 'e'")):
    proc = subprocess.run([sys.executable, script, *args], env=ENV, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def _script(data_dir, name, hparams) -> subprocess.Popen:
  return subprocess.Popen(
      [sys.executable, str(REPO / "run_pretraining.py"), "--data-dir", str(data_dir),
       "--model-name", name, "--hparams", json.dumps(hparams)],
      env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc, timeout=300) -> str:
  return procs.finish(proc, timeout)


@pytest.mark.slow
def test_sigkill_then_rerun_resumes_at_the_saved_step(pretrain_dir):
  hparams = {**TINY, "num_train_steps": 100, "iterations_per_loop": 5,
             "save_checkpoints_steps": 5, "keep_checkpoint_max": 2}
  model_dir = pretrain_dir / "models" / "killed"
  proc = _script(pretrain_dir, "killed", hparams)
  procs.sigkill_after_first_checkpoint(proc, model_dir, timeout=240, poll=0.01)
  saved = int(training.latest_checkpoint(str(model_dir)).rsplit("-", 1)[1])
  assert 5 <= saved < 100

  rerun = _script(pretrain_dir, "killed", hparams)  # the same command
  log = _finish(rerun)
  assert rerun.returncode == 0, log[-3000:]
  assert f"Restored {model_dir}/ckpt-{saved} at step {saved}" in log
  assert f"Running training from step {saved}" in log
  assert training.latest_checkpoint(str(model_dir)) == str(model_dir / "ckpt-100")
  assert sorted(p.name for p in model_dir.glob("*.index")) == ["ckpt-100.index",
                                                               "ckpt-95.index"]
  steps = sorted(_scalars(model_dir)["total_loss"])
  assert steps[-1] == 100 and f"{saved + 5}/100 = " in log  # the first line after the resume


@pytest.mark.slow
def test_mirrored_two_cpus_updates_weights_like_one_device(pretrain_dir, tmp_path):
  out = tmp_path / "weights.npz"
  proc = subprocess.Popen([sys.executable, str(HELPERS / "pretrain_replicas.py"),
                           "--data_dir", str(pretrain_dir), "--out_npz", str(out)],
                          env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  log = _finish(proc)
  assert proc.returncode == 0, log[-3000:]
  weights = dict(np.load(out))
  names = sorted(k.split("/", 1)[1] for k in weights if k.startswith("one_device/"))
  assert len(names) == 82  # discriminator, generator, both heads
  moved = 0.0
  for name in names:
    single, mirrored = weights[f"one_device/{name}"], weights[f"mirrored/{name}"]
    # both runs start from the same weights (the seed hparam)
    np.testing.assert_array_equal(weights[f"mirrored_init/{name}"],
                                  weights[f"one_device_init/{name}"], err_msg=name)
    np.testing.assert_allclose(mirrored, single, rtol=0, atol=REPLICA_ATOL, err_msg=name)
    moved = max(moved, float(np.abs(single - weights[f"one_device_init/{name}"]).max()))
  assert moved > 1000 * REPLICA_ATOL  # the steps really changed the weights


def test_peak_flops_lookup_and_cpu_estimate():
  from electra_tf.training import hardware

  assert hardware.gpu_peak_flops("NVIDIA H100 80GB HBM3", "bfloat16") == 989.4e12
  assert hardware.gpu_peak_flops("NVIDIA H100 PCIe", None) == 378.0e12
  assert hardware.gpu_peak_flops("NVIDIA A100-SXM4-40GB", "float16") == 312.0e12
  assert hardware.gpu_peak_flops("Some Future GPU", None) is None
  fp32 = hardware.cpu_peak_flops(None)
  assert fp32 >= len(os.sched_getaffinity(0)) * 1e9  # at least 1 GFLOP/s per core
  assert hardware.cpu_peak_flops("bfloat16") >= fp32


@pytest.mark.parametrize("flags, precision, expected", [
    ({"avx512f"}, "bfloat16", "no bfloat16 matrix instructions (avx512_bf16 / amx_bf16"),
    ({"avx512f", "avx512_bf16"}, "bfloat16", None),
    ({"avx512f", "amx_bf16"}, "bfloat16", None),
    ({"avx512f", "avx512_bf16"}, "float16", "no float16 matrix instructions"),
    ({"avx512f"}, None, None),
    (set(), "bfloat16", None),  # flags unknown (no /proc/cpuinfo): no claim
])
def test_low_precision_note_names_the_missing_cpu_units(monkeypatch, flags, precision, expected):
  from electra_tf.training import hardware

  monkeypatch.setattr(hardware, "_cpu_info", lambda: ("GenuineIntel", flags, 6))
  note = hardware.low_precision_note(precision)
  if expected is None:
    assert note is None
  else:
    assert expected in note and "\n" not in note


def test_build_run_logs_the_emulated_precision_note(lane_pretrain_dir, reference_dir,
                                                   monkeypatch):
  from electra_tf.training import hardware

  monkeypatch.setattr(hardware, "_cpu_info", lambda: ("GenuineIntel", {"avx512f"}, 6))
  hparams = json.loads((reference_dir / "electra_small_2l" / "hparams.json").read_text())
  config = PretrainingConfig("bf16_note", str(lane_pretrain_dir), **hparams, seed=1,
                             train_batch_size=8)
  lines = []
  try:
    task.build_run(config, mixed_precision="bfloat16", log_fn=lines.append)
  finally:
    training.set_mixed_precision_policy(None)
  assert [line for line in lines if "no bfloat16 matrix instructions" in line], lines


def test_latest_checkpoint_with_a_relative_model_dir(tmp_path, monkeypatch):
  # `--data-dir runs/x` gives a relative model_dir: the rerun must find the saved checkpoint.
  monkeypatch.chdir(tmp_path)
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)),
                                       "data/models/m", max_to_keep=1)
  manager.save(checkpoint_number=7)
  assert training.latest_checkpoint("data/models/m") == "data/models/m/ckpt-7"


def test_console_starts_with_a_short_settings_block_and_writes_config_json(pretrain_dir):
  """A real run prints at most 20 lines before its first progress line (no config JSON) and
  writes the whole resolved config to models/<name>/config.json."""
  proc = _script(pretrain_dir, "quiet_console", TINY)
  log = _finish(proc)
  assert proc.returncode == 0, log[-3000:]
  lines = log.splitlines()
  first = next(i for i, line in enumerate(lines) if line.startswith("1/2 = "))
  assert first <= 20, "\n".join(lines[:first + 1])
  paths = ("  data: ", "  model_dir: ", "  full config: ")
  assert max(len(line) for line in lines[:first] if not line.startswith(paths)) <= console.WIDTH
  assert not any(line.strip() in ("{", "}", "Config:") for line in lines), log
  model_dir = pretrain_dir / "models" / "quiet_console"
  assert f"  full config: {model_dir / 'config.json'}" in lines[:first]
  written = json.loads((model_dir / "config.json").read_text())
  expected = PretrainingConfig("quiet_console", str(pretrain_dir), **TINY).to_dict()
  assert written == json.loads(json.dumps(expected))
  assert not [p.name for p in model_dir.iterdir() if p.name.startswith(".")]  # atomic: no temp
  from electra_tf.reading import model_source

  assert not model_source.is_hf(str(model_dir))  # config.json has no model_type: not an HF folder


@pytest.mark.parametrize("hparams, heading, has_generator", [
    ({}, "Pre-training m (ELECTRA) from random initialisation, seed 3", True),
    ({"electra_objective": False, "electric_objective": True}, "(Electric, two-tower", True),
    ({"electra_objective": False}, "(masked LM (no discriminator))", False),
    ({"uniform_generator": True}, "uniform replacements: no generator", False),
    ({"do_train": False, "do_eval": True}, "Evaluating m (ELECTRA)", True)])
def test_settings_block_of_each_objective(tmp_path, hparams, heading, has_generator):
  from electra_tf.pretraining import run_settings

  config = PretrainingConfig("m", str(tmp_path), **{**TINY, **hparams})
  path = run_settings.write_full_config(config)
  lines = run_settings.settings_lines(config, path)
  assert heading in lines[0] and lines[-1] == f"  full config: {path}"
  assert len(lines) <= 10, lines
  assert max(len(line) for line in lines[:-3]) <= console.WIDTH, lines  # but the 3 paths
  assert [line.split(":")[0] for line in lines[-3:]] == ["  data", "  model_dir",
                                                          "  full config"]
  assert any(line.startswith("  generator: ") for line in lines) == has_generator
  assert path == str(tmp_path / "models" / "m" / ("config.json" if config.do_train else
                                                 "results/unsup_config.json"))
  assert json.loads(pathlib.Path(path).read_text()) == json.loads(config.to_json())
  resumed = run_settings.settings_lines(config, path, str(tmp_path / "models/m/ckpt-5"))
  assert ("resuming from ckpt-5, seed 3" if config.do_train else "at ckpt-5, seed 3") in resumed[0]
  other = PretrainingConfig("m", str(tmp_path), **{**TINY, **hparams})
  assert run_settings.write_full_config(other, is_chief=False) == path  # writes nothing
