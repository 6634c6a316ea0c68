"""Optimizer parity with the official ``create_optimizer`` trajectories in reference/optimizer/."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers.paths import REPO_ROOT

from electra_tf import optimization

CONFIGS = ("pretrain_linear", "finetune_layerwise", "no_warmup_power2")
MODES = ("as_run", "ordered")
TOL = 1e-6


@pytest.fixture(scope="module")
def golden(reference_dir):
  return dict(np.load(reference_dir / "optimizer" / "golden.npz"))


@pytest.fixture(scope="module")
def meta(reference_dir):
  with open(reference_dir / "optimizer" / "optimizer_meta.json") as f:
    return json.load(f)


def _lr_keys(golden, prefix):
  """{layer-wise key or None: [13] official lr evaluated at global_step 0..12}."""
  if prefix + "lr_by_global_step" in golden:
    return {None: golden[prefix + "lr_by_global_step"]}
  start = prefix + "lr_by_global_step["
  return {k[len(start):-1]: golden[k] for k in golden if k.startswith(start)}


def _reference_trajectory(golden, meta_run, prefix, mode):
  """Independent float64 numpy version of the official update, warmup 0 -> factor 1.

  Uses only the meta facts (kwargs, weight-decay flags, layer-wise key multipliers).
  Returns {name: [12, ...] values after each step}.
  """
  kw = meta_run["create_optimizer_kwargs"]
  names = [n for n, _ in meta_run["variables"]]
  warmup = max(kw["num_train_steps"] * kw["warmup_proportion"], kw["warmup_steps"])

  def lr(step):
    p = min(step, kw["num_train_steps"]) / kw["num_train_steps"]
    rate = kw["learning_rate"] * (1 - p) ** kw["lr_decay_power"]
    return rate * (min(1.0, step / warmup) if warmup else 1.0)

  mult = meta_run["layerwise_key_multipliers"]
  params = {n: golden[prefix + "init/" + n].astype(np.float64) for n in names}
  m = {n: np.zeros_like(params[n]) for n in names}
  v = {n: np.zeros_like(params[n]) for n in names}
  out = {n: [] for n in names}
  for k in range(12):
    grads = {n: golden[prefix + "grad/" + n][k].astype(np.float64) for n in names}
    norm = np.sqrt(sum(np.sum(g * g) for g in grads.values()))
    scale = min(1.0, 1.0 / norm)
    step_lr = lr(k + 1 if mode == "as_run" else k)
    for n in names:
      g = grads[n] * scale
      m[n] = 0.9 * m[n] + 0.1 * g
      v[n] = 0.999 * v[n] + 0.001 * g * g
      update = m[n] / (np.sqrt(v[n]) + 1e-6)
      if meta_run["per_variable"][n]["weight_decay_applied"]:
        update = update + kw["weight_decay_rate"] * params[n]
      factor = 1.0 if mult is None else next(x for key, x in mult.items() if key in n)
      params[n] = params[n] - step_lr * factor * update
      out[n].append(params[n].copy())
  return {n: np.stack(x) for n, x in out.items()}


def _run(golden, meta_run, prefix, mode, step_fn_wrapper=None):
  """Feeds the stored gradients for 12 steps; returns per-step values/slots/clipped/lr."""
  names = [n for n, _ in meta_run["variables"]]
  variables = [tf.Variable(golden[prefix + "init/" + n], name=n) for n in names]
  opt = optimization.create_optimizer(lr_step_mode=mode, **meta_run["create_optimizer_kwargs"])

  def step(grads):
    opt.apply_gradients(zip(grads, variables, strict=True))

  step = step_fn_wrapper(step) if step_fn_wrapper else step
  rec = {"value": {n: [] for n in names}, "adam_m": {n: [] for n in names},
         "adam_v": {n: [] for n in names}, "clipped": {n: [] for n in names}, "lr": []}
  for k in range(12):
    grads = [tf.constant(golden[prefix + "grad/" + n][k]) for n in names]
    for n, c in zip(names, opt.clip_gradients(grads), strict=True):
      rec["clipped"][n].append(c.numpy())
    step(grads)
    rec["lr"].append(float(opt.learning_rate.numpy()))
    slots = opt.tf1_slot_variables()
    for n, var in zip(names, variables, strict=True):
      rec["value"][n].append(var.numpy())
      rec["adam_m"][n].append(slots[n + "/adam_m"].numpy())
      rec["adam_v"][n].append(slots[n + "/adam_v"].numpy())
  assert int(opt.iterations.numpy()) == meta_run["final_global_step"]
  return opt, rec


# Measured: inside tf.function the trajectories are bit-identical to the official graph (grappler
# rewrites the arithmetic the same way); eagerly they differ by <= 1 float32 ulp (~1.2e-7), and
# with grappler disabled the tf.function run equals the eager one bit for bit.
@pytest.mark.parametrize("execution", ["eager", "tf_function"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("config", CONFIGS)
def test_golden_trajectory(golden, meta, config, mode, execution):
  meta_run = meta[config][mode]
  prefix = f"{config}/{mode}/"
  names = [n for n, _ in meta_run["variables"]]
  wrapper = tf.function if execution == "tf_function" else None
  opt, rec = _run(golden, meta_run, prefix, mode, step_fn_wrapper=wrapper)
  assert sorted(opt.tf1_slot_variables()) == sorted(meta_run["slot_variables"])
  for n in names:
    np.testing.assert_allclose(np.stack(rec["clipped"][n]), golden[prefix + "clipped_grad/" + n],
                               rtol=0, atol=TOL, err_msg=n)
    for slot in ("adam_m", "adam_v"):
      np.testing.assert_allclose(np.stack(rec[slot][n]), golden[f"{prefix}slot/{n}/{slot}"],
                                 rtol=0, atol=TOL, err_msg=f"{n}/{slot}")

  # Learning rate each update used (before layer-wise multipliers) = the official lr at the
  # global step the mode reads (applied_lr_global_step; -1 = both candidates equal).
  lr_by_step = _lr_keys(golden, prefix)
  base = lr_by_step.get(None, lr_by_step.get("task_specific/"))
  read = [k + 1 if mode == "as_run" else k for k in range(12)]
  for ours_read, official_read in zip(read, meta_run["applied_lr_global_step"], strict=True):
    assert official_read in (ours_read, -1)
  reference = _reference_trajectory(golden, meta_run, prefix, mode)
  golden_finite = all(np.isfinite(golden[prefix + "value/" + n]).all() for n in names)
  if golden_finite:
    np.testing.assert_allclose(rec["lr"], base[read], rtol=0, atol=1e-9)
    for n in names:
      np.testing.assert_allclose(np.stack(rec["value"][n]), golden[prefix + "value/" + n],
                                 rtol=0, atol=TOL, err_msg=n)
      # The numpy reference reproduces the official data, so it can judge the NaN case below.
      np.testing.assert_allclose(reference[n], golden[prefix + "value/" + n], rtol=0, atol=TOL)
  else:
    # Official ordered mode with warmup 0: lr(0) = 0/0 = NaN poisons every variable. We
    # deliberately use warmup factor 1 (lr(0) = learning_rate) and stay finite.
    assert (config, mode) == ("no_warmup_power2", "ordered")
    assert np.isnan(base[0]) and np.isnan(golden[prefix + "value/" + names[0]]).all()
    kw = meta_run["create_optimizer_kwargs"]
    assert rec["lr"][0] == pytest.approx(kw["learning_rate"], rel=1e-7)
    np.testing.assert_allclose(rec["lr"][1:], base[1:12], rtol=0, atol=1e-9)
    for n in names:
      np.testing.assert_allclose(np.stack(rec["value"][n]), reference[n], rtol=0, atol=TOL)


@pytest.mark.parametrize("config", CONFIGS)
def test_learning_rate_at_matches_official_schedule(golden, meta, config):
  meta_run = meta[config]["as_run"]
  kw = meta_run["create_optimizer_kwargs"]
  schedule_kw = {k: kw[k] for k in ("learning_rate", "num_train_steps", "warmup_steps",
                                    "warmup_proportion", "lr_decay_power")}
  ours = np.array([optimization.learning_rate_at(s, **schedule_kw).numpy() for s in range(13)])
  for key, official in _lr_keys(golden, f"{config}/as_run/").items():
    scaled = ours if key is None else ours * np.float32(meta_run["layerwise_key_multipliers"][key])
    finite = np.isfinite(official)
    np.testing.assert_allclose(scaled[finite], official[finite], rtol=0, atol=1e-9)
    if not finite.all():  # warmup 0 at step 0: official NaN, ours the undecayed rate
      assert finite[1:].all() and scaled[0] == pytest.approx(kw["learning_rate"], rel=1e-7)


def test_layer_multipliers_official_and_fixed(meta):
  official = optimization.layer_lr_multipliers(0.8, 2)
  expected = meta["finetune_layerwise"]["as_run"]["layerwise_key_multipliers"]
  assert official.keys() == expected.keys()
  for key in expected:
    assert official[key] == pytest.approx(expected[key], rel=1e-12)
  # Official quirk (electra#51): last encoder layer decay^2 below the task head.
  assert official["encoder/layer_1/"] / official["task_specific/"] == pytest.approx(0.64)
  fixed = optimization.layer_lr_multipliers(0.8, 3, fix_depth=True)
  assert fixed["task_specific/"] == 1.0
  assert fixed["encoder/layer_2/"] == pytest.approx(0.8)
  assert fixed["encoder/layer_0/"] == pytest.approx(0.8 ** 3)
  assert fixed["/embeddings/"] == fixed["/embeddings_project/"] == pytest.approx(0.8 ** 4)


def test_weight_decay_exclusion_matches_official(meta):
  meta_run = meta["pretrain_linear"]["as_run"]
  opt = optimization.create_optimizer(0.01, 10, weight_decay_rate=0.01)
  variables = [tf.Variable(tf.zeros(shape), name=n) for n, shape in meta_run["variables"]]
  opt.build(variables)
  for n, used in zip(opt._tf1_names, opt._use_decay, strict=True):
    assert used == meta_run["per_variable"][n]["weight_decay_applied"], n


_MIRRORED_SCRIPT = r"""
import json, sys
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from electra_tf import optimization

golden = dict(np.load(sys.argv[1]))
meta = json.load(open(sys.argv[2]))
# One strategy for the whole process: a second MirroredStrategy on the same devices reuses
# collective instance keys and its all-reduces get mixed up with the first one's.
mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
result = {}
for config, mode in [("finetune_layerwise", "as_run"), ("pretrain_linear", "ordered")]:
  run = meta[config][mode]
  prefix = f"{config}/{mode}/"
  names = [n for n, _ in run["variables"]]
  out = {}
  for label, strategy in [("one", tf.distribute.get_strategy()),
                          ("mirrored", mirrored)]:
    with strategy.scope():
      variables = [tf.Variable(golden[prefix + "init/" + n], name=n) for n in names]
      opt = optimization.create_optimizer(lr_step_mode=mode, **run["create_optimizer_kwargs"])

    @tf.function
    def step(grads):
      strategy.run(lambda gs: opt.apply_gradients(zip(gs, variables)), args=(grads,))

    values = []
    for k in range(12):
      grads = [tf.constant(golden[prefix + "grad/" + n][k]) for n in names]
      if label == "mirrored":  # each replica holds half; the optimizer must sum them
        grads = strategy.experimental_distribute_values_from_function(
            lambda ctx, grads=grads: [0.5 * g for g in grads])
      step(grads)
      slots = opt.tf1_slot_variables()
      values.append(np.concatenate(
          [np.ravel(v.numpy()) for v in variables]
          + [np.ravel(slots[n + s].numpy()) for n in names for s in ("/adam_m", "/adam_v")]))
    out[label] = np.stack(values)
    replica_gap = 0.0  # every replica's copy of every variable and slot must agree
    for var in variables + list(opt.tf1_slot_variables().values()):
      copies = [c.numpy() for c in strategy.experimental_local_results(var)]
      replica_gap = max([replica_gap] + [float(np.max(np.abs(c - copies[0]))) for c in copies])
    result[f"{config}/{mode}/{label}/replica_gap"] = replica_gap
    result[f"{config}/{mode}/{label}/iterations"] = int(opt.iterations.numpy())
    result[f"{config}/{mode}/{label}/n_replicas"] = strategy.num_replicas_in_sync
  golden_values = np.stack([np.concatenate(
      [np.ravel(golden[prefix + "value/" + n][k]) for n in names]
      + [np.ravel(golden[f"{prefix}slot/{n}{s}"][k]) for n in names
         for s in ("/adam_m", "/adam_v")]) for k in range(12)])
  result[f"{config}/{mode}/mirrored_vs_one"] = float(np.max(np.abs(out["mirrored"] - out["one"])))
  result[f"{config}/{mode}/mirrored_vs_golden"] = float(
      np.max(np.abs(out["mirrored"] - golden_values)))
print("RESULT " + json.dumps(result))
"""


@pytest.mark.slow  # a fresh TF process (logical devices must be set before TF starts): ~15 s
def test_mirrored_strategy_two_replicas_equals_one_device(reference_dir, tmp_path):
  env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
             CUDA_VISIBLE_DEVICES="")
  script = tmp_path / "mirrored_check.py"
  script.write_text(_MIRRORED_SCRIPT)
  proc = subprocess.run(
      [sys.executable, str(script), str(reference_dir / "optimizer" / "golden.npz"),
       str(reference_dir / "optimizer" / "optimizer_meta.json")],
      capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
  lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
  assert proc.returncode == 0 and lines, proc.stderr[-3000:]
  result = json.loads(lines[-1][len("RESULT "):])
  for run in ("finetune_layerwise/as_run", "pretrain_linear/ordered"):
    assert result[f"{run}/mirrored/n_replicas"] == 2
    assert result[f"{run}/one/iterations"] == result[f"{run}/mirrored/iterations"] == 12
    assert result[f"{run}/mirrored/replica_gap"] == 0.0, result
    # 0.5 g + 0.5 g == g exactly in float32 and the update ops are the same, so the two-replica
    # run must equal the one-device run bit for bit (a mean instead of a sum, or one replica's
    # gradient only, would give 0.5 g and differ at the unclipped steps).
    assert result[f"{run}/mirrored_vs_one"] == 0.0, result
    assert result[f"{run}/mirrored_vs_golden"] <= TOL, result


def test_slots_checkpoint_roundtrip(tmp_path):
  def make():
    variables = [tf.Variable(tf.ones([3, 2]), name="electra/encoder/layer_0/output/dense/kernel"),
                 tf.Variable(tf.ones([2]), name="task_specific/rte/dense/bias")]
    opt = optimization.create_optimizer(0.1, 10, layerwise_lr_decay_power=0.8,
                                        n_transformer_layers=1, weight_decay_rate=0.01)
    return variables, opt

  variables, opt = make()
  opt.apply_gradients([(tf.fill([3, 2], 0.3), variables[0]), (tf.fill([2], -0.2), variables[1])])
  path = tf.train.Checkpoint(optimizer=opt, v0=variables[0], v1=variables[1]).save(
      str(tmp_path / "ckpt"))
  variables2, opt2 = make()
  tf.train.Checkpoint(optimizer=opt2, v0=variables2[0], v1=variables2[1]).restore(path)
  opt2.build(variables2)
  assert int(opt2.iterations.numpy()) == 1
  saved, restored = opt.tf1_slot_variables(), opt2.tf1_slot_variables()
  assert sorted(restored) == [
      "electra/encoder/layer_0/output/dense/kernel/adam_m",
      "electra/encoder/layer_0/output/dense/kernel/adam_v",
      "task_specific/rte/dense/bias/adam_m", "task_specific/rte/dense/bias/adam_v"]
  for name, slot in saved.items():
    assert np.any(slot.numpy() != 0)
    np.testing.assert_array_equal(restored[name].numpy(), slot.numpy())


def test_sparse_gradient_same_as_dense():
  table = tf.Variable(tf.reshape(tf.range(12, dtype=tf.float32), [4, 3]) / 10.0,
                      name="electra/embeddings/word_embeddings")
  dense_table = tf.Variable(table.numpy(), name="electra/embeddings/word_embeddings")
  before = table.numpy()
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(tf.gather(table, [0, 2]) * [[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
  sparse = tape.gradient(loss, table)
  assert isinstance(sparse, tf.IndexedSlices)
  for var, grad in ((table, sparse), (dense_table, tf.convert_to_tensor(sparse))):
    opt = optimization.create_optimizer(0.1, 10, weight_decay_rate=0.01)
    opt.apply_gradients([(grad, var)])
  np.testing.assert_array_equal(table.numpy(), dense_table.numpy())
  assert not np.array_equal(table.numpy(), before)


def test_bad_inputs_raise_clear_errors():
  with pytest.raises(ValueError, match="lr_step_mode"):
    optimization.create_optimizer(0.1, 10, lr_step_mode="after")
  with pytest.raises(ValueError, match="n_transformer_layers"):
    optimization.create_optimizer(0.1, 10, layerwise_lr_decay_power=0.8)
  with pytest.raises(ValueError, match="num_train_steps"):
    optimization.create_optimizer(0.1, 0)
  opt = optimization.create_optimizer(0.1, 10, layerwise_lr_decay_power=0.8,
                                      n_transformer_layers=2)
  stray = tf.Variable(tf.zeros([2]), name="discriminator_predictions/dense/bias")
  with pytest.raises(ValueError, match="discriminator_predictions/dense/bias"):
    opt.apply_gradients([(tf.ones([2]), stray)])
  with pytest.raises(ValueError, match="no slots yet"):
    optimization.create_optimizer(0.1, 10).tf1_slot_variables()


def test_config_roundtrip():
  opt = optimization.create_optimizer(0.01, 10, weight_decay_rate=0.01, warmup_steps=3,
                                      layerwise_lr_decay_power=0.8, n_transformer_layers=2)
  config = opt.get_config()
  json.dumps(config)  # plain values only
  clone = optimization.AdamWeightDecay.from_config(config)
  assert clone.get_config() == config
  assert float(clone.learning_rate.numpy()) == float(opt.learning_rate.numpy())
