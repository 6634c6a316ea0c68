"""User tasks (task.json + CSV / TSV / JSONL / CoNLL files): same features as the built-in
tasks on the same real rows, metrics, and one-line errors naming file and row."""

import json

import numpy as np
import pytest
from helpers import user_data

from electra_tf.finetuning import features, registry
from electra_tf.finetuning.task_base import DataError
from electra_tf.finetuning.user import scoring as user_metrics

SEQ = 64
PAIRS = [("sst", "movie_reviews"), ("mrpc", "paraphrase"), ("sts", "similarity"),
         ("chunk", "chunking")]


@pytest.fixture(scope="module")
def root(data_dir, tmp_path_factory):
  root = tmp_path_factory.mktemp("user")
  user_data.write_all(root, data_dir)
  return root


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
  return registry.make_tokenizer(vocab_file)


def _task(name, tokenizer, root, seq=SEQ, **options):
  return registry.get_task(name, tokenizer, str(root), seq, **options)


def _renamed(feature, src, dst):
  return {(dst + k[len(src):] if k.startswith(src + "_") else k): v for k, v in feature.items()}


def _records(task, split, is_training):
  specs = features.all_feature_specs([task], task.max_seq_length)
  out = []
  for example in task.get_examples(split):
    for feature in task.featurize(example, is_training):
      out.append((feature, specs))
  return out


@pytest.mark.parametrize("builtin,user", PAIRS)
@pytest.mark.parametrize("split", ["train", "dev"])
def test_same_features_as_builtin(root, tokenizer, builtin, user, split):
  """Every record of the user task serializes to the built-in task's bytes (names aside)."""
  a = _records(_task(builtin, tokenizer, root), split, split == "train")
  b = _records(_task(user, tokenizer, root), split, split == "train")
  assert len(a) == len(b) > 0
  if builtin in ("mrpc", "sts") and split == "train":
    assert len(a) == 2 * (user_data.SPLITS["train"][1] - 1)  # swapped pairs added
  for (fa, specs_a), (fb, _) in zip(a, b, strict=True):
    fb = _renamed(fb, user, builtin)
    assert fa == fb
    assert (features.to_tf_example(fa, specs_a).SerializeToString()
            == features.to_tf_example(fb, specs_a).SerializeToString())


def test_truncation_is_counted_once(root, tokenizer, capsys):
  builtin, user = _task("sst", tokenizer, root, 12), _task("movie_reviews", tokenizer, root, 12)
  a = [f for e in builtin.get_examples("dev") for f in builtin.featurize(e)]
  capsys.readouterr()
  b = [f for e in user.get_examples("dev") for f in user.featurize(e)]
  lines = capsys.readouterr().out.splitlines()
  n_long = sum(1 for e in builtin.get_examples("dev")
               if len(tokenizer.tokenize(e.text_a)) + 2 > 12)
  assert n_long > 0
  assert lines == [f"movie_reviews dev: {n_long} of 16 examples are longer than "
                   "max_seq_length=12 tokens and were truncated"]
  assert [_renamed(f, "movie_reviews", "sst") for f in b] == a
  tagging = _task("chunking", tokenizer, root, 40)
  for example in tagging.get_examples("dev"):
    tagging.featurize(example)
  assert "chunking dev: " in capsys.readouterr().out


def test_labels_from_train_are_stored(root, tokenizer, tmp_path):
  task = _task("movie_reviews", tokenizer, root, preprocessed_data_dir=str(tmp_path))
  assert task.label_list == ("0", "1")  # first-seen order in train
  assert json.loads((tmp_path / "movie_reviews_labels.json").read_text()) == ["0", "1"]
  (tmp_path / "movie_reviews_labels.json").write_text('["1", "0"]')
  again = _task("movie_reviews", tokenizer, root, preprocessed_data_dir=str(tmp_path))
  assert again.label_list == ("1", "0")  # the stored list wins
  paraphrase = _task("paraphrase", tokenizer, root)
  assert paraphrase.label_list == ("0", "1") and paraphrase.label_values == [0, 1]
  assert _task("movie_reviews", tokenizer, root).metrics() == ("accuracy", "macro_f1", "mcc")
  assert _task("similarity", tokenizer, root).score_range == [0.0, 5.0]


@pytest.mark.parametrize("text", ["", '["0", "'])
def test_labels_file_left_empty_or_short_is_rebuilt(root, tokenizer, tmp_path, capsys, text):
  """A power cut left ``<task>_labels.json`` empty or short: rebuilt from train with one line
  naming the file, never a bare JSON error."""
  path = tmp_path / "movie_reviews_labels.json"
  path.write_text(text)
  task = _task("movie_reviews", tokenizer, root, preprocessed_data_dir=str(tmp_path))
  assert task.label_list == ("0", "1")
  assert json.loads(path.read_text()) == ["0", "1"]
  lines = [x for x in capsys.readouterr().out.splitlines() if str(path) in x]
  assert len(lines) == 1 and lines[0].startswith(f"Rebuilding {path}: the file "), lines


def test_multitask_with_builtin(root, tokenizer):
  tasks = registry.get_tasks(["sst", "chunking", "paraphrase"], tokenizer, str(root), SEQ)
  assert [t.task_id for t in tasks] == [0, 1, 2]
  specs = features.all_feature_specs(tasks, SEQ)
  assert {"sst_label_ids", "chunking_labels", "paraphrase_label_ids"} <= {s.name for s in specs}
  record = tasks[1].featurize(tasks[1].get_examples("dev")[0])[0]
  assert record["task_id"] == 1
  features.to_tf_example(record, specs)


def test_user_metrics_match_sklearn():
  sklearn_metrics = pytest.importorskip("sklearn.metrics")
  rng = np.random.default_rng(0)
  labels, preds = rng.integers(0, 3, 50).tolist(), rng.integers(0, 3, 50).tolist()
  got = dict(user_metrics.classification_metrics(labels, preds, ["accuracy", "macro_f1",
                                                                 "mcc"]))
  assert got["macro_f1"] == pytest.approx(100 * sklearn_metrics.f1_score(labels, preds,
                                                                         average="macro"))
  assert got["mcc"] == pytest.approx(100 * sklearn_metrics.matthews_corrcoef(labels, preds))
  assert got["accuracy"] == pytest.approx(100 * sklearn_metrics.accuracy_score(labels, preds))


# ---------------------------------------------------------------------------------------------
# errors: one line, naming the file and the row
# ---------------------------------------------------------------------------------------------


def _user_folder(tmp_path, spec, files):
  folder = tmp_path / "finetuning_data" / "mine"
  folder.mkdir(parents=True)
  (folder / "task.json").write_text(json.dumps(spec))
  for name, text in files.items():
    (folder / name).write_text(text)
  return folder


CLS = {"type": "classification", "text_a": "text", "label": "y"}
GOOD = "text,y\nfine film,pos\nbad film,neg\n"


@pytest.mark.parametrize("spec,files,split,message", [
    (CLS, {"train.csv": "words,y\nfine,pos\n", "dev.csv": GOOD}, "train",
     r"train\.csv:1: missing column 'text' for text_a \(columns: words, y\)$"),
    ({**CLS, "labels": ["pos", "neg"]}, {"train.csv": GOOD, "dev.csv": GOOD + "meh,mixed\n"},
     "dev", r"dev\.csv:4: unknown label 'mixed' for task 'mine' \(known: pos, neg\)$"),
    (CLS, {"train.csv": GOOD + "a,b,c\n", "dev.csv": GOOD}, "train",
     r"train\.csv:4: expected 2 comma-separated fields, found 3$"),
    ({"type": "classification", "text_a": 0, "label": 1, "header": False},
     {"train.tsv": "fine\tpos\nbad\n", "dev.tsv": "x\tpos\n"}, "train",
     r"train\.tsv:2: expected 2 tab-separated fields, found 1$"),
    (CLS, {"train.csv": GOOD, "dev.csv": "text,y\n"}, "dev",
     r"dev\.csv: split 'dev' of task 'mine' has no examples$"),
    (CLS, {"train.jsonl": '{"text": "a", "y": "pos"}\n{"text": "b"}\n', "dev.csv": GOOD},
     "train", r"train\.jsonl:2: missing column \"y\" for label$"),
    (CLS, {"train.jsonl": '{"text": "a", "y": "pos"}\n{"text": 3, "y": "neg"}\n',
           "dev.csv": GOOD}, "train", r"train\.jsonl:2: text_a must be a string, got 3$"),
    (CLS, {"train.jsonl": '{"text": "a", "y": "pos"\n', "dev.csv": GOOD}, "train",
     r"train\.jsonl:1: not valid JSON: "),
    (CLS, {"train.csv": GOOD, "train.jsonl": "", "dev.csv": GOOD}, "train",
     r"mine: several files for split 'train': train\.csv, train\.jsonl$"),
    (CLS, {"train.csv": GOOD}, "dev", r"mine: no dev file \(dev\.csv or dev\.tsv or dev\.jsonl\)$"),
    ({"type": "regression", "text_a": "text", "label": "y"},
     {"train.csv": "text,y\na,1.5\nb,x\n", "dev.csv": GOOD}, "train",
     r"train\.csv:3: score 'x' is not a number$"),
    ({"type": "regression", "text_a": "text", "label": "y", "range": [0, 5]},
     {"train.csv": "text,y\na,1.5\n", "dev.csv": "text,y\na,6\n"}, "dev",
     r"dev\.csv:2: score 6.0 outside \[0.0, 5.0\]$"),
    ({"type": "tagging"}, {"train.txt": "The DT B-NP\ndog\n\n", "dev.txt": "a B-NP\n"},
     "train", r"train\.txt:2: no tag on this line \(expected 'word \.\.\. tag'\): 'dog'$"),
    ({"type": "tagging"}, {"train.txt": "The B-NP\n\nran VBD\n\n", "dev.txt": "a B-NP\n"},
     "train", r"train\.txt:3: tag 'VBD' is not a span tag .*\"spans\": false in task\.json$"),
    ({"type": "tagging"}, {"train.jsonl": '{"tokens": ["a", "b"], "tags": ["O"]}\n',
                           "dev.txt": "a B-NP\n"},
     "train", r"train\.jsonl:1: 2 words but 1 tags$"),
])
def test_data_errors(tokenizer, tmp_path, spec, files, split, message):
  _user_folder(tmp_path, spec, files)
  with pytest.raises(DataError, match=message) as e:
    _task("mine", tokenizer, tmp_path).get_examples(split)
  assert "\n" not in str(e.value) and "finetuning_data/mine" in str(e.value)


@pytest.mark.parametrize("spec,message", [
    ({"type": "ranking"}, r"'type' must be one of classification, regression, tagging"),
    ({**CLS, "colour": 1}, r"unknown key 'colour'"),
    ({"type": "classification", "label": "y"}, r"missing key 'text_a'"),
    ({**CLS, "metrics": ["bleu"]}, r"unknown metric \"bleu\" for a classification task"),
    ({**CLS, "labels": ["a"]}, r"'labels' must be a list of at least 2"),
    ({"type": "regression", "text_a": "t", "label": "y", "range": [5, 0]}, r"'range' must be"),
])
def test_task_json_errors(tokenizer, tmp_path, spec, message):
  _user_folder(tmp_path, spec, {"train.csv": GOOD, "dev.csv": GOOD})
  with pytest.raises(DataError, match=r"mine/task\.json: " + message):
    _task("mine", tokenizer, tmp_path)


def test_unknown_name_without_task_json(tokenizer, tmp_path):
  with pytest.raises(ValueError, match=r"Unknown task 'mine'; known tasks: cola, .* or a "
                                       r"folder with a task\.json"):
    _task("mine", tokenizer, tmp_path)


def test_tagging_jsonl_same_as_conll_and_written_predictions(root, tokenizer, tmp_path):
  """The CoNLL chunking files as JSONL (other keys, ids) give the same features; predictions
  are written per word in the train file's scheme, words past the tagged ones as O."""
  folder = tmp_path / "finetuning_data" / "chunks_json"
  folder.mkdir(parents=True)
  (folder / "task.json").write_text(json.dumps({"type": "tagging", "text_a": "words",
                                                "label": "chunks", "id": "sid"}))
  conll = _task("chunking", tokenizer, root)
  for split in ("train", "dev", "test"):
    rows = [{"sid": f"{split}-{i}", "words": s.words, "chunks": s.tags}
            for i, s in enumerate(conll.read_split(split)[1])]
    if split == "test":
      rows = [{k: v for k, v in r.items() if k != "chunks"} for r in rows]
    (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  task = _task("chunks_json", tokenizer, tmp_path)
  assert task.label_mapping == conll.label_mapping
  for split in ("train", "dev", "test"):
    a = [f for e in conll.get_examples(split) for f in conll.featurize(e)]
    b = [f for e in task.get_examples(split) for f in task.featurize(e)]
    assert [_renamed(f, "chunks_json", "chunking") for f in b] == a

  # predictions: gold ids for the first 3 words of every test sentence, nothing for sentence 1
  examples = conll.get_examples("dev")
  outputs = [{"eid": np.int32(e.eid), "predictions": np.array(e.labels + [0] * 5),
              "labels_mask": np.array([1.0] * 3 + [0.0] * 5)} for e in examples if e.eid != 1]
  path = task.write_predictions(outputs, str(tmp_path / "out" / "chunks_json_test_2_predictions"))
  assert path == str(tmp_path / "out" / "chunks_json_test_2_predictions.jsonl")
  with open(path) as f:
    rows = [json.loads(line) for line in f]
  gold = conll.read_split("dev")[1]
  assert [r["sid"] for r in rows] == [f"test-{i}" for i in range(len(gold))]
  assert rows[1]["chunks"] == ["O"] * len(gold[1].words)
  for row, sentence in zip(rows, gold, strict=True):
    assert row["words"] == sentence.words
    if row["sid"] != "test-1":  # the gold IOB2 tags (a span cut at word 3 keeps B/I)
      assert row["chunks"] == sentence.tags[:3] + ["O"] * (len(sentence.words) - 3)
