r"""Fine-tunes an ELECTRA model on GLUE, SQuAD / MRQA or CoNLL-2000 chunking (official
``run_finetuning.py`` in TF2).

  python run_finetuning.py --data_dir D --model_name M --hparams '{"task_names": ["rte"]}'

(``--data-dir`` / ``--model-name`` also work.) Layout, as official:
  D/finetuning_data/<task>/{train,dev,test}.{tsv,json,txt}   raw task data
  D/models/M/                                  init checkpoint (official TF1 or ours), vocab.txt
  D/models/M/finetuning_tfrecords/<tasks>_tfrecords/   featurised TFRecord cache
  D/models/M/finetuning_models/<tasks>_model_<trial>/  fine-tuned weights (TF2 ckpt-<step>,
                                                       tf1/model.ckpt with official names),
                                                       hparams.json + vocab.txt
  D/models/M/results/<tasks>_results.{txt,pkl,json}    dev metrics of every trial + median
  D/models/M/test_predictions/                 test outputs (official pickles, GLUE submission
                                               TSVs, SQuAD 2.0 prediction JSON)
``init_checkpoint`` defaults to D/models/M (any model path convert takes, a Hugging Face
ELECTRA folder included); its hparams.json, or its tensor shapes, give the model's shape and its
vocab.txt the vocabulary, so --hparams needs only the task. Set it to null to train from random
initialisation. Trial t (1-based) uses seed ``seed + t - 1`` when the ``seed`` hparam is set.
Featurised data is cached and rebuilt when the data, vocab or a featurisation hparam changes.
This script only parses flags; the work is ``electra_tf.finetuning.trials.run_finetuning``.
"""

from __future__ import annotations

from electra_tf import early_interrupt  # noqa: I001 -- first: Ctrl-C while loading is one line

if __name__ == "__main__":
  early_interrupt.install()

import sys
from collections.abc import Sequence

from electra_tf import console  # noqa: I001 -- quiet_logs, use_tf_keras before TensorFlow loads

if __name__ == "__main__":
  console.quiet_logs(sys.argv)
  console.require_tensorflow("run_finetuning.py")  # a device install: one line, no traceback
console.use_tf_keras()

import tensorflow as tf  # noqa: E402
from absl import flags  # noqa: E402

from electra_tf import training  # noqa: E402
from electra_tf.cli import data_dir_and_model_name  # noqa: E402
from electra_tf.config import FinetuningConfig  # noqa: E402
from electra_tf.finetuning.trials import run_finetuning  # noqa: E402
from electra_tf.hparams_input import load_hparams  # noqa: E402
from electra_tf.reading.model_source import finetuning_config  # noqa: E402
from electra_tf.training.runtime import define_strategy_flag  # noqa: E402

__all__ = ["run_finetuning"]  # the library's trial loop, importable from here as before

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "Folder with finetuning_data/ and models/ (official layout).")
flags.DEFINE_string("data-dir", None, "Official spelling of --data_dir.")
flags.DEFINE_string("model_name", None, "Name of the pre-trained model (folder under models/).")
flags.DEFINE_string("model-name", None, "Official spelling of --model_name.")
flags.DEFINE_string("hparams", "{}", "Fine-tuning hparams: a JSON dict or a .json file.")
flags.DEFINE_bool("use_tfds", False, "Read GLUE tasks from locally prepared TensorFlow Datasets "
                  "(glue/cola, ...) instead of the TSV files; nothing is downloaded.")
flags.DEFINE_string("tfds_data_dir", None, "TFDS data folder (default: TFDS's own default).")
define_strategy_flag()
flags.DEFINE_integer("num_gpus", None, "GPUs to use (default: all visible).")


def main(argv: Sequence[str]) -> None:
  data_dir, model_name = data_dir_and_model_name(list(argv))
  tf.get_logger().setLevel("ERROR")  # as the official script
  config = finetuning_config(model_name, data_dir, load_hparams(FLAGS.hparams), console.log)
  strategy = training.get_strategy(FLAGS.distribution_strategy, FLAGS.num_gpus)
  results = run_finetuning(config, strategy, FLAGS.use_tfds, FLAGS.tfds_data_dir)
  print_summary(config, results)


def print_summary(config: FinetuningConfig, results: list[dict[str, dict[str, float]]]) -> None:
  """The block a run ends with: dev metrics (median over trials), where results and models are."""
  from electra_tf.finetuning.outputs import median_results

  lines = []
  if results:
    which = "dev" if len(results) == 1 else f"dev, median of {len(results)} trials"
    for task, metrics in median_results(results).items():
      lines.append(f"  {task} ({which}): "
                   + ", ".join(f"{k} {v:.2f}" for k, v in metrics.items()))
    lines.append(f"  results: {config.results_txt}")
  if config.do_train:
    lines.append(f"  fine-tuned model(s): {config.model_dir}_<trial>")
  console.summary(f"Summary: fine-tuning {', '.join(config.task_names)} from "
                  f"{config.init_checkpoint or 'random initialisation'}", lines)


if __name__ == "__main__":
  console.run(main, "run_finetuning.py")
