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
folders) are described by ``infer_hparams_from_checkpoint`` from their tensor shapes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from electra_tf import atomic_io, checkpoints
from electra_tf.config import MODEL_SIZES
from electra_tf.model_sizes import DEBUG_BERT_SIZES, get_bert_config

HPARAMS_FILE = "hparams.json"
VOCAB_FILE = "vocab.txt"
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
# Hidden size -> attention heads, which shapes cannot tell: the official presets (and debug).
PRESET_HEADS = {256: 4, 768: 12, 1024: 16, DEBUG_BERT_SIZES["hidden_size"]:
                DEBUG_BERT_SIZES["num_attention_heads"]}
# Fractions the official configs use, preferred when they give the same size.
_OFFICIAL_FRACTIONS = (1.0, 0.5, 0.25, 0.33333)


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


# ---------------------------------------------------------------- inference from shapes


def fraction(part: int, whole: int) -> float:
  """The generator fraction f with int(round(whole * f)) == part: an official value when one
  fits, else the shortest decimal that does."""
  for f in _OFFICIAL_FRACTIONS:
    if int(round(whole * f)) == part:
      return f
  for digits in range(1, 8):
    f = round(part / whole, digits)
    if f > 0 and int(round(whole * f)) == part:
      return f
  return part / whole


def model_size_for(hidden: int) -> str:
  """The preset with this hidden size, else the nearest smaller one ("small" below 768)."""
  for name, sizes in MODEL_SIZES.items():
    if sizes["hidden_size"] == hidden:
      return name
  return "small" if hidden < 768 else "base" if hidden < 1024 else "large"


GUESSED_KEYS = ("num_attention_heads",)  # inferred from a checkpoint by heads_for, not read


def heads_for(hidden: int) -> int:
  """Attention heads for a hidden size (shapes cannot tell): preset, else hidden // 64."""
  return PRESET_HEADS.get(hidden, max(1, hidden // 64))


def shape_hparams(vocab_size: int, embedding_size: int, hidden: int, layers: int,
                  intermediate: int, heads: int | None = None, hidden_act: str = "gelu",
                  max_position_embeddings: int = 512, type_vocab_size: int = 2,
                  generator: tuple[int, int] | None = None, untied_embeddings: bool = False,
                  discriminator: bool = True, two_tower: bool = False,
                  tied_generator: bool = False) -> dict[str, Any]:
  """Official hparams that rebuild a model of these sizes.

  ``generator``: (hidden h, layers) of a separate generator tower, or None (no generator, or
  with ``tied_generator`` the masked-LM head on the discriminator tower). The sizes go into
  ``model_hparam_overrides`` only where they differ from what ``model_size`` gives.
  """
  size = model_size_for(hidden)
  heads = heads_for(hidden) if heads is None else heads
  preset = MODEL_SIZES[size]
  overrides: dict[str, Any] = {}
  if hidden != preset["hidden_size"]:
    overrides["hidden_size"] = hidden
  if layers != preset["num_hidden_layers"]:
    overrides["num_hidden_layers"] = layers
  if heads != max(1, hidden // 64):
    overrides["num_attention_heads"] = heads
  if intermediate != 4 * hidden:
    overrides["intermediate_size"] = intermediate
  if hidden_act != "gelu":
    overrides["hidden_act"] = hidden_act
  if max_position_embeddings != 512:
    overrides["max_position_embeddings"] = max_position_embeddings
  if type_vocab_size != 2:
    overrides["type_vocab_size"] = type_vocab_size
  out: dict[str, Any] = {"model_size": size, "vocab_size": vocab_size,
                         "embedding_size": embedding_size, "model_hparam_overrides": overrides}
  has_generator = generator is not None or tied_generator
  out["electric_objective"] = bool(two_tower and discriminator)
  out["electra_objective"] = bool(discriminator and not two_tower)
  out["two_tower_generator"] = bool(two_tower)
  out["uniform_generator"] = bool(discriminator and not has_generator)
  out["untied_generator"] = not tied_generator
  out["untied_generator_embeddings"] = bool(untied_embeddings)
  if generator is not None:
    out["generator_hidden_size"] = fraction(generator[0], hidden)
    out["generator_layers"] = fraction(generator[1], layers)
  return out


def _tower_sizes(shapes: Mapping[str, list[int]], scope: str) -> tuple[int, int, int] | None:
  """(hidden, layers, intermediate) of the tower under ``scope``; None if absent."""
  query = shapes.get(f"{scope}/encoder/layer_0/attention/self/query/kernel")
  if query is None:
    return None
  layers = 0
  while f"{scope}/encoder/layer_{layers}/attention/self/query/kernel" in shapes:
    layers += 1
  intermediate = shapes[f"{scope}/encoder/layer_0/intermediate/dense/kernel"][1]
  return query[0], layers, intermediate


def infer_hparams_from_checkpoint(prefix: str) -> tuple[dict[str, Any], str]:
  """(official hparams, one-line summary) from an official TF1 checkpoint's tensor shapes.

  Reads sizes, generator sizing and the tower layout (tied / untied generator embeddings,
  Electric two towers, a masked-LM head on the discriminator, discriminator presence);
  attention heads come from the presets (``heads_for``). Electric and ELECTRA with a
  two-tower generator have the same variables: such a checkpoint is read as Electric.
  """
  import tensorflow as tf

  keys = checkpoints.read_retried(prefix, lambda: tf.train.list_variables(prefix))
  shapes = {name: list(shape) for name, shape in keys}
  if any(name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH") for name in shapes):
    raise ValueError(f"{prefix} is an object-based (TF2) checkpoint; its hparams cannot be "
                     f"inferred: keep {HPARAMS_FILE} beside it or pass --hparams")
  table = shapes.get("electra/embeddings/word_embeddings")
  disc = _tower_sizes(shapes, "electra")
  if table is None or disc is None:
    raise ValueError(f"{prefix} has no electra/embeddings/word_embeddings or electra/encoder: "
                     "not an ELECTRA checkpoint")
  vocab_size, embedding_size = table
  hidden, layers, intermediate = disc
  has_disc = "discriminator_predictions/dense_1/kernel" in shapes
  two_tower = _tower_sizes(shapes, "generator_ltr")
  small = _tower_sizes(shapes, "generator")
  gen = two_tower or small
  untied = "generator/embeddings/word_embeddings" in shapes
  tied_head = gen is None and "generator_predictions/output_bias" in shapes
  values = shape_hparams(
    vocab_size, embedding_size, hidden, layers, intermediate,
    max_position_embeddings=shapes["electra/embeddings/position_embeddings"][0],
    type_vocab_size=shapes["electra/embeddings/token_type_embeddings"][0],
    generator=None if gen is None else gen[:2], untied_embeddings=untied, discriminator=has_disc,
    two_tower=two_tower is not None, tied_generator=tied_head)
  if gen is not None and gen[2] != 4 * gen[0]:
    raise ValueError(f"{prefix}: generator intermediate size {gen[2]} is not 4 x its hidden "
                     f"size {gen[0]}, which the official generator config always has")
  summary = _summary(values, hidden, layers, gen, has_disc, tied_head)
  tasks = sorted({n.split("/")[1] for n in shapes if n.startswith("task_specific/")})
  if tasks:
    summary += f", fine-tuned heads: {', '.join(tasks)}"
  return values, summary


def _summary(values: Mapping[str, Any], hidden: int, layers: int,
             gen: tuple[int, ...] | None, has_disc: bool, tied_head: bool) -> str:
  parts = [f"vocab_size {values['vocab_size']}", f"embedding_size {values['embedding_size']}",
           f"hidden {hidden} x {layers} layers"]
  if gen is not None:
    kind = ("two-tower, Electric" if values["two_tower_generator"] else
            "untied embeddings" if values["untied_generator_embeddings"] else "tied embeddings")
    parts.append(f"generator {values['generator_hidden_size']:g} x {gen[1]} layers ({kind})")
  elif tied_head:
    parts.append("masked-LM head on the discriminator" if has_disc else "masked LM only")
  if not has_disc:
    parts.append("no discriminator head")
  return "inferred from checkpoint: " + ", ".join(parts)


def model_hparams(model_dir_or_checkpoint: str) -> tuple[dict[str, Any] | None, str]:
  """(stored or inferred hparams, their source) for a model directory or checkpoint.

  ``hparams.json`` wins; otherwise an official TF1 checkpoint there is inferred; (None, "")
  when there is neither.
  """
  stored = read_model_hparams(model_dir_or_checkpoint)
  if stored is not None:
    return stored, hparams_source(model_dir_or_checkpoint)
  try:
    prefix = checkpoints.resolve_checkpoint(model_dir_or_checkpoint)
  except FileNotFoundError:
    return None, ""
  if not checkpoints.is_tf1_checkpoint(prefix):
    return None, ""
  values, summary = infer_hparams_from_checkpoint(prefix)
  return values, f"checkpoint {prefix} ({summary})"


def hparams_for_run(user: Mapping[str, Any], places: list[str | None],
                    target: str = "pretraining") -> tuple[dict[str, Any], str]:
  """(``user`` merged with the first place's stored or inferred hparams, that source).

  ``places``: model directories / checkpoints in order of precedence (e.g. the run's
  ``model_dir``, then ``init_checkpoint``); missing or None places are skipped. Returns
  (``dict(user)``, "") when none describes a model.
  """
  for place in places:
    if not place or not (os.path.exists(place) or os.path.exists(place + ".index")):
      continue
    stored, source = model_hparams(place)
    if stored is not None:
      inferred = read_model_hparams(place) is None
      return merge_hparams(stored, user, source=source, target=target,
                           inferred=inferred), source
  return dict(user), ""
