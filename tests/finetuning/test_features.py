"""Featurisation parity with the official code (reference finetune_heads/features_*.tfrecord)."""

import json
import shutil

import numpy as np
import pytest

from electra_tf.finetuning import features, registry
from electra_tf.finetuning.builtin import tagging

TASK_NAMES = ["rte", "sts", "squad", "chunk"]  # the reference run's order (task ids)
QA_OPTIONS = ("doc_stride", "max_query_length")  # the lane's hparams.json (else defaults)


@pytest.fixture(scope="module")
def heads_dir(reference_dir):
  return reference_dir / "finetune_heads"


@pytest.fixture(scope="module")
def hparams(heads_dir):
  """The reference run's --hparams (max_seq_length 128 big, 64 golden)."""
  return json.loads((heads_dir / "hparams.json").read_text())


@pytest.fixture(scope="module")
def tokenizer(reference_dir):
  """The lane's vocabulary (the reference features were made with it)."""
  return registry.make_tokenizer(str(reference_dir / "vocab.txt"))


@pytest.fixture(scope="module")
def run(heads_dir, hparams, tokenizer, tmp_path_factory):
  """The reference's raw files in the official layout, and the four tasks built from them."""
  data_dir = tmp_path_factory.mktemp("data")
  for task, name in (("rte", "dev.tsv"), ("sts", "dev.tsv"), ("squad", "train.json")):
    (data_dir / "finetuning_data" / task).mkdir(parents=True)
    shutil.copy(heads_dir / "raw" / task / name, data_dir / "finetuning_data" / task / name)
  max_seq_length = hparams["max_seq_length"]
  options = {k: hparams[k] for k in QA_OPTIONS if k in hparams}
  tasks = registry.get_tasks(TASK_NAMES, tokenizer, str(data_dir), max_seq_length, **options)
  return {t.name: t for t in tasks}, features.all_feature_specs(tasks, max_seq_length)


def _chunk_examples(heads_dir):
  with open(heads_dir / "raw" / "chunk" / "sentences.txt") as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return [tagging.TaggingExample(r["eid"], "chunk", r["words"], r["labels"]) for r in rows]


def _featurize(run, heads_dir, name):
  tasks, _ = run
  task = tasks[name]
  if name == "chunk":
    examples, is_training = _chunk_examples(heads_dir), False
  elif name == "squad":
    examples, is_training = task.get_examples("train"), True  # reference used is_training=True
  else:
    examples, is_training = task.get_examples("dev"), False
  return [f for ex in examples for f in task.featurize(ex, is_training)]


def _parsed(path, specs):
  return [{k: v.numpy() for k, v in ex.items()} for ex in features.read_tfrecord(str(path), specs)]


@pytest.mark.parametrize("name", TASK_NAMES)
def test_features_match_official_tfrecord(run, heads_dir, tmp_path, name):
  """Write our features as TFRecord, parse both files with the same specs, compare all fields."""
  _, specs = run
  ours = tmp_path / f"{name}.tfrecord"
  n = features.write_tfrecord(_featurize(run, heads_dir, name), specs, str(ours))
  want = _parsed(heads_dir / f"features_{name}.tfrecord", specs)
  got = _parsed(ours, specs)
  assert n == len(want) == len(got) > 0
  assert set(want[0]) == {s.name for s in specs}
  for i, (g, w) in enumerate(zip(got, want, strict=True)):
    for key in w:
      assert g[key].dtype == w[key].dtype, key
      np.testing.assert_array_equal(g[key], w[key], err_msg=f"{name} record {i} {key}")


def test_golden_batches_are_the_decoded_records(run, heads_dir, reference_dir):
  """The golden ``<task>/in/*`` arrays are these records decoded (int64 -> int32)."""
  _, specs = run
  golden = np.load(heads_dir / "golden.npz")
  for name in TASK_NAMES:
    records = _parsed(heads_dir / f"features_{name}.tfrecord", specs)
    for spec in specs:
      stacked = np.stack([r[spec.name] for r in records])
      np.testing.assert_array_equal(stacked, golden[f"{name}/in/{spec.name}"])
      assert stacked.dtype == golden[f"{name}/in/{spec.name}"].dtype


def test_squad_examples_and_eval_metadata_match_official(run, heads_dir):
  tasks, _ = run
  meta = json.loads((heads_dir / "golden_meta.json").read_text())
  examples = tasks["squad"].get_examples("train")
  assert len(examples) == len(meta["squad_examples"])
  for ex, want in zip(examples, meta["squad_examples"], strict=True):
    assert (ex.eid, ex.qas_id, ex.doc_tokens) == (want["eid"], want["qas_id"], want["doc_tokens"])
    assert (ex.start_position, ex.end_position, ex.is_impossible) == (
        want["start_position"], want["end_position"], want["is_impossible"])
  feats = [f for ex in examples for f in tasks["squad"].featurize(ex, True, for_eval=True)]
  assert len(feats) == len(meta["squad_features"])
  for f, want in zip(feats, meta["squad_features"], strict=True):
    assert f["squad_eid"] == want["eid"]
    assert f["squad_doc_span_index"] == want["doc_span_index"]
    assert f["squad_tokens"] == want["tokens"]
    assert f["squad_token_to_orig_map"] == {int(k): v for k, v in
                                            want["token_to_orig_map"].items()}
    assert f["squad_token_is_max_context"] == {int(k): v for k, v in
                                               want["token_is_max_context"].items()}
    assert (f["squad_start_positions"], f["squad_end_positions"]) == (
        want["start_position"], want["end_position"])


def _check_chunk_task(raw_dir, heads_dir, tokenizer, max_seq_length, tmp_path, n_sentences):
  """The label mapping built like the official from ``raw_dir``'s CoNLL files is the
  reference's; its first three training sentences have the reference's words and label ids."""
  mapping_path = tmp_path / "chunk_label_mapping.json"
  task = tagging.Chunking(str(raw_dir), tokenizer, max_seq_length,
                          label_mapping_path=str(mapping_path))
  want = json.loads((heads_dir / "chunk_label_mapping.json").read_text())
  assert task.label_mapping == want
  assert json.loads(mapping_path.read_text()) == want  # cached
  examples = task.get_examples("train")
  assert len(examples) == n_sentences
  for ex, ref in zip(examples[:3], _chunk_examples(heads_dir), strict=True):
    assert (ex.eid, ex.words, ex.labels) == (ref.eid, list(ref.words), list(ref.labels))
  reloaded = tagging.Chunking(str(tmp_path / "missing"), tokenizer, max_seq_length,
                              label_mapping_path=str(mapping_path))
  assert reloaded.label_mapping == want
  mapping_path.write_text("")  # a power cut: rebuilt from the raw files
  rebuilt = tagging.Chunking(str(raw_dir), tokenizer, max_seq_length,
                             label_mapping_path=str(mapping_path))
  assert rebuilt.label_mapping == want and json.loads(mapping_path.read_text()) == want


@pytest.mark.extended
def test_chunk_label_mapping_and_labels_from_real_conll(shared_data_dir, tmp_path):
  """Built from the real CoNLL-2000 train+test like the official (the big reference's 42
  tags); the reference's first three training sentences come out the same."""
  from helpers.paths import REFERENCE

  tokenizer = registry.make_tokenizer(str(REFERENCE / "vocab.txt"))
  _check_chunk_task(shared_data_dir / "chunk", REFERENCE / "finetune_heads", tokenizer,
                    json.loads((REFERENCE / "finetune_heads" / "hparams.json").read_text())[
                        "max_seq_length"], tmp_path, 8936)  # CoNLL-2000 train sentences


def test_chunk_label_mapping_and_labels_from_golden_conll(vocab_file, tmp_path):
  """The same from the golden lane's own CoNLL-layout file (raw/chunk/train.txt)."""
  from helpers.paths import GOLDEN

  heads, tokenizer = GOLDEN / "finetune_heads", registry.make_tokenizer(vocab_file)
  n_sentences = (heads / "raw" / "chunk" / "train.txt").read_text().count("\n\n")
  _check_chunk_task(heads / "raw" / "chunk", heads, tokenizer,
                    json.loads((heads / "hparams.json").read_text())["max_seq_length"],
                    tmp_path, n_sentences)


def test_tfrecord_padding_and_cache(run, heads_dir, tmp_path):
  _, specs = run
  feats = _featurize(run, heads_dir, "rte")
  calls = []

  def make():
    calls.append(1)
    return iter(feats)

  prefix = features.cache_prefix(str(tmp_path), ["sts", "rte"], "dev")
  assert prefix.endswith("rte_sts_dev")
  path, n = features.build_or_load_cached(prefix, make, specs, pad_to_multiple_of=4,
                                          padding_task_id=len(TASK_NAMES))
  assert n == 4 and len(calls) == 1
  records = _parsed(path, specs)
  assert records[-1]["task_id"] == len(TASK_NAMES) and not records[-1]["input_ids"].any()
  path2, n2 = features.build_or_load_cached(prefix, make, specs)
  assert (path2, n2, len(calls)) == (path, 4, 1)  # cache hit: nothing re-read


@pytest.mark.parametrize("damage", ["metadata_empty", "metadata_short", "tfrecord_empty",
                                    "tfrecord_short"])
def test_cache_left_empty_or_short_is_rebuilt(run, heads_dir, tmp_path, damage):
  """A power cut can leave a cache file empty or short: it is rebuilt with one line naming
  the file, never a bare JSON error."""
  _, specs = run
  feats = _featurize(run, heads_dir, "rte")
  prefix, lines = str(tmp_path / "rte_dev"), []
  path, n = features.build_or_load_cached(prefix, lambda: iter(feats), specs)
  records = (tmp_path / "rte_dev.tfrecord").read_bytes()
  name, data = {"metadata_empty": (".metadata", b""), "metadata_short": (".metadata", b'{"n_ex'),
                "tfrecord_empty": (".tfrecord", b""),
                "tfrecord_short": (".tfrecord", records[:len(records) // 2])}[damage]
  (tmp_path / ("rte_dev" + name)).write_bytes(data)
  assert features.build_or_load_cached(prefix, lambda: iter(feats), specs,
                                       log_fn=lines.append) == (path, n)
  assert len(lines) == 1 and lines[0].startswith(f"Rebuilding {prefix}{name}: "), lines
  assert len(_parsed(path, specs)) == n


def test_input_dataset_batches(run, heads_dir, hparams):
  _, specs = run
  path = str(heads_dir / "features_squad.tfrecord")
  batches = list(features.input_dataset(path, specs, batch_size=4, is_training=False))
  assert len(batches) == 1 and batches[0]["input_ids"].shape == [4, hparams["max_seq_length"]]
  assert batches[0]["input_ids"].dtype.name == "int32"
  train = features.input_dataset(path, specs, batch_size=4, is_training=True, seed=1)
  eids = [b["squad_eid"].numpy() for b in train.take(6)]  # repeats forever
  assert all(e.shape == (4,) for e in eids)
  assert set(np.concatenate(eids)) == {0, 1, 1000, 1001, 2000, 2001}


def test_unknown_or_misshapen_feature_is_an_error(run, hparams):
  _, specs = run
  with pytest.raises(ValueError, match="Unknown feature"):
    features.to_tf_example({"nope": 1}, specs)
  expected = hparams["max_seq_length"]
  with pytest.raises(ValueError, match=f"input_ids has 3 values, expected {expected}"):
    features.to_tf_example({"input_ids": [1, 2, 3]}, specs)
