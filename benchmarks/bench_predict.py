r"""predict on a big file: rows per second and flat memory, SavedModel and int8 LiteRT.

The model: the golden lane's tiny fine-tuned RTE head (``tests/helpers/tiny_litert.py``:
hidden 32, 2 layers, sequence 64), exported to a SavedModel and an int8 ``.tflite`` once into
``--work_dir``. CSVs of labelled sentence pairs are labelled by ``python -m electra_tf.predict``
in a subprocess, which reports rows/s (its own figure: featurisation and the model) and its
peak resident memory (VmHWM):

- speed: ``--speed_rows`` rows (default 20,000) with the SavedModel at ``--batch_size`` 1 and
  32, and the int8 ``.tflite`` likewise (LiteRT runs one row per call whatever
  ``--batch_size``; the batch printed is the one predict says it ran);
- memory: the int8 ``.tflite`` on ``--rows`` rows (default 1,000,000) and on a tenth of them.
  The ratio of the two peaks is printed: streaming keeps it near 1;
- CoNLL memory: the golden lane's tiny chunk tagging head (int8 ``.tflite``) on a CoNLL file of
  ``--conll_sentences`` unlabelled sentences (default 200,000, 8 words each; 0 skips it) and on
  a tenth of them, and the ratio of the two peaks. Unlabelled, so that no scorer keeps a row:
  the peaks are those of reading, checking, predicting and writing.

  nice -n 10 python benchmarks/bench_predict.py [--rows=1000000] [--speed_rows=20000] \
      [--conll_sentences=200000] [--tables=false] [--work_dir=/tmp/bench_predict]
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

_REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))
sys.path.insert(0, str(_REPO / "tests"))
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from absl import app, flags  # noqa: E402

flags.DEFINE_integer("rows", 1_000_000, "Rows of the memory run's CSV.")
flags.DEFINE_integer("speed_rows", 20_000, "Rows of the speed runs' CSV.")
flags.DEFINE_integer("conll_sentences", 200_000, "Sentences of the CoNLL memory run (0: none).")
flags.DEFINE_bool("tables", True, "Run the CSV speed and memory runs.")
flags.DEFINE_string("work_dir", "/tmp/bench_predict", "The model and CSV are kept here.")
FLAGS = flags.FLAGS
PAIRS = [("A man is playing a flute.", "A man plays the flute.", "entailment"),
         ("The cat sat on the mat all afternoon.", "Nobody was home.", "not_entailment")]


def _rows(path: pathlib.Path, n: int) -> pathlib.Path:
  if not path.exists():
    with open(path, "w", encoding="utf-8") as f:
      f.write("text_a,text_b,label\n")
      for i in range(n):
        a, b, label = PAIRS[i % 2]
        f.write(f"{a} ({i}),{b},{label}\n")
  return path


def _conll(path: pathlib.Path, n: int) -> pathlib.Path:
  """``n`` unlabelled CoNLL sentences (one word a line, a blank line after each)."""
  if not path.exists():
    with open(path, "w", encoding="utf-8") as f:
      for i in range(n):
        f.write(f"The\ncat\nsat\non\nthe\nmat\nnumber\n{i}\n\n")
  return path


# predict as `python -m electra_tf.predict`, printing its own peak resident memory at exit
# (VmHWM: ru_maxrss would carry over the parent's peak through fork)
WRAPPER = ("import atexit, re, runpy, sys; atexit.register(lambda: print('peak_kb', re.search("
           "r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1), file=sys.stderr)); "
           "sys.argv = ['predict'] + sys.argv[1:]; "
           "runpy.run_module('electra_tf.predict', run_name='__main__')")


def _run(model: pathlib.Path, rows: pathlib.Path, batch: int) -> tuple[float, float, str]:
  """(rows/s, peak RSS MB, the batch predict says it ran) of one predict run."""
  out = rows.with_suffix(f".b{batch}.csv")
  proc = subprocess.run([sys.executable, "-c", WRAPPER, f"--model={model}", f"--input={rows}",
                         f"--output={out}", f"--batch_size={batch}"], cwd=_REPO,
                        capture_output=True, text=True,
                        env={**os.environ, "PYTHONPATH": str(_REPO)})
  if proc.returncode != 0:
    raise SystemExit(f"predict failed: {proc.stderr.strip().splitlines()[-1:]}")
  speed = re.search(r"([\d.]+) examples/s .*?(batch \d+)", proc.stdout)
  peak = re.search(r"peak_kb (\d+)", proc.stderr)
  out.unlink()
  return float(speed.group(1)), int(peak.group(1)) / 1024, speed.group(2)


def _tables(work: pathlib.Path, export: pathlib.Path) -> None:
  speed_rows = _rows(work / f"rows_{FLAGS.speed_rows}.csv", FLAGS.speed_rows)
  for name, model in (("SavedModel", export / "saved_model"),
                      ("int8 .tflite", export / "litert" / "int8.tflite")):
    for batch in (1, 32):
      speed, peak, ran = _run(model, speed_rows, batch)
      print(f"{name:<13} --batch_size {batch:>2} (ran {ran}), {FLAGS.speed_rows} rows: "
            f"{speed:8.1f} rows/s, peak memory {peak:.0f} MB")
  peaks = {}
  for n in (FLAGS.rows // 10, FLAGS.rows):
    speed, peaks[n], _ = _run(export / "litert" / "int8.tflite",
                              _rows(work / f"rows_{n}.csv", n), 32)
    print(f"int8 .tflite, {n} rows: {speed:8.1f} rows/s, peak memory {peaks[n]:.1f} MB")
  small, big = FLAGS.rows // 10, FLAGS.rows
  print(f"int8 .tflite peak memory, {big} rows vs {small}: {peaks[big]:.1f} / "
        f"{peaks[small]:.1f} MB = ratio {peaks[big] / peaks[small]:.2f}")


def _conll_runs(work: pathlib.Path, model: pathlib.Path) -> None:
  peaks = {}
  small, big = FLAGS.conll_sentences // 10, FLAGS.conll_sentences
  for n in (small, big):
    speed, peaks[n], _ = _run(model, _conll(work / f"sentences_{n}.conll", n), 32)
    print(f"int8 .tflite (chunk), CoNLL {n} sentences: {speed:8.1f} rows/s, peak memory "
          f"{peaks[n]:.1f} MB")
  print(f"int8 .tflite (chunk) peak memory, CoNLL {big} sentences vs {small}: "
        f"{peaks[big]:.1f} / {peaks[small]:.1f} MB = ratio {peaks[big] / peaks[small]:.2f}")


def main(argv: list[str]) -> None:
  del argv
  from helpers import tiny_litert

  work = pathlib.Path(FLAGS.work_dir)
  export = work / "tiny" / "export"
  chunk = work / "tiny_chunk" / "export"
  print(f"predict (tiny models, sequence 64), {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}")
  if FLAGS.tables:
    if not (export / "litert" / "int8.tflite").exists():
      tiny_litert.build(work / "tiny")
    print("labelled CSV rows, RTE head:")
    _tables(work, export)
  if FLAGS.conll_sentences:
    if not (chunk / "litert" / "int8.tflite").exists():
      tiny_litert.build(work / "tiny_chunk", ("chunk",))
    _conll_runs(work, chunk / "litert" / "int8.tflite")


if __name__ == "__main__":
  app.run(main)
