"""The benchmarks end: the smallest configuration of benchmarks/bench_pretrain.py prints its
last line and the process exits soon after (it used to hang at interpreter exit)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from helpers.paths import GOLDEN, REPO_ROOT, TEST_DATA

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
       "TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1"}
EXIT_SECONDS = 60  # from the last printed line to the end of the process


@pytest.mark.slow
def test_bench_pretrain_smallest_configuration_exits():
  proc = subprocess.Popen(
      [sys.executable, str(REPO_ROOT / "benchmarks" / "bench_pretrain.py"),
       "--variants=ours,tfm", "--num_layers=1", "--batch_size=2", "--seq_length=16",
       "--steps=1", "--repeats=1", "--nomemory",
       f"--text={TEST_DATA / 'wikitext2' / 'wiki.test.raw'}",
       f"--vocab_file={GOLDEN / 'vocab.txt'}"],
      cwd=REPO_ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  lines: list[str] = []
  last = [time.time()]

  def read() -> None:
    for line in proc.stdout:  # ends when the process closes its output, i.e. exits
      lines.append(line.rstrip("\n"))
      last[0] = time.time()

  reader = threading.Thread(target=read, daemon=True)
  reader.start()
  deadline = time.time() + 1500  # building and tracing two variants on a slow machine
  while proc.poll() is None:
    done = lines and lines[-1].startswith("ours / tfm = ")
    if (done and time.time() - last[0] > EXIT_SECONDS) or time.time() > deadline:
      proc.kill()
      pytest.fail(f"still running {time.time() - last[0]:.0f} s after its last line:\n"
                  + "\n".join(lines))
    time.sleep(1)
  reader.join(timeout=30)
  assert proc.returncode == 0, "\n".join(lines)
  assert lines[-1].startswith("ours / tfm = "), lines
