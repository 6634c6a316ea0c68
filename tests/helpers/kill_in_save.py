"""Runs run_pretraining.py and SIGKILLs it inside the save of ``ckpt-<K>``: the tensor shards
are written to ``ckpt-<K>_temp/``, the index is not.

    python tests/helpers/kill_in_save.py K <run_pretraining.py arguments>
"""

from __future__ import annotations

import pathlib
import runpy
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def install(kill_step: int) -> None:
  """Makes the merge of ``ckpt-<kill_step>``'s shards SIGKILL this process."""
  import toy_train  # this folder is sys.path[0] when run as a script

  toy_train.install_kill("merge", kill_step)


if __name__ == "__main__":
  step = int(sys.argv.pop(1))
  install(step)
  script = str(REPO / "run_pretraining.py")
  sys.argv[0] = script
  sys.path.insert(0, str(REPO))
  runpy.run_path(script, run_name="__main__")
