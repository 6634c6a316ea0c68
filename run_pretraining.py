r"""Pre-trains ELECTRA, Electric or a masked LM (official ``run_pretraining.py`` in TF2).

  python run_pretraining.py --data_dir D --model_name M --hparams '{"model_size": "small"}'

(``--data-dir`` / ``--model-name`` also work.) Layout, as official:
  D/pretrain_tfrecords/pretrain_data.tfrecord*   examples (data_prep/build_pretraining_dataset.py)
  D/vocab.txt                                    WordPiece vocabulary (vocab_size lines)
  D/models/M/                                    checkpoints ckpt-<step>, TensorBoard events,
                                                 hparams.json + vocab.txt (the model's shape),
                                                 config.json (every hparam of the last run)
  D/models/M/eval/                               eval TensorBoard events
  D/models/M/results/unsup_results.txt           eval metrics (``do_eval``); an eval-only
                                                 run's hparams in unsup_config.json

The console shows a few lines of settings (model shape, objective, batch, steps, data, where
the full config is written), then progress lines; ``--verbose`` also prints the full config.

Ctrl-C or SIGTERM stops after the step in progress and saves it (exit 130 / 143). Rerunning
the same command resumes from the newest complete checkpoint in D/models/M, whatever its
``checkpoint`` state file says (``--restart`` renames the folder aside and starts afresh); its
hparams.json gives the model's shape (a --hparams value contradicting it is an error). With
no checkpoint there, the ``init_checkpoint`` hparam (an official TF1 checkpoint, one of ours,
a convert output folder or a Hugging Face ELECTRA folder; its shape is read or inferred from
it) gives the starting weights, Adam slots if it has them, and the global step (so, as the
official README says for the released models, raise ``num_train_steps`` past the checkpoint's
step).
``do_train`` then ``do_eval`` (the official allows only one; both is train, then evaluate).
This script only parses flags; the work is ``electra_tf.pretraining.run.train_or_eval``.

Randomness: the ``seed`` hparam seeds initialisation, the data order, and masking, generator
sampling and dropout. The last three are stateless, drawn from ``[seed, step * replicas +
replica]`` (each dropout site folds in its own index), so they do not depend on where a run was
resumed; a resumed run rebuilds the seeded data stream and skips the batches already consumed,
so it trains on the batches an uninterrupted run would. A run killed any number of times (even
during a save) and rerun ends with weights and Adam slots bit-identical to an uninterrupted
one (tests/training/test_resume_exact.py). The skipped examples are read and parsed again:
``benchmarks/bench_resume_skip.py`` measures the rate. Without the hparam a seed is drawn and
logged for initialisation, masking, sampling and dropout, and the data order is the official
non-deterministic one, restarted on a resume.

Each log line (every ``iterations_per_loop`` steps) writes TensorBoard scalars averaged over the
interval: ``total_loss``, ``mlm_loss`` (generator), ``disc_loss``, ``learning_rate``, the
official eval metrics streamed over the interval's examples (``masked_lm_accuracy``,
``sampled_masked_lm_accuracy``, ``disc_accuracy`` / ``precision`` / ``recall`` / ``auc``),
``examples_per_second`` and ``model_flops_utilization`` (official FLOP counting, see
``electra_tf.pretraining.flops.train_flops_per_example``). When the discriminator's recall
stays below 0.01 for 3 log intervals after warmup (its AUC not rising), one console line says so
and what to try, once, also written to TensorBoard (``disc_collapse`` text, ``disc_collapsed``
scalar; ``electra_tf/pretraining/collapse.py``, docs/collapse.md).
"""

from __future__ import annotations

from electra_tf import early_interrupt  # noqa: I001 -- first: Ctrl-C while loading is one line

if __name__ == "__main__":
  early_interrupt.install()

import os
import sys
import time
from collections.abc import Sequence

from electra_tf import console  # noqa: I001 -- quiet_logs, use_tf_keras before TensorFlow loads

if __name__ == "__main__":
  console.quiet_logs(sys.argv)
  console.require_tensorflow("run_pretraining.py")  # a device install: one line, no traceback
console.use_tf_keras()

from absl import flags  # noqa: E402

from electra_tf.cli import data_dir_and_model_name  # noqa: E402
from electra_tf.console import log  # noqa: E402

FLAGS = flags.FLAGS
PRECISIONS = ("none", "auto", "bfloat16", "float16")


def define_flags() -> None:
  """Command-line flags (defined on demand, so that importing this module defines none)."""
  from electra_tf.probing.during_pretraining import define_flags as define_probe_flags
  from electra_tf.training.runtime import define_strategy_flag

  flags.DEFINE_string("data_dir", None, "Folder with pretrain_tfrecords/, vocab.txt, models/.")
  flags.DEFINE_string("data-dir", None, "Official spelling of --data_dir.")
  flags.DEFINE_string("model_name", None, "Name of the model (folder under models/).")
  flags.DEFINE_string("model-name", None, "Official spelling of --model_name.")
  flags.DEFINE_string("hparams", "{}", "Pre-training hparams: a JSON dict or a .json file.")
  define_strategy_flag("; the use_tpu hparam selects tpu unless this is set")
  flags.DEFINE_integer("num_gpus", None, "GPUs to use (default: every visible GPU).")
  flags.DEFINE_string("tpu", None, "TPU name or address ('' = local; default: tpu_name hparam).")
  flags.DEFINE_bool("jit_compile", False, "XLA-compile the forward and backward pass.")
  flags.DEFINE_bool("xla_elementwise", False, "XLA-compile only each layer's elementwise work "
                    "(GELU, softmax + dropout, dropout + residual + LayerNorm) in training; the "
                    "matmuls stay with TensorFlow's kernels (on a CPU: with --mixed_precision, "
                    "where XLA would compute bfloat16 matmuls in float32).")
  flags.DEFINE_enum("mixed_precision", "none", PRECISIONS,
                    "Compute dtype; float16 adds dynamic loss scaling. Weights stay float32. "
                    "auto: bfloat16 where the device has bfloat16 units (AMX / AVX512-BF16 "
                    "CPUs, GPUs of compute capability >= 8.0, TPUs), else float32.")
  flags.DEFINE_enum("check_data", "auto", ["auto", "true", "false"],
                    "Read every data shard once before step 1 and report every bad one "
                    "(auto: when the shards total < 1 GiB).")
  flags.DEFINE_bool("restart", False, "Start from step 0 even though the model folder holds "
                    "checkpoints: it is first renamed to <folder>.before-restart-<n>.")
  flags.DEFINE_float("lost_worker_secs", 60, "Several workers: one silent this long counts as "
                     "lost; the others stop with one line (docs/stopping.md).")
  flags.DEFINE_float("peak_tflops", None, "Peak TFLOP/s of one device for MFU (default: looked "
                     "up for known GPUs, estimated for CPUs; see electra_tf/training/hardware.py).")
  define_probe_flags()


def main(argv: Sequence[str]) -> None:
  data_dir, model_name = data_dir_and_model_name(list(argv))
  from electra_tf import folder_lock
  from electra_tf.hparams_input import load_hparams
  from electra_tf.reading.model_source import pretraining_config
  from electra_tf.training import restart

  model_dir = os.path.join(data_dir, "models", model_name)
  if restart.is_chief():  # a second run on the folder: refused in its first line
    folder_lock.check_free(model_dir)
  if FLAGS.restart:  # before the config, which reads the old model's hparams.json
    restart.restart(model_dir, log)

  # hparams first: their errors need no model building
  config = pretraining_config(model_name, data_dir, load_hparams(FLAGS.hparams), console.log)
  from electra_tf import training

  name = FLAGS.distribution_strategy
  if config.use_tpu and not FLAGS["distribution_strategy"].present:
    name = "tpu"
  tpu = FLAGS.tpu if FLAGS.tpu is not None else (config.tpu_name or "")
  strategy = training.get_strategy(name, FLAGS.num_gpus, tpu=tpu if name == "tpu" else None,
                                   lost_worker_secs=FLAGS.lost_worker_secs)
  precision = None if FLAGS.mixed_precision == "none" else FLAGS.mixed_precision
  peak = FLAGS.peak_tflops * 1e12 if FLAGS.peak_tflops else None
  start = time.perf_counter()
  check = {"auto": None, "true": True, "false": False}[FLAGS.check_data]
  from electra_tf.pretraining.run import train_or_eval
  from electra_tf.pretraining.summary import print_summary
  from electra_tf.probing import during_pretraining
  from electra_tf.training import lost_worker

  probe = during_pretraining.from_flags(FLAGS, config, strategy, data_dir)  # before seeding
  with lost_worker.reported(name == "multi_worker_mirrored",  # a lost peer: one line, at once
                            lambda: training.latest_checkpoint(config.model_dir)):
    results = train_or_eval(config, strategy, FLAGS.jit_compile, precision, peak,
                            check_data=check, probe=probe,
                            xla_elementwise=FLAGS.xla_elementwise)
  print_summary(config, results, time.perf_counter() - start, probe)


if __name__ == "__main__":
  define_flags()
  console.run(main, "run_pretraining.py")
