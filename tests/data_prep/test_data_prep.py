"""Pre-training TFRecord builders: official parity, invariants on real text, bad input."""

from __future__ import annotations

import json
import lzma
import math
import os
import random
import subprocess
import sys
import tarfile

import pytest
import tensorflow as tf
from helpers.paths import REPO_ROOT

from data_prep import build_openwebtext_pretraining_dataset as owt
from data_prep import build_pretraining_dataset as bpd
from electra_tf import tokenization
from electra_tf.pretraining.data import pretraining_dataset

REPO = str(REPO_ROOT)
FIELDS = ("input_ids", "input_mask", "segment_ids")
CLS, SEP = 101, 102  # BERT uncased vocabulary


def read_examples(output_dir) -> list[dict[str, list[int]]]:
  """Every example of every shard in `output_dir`, shard by shard (sorted names)."""
  out = []
  for path in sorted(tf.io.gfile.glob(os.path.join(str(output_dir), bpd.SHARD_GLOB))):
    for record in tf.data.TFRecordDataset(path):
      ex = tf.train.Example.FromString(record.numpy())
      out.append({k: list(ex.features.feature[k].int64_list.value) for k in FIELDS})
  return out


def link_corpus(tmp_path, files, name="corpus"):
  """A corpus directory of symlinks to real text files (nothing copied)."""
  corpus = tmp_path / name
  corpus.mkdir()
  for f in files:
    (corpus / os.path.basename(f)).symlink_to(f)
  return str(corpus)


class RecordingRandom(random.Random):
  """random.Random that logs calls in the reference's random_calls.json format."""

  def __init__(self, seed):
    self.calls = []
    super().__init__(seed)

  def random(self):
    value = super().random()
    self.calls.append(["random", value])
    return value

  def randint(self, a, b):
    value = super().randint(a, b)
    self.calls.append(["randint", a, b, value])
    return value

  def shuffle(self, x):
    before = list(x)
    super().shuffle(x)
    self.calls.append(["shuffle", before, list(x)])

  def getrandbits(self, k):
    # Defining random() alone would switch Random._randbelow (shuffle, randint) onto
    # random(); defining getrandbits keeps the stock algorithm.
    return super().getrandbits(k)


class ReadmeLoopWriter:
  """Oracle written here, not official output: the example loop as the reference README states
  the official one, one line at a time through our pure-Python FullTokenizer. Only
  ``test_golden_examples_and_random_calls`` compares with what the official builder wrote (one
  setting); this oracle covers other settings and OpenWebText. It draws from `rng`, a
  `random.Random(seed)`: the stream of the official script's module-level `random` after
  `random.seed(seed)`, out of reach of the test process's other threads (a dask client's
  reconnect loop draws from the module-level one)."""

  def __init__(self, tokenizer, max_length, blanks_separate_docs, rng):
    self.tok, self.max, self.blanks, self.rng = tokenizer, max_length, blanks_separate_docs, rng
    self.sentences, self.length, self.target = [], 0, max_length
    self.examples = []

  def add_line(self, line):
    if not line and self.length:
      self.flush()
      return
    ids = self.tok.convert_tokens_to_ids(self.tok.tokenize(line))
    self.sentences.append(ids)
    self.length += len(ids)
    if self.length >= self.target:
      self.flush()

  def flush(self):
    first_target = 100000 if self.rng.random() < 0.1 else (self.target - 3) // 2
    a, b = [], []
    for s in self.sentences:
      if not a or len(a) + len(s) < first_target:
        a += s
      elif not b and len(a) < first_target and self.rng.random() < 0.5:
        a += s
      else:
        b += s
    a = a[:self.max - 2]
    b = b[:max(0, self.max - len(a) - 3)]
    self.sentences, self.length = [], 0
    self.target = self.rng.randint(5, self.max) if self.rng.random() < 0.05 else self.max
    ids = [CLS] + a + [SEP] + (b + [SEP] if b else [])
    seg = [0] * (len(a) + 2) + [1] * (len(b) + 1 if b else 0)
    pad = self.max - len(ids)
    self.examples.append({"input_ids": ids + [0] * pad, "input_mask": [1] * len(ids) + [0] * pad,
                          "segment_ids": seg + [0] * pad})

  def write_file(self, path):
    for line in tf.io.gfile.GFile(path):
      line = line.strip()
      if line or self.blanks:
        self.add_line(line)
    self.add_line("")


@pytest.fixture(scope="module")
def full_tokenizer(vocab_file):
  return tokenization.FullTokenizer(vocab_file)


# --- parity with the official builder ----------------------------------------------------------

def test_golden_examples_and_random_calls(reference_dir, tmp_path):
  golden = reference_dir / "pretrain_data"
  build_args = json.loads((golden / "build_args.json").read_text())
  args = bpd.BuildArgs(
    corpus_dir=str(golden / "corpus"), vocab_file=str(reference_dir / "vocab.txt"),
    output_dir=str(tmp_path / "out"),
    max_seq_length=build_args["max_seq_length"], num_processes=1,
    blanks_separate_docs=build_args["blanks_separate_docs"],
    do_lower_case=build_args["do_lower_case"], strip_accents=build_args["strip_accents"],
    num_out_files=build_args["num_out_files"], seed=build_args["seed"], chunk_lines=100)
  bpd.prepare_output_dir(args.output_dir)
  rng = RecordingRandom(args.seed)
  stats = bpd.write_examples(0, args, rng=rng)
  expected = json.loads((golden / "examples.json").read_text())
  assert read_examples(args.output_dir) == expected
  assert stats.examples == build_args["n_examples"] == len(expected)
  assert rng.calls == json.loads((golden / "random_calls.json").read_text())
  # The default path (seeded inside, default chunking, through build()) gives the same.
  bpd.build(bpd.BuildArgs(**{**args.__dict__, "chunk_lines": 16384}))
  assert read_examples(args.output_dir) == expected


@pytest.mark.parametrize("seed,max_len,blanks,chunk,lower,strip", [
  (7, 37, True, 5, True, True), (2024, 200, False, 64, False, True),
  (3, 128, True, 1000, True, False)])
def test_other_settings_match_the_readme_loop_written_here(reference_dir, data_dir, vocab_file,
                                                         tmp_path, seed, max_len,
                                                         blanks, chunk, lower, strip):
  # Real UTF-8 text (the oracle reads like the official GFile loop, which rejects Latin-1); the
  # tokenizer test corpus brings accents, CJK, control characters and more.
  files = sorted(str(p) for p in (data_dir / "state_union").glob("196*.txt"))[:3]
  files += [str(data_dir / "gutenberg" / "blake-poems.txt"),
            str(reference_dir / "tokenizer" / "corpus.txt")]
  corpus = link_corpus(tmp_path, files)
  args = bpd.BuildArgs(corpus_dir=corpus, vocab_file=vocab_file, output_dir=str(tmp_path / "o"),
                       max_seq_length=max_len, blanks_separate_docs=blanks, do_lower_case=lower,
                       strip_accents=strip, num_out_files=1, seed=seed, chunk_lines=chunk)
  bpd.build(args)

  rng = random.Random(seed)
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=lower, strip_accents=strip)
  oracle = ReadmeLoopWriter(tokenizer, max_len, blanks, rng)
  names = sorted(os.listdir(corpus))
  rng.shuffle(names)
  for name in names:
    oracle.write_file(os.path.join(corpus, name))
  got = read_examples(args.output_dir)
  assert len(got) > 100
  assert got == oracle.examples


def test_round_robin_shards(reference_dir, tmp_path):
  golden = reference_dir / "pretrain_data"
  expected = json.loads((golden / "examples.json").read_text())
  build_args = json.loads((golden / "build_args.json").read_text())
  args = bpd.BuildArgs(corpus_dir=str(golden / "corpus"),
                       vocab_file=str(reference_dir / "vocab.txt"),
                       output_dir=str(tmp_path), max_seq_length=build_args["max_seq_length"],
                       num_out_files=5, seed=12345)
  bpd.build(args)
  names = sorted(os.listdir(tmp_path))
  assert names == [f"pretrain_data.tfrecord-{i}-of-5" for i in range(5)]
  for i in range(5):  # example k goes to shard k % 5
    shard = read_examples_file(tmp_path / f"pretrain_data.tfrecord-{i}-of-5")
    assert shard == expected[i::5]


def read_examples_file(path):
  out = []
  for record in tf.data.TFRecordDataset(str(path)):
    ex = tf.train.Example.FromString(record.numpy())
    out.append({k: list(ex.features.feature[k].int64_list.value) for k in FIELDS})
  return out


@pytest.mark.parametrize("max_len,vocab_size", [(5, 30522), (128, 30522), (512, 300000)])
def test_encoder_bytes_parse_as_tf_example(max_len, vocab_size):
  rng = random.Random(max_len)
  enc = bpd.ExampleEncoder(max_len, CLS, SEP, vocab_size)
  for _ in range(200):
    n_a = rng.randint(1, max_len - 2)
    n_b = rng.choice([0, rng.randint(0, max(0, max_len - n_a - 3))])
    a = [rng.choice([0, 127, 128, 16383, 16384, vocab_size - 1, rng.randrange(vocab_size)])
         for _ in range(n_a)]
    b = [rng.randrange(vocab_size) for _ in range(n_b)]
    ids = [CLS] + a + [SEP] + (b + [SEP] if b else [])
    n, pad = len(ids), max_len - len(ids)
    expected = tf.train.Example()
    feature = expected.features.feature
    feature["input_ids"].int64_list.value.extend(ids + [0] * pad)
    feature["input_mask"].int64_list.value.extend([1] * n + [0] * pad)
    feature["segment_ids"].int64_list.value.extend(
      [0] * (n_a + 2) + [1] * (n - n_a - 2) + [0] * pad)
    assert tf.train.Example.FromString(enc.encode(bpd.Segments(a, b))) == expected


# --- invariants on real text ---------------------------------------------------------------------

# The excerpts in tests/data/gutenberg (the first lines of each book, Blake's poems whole).
GUTENBERG_FILES = ("austen-emma.txt", "austen-persuasion.txt", "austen-sense.txt",
                   "blake-poems.txt")


def split_example(ex, max_len):
  """Checks the layout [CLS] A [SEP] (B [SEP]) pad and returns (A, B)."""
  ids, mask, seg = ex["input_ids"], ex["input_mask"], ex["segment_ids"]
  assert len(ids) == len(mask) == len(seg) == max_len
  n = sum(mask)
  assert 3 <= n <= max_len
  assert mask == [1] * n + [0] * (max_len - n)
  assert ids[n:] == [0] * (max_len - n)
  assert ids[0] == CLS and ids[n - 1] == SEP
  first_sep = ids.index(SEP)
  a, b = ids[1:first_sep], ids[first_sep + 1:n - 1]
  assert a, "segment A is never empty"
  assert CLS not in a + b and SEP not in a + b
  assert seg == [0] * (len(a) + 2) + [1] * (len(b) + 1 if b else 0) + [0] * (max_len - n)
  assert (n == len(a) + 2) == (not b)
  return a, b


def made_of_lines(seq, lines_by_first, partial_tail):
  """Whether `seq` is a concatenation of `lines` (token tuples), the last maybe cut short."""
  stack, seen = [0], {0}
  while stack:
    i = stack.pop()
    if i == len(seq):
      return True
    for line in lines_by_first.get(seq[i], ()):
      if tuple(seq[i:i + len(line)]) == line:
        if i + len(line) not in seen:
          seen.add(i + len(line))
          stack.append(i + len(line))
      elif partial_tail and len(seq) - i < len(line) and tuple(seq[i:]) == line[:len(seq) - i]:
        return True
  return False


def test_no_example_mixes_documents(data_dir, vocab_file, tmp_path):
  """Blank lines separate documents: both segments must be made of lines of one paragraph.

  (A segment is a run of whole lines; the official A/B rule may put a short line after a
  long one into A, so the lines of A and B interleave but stay inside one document. Only the
  last line of a segment can be cut by trimming.)
  """
  files = [str(data_dir / "gutenberg" / f) for f in GUTENBERG_FILES]
  corpus = link_corpus(tmp_path, files)
  args = bpd.BuildArgs(corpus_dir=corpus, vocab_file=vocab_file, output_dir=str(tmp_path / "o"),
                       max_seq_length=64, num_out_files=3, seed=3)
  bpd.build(args)
  examples = read_examples(args.output_dir)

  tok = tokenization.FastTokenizer(vocab_file)
  docs, current = [], []
  for f in files:
    for lines, _, _ in bpd.read_line_blocks(f):
      for line in lines:
        if line.strip():
          current.append(line.strip())
        elif current:
          docs.append(current)
          current = []
    if current:
      docs.append(current)
      current = []
  doc_lines = [[tuple(ids) for ids in tok.tokenize_to_ids(d) if ids] for d in docs]
  line_docs = {}  # line -> documents holding it
  for i, lines in enumerate(doc_lines):
    for line in lines:
      line_docs.setdefault(line, set()).add(i)
  first_lines = {}
  for line in line_docs:
    first_lines.setdefault(line[0], []).append(line)

  assert len(examples) > 1000
  for ex in examples:
    a, b = split_example(ex, 64)
    candidates = set().union(*(line_docs[line] for line in first_lines[a[0]]
                               if tuple(a[:len(line)]) == line or tuple(a) == line[:len(a)]))
    ok = False
    for i in candidates:
      by_first = {}
      for line in doc_lines[i]:
        by_first.setdefault(line[0], set()).add(line)
      if made_of_lines(a, by_first, True) and (not b or made_of_lines(b, by_first, True)):
        ok = True
        break
    assert ok, f"example mixes documents: {ex['input_ids']}"


def test_segment_and_length_rates(data_dir, vocab_file, tmp_path):
  """10% single-segment and 5% random-length examples, within 4 sigma.

  Each file is one document (blank lines do not separate), so few examples end a document.
  Examples that reach max_seq_length aimed at the full length: among them only the 10% draw
  (or a single line longer than half an example, counted below) leaves B empty. Short examples
  are the 5% random-length ones (most targets are short enough to show) or document ends.
  """
  max_len = 128
  files = [str(data_dir / "gutenberg" / f) for f in GUTENBERG_FILES]
  corpus = link_corpus(tmp_path, files)
  args = bpd.BuildArgs(corpus_dir=corpus, vocab_file=vocab_file, output_dir=str(tmp_path / "o"),
                       max_seq_length=max_len, blanks_separate_docs=False, num_out_files=2,
                       seed=11)
  bpd.build(args)
  examples = read_examples(args.output_dir)
  n = len(examples)
  assert n > 400  # ~500 examples from the excerpts in tests/data
  parts = [split_example(ex, max_len) for ex in examples]

  full = [(a, b) for ex, (a, b) in zip(examples, parts, strict=True)
          if sum(ex["input_mask"]) == max_len]
  single = sum(1 for _, b in full if not b) / len(full)
  sigma = math.sqrt(0.1 * 0.9 / len(full))
  tok = tokenization.FastTokenizer(vocab_file)
  lines = [line.strip() for f in files for ls, _, _ in bpd.read_line_blocks(f) for line in ls]
  line_lengths = [len(ids) for ids in tok.tokenize_to_ids([x for x in lines if x])]
  long_lines = sum(1 for n_ids in line_lengths if n_ids >= (max_len - 3) // 2)
  slack = (long_lines + len(files)) / len(full)  # long lines, document ends
  assert 0.1 - 4 * sigma <= single <= 0.1 + 4 * sigma + slack

  # An example aimed at a random target t (uniform in [5, max_len]) stops at fewer than
  # t + longest line tokens, so it is short whenever t + longest + 2 < max_len.
  short = (n - len(full)) / n
  sigma = math.sqrt(0.05 * 0.95 / n)
  t_max = max_len - 3 - max(line_lengths)
  p_short = (t_max - 5 + 1) / (max_len - 5 + 1)
  assert p_short > 0.5
  assert 0.05 * p_short - 4 * sigma <= short <= 0.05 + 4 * sigma + len(files) / n


# --- speed-related structure -------------------------------------------------------------------

@pytest.mark.slow
def test_two_processes_deterministic_per_job_seeds(data_dir, vocab_file, tmp_path):
  files = sorted(str(p) for p in (data_dir / "state_union").glob("197*.txt"))
  corpus = link_corpus(tmp_path, files)
  args = bpd.BuildArgs(corpus_dir=corpus, vocab_file=vocab_file, output_dir=str(tmp_path / "p2"),
                       num_processes=2, num_out_files=4, seed=5)
  stats = bpd.build(args)  # job 0 here, job 1 in a spawned worker
  assert [s.job_id for s in stats] == [0, 1]
  assert sum(s.files for s in stats) == len(files)
  assert sorted(os.listdir(args.output_dir)) == [f"pretrain_data.tfrecord-{i}-of-4"
                                                 for i in range(4)]
  # The same jobs run in this process, one after the other, write the same shards: job j takes
  # files j, j+2, ... and seed job_seed(5, j) (job 0: 5 itself).
  again = bpd.BuildArgs(**{**args.__dict__, "output_dir": str(tmp_path / "seq")})
  bpd.prepare_output_dir(again.output_dir)
  for job in (0, 1):
    bpd.write_examples(job, again)
  for i in range(4):
    name = f"pretrain_data.tfrecord-{i}-of-4"
    assert (read_examples_file(tmp_path / "p2" / name)
            == read_examples_file(tmp_path / "seq" / name))
  assert bpd.job_seed(5, 0) == 5 and bpd.job_seed(5, 1) != bpd.job_seed(5, 2)


# --- bad input -------------------------------------------------------------------------------

def test_non_utf8_bytes_are_replaced_and_counted(data_dir, vocab_file, tmp_path, caplog):
  # 1954-Eisenhower.txt holds two Latin-1 bytes (0xBD 0xA2: "½¢").
  path = data_dir / "state_union" / "1954-Eisenhower.txt"
  raw = path.read_bytes()
  corpus = link_corpus(tmp_path, [str(path)])
  args = bpd.BuildArgs(corpus_dir=corpus, vocab_file=vocab_file, output_dir=str(tmp_path / "o"),
                       num_out_files=1, seed=1)
  caplog.set_level("WARNING")
  (stats,) = bpd.build(args)
  assert stats.bad_bytes == 2
  assert "1954-Eisenhower.txt: 2 byte(s) are not UTF-8" in caplog.text
  assert bpd.decode_utf8(raw)[0] == raw.decode("utf-8", "replace")
  assert stats.tokens == sum(len(ids) for ids in tokenization.FastTokenizer(vocab_file)
                             .tokenize_to_ids([x.strip() for x in raw.decode("utf-8", "replace")
                                               .split("\n") if x.strip()]))


def test_line_splitting_matches_gfile(tmp_path):
  data = b"a\r\nb\rc\n\n\x0bd\xc2\x85e\xe2\x80\xa8f\nlast \xff"
  path = tmp_path / "t.txt"
  path.write_bytes(data)
  lines = [x for block, _, _ in bpd.read_line_blocks(str(path)) for x in block]
  gfile = [line.rstrip(b"\n") for line in tf.io.gfile.GFile(str(path), "rb")]
  assert lines == [g.decode("utf-8", "replace") for g in gfile]
  assert lines == ["a", "bc", "", "\x0bd\x85e\u2028f", "last \ufffd"]
  path.write_bytes(b"")
  assert list(bpd.read_line_blocks(str(path))) == []


def test_empty_file_and_subdirectory_are_skipped(reference_dir, vocab_file, tmp_path, caplog):
  golden = reference_dir / "pretrain_data"
  corpus = tmp_path / "corpus"
  corpus.mkdir()
  (corpus / "a_empty.txt").write_bytes(b"")
  (corpus / "b_subdir").mkdir()
  (corpus / "c.txt").symlink_to(golden / "corpus" / "sense_ch1-2.txt")
  caplog.set_level("WARNING")
  (stats,) = bpd.build(bpd.BuildArgs(corpus_dir=str(corpus), vocab_file=vocab_file,
                                     output_dir=str(tmp_path / "o"), num_out_files=1, seed=0))
  assert stats.files == 2 and stats.empty_files == 1 and stats.examples > 10
  assert "a_empty.txt is empty" in caplog.text and "b_subdir" in caplog.text


def write_vocab(path, source, drop):
  with open(source, encoding="utf-8") as f:
    tokens = [t for t in f.read().split("\n") if t and t != drop]
  path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
  return str(path)


@pytest.mark.parametrize("case,message", [
  ("missing_corpus", "does not exist or is not a directory"),
  ("empty_corpus", "contains no files"),
  ("missing_vocab", "not found"),
  ("vocab_without_cls", "[CLS]"),
  ("vocab_without_mask", "[MASK]"),
  ("short_max_seq_length", "max_seq_length must be >= 5"),
  ("too_few_out_files", "num_out_files (1) must be >= num_processes (2)"),
])
def test_bad_input_one_line_errors(reference_dir, vocab_file, tmp_path, case, message):
  corpus = str(reference_dir / "pretrain_data" / "corpus")
  kw = dict(corpus_dir=corpus, vocab_file=vocab_file, output_dir=str(tmp_path / "o"), seed=1)
  if case == "missing_corpus":
    kw["corpus_dir"] = str(tmp_path / "nope")
  elif case == "empty_corpus":
    (tmp_path / "empty").mkdir()
    kw["corpus_dir"] = str(tmp_path / "empty")
  elif case == "missing_vocab":
    kw["vocab_file"] = str(tmp_path / "vocab.txt")
  elif case == "vocab_without_cls":
    kw["vocab_file"] = write_vocab(tmp_path / "v.txt", vocab_file, "[CLS]")
  elif case == "vocab_without_mask":
    kw["vocab_file"] = write_vocab(tmp_path / "v.txt", vocab_file, "[MASK]")
  elif case == "short_max_seq_length":
    kw["max_seq_length"] = 4
  elif case == "too_few_out_files":
    kw.update(num_processes=2, num_out_files=1)
  with pytest.raises(ValueError) as err:
    bpd.build(bpd.BuildArgs(**kw))
  assert message in str(err.value) and "\n" not in str(err.value)
  assert not (tmp_path / "o").exists()  # nothing written before the checks pass


def test_interrupted_run_leaves_no_complete_looking_shard(reference_dir, vocab_file, tmp_path):
  out = str(tmp_path / "o")
  bpd.prepare_output_dir(out)
  # Simulates a kill: records written, the writer never closed.
  writer = bpd.ShardWriter(out, job_id=0, num_jobs=1, num_out_files=2)
  writer.write(b"x")
  writer.write(b"y")
  assert tf.io.gfile.glob(os.path.join(out, "pretrain_data.tfrecord*")) == []
  assert sorted(os.listdir(out)) == [".pretrain_data.tfrecord-0-of-2.tmp",
                                     ".pretrain_data.tfrecord-1-of-2.tmp"]
  with pytest.raises(ValueError, match="unfinished shard"):
    pretraining_dataset(os.path.join(out, "*"), 2, 128)

  # An exception inside a job deletes its unfinished shards.
  class Exploding:
    vocab = tokenization.load_vocab(vocab_file)

    def tokenize_to_ids(self, lines):
      raise RuntimeError("boom")

  args = bpd.BuildArgs(corpus_dir=str(reference_dir / "pretrain_data" / "corpus"),
                       vocab_file=vocab_file, output_dir=out, num_out_files=2, seed=1)
  bpd.prepare_output_dir(out)  # also removes the stale .tmp files above
  assert os.listdir(out) == []
  with pytest.raises(RuntimeError, match="boom"):
    bpd.write_examples(0, args, tokenizer=Exploding())
  assert os.listdir(out) == []


def test_rebuild_replaces_only_old_shards(reference_dir, vocab_file, tmp_path):
  out = tmp_path / "o"
  out.mkdir()
  (out / "notes.txt").write_text("keep me")
  (out / "pretrain_data.tfrecord-7-of-9").write_bytes(b"stale")
  args = bpd.BuildArgs(corpus_dir=str(reference_dir / "pretrain_data" / "corpus"),
                       vocab_file=vocab_file, output_dir=str(out), num_out_files=2, seed=1)
  bpd.build(args)
  assert sorted(os.listdir(out)) == ["notes.txt", "pretrain_data.tfrecord-0-of-2",
                                     "pretrain_data.tfrecord-1-of-2"]


# --- command line --------------------------------------------------------------------------------

def test_normalize_argv_accepts_official_spellings():
  argv = ["prog", "--corpus-dir", "c", "--vocab-file=v", "--output-dir", "o",
          "--max-seq-length", "64", "--num-processes", "2", "--blanks-separate-docs", "False",
          "--no-lower-case", "--no-strip-accents", "--do-lower-case", "--seed=3"]
  assert bpd.normalize_argv(argv) == [
    "prog", "--corpus_dir", "c", "--vocab_file=v", "--output_dir", "o", "--max_seq_length",
    "64", "--num_processes", "2", "--blanks_separate_docs=False", "--do_lower_case=false",
    "--strip_accents=false", "--do_lower_case=true", "--seed=3"]
  assert bpd.normalize_argv(["p", "--blanks-separate-docs", "--corpus_dir=x"]) == [
    "p", "--blanks_separate_docs", "--corpus_dir=x"]
  assert bpd.normalize_argv(["p", "--", "--not-a-flag"]) == ["p", "--", "--not-a-flag"]


def run_script(name, *args):
  env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
  return subprocess.run([sys.executable, os.path.join(REPO, "data_prep", name), *args],
                        capture_output=True, text=True, env=env, cwd=REPO, timeout=300)


@pytest.mark.slow
def test_script_with_official_flags_reproduces_golden(reference_dir, vocab_file, tmp_path):
  golden = reference_dir / "pretrain_data"
  max_seq_length = json.loads((golden / "build_args.json").read_text())["max_seq_length"]
  result = run_script("build_pretraining_dataset.py", "--corpus-dir", str(golden / "corpus"),
                      "--vocab-file", str(reference_dir / "vocab.txt"),
                      "--output-dir", str(tmp_path / "o"),
                      "--max-seq-length", str(max_seq_length), "--num-processes", "1",
                      "--blanks-separate-docs", "True", "--do-lower-case", "--do-strip-accents",
                      "--num-out-files", "1", "--seed", "12345")
  assert result.returncode == 0, result.stderr[-2000:]
  assert read_examples(tmp_path / "o") == json.loads((golden / "examples.json").read_text())

  result = run_script("build_pretraining_dataset.py", "--corpus-dir", str(tmp_path / "missing"),
                      "--vocab-file", vocab_file, "--output-dir", str(tmp_path / "o2"))
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1] == (
    f"build_pretraining_dataset: error: corpus_dir '{tmp_path / 'missing'}' does not exist or "
    "is not a directory")


# --- OpenWebText -------------------------------------------------------------------------------

def make_owt(root, docs_by_subset, as_archive):
  """The real layout: openwebtext/urlsf_subsetNN-K_data.xz, each an xz tar of .txt documents;
  wrapped in openwebtext.tar.xz when `as_archive`."""
  stage = root / "stage" / "openwebtext"
  stage.mkdir(parents=True)
  for subset, docs in docs_by_subset.items():
    with tarfile.open(stage / subset, "w:xz") as tar:
      for name, path in docs:
        tar.add(path, arcname=name)
  if as_archive:
    with tarfile.open(root / "openwebtext.tar.xz", "w:xz") as tar:
      tar.add(stage, arcname="openwebtext")
  else:
    stage.rename(root / "openwebtext")


@pytest.mark.parametrize("as_archive", [True, False])
def test_openwebtext_layout_and_order(data_dir, vocab_file, full_tokenizer, tmp_path,
                                      as_archive):
  speeches = sorted((data_dir / "state_union").glob("19[89]*.txt"))
  speeches = [p for p in speeches if b"\xa1" not in p.read_bytes()][:9]
  docs_by_subset = {f"urlsf_subset00-{k}_data.xz":
                    [(f"{k:02d}{i:05d}-doc.txt", str(p)) for i, p in enumerate(speeches[k::3])]
                    for k in range(3)}
  data = tmp_path / "data"
  data.mkdir()
  (data / "vocab.txt").symlink_to(vocab_file)
  make_owt(data, docs_by_subset, as_archive)
  stats = owt.build(owt.OwtArgs(data_dir=str(data), max_seq_length=64, num_out_files=1,
                                seed=9))
  assert sum(s.files for s in stats) == len(speeches)
  assert sorted(os.listdir(data)) == (["openwebtext.tar.xz"] if as_archive else ["openwebtext"]) \
    + ["pretrain_tfrecords", "stage", "vocab.txt"]  # tmp/ removed
  got = read_examples(data / "pretrain_tfrecords")

  # Oracle: official order with random.seed(9)'s stream: shuffle subsets, then each subset's
  # (sorted) documents; every document ends an example; blank lines are skipped.
  rng = random.Random(9)
  oracle = ReadmeLoopWriter(full_tokenizer, 64, blanks_separate_docs=False, rng=rng)
  subsets = sorted(docs_by_subset)
  rng.shuffle(subsets)
  for subset in subsets:
    docs = sorted(docs_by_subset[subset])
    rng.shuffle(docs)
    for _, path in docs:
      oracle.write_file(path)
  assert len(got) > 100
  assert got == oracle.examples


def test_openwebtext_bad_archives(data_dir, vocab_file, tmp_path, caplog):
  data = tmp_path / "data"
  data.mkdir()
  (data / "vocab.txt").symlink_to(vocab_file)
  with pytest.raises(ValueError, match="no OpenWebText in"):
    owt.build(owt.OwtArgs(data_dir=str(data), seed=1))
  speech = str(data_dir / "state_union" / "1945-Truman.txt")
  make_owt(data, {"urlsf_subset00-1_data.xz": [("a.txt", speech)]}, as_archive=False)
  (data / "openwebtext" / "urlsf_subset00-2_data.xz").write_bytes(lzma.compress(b"not a tar"))
  caplog.set_level("ERROR")
  (stats,) = owt.build(owt.OwtArgs(data_dir=str(data), num_out_files=1, seed=1))
  assert stats.skipped_archives == 1 and stats.files == 1 and stats.examples > 0
  assert "skipping unreadable subset archive urlsf_subset00-2_data.xz" in caplog.text
  assert not (data / "tmp").exists()


def test_shards_are_fsynced_before_their_rename(tmp_path, monkeypatch):
  """Each shard's content reaches the disk under its hidden name, then the folder's entries."""
  from electra_tf import atomic_io
  from electra_tf.data_prep.pretraining_examples import ShardWriter

  events = []
  monkeypatch.setattr(atomic_io, "fsync_file", lambda p: events.append(
      ("file", os.path.basename(p), os.path.getsize(p))))
  monkeypatch.setattr(atomic_io, "fsync_dir", lambda p: events.append(
      ("dir", p, sorted(os.listdir(p)))))
  writer = ShardWriter(str(tmp_path), job_id=0, num_jobs=1, num_out_files=2)
  for record in (b"one", b"two", b"three"):
    writer.write(record)
  writer.close()
  names = ["pretrain_data.tfrecord-0-of-2", "pretrain_data.tfrecord-1-of-2"]
  assert [e[:2] for e in events] == [("file", f".{n}.tmp") for n in names] + [
      ("dir", str(tmp_path))]
  assert all(size > 0 for _, _, size in events[:2])  # closed (flushed) before the fsync
  assert events[2][2] == names  # renamed before the folder's fsync
