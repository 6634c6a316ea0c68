"""Cost of the masking stage alone, per setting, on real pre-training batches.

Reads ``--batches`` batches of ``--batch_size`` examples from a data folder's
``pretrain_tfrecords`` (e.g. the demo's, ``demo_out``) and its ``vocab.txt``, then times the
masking stage of one training step (``objective.mask``: ``token``, ``whole_word``, ``span``)
compiled with ``tf.function``, the settings interleaved, ``--repeats`` rounds over the batches,
the best round kept. It prints milliseconds per batch for each, to put beside a run's step time
(``run_pretraining.py``'s ``SPS``).

  python benchmarks/bench_masking.py --data_dir demo_out [--batch_size 32 --max_seq_length 128]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402

from electra_tf.pretraining import data, masking, word_masking  # noqa: E402
from electra_tf.pretraining import objective as objective_lib  # noqa: E402


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data_dir", required=True)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--mask_prob", type=float, default=0.15)
  parser.add_argument("--batches", type=int, default=20)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args()
  vocab_file = os.path.join(args.data_dir, "vocab.txt")
  pattern = os.path.join(args.data_dir, "pretrain_tfrecords", "pretrain_data.tfrecord*")
  batches = list(data.pretraining_dataset(pattern, args.batch_size, args.max_seq_length,
                                          is_training=False).take(args.batches))
  special = tuple(masking.read_special_ids(vocab_file, masking.NEVER_MASKED).items())
  continuation = tf.constant(word_masking.continuation_table(vocab_file))
  n = int((args.mask_prob + 0.005) * args.max_seq_length)
  steps = {}
  for kind in word_masking.MASKINGS:
    obj = objective_lib.Objective(objective_lib.ELECTRA, objective_lib.OWN_TOWER,
                                  int(continuation.shape[0]), mask_prob=args.mask_prob,
                                  max_predictions_per_seq=n, special_ids=special, masking=kind)

    @tf.function
    def step(features, seed, obj=obj):
      out = objective_lib.mask(masking.features_to_inputs(features), obj, seed=seed,
                               continuation=continuation)
      return tf.reduce_sum(out.masked_lm_weights)

    steps[kind] = step
  best = {kind: float("inf") for kind in steps}
  masked = {}
  for r in range(args.repeats + 1):  # round 0 traces: untimed
    for kind, step in steps.items():
      start = time.perf_counter()
      total = sum(float(step(b, tf.constant([1, i], tf.int64))) for i, b in enumerate(batches))
      if r:
        best[kind] = min(best[kind], (time.perf_counter() - start) / len(batches))
      masked[kind] = total / (len(batches) * args.batch_size)
  print(f"masking stage, batch {args.batch_size} x {args.max_seq_length}, best of "
        f"{args.repeats} rounds over {len(batches)} batches:")
  for kind in steps:
    print(f"  {kind:<10} {1000 * best[kind]:7.2f} ms a batch, {masked[kind]:.2f} pieces "
          "masked a row")


if __name__ == "__main__":
  main()
