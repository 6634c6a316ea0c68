"""A tiny RTE fine-tuning run of `run_finetuning.py` as a subprocess (tests/data's 120 rows, a
2-layer model from random init, no dev evaluation), for tests that stop, damage and rerun it."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

from helpers import pretrain_data
from helpers.paths import REPO_ROOT


def rte_run(data_dir: pathlib.Path, vocab_file: str, tmp_path: pathlib.Path,
            env: Mapping[str, str], wrapper: Sequence[str] = (),
            **hparams) -> Callable[[], subprocess.Popen]:
  """Writes `<tmp_path>/finetuning_data/rte/` and returns a function starting the run (model
  `m` in `<tmp_path>/models/m/`, stdout and stderr merged); `hparams` override the defaults.
  `wrapper`: a script (and its arguments) that runs run_finetuning.py, e.g. read_faults.py."""
  task_dir = tmp_path / "finetuning_data" / "rte"
  task_dir.mkdir(parents=True)
  for split in ("train", "dev"):
    shutil.copy(data_dir / "glue" / "RTE" / f"{split}.tsv", task_dir / f"{split}.tsv")
  hparams = {"model_hparam_overrides": {"hidden_size": 64, "num_hidden_layers": 2},
             "embedding_size": 64, "max_seq_length": 32, "train_batch_size": 8,
             "init_checkpoint": None, "seed": 3, "vocab_file": vocab_file,
             "vocab_size": pretrain_data.vocab_size(vocab_file), "task_names": ["rte"],
             "num_train_epochs": 1.0, "do_eval": False, **hparams}

  def start() -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *wrapper, str(REPO_ROOT / "run_finetuning.py"), "--data_dir",
         str(tmp_path), "--model_name", "m", "--hparams", json.dumps(hparams)],
        cwd=REPO_ROOT, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)

  return start
