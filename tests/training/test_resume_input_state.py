"""A seeded resume restores the input iterator state saved beside its checkpoint (no consumed
example re-read) and ends bit-identical to an uninterrupted run; without a usable state it
says so in one line and skips the consumed records by reading them. The kills land at exact
moments (the chaos injector of benchmarks/chaos.py), so each resume path is sure to run.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import pretrain_data, procs
from helpers.paths import REPO_ROOT

from electra_tf import training
from electra_tf.pretraining.data import pretraining_dataset
from electra_tf.training import input_state
from electra_tf.training.checkpoint_files import step_of

REPO = REPO_ROOT
INJECT = REPO / "benchmarks" / "chaos_inject"  # kills a run at the k-th call of a function
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1"}
VOCAB = pretrain_data.CHAR_VOCAB
NUM_STEPS = 16
HPARAMS = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2},
           "embedding_size": 16, "max_seq_length": 32, "train_batch_size": 8,
           "num_train_steps": NUM_STEPS, "iterations_per_loop": 2, "save_checkpoints_steps": 2,
           "keep_checkpoint_max": 2, "num_warmup_steps": 4, "vocab_size": len(VOCAB),
           "seed": 11}
TIMEOUT = 600  # seconds per process: generous, for a loaded machine
RESTORED = "Resume: restoring the input stream saved in"
SKIPPED = "Resume: skipping the"


@pytest.fixture(scope="module")
def pretrain_dir(tmp_path_factory, reference_dir) -> pathlib.Path:
  """A data_dir in the official layout: vocab.txt + 2 TFRecord shards of real text, length 32."""
  return pretrain_data.char_vocab_data_dir(tmp_path_factory.mktemp("input_state"),
                                          reference_dir / "pretrain_data" / "corpus")


def _run(data_dir: pathlib.Path, name: str, hparams: dict | None = None,
         kill: dict | None = None) -> subprocess.Popen:
  """run_pretraining.py; `kill`: a kill plan for the chaos injector (benchmarks/chaos_inject),
  which SIGKILLs the run at an exact moment, e.g. right after the k-th input state save."""
  args = ["--data-dir", str(data_dir), "--model-name", name,
          "--hparams", json.dumps(hparams or HPARAMS)]
  env = ENV
  if kill is not None:
    plan = {"events": str(data_dir / f"{name}.events"),
            "kill": {"signal": "SIGKILL", "when": "after", "delay": 0, **kill}}
    env = {**ENV, "ELECTRA_CHAOS_PLAN": json.dumps(plan),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(INJECT), ENV.get("PYTHONPATH")]))}
  return subprocess.Popen([sys.executable, str(REPO / "run_pretraining.py"), *args], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _latest_step(model_dir: pathlib.Path) -> int:
  path = training.latest_checkpoint(str(model_dir)) if model_dir.exists() else None
  return 0 if path is None else step_of(path)


def _tensors(model_dir: pathlib.Path) -> dict[str, np.ndarray]:
  prefix = str(model_dir / f"ckpt-{NUM_STEPS}")
  return {k: tf.train.load_variable(prefix, k) for k, _ in tf.train.list_variables(prefix)
          if "save_counter" not in k and "_CHECKPOINTABLE_OBJECT_GRAPH" not in k}


def _killed(proc: subprocess.Popen) -> str:
  log = procs.finish(proc, TIMEOUT)
  assert proc.returncode == -signal.SIGKILL, f"the run ended before the kill:\n{log[-3000:]}"
  return log


@pytest.mark.slow
def test_run_killed_and_resumed_from_its_input_state_ends_bit_identical(pretrain_dir):
  """SIGKILLed right after ckpt-4's input state is written: the resume restores it (no record
  skip). SIGKILLed again right after ckpt-8 is written, before its input state: the resume
  skips the consumed records by reading them. The final weights equal an uninterrupted run's."""
  models = pretrain_dir / "models"
  clean = _run(pretrain_dir, "clean")  # runs alongside the killed one
  killed_dir = models / "killed"
  _killed(_run(pretrain_dir, "killed", kill={"at": "input_state_save", "call": 2}))
  assert _latest_step(killed_dir) == 4
  assert (killed_dir / "input_state" / "ckpt-4" / "signature.json").exists()

  log = _killed(_run(pretrain_dir, "killed", kill={"at": "ckpt_save", "call": 2}))
  assert "Running training from step 4" in log, log[-3000:]
  assert f"{RESTORED} {killed_dir / 'input_state' / 'ckpt-4'} (no consumed example re-read)" \
      in log, log[-3000:]
  assert SKIPPED not in log
  assert _latest_step(killed_dir) == 8 and not (killed_dir / "input_state" / "ckpt-8").exists()

  resumed = _run(pretrain_dir, "killed")
  log = procs.finish(resumed, TIMEOUT)
  assert resumed.returncode == 0, log[-3000:]
  assert "Running training from step 8" in log
  assert f"{SKIPPED} 64 consumed examples by reading them (ckpt-8 has no saved input " \
         "state)" in log, log[-3000:]
  assert RESTORED not in log
  # input states exist for the kept checkpoints only, and no temporary folder is left
  kept = {int(p.name[len("ckpt-"):-len(".index")]) for p in killed_dir.glob("ckpt-*.index")}
  states = {int(p.name[len("ckpt-"):]) for p in (killed_dir / "input_state").iterdir()}
  assert states == kept and len(kept) == HPARAMS["keep_checkpoint_max"]

  log = procs.finish(clean, TIMEOUT)
  assert clean.returncode == 0, log[-3000:]
  assert RESTORED not in log and SKIPPED not in log  # a fresh run says nothing about resuming
  got, want = _tensors(killed_dir), _tensors(models / "clean")
  assert sorted(got) == sorted(want) and any(k.startswith("model/") for k in want)
  for key in want:
    np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@pytest.mark.slow
def test_a_signal_stop_resumes_bit_identical(pretrain_dir):
  """SIGINT between checkpoints: the stop discards the batch the loop had fetched, so the step
  it saves gets no input state (a state would skip that batch) and the resume skips by
  reading; the final weights equal an uninterrupted run's."""
  hparams = {**HPARAMS, "iterations_per_loop": 1, "save_checkpoints_steps": 5}
  models = pretrain_dir / "models"
  clean = _run(pretrain_dir, "clean_sig", hparams)
  stopped_dir = models / "stopped"
  proc = _run(pretrain_dir, "stopped", hparams)
  procs.wait_for_line(proc, rf"^6/{NUM_STEPS} ", TIMEOUT)  # past ckpt-5, before ckpt-10
  proc.send_signal(signal.SIGINT)
  log = procs.finish(proc, TIMEOUT)
  assert proc.returncode == 130 and "interrupted at step" in log, log[-3000:]
  start = _latest_step(stopped_dir)
  assert 6 <= start < NUM_STEPS and start != 10, log[-3000:]
  assert not (stopped_dir / "input_state" / f"ckpt-{start}").exists()

  resumed = _run(pretrain_dir, "stopped", hparams)
  log = procs.finish(resumed, TIMEOUT)
  assert resumed.returncode == 0, log[-3000:]
  assert f"Running training from step {start}" in log and SKIPPED in log, log[-3000:]
  log = procs.finish(clean, TIMEOUT)
  assert clean.returncode == 0, log[-3000:]
  got, want = _tensors(stopped_dir), _tensors(models / "clean_sig")
  assert sorted(got) == sorted(want) and any(k.startswith("model/") for k in want)
  for key in want:
    np.testing.assert_array_equal(got[key], want[key], err_msg=f"{key} (stopped at {start})")


def test_resume_without_a_usable_input_state_says_so_and_skips_by_reading(pretrain_dir,
                                                                           tmp_path):
  """The fallback: no state, a changed batch size, several replicas; and the restore itself."""
  pattern = str(pretrain_dir / "pretrain_tfrecords" / "*")
  dataset_fn_for = lambda skip: lambda ctx: pretraining_dataset(
      pattern, 8, 32, seed=5, input_context=ctx, skip_steps=skip)
  one = tf.distribute.OneDeviceStrategy("/cpu:0")
  signature = {"files": sorted(os.listdir(pretrain_dir / "pretrain_tfrecords")),
               "train_batch_size": 8, "seed": 5}
  lines = []

  def plan(sig, strategy=one, step=6):
    lines.clear()
    return input_state.plan(str(tmp_path), step, step, sig, strategy, 8, dataset_fn_for,
                            lines.append)

  state = plan(signature)  # ckpt-6 has no input state (e.g. saved by an older version)
  assert (state.skip_steps, state.restore_from, state.saved) == (6, None, True)
  assert lines == [f"{SKIPPED} 48 consumed examples by reading them (ckpt-6 has no saved "
                   "input state)"]
  iterator = state.open()
  whole = [b["input_ids"].numpy() for b in pretraining_dataset(pattern, 8, 32, seed=5).take(9)]
  np.testing.assert_array_equal(next(iterator)["input_ids"].numpy(), whole[6])
  state.save(str(tmp_path), 7)  # after step 7

  state = plan(signature, step=7)
  saved = tmp_path / "input_state" / "ckpt-7"
  assert lines == [f"{RESTORED} {saved} (no consumed example re-read)"]
  assert state.skip_steps == 6  # the pipeline is rebuilt as it was saved
  iterator = state.open()
  for want in whole[7:9]:
    np.testing.assert_array_equal(next(iterator)["input_ids"].numpy(), want)

  state = plan({**signature, "train_batch_size": 16}, step=7)
  assert (state.skip_steps, state.restore_from) == (7, None)
  assert lines == [f"{SKIPPED} 56 consumed examples by reading them (its input state was "
                   "saved with train_batch_size 8, this run has 16)"]

  (tmp_path / "input_state" / "ckpt-7" / "state.index").write_bytes(b"damaged")
  state = plan(signature, step=7)
  lines.clear()
  iterator = state.open()  # the restore fails: the record skip instead, said in one line
  assert len(lines) == 1 and lines[0].startswith(
      f"Resume: the input state in {tmp_path / 'input_state' / 'ckpt-7'} does not restore (")
  np.testing.assert_array_equal(next(iterator)["input_ids"].numpy(), whole[7])

  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True).stdout.strip()
  leftover = tmp_path / "input_state" / f".ckpt-9.tmp-{dead}-0123abcd"  # a killed save's stage
  (leftover / "state.index").parent.mkdir()
  (leftover / "state.index").write_bytes(b"partial")
  state.save(str(tmp_path), 8)  # written by atomic_io: no temporary name left beside it
  assert sorted(p.name for p in (tmp_path / "input_state").iterdir()) == [
      leftover.name, "ckpt-7", "ckpt-8"]
  input_state.prune(str(tmp_path), keep_steps={8})
  assert sorted(p.name for p in (tmp_path / "input_state").iterdir()) == ["ckpt-8"]
  input_state.prune(str(tmp_path), keep_steps=set())
  assert not list((tmp_path / "input_state").iterdir())


def test_prune_puts_in_place_a_state_a_save_left_staged(tmp_path):
  """A save killed between atomic_io.staged_dir's renames: the whole copy is kept, not pruned
  as a leftover, and the old one (moved aside) goes."""
  folder = tmp_path / "input_state"
  staged = folder / ".ckpt-8.staged"
  staged.mkdir(parents=True)
  (staged / "state.index").write_bytes(b"whole")
  input_state.prune(str(tmp_path), keep_steps={8})
  assert sorted(p.name for p in folder.iterdir()) == ["ckpt-8"]
  assert (folder / "ckpt-8" / "state.index").read_bytes() == b"whole"


TWO_REPLICAS = """
import sys, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from electra_tf.training import input_state
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
state = input_state.plan(sys.argv[1], 6, 6, {"seed": 5}, strategy, 8, None, print)
assert not state.saved and state.skip_steps == 6 and state.restore_from is None
"""


def test_resume_with_two_replicas_says_it_skips_by_reading(tmp_path):
  out = subprocess.run([sys.executable, "-c", TWO_REPLICAS, str(tmp_path)], env=ENV, cwd=REPO,
                       capture_output=True, text=True, timeout=TIMEOUT)
  assert out.returncode == 0, out.stderr[-3000:]
  assert out.stdout.splitlines()[-1] == (
      f"{SKIPPED} 48 consumed examples by reading them (the input state is saved only for "
      "one-replica CPU/GPU runs; this one runs 2 replica(s) under MirroredStrategy)")


def test_a_failed_input_state_save_is_one_warning(pretrain_dir, tmp_path):
  pattern = str(pretrain_dir / "pretrain_tfrecords" / "*")
  lines = []
  state = input_state.plan(
      str(tmp_path), 0, 0, {"seed": 5}, tf.distribute.OneDeviceStrategy("/cpu:0"), 8,
      lambda skip: lambda ctx: pretraining_dataset(pattern, 8, 32, seed=5, skip_steps=skip),
      lines.append)
  next(state.open())
  (tmp_path / "input_state").write_text("not a folder")  # the state cannot be written
  state.save(str(tmp_path), 1)
  assert len(lines) == 1 and lines[0].startswith(
      f"Warning: saving the input state of step 1 in {tmp_path / 'input_state' / 'ckpt-1'} "
      "failed (")
  assert lines[0].endswith("a resume from it will skip the consumed examples by reading them")
  assert (tmp_path / "input_state").read_text() == "not a folder"
