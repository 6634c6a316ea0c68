"""Family ``finetuning``: tests/golden/finetune_heads/ (the official multi-task fine-tuning graph).

Which official code made which file (nothing here re-implements the official computation):

- ``raw/``: text written for this repository (own sentences, Austen's *Persuasion*, public
  domain) in the official file layouts (GLUE tsv, SQuAD 2.0 json, CoNLL-2000 chunking).
- ``chunk_label_mapping.json``: ``TaggingTask._get_label_mapping`` (via ``Chunking.get_examples``)
  on ``raw/chunk/train.txt``; ``raw/chunk/sentences.txt``: its first three ``TaggingExample``\\s.
- ``features_<task>.tfrecord``: ``task.get_examples`` -> ``Preprocessor.serialize_examples``
  (official ``featurize`` + ``_make_tf_example``; batch size = the task's feature count, so no
  padding records); each Example serialized with ``deterministic=True`` (sorted feature map) so
  the bytes are reproducible.
- ``golden.npz`` ``<task>/in/*``: official ``Preprocessor._decode_tfrecord`` of those records.
- ``model.ckpt``, ``golden.npz`` outputs: ``run_finetuning.FinetuningModel`` (eval graph; and an
  ``is_training=True`` graph with dropout 0 for ``squad/train_mode_out/*``), initialised by
  ``modeling.get_assignment_map_from_checkpoint`` + ``tf.train.init_from_checkpoint`` from
  ``electra_small_2l/model.ckpt``; heads by their official initializers under the seed, then
  every ``task_specific/*/bias`` overwritten (``RandomState(11)``, sorted names).
- ``variables_train_graph.tsv``: the same model with ``is_training=True`` followed by
  ``optimization.create_optimizer`` (the ``model_fn`` call).
- ``bert_config.json``: ``training_utils.get_bert_config(config).to_dict()``;
  ``finetuning_config_resolved.json``: ``FinetuningConfig`` fields (paths removed).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile

import numpy as np

from tools.official_goldens import files, official

SEED = 20200323
HEAD_BIAS_SEED = 11
TASK_NAMES = ["rte", "sts", "squad", "chunk"]
HPARAMS = {
    "model_size": "small", "embedding_size": 16, "vocab_size": 1016, "max_seq_length": 64,
    "model_hparam_overrides": {"hidden_size": 32, "num_attention_heads": 2,
                               "intermediate_size": 64, "num_hidden_layers": 2},
    "task_names": TASK_NAMES, "doc_stride": 24, "max_query_length": 16,
}
PATH_FIELDS = {"data_dir", "model_name", "vocab_file", "init_checkpoint", "model_dir",
               "results_txt", "results_pkl", "preprocessed_data_dir"}

RTE_ROWS = [
    ("0", "Anne Elliot walked to the village with her sister Mary on a cold morning.",
     "Anne and Mary walked to the village.", "entailment"),
    ("1", "Sir Walter Elliot, of Kellynch Hall, in Somersetshire, was a man who, for his own "
     "amusement, never took up any book but the Baronetage; there he found occupation for an "
     "idle hour, and consolation in a distressed one; there his faculties were roused into "
     "admiration and respect, by contemplating the limited remnant of the earliest patents.",
     "Sir Walter liked to read many different books about farming and the sea.",
     "not_entailment"),
    ("2", "The letter from Captain Wentworth arrived after the family had left for Bath.",
     "Captain Wentworth never wrote a letter.", "not_entailment"),
]
STS_HEADER = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
              "sentence1", "sentence2", "score"]
STS_ROWS = [
    ("0", "main-forums", "own", "2026", "0001", "none", "none",
     "The young lady read a long letter by the fire.",
     "A young woman was reading a letter near the fire.", "4.400"),
    ("1", "main-forums", "own", "2026", "0002", "none", "none",
     "The carriage stopped at the gate of the great house.",
     "Nobody in the family cared for music.", "0.200"),
    ("2", "main-news", "own", "2026", "0003", "none", "none",
     "Mr. Knightley walked to Hartfield in the evening.",
     "In the evening Mr. Knightley came to Hartfield on foot.", "3.800"),
]
SQUAD_CONTEXT = (
    "Vanity was the beginning and the end of Sir Walter Elliot's character; vanity of person "
    "and of situation.  He had been remarkably handsome in his youth; and, at fifty-four, was "
    "still a very fine man.  Few women could think more of their personal appearance than he "
    "did.")
SQUAD_QAS = [
    ("elliot-q1", "What was the beginning of his character?", "Vanity", False),
    ("elliot-q2", "How old was Sir Walter?", "fifty-four", False),
    ("elliot-q3", "Where did Sir Walter keep his horses?", "his youth", True),
]
# CoNLL-2000 layout: word, part-of-speech tag, BIO chunk tag (sentences written for this data).
CHUNK_SENTENCES = [
    [("Anne", "NNP", "B-NP"), ("walked", "VBD", "B-VP"), ("to", "TO", "B-PP"),
     ("the", "DT", "B-NP"), ("old", "JJ", "I-NP"), ("village", "NN", "I-NP"),
     ("with", "IN", "B-PP"), ("Mary", "NNP", "B-NP"), (".", ".", "O")],
    [("The", "DT", "B-NP"), ("family", "NN", "I-NP"), ("had", "VBD", "B-VP"),
     ("left", "VBN", "I-VP"), ("Kellynch", "NNP", "B-NP"), ("Hall", "NNP", "I-NP"),
     ("for", "IN", "B-PP"), ("Bath", "NNP", "B-NP"), ("in", "IN", "B-PP"),
     ("the", "DT", "B-NP"), ("autumn", "NN", "I-NP"), (",", ",", "O"),
     ("and", "CC", "O"), ("nobody", "NN", "B-NP"), ("was", "VBD", "B-VP"),
     ("sorry", "JJ", "B-ADJP"), (".", ".", "O")],
    [("Emma", "NNP", "B-NP"), ("Woodhouse", "NNP", "I-NP"), (",", ",", "O"),
     ("handsome", "JJ", "B-ADJP"), (",", ",", "O"), ("clever", "JJ", "B-ADJP"),
     (",", ",", "O"), ("and", "CC", "O"), ("rich", "JJ", "B-ADJP"), (",", ",", "O"),
     ("seemed", "VBD", "B-VP"), ("to", "TO", "I-VP"), ("unite", "VB", "I-VP"),
     ("some", "DT", "B-NP"), ("of", "IN", "B-PP"), ("the", "DT", "B-NP"),
     ("best", "JJS", "I-NP"), ("blessings", "NNS", "I-NP"), ("of", "IN", "B-PP"),
     ("existence", "NN", "B-NP"), (".", ".", "O")],
    [("She", "PRP", "B-NP"), ("quickly", "RB", "B-ADVP"), ("wrote", "VBD", "B-VP"),
     ("to", "TO", "B-PP"), ("her", "PRP$", "B-NP"), ("father", "NN", "I-NP"), (".", ".", "O")],
]
N_CHUNK = 3  # the first three sentences form the batch


def write_raw(raw: pathlib.Path) -> None:
  """The raw task inputs in the official layouts."""
  rte = ["index\tsentence1\tsentence2\tlabel", *["\t".join(r) for r in RTE_ROWS]]
  files.save_text(raw / "rte" / "dev.tsv", "\n".join(rte) + "\n")
  sts = ["\t".join(STS_HEADER), *["\t".join(r) for r in STS_ROWS]]
  files.save_text(raw / "sts" / "dev.tsv", "\n".join(sts) + "\n")
  qas = []
  for qid, question, answer, impossible in SQUAD_QAS:
    span = [{"text": answer, "answer_start": SQUAD_CONTEXT.index(answer)}]
    qa = {"id": qid, "question": question, "is_impossible": impossible}
    qa.update({"answers": [], "plausible_answers": span} if impossible else {"answers": span})
    qas.append(qa)
  squad = {"version": "v2.0", "data": [{"title": "Persuasion", "paragraphs": [
      {"context": SQUAD_CONTEXT, "qas": qas}]}]}
  files.save_text(raw / "squad" / "train.json", json.dumps(squad, indent=1) + "\n")
  conll = "".join("".join(" ".join(t) + "\n" for t in s) + "\n" for s in CHUNK_SENTENCES)
  files.save_text(raw / "chunk" / "train.txt", conll)


def make_data_dir(raw: pathlib.Path, vocab: pathlib.Path, tmp: str) -> str:
  """An official ``data_dir``: vocab.txt and finetuning_data/<task>/ (copies of raw/)."""
  shutil.copy(vocab, os.path.join(tmp, "vocab.txt"))
  for task, name in (("rte", "dev.tsv"), ("sts", "dev.tsv"), ("squad", "train.json"),
                     ("chunk", "train.txt")):
    os.makedirs(os.path.join(tmp, "finetuning_data", task), exist_ok=True)
    shutil.copy(raw / task / name, os.path.join(tmp, "finetuning_data", task, name))
  return tmp


def resolved_config(config) -> dict:
  """Every FinetuningConfig field except the paths and the path-format callables."""
  return {k: v for k, v in sorted(vars(config).items())
          if k not in PATH_FIELDS and not callable(v)}


class _Recorder:
  """Wraps ``modeling.BertModel`` so the generator can fetch the encoder's tensors."""

  def __init__(self, modeling):
    self.models = []
    original = modeling.BertModel
    recorder = self

    class Recorded(original):
      def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        recorder.models.append(self)

    modeling.BertModel = Recorded
    self.restore = lambda: setattr(modeling, "BertModel", original)


class _DeterministicExample:
  """An official ``tf.train.Example`` whose ``SerializeToString`` sorts the feature map.

  Protobuf map order otherwise varies between processes; the parsed features are the same.
  """

  def __init__(self, example):
    self.example = example

  def SerializeToString(self) -> bytes:  # noqa: N802 (the protobuf method name)
    return self.example.SerializeToString(deterministic=True)


def deterministic_records(preprocessor) -> None:
  """Wraps the official ``Preprocessor._make_tf_example`` so TFRecord bytes are reproducible."""
  make = preprocessor._make_tf_example  # noqa: SLF001 (official)
  preprocessor._make_tf_example = lambda **kw: _DeterministicExample(make(**kw))  # noqa: SLF001


def placeholders(tf, preprocessor) -> dict:
  """One placeholder per official feature, named like the feature, batch dimension free."""
  out = {}
  for name, spec in preprocessor._name_to_feature_config.items():  # noqa: SLF001 (official)
    dtype = tf.int32 if spec.dtype == tf.int64 else spec.dtype
    out[name] = tf.placeholder(dtype, [None, *spec.shape], name=name)
  return out


def decode(tf, preprocessor, path: str) -> dict[str, np.ndarray]:
  """The records of ``path`` through the official ``_decode_tfrecord``, stacked."""
  with tf.Graph().as_default():
    ds = tf.data.TFRecordDataset(path).map(preprocessor._decode_tfrecord)  # noqa: SLF001
    nxt = tf.data.make_one_shot_iterator(ds.batch(1000)).get_next()
    with tf.Session() as sess:
      return sess.run(nxt)


def overwrite_head_biases(tf, sess) -> list[str]:
  """``task_specific/*/bias`` <- N(0, 0.05^2) from RandomState(11), in sorted name order."""
  rng = np.random.RandomState(HEAD_BIAS_SEED)
  variables = {v.op.name: v for v in tf.global_variables()}
  names = sorted(n for n in variables if n.startswith("task_specific/") and n.endswith("/bias"))
  for name in names:
    shape = variables[name].shape.as_list()
    variables[name].load(rng.normal(0.0, 0.05, size=shape).astype(np.float32), sess)
  return names


def write_variables_tsv(path: pathlib.Path, shapes: dict[str, tuple]) -> None:
  lines = ["name\tshape\tdtype"]
  for name in sorted(shapes):
    shape, dtype = shapes[name]
    lines.append(f"{name}\t{json.dumps(list(shape))}\t{dtype}")
  files.save_text(path, "\n".join(lines) + "\n")


def write(official_dir: str, golden_dir: pathlib.Path) -> None:
  """Writes tests/golden/finetune_heads/."""
  import tensorflow as tf_

  tf = tf_.compat.v1
  configure_finetuning = official.module("configure_finetuning")
  run_finetuning = official.module("run_finetuning")
  preprocessing = official.module("finetune.preprocessing")
  task_builder = official.module("finetune.task_builder")
  modeling = official.module("model.modeling")
  optimization = official.module("model.optimization")
  training_utils = official.module("util.training_utils")

  out = golden_dir / "finetune_heads"
  init_ckpt = str(golden_dir / "electra_small_2l" / "model.ckpt")
  for old in out.glob("*") if out.exists() else []:  # README.md is written by hand
    if old.name != "README.md":
      shutil.rmtree(old) if old.is_dir() else old.unlink()
  write_raw(out / "raw")
  tmp = tempfile.mkdtemp(prefix="ft_golden_")
  data_dir = make_data_dir(out / "raw", golden_dir / "vocab.txt", tmp)
  config = configure_finetuning.FinetuningConfig("golden", data_dir, **HPARAMS)
  tasks = task_builder.get_tasks(config)
  by_name = {t.name: t for t in tasks}
  pre = preprocessing.Preprocessor(config, tasks)
  deterministic_records(pre)

  # Examples -> official featurisation -> TFRecord -> official decoding.
  chunk_examples = by_name["chunk"].get_examples("train")[:N_CHUNK]
  mapping = by_name["chunk"]._get_label_mapping()  # noqa: SLF001 (official)
  files.save_json(out / "chunk_label_mapping.json", mapping)
  files.save_jsonl(out / "raw" / "chunk" / "sentences.txt", [
      {"eid": ex.eid, "words": list(ex.words), "labels": list(ex.labels)}
      for ex in chunk_examples])
  examples = {"rte": by_name["rte"].get_examples("dev"),
              "sts": by_name["sts"].get_examples("dev"),
              "squad": by_name["squad"].get_examples("train"), "chunk": chunk_examples}
  batches, counts = {}, {}
  for name in TASK_NAMES:
    path = str(out / f"features_{name}.tfrecord")
    n_feats = sum(len(f) if isinstance(f, list) else 1 for f in (
        by_name[name].featurize(ex, name == "squad") for ex in examples[name]))
    counts[name] = pre.serialize_examples(examples[name], name == "squad", path, n_feats)
    batches[name] = decode(tf, pre, path)

  squad_examples = [{
      "doc_tokens": ex.doc_tokens, "eid": ex.eid, "end_position": ex.end_position,
      "is_impossible": ex.is_impossible, "qas_id": ex.qas_id,
      "start_position": ex.start_position} for ex in examples["squad"]]
  squad_features = []
  for ex in examples["squad"]:
    for f in by_name["squad"].featurize(ex, True, for_eval=True):
      squad_features.append({
          "doc_span_index": f["squad_doc_span_index"], "eid": f["squad_eid"],
          "end_position": f["squad_end_positions"], "is_impossible": f["squad_is_impossible"],
          "start_position": f["squad_start_positions"], "tokens": f["squad_tokens"],
          "token_is_max_context": {str(k): v for k, v in f["squad_token_is_max_context"].items()},
          "token_to_orig_map": {str(k): v for k, v in f["squad_token_to_orig_map"].items()}})

  golden: dict[str, np.ndarray] = {}
  ckpt = str(out / "model.ckpt")
  # 1. Eval graph: official init, head biases overwritten, checkpoint, outputs per task batch.
  with tf.Graph().as_default():
    tf.set_random_seed(SEED)
    recorder = _Recorder(modeling)
    feats = placeholders(tf, pre)
    model = run_finetuning.FinetuningModel(config, tasks, False, feats, num_train_steps=1000)
    recorder.restore()
    bert = recorder.models[0]
    tvars = tf.trainable_variables()
    assignment_map, _ = modeling.get_assignment_map_from_checkpoint(tvars, init_ckpt)
    tf.train.init_from_checkpoint(init_ckpt, assignment_map)
    saver = tf.train.Saver(tf.global_variables(), save_relative_paths=True)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      perturbed = overwrite_head_biases(tf, sess)
      saver.save(sess, ckpt, write_meta_graph=False)
      shapes = {v.op.name: (v.shape.as_list(), v.dtype.base_dtype.name)
                for v in tf.global_variables()}
      for name in TASK_NAMES:
        fetch = {"encoder_sequence_output": bert.get_sequence_output(),
                 "encoder_pooled_output": bert.get_sequence_output()[:, 0],
                 "model_loss": model.loss,
                 **{f"out/{k}": v for k, v in model.outputs[name].items()}}
        if name == "rte":
          fetch["encoder_embedding_output"] = bert.get_embedding_output()
        values = sess.run(fetch, {feats[k]: v for k, v in batches[name].items()})
        golden.update({f"{name}/{k}": v for k, v in values.items()})
        golden.update({f"{name}/in/{k}": v for k, v in batches[name].items()})
  write_variables_tsv(out / "variables.tsv", shapes)

  # 2. Training path of the QA head: is_training=True with dropout 0, restored checkpoint.
  train_config = configure_finetuning.FinetuningConfig("golden", data_dir, **{
      **HPARAMS, "model_hparam_overrides": {**HPARAMS["model_hparam_overrides"],
                                            "hidden_dropout_prob": 0.0,
                                            "attention_probs_dropout_prob": 0.0}})
  with tf.Graph().as_default():
    feats = placeholders(tf, pre)
    model = run_finetuning.FinetuningModel(train_config, tasks, True, feats, num_train_steps=1000)
    with tf.Session() as sess:
      tf.train.Saver(save_relative_paths=True).restore(sess, ckpt)
      fetch = {k: model.outputs["squad"][k]
               for k in ("start_logits", "end_logits", "answerable_logit", "loss")}
      values = sess.run(fetch, {feats[k]: v for k, v in batches["squad"].items()})
      golden.update({f"squad/train_mode_out/{k}": v for k, v in values.items()})

  # 3. The official training graph's variables (model_fn's create_optimizer call).
  with tf.Graph().as_default():
    feats = placeholders(tf, pre)
    model = run_finetuning.FinetuningModel(config, tasks, True, feats, num_train_steps=1000)
    optimization.create_optimizer(
        model.loss, config.learning_rate, 1000, weight_decay_rate=config.weight_decay_rate,
        use_tpu=config.use_tpu, warmup_proportion=config.warmup_proportion,
        layerwise_lr_decay_power=config.layerwise_lr_decay,
        n_transformer_layers=model.bert_config.num_hidden_layers)
    train_shapes = {v.op.name: (v.shape.as_list(), v.dtype.base_dtype.name)
                    for v in tf.global_variables()}
  write_variables_tsv(out / "variables_train_graph.tsv", train_shapes)

  bert_config = training_utils.get_bert_config(config)
  files.save_json(out / "bert_config.json", bert_config.to_dict())
  files.save_json(out / "hparams.json", HPARAMS)
  files.save_json(out / "finetuning_config_resolved.json", resolved_config(config))
  files.save_json(out / "golden_meta.json", {
      "assignment_map_from_pretraining_ckpt": sorted(assignment_map),
      "feature_batches": counts, "perturbed_variables": perturbed,
      "squad_examples": squad_examples, "squad_features": squad_features})
  files.save_npz(out / "golden.npz", golden)
  shutil.rmtree(tmp)
