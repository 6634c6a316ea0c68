r"""Convert an official (TF1) or electra-tf (TF2) pre-training checkpoint.

  python -m electra_tf.convert --checkpoint <TF1 prefix or dir | our TF2 checkpoint> \
      --hparams <JSON dict or .json file, official form> --output_dir <dir>

writes ``<output_dir>/tf2/`` (object checkpoint), ``<output_dir>/saved_model/`` (``rtd`` and
``mlm`` signatures, see ``electra_tf.export``), ``<output_dir>/tf1/`` (``model.ckpt`` +
``checkpoint``, official names, readable by the official code) and ``<output_dir>/hf/``
(``discriminator/`` for ``ElectraForPreTraining``, ``generator/`` for ``ElectraForMaskedLM``),
plus ``<output_dir>/encoder/``, a TF-Hub-style encoder SavedModel. With ``task_names`` in the
hparams the checkpoint is a fine-tuned model: the SavedModel then has the task signatures
(``classify``, ``squad``, ``tag``) and ``--data_dir`` names the fine-tuning data layout.
"""

from __future__ import annotations

import os
import sys

from electra_tf import console  # noqa: I001 -- console.quiet must run before TensorFlow loads

if __name__ == "__main__":
  console.quiet(sys.argv)

from absl import app, flags, logging  # noqa: E402

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Command-line flags, defined on demand so importing this module defines none."""
  flags.DEFINE_string("checkpoint", None,
                      "TF1 checkpoint prefix or directory, or a TF2 checkpoint.")
  flags.DEFINE_string("hparams", "{}", "Pre-training hparams: JSON dict or path to a JSON file.")
  flags.DEFINE_string("output_dir", None, "Where tf2/, saved_model/, tf1/ and hf/ are written.")
  flags.DEFINE_string("data_dir", None, "Fine-tuned models only (hparams with task_names): the "
                      "official data_dir with vocab.txt and finetuning_data/<task>/ (label lists).")
  flags.DEFINE_bool("hf", True, "Also write Hugging Face folders under <output_dir>/hf "
                    "(skipped for Electric, which has no Hugging Face class).")


def convert(checkpoint: str, hparams: str | dict, output_dir: str,
            hf: bool = False) -> dict[str, object]:
  """Loads ``checkpoint`` into the model ``hparams`` describe and writes the three formats."""
  import numpy as np
  import tensorflow as tf

  from electra_tf import checkpoints, names
  from electra_tf.config import PretrainingConfig, load_hparams
  from electra_tf.export import export_encoder_saved_model, export_saved_model
  from electra_tf.pretraining.builder import build_pretraining_model

  config = PretrainingConfig("convert", output_dir, **load_hparams(hparams))
  # Special-token ids only matter for masking during training, never for the exports.
  model = build_pretraining_model(config, vocab={})
  variables = model.tf1_variables()
  prefix = checkpoints.resolve_checkpoint(checkpoint)
  global_step = 0
  if checkpoints.is_tf1_checkpoint(prefix):
    report = checkpoints.load_tf1_checkpoint(variables, prefix, allow_unused=False)
    reader = tf.train.load_checkpoint(prefix)
    if reader.has_tensor(names.GLOBAL_STEP):
      global_step = int(reader.get_tensor(names.GLOBAL_STEP))
    logging.info("TF1 checkpoint %s: %s", prefix, report.summary())
  else:
    step = tf.Variable(0, dtype=tf.int64)
    status = tf.train.Checkpoint(model=model, step=step).read(prefix)
    status.expect_partial().assert_existing_objects_matched()
    global_step = int(step.numpy())
    report = None
    logging.info("TF2 checkpoint %s restored (step %d)", prefix, global_step)
  step_var = tf.Variable(global_step, dtype=tf.int64)
  tf2_prefix = tf.train.Checkpoint(model=model, step=step_var).write(
      os.path.join(output_dir, "tf2", "ckpt"))
  signatures = export_saved_model(model, os.path.join(output_dir, "saved_model"))
  if model.discriminator is not None:
    export_encoder_saved_model(model.discriminator, os.path.join(output_dir, "encoder"))
  tf1_prefix = checkpoints.save_tf1_checkpoint(
      {k: v for k, v in variables.items()}, os.path.join(output_dir, "tf1"),
      global_step=np.int64(global_step))
  hf_dir = None
  if hf and config.electric_objective:
    logging.warning("Electric has no Hugging Face model class: skipping the hf/ export")
  elif hf:
    from electra_tf.hf_export import export_hf
    hf_dir = os.path.join(output_dir, "hf")
    export_hf(variables, model.discriminator.config, model.generator_config,
              config.embedding_size, hf_dir,
              untied_generator_embeddings=config.untied_generator_embeddings)
  return {"tf2": tf2_prefix, "hf": hf_dir, "saved_model": os.path.join(output_dir, "saved_model"),
          "signatures": signatures, "tf1": tf1_prefix, "report": report,
          "global_step": global_step}


def convert_finetuned(checkpoint: str, hparams: str | dict, output_dir: str,
                      data_dir: str | None = None) -> dict[str, object]:
  """A fine-tuned checkpoint (ours, TF2 or TF1 names) -> ``tf2/``, ``saved_model/`` with the
  task signatures (``classify`` / ``squad`` / ``tag``, see ``electra_tf.finetuning.export``),
  ``encoder/`` (TF-Hub style) and ``tf1/``. ``data_dir`` gives vocab.txt and the task folders
  (label lists), as for ``run_finetuning.py``."""
  import tensorflow as tf

  from electra_tf import checkpoints
  from electra_tf.config import FinetuningConfig, load_hparams
  from electra_tf.export import export_encoder_saved_model
  from electra_tf.finetuning import registry
  from electra_tf.finetuning.export import export_finetuned_saved_model
  from electra_tf.finetuning.model import create_model, load_init_checkpoint

  config = FinetuningConfig("convert", data_dir or output_dir, **load_hparams(hparams))
  tasks = registry.build_tasks(config)
  model = create_model(config, tasks)
  report = load_init_checkpoint(model, checkpoint)
  if report.missing:
    raise ValueError(f"checkpoint {checkpoint} lacks {len(report.missing)} task-head "
                     f"variable(s), first: {report.missing[0]} (is it a fine-tuned checkpoint "
                     "of these task_names?)")
  tf2_prefix = tf.train.Checkpoint(model=model).write(os.path.join(output_dir, "tf2", "ckpt"))
  saved_model = os.path.join(output_dir, "saved_model")
  signatures = export_finetuned_saved_model(model, tasks, saved_model)
  export_encoder_saved_model(model.encoder, os.path.join(output_dir, "encoder"))
  tf1_prefix = checkpoints.save_tf1_checkpoint(model.tf1_variables(),
                                               os.path.join(output_dir, "tf1"))
  return {"tf2": tf2_prefix, "saved_model": saved_model, "signatures": sorted(signatures),
          "tf1": tf1_prefix, "hf": None, "report": report}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  if not FLAGS.checkpoint or not FLAGS.output_dir:
    raise app.UsageError("--checkpoint and --output_dir are required")
  from electra_tf.config import load_hparams

  if "task_names" in load_hparams(FLAGS.hparams):
    result = convert_finetuned(FLAGS.checkpoint, FLAGS.hparams, FLAGS.output_dir, FLAGS.data_dir)
  else:
    result = convert(FLAGS.checkpoint, FLAGS.hparams, FLAGS.output_dir, hf=FLAGS.hf)
  encoder = os.path.join(FLAGS.output_dir, "encoder")
  lines = [f"  tf2/          {result['tf2']}",
           f"  saved_model/  {result['saved_model']} (signatures: "
           f"{', '.join(result['signatures'])})",
           f"  tf1/          {result['tf1']}"]
  if os.path.isdir(encoder):
    lines.append(f"  encoder/      {encoder}")
  if result["hf"]:
    lines.append(f"  hf/           {result['hf']}")
  console.summary(f"Converted {FLAGS.checkpoint}:", lines)


if __name__ == "__main__":
  define_flags()
  console.run(main, "convert")
