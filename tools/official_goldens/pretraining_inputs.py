"""Pre-training goldens' inputs: the three texts, their rows, and the injected random draws.

The official ``pretrain_helpers`` draws masked positions (``tf.random.categorical``), the
[MASK]/random/keep choice and the Gumbel noise (``tf.random.uniform``); :class:`InjectedTF`
gives that module a ``tf`` whose draws are fixed arrays (the checkout is not edited).
"""

from __future__ import annotations

import pathlib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXT = ROOT / "tests" / "data" / "gutenberg"
ACCENTED = "Étienne found the café — its façade naïve — closed."
ROW1_LEN = 62  # row 1 (two segments) is cut to this many tokens (two padding positions left)


def texts() -> list[tuple[str, str | None]]:
  """Three rows: Emma's first sentence; Sense and Sensibility's first two; an accented one."""
  emma = (TEXT / "austen-emma.txt").read_text(encoding="utf-8")
  sense = (TEXT / "austen-sense.txt").read_text(encoding="utf-8")
  paras = [" ".join(p.split()) for p in emma.split("\n\n") if p.strip()]
  emma_par = next(p for p in paras if p.startswith("Emma Woodhouse"))
  emma_first = emma_par.split("; and had lived")[0] + "."  # the first clause, as a sentence
  paras = [" ".join(p.split()) for p in sense.split("\n\n") if p.strip()]
  sense_par = next(p for p in paras if p.startswith("The family of Dashwood"))
  a, rest = sense_par.split(". ", 1)
  b = rest.split("acquaintance.")[0] + "acquaintance."
  return [(emma_first, None), (a + ".", b), (ACCENTED, None)]


def encode(tokenizer, texts, max_len: int):
  """``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]``, segment 1 after the first [SEP], padded."""
  rows, tokens = [], []
  for i, (a, b) in enumerate(texts):
    toks = ["[CLS]"] + tokenizer.tokenize(a) + ["[SEP]"]
    seg = [0] * len(toks)
    if b is not None:
      tb = tokenizer.tokenize(b)[:ROW1_LEN - len(toks) - 1] + ["[SEP]"]
      toks += tb
      seg += [1] * len(tb)
    assert len(toks) <= max_len, (i, len(toks))
    tokens.append(toks)
    rows.append((tokenizer.convert_tokens_to_ids(toks), seg))
  ids = np.zeros((len(rows), max_len), np.int32)
  mask = np.zeros_like(ids)
  segs = np.zeros_like(ids)
  for i, (row, seg) in enumerate(rows):
    ids[i, :len(row)] = row
    mask[i, :len(row)] = 1
    segs[i, :len(row)] = seg
  return ids, mask, segs, tokens


def draws(ids: np.ndarray, mask: np.ndarray, n: int, vocab):
  """Injected masking draws: distinct positions in row 0, a duplicate and a kept token in row
  1 (slot 1 repeats slot 0, slot 2 draws 0.9), a kept token in row 2 (slot 0 draws 0.95)."""
  rs = np.random.RandomState(2020)
  special = {vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"]}
  positions = np.zeros((ids.shape[0], n), np.int32)
  for r in range(ids.shape[0]):
    allowed = [p for p in range(ids.shape[1]) if mask[r, p] and int(ids[r, p]) not in special]
    positions[r] = rs.choice(allowed, size=n, replace=False)
  positions[1, 1] = positions[1, 0]
  uniform = rs.uniform(0.0, 0.8, size=(ids.shape[0], n)).astype(np.float32)
  uniform[1, 2] = 0.9
  uniform[2, 0] = 0.95
  return positions, uniform


class InjectedRandom:
  """``tf.random`` for the official pretrain_helpers: fixed draws, looked up by shape."""

  def __init__(self, tf1, categorical: np.ndarray, uniforms: dict):
    self._tf = tf1
    self._categorical = categorical
    self._uniforms = uniforms
    self.sample_logits = []

  def categorical(self, logits, num_samples, dtype=None):
    self.sample_logits.append(logits)
    assert tuple(self._categorical.shape) == (logits.shape[0], num_samples)
    return self._tf.constant(self._categorical, dtype=dtype or self._tf.int64)

  def uniform(self, shape, minval=0, maxval=1, **_):
    value = self._uniforms[tuple(int(s) for s in shape)]
    assert minval == 0 and maxval == 1
    return self._tf.constant(value, dtype=self._tf.float32)

  def __getattr__(self, name):
    return getattr(self._tf.random, name)


class InjectedTF:
  """The official module's ``tf`` with ``random`` replaced by :class:`InjectedRandom`."""

  def __init__(self, tf1, random: InjectedRandom):
    self._tf = tf1
    self.random = random

  def __getattr__(self, name):
    return getattr(self._tf, name)
