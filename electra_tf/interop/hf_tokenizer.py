"""Tokenizer files of a Hugging Face ELECTRA folder, so ``AutoTokenizer.from_pretrained`` works.

Writes what ``transformers`` writes for an ``ElectraTokenizer`` (WordPiece, BERT-style basic
tokenisation): ``vocab.txt``, ``tokenizer_config.json`` (``tokenizer_class``
"ElectraTokenizer", ``do_lower_case``, ``model_max_length``, the special tokens with their ids
in ``added_tokens_decoder``) and ``special_tokens_map.json``. The fast-tokenizer
``tokenizer.json`` is not written; transformers builds it from ``vocab.txt`` on load.
"""

from __future__ import annotations

import os
from typing import Any

from electra_tf import atomic_io
from electra_tf.model_files import VOCAB_FILE

TOKENIZER_CLASS = "ElectraTokenizer"
# role -> token, in the order transformers writes them
SPECIAL_TOKENS = {"cls_token": "[CLS]", "mask_token": "[MASK]", "pad_token": "[PAD]",
                  "sep_token": "[SEP]", "unk_token": "[UNK]"}


def _write(path: str, obj: Any) -> None:
  atomic_io.write_json(path, obj, indent=2, sort_keys=True)


def read_vocab(vocab_file: str) -> dict[str, int]:
  """token -> id (line number) of a WordPiece ``vocab.txt``."""
  with open(vocab_file, encoding="utf-8") as f:
    return {line.rstrip("\n"): i for i, line in enumerate(f)}


def tokenizer_config(vocab: dict[str, int], do_lower_case: bool,
                     model_max_length: int = 512) -> dict[str, Any]:
  """The ``tokenizer_config.json`` of an ``ElectraTokenizer`` over ``vocab``."""
  missing = [t for t in SPECIAL_TOKENS.values() if t not in vocab]
  if missing:
    raise ValueError(f"the vocabulary lacks special token(s) {', '.join(missing)}")
  decoder = {
    str(vocab[token]): {"content": token, "lstrip": False, "normalized": False,
                        "rstrip": False, "single_word": False, "special": True}
    for token in sorted(SPECIAL_TOKENS.values(), key=vocab.get)}
  return {
    "added_tokens_decoder": decoder,
    "clean_up_tokenization_spaces": True,
    **SPECIAL_TOKENS,
    "do_basic_tokenize": True,
    "do_lower_case": bool(do_lower_case),
    "extra_special_tokens": {},
    "model_max_length": int(model_max_length),
    "never_split": None,
    # None: strip accents exactly when lower-casing, as the official tokenizer does
    "strip_accents": None,
    "tokenize_chinese_chars": True,
    "tokenizer_class": TOKENIZER_CLASS,
  }


def write_tokenizer_files(folder: str, vocab_file: str, do_lower_case: bool,
                          model_max_length: int = 512) -> list[str]:
  """Writes ``vocab.txt``, ``tokenizer_config.json``, ``special_tokens_map.json`` into
  ``folder`` (each atomically); returns the paths written."""
  os.makedirs(folder, exist_ok=True)
  vocab = read_vocab(vocab_file)
  config = tokenizer_config(vocab, do_lower_case, model_max_length)
  vocab_out = os.path.join(folder, VOCAB_FILE)
  if not (os.path.exists(vocab_out) and os.path.samefile(vocab_file, vocab_out)):
    atomic_io.copy_file(vocab_file, vocab_out)
  paths = [vocab_out, os.path.join(folder, "tokenizer_config.json"),
           os.path.join(folder, "special_tokens_map.json")]
  _write(paths[1], config)
  _write(paths[2], dict(SPECIAL_TOKENS))
  return paths
