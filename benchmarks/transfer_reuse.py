"""What a rerun of benchmarks/transfer.py may reuse: each artefact of ``--out_dir`` keyed by the
settings that made it, and one line refusing a folder that other settings made."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from typing import Any

# Every artefact of --out_dir is keyed by the settings that made it: the corpus (and the
# vocabulary and TFRecords made from it) in corpus_key.json, each pre-trained model in its
# folder's transfer_run.json, each fine-tuning run in its transfer_done.json. A rerun reuses
# an artefact whose key matches, refuses one line's worth when a corpus or a model was made
# with other settings, and runs a fine-tuning run again when any of its inputs changed.
CORPUS_FLAGS = ("sentences_per_doc", "max_sentences", "no_wikitext", "vocab_size",
                "vocab_min_count", "seq_len")
NOT_MODEL_SETTINGS = ("iterations_per_loop", "num_eval_steps")  # logging and evaluation only


def file_sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def read_json(path: str) -> Any:
  """The JSON at ``path``; None when it is missing or does not parse."""
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def write_json(path: str, obj: Any, **dumps_kwargs: Any) -> None:
  from electra_tf import atomic_io

  os.makedirs(os.path.dirname(path), exist_ok=True)
  atomic_io.write_json(path, obj, **dumps_kwargs)


def corpus_key(args: argparse.Namespace, sst_dir: str) -> dict[str, Any]:
  """What the corpus, vocabulary and TFRecords are made from: their flags and the source
  files' hashes."""
  sources = [os.path.join(sst_dir, "train.tsv")]
  if not args.no_wikitext:
    sources.append(os.path.join(args.data_dir, "wikitext2", "wiki.test.raw"))
  return json.loads(json.dumps({**{k: getattr(args, k) for k in CORPUS_FLAGS}, "sources": {
      os.path.basename(path): file_sha256(path) for path in sources}}))


def refuse_other(path: str, stored: Any, key: dict[str, Any], made: str) -> None:
  """Exits with one line when ``stored`` (the key ``path`` was made with) is not ``key``."""
  if stored == key:
    return
  if isinstance(stored, dict):
    from electra_tf import console, early_interrupt

    early_interrupt.install()
    console.quiet_logs([])  # before TensorFlow loads: no C++ / absl log lines on this console
    console.use_tf_keras()
    from electra_tf.finetuning.features import key_changes

    why = ", ".join(c.removeprefix("hparams.") for c in key_changes(stored, key)[:3])
  else:
    why = "no settings recorded: made by an older transfer.py"
  sys.exit(f"transfer: {path} was {made} with other settings ({why}); use another --out_dir "
           "(or move that folder away)")


def claim_out_dir(args: argparse.Namespace, out: str, sst_dir: str) -> dict[str, Any]:
  """The corpus key; refuses an --out_dir whose corpus (or models) other settings made."""
  key, path = corpus_key(args, sst_dir), os.path.join(out, "corpus_key.json")
  stored = read_json(path)
  if stored is None and not os.path.isdir(os.path.join(out, "models")):
    write_json(path, key, indent=1)
    return key
  refuse_other(out, stored, key, "prepared")
  return key


def model_key(corpus: dict[str, Any], hparams: dict[str, Any]) -> dict[str, Any]:
  return json.loads(json.dumps({"corpus": corpus, "hparams": {
      k: v for k, v in hparams.items() if k not in NOT_MODEL_SETTINGS}}))
