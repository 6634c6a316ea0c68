"""FinetuningModel: parity with the official multi-task graph (reference finetune_heads/),
initialisation from TF1 / TF2 checkpoints, layer-wise learning rates, SavedModel export."""

import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

from electra_tf import names
from electra_tf.config import FinetuningConfig, PretrainingConfig
from electra_tf.finetuning import finetuning_model as model_lib
from electra_tf.finetuning import registry
from electra_tf.hparams_input import load_hparams
from electra_tf.interop import finetuned_saved_model as export
from electra_tf.pretraining import masking
from electra_tf.pretraining.builder import build_pretraining_model

ATOL = 1e-5
TASK_NAMES = ["rte", "sts", "squad", "chunk"]  # the reference run's order (task ids)


@pytest.fixture(scope="module")
def heads_dir(reference_dir):
  return reference_dir / "finetune_heads"


@pytest.fixture(scope="module")
def golden(heads_dir):
  g = np.load(heads_dir / "golden.npz")
  return {k: g[k] for k in g.files}


def _tasks(tmp_path, vocab_file, task_names, max_seq_length, heads_dir=None):
  """Tasks with the official chunk label mapping (42 BIOES tags) cached under tmp_path."""
  if heads_dir is not None:
    shutil.copy(heads_dir / "chunk_label_mapping.json", tmp_path / "chunk_label_mapping.json")
  tokenizer = registry.make_tokenizer(vocab_file)
  return registry.get_tasks(task_names, tokenizer, str(tmp_path), max_seq_length,
                            preprocessed_data_dir=str(tmp_path))


@pytest.fixture(scope="module")
def reference_model(heads_dir, vocab_file, tmp_path_factory):
  """The reference config's multi-task model loaded from finetune_heads/model.ckpt."""
  tmp = tmp_path_factory.mktemp("heads")
  config = FinetuningConfig("m", str(tmp), **load_hparams(str(heads_dir / "hparams.json")))
  tasks = _tasks(tmp, vocab_file, config.task_names, config.max_seq_length, heads_dir)
  model = model_lib.create_model(config, tasks)
  report = model_lib.load_init_checkpoint(model, str(heads_dir / "model.ckpt"))
  return model, tasks, report


def _batch(golden, task):
  prefix = f"{task}/in/"
  return {k[len(prefix):]: tf.constant(v) for k, v in golden.items() if k.startswith(prefix)}


def _compare(want, got, key):
  got = np.asarray(got)
  assert got.shape == want.shape, key
  if np.issubdtype(want.dtype, np.integer):
    np.testing.assert_array_equal(got, want, err_msg=key)
  else:
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL, err_msg=key)


def test_variables_are_the_official_multitask_graph(reference_model, heads_dir):
  model, _, report = reference_model
  with open(heads_dir / "variables.tsv") as f:
    rows = [line.rstrip("\n").split("\t") for line in f][1:]
  want = {name: json.loads(shape) for name, shape, _ in rows if name != "global_step"}
  got = {name: v.shape.as_list() for name, v in model.tf1_variables().items()}
  assert got == want
  assert sorted(report.loaded) == sorted(want) and not report.missing and not report.unused_other


@pytest.mark.parametrize("task", TASK_NAMES)
def test_multitask_graph_matches_official(reference_model, golden, task):
  """Whole model (all four heads run on the batch): encoder output, the head's outputs and the
  official multi-task loss."""
  model, _, _ = reference_model
  out = model(_batch(golden, task), training=False)
  _compare(golden[f"{task}/encoder_sequence_output"], out["sequence_output"], task)
  for key in [k for k in golden if k.startswith(f"{task}/out/")]:
    _compare(golden[key], out[task][key.rsplit("/", 1)[1]], key)
  np.testing.assert_allclose(out["loss"], golden[f"{task}/model_loss"], rtol=1e-6, atol=ATOL)
  assert set(out) == {"loss", "task_id", "sequence_output", *TASK_NAMES}


def test_squad_training_path_matches_official(reference_model, golden):
  """is_training graph with dropout 0 (reference): end logits conditioned on the gold start."""
  model, _, _ = reference_model
  saved = [(b.attention_dropout.rate, b.hidden_dropout.rate) for b in model.encoder.blocks]
  for block in model.encoder.blocks:
    block.attention_dropout.rate = block.hidden_dropout.rate = 0.0
  model.encoder.embeddings.dropout.rate, emb_rate = 0.0, model.encoder.embeddings.dropout.rate
  try:
    out = model(_batch(golden, "squad"), training=True)
  finally:
    for block, (a, h) in zip(model.encoder.blocks, saved, strict=True):
      block.attention_dropout.rate, block.hidden_dropout.rate = a, h
    model.encoder.embeddings.dropout.rate = emb_rate
  for key in [k for k in golden if k.startswith("squad/train_mode_out/")]:
    _compare(golden[key], out["squad"][key.rsplit("/", 1)[1]], key)


def test_mixed_batch_loss_is_each_examples_own_task(reference_model, golden):
  """A batch mixing rte and chunk rows, plus a padding row (task_id = n_tasks): the loss is
  the sum of each row's own head loss and padding adds nothing."""
  model, _, _ = reference_model
  rte, chunk = _batch(golden, "rte"), _batch(golden, "chunk")
  pad = {k: tf.zeros_like(v[:1]) for k, v in rte.items()}
  pad["task_id"] = tf.constant([len(TASK_NAMES)], tf.int32)
  mixed = {k: tf.concat([rte[k], chunk[k], pad[k]], 0) for k in rte}
  out = model(mixed, training=False)
  want = golden["rte/model_loss"] + golden["chunk/model_loss"]
  np.testing.assert_allclose(out["loss"], want, rtol=1e-6, atol=ATOL)
  only_rte = model(mixed, training=False, task_names=["rte"])
  np.testing.assert_allclose(only_rte["loss"], golden["rte/model_loss"], rtol=1e-6, atol=ATOL)
  assert "chunk" not in only_rte
  with pytest.raises(ValueError, match="unknown task"):
    model(mixed, task_names=["mnli"])


def test_graph_mode_step_matches_eager(reference_model, golden):
  model, _, _ = reference_model
  batch = _batch(golden, "chunk")
  step = tf.function(lambda b: model(b, training=False)["chunk"]["logits"])
  np.testing.assert_allclose(step(batch), golden["chunk/out/logits"], rtol=0, atol=ATOL)


# --------------------------------------------------------------------------------------------
# Initialisation
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_config(reference_dir, tmp_path_factory):
  """Fine-tuning config with the electra_small_2l encoder, short sequences, all four tasks."""
  tmp = tmp_path_factory.mktemp("small")
  hparams = {**_encoder_hparams(reference_dir), "max_seq_length": 64, "task_names": TASK_NAMES}
  return tmp, FinetuningConfig("m", str(tmp), **hparams)


def _encoder_hparams(reference_dir):
  """The encoder shape of the lane's electra_small_2l (its hparams.json)."""
  stored = load_hparams(str(reference_dir / "electra_small_2l" / "hparams.json"))
  return {k: stored[k] for k in ("model_size", "model_hparam_overrides", "vocab_size",
                                 "embedding_size") if k in stored}


def _small_model(small_config, vocab_file, heads_dir, task_names=TASK_NAMES):
  tmp, config = small_config
  tasks = _tasks(tmp, vocab_file, task_names, config.max_seq_length, heads_dir)
  return model_lib.create_model(config, tasks), tasks


def test_init_from_official_pretraining_checkpoint(small_config, vocab_file, heads_dir,
                                                   reference_dir):
  """Only electra/* is used: generator / *_predictions unused, heads missing (left as built)."""
  model, _ = _small_model(small_config, vocab_file, heads_dir)
  heads_before = {n: v.numpy() for n, v in model.tf1_variables().items()
                  if n.startswith("task_specific/")}
  ckpt = str(reference_dir / "electra_small_2l" / "model.ckpt")
  report = model_lib.load_init_checkpoint(model, ckpt)
  reader = tf.train.load_checkpoint(ckpt)
  variables = model.tf1_variables()
  encoder = sorted(n for n in variables if n.startswith("electra/"))
  assert sorted(report.loaded) == encoder
  for name in encoder:
    np.testing.assert_array_equal(variables[name].numpy(), reader.get_tensor(name), err_msg=name)
  assert sorted(report.missing) == sorted(heads_before)
  for name, value in heads_before.items():
    np.testing.assert_array_equal(variables[name].numpy(), value)
  assert report.unused_optimizer_state == ("global_step",)
  assert report.unused_other and all(
      n.startswith(("generator/", "generator_predictions/", "discriminator_predictions/"))
      for n in report.unused_other)


def _pretraining_model(reference_dir, vocab_file):
  hparams = load_hparams(str(reference_dir / "electra_small_2l" / "hparams.json"))
  config = PretrainingConfig("p", str(reference_dir), **hparams)
  return build_pretraining_model(config, vocab=masking.read_special_ids(vocab_file))


def test_init_from_our_tf2_pretraining_checkpoint(small_config, vocab_file, heads_dir,
                                                  reference_dir, tmp_path):
  """The pre-training loop's checkpoint (model + optimizer + step): the discriminator tower."""
  from electra_tf.optimization import create_optimizer

  pretrain = _pretraining_model(reference_dir, vocab_file)
  rng = np.random.default_rng(0)
  for v in pretrain.variables:  # values unlike any initialiser, so a wrong mapping shows
    v.assign(rng.normal(size=v.shape).astype(np.float32))
  optimizer = create_optimizer(1e-3, 10)
  optimizer.build(pretrain.trainable_variables)
  prefix = tf.train.Checkpoint(model=pretrain, optimizer=optimizer,
                               step=tf.Variable(7, dtype=tf.int64)).write(str(tmp_path / "ckpt-7"))
  model, _ = _small_model(small_config, vocab_file, heads_dir)
  report = model_lib.load_init_checkpoint(model, prefix)
  want = {n: v for n, v in pretrain.tf1_variables().items() if n.startswith("electra/")}
  got = model.tf1_variables()
  assert sorted(report.loaded) == sorted(want)
  for name, v in want.items():
    np.testing.assert_array_equal(got[name].numpy(), v.numpy(), err_msg=name)
  assert all(n.startswith("task_specific/") for n in report.missing)
  assert any(k.startswith("model/generator/") for k in report.unused_other)
  assert any(k.startswith("optimizer/") for k in report.unused_optimizer_state)


def test_init_from_our_tf2_finetuning_checkpoint(small_config, vocab_file, heads_dir, tmp_path):
  """A fine-tuned model (Trainer format) initialises another run: encoder + shared heads."""
  source, _ = _small_model(small_config, vocab_file, heads_dir, ["rte", "chunk"])
  prefix = tf.train.Checkpoint(model=source).write(str(tmp_path / "ckpt-1"))
  keys = [k for k, _ in tf.train.list_variables(prefix)]
  assert any(k.startswith("model/heads/rte/") for k in keys)
  target, _ = _small_model(small_config, vocab_file, heads_dir, ["rte", "sts"])
  report = model_lib.load_init_checkpoint(target, prefix)
  src, dst = source.tf1_variables(), target.tf1_variables()
  for name in [n for n in dst if n.startswith(("electra/", "task_specific/rte/"))]:
    np.testing.assert_array_equal(dst[name].numpy(), src[name].numpy(), err_msg=name)
  assert sorted(report.missing) == sorted(n for n in dst if n.startswith("task_specific/sts/"))
  assert all(k.startswith("model/heads/chunk/") for k in report.unused_other)


def test_init_with_mismatched_config_is_a_clear_error(vocab_file, heads_dir, reference_dir,
                                                      tmp_path):
  ckpt = str(reference_dir / "electra_small_2l" / "model.ckpt")
  encoder = _encoder_hparams(reference_dir)
  overrides = encoder["model_hparam_overrides"]
  three = FinetuningConfig("m", str(tmp_path), **{
      **encoder, "max_seq_length": 64, "task_names": ["rte"],
      "model_hparam_overrides": {**overrides, "num_hidden_layers": 3}})
  model = model_lib.create_model(three, _tasks(tmp_path, vocab_file, ["rte"], 64))
  with pytest.raises(ValueError, match="lacks 16 encoder variable.*layer_2"):
    model_lib.load_init_checkpoint(model, ckpt)
  # embedding size 64 (big lane: 128) or 32 (golden lane: 16), never the checkpoint's
  wide = FinetuningConfig("m", str(tmp_path), **{
      **encoder, "max_seq_length": 64, "task_names": ["rte"],
      "embedding_size": 64 if encoder.get("embedding_size", 128) != 64 else 32})
  model = model_lib.create_model(wide, _tasks(tmp_path, vocab_file, ["rte"], 64))
  with pytest.raises(ValueError, match="shape mismatch for electra/embeddings"):
    model_lib.load_init_checkpoint(model, ckpt)
  with pytest.raises(FileNotFoundError):
    model_lib.load_init_checkpoint(model, str(tmp_path / "nothing"))


# --------------------------------------------------------------------------------------------
# Optimization
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_layers,decay", [(2, 0.8), (3, 0.9)])
def test_layerwise_learning_rates_reach_the_right_variables(vocab_file, heads_dir, tmp_path,
                                                            n_layers, decay):
  """Same gradient everywhere, no weight decay: after one step each variable moved by
  lr * decay^(n_layers + 2 - depth) times the same Adam ratio (official depths, including the
  unused pooler depth, google-research/electra#51)."""
  config = FinetuningConfig("m", str(tmp_path), max_seq_length=32, task_names=["rte", "chunk"],
                            layerwise_lr_decay=decay, weight_decay_rate=0.0,
                            model_hparam_overrides={"num_hidden_layers": n_layers,
                                                    "hidden_size": 32},
                            embedding_size=16, vocab_size=100)
  tasks = _tasks(tmp_path, vocab_file, config.task_names, config.max_seq_length, heads_dir)
  model = model_lib.create_model(config, tasks)
  assert model.n_transformer_layers == n_layers
  steps = model_lib.num_train_steps(64, 32, 5.0)
  assert steps == 10
  optimizer = model_lib.create_finetuning_optimizer(config, steps, model.n_transformer_layers)
  variables = model.trainable_variables
  for v in variables:  # from 0 the step is the value itself (no float32 cancellation)
    v.assign(tf.zeros_like(v))
  optimizer.apply_gradients([(tf.ones_like(v), v) for v in variables])
  moved = {names.tf1_name(v): np.abs(v.numpy()).max() for v in variables}
  base = moved["task_specific/rte/dense/kernel"]
  assert base > 0
  for name, delta in moved.items():
    if name.startswith("task_specific/"):
      depth = n_layers + 2
    elif "/encoder/layer_" in name:
      depth = int(name.split("/encoder/layer_")[1].split("/")[0]) + 1
    else:
      assert name.startswith(("electra/embeddings/", "electra/embeddings_project/")), name
      depth = 0
    np.testing.assert_allclose(delta / base, decay ** (n_layers + 2 - depth), rtol=1e-5,
                               err_msg=name)


def test_num_train_steps_worked_by_hand():
  assert model_lib.num_train_steps(96, 32, 3.0) == 9
  assert model_lib.num_train_steps(96, 32, 2.5) == 7  # int(3 * 2.5)
  with pytest.raises(ValueError, match="no training steps"):
    model_lib.num_train_steps(32, 32, 0.5)


# --------------------------------------------------------------------------------------------
# SavedModel export
# --------------------------------------------------------------------------------------------


def _random_inputs(batch, seq, rng, vocab_size):
  ids = rng.integers(min(1000, vocab_size // 2), min(2000, vocab_size), [batch, seq])
  ids = ids.astype(np.int32)
  mask = np.ones([batch, seq], np.int32)
  mask[0, seq - 2:] = 0
  segments = np.zeros([batch, seq], np.int32)
  segments[:, seq // 3:] = 1
  segments *= mask
  ids *= mask
  return ids, mask, segments


def _features_for(golden, ids, mask, segments, n_tasks):
  """Multi-task features for arbitrary inputs: zero labels, padding task id, and chunk
  positions 0..T-1 (so the tagging head sees every token, as the ``tag`` signature)."""
  batch, seq = ids.shape
  features = {}
  for key, value in golden.items():
    if key.startswith("rte/in/"):
      shape = [batch] + ([seq] if value.ndim == 2 else [])
      features[key[len("rte/in/"):]] = tf.zeros(shape, value.dtype)
  features.update(input_ids=tf.constant(ids), input_mask=tf.constant(mask),
                  segment_ids=tf.constant(segments), task_id=tf.fill([batch], n_tasks))
  features["chunk_labeled_positions"] = tf.constant(
      np.tile(np.arange(seq, dtype=np.int32), [batch, 1]))
  return features


def test_export_reloads_and_matches_the_keras_model(reference_model, golden, tmp_path):
  model, tasks, _ = reference_model
  names = export.export_finetuned_saved_model(model, tasks, str(tmp_path / "export"))
  assert names == ["classify_rte", "classify_sts", "squad", "tag"]
  loaded = tf.saved_model.load(str(tmp_path / "export"))
  assert sorted(loaded.signatures) == names
  # golden batches (T = max_seq_length) and random ones with other batch sizes / lengths
  # (T < beam 20); random ids below the lane's vocabulary size
  rng = np.random.default_rng(0)
  vocab_size = model.encoder.embeddings.word_embeddings.shape[0]
  cases = [tuple(golden[f"{t}/in/{k}"] for k in ("input_ids", "input_mask", "segment_ids"))
           for t in ("rte", "squad")] + [_random_inputs(2, 12, rng, vocab_size),
                                               _random_inputs(5, 40, rng, vocab_size)]
  n_tasks = len(tasks)
  for ids, mask, segments in cases:
    inputs = dict(input_ids=tf.constant(ids), input_mask=tf.constant(mask),
                  segment_ids=tf.constant(segments))
    seq = ids.shape[1]
    batch = _features_for(golden, ids, mask, segments, n_tasks)
    heads = ["rte", "sts", "chunk"] + (["squad"] if seq >= 20 else [])  # top_k needs T >= 20
    want = model(batch, training=False, task_names=heads)
    got = {name: loaded.signatures[name](**inputs) for name in names}
    np.testing.assert_allclose(got["classify_rte"]["logits"], want["rte"]["logits"], atol=ATOL)
    np.testing.assert_allclose(got["classify_rte"]["probabilities"],
                               tf.nn.softmax(want["rte"]["logits"]), atol=ATOL)
    np.testing.assert_allclose(got["classify_sts"]["score"], 5.0 * want["sts"]["predictions"],
                               atol=ATOL)
    np.testing.assert_allclose(got["tag"]["logits"], want["chunk"]["logits"], atol=ATOL)
    if seq >= 20:  # the beam fits: every SQuAD output equals the model's eval outputs
      for key in ("start_logits", "answerable_logit", "start_top_log_probs",
                  "end_top_log_probs"):
        np.testing.assert_allclose(got["squad"][key], want["squad"][key], atol=ATOL, err_msg=key)
      for key in ("start_top_index", "end_top_index"):
        np.testing.assert_array_equal(got["squad"][key], want["squad"][key], err_msg=key)
      # end logits given the best start = the beam's first row (as log-softmax)
      end_lp = tf.nn.log_softmax(got["squad"]["end_logits"]).numpy()
      top = want["squad"]["end_top_index"].numpy()[:, 0]
      np.testing.assert_allclose(np.take_along_axis(end_lp, top, 1),
                                 want["squad"]["end_top_log_probs"][:, 0], atol=ATOL)
    else:  # shorter than the beam: as the model on inputs zero-padded to 20, cut back to T
      padded = [np.pad(x, [[0, 0], [0, 20 - seq]]) for x in (ids, mask, segments)]
      want_padded = model(_features_for(golden, *padded, n_tasks), training=False)["squad"]
      assert got["squad"]["start_logits"].shape == [ids.shape[0], seq]
      np.testing.assert_allclose(got["squad"]["start_logits"],
                                 want_padded["start_logits"][:, :seq], atol=ATOL)
      np.testing.assert_allclose(got["squad"]["answerable_logit"],
                                 want_padded["answerable_logit"], atol=ATOL)
      np.testing.assert_array_equal(got["squad"]["end_top_index"], want_padded["end_top_index"])
