"""Self-describing model directories: ``hparams.json`` + ``vocab.txt`` beside the checkpoints.

A model directory records the hparams that fix the model's shape, so a later run (resume,
fine-tune, convert, export) rebuilds the same model without the user repeating them.

SHAPE fields (``SHAPE_FIELDS``) must match the checkpoint: the stored value is used unless the
user gives one, and a user value that contradicts it is an error. They are ``model_size``,
``vocab_size``, ``embedding_size``, the size keys of ``model_hparam_overrides``
(``OVERRIDE_SHAPE_KEYS``: hidden / layers / heads / intermediate, activation, position and
token-type tables), the generator sizing (``generator_hidden_size``, ``generator_layers``), the
objective / tower flags (``electra_objective``, ``electric_objective``, ``two_tower_generator``,
``untied_generator``, ``untied_generator_embeddings``, ``uniform_generator``) and
``do_lower_case`` (it must match the vocabulary). KEPT fields (``KEPT_FIELDS``: ``masking``,
``span_mean_length``, ``span_max_length``) are merged the same way: a run keeps the masking it
began with. Everything else is TRAINING (free): learning rate, steps, batch sizes,
``max_seq_length``, dropout, ``mask_prob``, ``debug`` (refused only when it would shrink a
stored shape), paths. ``hparams.json`` stores those too, for the record, but
they are never merged.

Checkpoints without ``hparams.json`` (the released ELECTRA models, the official reference
folders) are described from their tensor shapes by ``checkpoint_hparams``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from electra_tf import atomic_io
from electra_tf.config import MODEL_SIZES
from electra_tf.model_files import VOCAB_FILE
from electra_tf.model_sizes import DEBUG_BERT_SIZES, get_bert_config

HPARAMS_FILE = "hparams.json"
SHAPE_FIELDS = (
  "model_size", "vocab_size", "embedding_size", "model_hparam_overrides",
  "generator_hidden_size", "generator_layers", "electra_objective", "electric_objective",
  "two_tower_generator", "untied_generator", "untied_generator_embeddings", "uniform_generator",
  "do_lower_case",
)
# Not shapes, but a run keeps them: resuming with another masking is refused like a shape.
KEPT_FIELDS = ("masking", "span_mean_length", "span_max_length")
OVERRIDE_SHAPE_KEYS = (
  "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
  "max_position_embeddings", "type_vocab_size",
)
SIZE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
# Not hparams of a model directory: locations, the run name, derived values.
_NOT_STORED = ("model_name", "pretrain_tfrecords", "vocab_file", "model_dir", "results_txt",
               "results_pkl", "init_checkpoint", "data_dir", "preprocessed_data_dir",
               "max_predictions_per_seq", "raw_data_dir", "qa_eval_file", "qa_preds_file",
               "qa_na_file", "test_predictions")
# Inferred from a checkpoint by checkpoint_hparams.heads_for, not read: a guess a user may correct.
GUESSED_KEYS = ("num_attention_heads",)


def stored_hparams(config: Any) -> dict[str, Any]:
  """What ``hparams.json`` holds for a ``PretrainingConfig`` / ``FinetuningConfig``.

  Every settable hparam (no paths, no derived values), with the resolved shape written out:
  ``vocab_size``, ``embedding_size`` (an int, never None) and the four sizes in
  ``model_hparam_overrides``, so the file rebuilds the exact shape on its own.
  """
  bert = get_bert_config(config)
  values = {k: v for k, v in config.to_dict().items() if k not in _NOT_STORED}
  overrides = {k: v for k, v in dict(config.model_hparam_overrides).items() if k != "vocab_size"}
  overrides.update({k: getattr(bert, k) for k in SIZE_KEYS})
  values["model_hparam_overrides"] = overrides
  values["vocab_size"] = bert.vocab_size
  values["embedding_size"] = (bert.hidden_size if config.embedding_size is None
                              else int(config.embedding_size))
  return values


def write_model_files(model_dir: str, config: Any, vocab_file: str | None) -> str:
  """Writes ``hparams.json`` and a copy of ``vocab.txt`` into ``model_dir``, each atomically.

  Returns the ``hparams.json`` path. A vocabulary with more lines than ``vocab_size`` is an
  error (its ids would not fit the embedding table).
  """
  os.makedirs(model_dir, exist_ok=True)
  values = stored_hparams(config)
  if vocab_file:
    with open(vocab_file, encoding="utf-8") as f:
      text = f.read()
    n = len(text.splitlines())
    if n > values["vocab_size"]:
      raise ValueError(f"{vocab_file} has {n} tokens but vocab_size is {values['vocab_size']}")
    target = os.path.join(model_dir, VOCAB_FILE)
    if not (os.path.exists(target) and os.path.samefile(vocab_file, target)):
      atomic_io.copy_file(vocab_file, target)
  path = os.path.join(model_dir, HPARAMS_FILE)
  atomic_io.write_json(path, values, indent=2, sort_keys=True)
  return path


def model_dir_of(path: str) -> str:
  """A model directory from itself or from a checkpoint prefix / file inside it."""
  if os.path.isdir(path):
    return path
  return os.path.dirname(re.sub(r"\.(index|data-\d+-of-\d+)$", "", path)) or "."


def recorded_values(config_class: type, stored: Mapping[str, Any]) -> dict[str, Any]:
  """The values of a stored ``hparams.json`` that ``config_class`` takes: what rebuilds the
  model and keeps the run that trained it (its sequence length, learning rate, ...)."""
  names = {f.name for f in dataclasses.fields(config_class)}
  return {k: v for k, v in stored.items() if k in names}


def hparams_source(path: str) -> str:
  """How errors name the stored hparams: ``hparams.json in models/demo``."""
  return f"{HPARAMS_FILE} in {model_dir_of(path)}"


def read_model_hparams(model_dir_or_checkpoint: str) -> dict[str, Any] | None:
  """The ``hparams.json`` of a model directory (given itself or a checkpoint in it); None if
  there is none. An unreadable or non-object file is a one-line ValueError."""
  path = os.path.join(model_dir_of(model_dir_or_checkpoint), HPARAMS_FILE)
  if not os.path.exists(path):
    return None
  try:
    with open(path, encoding="utf-8") as f:
      values = json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"cannot read {path}: {e}") from None
  if not isinstance(values, dict):
    raise ValueError(f"{path} must hold a JSON object, got {type(values).__name__}")
  return values


def cut_short(path: str) -> int | None:
  """The size of a JSON file a power cut left empty or cut short (only whitespace or NULs, or
  JSON that ends before its value does), else None (it reads, is missing, or is broken some
  other way, e.g. a typo: that stays an error)."""
  try:
    with open(path, "rb") as f:
      raw = f.read()
  except OSError:
    return None
  text = raw.replace(b"\0", b"").decode("utf-8", "replace").strip()
  try:
    json.loads(text)
  except json.JSONDecodeError as e:
    return len(raw) if e.pos >= len(text) else None
  return len(raw) if not text else None


def _resolved_sizes(values: Mapping[str, Any]) -> dict[str, Any]:
  """The four transformer sizes ``get_bert_config`` derives (before ``debug``)."""
  overrides = values.get("model_hparam_overrides") or {}
  args = {**MODEL_SIZES.get(values["model_size"], MODEL_SIZES["small"]), **overrides}
  args.setdefault("num_attention_heads", max(1, args["hidden_size"] // 64))
  args.setdefault("intermediate_size", 4 * args["hidden_size"])
  return args


def _effective_embedding(values: Mapping[str, Any], hidden: Any) -> Any:
  e = values.get("embedding_size")
  return hidden if e is None else e


def merge_hparams(stored: Mapping[str, Any] | None, user: Mapping[str, Any],
                  source: str = HPARAMS_FILE, target: str = "pretraining",
                  user_source: str = "--hparams", inferred: bool = False) -> dict[str, Any]:
  """``user`` hparams completed with the stored SHAPE fields; contradictions are errors.

  Args:
    stored: ``read_model_hparams`` output (or inferred hparams); None returns ``user``.
    user: the run's hparams (``load_hparams``), official names.
    source: names the stored values in errors (``hparams_source(model_dir)``).
    target: "pretraining" or "finetuning": fields the target config lacks (generator and
      objective flags for fine-tuning) are left out.
    inferred: ``stored`` was inferred from tensor shapes; its guesses (``GUESSED_KEYS``: the
      attention heads, which no shape records) give way to the user's values.
  Raises:
    ValueError: ``<source> says <field> <stored> but --hparams gives <user>``.
  """
  merged = dict(user)
  if not stored:
    return merged
  fields = SHAPE_FIELDS + KEPT_FIELDS if target == "pretraining" else (
    "model_size", "vocab_size", "embedding_size", "model_hparam_overrides", "do_lower_case")

  def clash(field: str, want: Any, got: Any) -> ValueError:
    return ValueError(f"{source} says {field} {json.dumps(want)} but {user_source} gives "
                      f"{json.dumps(got)}")

  s_over = dict(stored.get("model_hparam_overrides") or {})
  u_over = dict(user.get("model_hparam_overrides") or {})
  for key in OVERRIDE_SHAPE_KEYS:
    if inferred and key in GUESSED_KEYS:
      continue
    if key in s_over and key in u_over and s_over[key] != u_over[key]:
      raise clash(f"model_hparam_overrides.{key}", s_over[key], u_over[key])
  if "vocab_size" in u_over and "vocab_size" in stored and u_over["vocab_size"] != \
      stored["vocab_size"]:
    raise clash("vocab_size", stored["vocab_size"], u_over["vocab_size"])
  for field in fields:
    if field == "model_hparam_overrides" or field not in stored:
      continue
    if field not in user:
      merged[field] = stored[field]
    elif field == "embedding_size":
      hidden = {**s_over, **u_over}.get("hidden_size")
      want, got = _effective_embedding(stored, hidden), _effective_embedding(user, hidden)
      if want != got:
        raise clash(field, stored[field], user[field])
    elif user[field] != stored[field]:
      raise clash(field, stored[field], user[field])
  if "model_hparam_overrides" in stored:
    merged["model_hparam_overrides"] = {**s_over, **u_over}
  if "model_size" in stored:  # sizes the presets imply, not only the keys both name
    want, got = _resolved_sizes(stored), _resolved_sizes(merged)
    for key in SIZE_KEYS:
      if want[key] != got[key] and not (inferred and key in GUESSED_KEYS):
        raise clash(key, want[key], got[key])
  over = merged.get("model_hparam_overrides") or {}
  if user.get("debug") and any(over.get(k, v) != v for k, v in DEBUG_BERT_SIZES.items()):
    size = {k: over.get(k) for k in DEBUG_BERT_SIZES}
    raise ValueError(f"{source} gives sizes {json.dumps(size)} but {user_source} sets debug, "
                     f"which shrinks the model to {json.dumps(DEBUG_BERT_SIZES)}")
  return merged
