"""The Beam pipeline writes the text builder's examples: byte-identical shards for the same
inputs, vocabulary, seed and job split (1, 2 and 4 jobs; blank-line and file document
boundaries), from a folder of text, JSON Lines .gz or Parquet; a rerun keeps finished jobs;
bad input gives one line."""

import gzip
import json
import os
import subprocess
import sys

import pytest
from helpers.paths import REPO_ROOT

from data_prep import beam_pretraining_dataset as beam_data
from data_prep import build_pretraining_dataset as bpd

IN_MEMORY = ["--direct_running_mode=in_memory"]  # one process: the tests' speed
NAMES = ("a.txt", "b.txt", "c.txt", "d.txt", "e.txt")


def _documents(data_dir) -> list[list[str]]:
  """Five files' documents (lists of lines) from real text: Gutenberg paragraphs (blank lines
  between them) and State of the Union addresses."""
  texts = [(data_dir / "gutenberg" / n).read_text(encoding="utf-8")[:12000]
           for n in ("austen-emma.txt", "blake-poems.txt", "austen-sense.txt")]
  texts += [(data_dir / "state_union" / n).read_text(encoding="utf-8")[:9000]
            for n in ("1945-Truman.txt", "1963-Johnson.txt")]
  files = []
  for text in texts:
    docs = [d.strip().split("\n") for d in text.replace("\r", "").split("\n\n") if d.strip()]
    files.append(docs)
  return files


def _write_text(folder, files):
  folder.mkdir()
  for name, docs in zip(NAMES, files, strict=True):
    (folder / name).write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")
  return folder


def _builder_shards(corpus, vocab_file, out, jobs, seed=7, **kw):
  args = bpd.BuildArgs(corpus_dir=str(corpus), vocab_file=vocab_file, output_dir=str(out),
                       max_seq_length=64, num_processes=jobs, num_out_files=4, seed=seed, **kw)
  bpd.prepare_output_dir(args.output_dir)
  for job in range(jobs):  # the builder's jobs one after the other (test_data_prep: the same
    bpd.write_examples(job, args)  # shards as its processes)
  return _read(out)


def _beam(input_, vocab_file, out, jobs, seed=7, beam_argv=IN_MEMORY, **kw):
  args = beam_data.BeamArgs(input=str(input_), vocab_file=vocab_file, output_dir=str(out),
                            max_seq_length=64, num_jobs=jobs, num_out_files=4, seed=seed, **kw)
  return beam_data.build(args, beam_argv)


def _read(out) -> dict[str, bytes]:
  return {n: (out / n).read_bytes() for n in sorted(os.listdir(out))
          if n.startswith("pretrain_data.tfrecord-")}


@pytest.mark.parametrize("jobs", [1, 2, 4])
def test_text_folder_byte_identical_to_the_builder(data_dir, vocab_file, tmp_path, jobs):
  corpus = _write_text(tmp_path / "corpus", _documents(data_dir))
  want = _builder_shards(corpus, vocab_file, tmp_path / "builder", jobs)
  totals = _beam(corpus, vocab_file, tmp_path / "beam", jobs)
  got = _read(tmp_path / "beam")
  assert list(got) == [f"pretrain_data.tfrecord-{i}-of-4" for i in range(4)]
  assert all(len(b) > 1000 for b in got.values())
  assert got == want
  assert totals["examples"] > 100 and totals["bad_records"] == 0


def test_blank_lines_not_separating_documents(data_dir, vocab_file, tmp_path):
  corpus = _write_text(tmp_path / "corpus", _documents(data_dir))
  want = _builder_shards(corpus, vocab_file, tmp_path / "builder", 2,
                         blanks_separate_docs=False)
  _beam(corpus, vocab_file, tmp_path / "beam", 2, blanks_separate_docs=False)
  assert _read(tmp_path / "beam") == want
  assert want != _builder_shards(corpus, vocab_file, tmp_path / "blanks", 2)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_records_give_the_text_files_examples(data_dir, vocab_file, tmp_path, fmt):
  """A record is one document: JSON Lines .gz / Parquet files holding the text files'
  documents write the text files' shards (2 jobs)."""
  files = _documents(data_dir)
  corpus = _write_text(tmp_path / "corpus", files)
  want = _builder_shards(corpus, vocab_file, tmp_path / "builder", 2)
  records = tmp_path / "records"
  records.mkdir()
  for name, docs in zip(NAMES, files, strict=True):
    texts = ["\n".join(d) for d in docs]
    if fmt == "jsonl":
      with gzip.open(records / f"{name}.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(texts))
    else:
      import pyarrow as pa
      import pyarrow.parquet as pq

      pq.write_table(pa.table({"body": texts}), records / f"{name}.parquet", row_group_size=7)
  pattern = records / ("*.jsonl.gz" if fmt == "jsonl" else "*.parquet")
  totals = _beam(pattern, vocab_file, tmp_path / "beam", 2, format=fmt, text_field="body")
  assert _read(tmp_path / "beam") == want
  assert totals["documents"] == sum(len(d) for d in files)


def test_rerun_keeps_finished_jobs_and_completes(data_dir, vocab_file, tmp_path):
  """A job that failed leaves no finished-looking shard; the rerun writes only its shards."""
  files = _documents(data_dir)
  records = tmp_path / "records"
  records.mkdir()
  for name, docs in zip(NAMES, files, strict=True):
    (records / f"{name}.jsonl").write_text(
        "".join(json.dumps({"text": "\n".join(d)}) + "\n" for d in docs), encoding="utf-8")
  good = (records / "b.txt.jsonl").read_bytes()
  (records / "b.txt.jsonl").write_bytes(good + b"{broken\n")  # job 1 of 2: b, d
  out = tmp_path / "beam"
  with pytest.raises(ValueError, match=r"b\.txt\.jsonl:\d+: not JSON .*\(--strict\)$"):
    _beam(records, vocab_file, out, 2, format="jsonl", strict=True)
  kept = _read(out)  # job 0's two shards if it ran before job 1 failed, else none
  assert sorted(kept) in ([], ["pretrain_data.tfrecord-0-of-4", "pretrain_data.tfrecord-2-of-4"])
  assert [n for n in os.listdir(out) if n.endswith(".tmp")] == []
  mtimes = {n: os.stat(out / n).st_mtime_ns for n in kept}
  (records / "b.txt.jsonl").write_bytes(good)
  totals = _beam(records, vocab_file, out, 2, format="jsonl", strict=True)
  redone = (1, 3) if kept else (0, 1, 2, 3, 4)
  assert totals["documents"] == sum(len(files[i]) for i in redone)
  assert {n: os.stat(out / n).st_mtime_ns for n in kept} == mtimes
  _beam(records, vocab_file, tmp_path / "whole", 2, format="jsonl", strict=True)
  assert _read(out) == _read(tmp_path / "whole")


def _cli(*args, timeout=300):
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  return subprocess.run([sys.executable, str(REPO_ROOT / "data_prep" /
                                             "beam_pretraining_dataset.py"),
                         *map(str, args)], capture_output=True, text=True, timeout=timeout,
                        env=env)


@pytest.mark.slow  # the DirectRunner's worker processes start TensorFlow
def test_script_multi_processing_quiet_with_progress(data_dir, vocab_file, tmp_path):
  corpus = _write_text(tmp_path / "corpus", _documents(data_dir))
  want = _builder_shards(corpus, vocab_file, tmp_path / "builder", 2)
  proc = _cli("--input", corpus, "--vocab_file", vocab_file, "--output_dir", tmp_path / "beam",
              "--max_seq_length", 64, "--num_jobs", 2, "--num_out_files", 4, "--seed", 7)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert _read(tmp_path / "beam") == want
  lines = (proc.stdout + proc.stderr).splitlines()
  assert lines[-2].startswith("wrote ") and " documents (" in lines[-2], lines
  assert lines[-1].endswith(" tokens done (2/2 jobs)") and lines[-1].startswith("progress: ")
  assert len(lines) == 2, lines  # nothing of Beam's own


@pytest.mark.parametrize("case,message", [
    ("missing_vocab", "vocab_file '{tmp}/none.txt' not found"),
    ("parquet_column", "{tmp}/in/x.parquet: no column 'text' (columns: body)"),
    ("no_input", "--input '{tmp}/in/*.jsonl' matches no file"),
    ("tfds_unprepared", "tfds dataset wiki/20230601.en is not prepared in {tmp}/tfds"),
])
def test_bad_input_one_line(vocab_file, tmp_path, case, message):
  (tmp_path / "in").mkdir()
  vocab, fmt, pattern = vocab_file, "jsonl", tmp_path / "in" / "*.jsonl"
  extra = []
  if case == "missing_vocab":
    vocab = tmp_path / "none.txt"
    (tmp_path / "in" / "x.jsonl").write_text('{"text": "a"}\n')
  elif case == "parquet_column":
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": ["a b"]}), tmp_path / "in" / "x.parquet")
    fmt, pattern = "parquet", tmp_path / "in" / "x.parquet"
  elif case == "tfds_unprepared":
    fmt, pattern, extra = "tfds", "wiki/20230601.en", ["--tfds_data_dir", tmp_path / "tfds"]
  proc = _cli("--input", pattern, "--format", fmt, "--vocab_file", vocab, "--output_dir",
              tmp_path / "out", "--num_out_files", 2, *extra, "--",
              "--direct_running_mode=in_memory")
  assert proc.returncode == 1
  errors = [line for line in proc.stderr.splitlines() if "error:" in line]
  assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
  assert errors[0].startswith("build_pretraining_data_beam: error: "
                              + message.format(tmp=tmp_path)), errors


def test_bad_records_counted_and_named(vocab_file, tmp_path):
  """Malformed JSON, a missing field and non-UTF-8 bytes: skipped, counted, one line each."""
  (tmp_path / "in").mkdir()
  (tmp_path / "in" / "x.jsonl").write_bytes(
      b'{"text": "the cat sat"}\n{oops\n{"title": "no text"}\n{"text": "caf\xe9"}\n'
      b'{"text": "a dog ran"}\n')
  (tmp_path / "in" / "y.jsonl").write_bytes(b"")
  proc = _cli("--input", tmp_path / "in", "--format", "jsonl", "--vocab_file", vocab_file,
              "--output_dir", tmp_path / "out", "--num_out_files", 2, "--",
              "--direct_running_mode=in_memory")
  assert proc.returncode == 0, proc.stderr[-3000:]
  x = tmp_path / "in" / "x.jsonl"
  warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
  assert warnings == [f"warning: {x}:2: not JSON (Expecting property name enclosed in double "
                      "quotes); skipped", f"warning: {x}:3: no text field 'text'; skipped",
                      f"warning: {x}:4: 1 byte(s) are not UTF-8; skipped"]
  assert "of 2 documents (" in proc.stdout and "3 bad records skipped" in proc.stdout
  assert "1 empty files" in proc.stdout


def test_prepared_tfds_dataset(data_dir, vocab_file, tmp_path):
  """A prepared TFDS dataset, read from its folder (nothing downloaded): each example one
  document, the same examples as a text file of them in the order TFDS reads them."""
  import tensorflow_datasets as tfds

  texts = ["\n".join(d) for docs in _documents(data_dir)[:3] for d in docs]

  class TinyWiki(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
      return tfds.core.DatasetInfo(
          builder=self, features=tfds.features.FeaturesDict({"text": tfds.features.Text()}))

    def _split_generators(self, dl_manager):
      return {"train": self._generate_examples()}

    def _generate_examples(self):
      for i, text in enumerate(texts):
        yield i, {"text": text}

  TinyWiki(data_dir=str(tmp_path / "tfds")).download_and_prepare(
      download_config=tfds.download.DownloadConfig(try_download_gcs=False))
  folder = tmp_path / "tfds" / "tiny_wiki" / "1.0.0"
  read = [t.decode() for t in tfds.builder_from_directory(str(folder)).as_dataset(
      split="train").map(lambda e: e["text"]).as_numpy_iterator()]
  assert sorted(read) == sorted(texts)
  corpus = tmp_path / "corpus"
  corpus.mkdir()
  (corpus / "all.txt").write_text("\n\n".join(read) + "\n", encoding="utf-8")
  want = _builder_shards(corpus, vocab_file, tmp_path / "builder", 1)
  totals = _beam("tiny_wiki", vocab_file, tmp_path / "beam", 1, format="tfds",
                 tfds_data_dir=str(tmp_path / "tfds"))
  assert totals["documents"] == len(texts)
  assert _read(tmp_path / "beam") == want


@pytest.mark.slow  # a dask.distributed cluster of 2 worker processes, each starting TensorFlow
def test_dask_runner_on_a_local_cluster_writes_the_same_shards(data_dir, vocab_file, tmp_path):
  """A second engine: Beam's DaskRunner on a local dask.distributed cluster of 2 processes."""
  from distributed import LocalCluster
  from distributed.client import _global_clients

  corpus = _write_text(tmp_path / "corpus", _documents(data_dir))
  want = _builder_shards(corpus, vocab_file, tmp_path / "builder", 2)
  with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                    dashboard_address=None) as cluster:
    assert len(cluster.workers) == 2
    totals = _beam(corpus, vocab_file, tmp_path / "beam", 2, beam_argv=[
        "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
        f"--dask_client_address={cluster.scheduler_address}"])
  assert _read(tmp_path / "beam") == want
  assert totals["documents"] > 0 and totals["examples"] > 100
  # The runner's client is closed: nothing of the run keeps reconnecting in this process.
  assert [c.status for c in _global_clients.values() if c.status != "closed"] == []


@pytest.mark.slow  # a real SIGKILL mid-build, then the rerun
def test_sigkill_leaves_no_finished_shard_and_rerun_completes(data_dir, vocab_file, tmp_path):
  import signal
  import time

  corpus = _write_text(tmp_path / "corpus", _documents(data_dir))
  big = tmp_path / "big"
  big.mkdir()
  for copy in range(60):  # enough text that the job takes a few seconds
    for name in NAMES:
      (big / f"{copy:02d}-{name}").symlink_to(corpus / name)
  out = tmp_path / "beam"
  args = ["--input", big, "--vocab_file", vocab_file, "--output_dir", out, "--max_seq_length",
          64, "--num_jobs", 1, "--num_out_files", 4, "--seed", 7]
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  proc = subprocess.Popen([sys.executable, str(REPO_ROOT / "data_prep" /
                                              "beam_pretraining_dataset.py"), *map(str, args)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
  deadline = time.time() + 120
  def writing():  # a shard being written, past its first records
    return out.exists() and any(n.endswith(".tmp") and os.path.getsize(out / n) > 0
                                for n in os.listdir(out))

  while time.time() < deadline and not writing():
    time.sleep(0.01)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert proc.returncode == -signal.SIGKILL
  names = os.listdir(out)
  assert any(n.endswith(".tmp") for n in names), names  # killed mid-job
  assert [n for n in names if n.startswith("pretrain_data.tfrecord")] == []
  rerun = _cli(*args)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  assert sorted(os.listdir(out)) == [".pretrain_data.build.json"] + [
      f"pretrain_data.tfrecord-{i}-of-4" for i in range(4)]
  _beam(big, vocab_file, tmp_path / "whole", 1)
  assert _read(out) == _read(tmp_path / "whole")
