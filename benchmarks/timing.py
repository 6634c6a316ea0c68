"""What the benchmarks share: a multi-step loop timed call by call, a real packed batch, and
the peak memory of a variant run alone."""

from __future__ import annotations

import subprocess
import time

import numpy as np
import tensorflow as tf

from electra_tf import tokenization


def packed_pairs(vocab_file: str, text: str, batch_size: int,
                 seq_length: int) -> dict[str, np.ndarray]:
  """[CLS] a [SEP] b [SEP] rows [batch_size, seq_length] packed from consecutive lines of the
  real text file ``text`` (no padding): input_ids, input_mask, segment_ids."""
  tokenizer = tokenization.FastTokenizer(vocab_file, do_lower_case=True)
  with open(text, encoding="utf-8") as f:
    lines = [line for line in f.read(2_000_000).splitlines() if line.strip()]
  ids = [i for row in tokenizer.tokenize_to_ids(lines[:4000]) for i in row]
  vocab = tokenizer.vocab
  half = (seq_length - 3) // 2
  rows, segments, pos = [], [], 0
  for _ in range(batch_size):
    a, b = ids[pos:pos + half], ids[pos + half:pos + seq_length - 3]
    pos += seq_length - 3
    rows.append([vocab["[CLS]"]] + a + [vocab["[SEP]"]] + b + [vocab["[SEP]"]])
    segments.append([0] * (len(a) + 2) + [1] * (len(b) + 1))
  return {"input_ids": np.array(rows, np.int32),
          "input_mask": np.ones([batch_size, seq_length], np.int32),
          "segment_ids": np.array(segments, np.int32)}


def child_peak_rss_gib(name: str, args: list[str]) -> float:
  """Peak resident memory (GiB) of variant ``name``: the command ``args`` run alone in a fresh
  process, which prints its own ``VmHWM`` line (``print_own_peak_rss``). A parent's
  ``ru_maxrss`` for the child would also count the pages the child shared with this (large)
  process between fork and exec."""
  child = subprocess.run(args, capture_output=True, text=True, check=False)
  lines = [line for line in child.stdout.splitlines() if line.startswith("VmHWM:")]
  if child.returncode != 0 or not lines:
    raise RuntimeError(f"{name} alone exited with status {child.returncode}: run {' '.join(args)}")
  return int(lines[-1].split()[1]) / 2**20  # kB


def print_own_peak_rss() -> None:
  """Prints this process's ``VmHWM:`` line, which ``child_peak_rss_gib`` reads."""
  with open("/proc/self/status", encoding="ascii") as f:
    print(next(line.strip() for line in f if line.startswith("VmHWM:")))


class Runner:
  """One variant: a multi-step tf.function over a repeated in-memory batch; times calls."""

  def __init__(self, name: str, loop, iterator, batch_size: int):
    self.name, self._loop, self._iterator, self._batch = name, loop, iterator, batch_size
    self.rates: list[float] = []

  def warm_up(self) -> float:
    """Two steps: the first call also builds the loop body, which the first step skips."""
    start = time.perf_counter()
    tf.nest.map_structure(lambda t: t.numpy(), self._loop(self._iterator, tf.constant(2)))
    return time.perf_counter() - start

  def timed(self, steps: int) -> None:
    start = time.perf_counter()
    out = self._loop(self._iterator, tf.constant(steps))
    tf.nest.map_structure(lambda t: t.numpy(), out)  # wait for the device
    self.rates.append(steps * self._batch / (time.perf_counter() - start))
