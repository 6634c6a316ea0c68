"""The goldens' small WordPiece vocabulary, made from the repository's public-domain text.

Layout as in BERT's uncased vocabulary, so special ids are the same as in the released models:
``[PAD]`` 0, ``[unused0..98]`` 1-99, ``[UNK]`` 100, ``[CLS]`` 101, ``[SEP]`` 102, ``[MASK]``
103; then every character of the text and its ``##`` continuation, a few common suffixes, and
the most frequent words (split by the official ``BasicTokenizer``, lower-cased).
"""

from __future__ import annotations

import collections
import pathlib

from tools.official_goldens import official

SPECIALS = ["[PAD]", *[f"[unused{i}]" for i in range(99)], "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SUFFIXES = ["##es", "##ed", "##ing", "##ly", "##er", "##est", "##ion", "##ness", "##ment", "##ful"]
SOURCES = ("austen-emma.txt", "austen-persuasion.txt", "austen-sense.txt", "blake-poems.txt")
N_WORDS = 800


def words(text_dir: pathlib.Path) -> collections.Counter:
  """Word counts of the source texts, split as the official tokenizer splits before WordPiece."""
  tokenization = official.module("model.tokenization")
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  counts: collections.Counter = collections.Counter()
  for name in SOURCES:
    text = (text_dir / name).read_text(encoding="latin-1")
    counts.update(basic.tokenize(text))
  return counts


def build(text_dir: pathlib.Path) -> list[str]:
  """The vocabulary's lines, in id order (deterministic: ties broken by the word)."""
  counts = words(text_dir)
  chars = sorted({c for w in counts for c in w})
  pieces = list(SPECIALS) + chars + ["##" + c for c in chars] + SUFFIXES
  seen = set(pieces)
  if len(seen) != len(pieces):  # a duplicate line would leave an id that no text produces
    raise ValueError("a WordPiece is listed twice")
  for word, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
    if len(pieces) >= len(SPECIALS) + 2 * len(chars) + len(SUFFIXES) + N_WORDS:
      break
    if word not in seen:
      pieces.append(word)
      seen.add(word)
  return pieces


def write(text_dir: pathlib.Path, out_file: pathlib.Path) -> None:
  out_file.parent.mkdir(parents=True, exist_ok=True)
  out_file.write_text("".join(p + "\n" for p in build(text_dir)), encoding="utf-8")
