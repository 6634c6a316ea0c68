"""The embedded demo corpus: real English from the standard library's docstrings, its index of
each document's module, and the demo's labelled task built from both."""

import csv
import importlib
import json
from collections import Counter

import pytest

from data_prep import build_demo_task
from data_prep.build_demo_corpus import build_demo_corpus, module_document


def test_demo_corpus_has_documents_and_paragraphs(tmp_path):
  stats = build_demo_corpus(str(tmp_path), num_files=3, max_modules=60)
  assert stats["modules"] >= 30 and stats["words"] > 10_000
  files = sorted(tmp_path.glob("stdlib_docs_*.txt"))
  assert len(files) == 3
  text = files[0].read_text(encoding="utf-8")
  documents = [d for d in text.split("\n\n") if d.strip()]
  assert len(documents) >= 10  # blank lines separate one module's document from the next
  assert all(len(line.split()) >= 4 for d in documents for line in d.splitlines())


def _corpus_with_index(tmp_path, max_modules=60):
  corpus, index = tmp_path / "corpus", tmp_path / "corpus_modules.tsv"
  build_demo_corpus(str(corpus), num_files=3, max_modules=max_modules, index_file=str(index))
  return corpus, index


def test_index_names_the_module_of_every_document(tmp_path):
  corpus, index = _corpus_with_index(tmp_path)
  rows = [line.split("\t") for line in index.read_text(encoding="utf-8").splitlines()]
  per_file = Counter(name for name, _, _ in rows)
  for name, count in per_file.items():
    text = (corpus / name).read_text(encoding="utf-8")
    assert count == len([d for d in text.split("\n\n") if d.strip()])
  documents = build_demo_task.read_documents(str(corpus), str(index))
  module = importlib.import_module(documents[5][0])  # the paragraphs are that module's
  assert documents[5][1] == module_document(module)
  with pytest.raises(ValueError, match="inside output_dir"):
    build_demo_corpus(str(corpus), num_files=3, max_modules=5,
                      index_file=str(corpus / "index.tsv"))


def test_topic_task_is_balanced_labelled_by_package_and_without_leaks(tmp_path):
  corpus, index = _corpus_with_index(tmp_path)
  out = tmp_path / "topic"
  labels, n_train, n_dev = build_demo_task.build(str(corpus), str(index), str(out), 4, 80, 40,
                                                 seed=1)
  by_label = build_demo_task.sentences_by_label(
      build_demo_task.read_documents(str(corpus), str(index)))
  ranked = sorted(by_label, key=lambda label: -len(by_label[label]))
  assert labels == sorted(labels) and set(labels) == set(ranked[:4])
  assert json.loads((out / "task.json").read_text())["labels"] == labels
  train = list(csv.DictReader(open(out / "train.csv", encoding="utf-8")))
  dev = list(csv.DictReader(open(out / "dev.csv", encoding="utf-8")))
  assert (len(train), len(dev)) == (n_train, n_dev) == (80, 40)
  assert Counter(r["label"] for r in train) == {label: 20 for label in labels}
  assert Counter(r["label"] for r in dev) == {label: 10 for label in labels}
  assert sorted(int(r["id"]) for r in train) == list(range(80))
  keys = [" ".join(r["sentence"].lower().split()) for r in train + dev]
  assert len(set(keys)) == len(keys)  # no sentence twice, none in both splits
  texts = {}  # each sentence is in a document of a module of its label's package
  for module, paragraphs in build_demo_task.read_documents(str(corpus), str(index)):
    texts.setdefault(module.split(".")[0], []).append(" ".join(" ".join(paragraphs).split()))
  for row in train + dev:
    assert any(row["sentence"] in text for text in texts[row["label"]]), row
    assert 8 <= len(row["sentence"].split()) <= 40


def test_topic_task_errors_name_the_index_line(tmp_path):
  corpus, index = _corpus_with_index(tmp_path, max_modules=10)
  lines = index.read_text(encoding="utf-8").splitlines()
  name = lines[0].split("\t")[0]
  index.write_text("\n".join(lines + [f"{name}\t999\tzipfile"]) + "\n", encoding="utf-8")
  with pytest.raises(ValueError, match=rf"line {len(lines) + 1}: {name} has \d+ documents"):
    build_demo_task.build(str(corpus), str(index), str(tmp_path / "t"), 6, 60, 30, seed=1)
  index.write_text("stdlib_docs_0.txt 0 abc\n", encoding="utf-8")
  with pytest.raises(ValueError, match="line 1: expected file<TAB>document<TAB>module"):
    build_demo_task.read_documents(str(corpus), str(index))
