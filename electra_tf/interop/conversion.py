r"""Convert an official (TF1), electra-tf (TF2) or Hugging Face ELECTRA checkpoint (the
``python -m electra_tf.convert`` command; ``electra_tf/convert.py`` is its entry point).

  python -m electra_tf.convert --checkpoint <model dir | TF1 prefix or dir | TF2 checkpoint |
      Hugging Face folder> [--generator_checkpoint <HF folder>] [--hparams <JSON or .json>] \
      --output_dir <dir>

The model's shape comes from the checkpoint: ``hparams.json`` in a model directory, else the
tensor shapes of an official checkpoint (one line says what was inferred), else an HF
``config.json`` (``model_source``); ``--hparams`` only adds to it, and contradicting
it is a one-line error.

writes ``<output_dir>/tf2/`` (object checkpoint), ``<output_dir>/saved_model/`` (``rtd`` and
``mlm`` signatures, see ``electra_tf.interop.saved_model``), ``<output_dir>/tf1/`` (``model.ckpt`` +
``checkpoint``, official names, readable by the official code; with the optimizer slots
``<var>/adam_m|adam_v`` or ``<var>/lamb_m|lamb_v`` when the source has them: a TF1 checkpoint's
as stored, a training checkpoint's restored into the ``optimizer`` of its hparams.json) and
``<output_dir>/hf/`` (``discriminator/`` for ``ElectraForPreTraining``, ``generator/`` for
``ElectraForMaskedLM``), plus ``<output_dir>/encoder/``, a TF-Hub-style encoder SavedModel.
``<output_dir>`` and each of these folders hold ``hparams.json`` and ``vocab.txt``
(``electra_tf.reading.model_dir``); the hf/ folders the tokenizer files and every SavedModel
``assets/vocab.txt``. With ``task_names`` in the hparams the checkpoint is a fine-tuned model:
the SavedModel then has the task signatures (``classify``, ``squad``, ``tag``), the tasks are
defined by the model's ``tasks.json`` (``electra_tf.reading.model_tasks``; every output gets a
copy) and ``--data_dir`` is needed only for a model without one, or for rows from elsewhere.
``--litert`` (fine-tuned models) adds ``<output_dir>/litert/``, each variant measured on the
tasks' dev rows, and ``--keras_hub`` ``<output_dir>/keras_hub/`` (see
``electra_tf.interop.deploy_exports``).
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf
from absl import app, flags

from electra_tf import checkpoints, console, names
from electra_tf.config import FinetuningConfig, PretrainingConfig
from electra_tf.finetuning import registry
from electra_tf.finetuning.finetuning_model import (
  FinetuningModel,
  create_model,
  load_init_checkpoint,
)
from electra_tf.hparams_input import load_hparams
from electra_tf.interop import deploy_exports, staged_output
from electra_tf.interop.finetuned_saved_model import export_finetuned_saved_model
from electra_tf.interop.hf_export import export_hf
from electra_tf.interop.hf_tokenizer import write_tokenizer_files
from electra_tf.interop.saved_model import export_encoder_saved_model, export_saved_model
from electra_tf.model_files import SAVED_MODEL_DIR
from electra_tf.model_sizes import get_bert_config
from electra_tf.optimization import create_optimizer
from electra_tf.pretraining.builder import build_pretraining_model
from electra_tf.pretraining.pretraining_model import PretrainingModel
from electra_tf.reading import hf_import, model_dir, model_source, model_tasks

FLAGS = flags.FLAGS
EXPORTS = ("tf1", "tf2", SAVED_MODEL_DIR, "encoder", "hf")  # the folders under --output_dir


def define_flags() -> None:
  """Command-line flags, defined on demand so importing this module defines none."""
  flags.DEFINE_string("checkpoint", None,
                      "TF1 checkpoint prefix or directory, or a TF2 checkpoint.")
  flags.DEFINE_string("hparams", "{}", "Pre-training hparams: JSON dict or path to a JSON file.")
  flags.DEFINE_string("output_dir", None, "Where tf2/, saved_model/, tf1/ and hf/ are written.")
  flags.DEFINE_string("data_dir", None, "Fine-tuned models only: a data_dir with "
                      "finetuning_data/<task>/, for the tasks' rows (int8_full calibration, dev "
                      "rows measured by --litert) and for models without tasks.json (labels).")
  flags.DEFINE_string("generator_checkpoint", None, "A Hugging Face ElectraForMaskedLM folder "
                      "to pair with a Hugging Face discriminator --checkpoint.")
  flags.DEFINE_string("vocab_file", None, "vocab.txt to ship with the exports (default: the "
                      "one beside the checkpoint).")
  flags.DEFINE_bool("hf", True, "Also write Hugging Face folders under <output_dir>/hf "
                    "(skipped for Electric, which has no Hugging Face class).")
  flags.DEFINE_list("litert", [], "Fine-tuned models only: also write LiteRT models under "
                    "<output_dir>/litert (float32, float16, int8, int8_full; default, all).")
  flags.DEFINE_integer("litert_dev_rows", deploy_exports.DEV_ROWS, "--litert: each variant is "
                       "measured against float32 on this many dev rows per task (0: none).")
  flags.DEFINE_bool("keras_hub", False, "Also write a keras-hub ElectraBackbone / "
                    "ElectraTokenizer preset under <output_dir>/keras_hub.")
  flags.DEFINE_bool("overwrite", False, "Replace a non-empty --output_dir whole (the new export "
                    "is written to a temporary sibling folder and renamed into place).")


def convert(checkpoint: str, hparams: str | dict, output_dir: str, hf: bool = False,
            generator_checkpoint: str | None = None,
            vocab_file: str | None = None) -> dict[str, object]:
  """Loads ``checkpoint`` (see the module docstring) into the model its stored / inferred
  shape and ``hparams`` describe and writes every format."""
  source = model_source.read_model_source(checkpoint, load_hparams(hparams),
                                             generator=generator_checkpoint)
  if source.message:
    console.log(source.message)
  vocab_file = vocab_file or source.vocab_file
  config = PretrainingConfig("convert", output_dir, **source.with_record(PretrainingConfig))
  # Special-token ids only matter for masking during training, never for the exports.
  model = build_pretraining_model(config, vocab={})
  variables = model.tf1_variables()
  loaded = source.model or model_source.load_model(checkpoint)
  report, global_step, slots = load_pretraining_weights(model, variables, loaded,
                                                        config.optimizer)
  written = write_pretraining_exports(model, variables, slots, global_step, config,
                                      output_dir, vocab_file, hf)
  return {**written, "report": report, "global_step": global_step, "config": config}


def load_pretraining_weights(model: PretrainingModel, variables: dict[str, tf.Variable],
                             loaded: model_source.LoadedModel, optimizer: str
                             ) -> tuple[checkpoints.LoadReport | None, int, dict[str, object]]:
  """Fills a pre-training ``model`` (``variables``: its TF1-named variables) from ``loaded``;
  returns (the TF1 load report or None, the global step, the optimizer slots for tf1/)."""
  if loaded.kind == model_source.HUGGING_FACE:
    hf_import.assign(variables, loaded.hf.variables)
    return None, 0, {}
  prefix = loaded.prefix
  if loaded.kind == model_source.TF1:
    report = checkpoints.load_tf1_checkpoint(variables, prefix, allow_unused=False)

    def read_step() -> int:
      reader = tf.train.load_checkpoint(prefix)
      return (int(reader.get_tensor(names.GLOBAL_STEP))
              if reader.has_tensor(names.GLOBAL_STEP) else 0)
    global_step = checkpoints.read_retried(prefix, read_step)
    console.log(f"TF1 checkpoint {prefix}: {report.summary()}")
    return report, global_step, passed_through_slots(prefix, report, variables)
  step = tf.Variable(0, dtype=tf.int64)
  status = checkpoints.read_retried(
      prefix, lambda: tf.train.Checkpoint(model=model, step=step).read(prefix))
  status.expect_partial().assert_existing_objects_matched()
  global_step = int(step.numpy())
  console.log(f"TF2 checkpoint {prefix} restored (step {global_step})")
  return None, global_step, training_slots(prefix, model, optimizer)


def write_pretraining_exports(model: PretrainingModel, variables: dict[str, tf.Variable],
                              slots: dict[str, object], global_step: int,
                              config: PretrainingConfig, output_dir: str,
                              vocab_file: str | None, hf: bool) -> dict[str, object]:
  """tf2/, saved_model/, encoder/, tf1/ and (with ``hf``) hf/ of a loaded pre-training model,
  each with its hparams.json and vocab.txt; returns where each went."""
  step_var = tf.Variable(global_step, dtype=tf.int64)
  tf2_prefix = tf.train.Checkpoint(model=model, step=step_var).write(
      os.path.join(output_dir, "tf2", "ckpt"))
  signatures = export_saved_model(model, os.path.join(output_dir, SAVED_MODEL_DIR), vocab_file)
  if model.discriminator is not None:
    export_encoder_saved_model(model.discriminator, os.path.join(output_dir, "encoder"),
                               vocab_file)
  tf1_prefix = checkpoints.save_tf1_checkpoint(
      {**variables, **slots}, os.path.join(output_dir, "tf1"), global_step=np.int64(global_step))
  log_tf1_slots(variables, slots)
  hf_dir, hf_folders = None, {}
  if hf and config.electric_objective:
    console.log("Electric has no Hugging Face model class: skipping the hf/ export")
  elif hf:
    hf_dir = os.path.join(output_dir, "hf")
    hf_folders = export_hf(variables, model.discriminator.config, model.generator_config,
                           config.embedding_size, hf_dir,
                           untied_generator_embeddings=config.untied_generator_embeddings)
  write_model_files(output_dir, config, vocab_file, list(hf_folders.values()))
  return {"tf2": tf2_prefix, "hf": hf_dir, "saved_model": os.path.join(output_dir, SAVED_MODEL_DIR),
          "signatures": signatures, "tf1": tf1_prefix}


def training_slots(prefix: str, model: object, optimizer: str) -> dict[str, object]:
  """The optimizer slots of a TF2 training checkpoint, by official TF1 name, restored into an
  ``optimizer`` ("adamw" | "lamb", from hparams.json) built for the model's trainable
  variables; {} when the checkpoint holds no optimizer state or (one line says why) state
  that does not fit."""
  if not checkpoints.tf2_slot_count(prefix):
    return {}
  # The schedule does not matter: only the slots are read, never applied.
  built = create_optimizer(1.0, 1, optimizer=optimizer)
  built.build(model.trainable_variables)
  try:
    return checkpoints.restore_optimizer_slots(prefix, model, built)
  except ValueError as e:
    console.log(f"tf1/: optimizer slots not exported ({e}; is \"optimizer\": \"{optimizer}\" "
                "the one it was trained with?)")
    return {}


def passed_through_slots(prefix: str, report: object,
                         variables: dict[str, object]) -> dict[str, object]:
  """The optimizer slots a TF1 checkpoint carries (``report.unused_optimizer_state``), as
  stored, for the exported ``variables``; slots of other variables are dropped (one line)."""
  slots, orphans = checkpoints.tf1_slots(prefix, report.unused_optimizer_state, variables)
  if orphans:
    console.log(f"tf1/: dropped {len(orphans)} optimizer slots of variables the model does not "
                f"have, first: {orphans[0]}")
  return slots


def log_tf1_slots(variables: dict[str, object], slots: dict[str, object]) -> None:
  """One line when tf1/ carries optimizer slots: ``tf1/: 82 variables + 164 adam slots``."""
  if slots:
    console.log(f"tf1/: {len(variables)} variables + {checkpoints.slots_summary(slots)}")


def write_model_files(output_dir: str, config: object, vocab_file: str | None,
                      hf_folders: list[str] = (), tasks: list = ()) -> None:
  """``hparams.json`` + ``vocab.txt`` (and a fine-tuned model's ``tasks.json``) into
  ``output_dir`` and each of its exports, and the tokenizer files into each Hugging Face
  folder, so every output describes itself."""
  if not vocab_file:
    console.log("no vocab.txt beside the checkpoint: the exports get none (pass --vocab_file)")
  definitions = [task.definition() for task in tasks]
  for sub in ("",) + EXPORTS:
    folder = os.path.join(output_dir, sub)
    if os.path.isdir(folder):
      model_dir.write_model_files(folder, config, vocab_file)
      if definitions:
        model_tasks.write_tasks(folder, definitions)
  for folder in hf_folders if vocab_file else ():
    write_tokenizer_files(folder, vocab_file, config.do_lower_case,
                          get_bert_config(config).max_position_embeddings)


def finetuned_config(checkpoint: str, hparams: str | dict, output_dir: str,
                     data_dir: str | None) -> tuple[FinetuningConfig, model_source.ModelSource]:
  """The ``FinetuningConfig`` of a fine-tuned ``checkpoint``: ``hparams`` over its stored or
  inferred shape, its ``task_names`` and ``vocab.txt`` unless given; and where that came from."""
  user = load_hparams(hparams)
  stored = model_dir.read_model_hparams(checkpoint) or {}
  if "task_names" not in user and "task_names" in stored:
    user["task_names"] = stored["task_names"]
  source = model_source.read_model_source(checkpoint, user, target="finetuning")
  if source.message:
    console.log(source.message)
  merged = source.with_record(FinetuningConfig)
  if source.vocab_file and "vocab_file" not in user:
    merged["vocab_file"] = source.vocab_file
  return FinetuningConfig("convert", data_dir or output_dir, **merged), source


def load_finetuned(checkpoint: str, hparams: str | dict, scratch_dir: str,
                   data_dir: str | None = None
                   ) -> tuple[FinetuningModel, list, FinetuningConfig, model_source.LoadedModel,
                              checkpoints.LoadReport]:
  """A fine-tuned checkpoint (ours, TF2 or TF1 names) built and filled: (model, its tasks as
  its ``tasks.json`` defines them, config, the opened checkpoint, the load report).
  ``data_dir`` (optional) gives the tasks' rows (dev rows, calibration); ``scratch_dir`` is
  the config's data_dir when it is not given (nothing is written there)."""
  config, source = finetuned_config(checkpoint, hparams, scratch_dir, data_dir)
  tasks = registry.model_tasks(config, model_tasks.read_tasks(checkpoint), checkpoint, data_dir)
  model = create_model(config, tasks)
  loaded = source.model or model_source.load_model(checkpoint)
  report = load_init_checkpoint(model, loaded)
  if report.missing:
    raise ValueError(f"checkpoint {checkpoint} lacks {len(report.missing)} task-head "
                     f"variable(s), first: {report.missing[0]} (is it a fine-tuned checkpoint "
                     "of these task_names?)")
  return model, tasks, config, loaded, report


def convert_finetuned(checkpoint: str, hparams: str | dict, output_dir: str,
                      data_dir: str | None = None) -> dict[str, object]:
  """A fine-tuned checkpoint -> ``tf2/``, ``saved_model/`` with the task signatures
  (``classify`` / ``squad`` / ``tag``, see ``finetuned_saved_model``), ``encoder/`` (TF-Hub
  style) and ``tf1/``, each with ``tasks.json``. The tasks are defined by the model's
  ``tasks.json``; ``data_dir`` (as for ``run_finetuning.py``) is needed only without one."""
  model, tasks, config, loaded, report = load_finetuned(checkpoint, hparams, output_dir,
                                                        data_dir)
  variables = model.tf1_variables()
  slots: dict[str, object] = {}  # optimizer slots by official name, for tf1/
  if loaded.kind == model_source.TF1:
    slots = passed_through_slots(loaded.prefix, report, variables)
  elif loaded.kind == model_source.TF2:
    slots = training_slots(loaded.prefix, model, config.optimizer)
  written = write_finetuned_exports(model, tasks, variables, slots, config, output_dir)
  return {**written, "report": report, "tasks": tasks, "config": config}


def write_finetuned_exports(model: FinetuningModel, tasks: list, variables: dict[str, object],
                            slots: dict[str, object], config: FinetuningConfig,
                            output_dir: str) -> dict[str, object]:
  """tf2/, saved_model/ (the task signatures), encoder/ and tf1/ of a loaded fine-tuned
  model, each with its hparams.json and vocab.txt; returns where each went."""
  tf2_prefix = tf.train.Checkpoint(model=model).write(os.path.join(output_dir, "tf2", "ckpt"))
  saved_model = os.path.join(output_dir, SAVED_MODEL_DIR)
  signatures = export_finetuned_saved_model(model, tasks, saved_model, config.vocab_file,
                                            config.do_lower_case, config.max_seq_length)
  export_encoder_saved_model(model.encoder, os.path.join(output_dir, "encoder"),
                             config.vocab_file)
  tf1_prefix = checkpoints.save_tf1_checkpoint({**variables, **slots},
                                               os.path.join(output_dir, "tf1"))
  log_tf1_slots(variables, slots)
  write_model_files(output_dir, config, config.vocab_file, tasks=tasks)
  return {"tf2": tf2_prefix, "saved_model": saved_model, "signatures": sorted(signatures),
          "tf1": tf1_prefix, "hf": None}


def is_finetuned(checkpoint: str, hparams: dict) -> bool:
  """A fine-tuned model: ``task_names`` in the hparams or in the model's ``hparams.json``."""
  if "task_names" in hparams:
    return True
  if model_source.is_hf(checkpoint):
    return False
  return "task_names" in (model_dir.read_model_hparams(checkpoint) or {})


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  if not FLAGS.checkpoint or not FLAGS.output_dir:
    raise app.UsageError("--checkpoint and --output_dir are required")
  finetuned = is_finetuned(FLAGS.checkpoint, load_hparams(FLAGS.hparams))
  litert = deploy_exports.check_requests(FLAGS.litert, FLAGS.keras_hub, FLAGS.checkpoint,
                                        finetuned)
  with staged_output.staged_dir(FLAGS.output_dir, FLAGS.overwrite) as stage:
    if finetuned:
      result = convert_finetuned(FLAGS.checkpoint, FLAGS.hparams, stage, FLAGS.data_dir)
    else:
      result = convert(FLAGS.checkpoint, FLAGS.hparams, stage, hf=FLAGS.hf,
                       generator_checkpoint=FLAGS.generator_checkpoint,
                       vocab_file=FLAGS.vocab_file)
    deploy_exports.export_extras(stage, result, litert, FLAGS.keras_hub, FLAGS.litert_dev_rows)
  result = staged_output.relocate(result, stage, FLAGS.output_dir)
  encoder = os.path.join(FLAGS.output_dir, "encoder")
  lines = [f"  tf2/          {result['tf2']}",
           f"  saved_model/  {result['saved_model']} (signatures: "
           f"{', '.join(result['signatures'])})",
           f"  tf1/          {result['tf1']}"]
  if os.path.isdir(encoder):
    lines.append(f"  encoder/      {encoder}")
  if result["hf"]:
    lines.append(f"  hf/           {result['hf']}")
  lines += deploy_exports.summary_lines(result)
  console.summary(f"Converted {FLAGS.checkpoint}:", lines)

