r"""Writes a small labelled task from the demo corpus: which package does a docstring sentence
come from?

  python data_prep/build_demo_task.py --corpus_dir demo_out/corpus \
      --index_file demo_out/corpus_modules.tsv --output_dir demo_out/finetuning_data/topic

The corpus is ``data_prep/build_demo_corpus.py``'s (one document per standard-library module)
and ``--index_file`` its list of each document's module. A sentence (8 to 40 words) is labelled
with the top-level name of its module (``email.charset`` -> ``email``); the ``--num_labels``
names with the most distinct sentences become the labels (Python 3.11: asyncio, email, http,
urllib, doctest, typing). Each distinct sentence (case and spacing ignored) appears once in the
whole task, so no dev sentence is seen in training; a sentence found under two labels is
dropped. Every label gets the same number of train (``max_train / num_labels``) and dev
(``max_dev / num_labels``) sentences, fewer when its smallest label has too few. The output is
a user task (``task.json`` + ``train.csv`` + ``dev.csv``), so ``run_finetuning.py`` fine-tunes
on it with ``"task_names": ["topic"]`` and no code.
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

from electra_tf import console, early_interrupt  # noqa: E402,I001 -- before anything logs

if __name__ == "__main__":
  early_interrupt.install()
  console.quiet_logs(sys.argv)
  console.use_tf_keras()

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def define_flags() -> None:
  """Command-line flags, defined on demand so importing this module defines none."""
  flags.DEFINE_string("corpus_dir", None, "Folder of the demo corpus .txt files.")
  flags.DEFINE_string("index_file", None, "build_demo_corpus.py's --index_file (module of each "
                      "document).")
  flags.DEFINE_string("output_dir", None, "Task folder to write (finetuning_data/<name>).")
  flags.DEFINE_integer("num_labels", 6, "Labels: the packages with the most sentences.")
  flags.DEFINE_integer("max_train", 384, "At most this many train examples (all labels).")
  flags.DEFINE_integer("max_dev", 384, "At most this many dev examples (all labels).")
  flags.DEFINE_integer("seed", 1, "Seed of the sentence choice and order.")


def sentences(paragraph: str, min_words: int = 8, max_words: int = 40) -> Iterator[str]:
  """Sentences of one paragraph line with ``min_words`` to ``max_words`` words."""
  for sentence in _SENTENCE_END.split(paragraph.strip()):
    if min_words <= len(sentence.split()) <= max_words:
      yield " ".join(sentence.split())


def read_documents(corpus_dir: str, index_file: str) -> list[tuple[str, list[str]]]:
  """(module, paragraphs) of every document ``index_file`` names, in its order."""
  documents: dict[str, list[list[str]]] = {}
  out = []
  with open(index_file, encoding="utf-8") as f:
    for row, line in enumerate(f, 1):
      fields = line.rstrip("\n").split("\t")
      if len(fields) != 3 or not fields[1].isdigit():
        raise ValueError(f"{index_file}, line {row}: expected file<TAB>document<TAB>module, "
                         f"got {line.strip()!r}")
      name, position, module = fields[0], int(fields[1]), fields[2]
      if name not in documents:
        path = os.path.join(corpus_dir, name)
        if not os.path.isfile(path):
          raise ValueError(f"{index_file}, line {row}: {path} does not exist")
        with open(path, encoding="utf-8") as g:
          documents[name] = [d.splitlines() for d in g.read().split("\n\n") if d.strip()]
      if position >= len(documents[name]):
        raise ValueError(f"{index_file}, line {row}: {name} has {len(documents[name])} "
                         f"documents, not a document {position} (was the corpus rebuilt "
                         "without its index?)")
      out.append((module, documents[name][position]))
  return out


def sentences_by_label(documents: Sequence[tuple[str, list[str]]]) -> dict[str, list[str]]:
  """Distinct sentences per top-level package, each sentence under one package only."""
  first: dict[str, tuple[str, str]] = {}  # normalised -> (label, sentence as first written)
  ambiguous = set()
  for module, paragraphs in documents:
    label = module.split(".")[0]
    for paragraph in paragraphs:
      for sentence in sentences(paragraph):
        key = sentence.lower()
        if key in first and first[key][0] != label:
          ambiguous.add(key)
        first.setdefault(key, (label, sentence))
  out: dict[str, list[str]] = {}
  for key, (label, sentence) in first.items():
    if key not in ambiguous:
      out.setdefault(label, []).append(sentence)
  return out


def split_task(by_label: dict[str, list[str]], num_labels: int, max_train: int, max_dev: int,
               rng: random.Random) -> tuple[list[str], list[dict], list[dict]]:
  """(labels, train rows, dev rows): the ``num_labels`` largest labels, balanced, shuffled."""
  ranked = sorted(by_label, key=lambda label: (-len(by_label[label]), label))
  labels = sorted(ranked[:num_labels])
  if len(labels) < 2:
    raise ValueError(f"the corpus has sentences of {len(labels)} package(s); a task needs 2")
  n_train, n_dev = max_train // len(labels), max_dev // len(labels)
  smallest = min(len(by_label[label]) for label in labels)
  if n_train + n_dev > smallest:  # shrink both, keeping their ratio
    n_train = smallest * n_train // (n_train + n_dev)
    n_dev = smallest - n_train
  if n_train < 1 or n_dev < 1:
    raise ValueError(f"label {min(labels, key=lambda lb: len(by_label[lb]))} has only "
                     f"{smallest} sentences: too few for a train and a dev split")
  train, dev = [], []
  for label in labels:
    chosen = rng.sample(sorted(by_label[label]), n_train + n_dev)
    dev += [{"sentence": s, "label": label} for s in chosen[:n_dev]]
    train += [{"sentence": s, "label": label} for s in chosen[n_dev:]]
  for rows in (train, dev):
    rng.shuffle(rows)
    for i, row in enumerate(rows):
      row["id"] = str(i)
  return labels, train, dev


def write_task(output_dir: str, labels: Sequence[str], train: list[dict], dev: list[dict]
               ) -> None:
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
          "labels": list(labels)}
  with open(os.path.join(output_dir, "task.json"), "w", encoding="utf-8") as f:
    json.dump(task, f, indent=2)
    f.write("\n")


def build(corpus_dir: str, index_file: str, output_dir: str, num_labels: int, max_train: int,
          max_dev: int, seed: int) -> tuple[list[str], int, int]:
  """Builds the task; returns (labels, train size, dev size)."""
  by_label = sentences_by_label(read_documents(corpus_dir, index_file))
  labels, train, dev = split_task(by_label, num_labels, max_train, max_dev, random.Random(seed))
  write_task(output_dir, labels, train, dev)
  return labels, len(train), len(dev)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  if not FLAGS.corpus_dir or not FLAGS.index_file or not FLAGS.output_dir:
    raise app.UsageError("--corpus_dir, --index_file and --output_dir are required")
  labels, n_train, n_dev = build(FLAGS.corpus_dir, FLAGS.index_file, FLAGS.output_dir,
                                 FLAGS.num_labels, FLAGS.max_train, FLAGS.max_dev, FLAGS.seed)
  console.log(f"Wrote {n_train} train and {n_dev} dev examples ({len(labels)} labels: "
              f"{', '.join(labels)}) to {FLAGS.output_dir}")


if __name__ == "__main__":
  define_flags()
  console.run(main, "build_demo_task")
