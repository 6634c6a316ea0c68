"""The fine-tuning model: one shared ``electra`` encoder and one head per task (official
``run_finetuning.FinetuningModel``), its initialisation from pre-trained weights, and the
official optimizer settings (warmup proportion, layer-wise learning-rate decay).

Multi-task batches carry ``task_id`` [B]; every head runs on every batch and each example's
loss is its own task's loss (``heads.multitask_loss``), summed over the batch as official.
Records with ``task_id == len(tasks)`` (padding) contribute nothing.

Initialisation (``load_init_checkpoint``):
- an official TF1 checkpoint: every model variable whose TF1 name is in the checkpoint is
  copied (the official ``get_assignment_map_from_checkpoint`` + ``init_from_checkpoint``), so a
  pre-training checkpoint fills ``electra/*`` (generator and ``*_predictions`` are reported as
  unused, the heads as missing) and a fine-tuned one also fills its ``task_specific/*`` heads;
- our TF2 pre-training checkpoint (``tf.train.Checkpoint(model=PretrainingModel)``): the
  ``discriminator`` tower is restored into the encoder;
- our TF2 fine-tuning checkpoint (``tf.train.Checkpoint(model=FinetuningModel)``): the encoder
  and the heads of the tasks both runs share;
- a Hugging Face ELECTRA folder: its discriminator (``reading.hf_import``) fills the encoder.

A fine-tuned model is read back whole (``restore_finetuned``: every variable, from our TF2
checkpoint; ``restore_latest``: a model directory's newest complete ``ckpt-<N>``) by evaluation
without training and by predict; ``reading.model_source`` (which knows Hugging Face folders) is
imported only to initialise from a checkpoint, so reading a model directory loads none of it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import tensorflow as tf
import tf_keras

from electra_tf import checkpoints
from electra_tf.config import FinetuningConfig
from electra_tf.finetuning.run_settings import check_settings
from electra_tf.finetuning.task_base import Task
from electra_tf.finetuning.task_heads import multitask_loss
from electra_tf.model_sizes import get_bert_config
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.modeling.dropout import site_seed
from electra_tf.modeling.encoder import Transformer
from electra_tf.modeling.layers import serializable
from electra_tf.optimization import AdamWeightDecay, Lamb, create_optimizer
from electra_tf.training.checkpoint_files import latest_checkpoint
from electra_tf.training.runtime import uses_tpu

if TYPE_CHECKING:
  from electra_tf.reading import model_source

ENCODER_SCOPE = "electra"


class HeadSpec(NamedTuple):
  """What the model needs of a task (its name, id and head), rebuilt from a head config."""

  name: str
  task_id: int
  head_config: Mapping[str, Any]

  def make_head(self) -> tf_keras.layers.Layer:
    return tf_keras.layers.deserialize(dict(self.head_config))


@serializable
class FinetuningModel(tf_keras.Model):
  """Shared encoder + task heads, built eagerly so ``tf1_variables()`` is complete at once.

  Args:
    bert_config: encoder sizes (``electra_tf.model_sizes.get_bert_config``).
    tasks: the run's tasks in ``task_id`` order (``task.make_head()`` gives each head), or the
      ``HeadSpec``s ``from_config`` makes.
    embedding_size: E; an ``electra/embeddings_project`` [E, H] is added when E != H.
    use_one_hot_embeddings: word embeddings by one-hot matmul (the official TPU graph) instead
      of a gather; changes the gradient type, hence the global norm clipping sees.
  """

  def __init__(self, bert_config: BertConfig, tasks: Sequence[Any],
               embedding_size: int | None = None, use_one_hot_embeddings: bool = False,
               **kwargs):
    super().__init__(name=kwargs.pop("name", "finetuning_model"), **kwargs)
    names = [t.name for t in tasks]
    if not names:
      raise ValueError("FinetuningModel needs at least one task")
    if len(set(names)) != len(names):
      raise ValueError(f"duplicate task names {names}")
    for i, task in enumerate(tasks):
      if task.task_id != i:
        raise ValueError(f"task {task.name!r} has task_id {task.task_id}, expected {i} "
                         "(its position in the task list)")
    self.bert_config = bert_config
    self.task_names = names
    self.encoder = Transformer(bert_config, embedding_size, scope=ENCODER_SCOPE,
                               use_one_hot_embeddings=use_one_hot_embeddings)
    self.encoder.build(None)
    heads = {}
    # The heads run in float32 under a mixed precision policy: their logits feed the losses
    # and predictions (the encoder's output is cast to float32 at their input).
    policy = tf_keras.mixed_precision.global_policy()
    tf_keras.mixed_precision.set_global_policy("float32")
    try:
      for task in tasks:
        head = task.make_head()
        if not head.built:  # a head rebuilt by from_config comes built
          head.build([None, None, bert_config.hidden_size])
        heads[task.name] = head
    finally:
      tf_keras.mixed_precision.set_global_policy(policy)
    self.heads = heads  # tracked by Keras as a dict: checkpoint paths model/heads/<task>/...
    self.built = True

  def get_config(self) -> dict:
    """Encoder sizes and the heads' configs (task_id order): all the model keeps of its tasks."""
    return {"name": self.name, "trainable": self.trainable,
            "bert_config": self.bert_config.to_dict(),
            "embedding_size": self.encoder.embedding_size,
            "use_one_hot_embeddings": self.encoder.embeddings.use_one_hot_embeddings,
            "heads": [tf_keras.layers.serialize(self.heads[n]) for n in self.task_names]}

  @classmethod
  def from_config(cls, config: dict, custom_objects=None) -> FinetuningModel:
    """A new model with the same encoder and heads (fresh weights); needs no task data."""
    specs = [HeadSpec(head["config"]["task_name"], i, head)
             for i, head in enumerate(config["heads"])]
    model = cls(BertConfig.from_dict(config["bert_config"]), specs,
                embedding_size=config["embedding_size"],
                use_one_hot_embeddings=config["use_one_hot_embeddings"],
                name=config.get("name", "finetuning_model"))
    model.trainable = config.get("trainable", True)
    return model

  @property
  def n_transformer_layers(self) -> int:
    return self.bert_config.num_hidden_layers

  def tf1_variables(self) -> dict[str, tf.Variable]:
    """Official TF1 checkpoint name -> variable (``electra/...``, ``task_specific/<task>/...``)."""
    return checkpoints.variables_by_name(self.variables)

  def call(self, features: Mapping[str, tf.Tensor], training: bool = False,
           task_names: Sequence[str] | None = None,
           seed: tf.Tensor | None = None) -> dict[str, Any]:
    """Runs the encoder and the heads.

    Args:
      features: a batch of decoded multi-task records: ``input_ids``, ``input_mask``,
        ``segment_ids`` int32 [B, T], ``task_id`` [B] and every task's ``<task>_*`` features.
      training: dropout on, and the SQuAD head's training path (end logits from the gold start).
      task_names: run only these heads (the others' losses count as 0); None runs all, as the
        official graph does. Prediction on a single-task batch uses it to skip the other heads.
      seed: int [2] (the Trainer's per-step, per-replica seed): dropout masks are drawn
        statelessly from it, so a resumed run draws the masks of an uninterrupted one (encoder
        from sub-seed 0, head i from sub-seed i + 1); None: Keras (stateful) dropout.
    Returns:
      ``loss`` [] (official multi-task loss: each example's own task loss, summed),
      ``task_id`` [B], ``sequence_output`` [B, T, H] and, per head run, ``<task>``: its output
      dict (see ``electra_tf.finetuning.task_heads``).
    """
    seed = seed if training else None
    encoded = self.encoder(features["input_ids"], features["input_mask"],
                           features["segment_ids"], training=training, seed=site_seed(seed, 0))
    sequence_output = encoded["sequence_output"]
    task_id = features["task_id"]
    outputs: dict[str, Any] = {"task_id": task_id, "sequence_output": sequence_output}
    unknown = sorted(set(task_names or ()) - set(self.task_names))
    if unknown:
      raise ValueError(f"unknown task(s) {unknown}; the model has {self.task_names}")
    losses = []
    for i, name in enumerate(self.task_names):
      if task_names is not None and name not in task_names:
        losses.append(tf.zeros(tf.shape(task_id), tf.float32))
        continue
      head = self.heads[name]
      seeded = ({"seed": site_seed(seed, i + 1)}  # heads without dropout take no seed
                if seed is not None and "seed" in inspect.signature(head.call).parameters
                else {})
      task_outputs, per_example_loss = head(sequence_output, features, training=training,
                                            **seeded)
      outputs[name] = task_outputs
      losses.append(per_example_loss)
    outputs["loss"] = multitask_loss(losses, task_id)
    return outputs


def create_model(config: FinetuningConfig, tasks: Sequence[Task]) -> FinetuningModel:
  """``FinetuningModel`` with the encoder sizes of a ``FinetuningConfig`` (debug shrinking
  included); checks ``max_seq_length <= max_position_embeddings`` as the official code.
  Word embeddings are a one-hot matmul when ``config.use_tpu`` or when called under a TPU
  strategy's ``scope()`` (as official), a gather otherwise."""

  check_settings(config)
  bert_config = get_bert_config(config)
  return FinetuningModel(bert_config, tasks, embedding_size=config.embedding_size,
                         use_one_hot_embeddings=uses_tpu(getattr(config, "use_tpu", False)))


# --------------------------------------------------------------------------------------------
# Initialisation
# --------------------------------------------------------------------------------------------

_TF2_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"


def _tf2_keys(prefix: str) -> list[str]:
  keys = checkpoints.read_retried(prefix, lambda: tf.train.list_variables(prefix))
  return [k for k, _ in keys if k.endswith(_TF2_VALUE)]


def load_init_checkpoint(model: FinetuningModel, checkpoint: str | model_source.LoadedModel
                         ) -> checkpoints.LoadReport:
  """Initialises ``model`` from a TF1 or TF2 checkpoint (prefix or directory), a Hugging Face
  folder, or such a path already opened by ``model_source.load_model``; see the module
  docstring. Every encoder variable must be filled; heads may be missing.

  Raises:
    FileNotFoundError: nothing at ``checkpoint``.
    ValueError: shape mismatch, or the checkpoint lacks encoder variables (a config that does
      not match the pre-trained model, e.g. ``model_size`` / ``embedding_size``).
  """
  from electra_tf.reading import model_source  # local: a model directory needs none of it

  source = (checkpoint if isinstance(checkpoint, model_source.LoadedModel)
            else model_source.load_model(checkpoint))
  prefix = source.prefix
  if source.kind == model_source.TF2:
    report = _load_tf2(model, prefix)
  else:
    report = model_source.assign_tf1_names(source, model.tf1_variables(), allow_missing=True,
                                           allow_unused=True)
  missing_encoder = [n for n in report.missing if n.startswith(ENCODER_SCOPE + "/")]
  if missing_encoder:
    raise ValueError(f"checkpoint {prefix} lacks {len(missing_encoder)} encoder variable(s), "
                     f"first: {missing_encoder[0]} (does the config match the pre-trained "
                     "model? model_size, embedding_size, model_hparam_overrides)")
  return report


_UNMATCHED = re.compile(r"Found (\d+) Python objects that were not bound.*?<tf\.Variable '([^':]+)")


def _restore(root: tf.train.Checkpoint, prefix: str, what: str,
             hint: str = "does the config match the pre-trained model?") -> None:
  try:
    status = checkpoints.read_retried(prefix, lambda: root.read(prefix))  # damage: "corrupt"
  except checkpoints.CorruptCheckpointError:
    raise
  except (ValueError, tf.errors.InvalidArgumentError) as e:
    first = str(e).strip().splitlines()[0]
    raise ValueError(f"cannot restore the {what} from {prefix}: {first}") from None
  try:
    status.assert_existing_objects_matched()
  except AssertionError as e:
    first = str(e).strip().splitlines()[0]
    unmatched = _UNMATCHED.search(first)
    if unmatched:  # TensorFlow's line goes on into the first variable's values
      first = f"{unmatched[1]} model objects not in it, first: {unmatched[2]}"
    raise ValueError(f"checkpoint {prefix} does not hold a matching {what} ({hint}): "
                     f"{first}") from None
  status.expect_partial()


def restore_finetuned(model: FinetuningModel, prefix: str) -> None:
  """Fills every variable of ``model`` from our TF2 fine-tuning checkpoint ``prefix``
  (``tf.train.Checkpoint(model=FinetuningModel)``; the optimizer and step are left).
  Raises a one-line ValueError when it does not hold this model (other tasks, other sizes),
  CorruptCheckpointError / CheckpointUnavailableError when its files do not read."""
  _restore(tf.train.Checkpoint(model=model), prefix, "fine-tuned model",
           "is it a checkpoint of these task_names and sizes?")


def restore_latest(model: FinetuningModel, model_dir: str) -> str | None:
  """``restore_finetuned`` from the newest complete ``ckpt-<N>`` of a fine-tuning run's
  ``model_dir`` (``training.latest_checkpoint``, listed with retries, any file system);
  returns its prefix, None when it has none (or there is no such folder)."""
  latest = latest_checkpoint(model_dir)
  if latest:
    restore_finetuned(model, latest)
  return latest


def _load_tf2(model: FinetuningModel, prefix: str) -> checkpoints.LoadReport:
  """Object-based restore from our pre-training or fine-tuning checkpoints."""
  keys = _tf2_keys(prefix)
  encoder_names = sorted(checkpoints.variables_by_name(model.encoder.variables))
  head_names: list[str] = []
  if any(k.startswith("model/discriminator/") for k in keys):  # PretrainingModel
    _restore(tf.train.Checkpoint(model=tf.train.Checkpoint(discriminator=model.encoder)),
             prefix, "discriminator")
    used = ("model/discriminator/",)
  elif any(k.startswith("model/encoder/") for k in keys):  # FinetuningModel
    _restore(tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=model.encoder)),
             prefix, "encoder")
    shared = [n for n in model.task_names if any(k.startswith(f"model/heads/{n}/") for k in keys)]
    if shared:
      heads = tf.train.Checkpoint(**{n: model.heads[n] for n in shared})
      _restore(tf.train.Checkpoint(model=tf.train.Checkpoint(heads=heads)), prefix,
               f"heads {shared}")
    head_names = sorted(checkpoints.variables_by_name(
        v for n in shared for v in model.heads[n].variables))
    used = ("model/encoder/",) + tuple(f"model/heads/{n}/" for n in shared)
  else:
    raise ValueError(f"TF2 checkpoint {prefix} has neither model/discriminator (pre-training) "
                     "nor model/encoder (fine-tuning) variables")
  loaded = encoder_names + head_names
  missing = sorted(set(model.tf1_variables()) - set(loaded))
  unused = [k for k in keys if not k.startswith(used)]
  optimizer_state = [k for k in unused if not k.startswith("model/")]
  other = [k for k in unused if k.startswith("model/")]
  return checkpoints.LoadReport(tuple(loaded), tuple(optimizer_state), tuple(other),
                                tuple(missing))


# --------------------------------------------------------------------------------------------
# Optimization
# --------------------------------------------------------------------------------------------


def num_train_steps(n_train_records: int, train_batch_size: int,
                    num_train_epochs: float) -> int:
  """Official ``int(n_examples // batch_size * num_train_epochs)``; ``n_train_records`` counts
  the padding records the writer adds up to a batch multiple."""
  steps = int(n_train_records // train_batch_size * num_train_epochs)
  if steps < 1:
    raise ValueError(f"no training steps: {n_train_records} records // batch "
                     f"{train_batch_size} * {num_train_epochs} epochs = {steps}")
  return steps


def create_finetuning_optimizer(config: FinetuningConfig, num_train_steps: int,
                                n_transformer_layers: int) -> AdamWeightDecay | Lamb:
  """The official fine-tuning ``create_optimizer`` call: linear decay, warmup
  ``warmup_proportion`` of the steps, weight decay, layer-wise decay ``layerwise_lr_decay``
  (multiplier ``decay ** (n_layers + 2 - depth)``, the official depths)."""
  return create_optimizer(
      config.learning_rate, num_train_steps, weight_decay_rate=config.weight_decay_rate,
      warmup_proportion=config.warmup_proportion,
      layerwise_lr_decay_power=config.layerwise_lr_decay,
      n_transformer_layers=n_transformer_layers, optimizer=config.optimizer)
