r"""Learns a WordPiece vocabulary from a corpus directory (tensorflow-text's BERT vocab learner).

For pre-training on your own text when no vocabulary exists yet (the demo uses it, so it needs
no download). The special tokens come first: ``[PAD]`` 0, ``[UNK]`` 1, ``[CLS]`` 2, ``[SEP]`` 3,
``[MASK]`` 4, as the masking and data builders look them up by name.

  python data_prep/learn_vocab.py --corpus_dir corpus/ --vocab_file vocab.txt --vocab_size 8000

``--vocab_size`` is an upper bound: words seen fewer than ``--min_count`` times (default 10, the
learner's own) are always split into pieces, so a small corpus gets a small vocabulary (SST-2's
6,885 train sentences: 2,349 tokens, "follow" as ``f ##ollow``; with ``--min_count 3``: 6,174).
"""

from __future__ import annotations

import os
import sys

from electra_tf import atomic_io, console, early_interrupt  # noqa: E402,I001 -- before TensorFlow loads

if __name__ == "__main__":
  console.require_tensorflow("learn_vocab.py")
  early_interrupt.install()
  console.quiet_logs(sys.argv)
  console.use_tf_keras()

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Command-line flags, defined on demand so importing this module defines none."""
  flags.DEFINE_string("corpus_dir", None, "Directory of UTF-8 .txt files.")
  flags.DEFINE_string("vocab_file", None, "Where to write the vocabulary (one token per line).")
  flags.DEFINE_integer("vocab_size", 8000, "Target vocabulary size (an upper bound).")
  flags.DEFINE_bool("do_lower_case", True, "Lower-case (and strip accents) before learning.")
  flags.DEFINE_integer("min_count", 10, "Words seen fewer times are split into pieces "
                       "(tensorflow-text's lower_thresh); lower it for a small corpus.")

RESERVED = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def learn_vocab(corpus_dir: str, vocab_file: str, vocab_size: int = 8000,
                do_lower_case: bool = True, min_count: int = 10) -> int:
  """Writes ``vocab_file`` learned from every ``*.txt`` under ``corpus_dir``; returns its size."""
  import tensorflow as tf
  from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as learner

  if min_count < 1:
    raise ValueError(f"--min_count must be at least 1, got {min_count}")
  if not os.path.isdir(corpus_dir):
    raise FileNotFoundError(f"corpus directory not found: {corpus_dir}")
  files = sorted(os.path.join(corpus_dir, f) for f in os.listdir(corpus_dir) if f.endswith(".txt"))
  lines = []
  for path in files:
    with open(path, encoding="utf-8", errors="replace") as f:
      lines.extend(line.strip() for line in f if line.strip())
  if not lines:
    raise ValueError(f"no text found in {corpus_dir} (*.txt files)")
  dataset = tf.data.Dataset.from_tensor_slices(lines).batch(1024)
  vocab = learner.bert_vocab_from_dataset(
      dataset, vocab_size=vocab_size, reserved_tokens=list(RESERVED),
      bert_tokenizer_params={"lower_case": do_lower_case}, learn_params={"lower_thresh": min_count})
  folder = os.path.dirname(os.path.abspath(vocab_file))
  try:
    os.makedirs(folder, exist_ok=True)
  except OSError as e:
    raise ValueError(f"vocab_file folder {folder} cannot be created: {e.strerror}") from None
  atomic_io.write_text(vocab_file, "\n".join(vocab) + "\n")  # fsynced, then renamed
  return len(vocab)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  if not FLAGS.corpus_dir or not FLAGS.vocab_file:
    raise app.UsageError("--corpus_dir and --vocab_file are required")
  size = learn_vocab(FLAGS.corpus_dir, FLAGS.vocab_file, FLAGS.vocab_size, FLAGS.do_lower_case,
                     FLAGS.min_count)
  console.log(f"vocabulary of {size} tokens -> {FLAGS.vocab_file}")


if __name__ == "__main__":
  define_flags()
  console.run(main, "learn_vocab.py")
