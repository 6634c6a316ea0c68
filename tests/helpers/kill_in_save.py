"""Runs run_pretraining.py and SIGKILLs it inside the save of ``ckpt-<K>``: the tensor shards
are written to ``ckpt-<K>_temp/``, the index is not.

    python tests/helpers/kill_in_save.py K <run_pretraining.py arguments>
"""

from __future__ import annotations

import os
import pathlib
import runpy
import signal
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def install(kill_step: int) -> None:
  """Makes the merge of ``ckpt-<kill_step>``'s shards SIGKILL this process."""
  from tensorflow.python.ops import gen_io_ops
  original = gen_io_ops.merge_v2_checkpoints

  def merge(checkpoint_prefixes, destination_prefix, *args, **kwargs):
    if destination_prefix.numpy().decode().endswith(f"ckpt-{kill_step}"):
      os.kill(os.getpid(), signal.SIGKILL)
    return original(checkpoint_prefixes, destination_prefix, *args, **kwargs)

  gen_io_ops.merge_v2_checkpoints = merge


if __name__ == "__main__":
  step = int(sys.argv.pop(1))
  install(step)
  script = str(REPO / "run_pretraining.py")
  sys.argv[0] = script
  sys.path.insert(0, str(REPO))
  runpy.run_path(script, run_name="__main__")
