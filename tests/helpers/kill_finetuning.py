"""Runs run_finetuning.py and SIGKILLs it at one named moment of a trial's bookkeeping:

    python tests/helpers/kill_finetuning.py MOMENT <run_finetuning.py arguments>

MOMENT: ``test_outputs`` (trial 1's test pickle written, its GLUE submission file not),
``record`` / ``results`` (half of trial 1's record / of the results pickle written to the
hidden temporary file), ``delete`` (trial 1's folder renamed for deletion, part of it deleted),
``between`` (trial 1 done, trial 2's folder not prepared yet).
"""

from __future__ import annotations

import json
import os
import pathlib
import runpy
import shutil
import signal
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def _die() -> None:
  sys.stdout.flush()
  os.kill(os.getpid(), signal.SIGKILL)


def _kill_mid_write(suffix: str) -> None:
  """The atomic write of a path ending with ``suffix`` dies with half its bytes written."""
  from electra_tf import atomic_io

  write_bytes = atomic_io.write_bytes

  def dying_write(path, data):
    if not path.endswith(suffix):
      return write_bytes(path, data)
    with atomic_io.temp_path(path) as tmp, open(tmp, "wb") as f:
      f.write(data[:len(data) // 2])
      f.flush()
      _die()

  atomic_io.write_bytes = dying_write


def _kill_mid_delete(name: str) -> None:
  """Deleting the folder ``name`` (renamed to a hidden temporary first) dies half-way."""
  rmtree = shutil.rmtree

  def dying_rmtree(path, *args, **kwargs):
    if os.path.basename(path).startswith(f".{name}.tmp-"):
      for entry in sorted(os.listdir(path))[::2]:
        if os.path.isfile(os.path.join(path, entry)):
          os.remove(os.path.join(path, entry))
      _die()
    return rmtree(path, *args, **kwargs)

  shutil.rmtree = dying_rmtree


def install(moment: str, model_name: str) -> None:
  from electra_tf.finetuning import outputs, trial_book

  if moment == "test_outputs":
    outputs.write_glue_submission = lambda *args, **kwargs: _die()
  elif moment == "record":
    _kill_mid_write(os.path.join(f"{model_name}_trials", "trial_1.json"))
  elif moment == "results":
    _kill_mid_write("_results.pkl")
  elif moment == "delete":
    _kill_mid_delete(f"{model_name}_1")
  elif moment == "between":
    prepare_dir = trial_book.TrialBook.prepare_dir
    trial_book.TrialBook.prepare_dir = lambda book, trial: (
        _die() if trial == 2 else prepare_dir(book, trial))
  else:
    raise SystemExit(f"unknown moment {moment!r}")


if __name__ == "__main__":
  moment = sys.argv.pop(1)
  sys.path.insert(0, str(REPO))
  from electra_tf import console, early_interrupt

  early_interrupt.install()
  console.quiet_logs(sys.argv)  # before TensorFlow loads, as run_finetuning.py does
  console.use_tf_keras()
  args = sys.argv[1:]
  tasks = json.loads(args[args.index("--hparams") + 1])["task_names"]
  install(moment, ",".join(tasks) + "_model")
  script = str(REPO / "run_finetuning.py")
  sys.argv[0] = script
  runpy.run_path(script, run_name="__main__")
