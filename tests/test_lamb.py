"""The ``lamb`` optimizer: tf-models-official's LAMB with the official weight-decay exclusions,
schedule, clipping and layer-wise learning rates; its slots in checkpoints and TF1 names."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from helpers import toy_train
from official.modeling.optimization import lamb as tfm_lamb

from electra_tf import names, optimization, training

NAMES = ("electra/encoder/layer_0/attention/self/query/kernel",  # decay + trust ratio
         "electra/encoder/layer_1/output/LayerNorm/gamma",  # excluded from both
         "electra/embeddings/word_embeddings",  # decay + trust ratio, deepest multiplier
         "task_specific/rte/dense/bias")  # excluded, multiplier 1
SHAPES = ([4, 3], [3], [6, 3], [2])
LR, STEPS, WARMUP, DECAY, LAYERS = 0.02, 10, 3, 0.8, 2


def _variables():
  rng = np.random.default_rng(0)
  return [tf.Variable(rng.normal(size=s).astype(np.float32), name=n)
          for n, s in zip(NAMES, SHAPES, strict=True)]


def _gradients(step):
  rng = np.random.default_rng(100 + step)
  scale = 0.1 if step % 2 else 2.0  # global norm below 1 (no clipping) and above
  return [tf.constant(scale * rng.normal(size=s).astype(np.float32)) for s in SHAPES]


class _Scaled(tf_keras.optimizers.schedules.LearningRateSchedule):
  def __init__(self, schedule, factor):
    self.schedule, self.factor = schedule, factor

  def __call__(self, step):
    return self.schedule(step) * self.factor


def test_trajectory_equals_tf_models_lamb_by_hand():
  ours_vars = _variables()
  ours = optimization.create_optimizer(
      LR, STEPS, weight_decay_rate=0.01, warmup_steps=WARMUP, layerwise_lr_decay_power=DECAY,
      n_transformer_layers=LAYERS, optimizer="lamb")
  assert isinstance(ours, tfm_lamb.LAMB)
  # by hand: one tf-models LAMB per variable, learning rate = official schedule x multiplier,
  # gradients clipped to global norm 1 first
  schedule = optimization.WarmupPolynomialDecay(LR, STEPS, WARMUP, step_offset=1)
  multipliers = optimization.layer_lr_multipliers(DECAY, LAYERS)
  hand_vars = _variables()
  hand = []
  for name in NAMES:
    factor = next(m for key, m in multipliers.items() if key in name)
    hand.append(tfm_lamb.LAMB(_Scaled(schedule, factor), weight_decay_rate=0.01, epsilon=1e-6,
                              exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]))
  assert [next(m for k, m in multipliers.items() if k in n) for n in NAMES] == pytest.approx(
      [DECAY ** 3, DECAY ** 2, DECAY ** 4, 1.0])
  for step in range(5):
    grads = _gradients(step)
    ours.apply_gradients(zip(grads, ours_vars, strict=True))
    clipped, norm = tf.clip_by_global_norm(grads, 1.0)
    assert (float(norm) > 1.0) == (step % 2 == 0)
    for opt, grad, var in zip(hand, clipped, hand_vars, strict=True):
      opt.apply_gradients([(grad, var)])
    for name, a, b in zip(NAMES, ours_vars, hand_vars, strict=True):
      np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-6, err_msg=name)
    slots = ours.tf1_slot_variables()
    for name, opt, var in zip(NAMES, hand, hand_vars, strict=True):
      for ours_slot, slot in (("lamb_m", "m"), ("lamb_v", "v")):
        np.testing.assert_allclose(slots[f"{name}/{ours_slot}"].numpy(),
                                   opt.get_slot(var, slot).numpy(), rtol=0, atol=1e-6)
  assert int(ours.iterations.numpy()) == 5
  start = _variables()
  for name, a, b in zip(NAMES, ours_vars, start, strict=True):
    assert np.abs(a.numpy() - b.numpy()).max() > 1e-3, name  # every variable moved


def test_exclusions_from_decay_and_trust_ratio():
  opt = optimization.create_optimizer(LR, STEPS, weight_decay_rate=0.01, optimizer="lamb")
  assert [opt._do_use_weight_decay(n) for n in NAMES] == [True, False, True, False]
  assert [opt._do_layer_adaptation(n) for n in NAMES] == [True, False, True, False]


def test_slots_checkpoint_roundtrip_and_tf1_names(tmp_path):
  def make():
    variables = _variables()
    opt = optimization.create_optimizer(LR, STEPS, weight_decay_rate=0.01, optimizer="lamb",
                                        layerwise_lr_decay_power=DECAY, n_transformer_layers=2)
    opt.build(variables)
    return variables, opt

  variables, opt = make()
  for step in range(2):
    opt.apply_gradients(zip(_gradients(step), variables, strict=True))
  path = tf.train.Checkpoint(optimizer=opt, v=variables).save(str(tmp_path / "ckpt"))
  variables2, opt2 = make()
  tf.train.Checkpoint(optimizer=opt2, v=variables2).restore(path).assert_consumed()
  assert int(opt2.iterations.numpy()) == 2
  saved, restored = opt.tf1_slot_variables(), opt2.tf1_slot_variables()
  assert sorted(restored) == sorted(f"{n}/{s}" for n in NAMES for s in names.LAMB_SLOTS)
  assert all(names.OPTIMIZER_STATE.search(k) for k in restored)  # TF1 loaders skip them
  for name, slot in saved.items():
    assert np.any(slot.numpy() != 0), name
    np.testing.assert_array_equal(restored[name].numpy(), slot.numpy())
  for opt_, vars_ in ((opt, variables), (opt2, variables2)):  # the next step is the same
    opt_.apply_gradients(zip(_gradients(2), vars_, strict=True))
  for a, b in zip(variables, variables2, strict=True):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("precision", [None, "float16"])
def test_trainer_trains_and_resumes_with_lamb(tmp_path, precision):
  def make(model_dir):
    strategy = training.get_strategy("one_device", num_gpus=0)
    training.set_mixed_precision_policy(precision)
    try:
      model, _ = toy_train.build(strategy, 6)
      with strategy.scope():
        opt = training.wrap_optimizer(optimization.create_optimizer(
            0.05, 6, weight_decay_rate=0.01, optimizer="lamb"), precision)
    finally:
      training.set_mixed_precision_policy(None)
    settings = training.TrainSettings(str(model_dir), 6, 8, iterations_per_loop=3,
                                      save_checkpoints_steps=3, gradient_accumulation_steps=2)
    return model, training.Trainer(strategy, model, opt, settings, log_fn=lambda line: None)

  model, trainer = make(tmp_path)
  before = [v.numpy() for v in model.trainable_variables]
  logged = trainer.train(toy_train.dataset_fn(8))
  assert np.isfinite(logged["total_loss"]) and logged["learning_rate"] == 0.0
  assert not any(np.array_equal(b, v.numpy())
                 for b, v in zip(before, model.trainable_variables, strict=True))
  keys = tf.train.load_checkpoint(str(tmp_path / "ckpt-6")).get_variable_to_shape_map()
  assert sum("/.OPTIMIZER_SLOT/" in k for k in keys) == 2 * len(model.trainable_variables)
  model2, trainer2 = make(tmp_path)
  assert trainer2.restore_or_initialize() == 6
  for a, b in zip(model.trainable_variables, model2.trainable_variables, strict=True):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
