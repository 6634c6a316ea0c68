"""Optimizer slots in the exported TF1 checkpoints: a tiny pre-training run (AdamWeightDecay and
LAMB, 2 steps) converts to a tf1/model.ckpt holding ``<var>/adam_m|adam_v`` (the official
training graph's names, see ../shared/reference/README.md) or ``<var>/lamb_m|lamb_v``, equal
bit for bit to the optimizer's slots; the official-name loader reads such a checkpoint and
reports the slots as optimizer state; a TF1 checkpoint's slots pass through convert unchanged.
"""

import json
import pathlib
import shutil

import numpy as np
import pytest
import tensorflow as tf
from helpers import pretrain_data
from helpers.checkpoint_asserts import assert_same_checkpoint
from helpers.paths import GOLDEN

from electra_tf import checkpoints, names
from electra_tf.config import FinetuningConfig, PretrainingConfig
from electra_tf.finetuning import finetuning_model, registry
from electra_tf.interop.conversion import convert, convert_finetuned, training_slots
from electra_tf.pretraining import task
from electra_tf.pretraining.builder import build_pretraining_model
from electra_tf.reading import model_dir

# The structure of ../shared/reference/electra_small_2l (2 layers, embedding size != hidden
# size, generator 1/4 of the discriminator, untied generator, tied embeddings) at tiny sizes,
# on the vocabulary of the ``vocab_file`` fixture (tests/golden/vocab.txt).
_VOCAB_SIZE = len((GOLDEN / "vocab.txt").read_text(encoding="utf-8").splitlines())
TINY = {"vocab_size": _VOCAB_SIZE,
        "model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 2},
        "embedding_size": 16, "generator_hidden_size": 0.25, "untied_generator": True,
        "untied_generator_embeddings": False, "max_seq_length": 32, "train_batch_size": 8,
        "num_train_steps": 2, "iterations_per_loop": 1, "save_checkpoints_steps": 2,
        "num_warmup_steps": 1, "weight_decay_rate": 0.01, "seed": 3}
SLOT_NAMES = {"adamw": names.ADAM_SLOTS, "lamb": names.LAMB_SLOTS}


def _quiet(line):
  pass


@pytest.fixture(scope="module")
def data_root(tmp_path_factory, data_dir, vocab_file) -> pathlib.Path:
  """The official data_dir layout: vocab.txt + pretrain_tfrecords/ from a little real text."""
  return pretrain_data.build_data_dir(
      tmp_path_factory.mktemp("slots"), vocab_file,
      {"emma.txt": (data_dir / "gutenberg" / "austen-emma.txt", 20000)})


@pytest.fixture(scope="module")
def trained(data_root):
  """optimizer name -> (config, {slot name: value} as the optimizer held them after training)."""
  out = {}
  for optimizer in SLOT_NAMES:
    config = PretrainingConfig(optimizer, str(data_root), **TINY, optimizer=optimizer)
    run = task.build_run(config, log_fn=_quiet)
    assert run.trainer.restore_or_initialize() == 0
    model_dir.write_model_files(config.model_dir, config, config.vocab_file)
    run.trainer.train(task.dataset_fn(config, True, config.seed), metrics=run.train_metrics)
    assert int(run.trainer.global_step.numpy()) == 2
    slots = {n: v.numpy() for n, v in run.optimizer.tf1_slot_variables().items()}
    trainable = sorted(names.tf1_name(v) for v in run.model.trainable_variables)
    out[optimizer] = (config, slots, trainable)
  return out


def _official_adam_slots(reference_dir, folder="electra_small_2l") -> list[str]:
  """The slot names of the official training graph of a reference folder."""
  lines = (reference_dir / folder / "variables_train_graph.tsv").read_text()
  rows = [line.split("\t")[0] for line in lines.splitlines()[1:]]
  return sorted(n for n in rows if names.OPTIMIZER_SLOT.match(n))


@pytest.mark.parametrize("optimizer", sorted(SLOT_NAMES))
def test_export_holds_the_slots_under_official_names(trained, reference_dir, tmp_path, capsys,
                                                     optimizer):
  config, slots, trainable = trained[optimizer]
  assert model_dir.read_model_hparams(config.model_dir)["optimizer"] == optimizer
  result = convert(config.model_dir, {}, str(tmp_path / "out"))
  reader = tf.train.load_checkpoint(result["tf1"])
  stored = reader.get_variable_to_shape_map()
  exported = sorted(n for n in stored if names.OPTIMIZER_SLOT.match(n))
  # every trainable variable has both slots, nothing else is a slot
  assert exported == sorted(f"{v}/{s}" for v in trainable for s in SLOT_NAMES[optimizer])
  # the official training graph of the same structure names its Adam slots the same way
  official = _official_adam_slots(reference_dir)
  assert len(official) == 2 * 82
  kind = SLOT_NAMES[optimizer][0].split("_")[0]
  assert exported == sorted(n.replace("/adam_", f"/{kind}_") for n in official)
  assert sorted(slots) == exported
  for name in exported:  # bit for bit the optimizer's values after its 2 updates
    value = reader.get_tensor(name)
    assert value.dtype == np.float32, name
    np.testing.assert_array_equal(value, slots[name], name)
  second = [n for n in exported if n.endswith("_v")]
  assert all(np.any(slots[n] > 0) for n in second)  # training moved every second moment
  assert int(reader.get_tensor(names.GLOBAL_STEP)) == 2
  n_model = len(stored) - len(exported) - 1  # minus global_step
  assert f"tf1/: {n_model} variables + {len(exported)} {kind} slots" in capsys.readouterr().out

  # The official-name loader fills a fresh model and reports the slots as optimizer state.
  fresh = build_pretraining_model(config, vocab={})
  variables = fresh.tf1_variables()
  report = checkpoints.load_tf1_checkpoint(variables, result["tf1"], allow_unused=False)
  assert sorted(report.unused_optimizer_state) == sorted(exported + [names.GLOBAL_STEP])
  assert report.unused_other == () and report.missing == ()
  assert sorted(report.loaded) == sorted(variables) and len(variables) == n_model
  for name, var in variables.items():
    np.testing.assert_array_equal(var.numpy(), reader.get_tensor(name), name)

  # A TF1 checkpoint with slots (this export) converts again with its slots unchanged.
  again = convert(str(tmp_path / "out" / "tf1"), {}, str(tmp_path / "again"))
  assert_same_checkpoint(result["tf1"], again["tf1"])


def test_reference_checkpoint_slots_round_trip_bit_identical(reference_dir, tmp_path, capsys):
  """electra_small_2l + the Adam slots of its official training graph (random values; the
  reference checkpoints hold none) -> convert -> tf1/ is the same checkpoint, bit for bit."""
  folder = reference_dir / "electra_small_2l"
  reader = tf.train.load_checkpoint(str(folder / "model.ckpt"))
  tensors = {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}
  rng = np.random.default_rng(0)
  for name in _official_adam_slots(reference_dir):
    shape = tensors[names.OPTIMIZER_SLOT.match(name)["variable"]].shape
    value = rng.normal(size=shape).astype(np.float32)
    tensors[name] = np.abs(value) if name.endswith("_v") else value
  tensors[names.GLOBAL_STEP] = np.int64(1234)
  source = checkpoints.save_tf1_checkpoint(tensors, str(tmp_path / "official"))
  shutil.copy(folder / "hparams.json", tmp_path / "official" / "hparams.json")
  result = convert(str(tmp_path / "official"), {}, str(tmp_path / "out"))
  assert_same_checkpoint(source, result["tf1"])
  assert "tf1/: 82 variables + 164 adam slots" in capsys.readouterr().out.splitlines()


def test_source_without_slots_exports_as_before(reference_dir, tmp_path, capsys):
  folder = reference_dir / "electra_small_2l"
  result = convert(str(folder / "model.ckpt"), str(folder / "hparams.json"), str(tmp_path))
  assert_same_checkpoint(str(folder / "model.ckpt"), result["tf1"])
  assert "slots" not in capsys.readouterr().out


def test_optimizer_state_of_another_optimizer_is_not_exported(trained, capsys):
  """hparams.json naming the wrong optimizer: no slots, and one line says why."""
  config, _, _ = trained["adamw"]
  model = build_pretraining_model(config, vocab={})
  prefix = checkpoints.resolve_checkpoint(config.model_dir)
  assert training_slots(prefix, model, "lamb") == {}
  out = capsys.readouterr().out.strip().splitlines()
  assert len(out) == 1 and out[0].startswith("tf1/: optimizer slots not exported (checkpoint ")
  assert '"optimizer": "lamb"' in out[0]
  assert sorted(training_slots(prefix, model, "adamw")) == sorted(trained["adamw"][1])


def test_model_only_tf2_checkpoint_has_no_slots(trained, tmp_path):
  config, _, _ = trained["lamb"]
  model = build_pretraining_model(config, vocab={})
  prefix = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
  assert checkpoints.tf2_slot_count(prefix) == 0
  assert training_slots(prefix, model, "lamb") == {}


def test_finetuning_trial_checkpoint_exports_its_slots(reference_dir, vocab_file, tmp_path,
                                                       capsys):
  """A fine-tuning trial's checkpoint (the Trainer's model + optimizer + step, here after one
  AdamWeightDecay update with layer-wise decay) -> convert -> tf1/ has the official slots."""
  folder = reference_dir / "finetune_heads"
  data_dir = tmp_path / "data"
  (data_dir / "finetuning_data").mkdir(parents=True)
  tasks = ["rte", "sts", "squad"]
  for name in tasks:
    (data_dir / "finetuning_data" / name).symlink_to(folder / "raw" / name)
  hparams = {**json.loads((folder / "hparams.json").read_text()), "task_names": tasks,
             "layerwise_lr_decay": 0.8, "vocab_file": vocab_file}
  config = FinetuningConfig("m", str(data_dir), **hparams)
  model = finetuning_model.create_model(config, registry.build_tasks(config))
  finetuning_model.load_init_checkpoint(model, str(folder / "model.ckpt"))
  optimizer = finetuning_model.create_finetuning_optimizer(config, 10, model.n_transformer_layers)
  optimizer.build(model.trainable_variables)
  rng = np.random.default_rng(1)
  optimizer.apply_gradients(
      (tf.constant(rng.normal(size=v.shape).astype(np.float32)), v)
      for v in model.trainable_variables)
  trial = tmp_path / "trial"
  step = tf.Variable(1, dtype=tf.int64)
  tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=optimizer, step=step),
                             str(trial), max_to_keep=1).save(checkpoint_number=1)
  model_dir.write_model_files(str(trial), config, vocab_file)
  slots = {n: v.numpy() for n, v in optimizer.tf1_slot_variables().items()}

  result = convert_finetuned(str(trial), {}, str(tmp_path / "out"), str(data_dir))
  reader = tf.train.load_checkpoint(result["tf1"])
  exported = sorted(n for n in reader.get_variable_to_shape_map()
                    if names.OPTIMIZER_SLOT.match(n))
  official = [n for n in _official_adam_slots(reference_dir, "finetune_heads")
              if not n.startswith("task_specific/chunk/")]
  assert exported == official == sorted(slots)
  for name in exported:
    np.testing.assert_array_equal(reader.get_tensor(name), slots[name], name)
  n_model = len(model.tf1_variables())
  assert f"tf1/: {n_model} variables + {len(exported)} adam slots" in capsys.readouterr().out


@pytest.mark.parametrize("optimizer", sorted(SLOT_NAMES))
def test_float16_loss_scaled_checkpoint_restores_the_inner_slots(tmp_path, optimizer):
  """float16 training wraps the optimizer in a LossScaleOptimizer; its checkpoint keeps the
  inner optimizer's slots where an unwrapped one reads them."""
  from electra_tf import optimization, training

  def variables():
    return [tf.Variable(tf.ones([3]), name="a/kernel"), tf.Variable(tf.ones([2]), name="b/bias")]

  trained = variables()
  wrapped = training.wrap_optimizer(optimization.create_optimizer(0.1, 5, optimizer=optimizer),
                                    "float16")
  wrapped.inner_optimizer.build(trained)
  with tf.GradientTape() as tape:
    loss = wrapped.get_scaled_loss(tf.reduce_sum(trained[0] ** 2) + tf.reduce_sum(trained[1]))
  grads = wrapped.get_unscaled_gradients(tape.gradient(loss, trained))
  wrapped.apply_gradients(zip(grads, trained, strict=True))
  want = {n: v.numpy() for n, v in wrapped.inner_optimizer.tf1_slot_variables().items()}
  prefix = tf.train.Checkpoint(model=tf.train.Checkpoint(v=trained), optimizer=wrapped).write(
      str(tmp_path / "ckpt"))
  assert checkpoints.tf2_slot_count(prefix) == 4
  fresh = variables()
  plain = optimization.create_optimizer(1.0, 1, optimizer=optimizer)
  plain.build(fresh)
  got = checkpoints.restore_optimizer_slots(prefix, tf.train.Checkpoint(v=fresh), plain)
  assert sorted(got) == sorted(f"{v}/{s}" for v in ("a/kernel", "b/bias")
                               for s in SLOT_NAMES[optimizer])
  for name, value in want.items():
    assert np.any(value != 0), name
    np.testing.assert_array_equal(got[name].numpy(), value, name)


def test_slots_of_another_optimizer_are_said_to_start_at_zero(trained, data_root, tmp_path,
                                                             capsys):
  # A LAMB run's tf1/ export as init_checkpoint of an AdamW run
  config, slots, _ = trained["lamb"]
  result = convert(config.model_dir, {}, str(tmp_path / "out"))
  adamw = PretrainingConfig("from_lamb", str(data_root), **TINY, optimizer="adamw",
                            init_checkpoint=result["tf1"])
  lines: list[str] = []
  run = task.build_run(adamw, log_fn=lines.append)
  run.trainer.log_fn = lines.append
  run.trainer.restore_or_initialize()
  n_slots = len(run.optimizer.tf1_slot_variables())
  said = [line for line in lines if line.startswith("  ignored: ")]
  assert len(said) == 1, lines
  example = said[0].split("(e.g. ", 1)[1].split(")", 1)[0]
  assert example in slots and example.endswith(("/lamb_m", "/lamb_v"))
  assert said[0] == (f"  ignored: {len(slots)} optimizer-state tensors of another optimizer "
                     f"(e.g. {example}); {n_slots} of this run's {n_slots} optimizer slots "
                     "start at zero")
