"""Linear probe: how much a sentence label can be read off an encoder's frozen features.

A check that takes seconds instead of fine-tuning runs: for random initialisation and each
given pre-trained model (our model directories or official TF1 checkpoints, same shape and
vocabulary), it encodes the first ``--train_rows`` rows of a TSV and the dev TSV (or of a
fine-tuning task: ``--data_dir`` and ``--task``), takes the [CLS] vector and the mean over
real tokens at the embedding output and after every layer, fits a ridge-regression read-out on
the train features and prints its dev accuracy (or the task's metric). Pre-training that helps
a task should make its features probe better than random ones. The method is the library's
(``electra_tf/probing/``), which pre-training runs use with ``--probe_task``.

  python tools/probe_features.py \
    --model_dirs runs/transfer/models/electra,runs/transfer/models/mlm \
    --train_tsv $DATA_DIR/glue/SST-2/train.tsv --dev_tsv $DATA_DIR/glue/SST-2/dev.tsv
"""

from __future__ import annotations

import sys

from electra_tf import console, early_interrupt  # noqa: I001 -- before TensorFlow loads

if __name__ == "__main__":
  early_interrupt.install()
  console.quiet_logs(sys.argv)
console.use_tf_keras()

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from electra_tf import tokenization  # noqa: E402
from electra_tf.config import PretrainingConfig  # noqa: E402
from electra_tf.model_sizes import get_bert_config  # noqa: E402
from electra_tf.probing import probe, ridge  # noqa: E402
from electra_tf.reading import checkpoint_hparams, model_source  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("model_dirs", [], "Pre-trained models (model dirs or checkpoints), one shape.")
flags.DEFINE_string("train_tsv", None, "TSV (or .csv) with a header naming --text_column, "
                    "--label_column.")
flags.DEFINE_string("dev_tsv", None, "Dev TSV, same columns.")
flags.DEFINE_string("data_dir", None, "Instead of the TSVs: a fine-tuning data folder holding "
                    "finetuning_data/<--task>/ (a GLUE task or a task.json folder).")
flags.DEFINE_string("task", None, "The fine-tuning task read from --data_dir.")
flags.DEFINE_string("vocab_file", None, "Default: vocab.txt beside the first model.")
flags.DEFINE_string("text_column", "sentence", "Column holding the text.")
flags.DEFINE_string("label_column", "label", "Column holding the label.")
flags.DEFINE_integer("train_rows", 500, "Rows of --train_tsv the probe is fitted on.")
flags.DEFINE_integer("max_seq_length", 64, "Tokens per sentence, [CLS] and [SEP] included.")
flags.DEFINE_string("ridge", "100", "L2 penalty of the probe (features are standardised), or "
                    "'auto': chosen on a fifth of the train rows.")
flags.DEFINE_integer("seed", 1, "Seed of the random-init encoder.")
flags.DEFINE_bool("bag_of_words", False, "Also print the accuracy of a ridge classifier on which "
                  "WordPieces a sentence holds: what the labelled rows teach without any encoder.")


def read_rows(tokenizer: tokenization.FullTokenizer) -> probe.ProbeRows:
  if FLAGS.task:
    if not FLAGS.data_dir:
      raise app.UsageError("--task needs --data_dir")
    return probe.task_rows(FLAGS.task, FLAGS.data_dir, tokenizer, FLAGS.max_seq_length,
                           FLAGS.train_rows)
  if not FLAGS.train_tsv or not FLAGS.dev_tsv:
    raise app.UsageError("give --train_tsv and --dev_tsv, or --data_dir and --task")
  return probe.table_rows(FLAGS.train_tsv, FLAGS.dev_tsv, FLAGS.text_column, FLAGS.label_column,
                          tokenizer, FLAGS.max_seq_length, FLAGS.train_rows)


def main(argv: list[str]) -> None:
  del argv
  if not FLAGS.model_dirs:
    raise app.UsageError("--model_dirs is required")
  penalty = None if FLAGS.ridge == "auto" else float(FLAGS.ridge)
  stored, _ = checkpoint_hparams.model_hparams(FLAGS.model_dirs[0])
  config = PretrainingConfig("probe", "", **(stored or {}))
  vocab = FLAGS.vocab_file or model_source.vocab_beside(FLAGS.model_dirs[0])
  if vocab is None:
    raise ValueError(f"no vocab.txt beside {FLAGS.model_dirs[0]}: give --vocab_file")
  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=config.do_lower_case)
  rows = read_rows(tokenizer)
  dev_y = rows.dev.labels
  majority = (f"majority {np.bincount(dev_y).max() / len(dev_y):.3f}" if rows.num_classes
              else "regression")
  print(f"probe: {len(rows.train)} train / {len(rows.dev)} dev rows, "
        f"{rows.num_classes or 0} classes, {majority}"
        + ("" if rows.metric_name == "accuracy" else f"; dev {rows.metric_name}"))
  if FLAGS.bag_of_words and rows.num_classes:
    specials = [tokenizer.vocab[t] for t in tokenization.SPECIAL_TOKENS if t in tokenizer.vocab]
    bow = ridge.bag_of_words_accuracy(rows.train.input_ids, rows.train.labels,
                                      rows.dev.input_ids, dev_y, len(tokenizer.vocab),
                                      ignore_ids=specials)
    print(f"bag-of-words: {bow:.3f}")
  for source in ["random"] + FLAGS.model_dirs:
    encoder = probe.random_encoder(get_bert_config(config), config.embedding_size, FLAGS.seed)
    if source != "random":
      probe.load_encoder(encoder, source)
    scores = probe.score(probe.PooledFeatures(encoder, all_layers=True), rows, penalty)
    print(f"{source}: " + "  ".join(f"{k} {v:.3f}" for k, v in scores.items()))


if __name__ == "__main__":
  console.run(main, "probe_features")
