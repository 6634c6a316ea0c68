"""The raw-text ``classify_text`` signatures of a fine-tuned SavedModel: in-graph tokenisation
gives FullTokenizer's ids and the task's featurisation, so the logits equal ``classify``'s."""

import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops the SavedModel uses)

from electra_tf.finetuning import registry
from electra_tf.finetuning.builtin.classification import InputExample
from electra_tf.finetuning.finetuning_model import FinetuningModel
from electra_tf.finetuning.wordpiece import truncate_seq_pair
from electra_tf.interop import finetuned_saved_model as export
from electra_tf.modeling.bert_config import BertConfig
from electra_tf.text_graph import TextFeaturizer, truncated_pair_lengths
from electra_tf.tokenization import FullTokenizer

MAX_SEQ_LENGTH = 24
PAIRS = [
  ("The cat sat on the mat.", "A cat was sitting."),
  ("Ça coûte 5 € — très cher!", "Ünïcödé ἀρχή Straße ΣΊΣΥΦΟΣ 東京タワー"),
  ("word " * 30, "short"),  # truncation from the longer side
  ("x", "many more words in the second text than fit " * 3),
  ("Single sentence, no pair.", ""),
  ("Whitespace-only second text.", "  \t "),
  ("", ""),
]


@pytest.fixture(scope="module")
def exported(vocab_file, tmp_path_factory):
  tokenizer = FullTokenizer(vocab_file)
  tasks = registry.get_tasks(["rte", "cola"], tokenizer, "/nonexistent", MAX_SEQ_LENGTH)
  with open(vocab_file, encoding="utf-8") as f:
    vocab_size = len(f.read().splitlines())  # ids run to the last line's index
  config = BertConfig.from_dict({"vocab_size": vocab_size, "hidden_size": 32,
                                 "num_hidden_layers": 1, "num_attention_heads": 2,
                                 "intermediate_size": 64})
  tf.random.set_seed(1)
  model = FinetuningModel(config, tasks, embedding_size=16)
  folder = tmp_path_factory.mktemp("classify_text") / "saved_model"
  names = export.export_finetuned_saved_model(model, tasks, str(folder), vocab_file, True,
                                              MAX_SEQ_LENGTH)
  return tasks, names, tf.saved_model.load(str(folder)), folder


def _featurized(task, pairs):
  rows = [task.featurize(InputExample(i, task.name, a, b or None, task.dummy_label()))[0]
          for i, (a, b) in enumerate(pairs)]
  return {k: tf.constant([r[k] for r in rows], tf.int32)
          for k in ("input_ids", "input_mask", "segment_ids")}


def test_signatures_and_vocab_asset(exported, vocab_file):
  _, names, loaded, folder = exported
  assert names == ["classify_cola", "classify_rte", "classify_text_cola", "classify_text_rte"]
  assert (folder / "assets" / "vocab.txt").read_bytes() == open(vocab_file, "rb").read()


@pytest.mark.parametrize("task_index", [0, 1])
def test_classify_text_equals_classify_on_full_tokenizer_ids(exported, task_index):
  tasks, _, loaded, _ = exported
  task = tasks[task_index]
  inputs = _featurized(task, PAIRS)
  want = loaded.signatures[f"classify_{task.name}"](**inputs)
  got = loaded.signatures[f"classify_text_{task.name}"](
    text_a=tf.constant([a for a, _ in PAIRS]), text_b=tf.constant([b for _, b in PAIRS]))
  assert sorted(got) == sorted(want) == ["logits", "probabilities"]
  np.testing.assert_array_equal(got["logits"].numpy(), want["logits"].numpy())
  np.testing.assert_array_equal(got["probabilities"].numpy(), want["probabilities"].numpy())


def test_featurizer_matches_the_task(exported, vocab_file):
  tasks, _, _, _ = exported
  featurizer = TextFeaturizer(vocab_file, True, MAX_SEQ_LENGTH)
  got = featurizer.featurize(tf.constant([a for a, _ in PAIRS]),
                             tf.constant([b for _, b in PAIRS]))
  want = _featurized(tasks[0], PAIRS)
  for key in want:
    np.testing.assert_array_equal(got[key].numpy(), want[key].numpy(), err_msg=key)


def test_in_graph_ids_equal_full_tokenizer(reference_dir):
  """The reference corpus and edge cases (controls, accents, CJK, long words, separators)."""
  ref = reference_dir / "tokenizer"
  vocab_file = str(reference_dir / "vocab.txt")  # the vocabulary the lane's ids were made with
  lines = (ref / "corpus.txt").read_text(encoding="utf-8").split("\n")[:-1]
  ids = [json.loads(line) for line in open(ref / "official_ids.jsonl")]
  featurizer = TextFeaturizer(vocab_file, True)
  assert featurizer.tokenize(tf.constant(lines)).to_list() == ids
  cases = [json.loads(line) for line in open(ref / "extra_cases.jsonl")]
  texts = tf.constant([c["text"] for c in cases])
  assert featurizer.tokenize(texts).to_list() == [c["ids"] for c in cases]
  keep_accents = TextFeaturizer(vocab_file, True, strip_accents=False)
  assert keep_accents.tokenize(texts).to_list() == [c["ids_no_strip_accents"] for c in cases]
  cased = FullTokenizer(vocab_file, do_lower_case=False)
  sample = [c["text"] for c in cases] + lines[:200]
  assert TextFeaturizer(vocab_file, False).tokenize(tf.constant(sample)).to_list() == [
    cased.convert_tokens_to_ids(cased.tokenize(t)) for t in sample]


def test_truncation_follows_truncate_seq_pair():
  for max_length in range(1, 9):
    lengths = [(a, b) for a in range(11) for b in range(11)]
    want = []
    for a, b in lengths:
      tokens_a, tokens_b = list(range(a)), list(range(b))
      truncate_seq_pair(tokens_a, tokens_b, max_length)
      want.append((len(tokens_a), len(tokens_b)))
    got_a, got_b = truncated_pair_lengths(tf.constant([a for a, _ in lengths], tf.int64),
                                          tf.constant([b for _, b in lengths], tf.int64),
                                          max_length)
    assert list(zip(got_a.numpy().tolist(), got_b.numpy().tolist(), strict=True)) == want
