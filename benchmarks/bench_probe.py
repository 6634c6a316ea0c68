"""Cost of the downstream probe during pre-training, at ELECTRA-Small shapes.

Two pre-training runs of ``configs/electra_small.json`` (12 layers, hidden 256, batch 128,
sequence 128; vocabulary ``../shared/reference/vocab.txt``, 30,522 WordPieces) on wikitext-2
text, side by side in one process: one without the probe, one with ``--probe_task sst``
(SST-2's first ``--probe_rows`` train and ``--probe_dev_rows`` dev rows, the defaults 500 and
500) probing every ``--steps / 2`` steps. It times the training steps of both (after the first
log interval, which traces the step) and each probe of the second (encoding the rows with the
run's discriminator, choosing the ridge penalty, fitting, scoring), and the random-init
reference computed once before the run (``during_pretraining.SEEDS``). The last line is the
probe's share of the training time at the defaults: one probe every ``--probe_every`` (1000) steps.

  python benchmarks/bench_probe.py [--data_dir=../shared/data] [--steps=6]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from data_prep import build_pretraining_dataset as bpd  # noqa: E402
from electra_tf.config import PretrainingConfig  # noqa: E402
from electra_tf.hparams_input import load_hparams  # noqa: E402
from electra_tf.pretraining.run import train_or_eval  # noqa: E402
from electra_tf.probing import during_pretraining as dp  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]


class Timed:
  """Passed to ``train_or_eval`` as its probe: records when each log interval ends and, with
  a probe, attaches it and times each of its calls."""

  def __init__(self, probe: dp.RunProbe | None = None):
    self.probe, self.ticks, self.probe_seconds = probe, [], []

  def attach(self, trainer, encoder, start_step: int) -> None:
    trainer.interval_hooks = (*trainer.interval_hooks, self._tick)
    if self.probe is not None:
      self.probe.attach(trainer, encoder, start_step)
      hook = trainer.interval_hooks[-1]
      trainer.interval_hooks = (*trainer.interval_hooks[:-1], self._timed(hook))

  def _tick(self, step: int, logged) -> None:
    self.ticks.append((step, time.perf_counter()))

  def _timed(self, hook):
    def call(step, logged):
      start = time.perf_counter()
      hook(step, logged)
      if self.probe.history and self.probe.history[-1]["step"] == step:
        self.probe_seconds.append(time.perf_counter() - start)
    return call

  def step_seconds(self) -> float:
    """Seconds per training step after the first interval, the probes' time left out."""
    (first, t0), (last, t1) = self.ticks[0], self.ticks[-1]
    return (t1 - t0 - sum(self.probe_seconds[:-1])) / (last - first)


def build_data(root: pathlib.Path, data_dir: pathlib.Path, vocab: str, max_mb: float) -> None:
  corpus = root / "corpus"
  corpus.mkdir()
  with open(data_dir / "wikitext2" / "wiki.test.raw", encoding="utf-8") as f:
    (corpus / "wiki.txt").write_text(f.read(int(max_mb * 2**20)), encoding="utf-8")
  bpd.build(bpd.BuildArgs(corpus_dir=str(corpus), vocab_file=vocab,
                          output_dir=str(root / "pretrain_tfrecords"), max_seq_length=128,
                          num_out_files=2, seed=1))
  (root / "vocab.txt").write_bytes(pathlib.Path(vocab).read_bytes())
  (root / "finetuning_data").mkdir()
  (root / "finetuning_data" / "sst").symlink_to(data_dir / "glue" / "SST-2")


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--data_dir", default=str(REPO.parent / "shared" / "data"))
  p.add_argument("--vocab_file", default=None, help="default: <data_dir>/../reference/vocab.txt")
  p.add_argument("--steps", type=int, default=6, help="training steps of each run (even)")
  p.add_argument("--probe_rows", type=int, default=500)
  p.add_argument("--probe_dev_rows", type=int, default=500)
  p.add_argument("--probe_every", type=int, default=1000, help="the interval the cost is for")
  p.add_argument("--max_mb", type=float, default=1.5, help="MB of wikitext-2 test text")
  args = p.parse_args()
  data_dir = pathlib.Path(args.data_dir)
  vocab = args.vocab_file or str(data_dir.parent / "reference" / "vocab.txt")
  hparams = load_hparams(str(REPO / "configs" / "electra_small.json"))
  half = args.steps // 2
  hparams.update(num_train_steps=2 * half, iterations_per_loop=half, num_warmup_steps=1,
                 save_checkpoints_steps=10**6, keep_checkpoint_max=1, seed=1)
  with tempfile.TemporaryDirectory() as tmp:
    root = pathlib.Path(tmp)
    build_data(root, data_dir, vocab, args.max_mb)
    quiet = lambda line: None  # noqa: E731
    plain = Timed()
    train_or_eval(PretrainingConfig("plain", str(root), **hparams), log_fn=quiet,
                  probe=plain, check_data=False)
    config = PretrainingConfig("probed", str(root), **hparams)
    settings = dp.ProbeSettings("sst", str(root), args.probe_rows, args.probe_dev_rows, half,
                                128)
    start = time.perf_counter()
    probe = dp.prepare(config, settings, log_fn=quiet)
    reference_seconds = time.perf_counter() - start
    probed = Timed(probe)
    train_or_eval(config, log_fn=quiet, probe=probed, check_data=False)
  step, step_probed = plain.step_seconds(), probed.step_seconds()
  per_probe = min(probed.probe_seconds)  # the first probe of a process also traces
  print(f"ELECTRA-Small, batch 128 x 128, {2 * half} steps per run; probe: SST-2, "
        f"{len(probe.rows.train)} train / {len(probe.rows.dev)} dev rows")
  print(f"training: {step:.2f} s/step without the probe, {step_probed:.2f} s/step with it "
        "(its probes' own time left out)")
  print("probe: " + ", ".join(f"{s:.2f} s" for s in probed.probe_seconds)
        + f" (first one traces the encoder); random-init reference once before step 1: "
        f"{reference_seconds:.1f} s ({len(dp.SEEDS)} seeds, reading the task included)")
  walls = [t.ticks[-1][1] - t.ticks[0][1] for t in (plain, probed)]
  print(f"steps {half + 1}-{2 * half} took {walls[0]:.1f} s without the probe, {walls[1]:.1f} s "
        f"with it (its probe at step {half} included)")
  print(f"probe cost at the defaults (one probe every {args.probe_every} steps): "
        f"{per_probe:.2f} s / ({args.probe_every} x {step:.2f} s) = "
        f"{100 * per_probe / (args.probe_every * step):.3f}% of training time; the reference "
        f"adds {100 * reference_seconds / (args.probe_every * 10 * step):.3f}% over the first "
        f"{10 * args.probe_every} steps")
  print(f"probe / training time ratio at the defaults: "
        f"{per_probe / (args.probe_every * step):.5f}")


if __name__ == "__main__":
  main()
