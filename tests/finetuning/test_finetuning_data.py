"""Task readers on the real data sets, BERT-style featurisation, and bad-input errors."""

import pytest

from electra_tf.finetuning import registry, wordpiece
from electra_tf.finetuning.builtin import classification, tagging
from electra_tf.finetuning.task_base import DataError

SEQ = 128


@pytest.fixture(scope="module")
def tokenizer(vocab_file):
  return registry.make_tokenizer(vocab_file)


@pytest.fixture(scope="module")
def full_tokenizer(shared_data_dir):
  """BERT's 30522-WordPiece vocabulary of the shared folder, for its full data sets."""
  return registry.make_tokenizer(str(shared_data_dir.parent / "reference" / "vocab.txt"))


# (class, folder, {split: examples}): the in-repo files (tests/data/make_task_files.py) and the
# row counts verified in the shared folder's data/glue (extended lane)
GLUE = [
    (classification.CoLA, "CoLA", {"train": 60, "dev": 30, "test": 20},
     {"train": 8551, "dev": 1043, "test": 1063}),
    (classification.SST, "SST-2", {"train": 320, "dev": 60, "test": 40},
     {"train": 67349, "dev": 872, "test": 1821}),
    (classification.MRPC, "MRPC", {"train": 2 * 60, "dev": 30, "test": 20},  # + swapped
     {"train": 2 * 3668, "dev": 408, "test": 1725}),
    (classification.RTE, "RTE", {"train": 120, "dev": 205, "test": 112},
     {"train": 2490, "dev": 277, "test": 3000}),
    (classification.STS, "STS-B", {"train": 2 * 80, "dev": 40, "test": 120},  # + swapped
     {"train": 2 * 5749, "dev": 1500, "test": 1379}),
    (classification.QNLI, "QNLI", {"dev": 30, "test": 20}, {"dev": 5463, "test": 5463}),
]


def _check_glue_splits(glue_dir, tokenizer, cls, counts):
  task = cls(str(glue_dir), tokenizer, SEQ, task_id=2)
  for split, n in counts.items():
    examples = task.get_examples(split)
    assert len(examples) == n, split
    assert [ex.eid for ex in examples[:3]] == [0, 1, 2]
    for ex in examples[:3] + examples[-2:]:
      (f,) = task.featurize(ex)
      n_real = sum(f["input_mask"])
      assert len(f["input_ids"]) == len(f["segment_ids"]) == SEQ and 3 <= n_real <= SEQ
      assert f["input_ids"][0] == tokenizer.vocab["[CLS]"]
      assert f["input_ids"][n_real - 1] == tokenizer.vocab["[SEP]"]
      assert f["task_id"] == 2 and f[task.name + "_eid"] == ex.eid
      assert (ex.text_b is not None) == (1 in f["segment_ids"])
      spec_names = {s.name for s in task.feature_specs()}
      assert set(f) - {"input_ids", "input_mask", "segment_ids", "task_id"} == spec_names


@pytest.mark.parametrize("cls,folder,counts,real_counts", GLUE, ids=[g[1] for g in GLUE])
def test_real_glue_splits(data_dir, tokenizer, cls, folder, counts, real_counts):
  _check_glue_splits(data_dir / "glue" / folder, tokenizer, cls, counts)


@pytest.mark.extended
@pytest.mark.parametrize("cls,folder,counts,real_counts", GLUE, ids=[g[1] for g in GLUE])
def test_full_glue_splits(shared_data_dir, full_tokenizer, cls, folder, counts, real_counts):
  """The full GLUE files of the shared folder: every row read, with the verified counts."""
  _check_glue_splits(shared_data_dir / "glue" / folder, full_tokenizer, cls, real_counts)


def _check_double_unordered(sts_dir, tokenizer, n_dev):
  task = classification.STS(str(sts_dir), tokenizer, SEQ)
  train = task.get_examples("train")
  half = len(train) // 2
  assert (train[half].text_a, train[half].text_b) == (train[0].text_b, train[0].text_a)
  assert train[half].eid == half and train[half].label == train[0].label
  assert (task.featurize(train[0])[0]["sts_targets"] == pytest.approx(train[0].label / 5))
  single = classification.STS(str(sts_dir), tokenizer, SEQ, double_unordered=False)
  assert len(single.get_examples("train")) == half
  assert len(task.get_examples("dev")) == n_dev  # never doubled outside train


def test_double_unordered_swaps_pairs(data_dir, tokenizer):
  _check_double_unordered(data_dir / "glue" / "STS-B", tokenizer, 40)


@pytest.mark.extended
def test_double_unordered_swaps_pairs_full(shared_data_dir, full_tokenizer):
  _check_double_unordered(shared_data_dir / "glue" / "STS-B", full_tokenizer, 1500)


def test_pair_truncation_pops_longer_side(tokenizer):
  a, b = list("abcdefgh"), list("xyz")
  wordpiece.truncate_seq_pair(a, b, 6)
  assert (a, b) == (list("abc"), list("xyz"))
  a, b = list("ab"), list("xy")
  wordpiece.truncate_seq_pair(a, b, 3)  # tie: pops b first
  assert (a, b) == (list("ab"), list("x"))


def _rte_rows(data_dir, n):
  lines = (data_dir / "glue" / "RTE" / "dev.tsv").read_text().splitlines()[1:n + 1]
  return [line.split("\t") for line in lines]


def test_mnli_qqp_wnli_official_layouts(data_dir, tokenizer, tmp_path):
  """No MNLI/QQP/WNLI files are available offline: real RTE sentences in their GLUE layouts."""
  rows = _rte_rows(data_dir, 4)
  mnli = tmp_path / "finetuning_data" / "mnli"
  mnli.mkdir(parents=True)
  header = ["index", "promptID", "pairID", "genre", "s1_bin", "s2_bin", "s1_parse", "s2_parse",
            "sentence1", "sentence2"]
  labels = ["entailment", "neutral", "contradiction", "neutral"]
  for split, extra in (("train", ["gold_label"]), ("dev_matched", ["label1", "gold_label"]),
                       ("dev_mismatched", ["label1", "gold_label"]), ("test_matched", [])):
    lines = ["\t".join(header + extra)]
    for i, r in enumerate(rows):
      tail = [labels[i]] * len(extra)
      lines.append("\t".join([str(i), "p", "q", "fiction", "", "", "", "", r[1], r[2]] + tail))
    (mnli / f"{split}.tsv").write_text("\n".join(lines) + "\n")
  (mnli / "diagnostic.tsv").write_text("index\tsentence1\tsentence2\n0\tA b.\tC d.\n")
  task = registry.get_task("mnli", tokenizer, str(tmp_path), SEQ)
  assert task.get_dev_splits() == ["dev", "dev_mismatched"]
  assert task.get_test_splits() == ["test_matched", "test_mismatched", "diagnostic"]
  dev = task.get_examples("dev")  # -> dev_matched.tsv
  assert [ex.label for ex in dev] == labels and dev[0].text_a == rows[0][1]
  assert [task.featurize(ex)[0]["mnli_label_ids"] for ex in dev] == [1, 2, 0, 2]
  assert task.get_examples("test_matched")[0].label == "contradiction"  # dummy label
  assert task.get_examples("diagnostic")[0].text_b == "C d."

  qqp = tmp_path / "finetuning_data" / "qqp"
  qqp.mkdir()
  (qqp / "dev.tsv").write_text("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n" + "".join(
      f"{i}\t1\t2\t{r[1]}\t{r[2]}\t{i % 2}\n" for i, r in enumerate(rows)))
  (qqp / "test.tsv").write_text("id\tquestion1\tquestion2\n0\tWhy?\tWhy not?\n")
  task = registry.get_task("qqp", tokenizer, str(tmp_path), SEQ)
  assert [ex.label for ex in task.get_examples("dev")] == ["0", "1", "0", "1"]
  assert task.get_examples("test")[0].text_b == "Why not?"

  wnli = tmp_path / "finetuning_data" / "wnli"
  wnli.mkdir()
  (wnli / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n" + "".join(
      f"{i}\t{r[1]}\t{r[2]}\t1\n" for i, r in enumerate(rows)))
  task = registry.get_task("wnli", tokenizer, str(tmp_path), SEQ)
  assert task.featurize(task.get_examples("train")[0])[0]["wnli_label_ids"] == 1


def _check_chunk_test_split(chunk_dir, tokenizer, n_sentences, n_labels):
  task = tagging.Chunking(str(chunk_dir), tokenizer, SEQ)
  examples = task.get_examples("test")
  assert len(examples) == n_sentences
  assert len(task.label_mapping) == n_labels
  for ex in examples[:5]:
    (f,) = task.featurize(ex)
    n_words = int(sum(f["chunk_labels_mask"]))
    assert n_words == len(ex.words)  # short sentences: every word labelled
    positions = f["chunk_labeled_positions"][:n_words]
    assert positions[0] == 1 and positions == sorted(set(positions))  # strictly increasing
    assert set(f["segment_ids"][:sum(f["input_mask"])]) == {1}
    assert f["chunk_labels"][:n_words] == ex.labels


def test_real_chunk_test_split(data_dir, tokenizer):
  """The in-repo CoNLL-format files: 110 test sentences; BIOES tags B/I/E/S of NP and VP, S of
  ADJP, ADVP and PP, and O."""
  _check_chunk_test_split(data_dir / "chunk", tokenizer, 110, 12)


@pytest.mark.extended
def test_full_chunk_test_split(shared_data_dir, full_tokenizer):
  _check_chunk_test_split(shared_data_dir / "chunk", full_tokenizer, 2012, 42)


def test_tagging_truncation_budget_worked_by_hand(tokenizer, tmp_path):
  """The official check counts all words plus tokens so far: 100 one-piece words in 128
  tokens stop once 102 + len(ids) + 1 > 128, i.e. after [CLS] + 25 words, then [SEP]."""
  ex = tagging.TaggingExample(0, "chunk", ["the"] * 100, [5] * 100)
  task = tagging.Chunking(str(tmp_path), tokenizer, SEQ)
  (f,) = task.featurize(ex)
  assert sum(f["input_mask"]) == 27 and sum(f["chunk_labels_mask"]) == 25
  assert f["input_ids"][26] == tokenizer.vocab["[SEP]"]
  assert f["chunk_labels"] == [5] * 100 + [0] * 28  # labels are not cut to the kept words


def test_tokenize_and_align_keeps_words_whole(tmp_path):
  # its own vocabulary: the goldens' small one has no "record" and no CJK characters
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cafe", "near", "-",
                              "record", "\u4e2d", "\u56fd", "##\u56fd"]) + "\n", encoding="utf-8")
  tokenizer = registry.make_tokenizer(str(vocab))
  aligned = wordpiece.tokenize_and_align(tokenizer, ["Caf\u00e9", "near-record", "\u4e2d\u56fd"])
  assert aligned[0] == ["[CLS]"] and aligned[-1] == ["[SEP]"]
  assert aligned[1] == tokenizer.tokenize("cafe")
  assert aligned[2] == ["near", "-", "record"]
  # a CJK word stays one word (no per-character split as in tokenize): "##" continuation
  assert aligned[3] == ["\u4e2d", "##\u56fd"]
  assert tokenizer.tokenize("\u4e2d\u56fd") == ["\u4e2d", "\u56fd"]


# --- bad input -----------------------------------------------------------------------------


def _glue_dir(tmp_path, name, text):
  folder = tmp_path / "finetuning_data" / name
  folder.mkdir(parents=True, exist_ok=True)
  (folder / "dev.tsv").write_text(text)
  return folder / "dev.tsv"


def test_unknown_task_lists_known_ones(tokenizer):
  with pytest.raises(ValueError, match=r"Unknown task 'glue'; known tasks: cola, sst, mrpc"):
    registry.get_task("glue", tokenizer, "/nonexistent", SEQ)
  with pytest.raises(ValueError, match="known tasks: .*chunk"):
    registry.get_tasks(["rte", "nope"], tokenizer, "/nonexistent", SEQ)
  with pytest.raises(ValueError, match="Unknown task option.*beam_width"):
    registry.get_task("squad", tokenizer, "/nonexistent", SEQ, beam_width=3)


def test_missing_task_dir_and_split(tokenizer, tmp_path):
  task = registry.get_task("rte", tokenizer, str(tmp_path), SEQ)
  with pytest.raises(DataError, match=r"finetuning_data/rte: data folder for task 'rte'"):
    task.get_examples("dev")
  _glue_dir(tmp_path, "rte", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n")
  with pytest.raises(DataError, match=r"rte/train.tsv: split 'train' of task 'rte' not found"):
    task.get_examples("train")
  squad = registry.get_task("squad", tokenizer, str(tmp_path), SEQ)
  with pytest.raises(DataError, match="squad: data folder"):
    squad.get_examples("dev")


def test_wrong_column_count_names_file_and_line(tokenizer, tmp_path):
  path = _glue_dir(tmp_path, "rte", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n"
                   "1\ta\tb\textra\tentailment\n")
  task = registry.get_task("rte", tokenizer, str(tmp_path), SEQ)
  with pytest.raises(DataError) as err:
    task.get_examples("dev")
  assert str(err.value) == f"{path}:3: expected 4 tab-separated columns, found 5"
  assert "\n" not in str(err.value)
  _glue_dir(tmp_path, "sst", "sentence\n just one column\n")
  with pytest.raises(DataError, match=r"sst/dev.tsv:1: expected at least 2 .*found 1"):
    registry.get_task("sst", tokenizer, str(tmp_path), SEQ).get_examples("dev")


def test_unknown_label_and_bad_score(tokenizer, tmp_path):
  path = _glue_dir(tmp_path, "rte", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n"
                   "1\ta\tb\tcontradiction\n")
  with pytest.raises(DataError, match=rf"^{path}:3: unknown label 'contradiction' .*"
                     r"\(known: entailment, not_entailment\)$"):
    registry.get_task("rte", tokenizer, str(tmp_path), SEQ).get_examples("dev")
  header = "\t".join(["i", "g", "f", "y", "o", "s1", "s2", "sentence1", "sentence2", "score"])
  _glue_dir(tmp_path, "sts", header + "\n" + "\t".join(["0"] * 7 + ["a", "b", "5.5"]) + "\n")
  with pytest.raises(DataError, match=r"sts/dev.tsv:2: score 5.5 outside \[0.0, 5.0\]"):
    registry.get_task("sts", tokenizer, str(tmp_path), SEQ).get_examples("dev")


def test_empty_split(tokenizer, tmp_path):
  path = _glue_dir(tmp_path, "rte", "index\tsentence1\tsentence2\tlabel\n")
  with pytest.raises(DataError, match=rf"^{path}: split 'dev' of task 'rte' has no examples$"):
    registry.get_task("rte", tokenizer, str(tmp_path), SEQ).get_examples("dev")
  _glue_dir(tmp_path, "cola", "")
  with pytest.raises(DataError, match="cola/dev.tsv: split 'dev' of task 'cola' has no examples"):
    registry.get_task("cola", tokenizer, str(tmp_path), SEQ).get_examples("dev")
  chunk = tmp_path / "finetuning_data" / "chunk"
  chunk.mkdir()
  (chunk / "dev.txt").write_text("\n\n")
  with pytest.raises(DataError, match="chunk/dev.txt: split 'dev' of task 'chunk' has no"):
    registry.get_task("chunk", tokenizer, str(tmp_path), SEQ).get_examples("dev")


def test_bad_conll_and_squad_files(tokenizer, tmp_path):
  chunk = tmp_path / "finetuning_data" / "chunk"
  chunk.mkdir(parents=True)
  (chunk / "train.txt").write_text("He PRP B-NP\nreckons\n")
  with pytest.raises(DataError, match=r"chunk/train.txt:2: no tag on this line "
                                      r"\(expected 'word ... tag'\)"):
    registry.get_task("chunk", tokenizer, str(tmp_path), SEQ).get_examples("train")
  squad = tmp_path / "finetuning_data" / "squad"
  squad.mkdir()
  (squad / "train.json").write_text('{"data": [{"paragraphs": [{"context": "A b.", "qas": ['
                                    '{"id": "q", "question": "?", "is_impossible": false, '
                                    '"answers": []}]}]}]}')
  with pytest.raises(DataError, match=r"squad/train.json: question 'q' has no answer"):
    registry.get_task("squad", tokenizer, str(tmp_path), SEQ).get_examples("train")
  (squad / "dev.json").write_text("[1, 2]")
  with pytest.raises(DataError, match="squad/dev.json: not a SQuAD JSON file"):
    registry.get_task("squad", tokenizer, str(tmp_path), SEQ).get_examples("dev")


def test_registry_task_ids_and_options(tokenizer, tmp_path):
  tasks = registry.get_tasks(["chunk", "squad", "mrpc"], tokenizer, str(tmp_path), 64,
                             doc_stride=32, double_unordered=False, beam_size=7,
                             preprocessed_data_dir=str(tmp_path / "pre"))
  assert [t.task_id for t in tasks] == [0, 1, 2]
  assert [t.name for t in tasks] == ["chunk", "squad", "mrpc"]
  assert tasks[0].label_mapping_path == str(tmp_path / "pre" / "chunk_label_mapping.json")
  assert (tasks[1].doc_stride, tasks[1].beam_size, tasks[1].max_seq_length) == (32, 7, 64)
  assert tasks[2].double_unordered is False
  assert tasks[1].make_head().beam_size == 7
  assert registry.raw_data_dir("/d", "rte") == "/d/finetuning_data/rte"
  with pytest.raises(ValueError, match="Duplicate task names"):
    registry.get_tasks(["rte", "rte"], tokenizer, str(tmp_path), 64)
