"""WordPiece vocabulary learning for corpora without a vocabulary (the demo's path)."""

import collections
import re

import pytest

from data_prep.learn_vocab import RESERVED, learn_vocab
from electra_tf.tokenization import FullTokenizer


def test_learned_vocab_covers_the_corpus(tmp_path, data_dir):
  text = (data_dir / "gutenberg" / "austen-persuasion.txt").read_text(encoding="utf-8")
  corpus = tmp_path / "corpus"
  corpus.mkdir()
  (corpus / "a.txt").write_text("\n".join(text.splitlines()[:400]), encoding="utf-8")
  vocab_file = tmp_path / "vocab.txt"
  size = learn_vocab(str(corpus), str(vocab_file), vocab_size=2000)
  tokens = vocab_file.read_text(encoding="utf-8").splitlines()
  assert len(tokens) == size and tuple(tokens[:5]) == RESERVED
  tokenizer = FullTokenizer(str(vocab_file))
  ids = [i for line in text.splitlines()[:400] for i in
         tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line))]
  assert ids and ids.count(tokens.index("[UNK]")) / len(ids) < 0.01


def test_min_count_keeps_rarer_words_whole(tmp_path, data_dir):
  """A small corpus: words seen 3-9 times are split into pieces by default (tensorflow-text's
  lower_thresh 10) and kept whole with ``min_count=3``."""
  lines = (data_dir / "gutenberg" / "austen-persuasion.txt").read_text(
      encoding="utf-8").splitlines()[:400]
  corpus = tmp_path / "corpus"
  corpus.mkdir()
  (corpus / "a.txt").write_text("\n".join(lines), encoding="utf-8")
  counts = collections.Counter(w for line in lines for w in re.findall(r"[a-z]+", line.lower()))
  mid = [w for w, n in counts.items() if 3 <= n < 10 and len(w) > 3]
  whole = {}
  for min_count in (10, 3):
    vocab_file = tmp_path / f"vocab{min_count}.txt"
    learn_vocab(str(corpus), str(vocab_file), vocab_size=8000, min_count=min_count)
    tokens = set(vocab_file.read_text(encoding="utf-8").splitlines())
    whole[min_count] = sum(w in tokens for w in mid) / len(mid)
  assert len(mid) > 50
  assert whole[3] > 0.95 and whole[10] < 0.5, whole
  with pytest.raises(ValueError, match="--min_count must be at least 1, got 0"):
    learn_vocab(str(corpus), str(tmp_path / "v.txt"), min_count=0)


def test_vocabulary_is_fsynced_before_its_rename(tmp_path, monkeypatch):
  """The vocabulary's content reaches the disk under its temporary name, then its folder."""
  import os

  from electra_tf import atomic_io

  corpus = tmp_path / "corpus"
  corpus.mkdir()
  (corpus / "a.txt").write_text("the cat sat on the mat\n" * 20, encoding="utf-8")
  vocab_file = tmp_path / "out" / "vocab.txt"
  synced = []
  real_file, real_dir = atomic_io.fsync_file, atomic_io.fsync_dir
  monkeypatch.setattr(atomic_io, "fsync_file", lambda p: (
      synced.append(("file", os.path.basename(p), os.path.exists(vocab_file))), real_file(p)))
  monkeypatch.setattr(atomic_io, "fsync_dir", lambda p: (
      synced.append(("dir", p, os.path.exists(vocab_file))), real_dir(p)))
  learn_vocab(str(corpus), str(vocab_file), vocab_size=100, min_count=1)
  assert [kind for kind, _, _ in synced] == ["file", "dir"]
  assert synced[0][1].startswith(".vocab.txt.tmp-") and synced[0][2] is False  # before rename
  assert synced[1][1:] == (str(tmp_path / "out"), True)  # the folder, after the rename
