"""The linear probe (electra_tf/probing/: ridge.py, probe.py) and tools/probe_features.py: the
closed-form ridge against a direct least-squares solve, the penalty chosen on train rows only,
a planted word read off a random encoder's features (and not off shuffled labels), any
fine-tuning task's rows, weights really loaded, and the command on a planted task."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import probe_data, user_data
from helpers.paths import GOLDEN

from electra_tf.config import PretrainingConfig
from electra_tf.finetuning import registry
from electra_tf.model_sizes import get_bert_config
from electra_tf.pretraining.builder import build_pretraining_model
from electra_tf.probing import probe, ridge
from tests.helpers.paths import REPO_ROOT

TINY_SHAPE = {"model_hparam_overrides": {"hidden_size": 64, "num_hidden_layers": 2},
              "embedding_size": 64}


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
  return registry.make_tokenizer(vocab_file)


@pytest.fixture(scope="module")
def planted_root(tmp_path_factory, data_dir):
  root = tmp_path_factory.mktemp("planted")
  probe_data.write_planted_task(root / "finetuning_data" / "planted", data_dir)
  return root


def _config(vocab_size=30522, **shape):
  return PretrainingConfig("probe", "", vocab_size=vocab_size, **{**TINY_SHAPE, **shape})


@pytest.mark.parametrize("rows,features", [(30, 8), (8, 30)])  # primal, dual
@pytest.mark.parametrize("penalty", [0.5, 20.0])
def test_ridge_weights_equal_a_direct_least_squares_solve(rows, features, penalty):
  rng = np.random.default_rng(rows)
  a, y = rng.normal(size=(rows, features)), rng.normal(size=(rows, 3))
  # ridge = least squares on A stacked over sqrt(penalty) I, Y stacked over zeros
  stacked = np.concatenate([a, np.sqrt(penalty) * np.eye(features)])
  want = np.linalg.lstsq(stacked, np.concatenate([y, np.zeros((features, 3))]), rcond=None)[0]
  np.testing.assert_allclose(ridge.ridge_weights(a, y, penalty), want, rtol=1e-9, atol=1e-12)


def test_a_regressor_is_the_least_squares_fit_of_standardised_features_plus_the_mean():
  rng = np.random.default_rng(1)
  x, y = rng.normal(3.0, 2.0, size=(40, 5)), rng.normal(1.5, 1.0, size=40)
  readout = ridge.fit(x, y, 2.0, num_classes=None)
  a = (x - x.mean(0)) / (x.std(0) + 1e-6)
  w = np.linalg.lstsq(np.concatenate([a, np.sqrt(2.0) * np.eye(5)]),
                      np.concatenate([y - y.mean(), np.zeros(5)]), rcond=None)[0]
  np.testing.assert_allclose(readout.predict(x), a @ w + y.mean(), rtol=1e-9)


def test_the_penalty_is_chosen_on_train_rows_and_scored_once_on_dev():
  rng = np.random.default_rng(0)
  y = rng.integers(0, 3, 300)
  x = np.eye(3)[y] @ rng.normal(size=(3, 16)) + 2.0 * rng.normal(size=(300, 16))
  seen = []

  def metric(labels, predictions):
    seen.append(np.asarray(labels))
    return ridge.accuracy(labels, predictions)

  score = ridge.probe_score(x[:200], y[:200], x[200:], y[200:], metric, 3)
  *choosing, scoring = seen
  assert len(choosing) == len(ridge.RIDGES)
  assert all(len(s) == 40 for s in choosing)  # a fifth of the 200 train rows
  held = np.random.default_rng(ridge.SPLIT_SEED).permutation(200)[:40]
  assert all(np.array_equal(s, y[held]) for s in choosing)
  assert np.array_equal(scoring, y[200:])
  best = max(sorted(ridge.RIDGES, reverse=True), key=lambda r: ridge.accuracy(
      y[held], ridge.fit(np.delete(x[:200], held, 0), np.delete(y[:200], held), r, 3).predict(
          x[held])))
  assert score == ridge.accuracy(y[200:], ridge.fit(x[:200], y[:200], best, 3).predict(x[200:]))


def test_a_random_encoder_probe_reads_a_planted_word_and_not_shuffled_labels(planted_root,
                                                                               tokenizer):
  rows = probe.task_rows("planted", str(planted_root), tokenizer, 32, train_rows=150)
  assert (len(rows.train), len(rows.dev), rows.num_classes) == (150, 60, 3)
  assert rows.metric_name == "accuracy"
  encoder = probe.random_encoder(get_bert_config(_config()), 64, seed=1)
  features = probe.PooledFeatures(encoder)
  scores = probe.score(features, rows)
  assert scores["mean"] > 0.95, scores
  shuffled = np.random.default_rng(0).permutation(rows.train.labels)
  noise = probe.ProbeRows("planted", probe.Split(rows.train.input_ids, rows.train.input_mask,
                                                 rows.train.segment_ids, shuffled),
                          rows.dev, 3, "accuracy", rows.metric)
  assert probe.score(features, noise)["mean"] < 0.6


def test_features_do_not_depend_on_padding_or_batching(planted_root, tokenizer):
  rows = probe.task_rows("planted", str(planted_root), tokenizer, 32, train_rows=40)
  encoder = probe.random_encoder(get_bert_config(_config()), 64, seed=2)
  batched = probe.PooledFeatures(encoder, batch_size=7)(rows.train)
  for i in (0, 13, 39):  # one row alone, at full width with its padding
    split = rows.train
    out = encoder(split.input_ids[i:i + 1], split.input_mask[i:i + 1],
                  split.segment_ids[i:i + 1], training=False)["sequence_output"][0].numpy()
    real = split.input_mask[i] > 0
    np.testing.assert_allclose(batched["cls"][i], out[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(batched["mean"][i], out[real].mean(0), rtol=1e-4, atol=1e-5)


def test_any_sentence_task_fine_tuning_reads(tmp_path, data_dir, tokenizer):
  user_data.write_all(tmp_path, data_dir)
  sts = probe.task_rows("similarity", str(tmp_path), tokenizer, 48, train_rows=30)
  assert sts.num_classes is None and sts.metric_name == "pearson"
  assert sts.train.labels.dtype == np.float64 and 0 <= sts.train.labels.min() <= 1
  mrpc = probe.task_rows("mrpc", str(tmp_path), tokenizer, 48, train_rows=100, dev_rows=10)
  assert (len(mrpc.train), len(mrpc.dev)) == (40, 10)  # each pair once, no swapped copies
  assert mrpc.train.segment_ids.max() == 1 and mrpc.metric_name == "accuracy"
  encoder = probe.random_encoder(get_bert_config(_config()), 64, seed=1)
  score = probe.score(probe.PooledFeatures(encoder), sts)
  assert all(-1 <= v <= 1 for v in score.values())
  with pytest.raises(ValueError, match="'chunk' is not a sentence"):
    probe.task_rows("chunk", str(tmp_path), tokenizer, 48, train_rows=30)


def test_loaded_weights_are_the_checkpoints_and_their_features_differ_from_random(
    reference_dir, tmp_path, planted_root):
  tokenizer = registry.make_tokenizer(str(reference_dir / "vocab.txt"))  # the lane's vocabulary
  rows = probe.task_rows("planted", str(planted_root), tokenizer, 32, train_rows=20)
  # the checkpoint's own shape (electra_small_2l/hparams.json: vocab_size, layers, sizes)
  hparams = json.loads((reference_dir / "electra_small_2l" / "hparams.json").read_text())
  official = PretrainingConfig("probe", "", **hparams)
  encoder = probe.random_encoder(get_bert_config(official), official.embedding_size, seed=1)
  random_features = probe.PooledFeatures(encoder)(rows.train)["mean"]
  path = str(reference_dir / "electra_small_2l")
  probe.load_encoder(encoder, path)
  reader = tf.train.load_checkpoint(path + "/model.ckpt")
  for variable in encoder.variables:
    np.testing.assert_array_equal(variable.numpy(), reader.get_tensor(variable.name[:-2]))
  loaded = probe.PooledFeatures(encoder)(rows.train)["mean"]
  assert np.abs(loaded - random_features).mean() > 0.1

  # one of our TF2 checkpoints (a pre-training model's): its discriminator, not the init
  config = _config(vocab_size=len(tokenizer.vocab))
  model = build_pretraining_model(config, tokenizer.vocab)
  prefix = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt-1"))
  ours = probe.random_encoder(get_bert_config(config), 64, seed=7)
  probe.load_encoder(ours, prefix)
  for a, b in zip(ours.variables, model.discriminator.variables, strict=True):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def _blind_copy(folder, dst):
  """``folder``'s checkpoint and hparams with zero word embeddings: features that see no word."""
  dst.mkdir()
  (dst / "hparams.json").write_text((folder / "hparams.json").read_text())
  reader = tf.train.load_checkpoint(str(folder / "model.ckpt"))
  with tf.Graph().as_default():
    variables = {}
    for name in reader.get_variable_to_shape_map():
      value = reader.get_tensor(name)
      if name == "electra/embeddings/word_embeddings":
        value = np.zeros_like(value)
      variables[name] = tf.compat.v1.Variable(value, name=name.replace("/", "_"))
    saver = tf.compat.v1.train.Saver(variables, save_relative_paths=True)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      saver.save(sess, str(dst / "model.ckpt"), write_meta_graph=False)
  return dst


@pytest.mark.slow
def test_cli_reads_the_planted_word_off_random_init_and_loads_the_checkpoint(
    tmp_path, reference_dir, data_dir):
  # four words and the planted one: a mean over fewer pieces, for the goldens' 32-wide encoder
  task = probe_data.write_planted_task(tmp_path / "planted", data_dir, length=4)
  blind = _blind_copy(reference_dir / "electra_small_2l", tmp_path / "blind")
  # the goldens' small vocabulary cuts a planted word into up to 7 pieces: room for 6 words
  max_seq_length = 48 if reference_dir == GOLDEN else 16
  env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_USE_LEGACY_KERAS="1")
  out = subprocess.run(
      [sys.executable, str(REPO_ROOT / "tools" / "probe_features.py"),
       f"--model_dirs={blind}",
       f"--vocab_file={reference_dir / 'vocab.txt'}", f"--train_tsv={task / 'train.csv'}",
       f"--dev_tsv={task / 'dev.csv'}", f"--max_seq_length={max_seq_length}", "--bag_of_words"],
      capture_output=True, text=True, env=env, timeout=300, check=True).stdout
  lines = out.strip().splitlines()
  assert lines[0].startswith("probe: 150 train / 60 dev rows, 3 classes")
  assert lines[1].startswith("bag-of-words: ") and float(lines[1].split()[-1]) > 0.95
  sources = ["random", str(blind)]
  scores = {}
  for line, source in zip(lines[2:], sources, strict=True):
    assert line.startswith(f"{source}: ")
    words = line.split(": ", 1)[1].split()
    scores[source] = {k: float(v) for k, v in zip(words[::2], words[1::2], strict=True)}
    assert sorted(scores[source]) == sorted(f"{layer}_{pool}" for pool in ("cls", "mean")
                                            for layer in ("emb", "layer0", "layer1"))
  assert scores["random"]["emb_mean"] > 0.95 and scores["random"]["layer1_mean"] > 0.95
  assert scores["random"]["emb_cls"] < 0.5  # one vector for every sentence: chance
  # the checkpoint is loaded: with its word embeddings zeroed, no feature sees the word
  assert max(scores[str(blind)].values()) < 0.6, scores[str(blind)]


def test_rows_of_a_user_task_csv_and_a_glue_tsv(tmp_path):
  csv_file = tmp_path / "train.csv"
  csv_file.write_text('id,sentence,label\n0,"Wait, then read.",asyncio\n1,Parse it.,email\n',
                      encoding="utf-8")
  assert probe.read_table(str(csv_file), "sentence", "label") == (
      ["Wait, then read.", "Parse it."], ["asyncio", "email"])
  tsv_file = tmp_path / "train.tsv"
  tsv_file.write_text('sentence\tlabel\na "quoted", film\t1\n', encoding="utf-8")
  assert probe.read_table(str(tsv_file), "sentence", "label") == (['a "quoted", film'], ["1"])
  with pytest.raises(ValueError, match="train.tsv: no column 'text'"):
    probe.read_table(str(tsv_file), "text", "label")


def test_a_tables_texts_are_featurized_as_the_sentence_task_of_the_same_rows(
    tmp_path, data_dir, tokenizer):
  user_data.write_all(tmp_path, data_dir)  # movie_reviews/*.csv: the sst rows as a CSV
  folder = tmp_path / "finetuning_data" / "movie_reviews"
  for length in (12, 48):  # most rows truncated at 12
    table = probe.table_rows(str(folder / "train.csv"), str(folder / "dev.csv"), "review",
                             "sentiment", tokenizer, length, None)
    sst = probe.task_rows("sst", str(tmp_path), tokenizer, length, train_rows=1000)
    for ours, task in ((table.train, sst.train), (table.dev, sst.dev)):
      for key in ("input_ids", "input_mask", "segment_ids", "labels"):
        np.testing.assert_array_equal(getattr(ours, key), getattr(task, key), err_msg=key)
        assert getattr(ours, key).dtype == getattr(task, key).dtype, key


def test_bag_of_words_reads_a_label_carried_by_one_word():
  rng = np.random.default_rng(0)
  y = rng.integers(0, 2, 200)
  ids = rng.integers(5, 40, (200, 8))
  ids[:, 3] = np.where(y == 1, 41, 42)  # the label's own word
  ids[:, 0] = 2  # [CLS]: reserved ids are left out
  assert ridge.bag_of_words_accuracy(ids[:100], y[:100], ids[100:], y[100:], 50) == 1.0
  noise = rng.integers(5, 40, (200, 8))
  assert ridge.bag_of_words_accuracy(noise[:100], y[:100], noise[100:], y[100:], 50) < 0.7
