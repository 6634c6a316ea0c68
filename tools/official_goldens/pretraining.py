"""Pre-training goldens: electra_small_2l/, electric_2l/, electra_untied_2l/ (official code).

Which official functions made which file (everything runs the unedited checkout):

- ``model.ckpt.*``, ``checkpoint``, ``variables.tsv``: the variables created by
  ``run_pretraining.PretrainingModel(config, features, is_training=False)`` (official
  initializers under ``tf.set_random_seed(20200323)``), then biases / betas overwritten with
  N(0, 0.05^2), output biases with N(0, 2^2), gammas with 1 + N(0, 0.1^2), and
  N(0, KERNEL_NOISE^2) added to every kernel and embedding table (``RandomState(7)``, sorted
  names): pre-activations then reach the range where the erf and tanh GELUs, LayerNorm
  epsilons and softmax scales differ (docs/fidelity.md); saved by
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

from tools.official_goldens import files, official, pretraining_fetches, pretraining_inputs
from tools.official_goldens.pretraining_inputs import InjectedRandom

SEED = 20200323

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


def _config(hparams: dict, vocab_file: str, data_dir: str):
  cp = official.module("configure_pretraining")
  config = cp.PretrainingConfig("golden", data_dir, **hparams)
  config.vocab_file = vocab_file
  return config


def _build(config, features, is_training: bool, random: InjectedRandom, rec: dict):
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

  ph.tf = pretraining_inputs.InjectedTF(tf1, random)
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
KERNEL_NOISE = 0.03  # kernels and embeddings: see docs/fidelity.md ("Goldens that exercise")


def _overwrite(sess, variables, rs: np.random.RandomState) -> list[str]:
  """Constant-initialised variables get random values, kernels and embeddings added noise
  (sorted names): see the module docstring."""
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
    elif name.endswith(("/kernel", "_embeddings")):
      value = sess.run(var) + rs.normal(0.0, KERNEL_NOISE, shape)
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
  texts = pretraining_inputs.texts()
  ids, mask, segs, tokens = pretraining_inputs.encode(tokenizer, texts, config.max_seq_length)
  n = config.max_predictions_per_seq
  vocab_size = config.vocab_size
  positions, mask_uniform = pretraining_inputs.draws(ids, mask, n, ph.get_vocab(config))
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
    random = InjectedRandom(tf1, positions, uniforms)
    rec: dict = {"sampler_logits": tf1.constant(sampler_logits),
                 "sampler_disallow": tf1.constant(sampler_disallow)}
    model = _build(config, features, False, random, rec)
    global_step = tf1.train.get_or_create_global_step()
    model_vars = tf1.global_variables()
    saver = tf1.train.Saver(save_relative_paths=True)
    fetch = pretraining_fetches.fetches(config, model, rec, random, tf1)
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
    model_t = _build(config, features, True, InjectedRandom(tf1, positions, uniforms), {})
    optimization.create_optimizer(
        model_t.total_loss, config.learning_rate, config.num_train_steps,
        weight_decay_rate=config.weight_decay_rate, use_tpu=config.use_tpu,
        warmup_steps=config.num_warmup_steps, lr_decay_power=config.lr_decay_power)
    train_rows = [(v.op.name, v.shape.as_list(), v.dtype.base_dtype.name)
                  for v in tf1.global_variables()]

  arrays = pretraining_fetches.arrays(config, values, ids, mask, segs, positions, mask_uniform,
                                      gumbel, sampler_logits, sampler_uniform, sampler_disallow)
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


def write(official_dir: str, golden_dir: pathlib.Path) -> None:
  """Writes the three pre-training folders (electra_small_2l first: finetuning reads it)."""
  del official_dir  # loaded by the caller (official.load)
  vocab_file = str(golden_dir / "vocab.txt")
  for name, extra in FOLDERS.items():
    hparams = {**BASE_HPARAMS, **extra}
    _write_folder(hparams, golden_dir / name, vocab_file)
    print(f"  wrote {name}", flush=True)
