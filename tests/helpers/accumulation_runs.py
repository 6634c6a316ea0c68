"""One optimizer update of a tiny pre-training model and a tiny fine-tuning model through the
Trainer, with and without gradient accumulation, recording what the update did (loss, the
clipped gradients the optimizer applied, new weights, Adam slots). A script for the
MirroredStrategy run (logical CPUs must be configured before TensorFlow initialises):

    python tests/helpers/accumulation_runs.py --vocab_file V --work_dir D --out_npz out.npz

Dropout is off and the masking / sampling draws are injected per example, so a micro-batch
sees exactly the draws its rows see in the one-batch run. Rows have different lengths, so
micro-batches have different numbers of real tokens and masked slots (the loss normalisers).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from electra_tf import optimization, training  # noqa: E402
from electra_tf.config import PretrainingConfig  # noqa: E402
from electra_tf.finetuning import runner  # noqa: E402
from electra_tf.finetuning.finetuning_model import FinetuningModel  # noqa: E402
from electra_tf.finetuning.task_heads import ClassificationHead  # noqa: E402
from electra_tf.modeling.bert_config import BertConfig  # noqa: E402
from electra_tf.names import tf1_name  # noqa: E402
from electra_tf.pretraining import masking, task  # noqa: E402
from electra_tf.pretraining.builder import build_pretraining_model  # noqa: E402

BATCH, SEQ, VOCAB, K = 16, 32, 1000, 4
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


class RecordingAdamW(optimization.AdamWeightDecay):
  """AdamWeightDecay that also keeps, per variable, the (clipped) gradient it last applied."""

  def build(self, var_list):
    super().build(var_list)
    if not hasattr(self, "applied"):
      self.applied = [self.add_variable_from_reference(v, "applied_grad") for v in var_list]

  def update_step(self, gradient, variable):
    index = self._index_dict[self._var_key(variable)]
    self.applied[index].assign(tf.convert_to_tensor(gradient))
    super().update_step(gradient, variable)


def _optimizer(layers: int | None = None) -> RecordingAdamW:
  schedule = optimization.WarmupPolynomialDecay(1e-3, 10, 0.0, step_offset=1)
  multipliers = None if layers is None else optimization.layer_lr_multipliers(0.8, layers)
  return RecordingAdamW(schedule, weight_decay_rate=0.01, layer_lr_multipliers=multipliers)


def _lengths(rng: np.random.Generator) -> np.ndarray:
  return rng.integers(8, SEQ + 1, BATCH)


def pretraining_case(vocab: dict[str, int]):
  """(build(strategy) -> (model, optimizer, step_fn, totals_fn), global-batch features)."""
  rng = np.random.default_rng(0)
  ids, mask = np.zeros([BATCH, SEQ], np.int32), np.zeros([BATCH, SEQ], np.int32)
  for row, n in enumerate(_lengths(rng)):
    ids[row, :n] = rng.integers(200, VOCAB, n)
    ids[row, 0], ids[row, n - 1] = vocab["[CLS]"], vocab["[SEP]"]
    mask[row, :n] = 1
  config = PretrainingConfig(
      "accum", "unused", vocab_size=VOCAB, max_seq_length=SEQ, embedding_size=16,
      model_hparam_overrides={"hidden_size": 32, "num_hidden_layers": 2, **NO_DROPOUT},
      learning_rate=1e-3, seed=5)
  n = config.max_predictions_per_seq
  features = {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids),
              # positions inside each row (slots past num_to_predict are zeroed by the model)
              "categorical_positions": (rng.random([BATCH, n]) * (mask.sum(1, keepdims=True) - 1)
                                        ).astype(np.int32) + 1,
              "mask_uniform": rng.random([BATCH, n]).astype(np.float32),
              "gumbel_uniform": rng.random([BATCH, n, VOCAB]).astype(np.float32)}

  def build(strategy):
    training.set_seed(5)
    with strategy.scope():
      model = build_pretraining_model(config, vocab=vocab)
      optimizer = _optimizer()
    return (model, optimizer, task.train_step_fn(model, []),
            task.batch_totals_fn(model.objective))

  return build, features


@dataclasses.dataclass
class _Task:
  name: str = "rte"
  task_id: int = 0

  def make_head(self):
    return ClassificationHead(self.name, 2, dropout_rate=0.0)


def finetuning_case():
  """The same for a one-task classifier; some rows are padding records (task_id 1)."""
  rng = np.random.default_rng(1)
  ids, mask = np.zeros([BATCH, SEQ], np.int32), np.zeros([BATCH, SEQ], np.int32)
  for row, n in enumerate(_lengths(rng)):
    ids[row, :n], mask[row, :n] = rng.integers(200, VOCAB, n), 1
  task_id = np.where(rng.random(BATCH) < 0.2, 1, 0).astype(np.int32)
  features = {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids),
              "task_id": task_id, "rte_label_ids": rng.integers(0, 2, BATCH).astype(np.int32),
              "rte_eid": np.arange(BATCH, dtype=np.int32)}
  bert = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=64, **NO_DROPOUT)

  def build(strategy):
    training.set_seed(7)
    with strategy.scope():
      model = FinetuningModel(bert, [_Task()], embedding_size=16)
      optimizer = _optimizer(layers=2)

    def step_fn(batch, seed):
      return runner.train_step_outputs(model(batch, training=True)["loss"], batch["task_id"], 1)

    return model, optimizer, step_fn, None

  return build, features


def one_update(strategy, build, features, k: int, model_dir: str) -> dict[str, np.ndarray]:
  """Builds the case under `strategy`, runs one update with k micro-batches; returns the
  logged loss and, by TF1 name, initial and new weights, applied gradients and slots."""
  model, optimizer, step_fn, totals_fn = build(strategy)
  init = {tf1_name(v): v.numpy() for v in model.trainable_variables}
  settings = training.TrainSettings(model_dir, 1, BATCH, iterations_per_loop=1, seed=3,
                                    gradient_accumulation_steps=k, micro_batch_losses="sum")
  trainer = training.Trainer(strategy, model, optimizer, settings, step_fn=step_fn,
                             log_fn=lambda line: None, batch_totals_fn=totals_fn)

  def dataset_fn(ctx):
    per_replica = ctx.get_per_replica_batch_size(BATCH)
    return tf.data.Dataset.from_tensor_slices(features).batch(per_replica)

  logged = trainer.train(dataset_fn)
  out = {"loss": np.float64(logged["total_loss"])}
  for v, grad in zip(model.trainable_variables, optimizer.applied, strict=True):
    name = tf1_name(v)
    out.update({f"init/{name}": init[name], f"weight/{name}": v.numpy(),
                f"grad/{name}": grad.numpy()})
  out.update({f"slot/{k}": v.numpy() for k, v in optimizer.tf1_slot_variables().items()})
  return out


def all_runs(strategy, vocab_file: str, work_dir: str) -> dict[str, np.ndarray]:
  """`<case>/k<k>/<key>` for both cases and k in (1, K)."""
  vocab = masking.read_special_ids(vocab_file)
  results = {}
  for case, (build, features) in (("pretraining", pretraining_case(vocab)),
                                  ("finetuning", finetuning_case())):
    for k in (1, K):
      out = one_update(strategy, build, features, k, os.path.join(work_dir, f"{case}_k{k}"))
      results.update({f"{case}/k{k}/{key}": value for key, value in out.items()})
  return results


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--vocab_file", required=True)
  p.add_argument("--work_dir", required=True)
  p.add_argument("--out_npz", required=True)
  args = p.parse_args()
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  strategy = training.get_strategy("mirrored", devices=["CPU:0", "CPU:1"])
  assert strategy.num_replicas_in_sync == 2
  np.savez(args.out_npz, **all_runs(strategy, args.vocab_file, args.work_dir))


if __name__ == "__main__":
  main()
