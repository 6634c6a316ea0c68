"""Multi-worker pre-training with the real model: run_pretraining.py on 2 workers
(MultiWorkerMirroredStrategy over loopback, TF_CONFIG, two processes) trains exactly as one
worker with 2 replicas (MirroredStrategy over 2 logical CPUs) at the same global batch and seed,
and a checkpoint of either resumes on the other.

Why one worker with 2 replicas and not one device: a run's randomness and loss are defined per
replica, as in the official TPU code, so 2 replicas of B/2 and 1 replica of B differ by design:
masking, generator sampling and dropout are drawn per replica batch from ``[seed, step *
replicas + replica]`` (a half-batch's draws are not rows of the full batch's), and each replica's
losses are means over its own masked slots and tokens, averaged over replicas (the official
CrossShardOptimizer). The input pipelines also differ: files are split between workers (one
pipeline each), while one worker reads them all in one pipeline. So every example here is the
same unpadded row of real text: the order of examples cannot matter, and the test checks what
multi-worker adds (TF_CONFIG, collective all-reduce of the gradients, the global replica ids of
the per-step seeds, the chief's checkpoints, resuming on another cluster shape). Dropout keeps
its default 0.1: its masks follow the per-replica seed, the same in both setups.
"""

import json
import os
import pathlib
import shutil
import string
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import ports, procs
from helpers.paths import HELPERS, REPO_ROOT

from data_prep import build_pretraining_dataset as bpd
from electra_tf import console
from electra_tf.pretraining import data
from electra_tf.pretraining.schema import FEATURES, to_example

REPO = REPO_ROOT
MIRRORED = HELPERS / "mirrored_pretraining.py"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1"}
CHARS = string.ascii_lowercase + string.digits + string.punctuation
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *CHARS, *("##" + c for c in CHARS)]
STEPS, MORE_STEPS = 5, 8
HPARAMS = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 1},
           "embedding_size": 16, "max_seq_length": 32, "train_batch_size": 8,
           "num_train_steps": STEPS, "iterations_per_loop": 1, "save_checkpoints_steps": STEPS,
           "num_warmup_steps": 2, "vocab_size": len(VOCAB), "seed": 11}  # dropout 0.1 (default)
# The two setups differ only in the order of float32 sums (the all-reduce of two replicas'
# gradients: a ring over gRPC vs a local reduction); 1e-6 is ~8 float32 ulps at 1.0.
ATOL = 1e-6
LOSS_RTOL = 1e-6  # the logged losses (~35 for total_loss): relative
TIMEOUT = 300  # seconds per process: generous, for a loaded machine
pytestmark = pytest.mark.slow  # 6 training processes: ~150 CPU seconds


@pytest.fixture(scope="module")
def pretrain_dir(tmp_path_factory, reference_dir) -> pathlib.Path:
  """data_dir with vocab.txt and 2 shards (one per worker) of the same unpadded row of real
  text (built from the reference corpus), 32 copies each."""
  root = tmp_path_factory.mktemp("multi_worker")
  (root / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB), encoding="utf-8")
  built = root / "built"
  bpd.build(bpd.BuildArgs(corpus_dir=str(reference_dir / "pretrain_data" / "corpus"),
                          vocab_file=str(root / "vocab.txt"), output_dir=str(built),
                          max_seq_length=32, num_out_files=1, seed=1))
  rows = data.pretraining_dataset(str(built / "*"), 1, 32, is_training=False).unbatch()
  row = next(r for r in rows if bool(tf.reduce_all(r["input_mask"] == 1)))  # no padding
  example = to_example({name: row[name].numpy().tolist() for name in FEATURES})
  shards = root / "pretrain_tfrecords"
  shards.mkdir()
  for i in range(2):
    with tf.io.TFRecordWriter(str(shards / f"pretrain_data.tfrecord-{i}-of-2")) as writer:
      for _ in range(32):
        writer.write(example.SerializeToString())
  shutil.rmtree(built)
  return root


def _args(data_dir: pathlib.Path, name: str, steps: int) -> list[str]:
  return [f"--data_dir={data_dir}", f"--model_name={name}",
          f"--hparams={json.dumps({**HPARAMS, 'num_train_steps': steps})}", "--check_data=false"]


def _popen(argv: list[str], env: dict[str, str] = ENV) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, *argv], cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def _two_workers(data_dir: pathlib.Path, name: str, steps: int) -> list[subprocess.Popen]:
  """run_pretraining.py as workers 0 (the chief) and 1 of a loopback cluster."""
  workers = [f"127.0.0.1:{ports.free_port()}" for _ in range(2)]
  return [_popen(["run_pretraining.py", "--distribution_strategy=multi_worker_mirrored",
                  *_args(data_dir, name, steps)],
                 {**ENV, "TF_CONFIG": json.dumps({"cluster": {"worker": workers},
                                                  "task": {"type": "worker", "index": i}})})
          for i in range(2)]


def _one_worker(data_dir: pathlib.Path, name: str, steps: int) -> list[subprocess.Popen]:
  """One process, 2 replicas (MirroredStrategy over 2 logical CPUs)."""
  return [_popen([str(MIRRORED), "--distribution_strategy=mirrored",
                  *_args(data_dir, name, steps)])]


def _finish(runs: list[subprocess.Popen]) -> list[str]:
  logs = [procs.finish(p, TIMEOUT) for p in runs]
  for proc, log in zip(runs, logs, strict=True):
    assert proc.returncode == 0, log[-3000:]
  return logs


def _tensors(prefix: pathlib.Path) -> dict[str, np.ndarray]:
  """Every variable of a checkpoint (model, Adam slots, steps), not the save counter."""
  reader = tf.train.load_checkpoint(str(prefix))
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if "save_counter" not in k and "_CHECKPOINTABLE_OBJECT_GRAPH" not in k}


def _losses(model_dir: pathlib.Path) -> dict[str, dict[int, float]]:
  """The logged loss scalars by tag and step (iterations_per_loop 1: one value per step)."""
  out: dict[str, dict[int, float]] = {}
  for event_file in sorted(model_dir.glob("events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(str(event_file)):
      for value in event.summary.value:
        if value.tag.endswith("_loss"):
          out.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
  return out


def _assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
  assert sorted(got) == sorted(want)
  n_weights = sum(k.startswith("model/") for k in want)
  assert n_weights > 0 and sum(k.startswith("optimizer/_variables/") for k in want) == 2 * n_weights
  for key in want:
    np.testing.assert_allclose(got[key], want[key], rtol=0, atol=ATOL, err_msg=key)


def test_two_workers_train_and_resume_as_one_worker_with_two_replicas(pretrain_dir):
  models = pretrain_dir / "models"
  runs = _two_workers(pretrain_dir, "two", STEPS) + _one_worker(pretrain_dir, "one", STEPS)
  chief, other, _ = _finish(runs)
  assert "Saved" in chief and "Saved" not in other  # only the chief reports its saves
  for log in (chief, other):  # no native log line (gRPC's "Started server ...", absl's warning)
    assert not [line for line in log.splitlines() if console.LOG_LINE.match(line)], log[:3000]
  assert sorted(p.name for p in (models / "two").iterdir() if p.is_file()
                and not p.name.startswith("events")) == [
      "checkpoint", f"ckpt-{STEPS}.data-00000-of-00001", f"ckpt-{STEPS}.index", "config.json",
      "hparams.json", "vocab.txt"]  # the chief's config.json once; no scratch left by worker 1
  two, one = _tensors(models / "two" / f"ckpt-{STEPS}"), _tensors(models / "one" / f"ckpt-{STEPS}")
  assert two["step/.ATTRIBUTES/VARIABLE_VALUE"] == one["step/.ATTRIBUTES/VARIABLE_VALUE"] == STEPS
  _assert_close(two, one)
  losses_two, losses_one = _losses(models / "two"), _losses(models / "one")
  assert sorted(losses_one) == ["disc_loss", "mlm_loss", "total_loss"]
  for tag, by_step in losses_one.items():
    assert sorted(by_step) == list(range(1, STEPS + 1))
    np.testing.assert_allclose([losses_two[tag][s] for s in by_step], list(by_step.values()),
                               rtol=LOSS_RTOL, atol=0, err_msg=tag)

  # Crosswise: the 2-worker checkpoint resumes on one worker and the 1-worker one on 2 workers.
  shutil.copytree(models / "two", models / "two_then_one")
  shutil.copytree(models / "one", models / "one_then_two")
  runs = (_one_worker(pretrain_dir, "two_then_one", MORE_STEPS)
          + _two_workers(pretrain_dir, "one_then_two", MORE_STEPS))
  logs = _finish(runs)
  for log, name in ((logs[0], "two_then_one"), (logs[1], "one_then_two")):
    assert f"Restored {models / name}/ckpt-{STEPS} at step {STEPS}" in log
    assert f"Running training from step {STEPS}" in log
  a = _tensors(models / "two_then_one" / f"ckpt-{MORE_STEPS}")
  b = _tensors(models / "one_then_two" / f"ckpt-{MORE_STEPS}")
  assert a["step/.ATTRIBUTES/VARIABLE_VALUE"] == b["step/.ATTRIBUTES/VARIABLE_VALUE"] == MORE_STEPS
  assert a["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"] == MORE_STEPS
  _assert_close(a, b)
  moved = [k for k in one if k.startswith("model/") and not np.allclose(a[k], one[k])]
  assert len(moved) > len(one) // 6  # the resumed runs trained (most weights get gradients)
