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

Randomness: the ``seed`` hparam seeds initialisation, the data order, and masking, generator
sampling and dropout. The last three are stateless, drawn from ``[seed, step * replicas +
replica]`` (each dropout site folds in its own index), so they do not depend on where a run was
resumed; a resumed run rebuilds the seeded data stream and skips the batches already consumed,
so it trains on the batches an uninterrupted run would. A run killed any number of times (even
during a save) and rerun ends with weights and Adam slots bit-identical to an uninterrupted
one (tests/test_resume_exact.py). The skipped examples are read and parsed again:
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
from collections.abc import Callable, Sequence
from typing import Any

from electra_tf import console  # noqa: I001 -- console.quiet must run before TensorFlow loads

if __name__ == "__main__":
  console.quiet(sys.argv)
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from absl import flags  # noqa: E402

from electra_tf.cli import data_dir_and_model_name  # noqa: E402
from electra_tf.console import log  # noqa: E402

FLAGS = flags.FLAGS
PRECISIONS = ("none", "bfloat16", "float16")


def define_flags() -> None:
  """Command-line flags (defined on demand, so that importing this module defines none)."""
  from electra_tf.probing.during_pretraining import define_flags as define_probe_flags
  from electra_tf.training.runtime import STRATEGIES

  flags.DEFINE_string("data_dir", None, "Folder with pretrain_tfrecords/, vocab.txt, models/.")
  flags.DEFINE_string("data-dir", None, "Official spelling of --data_dir.")
  flags.DEFINE_string("model_name", None, "Name of the model (folder under models/).")
  flags.DEFINE_string("model-name", None, "Official spelling of --model_name.")
  flags.DEFINE_string("hparams", "{}", "Pre-training hparams: a JSON dict or a .json file.")
  flags.DEFINE_enum("distribution_strategy", "one_device", STRATEGIES,
                    "tf.distribute strategy; the use_tpu hparam selects tpu unless this is set.")
  flags.DEFINE_integer("num_gpus", None, "GPUs to use (default: every visible GPU).")
  flags.DEFINE_string("tpu", None, "TPU name or address ('' = local; default: tpu_name hparam).")
  flags.DEFINE_bool("jit_compile", False, "XLA-compile the forward and backward pass.")
  flags.DEFINE_enum("mixed_precision", "none", PRECISIONS,
                    "Compute dtype; float16 adds dynamic loss scaling. Weights stay float32.")
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


def train_or_eval(config: Any, strategy: Any = None, jit_compile: bool = False,
                  mixed_precision: str | None = None, peak_flops: float | None = None,
                  log_fn: Callable[[str], None] = log, check_data: bool | None = None,
                  probe: Any = None) -> dict[str, dict[str, float]]:
  """Pre-trains and/or evaluates as ``config`` says (official ``train_or_eval``).

  Returns ``{"start": {"global_step": restored step}, "train": last logged values, "eval":
  eval results}`` (the parts that ran).
  ``check_data``: read every shard before step 1 (True), never (False), or when the data is
  small (None, < 1 GiB). ``probe``: a ``probing.during_pretraining.RunProbe`` to attach.
  """
  import tensorflow as tf

  from electra_tf import training
  from electra_tf.pretraining import data_check, run_settings, task
  from electra_tf.reading import model_dir
  from electra_tf.training import input_state

  if (config.do_eval and not config.do_train and not config.init_checkpoint
      and training.latest_checkpoint(config.model_dir) is None):
    raise ValueError(f"nothing to evaluate: no checkpoint in {config.model_dir} and no "
                     "init_checkpoint hparam")
  if config.debug and config.do_train and tf.io.gfile.exists(config.model_dir):
    log_fn(f"debug: deleting {config.model_dir} (official behaviour)")
    tf.io.gfile.rmtree(config.model_dir)
  # A few lines of settings; every hparam goes to config.json once the setup checks passed.
  log_fn("\n".join(run_settings.settings_lines(config, run_settings.full_config_path(config),
                                               training.latest_checkpoint(config.model_dir))))
  if console.is_verbose():
    log_fn(config.to_json())
  run = task.build_run(config, strategy, jit_compile, mixed_precision, peak_flops, log_fn)
  data_check.check_data(config.pretrain_tfrecords, config.max_seq_length, config.vocab_size,
                        check=check_data, log_fn=log_fn)  # after build_run's setup checks
  try:
    start = run.trainer.restore_or_initialize()
  except training.NonFiniteCheckpointError as e:
    raise e.with_advice("rerun with --restart to start afresh (it moves the model folder "
                        "aside)") from None
  results: dict[str, dict[str, float]] = {"start": {"global_step": start}}
  run_settings.write_full_config(config, run.trainer.is_chief)
  if probe is not None and config.do_train:
    probe.attach(run.trainer, run.model.discriminator, start)
  if config.do_train:
    model_dir.write_model_files(config.model_dir, config, config.vocab_file)
    log_fn("=" * 80 + f"\nRunning training from step {start}\n" + "=" * 80)
    # Seeded: a resumed stream continues the uninterrupted one (the consumed batches are
    # skipped); unseeded: the official non-deterministic order restarts.
    # A saved input state continues it without re-reading (training/input_state.py).
    skip = task.consumed_steps(config, start, log_fn)
    stream = input_state.plan(
        config.model_dir, start, skip, task.stream_signature(config), run.trainer.strategy,
        config.train_batch_size, lambda n: task.dataset_fn(config, True, config.seed, n), log_fn)
    results["train"] = run.trainer.train(
        task.dataset_fn(config, True, config.seed, stream.skip_steps),
        metrics=run.train_metrics, input_state=stream)
  if config.do_eval:
    log_fn("=" * 80 + "\nRunning evaluation\n" + "=" * 80)
    results["eval"] = run.trainer.evaluate(
        task.dataset_fn(config, False, config.seed), config.num_eval_steps,
        step_fn=task.eval_step_fn(run.model, run.eval_metrics), metrics=run.eval_metrics,
        results_file=config.results_txt)
  return results


def main(argv: Sequence[str]) -> None:
  data_dir, model_name = data_dir_and_model_name(list(argv))
  from electra_tf.config import load_hparams
  from electra_tf.reading.model_source import pretraining_config

  if FLAGS.restart:  # before the config, which reads the old model's hparams.json
    from electra_tf.training import restart

    restart.restart(os.path.join(data_dir, "models", model_name), log)

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
  from electra_tf.pretraining.summary import print_summary
  from electra_tf.probing import during_pretraining
  from electra_tf.training import lost_worker

  probe = during_pretraining.from_flags(FLAGS, config, strategy, data_dir)  # before seeding
  with lost_worker.reported(name == "multi_worker_mirrored",  # a lost peer: one line, at once
                            lambda: training.latest_checkpoint(config.model_dir)):
    results = train_or_eval(config, strategy, FLAGS.jit_compile, precision, peak,
                            check_data=check, probe=probe)
  print_summary(config, results, time.perf_counter() - start, probe)


if __name__ == "__main__":
  define_flags()
  console.run(main, "run_pretraining.py")
