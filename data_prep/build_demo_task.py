r"""Writes a small labelled task from a text corpus: was a pair of words swapped in this sentence?

  python data_prep/build_demo_task.py --corpus_dir demo_out/corpus \
      --output_dir demo_out/finetuning_data/swapped

Each sentence of 8 to 40 words appears once, either as written (``original``) or with two
words at random distinct positions exchanged (``swapped``), half and half. The last corpus file
(in sorted order) gives the dev split, the others the train split, so no dev sentence is seen
in training. The output is a user task (``task.json`` + ``train.csv`` + ``dev.csv``), so
``run_finetuning.py`` fine-tunes on it with ``"task_names": ["swapped"]`` and no code.
"""

from __future__ import annotations

import csv
import json
import os
import random
import re
import sys
from collections.abc import Iterator, Sequence

if __package__ in (None, ""):  # run as a script: make the repository root importable
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from electra_tf import console  # noqa: E402,I001 -- quiet must run before anything logs

if __name__ == "__main__":
  console.quiet(sys.argv)

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
LABELS = ("original", "swapped")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def define_flags() -> None:
  """Command-line flags, defined on demand so importing this module defines none."""
  flags.DEFINE_string("corpus_dir", None, "Folder of .txt files (one paragraph per line).")
  flags.DEFINE_string("output_dir", None, "Task folder to write (finetuning_data/<name>).")
  flags.DEFINE_integer("max_train", 2000, "At most this many train examples.")
  flags.DEFINE_integer("max_dev", 500, "At most this many dev examples.")
  flags.DEFINE_integer("seed", 1, "Seed of the sentence choice, the swaps and the labels.")


def sentences(path: str, min_words: int = 8, max_words: int = 40) -> Iterator[list[str]]:
  """Sentences of ``path`` as word lists, paragraphs split at sentence ends."""
  with open(path, encoding="utf-8") as f:
    for line in f:
      for sentence in _SENTENCE_END.split(line.strip()):
        words = sentence.split()
        if min_words <= len(words) <= max_words:
          yield words


def make_examples(word_lists: Sequence[list[str]], limit: int, rng: random.Random
                  ) -> list[dict[str, str]]:
  """Up to ``limit`` examples, labels alternating before a shuffle (so they are balanced)."""
  unique = list(dict.fromkeys(" ".join(w) for w in word_lists))
  rng.shuffle(unique)
  examples = []
  for i, text in enumerate(unique[:limit]):
    words = text.split()
    label = LABELS[i % 2]
    if label == "swapped":
      a, b = rng.sample(range(len(words)), 2)
      while words[a] == words[b]:  # a swap of equal words changes nothing: pick again
        a, b = rng.sample(range(len(words)), 2)
      words[a], words[b] = words[b], words[a]
    examples.append({"id": str(i), "sentence": " ".join(words), "label": label})
  rng.shuffle(examples)
  return examples


def write_task(output_dir: str, train: list[dict], dev: list[dict]) -> None:
  """``train.csv``, ``dev.csv`` (columns id, sentence, label) and ``task.json``."""
  os.makedirs(output_dir, exist_ok=True)
  for split, rows in (("train", train), ("dev", dev)):
    tmp = os.path.join(output_dir, f".{split}.csv.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as f:
      writer = csv.DictWriter(f, fieldnames=["id", "sentence", "label"])
      writer.writeheader()
      writer.writerows(rows)
    os.replace(tmp, os.path.join(output_dir, f"{split}.csv"))
  task = {"type": "classification", "text_a": "sentence", "text_b": None, "label": "label",
          "labels": list(LABELS)}
  with open(os.path.join(output_dir, "task.json"), "w", encoding="utf-8") as f:
    json.dump(task, f, indent=2)
    f.write("\n")


def build(corpus_dir: str, output_dir: str, max_train: int, max_dev: int, seed: int
          ) -> tuple[int, int]:
  """Builds the task; returns (train, dev) sizes."""
  files = sorted(os.path.join(corpus_dir, n) for n in os.listdir(corpus_dir) if n.endswith(".txt"))
  if len(files) < 2:
    raise ValueError(f"{corpus_dir} needs at least two .txt files (one becomes the dev split)")
  rng = random.Random(seed)
  train = make_examples([w for p in files[:-1] for w in sentences(p)], max_train, rng)
  dev = make_examples(list(sentences(files[-1])), max_dev, rng)
  if not train or not dev:
    raise ValueError(f"{corpus_dir}: no sentences of 8 to 40 words for the train or dev split")
  write_task(output_dir, train, dev)
  return len(train), len(dev)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  if not FLAGS.corpus_dir or not FLAGS.output_dir:
    raise app.UsageError("--corpus_dir and --output_dir are required")
  n_train, n_dev = build(FLAGS.corpus_dir, FLAGS.output_dir, FLAGS.max_train, FLAGS.max_dev,
                         FLAGS.seed)
  console.log(f"Wrote {n_train} train and {n_dev} dev examples to {FLAGS.output_dir}")


if __name__ == "__main__":
  define_flags()
  console.run(main, "build_demo_task")
