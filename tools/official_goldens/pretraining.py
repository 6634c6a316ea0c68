"""Pre-training goldens: electra_small_2l/, electric_2l/, electra_untied_2l/ (official code).

Which official functions made which file (everything runs the unedited checkout):

- ``model.ckpt.*``, ``checkpoint``, ``variables.tsv``: the variables created by
  ``run_pretraining.PretrainingModel(config, features, is_training=False)`` (official
  initializers under ``tf.set_random_seed(20200323)``), then biases / betas overwritten with
  N(0, 0.05^2), output biases with N(0, 2^2) and gammas with 1 + N(0, 0.1^2)
  (``RandomState(7)``, sorted names), saved by
  ``tf.compat.v1.train.Saver(save_relative_paths=True)``.
- ``variables_train_graph.tsv``: ``PretrainingModel(..., is_training=True)`` followed by
  ``optimization.create_optimizer`` with the config's settings (as ``model_fn_builder`` does).
- ``bert_config.json``: ``training_utils.get_bert_config(config).to_dict()``;
  ``generator_bert_config.json``: ``run_pretraining.get_generator_config(...).to_dict()``;
  ``pretraining_config_resolved.json``: ``configure_pretraining.PretrainingConfig`` fields.
- ``golden.npz``: tensors of the same official graph; the random draws of
  ``pretrain_helpers.mask`` (``tf.random.categorical`` and ``tf.random.uniform``) and of
  ``pretrain_helpers.sample_from_softmax`` (the Gumbel uniform noise) are injected by giving
  the official module a ``tf`` whose ``random.categorical`` / ``random.uniform`` return fixed
  values (nothing in the checkout is edited). ``clean_disc_*``: the official
  ``build_transformer`` and ``_get_discriminator_output`` run again on the unmasked input,
  reusing the variables. ``sampler_*``: ``pretrain_helpers.sample_from_softmax`` on small logits.
- ``golden_inputs.json``: texts (tests/data/gutenberg and one sentence written for this data),
  their ``tokenization.FullTokenizer`` WordPieces, the overwritten variables.
"""

from __future__ import annotations

import json
import pathlib
import tempfile

import numpy as np

from tools.official_goldens import files, official

SEED = 20200323
ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXT = ROOT / "tests" / "data" / "gutenberg"

BASE_HPARAMS = {
    "model_size": "small",
    "embedding_size": 16,
    "model_hparam_overrides": {"hidden_size": 32, "num_attention_heads": 2,
                               "intermediate_size": 64, "num_hidden_layers": 2},
    "vocab_size": 1016,
    "max_seq_length": 64,
    "generator_hidden_size": 0.25,
    "untied_generator": True,
    "untied_generator_embeddings": False,
}
FOLDERS = {
    "electra_small_2l": {},
    "electric_2l": {"electra_objective": False, "electric_objective": True,
                    "two_tower_generator": True},
    "electra_untied_2l": {"untied_generator_embeddings": True},
}
# Fields of PretrainingConfig that are paths or names of this run (not stored).
_PATH_FIELDS = ("model_name", "pretrain_tfrecords", "vocab_file", "model_dir", "results_txt",
                "results_pkl")
ACCENTED = "Étienne found the café — its façade naïve — closed."
ROW1_LEN = 62  # row 1 (two segments) is cut to this many tokens (two padding positions left)


def _texts() -> list[tuple[str, str | None]]:
  """Three rows: Emma's first sentence; Sense and Sensibility's first two; an accented one."""
  emma = (TEXT / "austen-emma.txt").read_text(encoding="utf-8")
  sense = (TEXT / "austen-sense.txt").read_text(encoding="utf-8")
  paras = [" ".join(p.split()) for p in emma.split("\n\n") if p.strip()]
  emma_par = next(p for p in paras if p.startswith("Emma Woodhouse"))
  emma_first = emma_par.split("; and had lived")[0] + "."  # the first clause, as a sentence
  paras = [" ".join(p.split()) for p in sense.split("\n\n") if p.strip()]
  sense_par = next(p for p in paras if p.startswith("The family of Dashwood"))
  a, rest = sense_par.split(". ", 1)
  b = rest.split("acquaintance.")[0] + "acquaintance."
  return [(emma_first, None), (a + ".", b), (ACCENTED, None)]


def _encode(tokenizer, texts, max_len: int):
  """``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]``, segment 1 after the first [SEP], padded."""
  rows, tokens = [], []
  for i, (a, b) in enumerate(texts):
    toks = ["[CLS]"] + tokenizer.tokenize(a) + ["[SEP]"]
    seg = [0] * len(toks)
    if b is not None:
      tb = tokenizer.tokenize(b)[:ROW1_LEN - len(toks) - 1] + ["[SEP]"]
      toks += tb
      seg += [1] * len(tb)
    assert len(toks) <= max_len, (i, len(toks))
    tokens.append(toks)
    rows.append((tokenizer.convert_tokens_to_ids(toks), seg))
  ids = np.zeros((len(rows), max_len), np.int32)
  mask = np.zeros_like(ids)
  segs = np.zeros_like(ids)
  for i, (row, seg) in enumerate(rows):
    ids[i, :len(row)] = row
    mask[i, :len(row)] = 1
    segs[i, :len(row)] = seg
  return ids, mask, segs, tokens


def _draws(ids: np.ndarray, mask: np.ndarray, n: int, vocab):
  """Injected masking draws: distinct positions in row 0, a duplicate and a kept token in row
  1 (slot 1 repeats slot 0, slot 2 draws 0.9), a kept token in row 2 (slot 0 draws 0.95)."""
  rs = np.random.RandomState(2020)
  special = {vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"]}
  positions = np.zeros((ids.shape[0], n), np.int32)
  for r in range(ids.shape[0]):
    allowed = [p for p in range(ids.shape[1]) if mask[r, p] and int(ids[r, p]) not in special]
    positions[r] = rs.choice(allowed, size=n, replace=False)
  positions[1, 1] = positions[1, 0]
  uniform = rs.uniform(0.0, 0.8, size=(ids.shape[0], n)).astype(np.float32)
  uniform[1, 2] = 0.9
  uniform[2, 0] = 0.95
  return positions, uniform


class _Random:
  """``tf.random`` for the official pretrain_helpers: fixed draws, looked up by shape."""

  def __init__(self, tf1, categorical: np.ndarray, uniforms: dict):
    self._tf = tf1
    self._categorical = categorical
    self._uniforms = uniforms
    self.sample_logits = []

  def categorical(self, logits, num_samples, dtype=None):
    self.sample_logits.append(logits)
    assert tuple(self._categorical.shape) == (logits.shape[0], num_samples)
    return self._tf.constant(self._categorical, dtype=dtype or self._tf.int64)

  def uniform(self, shape, minval=0, maxval=1, **_):
    value = self._uniforms[tuple(int(s) for s in shape)]
    assert minval == 0 and maxval == 1
    return self._tf.constant(value, dtype=self._tf.float32)

  def __getattr__(self, name):
    return getattr(self._tf.random, name)


class _TF:
  """The official module's ``tf`` with ``random`` replaced by :class:`_Random`."""

  def __init__(self, tf1, random: _Random):
    self._tf = tf1
    self.random = random

  def __getattr__(self, name):
    return getattr(self._tf, name)


def _config(hparams: dict, vocab_file: str, data_dir: str):
  cp = official.module("configure_pretraining")
  config = cp.PretrainingConfig("golden", data_dir, **hparams)
  config.vocab_file = vocab_file
  return config


def _build(config, features, is_training: bool, random: _Random, rec: dict):
  """The official PretrainingModel with recorders around the functions it calls."""
  rp = official.module("run_pretraining")
  ph = official.module("pretrain.pretrain_helpers")
  modeling = official.module("model.modeling")
  tf1 = official.tf1
  saved = (ph.tf, rp.build_transformer, modeling.embedding_postprocessor, ph.mask,
           rp.PretrainingModel._get_discriminator_output, rp.PretrainingModel._get_fake_data,
           rp.PretrainingModel._get_cloze_outputs)
  rec.update(models=[], postprocessed=[], disc=[], fake=[], cloze=[], masked=[])

  def build_transformer(*args, **kwargs):
    model = saved[1](*args, **kwargs)
    rec["models"].append(model)
    return model

  def embedding_postprocessor(*args, **kwargs):
    out = saved[2](*args, **kwargs)
    rec["postprocessed"].append(out)
    return out

  def mask(*args, **kwargs):
    out = saved[3](*args, **kwargs)
    rec["masked"].append(out)
    return out

  def disc_output(self, *args, **kwargs):
    out = saved[4](self, *args, **kwargs)
    rec["disc"].append(out)
    return out

  def fake_data(self, *args, **kwargs):
    out = saved[5](self, *args, **kwargs)
    rec["fake"].append(out)
    return out

  def cloze_outputs(self, *args, **kwargs):
    out = saved[6](self, *args, **kwargs)
    rec["cloze"].append(out)
    rec["cloze_model_output"] = args[1].get_sequence_output()
    return out

  ph.tf = _TF(tf1, random)
  rp.build_transformer = build_transformer
  modeling.embedding_postprocessor = embedding_postprocessor
  ph.mask = mask
  rp.PretrainingModel._get_discriminator_output = disc_output
  rp.PretrainingModel._get_fake_data = fake_data
  rp.PretrainingModel._get_cloze_outputs = cloze_outputs
  try:
    model = rp.PretrainingModel(config, features, is_training)
    rec["model"] = model
    rec["unmasked"] = official.module("pretrain.pretrain_data").features_to_inputs(features)
    if not is_training:
      _build_clean(config, model, rec)
      rec["sampler_out"] = ph.sample_from_softmax(rec["sampler_logits"])
      rec["sampler_out_disallow"] = ph.sample_from_softmax(
          rec["sampler_logits"], disallow=rec["sampler_disallow"])
  finally:
    (ph.tf, rp.build_transformer, modeling.embedding_postprocessor, ph.mask,
     rp.PretrainingModel._get_discriminator_output, rp.PretrainingModel._get_fake_data,
     rp.PretrainingModel._get_cloze_outputs) = saved
  return model


def _build_clean(config, model, rec: dict) -> None:
  """Discriminator on the unmasked input, reusing every variable (no new ones)."""
  rp = official.module("run_pretraining")
  tf1 = official.tf1
  n_vars = len(tf1.global_variables())
  inputs = rec["unmasked"]
  with tf1.variable_scope(tf1.get_variable_scope(), reuse=True):
    disc = rp.build_transformer(config, inputs, False, model._bert_config, reuse=True,
                                embedding_size=config.embedding_size)
    cloze = rec["cloze"][0] if rec["cloze"] else None
    model._get_discriminator_output(inputs, disc, tf1.zeros_like(inputs.input_ids), cloze)
  assert len(tf1.global_variables()) == n_vars, "clean sub-graph created variables"


OUTPUT_BIAS_STD = 2.0


def _overwrite(sess, variables, rs: np.random.RandomState) -> list[str]:
  """Constant-initialised variables get random values (sorted names): see module docstring."""
  done = []
  for var in sorted(variables, key=lambda v: v.op.name):
    name = var.op.name
    shape = var.shape.as_list()
    if name.endswith("/output_bias"):  # wide enough that the logits, not the noise, pick samples
      value = rs.normal(0.0, OUTPUT_BIAS_STD, shape)
    elif name.endswith(("/bias", "/beta")):
      value = rs.normal(0.0, 0.05, shape)
    elif name.endswith("/gamma"):
      value = 1.0 + rs.normal(0.0, 0.1, shape)
    else:
      continue
    var.load(value.astype(np.float32), sess)
    done.append(name)
  return done


def _tsv(rows) -> str:
  lines = ["name\tshape\tdtype"]
  for name, shape, dtype in sorted(rows):
    lines.append(f"{name}\t{json.dumps(list(shape))}\t{dtype}")
  return "\n".join(lines) + "\n"


def _write_folder(hparams: dict, out: pathlib.Path, vocab_file: str) -> None:
  """Every file of one folder: eval graph (checkpoint, goldens), then the training graph."""
  tf1 = official.tf1
  tokenization = official.module("model.tokenization")
  rp = official.module("run_pretraining")
  training_utils = official.module("util.training_utils")
  optimization = official.module("model.optimization")
  ph = official.module("pretrain.pretrain_helpers")

  with tempfile.TemporaryDirectory() as tmp:
    config = _config(hparams, vocab_file, tmp)
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  texts = _texts()
  ids, mask, segs, tokens = _encode(tokenizer, texts, config.max_seq_length)
  n = config.max_predictions_per_seq
  vocab_size = config.vocab_size
  positions, mask_uniform = _draws(ids, mask, n, ph.get_vocab(config))
  gumbel = np.random.RandomState(1234).random_sample((3, n, vocab_size)).astype(np.float32)
  srs = np.random.RandomState(5)
  sampler_logits = (2.0 * srs.standard_normal((2, 3, 11))).astype(np.float32)
  sampler_uniform = srs.random_sample((2, 3, 11)).astype(np.float32)
  sampler_disallow = np.zeros((2, 3, 11), np.float32)
  sampler_disallow[..., 1] = 1.0
  uniforms = {(3, n): mask_uniform, (3, n, vocab_size): gumbel, (2, 3, 11): sampler_uniform}

  bert_config = training_utils.get_bert_config(config)
  gen_config = rp.get_generator_config(config, bert_config)

  # --- eval graph: checkpoint and goldens -------------------------------------------------
  graph = tf1.Graph()
  with graph.as_default():
    tf1.set_random_seed(SEED)
    features = {"input_ids": tf1.constant(ids), "input_mask": tf1.constant(mask),
                "segment_ids": tf1.constant(segs)}
    random = _Random(tf1, positions, uniforms)
    rec: dict = {"sampler_logits": tf1.constant(sampler_logits),
                 "sampler_disallow": tf1.constant(sampler_disallow)}
    model = _build(config, features, False, random, rec)
    global_step = tf1.train.get_or_create_global_step()
    model_vars = tf1.global_variables()
    saver = tf1.train.Saver(save_relative_paths=True)
    fetch = _fetches(config, model, rec, random, tf1)
    with tf1.Session(graph=graph) as sess:
      sess.run(tf1.global_variables_initializer())
      perturbed = _overwrite(sess, [v for v in model_vars if v is not global_step],
                             np.random.RandomState(7))
      out.mkdir(parents=True, exist_ok=True)
      saver.save(sess, str(out / "model.ckpt"), write_meta_graph=False)
      values = sess.run(fetch)
    ckpt_rows = [(v.op.name, v.shape.as_list(), v.dtype.base_dtype.name) for v in model_vars]

  # --- training graph: variable names with the optimizer's slots ----------------------------
  train_graph = tf1.Graph()
  with train_graph.as_default():
    tf1.set_random_seed(SEED)
    features = {"input_ids": tf1.constant(ids), "input_mask": tf1.constant(mask),
                "segment_ids": tf1.constant(segs)}
    model_t = _build(config, features, True, _Random(tf1, positions, uniforms), {})
    optimization.create_optimizer(
        model_t.total_loss, config.learning_rate, config.num_train_steps,
        weight_decay_rate=config.weight_decay_rate, use_tpu=config.use_tpu,
        warmup_steps=config.num_warmup_steps, lr_decay_power=config.lr_decay_power)
    train_rows = [(v.op.name, v.shape.as_list(), v.dtype.base_dtype.name)
                  for v in tf1.global_variables()]

  arrays = _arrays(config, values, ids, mask, segs, positions, mask_uniform, gumbel,
                   sampler_logits, sampler_uniform, sampler_disallow)
  files.save_npz(out / "golden.npz", arrays)
  files.save_text(out / "variables.tsv", _tsv(ckpt_rows))
  files.save_text(out / "variables_train_graph.tsv", _tsv(train_rows))
  files.save_json(out / "hparams.json", hparams)
  files.save_json(out / "bert_config.json", bert_config.to_dict())
  files.save_json(out / "generator_bert_config.json", gen_config.to_dict())
  resolved = {k: v for k, v in vars(config).items() if k not in _PATH_FIELDS}
  files.save_json(out / "pretraining_config_resolved.json", resolved)
  files.save_json(out / "golden_inputs.json", {
      "perturbed_variables": perturbed,
      "texts": [[a, b] for a, b in texts],
      "tokens": tokens,
  })


def _fetches(config, model, rec: dict, random: _Random, tf1) -> dict:
  """Tensors of the official graph to store (see the folder README for each key)."""
  electric = config.electric_objective
  masked = rec["masked"][0]
  fake = rec["fake"][0]
  disc_out, clean_out = rec["disc"]
  models = rec["models"]
  mlm = model.mlm_output
  f = {
      "candidates_sample_logits": random.sample_logits[0],
      "masked_input_ids": masked.input_ids,
      "masked_lm_positions": masked.masked_lm_positions,
      "masked_lm_ids": masked.masked_lm_ids,
      "masked_lm_weights": masked.masked_lm_weights,
      "gen_mlm_logits": mlm.logits,
      "gen_mlm_preds": mlm.preds,
      "gen_mlm_per_example_loss": mlm.per_example_loss,
      "gen_mlm_loss": mlm.loss,
      "sampled_tokids": tf1.argmax(fake.sampled_tokens, -1, output_type=tf1.int32),
      "fake_input_ids": fake.inputs.input_ids,
      "disc_labels": fake.is_fake_tokens,
      "disc_probs": disc_out.probs,
      "disc_preds": disc_out.preds,
      "disc_per_example_loss": disc_out.per_example_loss,
      "disc_loss": disc_out.loss,
      "total_loss": model.total_loss,
      "sampler_out": rec["sampler_out"],
      "sampler_out_disallow": rec["sampler_out_disallow"],
      "log_mask_ratio": tf1.log(config.mask_prob / (1 - config.mask_prob)),
  }
  graph = tf1.get_default_graph()
  if electric:
    ltr, rtl, disc, clean = models
    cloze = rec["cloze"][0]
    f.update({
        "ltr_input_ids": rec["unmasked"].input_ids,
        "rtl_input_ids": rec["unmasked"].input_ids,
        "ltr_token_embeddings": ltr.token_embeddings,
        "ltr_embedding_postprocessed": rec["postprocessed"][0],
        "ltr_embedding_output": ltr.get_embedding_output(),
        "ltr_all_layer_outputs": tf1.stack(ltr.get_all_encoder_layers()),
        "rtl_embedding_output": rtl.get_embedding_output(),
        "rtl_all_layer_outputs": tf1.stack(rtl.get_all_encoder_layers()),
        "gen_sequence_output": rec["cloze_model_output"],  # the two-tower generator's output
        "cloze_logits": cloze.logits,
        "cloze_weights": cloze.weights,
        "cloze_per_example_loss": cloze.per_example_loss,
        "cloze_preds": cloze.preds,
        "cloze_loss": cloze.loss,
        "disc_logits_raw": graph.get_tensor_by_name("discriminator_predictions/Squeeze:0"),
        "disc_log_q": graph.get_tensor_by_name("discriminator_predictions/StopGradient:0"),
        "clean_disc_logits_raw":
            graph.get_tensor_by_name("discriminator_predictions_1/Squeeze:0"),
        "clean_disc_log_q":
            graph.get_tensor_by_name("discriminator_predictions_1/StopGradient:0"),
    })
    disc_post, clean_post = rec["postprocessed"][2], rec["postprocessed"][3]
  else:
    gen, disc, clean = models
    f.update({
        "gen_token_embeddings": gen.token_embeddings,
        "gen_embedding_postprocessed": rec["postprocessed"][0],
        "gen_embedding_output": gen.get_embedding_output(),
        "gen_all_layer_outputs": tf1.stack(gen.get_all_encoder_layers()),
    })
    disc_post, clean_post = rec["postprocessed"][1], rec["postprocessed"][2]
  del clean_post
  f.update({
      "disc_token_embeddings": disc.token_embeddings,
      "disc_embedding_postprocessed": disc_post,
      "disc_embedding_output": disc.get_embedding_output(),
      "disc_all_layer_outputs": tf1.stack(disc.get_all_encoder_layers()),
      "disc_logits": disc_out.probs.op.inputs[0],
      "clean_disc_sequence_output": clean.get_sequence_output(),
      "clean_disc_logits": clean_out.probs.op.inputs[0],
  })
  return f


def _arrays(config, v: dict, ids, mask, segs, positions, mask_uniform, gumbel,
            sampler_logits, sampler_uniform, sampler_disallow) -> dict:
  """golden.npz: the fetched values plus summaries of the full-vocabulary logits."""
  electric = config.electric_objective
  weights = v["masked_lm_weights"]
  num = weights.sum(-1).astype(np.int32)
  a = {
      "input_ids": ids, "input_mask": mask, "segment_ids": segs,
      "inject_categorical_positions": positions.astype(np.int32),
      "inject_mask_uniform": mask_uniform,
      "num_to_predict": num,
      "disc_input_ids": v["fake_input_ids"],
      "gumbel_uniform_checksum": np.float64(gumbel.astype(np.float64).sum()),
      "gumbel_uniform_head": gumbel[0, 0, :16],
      "sampler_logits": sampler_logits, "sampler_uniform": sampler_uniform,
      "sampler_disallow": sampler_disallow,
  }
  logits = v.pop("gen_mlm_logits")
  real = [(r, s) for r in range(logits.shape[0]) for s in range(2) if weights[r, s] > 0]
  a["gen_mlm_logits_real_index"] = np.array(real, np.int32)
  a["gen_mlm_logits_real"] = np.stack([logits[r, s] for r, s in real])
  a.update(_summaries("gen_mlm_logits", logits))
  a["gen_mlm_logits_at_masked_lm_ids"] = np.take_along_axis(
      logits, v["masked_lm_ids"][..., None].astype(np.int64), -1)[..., 0]
  if not electric:
    a["gen_input_ids"] = v["masked_input_ids"]
  if electric:
    cl = v.pop("cloze_logits")
    a["cloze_logits_row0_pos0to3"] = cl[0, :4]
    a.update(_summaries("cloze_logits", cl))
    a["cloze_logits_at_input_ids"] = np.take_along_axis(
        cl, ids[..., None].astype(np.int64), -1)[..., 0]
    a["cloze_logits_at_fake_input_ids"] = np.take_along_axis(
        cl, v["fake_input_ids"][..., None].astype(np.int64), -1)[..., 0]
  for k, x in v.items():
    x = np.asarray(x)
    if x.dtype == np.int64:
      x = x.astype(np.int32)
    a[k] = x
  return a


def _summaries(prefix: str, logits: np.ndarray) -> dict:
  x = logits.astype(np.float64)
  m = x.max(-1, keepdims=True)
  return {f"{prefix}_logsumexp": (m[..., 0] + np.log(np.exp(x - m).sum(-1))),
          f"{prefix}_max": logits.max(-1),
          f"{prefix}_sum": x.sum(-1)}


def write(official_dir: str, golden_dir: pathlib.Path) -> None:
  """Writes the three pre-training folders (electra_small_2l first: finetuning reads it)."""
  del official_dir  # loaded by the caller (official.load)
  vocab_file = str(golden_dir / "vocab.txt")
  for name, extra in FOLDERS.items():
    hparams = {**BASE_HPARAMS, **extra}
    _write_folder(hparams, golden_dir / name, vocab_file)
    print(f"  wrote {name}", flush=True)
