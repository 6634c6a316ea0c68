"""WordPiece vocabulary learning for corpora without a vocabulary (the demo's path)."""

from data_prep.learn_vocab import RESERVED, learn_vocab
from electra_tf.tokenization import FullTokenizer


def test_learned_vocab_covers_the_corpus(tmp_path, data_dir):
  text = (data_dir / "gutenberg" / "austen-persuasion.txt").read_text(encoding="utf-8")
  corpus = tmp_path / "corpus"
  corpus.mkdir()
  (corpus / "a.txt").write_text("\n".join(text.splitlines()[:400]), encoding="utf-8")
  vocab_file = tmp_path / "vocab.txt"
  size = learn_vocab(str(corpus), str(vocab_file), vocab_size=2000)
  tokens = vocab_file.read_text(encoding="utf-8").splitlines()
  assert len(tokens) == size and tuple(tokens[:5]) == RESERVED
  tokenizer = FullTokenizer(str(vocab_file))
  ids = [i for line in text.splitlines()[:400] for i in
         tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line))]
  assert ids and ids.count(tokens.index("[UNK]")) / len(ids) < 0.01
