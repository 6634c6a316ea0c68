"""Family ``pretrain_data``: official ``build_pretraining_dataset.write_examples``, small corpus.

Which official code made which file (``build_pretraining_dataset.py``, ``util/utils.py``,
``model/tokenization.py``, unedited):

- ``pretrain_data/tfrecords/pretrain_data.tfrecord-0-of-1``: ``utils.rmkdir(output_dir)``,
  ``random.seed(12345)``, ``write_examples(0, args)``. Its ``ExampleWriter`` is wrapped so that
  it is built with ``num_out_files=1`` (official default 1000); the module's ``random`` is
  replaced by a proxy that logs each call and forwards it to Python's ``random`` module. The
  records are then written again with a sorted feature map (same parsed values, stable bytes).
- ``pretrain_data/examples.json``: the same records parsed back (``tf.train.Example``).
- ``pretrain_data/random_calls.json``: the proxy's log, in call order.
- ``pretrain_data/corpus/`` and ``build_args.json``: inputs (the first lines of
  tests/data/gutenberg/austen-*.txt) and the arguments (no official code).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import shutil

from tools.official_goldens import files, official

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXT = ROOT / "tests" / "data" / "gutenberg"
SEED = 12345
MAX_SEQ_LENGTH = 64
# corpus file -> (source in tests/data/gutenberg, [first, end) 0-based source lines)
CORPUS = {
    "emma_vol1_ch1-2.txt": ("austen-emma.txt", (0, 420)),
    "persuasion_ch1-2.txt": ("austen-persuasion.txt", (0, 330)),
    "sense_ch1-2.txt": ("austen-sense.txt", (0, 260)),
}


class _LoggingRandom:
  """Python's ``random`` module for the official code, logging ``shuffle`` / ``random`` /
  ``randint`` (the calls the official builder makes) in the reference's format."""

  def __init__(self):
    self.calls: list = []

  def random(self) -> float:
    value = random.random()
    self.calls.append(["random", value])
    return value

  def randint(self, a: int, b: int) -> int:
    value = random.randint(a, b)
    self.calls.append(["randint", a, b, value])
    return value

  def shuffle(self, x: list) -> None:
    before = list(x)
    random.shuffle(x)
    self.calls.append(["shuffle", before, list(x)])

  def __getattr__(self, name):
    raise AttributeError(f"the official builder called random.{name}, which is not logged")


def _write_corpus(corpus_dir: pathlib.Path) -> list[dict]:
  if corpus_dir.exists():
    shutil.rmtree(corpus_dir)
  provenance = []
  for name, (source, (first, end)) in CORPUS.items():
    lines = (TEXT / source).read_text(encoding="utf-8").split("\n")
    assert len(lines) > end, source
    files.save_text(corpus_dir / name, "".join(line + "\n" for line in lines[first:end]))
    provenance.append({
        "file": name, "source": f"tests/data/gutenberg/{source} (NLTK gutenberg {source}, its "
        "first lines)", "source_lines_0based_half_open": [first, end]})
  return provenance


def write(official_dir: str, golden_dir: pathlib.Path) -> None:
  """Writes ``golden_dir/pretrain_data/`` (corpus, TFRecord, examples, args, random calls)."""
  del official_dir
  tf1 = official.tf1
  bpd = official.module("build_pretraining_dataset")
  utils = official.module("util.utils")
  out = golden_dir / "pretrain_data"
  corpus_dir, output_dir = out / "corpus", out / "tfrecords"
  provenance = _write_corpus(corpus_dir)
  args = argparse.Namespace(
      corpus_dir=str(corpus_dir), vocab_file=str(golden_dir / "vocab.txt"),
      output_dir=str(output_dir), max_seq_length=MAX_SEQ_LENGTH, num_processes=1,
      blanks_separate_docs=True, do_lower_case=True, strip_accents=True)

  official_writer = bpd.ExampleWriter

  def one_file_writer(*a, **kw):
    """The official ExampleWriter with one output file instead of the default 1000."""
    return official_writer(*a, **{**kw, "num_out_files": 1})

  logger = _LoggingRandom()
  bpd.ExampleWriter, module_random = one_file_writer, bpd.random
  bpd.random = logger
  try:
    utils.rmkdir(args.output_dir)
    random.seed(SEED)
    bpd.write_examples(0, args)
  finally:
    bpd.ExampleWriter, bpd.random = official_writer, module_random

  shards = sorted(p.name for p in output_dir.iterdir())
  assert shards == ["pretrain_data.tfrecord-0-of-1"], shards
  examples, records = [], []
  for record in tf1.io.tf_record_iterator(str(output_dir / shards[0])):
    ex = tf1.train.Example.FromString(record)
    records.append(ex.SerializeToString(deterministic=True))
    examples.append({k: [int(x) for x in ex.features.feature[k].int64_list.value]
                     for k in ("input_ids", "input_mask", "segment_ids")})
  # The official bytes order the feature map differently in each process; the same records,
  # serialized with a sorted map, make a rerun byte-identical (parsed values unchanged).
  with tf1.io.TFRecordWriter(str(output_dir / shards[0])) as writer:
    for record in records:
      writer.write(record)
  # One example per line keeps the file readable and small.
  files.save_text(out / "examples.json",
                  "[\n" + ",\n".join(json.dumps(e, sort_keys=True) for e in examples) + "\n]\n")
  files.save_text(out / "random_calls.json", json.dumps(logger.calls) + "\n")
  files.save_json(out / "build_args.json", {
      "blanks_separate_docs": args.blanks_separate_docs,
      "corpus_files": provenance,
      "do_lower_case": args.do_lower_case,
      "max_seq_length": args.max_seq_length,
      "n_examples": len(examples),
      "n_random_calls": len(logger.calls),
      "num_out_files": 1,
      "num_processes": args.num_processes,
      "seed": SEED,
      "strip_accents": args.strip_accents,
      "vocab_file": "tests/golden/vocab.txt",
  })
