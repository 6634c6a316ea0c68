"""A labelled task whose label is a planted word: SST-2-layout sentences (tests/data), each with
one of a few words inserted at a random place, written as a ``task.json`` user task. A probe
that reads an encoder's features must find the word; one that reads nothing scores at chance."""

from __future__ import annotations

import csv
import json
import pathlib
import random

WORDS = ("violin", "glacier", "tractor")


def sentences(data_dir: pathlib.Path, count: int) -> list[str]:
  """The first ``count`` sentences of SST-2 train with at least 4 words."""
  out = []
  with open(data_dir / "glue" / "SST-2" / "train.tsv", encoding="utf-8") as f:
    next(f)
    for line in f:
      text = line.split("\t")[0]
      if len(text.split()) >= 4:
        out.append(text)
      if len(out) == count:
        return out
  raise ValueError(f"fewer than {count} sentences")


def write_planted_task(folder: pathlib.Path, data_dir: pathlib.Path, train: int = 150,
                       dev: int = 60, words: tuple[str, ...] = WORDS, seed: int = 0,
                       length: int = 5) -> pathlib.Path:
  """``folder`` (``finetuning_data/<name>``): task.json, train.csv, dev.csv; a row is the first
  ``length`` words of a sentence with one of ``words``, its label, planted among them."""
  rng = random.Random(seed)
  texts = sentences(data_dir, train + dev)
  folder.mkdir(parents=True, exist_ok=True)
  (folder / "task.json").write_text(json.dumps(
      {"type": "classification", "text_a": "sentence", "label": "label", "labels": list(words)}),
      encoding="utf-8")
  for split, rows in (("train", texts[:train]), ("dev", texts[train:])):
    with open(folder / f"{split}.csv", "w", encoding="utf-8", newline="") as f:
      writer = csv.writer(f)
      writer.writerow(["sentence", "label"])
      for text in rows:
        tokens = text.split()[:length]
        word = rng.choice(words)
        tokens.insert(rng.randrange(len(tokens) + 1), word)
        writer.writerow([" ".join(tokens), word])
  return folder
