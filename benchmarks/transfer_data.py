"""benchmarks/transfer.py's data: SST-2 rows read and split into nested label budgets and
held-out rows (a fixed seed, so every run fine-tunes on the same rows), and the unlabelled
pre-training corpus (SST-2 train's sentences, wikitext-2's articles) written as text files."""

from __future__ import annotations

import argparse
import os
import random
import re
from collections.abc import Sequence

SST_SPLIT_SEED = 0  # label budgets and held-out rows: the same for every run


def read_sst(path: str) -> list[tuple[str, str]]:
  """Rows ``(text, label)`` of a GLUE SST-2 ``train.tsv`` / ``dev.tsv`` (header skipped)."""
  rows = []
  with open(path, encoding="utf-8") as f:
    header = f.readline().rstrip("\n").split("\t")
    if header[:2] != ["sentence", "label"]:
      raise ValueError(f"{path}: header {header!r}, expected sentence<TAB>label")
    for n, line in enumerate(f, 2):
      parts = line.rstrip("\n").split("\t")
      if len(parts) != 2 or parts[1] not in ("0", "1"):
        raise ValueError(f"{path}, row {n}: expected sentence<TAB>0|1, got {line[:80]!r}")
      rows.append((parts[0].strip(), parts[1]))
  return rows


def sentences_of(phrases: Sequence[str]) -> tuple[list[str], list[int]]:
  """The phrases no longer phrase contains (as a token span), and for every phrase the index of
  one such sentence that contains it. SST-2 train holds every parse-tree node of ~7k sentences,
  so pre-training on all rows would read each sentence many times over."""
  unique = sorted({tuple(p.split()) for p in phrases}, key=lambda t: (-len(t), t))
  owner: dict[tuple[str, ...], int] = {}
  sentences: list[str] = []
  for tokens in unique:
    if tokens in owner:
      continue
    index = len(sentences)
    sentences.append(" ".join(tokens))
    for i in range(len(tokens)):
      for j in range(i + 1, len(tokens) + 1):
        owner.setdefault(tokens[i:j], index)
  return sentences, [owner[tuple(p.split())] for p in phrases]


def wikitext_articles(path: str) -> list[list[str]]:
  """wikitext-2 raw text as articles (a top-level ``= Title =`` starts one), heading lines
  dropped, one paragraph per line."""
  articles: list[list[str]] = []
  with open(path, encoding="utf-8", errors="replace") as f:
    for line in f:
      text = line.strip()
      if re.fullmatch(r"= [^=].* =", text):
        articles.append([])
      elif text and not text.startswith("="):
        if not articles:
          articles.append([])
        articles[-1].append(text)
  return [a for a in articles if a]


def write_corpus(args: argparse.Namespace, sentences: list[str], corpus_dir: str) -> dict:
  """Writes the pre-training text files (blank line = document end); returns counts."""
  os.makedirs(corpus_dir, exist_ok=True)
  order = sentences[:]
  random.Random(SST_SPLIT_SEED).shuffle(order)
  if args.max_sentences:
    order = order[:args.max_sentences]
  per = args.sentences_per_doc
  with open(os.path.join(corpus_dir, "sst2_train_sentences.txt"), "w", encoding="utf-8") as f:
    for i in range(0, len(order), per):
      f.write("\n".join(order[i:i + per]) + "\n\n")
  counts = {"sst2_sentences": len(order), "sst2_words": sum(len(s.split()) for s in order)}
  wiki = os.path.join(corpus_dir, "wikitext2_test.txt")
  if args.no_wikitext:
    if os.path.exists(wiki):
      os.remove(wiki)
    return counts
  articles = wikitext_articles(os.path.join(args.data_dir, "wikitext2", "wiki.test.raw"))
  with open(wiki, "w", encoding="utf-8") as f:
    for article in articles:
      f.write("\n".join(article) + "\n\n")
  counts.update(wikitext_articles=len(articles),
                wikitext_words=sum(len(p.split()) for a in articles for p in a))
  return counts


def split_sst(train: list[tuple[str, str]], budgets: list[int], heldout_sentences: int
              ) -> tuple[dict[int, list[tuple[str, str]]], list[tuple[str, str]]]:
  """Label budgets (nested: each smaller budget is a prefix of the larger) and held-out rows.

  The held-out rows are whole sentences, and no budget row is a piece of one of them (not
  even a single word), so choosing fine-tuning hparams on them leaks no label; the dev set
  stays untouched."""
  sentences, owner = sentences_of([text for text, _ in train])
  label = {}
  for (text, y), o in zip(train, owner, strict=True):
    if sentences[o] == " ".join(text.split()):
      label[o] = y
  rng = random.Random(SST_SPLIT_SEED)
  candidates = sorted(label)
  held = sorted(rng.sample(candidates, min(heldout_sentences, len(candidates))))
  heldout = [(sentences[o], label[o]) for o in held]
  held_spans = set()
  for text, _ in heldout:
    tokens = tuple(text.split())
    held_spans.update(tokens[i:j] for i in range(len(tokens))
                      for j in range(i + 1, len(tokens) + 1))
  pool = [row for row in train if tuple(row[0].split()) not in held_spans]
  rng.shuffle(pool)
  if max(budgets) > len(pool):
    raise ValueError(f"label budget {max(budgets)} is larger than the {len(pool)} SST-2 train "
                     "rows outside the held-out sentences")
  return {b: pool[:b] for b in budgets}, heldout


def write_tsv(rows: Sequence[tuple[str, str]], path: str) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write("sentence\tlabel\n")
    f.writelines(f"{text} \t{y}\n" for text, y in rows)
