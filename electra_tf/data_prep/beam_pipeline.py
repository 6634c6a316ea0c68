r"""Pre-training TFRecords with Apache Beam: the text-folder builder's examples, on any runner.

The work is split into ``--num_jobs`` jobs exactly as ``build_pretraining_dataset.py`` splits
it into processes: job ``j`` takes every ``num_jobs``-th input file (sorted paths), shuffles
them with ``random.Random(job_seed(seed, j))`` and packs their lines with that same generator,
into its own shards (shard ``i`` belongs to job ``i % num_jobs``). Randomness is keyed by job
only, so the bytes do not depend on the runner, its parallelism, retries or element order; for
text input with ``--num_jobs P`` the shards are byte-identical to the builder's with
``--num_processes P``. Each job is one Beam element: its DoFn tokenizes with the tensorflow-text
``FastTokenizer`` (made once per worker, in ``setup``) in batches of ``chunk_lines`` lines.

Shards are written as hidden ``.pretrain_data.tfrecord-I-of-N.tmp`` files, fsynced and renamed
when their job ends; ``.pretrain_data.build.json`` records the build's arguments, so a rerun
of a killed build keeps the jobs whose shards are all there and writes the others.

  electra-build-pretraining-data-beam --input 'corpus/*.jsonl.gz' --format jsonl \
      --vocab_file vocab.txt --output_dir pretrain_tfrecords --num_jobs 64 --seed 1 \
      -- --runner DataflowRunner ...

Arguments after ``--`` are Beam pipeline options (default: the DirectRunner in
multi-processing mode, one worker a job up to the CPU count; with one worker, in this process).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence

from electra_tf import console, early_interrupt  # noqa: E402,I001 -- before TensorFlow loads

if __name__ == "__main__":
  console.require_tensorflow("build_pretraining_data_beam")
  console.require_beam("build_pretraining_data_beam")
  early_interrupt.install()
  console.quiet_logs(sys.argv)
  console.use_tf_keras()

import tensorflow as tf  # noqa: E402
from absl import flags  # noqa: E402

from electra_tf import atomic_io, tokenization  # noqa: E402
from electra_tf.data_prep import beam_inputs  # noqa: E402
from electra_tf.data_prep import build_pretraining_dataset as bpd  # noqa: E402
from electra_tf.data_prep.beam_progress import ProgressLine, report_progress  # noqa: E402
from electra_tf.data_prep.pretraining_examples import (  # noqa: E402
  SHARD_FORMAT,
)

MANIFEST = ".pretrain_data.build.json"


@dataclasses.dataclass(frozen=True, kw_only=True)
class BeamArgs(bpd.ShardArgs):
  """One Beam build (picklable: it travels to the workers with the DoFn)."""

  input: str
  format: str = "text"
  text_field: str = "text"
  tfds_split: str = "train"
  tfds_data_dir: str | None = None
  num_jobs: int = 1
  seed: int = 0
  strict: bool = False


def job_units(args: BeamArgs) -> list[str]:
  """The units of work (input files; for TFDS the prepared folder) every job chooses from."""
  if args.format == "tfds":
    return [beam_inputs.resolve_tfds(args.input, args.tfds_data_dir)]
  return beam_inputs.list_files(args.input)


def write_job(job_id: int, args: BeamArgs, units: list[str], tokenizer,
              progress_dir: str | None = None) -> dict[str, int]:
  """Writes job `job_id`'s shards (the builder's file split, order and seed); returns counts.

  After each input unit the job's counts go to `progress_dir` (a local folder of the machine
  that started the pipeline; skipped where a worker cannot reach it)."""
  rng = random.Random(bpd.job_seed(args.seed, job_id))
  if args.format == "tfds":
    mine = list(units)
  else:
    mine = [u for i, u in enumerate(units) if i % args.num_jobs == job_id]
    rng.shuffle(mine)
  bad = beam_inputs.BadRecords(strict=args.strict)
  writer = bpd.example_writer(args, job_id, args.num_jobs, rng, tokenizer)

  def blocks(unit):
    yield from beam_inputs.unit_blocks(
      args.format, unit, bad, text_field=args.text_field,
      blanks_separate_docs=args.blanks_separate_docs, tfds_split=args.tfds_split, job=job_id,
      num_jobs=args.num_jobs)
    report_progress(progress_dir, job_id, bad, writer.stats.tokens, done=False)

  try:
    with bpd.lean_gc():
      writer.write_files(mine, log_every_s=float("inf"), read_blocks=blocks)
    stats = writer.finish()
  except BaseException:
    writer.abort()
    raise
  counts = {"documents": bad.documents, "tokens": stats.tokens, "examples": stats.examples,
            "bad_records": bad.count, "bad_bytes": stats.bad_bytes, "empty": stats.empty_files}
  report_progress(progress_dir, job_id, bad, stats.tokens, done=True, counts=counts)
  return counts


def job_shards(args: BeamArgs, job_id: int) -> list[str]:
  return [os.path.join(args.output_dir, SHARD_FORMAT.format(i, args.num_out_files))
          for i in range(job_id, args.num_out_files, args.num_jobs)]


def _manifest(args: BeamArgs, units: list[str]) -> dict:
  digest = hashlib.sha256("\n".join(units).encode()).hexdigest()
  same_output = {k: v for k, v in dataclasses.asdict(args).items()
                 if k not in ("strict", "chunk_lines")}  # these do not change the bytes
  return {**same_output, "units_sha256": digest}


def plan_jobs(args: BeamArgs, units: list[str]) -> list[int]:
  """Prepares `output_dir` and returns the jobs still to run: all of them, unless a build with
  the same arguments was cut short there (its finished jobs are kept)."""
  bpd.make_output_dir(args.output_dir)
  path = os.path.join(args.output_dir, MANIFEST)
  want = _manifest(args, units)
  try:
    with tf.io.gfile.GFile(path) as f:
      same = json.load(f) == want
  except (tf.errors.NotFoundError, ValueError):
    same = False
  todo = [j for j in range(args.num_jobs)
          if not (same and all(tf.io.gfile.exists(p) for p in job_shards(args, j)))]
  if not same:
    bpd.prepare_output_dir(args.output_dir)
    atomic_io.write_json(path, want, indent=1)
  elif len(todo) < args.num_jobs:
    console.log(f"resuming: {args.num_jobs - len(todo)} of {args.num_jobs} jobs' shards are "
                f"already in {args.output_dir}" + ("" if todo else "; nothing to do"))
  return todo


def _dofn(args: BeamArgs, units: list[str], progress_dir: str | None):
  import apache_beam as beam

  class WriteJob(beam.DoFn):
    """One job a call; the tokenizer is made once per worker (setup)."""

    def setup(self):
      self._tokenizer = tokenization.FastTokenizer(
        args.vocab_file, do_lower_case=args.do_lower_case, strip_accents=args.strip_accents)

    def process(self, job_id):
      counts = write_job(job_id, args, units, self._tokenizer, progress_dir)
      for name in COUNTS:
        beam.metrics.Metrics.counter(__name__, name).inc(counts[name])
      yield counts

  return WriteJob()


def pipeline_options(beam_argv: Sequence[str], num_jobs: int, verbose: bool = False):
  """Beam options from `beam_argv`; default the DirectRunner, multi-processing, a worker a
  job up to the CPU count (one worker: in this process), the workers' logs from ERROR unless
  `verbose`."""
  from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

  beam_argv = list(beam_argv)
  if not verbose and not any(a.startswith("--default_sdk_harness_log_level") for a in beam_argv):
    beam_argv.append("--default_sdk_harness_log_level=ERROR")
  options = PipelineOptions(beam_argv)
  if options.view_as(StandardOptions).runner is None:
    options.view_as(StandardOptions).runner = "DirectRunner"
  direct = options.view_as(DirectOptions)
  if not direct.direct_num_workers:
    direct.direct_num_workers = max(1, min(num_jobs, os.cpu_count() or 1))
  if "--direct_running_mode" not in " ".join(beam_argv):
    # one worker: in this process (a worker process would only add its start-up)
    multi = direct.direct_num_workers > 1
    direct.direct_running_mode = "multi_processing" if multi else "in_memory"
  return options


def check_args(args: BeamArgs) -> None:
  bpd.check_shape_args(args.max_seq_length, args.num_jobs, args.num_out_files)
  if args.format not in beam_inputs.KINDS:
    raise ValueError(f"--format must be one of {', '.join(beam_inputs.KINDS)}, "
                     f"got {args.format!r}")
  bpd.check_vocab(args.vocab_file)


_ERROR = re.compile(r"(?:InputError|ValueError|FileNotFoundError|PermissionError): (.+)")


def worker_error(error: BaseException) -> str:
  """The one line of the error a worker raised (Beam returns it inside a long text)."""
  text = getattr(error, "message", None) or str(error)
  found = _ERROR.findall(text)
  line = found[-1].strip() if found else console.error_line(error)
  return re.sub(r" \[while running '[^']*'\]$", "", line)


@contextlib.contextmanager
def _quiet_fds(log: str, verbose: bool) -> Iterator[None]:
  """Sends this process's and its worker processes' stdout/stderr to `log` (Beam's start-up
  chatter) unless `verbose`; `sys.stderr` keeps the console through a duplicate."""
  if verbose:
    yield
    return
  sys.stdout.flush()
  sys.stderr.flush()
  saved = [os.dup(1), os.dup(2)]
  console_err = os.fdopen(os.dup(saved[1]), "w", buffering=1)
  old_stderr = sys.stderr
  with open(log, "w") as f:
    os.dup2(f.fileno(), 1)
    os.dup2(f.fileno(), 2)
  sys.stderr = console_err
  try:
    yield
  finally:
    sys.stderr = old_stderr
    console_err.close()
    os.dup2(saved[0], 1)
    os.dup2(saved[1], 2)
    for fd in saved:
      os.close(fd)


COUNTS = ("documents", "tokens", "examples", "bad_records", "bad_bytes", "empty")


def _close_client(result) -> None:
  """Closes the dask Client that Beam's DaskRunner opens and leaves open, so nothing of the run
  keeps reconnecting in this process (drawing from the global `random`) once it has ended."""
  client = getattr(result, "client", None)
  if client is not None:
    client.close()


def build(args: BeamArgs, beam_argv: Sequence[str] = (), verbose: bool = False) -> dict[str, int]:
  """Runs the pipeline; returns the totals of the jobs it ran (Beam counters)."""
  import logging as py_logging

  if not verbose:  # Beam's import-time warnings (no GCS client, no apitools) stay out
    # a worker's error comes back as this command's one line, not as Beam's log of it
    py_logging.getLogger("apache_beam").setLevel(py_logging.CRITICAL)
    root, level = py_logging.getLogger(), py_logging.getLogger().level
    root.setLevel(py_logging.ERROR)
  import apache_beam as beam
  from apache_beam.metrics.metric import MetricsFilter

  if not verbose:
    root.setLevel(level)
  check_args(args)
  units = job_units(args)
  todo = plan_jobs(args, units)
  start = time.time()
  totals = dict.fromkeys(COUNTS, 0)
  if not todo:
    return totals
  p = beam.Pipeline(options=pipeline_options(beam_argv, len(todo), verbose))
  with tempfile.TemporaryDirectory(prefix="electra-beam-") as scratch:
    progress_dir = os.path.join(scratch, "progress")
    os.mkdir(progress_dir)
    _ = (p | "jobs" >> beam.Create(todo) | "shuffle" >> beam.Reshuffle()
         | "write" >> beam.ParDo(_dofn(args, units, progress_dir)))
    log = os.path.join(scratch, "beam.log")
    with _quiet_fds(log, verbose), \
        ProgressLine(progress_dir, len(todo), sys.stderr) as progress:  # the console's stderr
      result = None
      try:
        result = p.run()
        result.wait_until_finish()
      except Exception as e:  # noqa: BLE001 -- a worker's error comes back wrapped in text
        raise ValueError(worker_error(e)) from None
      finally:
        _close_client(result)
    try:
      query = result.metrics().query(MetricsFilter().with_namespace(__name__))
      for counter in query["counters"]:
        totals[counter.key.metric.name] += counter.committed or 0
    except NotImplementedError:  # the DaskRunner has no metrics: the jobs' own reports
      for report in progress.reports():
        for name in COUNTS:
          totals[name] += report.get("counts", {}).get(name, 0)
  seconds = time.time() - start
  console.log(f"wrote {totals['examples']} examples of {totals['documents']} documents "
              f"({totals['tokens']} tokens, {totals['bad_records']} bad records skipped, "
              f"{totals['bad_bytes']} non-UTF-8 bytes replaced, {totals['empty']} empty files) in "
              f"{seconds:.1f}s: {totals['tokens'] / max(seconds, 1e-9):.0f} tokens/s "
              f"-> {args.output_dir}")
  return totals


def define_flags() -> None:
  flags.DEFINE_string("input", None, "A folder, file or glob (any tf.io.gfile path, gs://), "
                      "or with --format tfds a dataset name (wikipedia/20230601.en[:version]).")
  flags.DEFINE_enum("format", "text", list(beam_inputs.KINDS), "Input format.")
  flags.DEFINE_string("text_field", "text", "JSON field, Parquet column or TFDS feature.")
  flags.DEFINE_string("text_column", None, "Parquet column (same as --text_field).")
  flags.DEFINE_string("tfds_split", "train", "TFDS split.")
  flags.DEFINE_string("tfds_data_dir", None, "TFDS data folder (default ~/tensorflow_datasets).")
  flags.DEFINE_string("vocab_file", None, "Location of vocabulary file.")
  flags.DEFINE_string("output_dir", None, "Where to write out the tfrecords.")
  flags.DEFINE_integer("num_jobs", 1, "Jobs (the builder's --num_processes): each is one "
                       "Beam element with its own seed and shards.")
  flags.DEFINE_bool("blanks_separate_docs", True, "Blank lines end documents.")
  flags.DEFINE_integer("seed", 0, "Seed of the splits, lengths and file order (per job: "
                       "job_seed(seed, job)).")
  bpd.define_tokenizing_flags()
  flags.DEFINE_bool("strict", False, "Stop at the first bad record instead of skipping it.")
  flags.mark_flags_as_required(["input", "vocab_file", "output_dir"])


def main(argv: Sequence[str]) -> None:
  f = flags.FLAGS
  args = BeamArgs(
    input=f.input, vocab_file=f.vocab_file, output_dir=f.output_dir, format=f.format,
    text_field=f.text_column or f.text_field, tfds_split=f.tfds_split,
    tfds_data_dir=f.tfds_data_dir, max_seq_length=f.max_seq_length, num_jobs=f.num_jobs,
    blanks_separate_docs=f.blanks_separate_docs, do_lower_case=f.do_lower_case,
    strip_accents=f.strip_accents, num_out_files=f.num_out_files, seed=f.seed,
    chunk_lines=f.chunk_lines, strict=f.strict)
  build(args, argv[1:], verbose=f.verbose)


if __name__ == "__main__":
  define_flags()
  console.run(main, "build_pretraining_data_beam", bpd.normalize_argv(sys.argv))
