"""Family ``optimizer``: official ``create_optimizer`` trajectories on tiny variables.

Which official code made which file (``model/optimization.py``, unedited):

- ``optimizer/golden.npz``: ``optimization.create_optimizer(loss, **kwargs)`` (its
  ``polynomial_decay`` x warmup learning rate, ``_get_layer_lrs`` for the layer-wise run,
  ``tf.clip_by_global_norm``, ``AdamWeightDecayOptimizer.apply_gradients`` and the
  ``global_step`` increment), run for 12 steps in a TF1 session with ``loss = sum(var * G)``
  so that the gradient of each variable is the fed ``G``. The optimizer class and
  ``tf.clip_by_global_norm`` are wrapped (not edited) to read the learning-rate tensor, the
  apply op, the clipped gradients and the global norm. ``ordered`` adds one control dependency
  (increment after the updates) to the returned graph. Sessions use one thread so that the
  as_run graph's race between the increment and the learning rate's reads ends the same way in
  every run (increment first).
- ``optimizer/optimizer_meta.json``: kwargs, variables, slots (the official graph's
  ``adam_m`` / ``adam_v`` variables), ``AdamWeightDecayOptimizer._do_use_weight_decay`` per
  variable, ``_get_layer_lrs(1.0, 0.8, 2)`` multipliers, and facts measured on the trajectories
  (which global step's learning rate each update used, compared with a float64 numpy update).
"""

from __future__ import annotations

import pathlib

import numpy as np

from tools.official_goldens import files, official

STEPS = 12
STEP_SCALES = np.array([0.05, 0.1, 2.0, 0.3, 5.0, 0.02, 1.0, 0.5, 3.0, 0.08, 0.7, 1.5],
                       np.float32)
INIT_SEED, GRAD_SEED = 5, 6

_ENCODER_VARS = [
    ("electra/embeddings/word_embeddings", [5, 4]),
    ("electra/embeddings/LayerNorm/gamma", [4]),
    ("electra/embeddings/LayerNorm/beta", [4]),
    ("electra/embeddings_project/kernel", [4, 3]),
    ("electra/embeddings_project/bias", [3]),
    ("electra/encoder/layer_0/attention/self/query/kernel", [3, 3]),
    ("electra/encoder/layer_0/attention/self/query/bias", [3]),
    ("electra/encoder/layer_1/output/dense/kernel", [3, 3]),
    ("electra/encoder/layer_1/output/LayerNorm/gamma", [3]),
    ("task_specific/rte/dense/kernel", [3, 2]),
    ("task_specific/rte/dense/bias", [2]),
]
_PRETRAIN_VARS = _ENCODER_VARS + [
    ("generator/encoder/layer_0/attention/self/key/kernel", [2, 2]),
    ("generator_predictions/output_bias", [5]),
    ("discriminator_predictions/dense/kernel", [3, 3]),
]

CONFIGS = {
    "pretrain_linear": (_PRETRAIN_VARS, dict(
        learning_rate=0.01, num_train_steps=10, weight_decay_rate=0.01, warmup_steps=3,
        warmup_proportion=0, lr_decay_power=1.0)),
    "finetune_layerwise": (_ENCODER_VARS, dict(
        learning_rate=0.01, num_train_steps=12, weight_decay_rate=0.01, warmup_steps=0,
        warmup_proportion=0.1, lr_decay_power=1.0, layerwise_lr_decay_power=0.8,
        n_transformer_layers=2)),
    "no_warmup_power2": (_PRETRAIN_VARS, dict(
        learning_rate=0.01, num_train_steps=12, weight_decay_rate=0.0, warmup_steps=0,
        warmup_proportion=0, lr_decay_power=2.0)),
}
MODES = ("as_run", "ordered")


def _inputs(variables: list) -> tuple[dict, list[dict]]:
  """Initial values (``RandomState(5)``: 0.5 N(0, 1)) and fed gradients (``RandomState(6)``:
  ``step_scales[k]`` N(0, 1), step by step, variables in order)."""
  rs = np.random.RandomState(INIT_SEED)
  init = {n: (0.5 * rs.standard_normal(s)).astype(np.float32) for n, s in variables}
  rs = np.random.RandomState(GRAD_SEED)
  grads = [{n: (STEP_SCALES[k] * rs.standard_normal(s)).astype(np.float32) for n, s in variables}
           for k in range(STEPS)]
  return init, grads


def _lr64(kw: dict, step: int) -> float:
  """The official schedule in float64 (warmup 0 -> 0/0 = NaN at step 0, as the graph gives)."""
  with np.errstate(divide="ignore", invalid="ignore"):
    n = kw["num_train_steps"]
    rate = kw["learning_rate"] * (1 - min(step, n) / n) ** kw["lr_decay_power"]
    warmup = np.float64(max(n * kw["warmup_proportion"], kw["warmup_steps"]))
    return float(rate * np.minimum(1.0, np.float64(step) / warmup))


def _numpy_step(prev, m, v, lr, wd, decay):
  update = m / (np.sqrt(v) + 1e-6)
  if decay:
    update = update + wd * prev
  return prev - lr * update


def _max_abs(a, b) -> float:
  """Max |a - b| where NaN equals NaN (NaN against a number counts as infinity)."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  both = np.isnan(a) & np.isnan(b)
  diff = np.where(both, 0.0, np.abs(a - b))
  return float(np.max(np.where(np.isnan(diff), np.inf, diff), initial=0.0))


def _run(opt_mod, tf1, variables: list, kwargs: dict, mode: str, init: dict, grads: list):
  """One official graph, 12 steps; returns (arrays, facts)."""
  names = [n for n, _ in variables]
  captured: dict = {}
  cls = opt_mod.AdamWeightDecayOptimizer
  official_init, official_apply = cls.__init__, cls.apply_gradients

  def recording_init(self, *args, **kw):
    """The official constructor; records the optimizer (its learning-rate tensor or dict)."""
    official_init(self, *args, **kw)
    captured["opt"] = self

  def recording_apply(self, grads_and_vars, global_step=None, name=None):
    """The official apply_gradients; records the op it returns."""
    op = official_apply(self, grads_and_vars, global_step=global_step, name=name)
    captured["apply"] = op
    return op

  class TFWithRecordedClip:
    """``tf`` of the official module with ``clip_by_global_norm`` recorded."""

    def __getattr__(self, attr):
      return getattr(tf1, attr)

    @staticmethod
    def clip_by_global_norm(t_list, clip_norm, **kw):
      out = tf1.clip_by_global_norm(t_list, clip_norm, **kw)
      captured["clip"] = out
      return out

  graph = tf1.Graph()
  with graph.as_default():
    var_objs = [tf1.get_variable(n, initializer=tf1.constant(init[n]), dtype=tf1.float32)
                for n in names]
    feeds = [tf1.placeholder(tf1.float32, s, name=f"g{i}") for i, (_, s) in enumerate(variables)]
    loss = tf1.add_n([tf1.reduce_sum(v * g) for v, g in zip(var_objs, feeds, strict=True)])
    module_tf = opt_mod.tf
    cls.__init__, cls.apply_gradients = recording_init, recording_apply
    opt_mod.tf = TFWithRecordedClip()
    try:
      train_op = opt_mod.create_optimizer(loss, **kwargs)
    finally:
      cls.__init__, cls.apply_gradients, opt_mod.tf = official_init, official_apply, module_tf
    global_step = tf1.train.get_global_step()
    if mode == "ordered":
      increments = [op for op in train_op.control_inputs if op is not captured["apply"]]
      assert len(increments) == 1, train_op.control_inputs
      increments[0]._add_control_inputs([captured["apply"]])  # noqa: SLF001
    opt = captured["opt"]
    lr = opt.learning_rate
    clipped, norm = captured["clip"]
    slots = {v.op.name: v for v in tf1.global_variables()
             if v.op.name.endswith(("/adam_m", "/adam_v"))}
    step_ph = tf1.placeholder(tf1.int64, [])
    set_step = global_step.assign(step_ph)
    init_op = tf1.global_variables_initializer()

  arrays: dict = {"step_scales": STEP_SCALES}
  # One inter-op thread: the executor then runs ready ops in one fixed order, so the race the
  # official as_run graph has (nothing orders the global_step increment against the learning
  # rate's reads of global_step) always ends the same way: increment first, as measured with
  # default threads on an idle machine. With default threads and a loaded CPU, some runs read
  # global_step before the increment instead.
  config = tf1.ConfigProto(inter_op_parallelism_threads=1, intra_op_parallelism_threads=1)
  with tf1.Session(graph=graph, config=config) as sess:
    sess.run(init_op)
    for n, v in zip(names, sess.run(var_objs), strict=True):
      arrays["init/" + n] = v
    rec = {k: [] for k in ("gs", "norm")}
    per = {k: {n: [] for n in names} for k in ("grad", "clipped_grad", "value")}
    slot_rec = {s: [] for s in slots}
    for k in range(STEPS):
      feed = {ph: grads[k][n] for ph, n in zip(feeds, names, strict=True)}
      rec["gs"].append(sess.run(global_step))
      c, g_norm = sess.run([clipped, norm], feed)
      rec["norm"].append(g_norm)
      sess.run(train_op, feed)
      values = sess.run(var_objs)
      slot_values = sess.run(slots)
      for i, n in enumerate(names):
        per["grad"][n].append(grads[k][n])
        per["clipped_grad"][n].append(c[i])
        per["value"][n].append(values[i])
      for s in slots:
        slot_rec[s].append(slot_values[s])
    final_step = int(sess.run(global_step))
    lr_by_step = []
    for s in range(STEPS + 1):
      sess.run(set_step, {step_ph: s})
      lr_by_step.append(sess.run(lr))
    do_decay = {n: bool(opt._do_use_weight_decay(n)) for n in names}  # noqa: SLF001

  arrays["global_step_before"] = np.array(rec["gs"], np.int64)
  arrays["global_norm"] = np.array(rec["norm"], np.float32)
  for key, by_name in per.items():
    for n in names:
      arrays[f"{key}/{n}"] = np.stack(by_name[n]).astype(np.float32)
  for s in sorted(slots):
    arrays[f"slot/{s}"] = np.stack(slot_rec[s]).astype(np.float32)
  if isinstance(lr, dict):
    for key in lr:
      arrays[f"lr_by_global_step[{key}]"] = np.array([x[key] for x in lr_by_step], np.float32)
  else:
    arrays["lr_by_global_step"] = np.array(lr_by_step, np.float32)

  facts = {"final_global_step": final_step, "slot_variables": sorted(slots),
           "weight_decay": do_decay, "lr_keys": list(lr) if isinstance(lr, dict) else None}
  return arrays, facts


def _applied_steps(arrays: dict, variables: list, kwargs: dict, mults: dict, prefix_lr):
  """Which global step's learning rate each official update used, and the max abs difference
  of a float64 numpy re-implementation from the official values.

  -1 where both candidates (k, k + 1) are equal; where both fit equally (NaN values) the
  previous step's offset.
  """
  names = [n for n, _ in variables]
  lr32 = prefix_lr
  wd = kwargs["weight_decay_rate"]
  decay = arrays["_decay"]
  applied = []
  for k in range(STEPS):
    if lr32[k] == lr32[k + 1] or (np.isnan(lr32[k]) and np.isnan(lr32[k + 1])):
      applied.append(-1)
      continue
    errs = []
    for cand in (k, k + 1):
      err = 0.0
      for n in names:
        prev = (arrays["init/" + n] if k == 0 else arrays["value/" + n][k - 1]).astype(np.float64)
        m = arrays[f"slot/{n}/adam_m"][k].astype(np.float64)
        v = arrays[f"slot/{n}/adam_v"][k].astype(np.float64)
        pred = _numpy_step(prev, m, v, _lr64(kwargs, cand) * mults[n], wd, decay[n])
        err = max(err, _max_abs(pred, arrays["value/" + n][k]))
      errs.append(err)
    if errs[0] == errs[1]:  # the values cannot tell (NaN everywhere): the previous offset
      applied.append(k + (applied[-1] - (k - 1) if applied and applied[-1] >= 0 else 0))
    else:
      applied.append(k if errs[0] < errs[1] else k + 1)
  # Full float64 re-implementation with those steps (from the fed gradients only).
  params = {n: arrays["init/" + n].astype(np.float64) for n in names}
  m = {n: np.zeros_like(params[n]) for n in names}
  v = {n: np.zeros_like(params[n]) for n in names}
  worst = 0.0
  for k in range(STEPS):
    g = {n: arrays["grad/" + n][k].astype(np.float64) for n in names}
    norm = np.sqrt(sum(np.sum(x * x) for x in g.values()))
    scale = min(1.0, 1.0 / norm)
    step = applied[k] if applied[k] >= 0 else k
    for n in names:
      gc = g[n] * scale
      m[n] = 0.9 * m[n] + 0.1 * gc
      v[n] = 0.999 * v[n] + 0.001 * gc * gc
      params[n] = _numpy_step(params[n], m[n], v[n], _lr64(kwargs, step) * mults[n], wd,
                              decay[n])
      worst = max(worst, _max_abs(params[n], arrays["value/" + n][k]))
  return applied, worst


def write(official_dir: str, golden_dir: pathlib.Path) -> None:
  """Writes ``golden_dir/optimizer/{golden.npz, optimizer_meta.json}``."""
  del official_dir  # official.load() already put the checkout on sys.path
  tf1 = official.tf1
  opt_mod = official.module("model.optimization")
  npz: dict = {}
  meta: dict = {}
  for config, (variables, kwargs) in CONFIGS.items():
    init, grads = _inputs(variables)
    layerwise = kwargs.get("layerwise_lr_decay_power", -1) > 0
    key_mults = (opt_mod._get_layer_lrs(1.0, kwargs["layerwise_lr_decay_power"],  # noqa: SLF001
                                        kwargs["n_transformer_layers"]) if layerwise else None)
    meta[config] = {}
    for mode in MODES:
      arrays, facts = _run(opt_mod, tf1, variables, kwargs, mode, init, grads)
      per_variable, mults = {}, {}
      for n, _ in variables:
        entry = {"weight_decay_applied": facts["weight_decay"][n]}
        if layerwise:
          matched = [key for key in key_mults if key in n]
          assert len(matched) == 1, (n, matched)
          entry["lr_keys_matched"] = matched
          entry["lr_multiplier"] = [key_mults[key] for key in matched]
          mults[n] = key_mults[matched[0]]
        else:
          mults[n] = 1.0
        per_variable[n] = entry
      base = arrays["lr_by_global_step[task_specific/]" if layerwise else "lr_by_global_step"]
      arrays["_decay"] = facts["weight_decay"]
      applied, worst = _applied_steps(arrays, variables, kwargs, mults, base)
      del arrays["_decay"]
      arrays["applied_lr_global_step"] = np.array(applied, np.int64)
      prefix = f"{config}/{mode}/"
      npz.update({prefix + key: value for key, value in arrays.items()})
      meta[config][mode] = {
          "applied_lr_global_step": applied,
          "create_optimizer_kwargs": kwargs,
          "final_global_step": facts["final_global_step"],
          "layerwise_key_multipliers": key_mults,
          "lr_keys_in_npz": sorted(prefix + k for k in arrays if k.startswith("lr_by_global_step")),
          "numpy_reimplementation_max_abs_diff": worst,
          "per_variable": per_variable,
          "slot_variables": facts["slot_variables"],
          "variables": [[n, s] for n, s in variables],
      }
  files.save_npz(golden_dir / "optimizer" / "golden.npz", npz)
  files.save_json(golden_dir / "optimizer" / "optimizer_meta.json", meta)
