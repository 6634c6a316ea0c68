"""Family ``train_step``: tests/golden/train_step/finetune_rte/ (three official fine-tuning steps).

Which official code made which file:

- ``features_rte_train24.tfrecord``: official ``RTE.get_examples("train")`` on 24 rows written
  by this generator in the GLUE RTE ``train.tsv`` layout (premises are sentences of Austen's
  *Persuasion*, tests/data/gutenberg, public domain) -> ``Preprocessor.serialize_examples``
  (``is_training=True``, batch size 8: no padding records, no shuffle).
- ``golden.npz``: ``step{k}/in/*`` are those records through the official ``_decode_tfrecord``;
  every other array is fetched from the official graph: ``run_finetuning.FinetuningModel``
  (``is_training=False``, no dropout) + ``optimization.create_optimizer`` (the ``model_fn``
  call); ``tf.clip_by_global_norm`` and ``optimization._get_layer_lrs`` are wrapped (they call
  the originals) only to keep references to their inputs and outputs.
- ``state_after_step3.npz``: every variable of that graph after the third ``train_op`` run.
- ``golden_meta.json``: variable lists, assignment map, per-step norms (float64 from the
  fetched float32 gradients).

Start state: ``electra/*`` from ``../electra_small_2l/model.ckpt`` by the official
``get_assignment_map_from_checkpoint`` + ``init_from_checkpoint``; the RTE head from
``../finetune_heads/model.ckpt`` by a second ``init_from_checkpoint`` (not official: makes the
start state reproducible from stored files).
"""

from __future__ import annotations

import pathlib
import re
import shutil
import tempfile

import numpy as np

from tools.official_goldens import files, official
from tools.official_goldens import finetuning as ft

SEED = 20200323
WORD = "electra/embeddings/word_embeddings"
TOKEN_TYPE = "electra/embeddings/token_type_embeddings"
N_STEPS_RUN = 3
BATCH = 8
N_UNUSED_ROWS = 64
HPARAMS = {**{k: v for k, v in ft.HPARAMS.items() if k not in ("task_names", "doc_stride",
                                                                 "max_query_length")},
           "task_names": ["rte"], "train_batch_size": BATCH, "learning_rate": 1e-4,
           "weight_decay_rate": 0.01, "layerwise_lr_decay": 0.8, "warmup_proportion": 0.1,
           "num_train_steps": 10}
HYPOTHESES = [  # written for this data: (hypothesis, label) for each premise, in order
    ("Sir Walter Elliot lived at Kellynch Hall.", "entailment"),
    ("He found nothing to do when he was idle.", "not_entailment"),
    ("He admired the earliest patents.", "entailment"),
    ("Domestic affairs made him happy and proud.", "not_entailment"),
    ("He liked to read his own history.", "entailment"),
    ("The favourite volume always opened at a page about London.", "not_entailment"),
    ("Walter Elliot was born in 1760.", "entailment"),
    ("Elizabeth Stevenson died in 1785.", "not_entailment"),
    ("Mary was born in 1791.", "entailment"),
    ("Charles Musgrove had no son.", "not_entailment"),
    ("Sir Walter had lost his wife.", "entailment"),
    ("The family was new and unknown.", "not_entailment"),
    ("The family was mentioned in Dugdale.", "entailment"),
    ("The book gave no seat for the family.", "not_entailment"),
    ("At fifty-four he was still a fine man.", "entailment"),
    ("He did not care about his appearance.", "not_entailment"),
    ("He valued beauty and a baronetcy.", "entailment"),
    ("Sir Walter did not respect himself.", "not_entailment"),
    ("His looks and rank were important to him.", "entailment"),
    ("His wife was a woman of poor character.", "not_entailment"),
    ("Lady Elliot was sensible.", "entailment"),
    ("Lady Elliot never hid his failings.", "not_entailment"),
    ("Lady Elliot found comfort in her children.", "entailment"),
    ("The three girls were left with a wise father.", "not_entailment"),
]


def premises(text_dir: pathlib.Path, n: int) -> list[str]:
  """The first ``n`` sentences (split after ``.``/``;``) of *Persuasion* chapter 1 with more than
  eight words, whitespace joined."""
  text = (text_dir / "austen-persuasion.txt").read_text(encoding="latin-1")
  body = " ".join(text.split())
  body = body[body.index("Sir Walter Elliot, of Kellynch"):]  # after the title and chapter line
  out = []
  for sentence in re.split(r"(?<=[.;])\s+", body):
    if len(sentence.split()) > 8 and "\t" not in sentence:
      out.append(sentence)
    if len(out) == n:
      break
  return out


def write_train_tsv(path: pathlib.Path, text_dir: pathlib.Path) -> None:
  rows = ["index\tsentence1\tsentence2\tlabel"]
  for i, (premise, (hyp, label)) in enumerate(zip(premises(text_dir, len(HYPOTHESES)),
                                                  HYPOTHESES, strict=True)):
    rows.append(f"{i}\t{premise}\t{hyp}\t{label}")
  files.save_text(path, "\n".join(rows) + "\n")


class _Taps:
  """Wraps ``clip_by_global_norm`` and ``_get_layer_lrs`` of the official optimization module."""

  def __init__(self, tf, optimization):
    self.clip, self.lrs = {}, {}
    taps = self
    original_lrs = optimization._get_layer_lrs  # noqa: SLF001 (official)

    def layer_lrs(learning_rate, layer_decay, n_layers):
      out = original_lrs(learning_rate, layer_decay, n_layers)
      taps.lrs = {"base": learning_rate, **out}
      return out

    class TF:
      def __getattr__(self, name):
        return getattr(tf, name)

      @staticmethod
      def clip_by_global_norm(grads, clip_norm, **kwargs):
        clipped, norm = tf.clip_by_global_norm(grads, clip_norm, **kwargs)
        taps.clip = {"grads": list(grads), "clipped": list(clipped), "norm": norm}
        return clipped, norm

    optimization._get_layer_lrs = layer_lrs  # noqa: SLF001
    optimization.tf = TF()


def _sum_sq(x) -> float:
  return float(np.sum(np.square(np.asarray(x, np.float64))))


def applied_lr_check(updates, lr_by_step, names, weight_decay_rate) -> str:
  """Which learning rate each official update used: float64 Adam step (no bias correction,
  eps 1e-6, decoupled weight decay) from the slots after the step, with lr at global_step k
  and at k-1; every variable except the word embeddings."""
  diffs = {"k": 0.0, "k-1": 0.0}
  for k, (before, after, slots, _) in enumerate(updates, start=1):
    for nm in names:
      if nm == WORD:
        continue
      m, v = (np.asarray(x, np.float64) for x in slots[nm])
      step = m / (np.sqrt(v) + 1e-6)
      if not re.search("LayerNorm|layer_norm|bias", nm):
        step = step + weight_decay_rate * np.asarray(before[nm], np.float64)
      key = next(key for key in lr_by_step if key != "base" and key in nm)
      for label, gs in (("k", k), ("k-1", k - 1)):
        want = np.asarray(before[nm], np.float64) - float(lr_by_step[key][gs]) * step
        diffs[label] = max(diffs[label], float(np.max(np.abs(want - after[nm]))))
  used = "k" if diffs["k"] < diffs["k-1"] else "k-1"
  return (f"update of step k (global_step k-1 before the step) used the learning rate at "
          f"global_step {used} (float64 re-implementation max |diff| {diffs['k']:.2g} with "
          f"lr(k) vs {diffs['k-1']:.2g} with lr(k-1))")


def write(official_dir: str, golden_dir: pathlib.Path) -> None:
  """Writes tests/golden/train_step/finetune_rte/."""
  import tensorflow as tf_

  from tools.official_goldens.__main__ import TEXT

  tf = tf_.compat.v1
  configure_finetuning = official.module("configure_finetuning")
  run_finetuning = official.module("run_finetuning")
  preprocessing = official.module("finetune.preprocessing")
  task_builder = official.module("finetune.task_builder")
  modeling = official.module("model.modeling")
  optimization = official.module("model.optimization")

  out = golden_dir / "train_step" / "finetune_rte"
  if out.exists():
    shutil.rmtree(out)
  out.mkdir(parents=True)
  tmp = pathlib.Path(tempfile.mkdtemp(prefix="step_golden_"))
  shutil.copy(golden_dir / "vocab.txt", tmp / "vocab.txt")
  write_train_tsv(tmp / "finetuning_data" / "rte" / "train.tsv", TEXT)
  hparams = {k: v for k, v in HPARAMS.items() if k != "num_train_steps"}
  num_train_steps = HPARAMS["num_train_steps"]
  config = configure_finetuning.FinetuningConfig("stepgold", str(tmp), **hparams)
  tasks = task_builder.get_tasks(config)
  pre = preprocessing.Preprocessor(config, tasks)
  ft.deterministic_records(pre)  # sorted feature map: reproducible bytes, same parsed values
  record_path = str(out / "features_rte_train24.tfrecord")
  pre.serialize_examples(tasks[0].get_examples("train"), True, record_path, BATCH)
  records = ft.decode(tf, pre, record_path)
  n = len(records["task_id"])
  assert n == 3 * BATCH, n

  init_ckpt = str(golden_dir / "electra_small_2l" / "model.ckpt")
  heads_ckpt = str(golden_dir / "finetune_heads" / "model.ckpt")
  golden: dict[str, np.ndarray] = {}
  steps, updates = [], []
  with tf.Graph().as_default():
    tf.set_random_seed(SEED)
    feats = ft.placeholders(tf, pre)
    model = run_finetuning.FinetuningModel(config, tasks, False, feats, num_train_steps)
    tvars = tf.trainable_variables()
    assignment_map, _ = modeling.get_assignment_map_from_checkpoint(tvars, init_ckpt)
    tf.train.init_from_checkpoint(init_ckpt, assignment_map)
    tf.train.init_from_checkpoint(heads_ckpt, {"task_specific/rte/": "task_specific/rte/"})
    taps = _Taps(tf, optimization)
    train_op = optimization.create_optimizer(
        model.loss, config.learning_rate, num_train_steps,
        weight_decay_rate=config.weight_decay_rate, use_tpu=config.use_tpu,
        warmup_proportion=config.warmup_proportion,
        layerwise_lr_decay_power=config.layerwise_lr_decay,
        n_transformer_layers=model.bert_config.num_hidden_layers)
    names = [v.op.name for v in tvars]
    grad_types = {nm: "IndexedSlices" if isinstance(g, tf.IndexedSlices) else "Tensor"
                  for nm, g in zip(names, taps.clip["grads"], strict=True)}
    tt_matmul = [op.outputs[0] for op in tf.get_default_graph().get_operations()
                 if op.type == "MatMul" and not op.name.startswith("gradients")
                 and any(TOKEN_TYPE in i.name for i in op.inputs)]
    assert len(tt_matmul) == 1, tt_matmul
    tt_rows = tf.gradients(model.loss, tt_matmul[0])[0]
    global_step = tf.train.get_or_create_global_step()
    all_vars = {v.op.name: v for v in tf.global_variables()}
    lr_keys = sorted(taps.lrs)

    def dense(g):
      return g.values if isinstance(g, tf.IndexedSlices) else g

    fetch = {
        "loss": model.loss, "per_example_loss": model.outputs["rte"]["loss"],
        "logits": model.outputs["rte"]["logits"], "global_norm": taps.clip["norm"],
        "token_type_grad_per_position_rows": tt_rows, "global_step_before": global_step,
        "grads": {nm: dense(g) for nm, g in zip(names, taps.clip["grads"], strict=True)},
        "word_indices": taps.clip["grads"][names.index(WORD)].indices,
        "clipped": {nm: dense(g) for nm, g in zip(names, taps.clip["clipped"], strict=True)},
        "lr": {k: taps.lrs[k] for k in lr_keys}}
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      for k in range(1, N_STEPS_RUN + 1):
        batch = {nm: v[(k - 1) * BATCH:k * BATCH] for nm, v in records.items()}
        feed = {feats[nm]: v for nm, v in batch.items()}
        before = sess.run({nm: all_vars[nm] for nm in names})
        got = sess.run(fetch, feed)
        _, loss2, norm2 = sess.run([train_op, model.loss, taps.clip["norm"]], feed)
        assert loss2 == got["loss"] and norm2 == got["global_norm"], (loss2, norm2)
        after = sess.run({nm: all_vars[nm] for nm in names})
        slots = sess.run({nm: (all_vars[nm + "/adam_m"], all_vars[nm + "/adam_v"])
                          for nm in names if nm != WORD})
        updates.append((before, after, slots, got["lr"]))
        p = f"step{k}/"
        golden.update({p + "in/" + nm: v for nm, v in batch.items()
                       if nm in ("input_ids", "input_mask", "segment_ids", "rte_label_ids",
                                 "rte_eid", "task_id")})
        for key in ("loss", "per_example_loss", "logits", "global_norm",
                    "token_type_grad_per_position_rows"):
          golden[p + key] = got[key]
        golden[p + "global_step_before"] = np.asarray(got["global_step_before"], np.int64)
        norm = got["global_norm"]
        golden[p + "clip_scale"] = np.float32(1.0) / np.maximum(norm, np.float32(1.0))
        golden[p + f"grad_values/{WORD}"] = got["grads"][WORD]
        golden[p + f"grad_indices/{WORD}"] = got["word_indices"].astype(np.int32)
        golden[p + f"clipped_grad_values/{WORD}"] = got["clipped"][WORD]
        for nm in names:
          if nm != WORD:
            golden[p + f"clipped_grad/{nm}"] = got["clipped"][nm]
        for key in lr_keys:
          golden[p + f"lr_at_global_step_before/{key}"] = np.float32(got["lr"][key])
        # Norm variants (float64): official counting vs token type per position / merged words.
        vocab_size = all_vars[WORD].shape.as_list()[0]
        merged = np.zeros([vocab_size, got["grads"][WORD].shape[1]], np.float64)
        np.add.at(merged, got["word_indices"], got["grads"][WORD].astype(np.float64))
        sq = {nm: _sum_sq(got["grads"][nm]) for nm in names}
        sq_merged = dict(sq, **{WORD: _sum_sq(merged)})
        tt_per_pos = _sum_sq(got["token_type_grad_per_position_rows"])
        variants = {
            "global_norm_numpy_f64": sum(sq.values()),
            "global_norm_tokentype_per_position": sum(sq.values()) - sq[TOKEN_TYPE] + tt_per_pos,
            "global_norm_all_dense_merged": sum(sq_merged.values()),
            "global_norm_tokentype_per_position_word_merged":
                sum(sq_merged.values()) - sq[TOKEN_TYPE] + tt_per_pos}
        for key, value in variants.items():
          golden[p + key] = np.float64(np.sqrt(value))
        steps.append({
            "step": k, "loss": float(got["loss"]), "global_norm": float(norm),
            **{key: float(golden[p + key]) for key in variants},
            "sum_sq_per_variable": {nm: {"official_counting": sq[nm],
                                         "dense_merged": sq_merged[nm]} for nm in names},
            "token_type_sum_sq_dense": sq[TOKEN_TYPE],
            "token_type_sum_sq_per_position": tt_per_pos,
            "max_abs_param_change": {nm: float(np.max(np.abs(after[nm] - before[nm])))
                                     for nm in names}})
      # The update of step k used lr at global_step k (see README); learning rates 0..4.
      lr_by_step = {key: [] for key in lr_keys}
      for gs in range(N_STEPS_RUN + 2):
        saved = sess.run(global_step)
        global_step.load(gs, sess)
        values = sess.run({key: taps.lrs[key] for key in lr_keys})
        global_step.load(saved, sess)
        for key in lr_keys:
          lr_by_step[key].append(np.float32(values[key]))
      for key in lr_keys:
        golden[f"lr_by_global_step/{key}"] = np.asarray(lr_by_step[key], np.float32)
        for k in range(1, N_STEPS_RUN + 1):
          golden[f"step{k}/applied_lr/{key}"] = np.float32(lr_by_step[key][k])
      state = sess.run(all_vars)
  rule = applied_lr_check(updates, lr_by_step, names, config.weight_decay_rate)

  used = np.unique(records["input_ids"][:N_STEPS_RUN * BATCH]).astype(np.int32)
  unused = np.setdiff1d(np.arange(state[WORD].shape[0], dtype=np.int32), used)
  extra = np.sort(np.random.RandomState(5).choice(unused, N_UNUSED_ROWS, replace=False))
  row_ids = np.concatenate([used, extra.astype(np.int32)])
  saved_state = {}
  for nm, value in state.items():
    if nm.startswith(WORD):
      saved_state[f"{nm}@rows"] = value[row_ids]
    else:
      saved_state[nm] = value
  saved_state[f"{WORD}@row_ids"] = row_ids
  saved_state["global_step"] = np.asarray(state["global_step"], np.int64)
  files.save_npz(out / "state_after_step3.npz", saved_state)
  files.save_npz(out / "golden.npz", golden)
  files.save_json(out / "golden_meta.json", {
      "hparams": HPARAMS, "trainable_variables": names,
      "all_variables": sorted(all_vars), "assignment_map": sorted(assignment_map),
      "grad_types": grad_types, "steps": steps,
      "applied_lr_rule": rule,
      "train_tsv": (tmp / "finetuning_data" / "rte" / "train.tsv").read_text()})
  shutil.rmtree(tmp)
