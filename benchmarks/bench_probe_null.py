"""How often the probe's verdict says "above random init" when the features are random.

A run's reference is the probe of random-init encoders (``during_pretraining.SEEDS``). Here each
"run" is another random-init encoder of the same shape (seeds after the reference's pool),
probed on the same rows exactly as a pre-training run's discriminator is (``probe.evaluate``,
mean pooling, ``paired.against_every``): its features carry no more of the task than random
init, so every "above" is a false one. For each reference size in ``--seeds`` (seeds 1-N) and
each run length in ``--probes`` (each probe at level 0.05 / probes) it prints how many draws
were "above", and what the old rule (the better pooling above the seeds' mean + 1 SD) said of
the same draws.

  python benchmarks/bench_probe_null.py [--data_dir=demo_out] [--task=topic] [--draws=60] \
      [--seeds 3 5] [--probes 1 2 8]

Defaults: the demo's task, shape and probe sizes (``bash run_demo.sh``'s first 3 steps write
``demo_out/vocab.txt`` and ``demo_out/finetuning_data/topic``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from electra_tf.config import PretrainingConfig  # noqa: E402
from electra_tf.probing import during_pretraining as dp  # noqa: E402
from electra_tf.probing import paired  # noqa: E402

DEMO_SHAPE = {"model_size": "small", "model_hparam_overrides": {"num_hidden_layers": 2}}


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--data_dir", default="demo_out", help="holds finetuning_data/<task>/")
  p.add_argument("--task", default="topic")
  p.add_argument("--vocab_file", default=None, help="default: <data_dir>/vocab.txt")
  p.add_argument("--shape", default=json.dumps(DEMO_SHAPE), help="hparams giving the shape")
  p.add_argument("--rows", type=int, default=384, help="train rows (--probe_rows)")
  p.add_argument("--dev_rows", type=int, default=384, help="dev rows (--probe_dev_rows)")
  p.add_argument("--max_seq_length", type=int, default=64)
  p.add_argument("--probes", type=int, nargs="+", default=[1, 2, 8],
                 help="probes per run (the demo makes 8)")
  p.add_argument("--seeds", type=int, nargs="+", default=[3, 5],
                 help="reference seed counts compared (the run's is len(SEEDS))")
  p.add_argument("--draws", type=int, default=60, help="random-init encoders probed")
  args = p.parse_args()
  vocab = args.vocab_file or os.path.join(args.data_dir, "vocab.txt")
  with open(vocab, encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)
  config = PretrainingConfig("null", args.data_dir, vocab_file=vocab, vocab_size=vocab_size,
                             **json.loads(args.shape))
  settings = dp.ProbeSettings(args.task, args.data_dir, args.rows, args.dev_rows,
                              max_seq_length=args.max_seq_length)
  rows = dp.checked_probe_rows(config, settings)
  start = time.perf_counter()
  pool = dp.compute_reference(rows, config, tuple(range(1, 1 + max(args.seeds))))
  first = max(args.seeds) + 1
  draws = dp.compute_reference(rows, config, tuple(range(first, first + args.draws)))
  seconds = time.perf_counter() - start
  print(f"{args.task}: {len(rows.train)} train / {len(rows.dev)} dev rows, dev "
        f"{rows.metric_name}; random-init seeds 1-{first - 1} (the reference's pool): "
        f"mean-pooled {', '.join(f'{v:.3f}' for v in pool.mean)}; {args.draws} random-init "
        f"draws (seeds {first}-{first + args.draws - 1}): mean-pooled {min(draws.mean):.3f}-"
        f"{max(draws.mean):.3f} ({seconds:.0f} s)")
  for count in args.seeds:
    losses = pool.losses[:count]
    for probes in args.probes:
      alpha = paired.probe_alpha(probes)
      above = sum(paired.against_every(d, losses, alpha).above for d in draws.losses)
      print(f"reference seeds 1-{count}, level 0.05/{probes} (a run of {probes} probe(s)): "
            f"above random init in {above} of {args.draws} draws "
            f"({100 * above / args.draws:.1f}%), not above in "
            f"{100 * (1 - above / args.draws):.1f}%")
    cls, mean = pool.cls[:count], pool.mean[:count]
    best = max((cls, mean), key=np.mean)  # the old reference's pooling
    old = sum(max(c, m) > np.mean(best) + np.std(best, ddof=1)
              for c, m in zip(draws.cls, draws.mean, strict=True))
    print(f"reference seeds 1-{count}, old rule (the better pooling > the better seed mean + "
          f"1 SD): 'beat' in {old} of {args.draws} draws ({100 * old / args.draws:.1f}%)")


if __name__ == "__main__":
  main()
