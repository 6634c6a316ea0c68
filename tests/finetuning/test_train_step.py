"""Full fine-tuning training steps against the official graph (reference train_step/).

Three RTE steps (batch 8, no dropout) through the real path: ``create_model``,
``create_finetuning_optimizer`` and ``Trainer``'s per-replica train step (forward, backward,
the optimizer's global-norm clipping and AdamWeightDecay update). Checked per step: the loss,
the global norm clipping used (word embeddings ``IndexedSlices`` counted unmerged, token-type
and position gradients dense), every clipped gradient, the applied learning rates; after step
3: every variable and Adam slot.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

from electra_tf import checkpoints, training
from electra_tf.config import FinetuningConfig
from electra_tf.finetuning import finetuning_model as model_lib
from electra_tf.finetuning import registry

LOSS_ATOL = 1e-5  # model outputs, as tests/finetuning/test_finetuning_model.py
TOL = 1e-6  # clipped gradients, parameters and slots, as tests/test_optimization.py
LR_ATOL = 1e-9  # learning rates, as tests/test_optimization.py
NORM_RTOL = TOL  # global norm (60 to 660 over the lanes): TOL relative (an ulp at 104: 7.6e-6)
WORD = "electra/embeddings/word_embeddings"
DENSE_EMBEDDINGS = ("electra/embeddings/token_type_embeddings",
                    "electra/embeddings/position_embeddings")
STEPS = (1, 2, 3)


@pytest.fixture(scope="module")
def step_dir(reference_dir):
  return reference_dir / "train_step" / "finetune_rte"


@pytest.fixture(scope="module")
def meta(step_dir):
  with open(step_dir / "golden_meta.json") as f:
    return json.load(f)


@pytest.fixture(scope="module")
def golden(step_dir):
  g = np.load(step_dir / "golden.npz")
  return {k: g[k] for k in g.files}


def _batch(golden, step):
  prefix = f"step{step}/in/"
  return {k[len(prefix):]: tf.constant(v) for k, v in golden.items() if k.startswith(prefix)}


def _record_clipping(optimizer, records):
  """Wraps the optimizer's own clipping to keep its inputs, global norm and outputs."""
  clip = optimizer._clip_gradients

  def recording_clip(grads):
    clipped = clip(grads)
    records.append({"grads": list(grads), "norm": tf.linalg.global_norm(grads),
                    "clipped": list(clipped)})
    return clipped

  optimizer._clip_gradients = recording_clip


def _start(meta, reference_dir, vocab_file, tmp, **overrides):
  """(model, optimizer, config) in the reference start state, built as run_finetuning does
  (under the current strategy's scope)."""
  hparams = dict(meta["hparams"], **overrides)
  num_train_steps = hparams.pop("num_train_steps")
  config = FinetuningConfig("stepgold", str(tmp), **hparams)
  tasks = registry.get_tasks(config.task_names, registry.make_tokenizer(vocab_file), str(tmp),
                             config.max_seq_length, preprocessed_data_dir=str(tmp))
  model = model_lib.create_model(config, tasks)
  model_lib.load_init_checkpoint(model, str(reference_dir / "electra_small_2l" / "model.ckpt"))
  head = {n: v for n, v in model.tf1_variables().items() if n.startswith("task_specific/")}
  checkpoints.load_tf1_checkpoint(head, str(reference_dir / "finetune_heads" / "model.ckpt"))
  optimizer = model_lib.create_finetuning_optimizer(config, num_train_steps,
                                                    model.n_transformer_layers)
  return model, optimizer, config


def _trainer(strategy, model, optimizer, config, model_dir, num_train_steps):
  return training.Trainer(
      strategy, model, optimizer,
      training.TrainSettings(model_dir=model_dir, num_train_steps=num_train_steps,
                             train_batch_size=config.train_batch_size, iterations_per_loop=3),
      # run_finetuning's step function with training=False: the reference ran without dropout
      step_fn=lambda batch, seed: {"total_loss": model(batch, training=False)["loss"]},
      log_fn=lambda message: None)


def _end_state(model, optimizer):
  state = {n: v.numpy() for n, v in model.tf1_variables().items()}
  state.update({n: v.numpy() for n, v in optimizer.tf1_slot_variables().items()})
  state["global_step"] = int(optimizer.iterations.numpy())
  return state


def _run_steps(trainer, optimizer, golden, steps):
  """Runs Trainer's per-replica train step on the recorded batches; returns what each saw."""
  records, seen = [], []
  _record_clipping(optimizer, records)
  names = [checkpoints.tf1_name(v) for v in trainer.model.trainable_variables]
  for step in steps:
    outputs = trainer._replica_train_step(_batch(golden, step), tf.constant(step - 1, tf.int64))
    record = records[-1]
    seen.append({
        "loss": float(outputs["total_loss"]), "norm": float(record["norm"]),
        "grads": dict(zip(names, record["grads"], strict=True)),
        "clipped": dict(zip(names, record["clipped"], strict=True)),
        "lr": float(optimizer.learning_rate)})
  return names, seen


@pytest.fixture(scope="module")
def run(meta, golden, reference_dir, vocab_file, tmp_path_factory):
  """Three steps from the reference start state, eagerly; per-step records and the end state."""
  tmp = tmp_path_factory.mktemp("train_step")
  model, optimizer, config = _start(meta, reference_dir, vocab_file, tmp)
  trainer = _trainer(tf.distribute.get_strategy(), model, optimizer, config, str(tmp / "model"),
                     meta["hparams"]["num_train_steps"])
  names, steps = _run_steps(trainer, optimizer, golden, STEPS)
  return {"steps": steps, "state": _end_state(model, optimizer), "names": names,
          "optimizer": optimizer}


def test_variables_in_official_order(run, meta):
  assert run["names"] == meta["trainable_variables"]


@pytest.mark.parametrize("step", STEPS)
def test_loss(run, golden, step):
  np.testing.assert_allclose(run["steps"][step - 1]["loss"], golden[f"step{step}/loss"],
                             rtol=0, atol=LOSS_ATOL)


@pytest.mark.parametrize("step", STEPS)
def test_gradient_types(run, meta, golden, step):
  grads = run["steps"][step - 1]["grads"]
  assert isinstance(grads[WORD], tf.IndexedSlices)
  # one unmerged row per position of the batch, padding included: [8 * 128, 128] (big lane)
  batch, seq_len = golden[f"step{step}/in/input_ids"].shape
  embedding_size = golden[f"step{step}/grad_values/{WORD}"].shape[1]
  assert grads[WORD].values.shape == (batch * seq_len, embedding_size)
  assert (batch, embedding_size) == (8, run["state"][WORD].shape[1])
  for name in DENSE_EMBEDDINGS:
    assert not isinstance(grads[name], tf.IndexedSlices), name
  want = {n: "IndexedSlices" if isinstance(g, tf.IndexedSlices) else "Tensor"
          for n, g in grads.items()}
  assert want == meta["grad_types"]


@pytest.mark.parametrize("step", STEPS)
def test_global_norm(run, golden, step):
  """The norm clipping used counts the word-embedding rows unmerged, as tf.clip_by_global_norm
  does in the official graph."""
  got = run["steps"][step - 1]["norm"]
  np.testing.assert_allclose(got, golden[f"step{step}/global_norm"], rtol=NORM_RTOL, atol=0)
  # far from the variants a gather of token types or merged word rows would give: at least
  # 0.1% of the norm, a thousand times the tolerance (golden lane: 0.093 to 2.9 at norms 60-73)
  for variant in ("global_norm_tokentype_per_position", "global_norm_all_dense_merged"):
    assert abs(got - golden[f"step{step}/{variant}"]) > 1000 * NORM_RTOL * got, variant


@pytest.mark.parametrize("step", STEPS)
def test_clipped_gradients(run, golden, step):
  clipped = run["steps"][step - 1]["clipped"]
  word = clipped[WORD]
  assert isinstance(word, tf.IndexedSlices)
  np.testing.assert_array_equal(word.indices.numpy(),
                                golden[f"step{step}/grad_indices/{WORD}"])
  np.testing.assert_allclose(word.values.numpy(), golden[f"step{step}/clipped_grad_values/{WORD}"],
                             rtol=0, atol=TOL, err_msg=WORD)
  for name, grad in clipped.items():
    if name != WORD:
      np.testing.assert_allclose(grad.numpy(), golden[f"step{step}/clipped_grad/{name}"],
                                 rtol=0, atol=TOL, err_msg=name)


@pytest.mark.parametrize("step", STEPS)
def test_applied_learning_rates(run, golden, step):
  base = run["steps"][step - 1]["lr"]
  np.testing.assert_allclose(base, golden[f"step{step}/applied_lr/base"], rtol=0, atol=LR_ATOL)
  multipliers = run["optimizer"].layer_lr_multipliers
  prefix = f"step{step}/applied_lr/"
  assert set(multipliers) == {k[len(prefix):] for k in golden
                              if k.startswith(prefix) and k != prefix + "base"}
  for key, multiplier in multipliers.items():
    np.testing.assert_allclose(np.float32(base) * np.float32(multiplier),
                               golden[f"step{step}/applied_lr/{key}"], rtol=0, atol=LR_ATOL,
                               err_msg=key)


def _assert_state_after_step3(got, step_dir):
  want = np.load(step_dir / "state_after_step3.npz")
  assert got["global_step"] == int(want["global_step"]) == 3
  rows = want[f"{WORD}@row_ids"]
  checked = 1
  for suffix in ("", "/adam_m", "/adam_v"):
    name = WORD + suffix
    np.testing.assert_allclose(got[name][rows], want[f"{name}@rows"], rtol=0, atol=TOL,
                               err_msg=name)
    checked += 1
  for name in want.files:
    if name == "global_step" or name.startswith(WORD):
      continue
    np.testing.assert_allclose(got[name], want[name], rtol=0, atol=TOL, err_msg=name)
    checked += 1
  assert checked == len([n for n in want.files if "@row_ids" not in n])


def test_state_after_step3(run, step_dir):
  _assert_state_after_step3(run["state"], step_dir)


def test_trainer_loop_one_device(meta, golden, reference_dir, vocab_file, step_dir, tmp_path):
  """The same three steps through Trainer.train (tf.function loop, OneDeviceStrategy, the
  run_finetuning default): same end state."""
  strategy = training.get_strategy("one_device")
  with strategy.scope():
    model, optimizer, config = _start(meta, reference_dir, vocab_file, tmp_path)
  trainer = _trainer(strategy, model, optimizer, config, str(tmp_path / "model"), len(STEPS))
  batches = [_batch(golden, step) for step in STEPS]

  def dataset_fn(ctx):
    data = tf.data.Dataset.from_tensors(batches[0])
    for batch in batches[1:]:
      data = data.concatenate(tf.data.Dataset.from_tensors(batch))
    return data

  trainer.train(dataset_fn)
  _assert_state_after_step3(_end_state(model, optimizer), step_dir)


def test_one_hot_word_embeddings(meta, golden, reference_dir, vocab_file, tmp_path):
  """use_tpu: word embeddings by one-hot matmul as the official TPU graph: same loss, a dense
  merged word-embedding gradient, so the norm is the reference's all-dense-merged variant."""
  model, optimizer, config = _start(meta, reference_dir, vocab_file, tmp_path, use_tpu=True)
  assert model.encoder.embeddings.use_one_hot_embeddings
  trainer = _trainer(tf.distribute.get_strategy(), model, optimizer, config,
                     str(tmp_path / "model"), meta["hparams"]["num_train_steps"])
  _, (seen,) = _run_steps(trainer, optimizer, golden, (1,))
  np.testing.assert_allclose(seen["loss"], golden["step1/loss"], rtol=0, atol=LOSS_ATOL)
  assert not isinstance(seen["grads"][WORD], tf.IndexedSlices)
  np.testing.assert_allclose(seen["norm"], golden["step1/global_norm_all_dense_merged"],
                             rtol=NORM_RTOL, atol=0)
