"""Task heads against the official multi-task graph (reference finetune_heads/)."""

import json

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.finetuning import task_heads as heads

ATOL = 1e-5
TASK_HEADS = {  # each takes the number of chunk tags (the lane's chunk_label_mapping.json)
    "rte": lambda n_tags: heads.ClassificationHead("rte", 2),
    "sts": lambda n_tags: heads.RegressionHead("sts"),
    "chunk": lambda n_tags: heads.TaggingHead("chunk", n_tags),  # 42 BIOES tags for CoNLL-2000
    "squad": lambda n_tags: heads.SpanQAHead("squad"),  # official defaults: beam 20, joint, ...
}


@pytest.fixture(scope="module")
def ref(reference_dir):
  folder = reference_dir / "finetune_heads"
  golden = np.load(folder / "golden.npz")
  n_tags = len(json.loads((folder / "chunk_label_mapping.json").read_text()))
  golden = {k: golden[k] for k in golden.files}
  return golden, tf.train.load_checkpoint(str(folder / "model.ckpt")), n_tags


def _inputs(golden, task):
  prefix = f"{task}/in/"
  feats = {k[len(prefix):]: tf.constant(v) for k, v in golden.items() if k.startswith(prefix)}
  return tf.constant(golden[f"{task}/encoder_sequence_output"]), feats


def _built_head(task, golden, reader, n_tags):
  head = TASK_HEADS[task](n_tags)
  seq, feats = _inputs(golden, task)
  head(seq, feats)  # builds the variables
  for v in head.variables:
    v.assign(reader.get_tensor(v.name[:-2]))
  return head, seq, feats


def _compare(golden, outputs, prefix):
  keys = [k for k in golden if k.startswith(prefix)]
  assert keys, prefix
  for key in keys:
    want, got = golden[key], np.asarray(outputs[key[len(prefix):]])
    assert got.shape == want.shape, key
    if np.issubdtype(want.dtype, np.integer):
      np.testing.assert_array_equal(got, want, err_msg=key)
    else:
      np.testing.assert_allclose(got, want, rtol=0, atol=ATOL, err_msg=key)


@pytest.mark.parametrize("task", list(TASK_HEADS))
def test_variable_names_match_checkpoint(ref, task):
  golden, reader, n_tags = ref
  head, _, _ = _built_head(task, golden, reader, n_tags)
  ckpt = {k: s for k, s in reader.get_variable_to_shape_map().items()
          if k.startswith(f"task_specific/{task}/")}
  mine = {v.name[:-2]: v.shape.as_list() for v in head.variables}
  assert mine == ckpt


@pytest.mark.parametrize("task", list(TASK_HEADS))
def test_eval_outputs_match_official(ref, task):
  golden, reader, n_tags = ref
  head, seq, feats = _built_head(task, golden, reader, n_tags)
  outputs, loss = head(seq, feats, training=False)
  _compare(golden, outputs, f"{task}/out/")
  np.testing.assert_array_equal(np.asarray(loss), np.asarray(outputs["loss"]))
  # Each batch holds one task, so the official multi-task loss is the sum of this head's loss.
  n_tasks = len(TASK_HEADS)
  others = [tf.zeros_like(loss)] * n_tasks
  others[int(feats["task_id"][0])] = loss
  np.testing.assert_allclose(heads.multitask_loss(others, feats["task_id"]),
                             golden[f"{task}/model_loss"], rtol=1e-6, atol=ATOL)


def test_squad_train_mode_matches_official(ref):
  """Training path: end logits conditioned on the gold start (no dropout in the QA head)."""
  golden, reader, n_tags = ref
  head, seq, feats = _built_head("squad", golden, reader, n_tags)
  outputs, _ = head(seq, feats, training=True)
  _compare(golden, outputs, "squad/train_mode_out/")


def test_heads_inside_tf_function(ref):
  golden, reader, n_tags = ref
  head, seq, feats = _built_head("squad", golden, reader, n_tags)
  step = tf.function(lambda s, f: head(s, f, training=False))
  outputs, _ = step(seq, feats)
  _compare(golden, outputs, "squad/out/")


def _random_features(batch, seq_len, rng):
  mask = np.ones([batch, seq_len], np.int32)
  mask[:, seq_len - 3:] = 0
  segment = np.zeros([batch, seq_len], np.int32)
  segment[:, 4:seq_len - 3] = 1
  return {
      "input_mask": mask, "segment_ids": segment, "task_id": np.zeros([batch], np.int32),
      "t_eid": np.arange(batch, dtype=np.int32),
      "t_label_ids": rng.integers(0, 5, batch).astype(np.int32),
      "t_targets": rng.random(batch).astype(np.float32),
      "t_labels": rng.integers(0, 7, [batch, seq_len]).astype(np.int32),
      "t_labels_mask": (rng.random([batch, seq_len]) > 0.5).astype(np.float32),
      "t_labeled_positions": rng.integers(0, seq_len, [batch, seq_len]).astype(np.int32),
      "t_start_positions": rng.integers(4, seq_len - 3, batch).astype(np.int32),
      "t_end_positions": rng.integers(4, seq_len - 3, batch).astype(np.int32),
      "t_is_impossible": rng.integers(0, 2, batch).astype(np.int32),
  }


@pytest.mark.parametrize("joint,answerable,uses_start,names", [
    (True, True, True, {"dense": [24, 1], "qa_hidden": [48, 16], "dense_1": [16, 1],
                        "dense_2": [48, 16], "dense_3": [16, 1]}),
    (True, True, False, {"dense": [24, 1], "qa_hidden": [48, 16], "dense_1": [16, 1],
                         "dense_2": [24, 1]}),
    (False, True, True, {"dense": [24, 1], "dense_1": [24, 1], "dense_2": [48, 16],
                         "dense_3": [16, 1]}),
    (False, False, False, {"dense": [24, 1], "dense_1": [24, 1]}),
])
def test_squad_head_variants_other_sizes(joint, answerable, uses_start, names):
  """Official layer numbering for every option combination; any hidden size / length / beam."""
  batch, seq_len, hidden, beam = 3, 11, 24, 4
  rng = np.random.default_rng(0)
  head = heads.SpanQAHead("t", beam_size=beam, joint_prediction=joint,
                          answerable_classifier=answerable,
                          answerable_uses_start_logits=uses_start, qa_hidden_size=16)
  seq = tf.constant(rng.normal(size=[batch, seq_len, hidden]).astype(np.float32))
  feats = _random_features(batch, seq_len, rng)
  for training in (False, True):
    out, loss = head(seq, feats, training=training)
    assert loss.shape == [batch]
    assert np.all(np.isfinite(loss.numpy()))
    assert out["start_top_index"].shape == [batch, beam]
    assert out["end_top_log_probs"].shape == [batch, beam, beam]
    assert out["end_logits"].shape == [batch, seq_len]
  got = {v.name[:-2].split("/", 2)[2].rsplit("/", 1)[0] for v in head.variables}
  assert got == set(names)
  for v in head.variables:
    layer = v.name[:-2].split("/")[2]
    if v.name.endswith("kernel:0"):
      assert v.shape.as_list() == names[layer]
  # The answer-independent start logits ignore the question and padding (-1000 pushed).
  start = out["start_logits"].numpy()
  assert np.all(start[:, 1:4] < -900) and np.all(start[:, -3:] < -900)


def test_squad_beam_search_matches_brute_force():
  """Eval end log probs for each beam start equal log_softmax over a direct qa_hidden call."""
  batch, seq_len, hidden, beam = 2, 9, 8, 3
  rng = np.random.default_rng(1)
  head = heads.SpanQAHead("t", beam_size=beam, qa_hidden_size=6)
  seq = tf.constant(rng.normal(size=[batch, seq_len, hidden]).astype(np.float32))
  feats = _random_features(batch, seq_len, rng)
  out, _ = head(seq, feats, training=False)
  adder = 1000.0 * (feats["input_mask"] * feats["segment_ids"] - 1.0)
  adder[:, 0] = 0.0
  for b in range(batch):
    for i, s in enumerate(out["start_top_index"].numpy()[b]):
      pair = tf.concat([tf.repeat(seq[b:b + 1, s], seq_len, axis=0), seq[b]], -1)
      logits = tf.squeeze(head.end_dense(tf.nn.gelu(head.qa_hidden(pair), approximate=False)),
                          -1) + adder[b]
      want_lp, want_idx = tf.nn.top_k(tf.nn.log_softmax(logits), k=beam)
      np.testing.assert_array_equal(out["end_top_index"].numpy()[b, i], want_idx.numpy())
      np.testing.assert_allclose(out["end_top_log_probs"].numpy()[b, i], want_lp.numpy(),
                                 atol=1e-5)


@pytest.mark.parametrize("hidden,n", [(16, 3), (40, 7)])
def test_classification_and_tagging_any_size(hidden, n):
  batch, seq_len = 4, 10
  rng = np.random.default_rng(2)
  seq = tf.constant(rng.normal(size=[batch, seq_len, hidden]).astype(np.float32))
  feats = _random_features(batch, seq_len, rng)
  feats["t_label_ids"] = rng.integers(0, n, batch).astype(np.int32)
  feats["t_labels"] = rng.integers(0, n, [batch, seq_len]).astype(np.int32)
  cls = heads.ClassificationHead("t", n)
  out, loss = cls(seq, feats)
  log_probs = tf.nn.log_softmax(out["logits"]).numpy()
  np.testing.assert_allclose(loss, -log_probs[np.arange(batch), feats["t_label_ids"]], atol=1e-6)
  assert [v.name for v in cls.variables] == ["task_specific/t/dense/kernel:0",
                                              "task_specific/t/dense/bias:0"]
  tag = heads.TaggingHead("t", n)
  out, loss = tag(seq, feats)
  assert out["logits"].shape == [batch, seq_len, n]
  lp = tf.nn.log_softmax(out["logits"]).numpy()
  picked = np.take_along_axis(lp, feats["t_labels"][..., None], -1)[..., 0]
  np.testing.assert_allclose(loss, -(picked * feats["t_labels_mask"]).sum(-1), atol=1e-5)
  reg = heads.RegressionHead("t")
  out, loss = reg(seq, feats)
  np.testing.assert_allclose(loss, (out["predictions"] - feats["t_targets"]) ** 2, atol=1e-6)


def test_classification_dropout_only_when_training():
  rng = np.random.default_rng(3)
  seq = tf.constant(rng.normal(size=[64, 3, 32]).astype(np.float32))
  feats = {"t_label_ids": np.zeros([64], np.int32), "t_eid": np.zeros([64], np.int32)}
  head = heads.ClassificationHead("t", 2, seed=5)
  eval_a, _ = head(seq, feats, training=False)
  eval_b, _ = head(seq, feats, training=False)
  np.testing.assert_array_equal(eval_a["logits"], eval_b["logits"])
  train, _ = head(seq, feats, training=True)
  assert not np.allclose(train["logits"], eval_a["logits"])
