"""Small real pre-training data folders, shared by the tests."""

from __future__ import annotations

import pathlib
import shutil
import string

from data_prep import build_pretraining_dataset as bpd


def build_data_dir(root: pathlib.Path, vocab_file: str,
                   texts: dict[str, tuple[pathlib.Path, int]], num_out_files: int = 1,
                   max_seq_length: int = 32) -> pathlib.Path:
  """`root` in the official data_dir layout: vocab.txt + pretrain_tfrecords/, built from the
  first `chars` characters of each `texts[name] = (source file, chars)`."""
  corpus = root / "corpus"
  corpus.mkdir()
  for name, (src, chars) in texts.items():
    with open(src, encoding="utf-8") as f:
      (corpus / name).write_text(f.read(chars), encoding="utf-8")
  shutil.copy(vocab_file, root / "vocab.txt")
  bpd.build(bpd.BuildArgs(corpus_dir=str(corpus), vocab_file=vocab_file,
                          output_dir=str(root / "pretrain_tfrecords"),
                          max_seq_length=max_seq_length, num_out_files=num_out_files, seed=1))
  return root


def vocab_size(vocab_file: str | pathlib.Path) -> int:
  """WordPieces (lines) of a vocab.txt: the vocab_size hparam a model of that vocabulary needs."""
  with open(vocab_file, encoding="utf-8") as f:
    return sum(1 for _ in f)


def emma_and_wiki(data_dir: pathlib.Path,
                  chars: int = 40000) -> dict[str, tuple[pathlib.Path, int]]:
  """The first `chars` characters of Emma and of wikitext-2's test split."""
  return {"emma.txt": (data_dir / "gutenberg" / "austen-emma.txt", chars),
          "wiki.txt": (data_dir / "wikitext2" / "wiki.test.raw", chars)}


# A character vocabulary keeps the generator's softmax, the embeddings and the saves small.
CHARS = string.ascii_lowercase + string.digits + string.punctuation
CHAR_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *CHARS, *("##" + c for c in CHARS)]


def char_vocab_data_dir(root: pathlib.Path, corpus_dir: pathlib.Path) -> pathlib.Path:
  """`root` in the official data_dir layout: the character vocab.txt + 2 TFRecord shards of
  length 32 built from `corpus_dir`."""
  (root / "vocab.txt").write_text("".join(t + "\n" for t in CHAR_VOCAB), encoding="utf-8")
  bpd.build(bpd.BuildArgs(corpus_dir=str(corpus_dir), vocab_file=str(root / "vocab.txt"),
                          output_dir=str(root / "pretrain_tfrecords"), max_seq_length=32,
                          num_out_files=2, seed=1))
  return root
