"""Linear probe: how much a sentence label can be read off an encoder's frozen features.

A check that takes seconds instead of fine-tuning runs: for random initialisation and each
given pre-trained model (our model directories or official TF1 checkpoints, same shape and
vocabulary), it encodes the first ``--train_rows`` rows of a TSV and the dev TSV, takes the
[CLS] vector and the mean over real tokens at the embedding output and after every layer, fits a
ridge-regression classifier on the train features and prints its dev accuracy. Pre-training
that helps a task should make its features probe better than random ones.

  python tools/probe_features.py \
    --model_dirs runs/transfer/models/electra,runs/transfer/models/mlm \
    --train_tsv $DATA_DIR/glue/SST-2/train.tsv --dev_tsv $DATA_DIR/glue/SST-2/dev.tsv
"""

from __future__ import annotations

import csv
import itertools
import os
import sys
from collections.abc import Sequence

from electra_tf import console  # noqa: I001 -- console.quiet must run before TensorFlow loads

if __name__ == "__main__":
  console.quiet(sys.argv)
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

from electra_tf import checkpoints, names, tokenization
from electra_tf.config import PretrainingConfig, get_bert_config  # noqa: E402
from electra_tf.modeling.encoder import Transformer  # noqa: E402
from electra_tf.reading import model_dir, model_source  # noqa: E402
from electra_tf.training.runtime import set_seed  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("model_dirs", [], "Pre-trained models (model dirs or checkpoints), one shape.")
flags.DEFINE_string("train_tsv", None, "TSV (or .csv) with a header naming --text_column, "
                    "--label_column.")
flags.DEFINE_string("dev_tsv", None, "Dev TSV, same columns.")
flags.DEFINE_string("vocab_file", None, "Default: vocab.txt beside the first model.")
flags.DEFINE_string("text_column", "sentence", "Column holding the text.")
flags.DEFINE_string("label_column", "label", "Column holding the label.")
flags.DEFINE_integer("train_rows", 500, "Rows of --train_tsv the probe is fitted on.")
flags.DEFINE_integer("max_seq_length", 64, "Tokens per sentence, [CLS] and [SEP] included.")
flags.DEFINE_float("ridge", 100.0, "L2 penalty of the probe (features are standardised).")
flags.DEFINE_integer("seed", 1, "Seed of the random-init encoder.")
flags.DEFINE_bool("bag_of_words", False, "Also print the accuracy of a ridge classifier on which "
                  "WordPieces a sentence holds: what the labelled rows teach without any encoder.")


def read_rows(path: str, text_column: str, label_column: str,
              limit: int | None = None) -> tuple[list[str], list[str]]:
  """(texts, labels) of a TSV (or, by its extension, a .csv: a user task's files) with a header;
  a missing column is one line naming the file."""
  with open(path, encoding="utf-8", newline="") as f:
    reader = (csv.DictReader(f) if path.endswith(".csv")
              else csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    for column in (text_column, label_column):
      if column not in (reader.fieldnames or []):
        raise ValueError(f"{path}: no column {column!r} (columns: {reader.fieldnames})")
    rows = list(itertools.islice(reader, limit))
  return [r[text_column] for r in rows], [r[label_column] for r in rows]


def encode(tokenizer: tokenization.FullTokenizer, texts: list[str],
           max_seq_length: int) -> tuple[np.ndarray, np.ndarray]:
  """input_ids, input_mask: int32 [N, T] as the fine-tuning featurizer writes a single text."""
  ids = np.zeros((len(texts), max_seq_length), np.int32)
  for i, text in enumerate(texts):
    tokens = ["[CLS]"] + tokenizer.tokenize(text)[:max_seq_length - 2] + ["[SEP]"]
    ids[i, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
  return ids, (ids > 0).astype(np.int32)


def features(encoder: Transformer, ids: np.ndarray, mask: np.ndarray,
             batch: int = 128) -> dict[str, np.ndarray]:
  """'<layer>_cls' / '<layer>_mean' -> [N, H] for the embedding output and every layer."""
  parts: dict[str, list[np.ndarray]] = {}
  for start in range(0, len(ids), batch):
    i, m = ids[start:start + batch], mask[start:start + batch]
    out = encoder(tf.constant(i), tf.constant(m), tf.zeros_like(i), training=False)
    layers = [("emb", out["embedding_output"])] + [
        (f"layer{n}", x) for n, x in enumerate(tf.unstack(out["all_layer_outputs"]))]
    weights = m[..., None].astype(np.float32)
    for name, x in layers:
      x = x.numpy()
      parts.setdefault(f"{name}_cls", []).append(x[:, 0])
      parts.setdefault(f"{name}_mean", []).append((x * weights).sum(1) / weights.sum(1))
  return {k: np.concatenate(v) for k, v in parts.items()}


def ridge_accuracy(a: np.ndarray, train_y: np.ndarray, b: np.ndarray, dev_y: np.ndarray,
                   ridge: float) -> float:
  """Dev accuracy of a one-vs-all ridge regression fitted on ``a`` [N, D], scored on ``b``;
  solved over D (primal) or, when there are fewer rows than features, over N (dual)."""
  targets = np.eye(int(max(train_y.max(), dev_y.max())) + 1)[train_y]
  if len(a) < a.shape[1]:
    w = a.T @ np.linalg.solve(a @ a.T + ridge * np.eye(len(a)), targets)
  else:
    w = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ targets)
  return float(((b @ w).argmax(1) == dev_y).mean())


def probe_accuracy(train_x: np.ndarray, train_y: np.ndarray, dev_x: np.ndarray,
                   dev_y: np.ndarray, ridge: float) -> float:
  """Dev accuracy of a one-vs-all ridge regression on standardised features."""
  mean, std = train_x.mean(0), train_x.std(0) + 1e-6
  return ridge_accuracy((train_x - mean) / std, train_y, (dev_x - mean) / std, dev_y, ridge)


def bag_of_words_accuracy(train_ids: np.ndarray, train_y: np.ndarray, dev_ids: np.ndarray,
                          dev_y: np.ndarray, vocab_size: int, ridge: float = 1.0,
                          ignore_ids: Sequence[int] = (0, 1, 2, 3, 4)) -> float:
  """Dev accuracy of a one-vs-all ridge regression on binary WordPiece presence (ids [N, T]);
  ``ignore_ids``: the special tokens' ids (default: a ``learn_vocab.py`` vocabulary's)."""
  def presence(ids):
    x = np.zeros((len(ids), vocab_size), np.float32)
    np.put_along_axis(x, ids, 1.0, axis=1)
    x[:, list(ignore_ids)] = 0.0
    return x
  return ridge_accuracy(presence(train_ids), train_y, presence(dev_ids), dev_y, ridge)


def load_encoder(encoder: Transformer, path: str) -> None:
  """Discriminator weights from our pre-training checkpoints or an official TF1 checkpoint."""
  prefix = checkpoints.resolve_checkpoint(path)
  if checkpoints.is_tf1_checkpoint(prefix):
    checkpoints.load_tf1_checkpoint(encoder.variables, prefix, allow_unused=True)
  else:
    root = tf.train.Checkpoint(model=tf.train.Checkpoint(discriminator=encoder))
    root.read(prefix).assert_existing_objects_matched().expect_partial()


def main(argv: list[str]) -> None:
  del argv
  if not FLAGS.model_dirs or not FLAGS.train_tsv or not FLAGS.dev_tsv:
    raise app.UsageError("--model_dirs, --train_tsv and --dev_tsv are required")
  stored, _ = model_dir.model_hparams(FLAGS.model_dirs[0])
  config = PretrainingConfig("probe", "", **(stored or {}))
  vocab = FLAGS.vocab_file or model_source.vocab_beside(FLAGS.model_dirs[0])
  if vocab is None:
    raise ValueError(f"no vocab.txt beside {FLAGS.model_dirs[0]}: give --vocab_file")
  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=config.do_lower_case)
  texts, labels = read_rows(FLAGS.train_tsv, FLAGS.text_column, FLAGS.label_column,
                            FLAGS.train_rows)
  dev_texts, dev_labels = read_rows(FLAGS.dev_tsv, FLAGS.text_column, FLAGS.label_column)
  classes = sorted(set(labels) | set(dev_labels))
  train_y = np.array([classes.index(x) for x in labels])
  dev_y = np.array([classes.index(x) for x in dev_labels])
  train_in = encode(tokenizer, texts, FLAGS.max_seq_length)
  dev_in = encode(tokenizer, dev_texts, FLAGS.max_seq_length)
  print(f"probe: {len(texts)} train / {len(dev_texts)} dev rows, {len(classes)} classes, "
        f"majority {np.bincount(dev_y).max() / len(dev_y):.3f}")
  if FLAGS.bag_of_words:
    specials = [tokenizer.vocab[t] for t in tokenization.SPECIAL_TOKENS if t in tokenizer.vocab]
    bow = bag_of_words_accuracy(train_in[0], train_y, dev_in[0], dev_y, len(tokenizer.vocab),
                                ignore_ids=specials)
    print(f"bag-of-words: {bow:.3f}")
  for source in ["random"] + FLAGS.model_dirs:
    set_seed(FLAGS.seed)  # python, numpy and TF: tf_keras initializers draw from all three
    encoder = Transformer(get_bert_config(config), config.embedding_size,
                          scope=names.DISCRIMINATOR)
    encoder.build(None)
    if source != "random":
      load_encoder(encoder, source)
    train_f, dev_f = features(encoder, *train_in), features(encoder, *dev_in)
    scores = {k: probe_accuracy(train_f[k], train_y, dev_f[k], dev_y, FLAGS.ridge)
              for k in train_f}
    print(f"{source}: " + "  ".join(f"{k} {v:.3f}" for k, v in scores.items()))


if __name__ == "__main__":
  console.run(main, "probe_features")
