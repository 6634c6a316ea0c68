"""keras-hub preset export: the discriminator / fine-tuning encoder as an ``ElectraBackbone``.

``export_preset`` writes ``<out>/keras_hub/`` with keras-hub's own savers
(``Backbone.save_to_preset``, ``Tokenizer.save_to_preset``): ``config.json``,
``model.weights.h5``, ``tokenizer.json``, ``assets/tokenizer/vocabulary.txt`` and
``metadata.json``, which load with no network::

  backbone = keras_hub.models.ElectraBackbone.from_preset(folder)
  tokenizer = keras_hub.models.ElectraTokenizer.from_preset(folder)

The weights are the ``electra/*`` tower of a TF1-named checkpoint (the ``tf1/`` that convert
writes), any shape (embedding size != hidden size gives keras-hub's ``embeddings_projection``).
Task heads and the pre-training heads are not part of a keras-hub backbone and are left out.

Two differences from our encoder, both in keras-hub's fixed architecture:

- its feed-forward uses the tanh approximation of GELU where ELECTRA uses the exact erf form
  (keras-hub 0.32's ``ElectraBackbone`` hard-codes it and takes no activation argument), so
  ``sequence_output`` differs slightly: ``measure_difference`` measures it on the exported
  model at export time (convert prints it), and ``note_differences`` writes both differences,
  with the measured one, into the preset's ``metadata.json`` under ``"electra_tf"``, so the
  preset carries them wherever it is copied;
- it has a ``pooled_dense`` (tanh) layer that ELECTRA lacks: it is written as the identity, so
  ``pooled_output`` = tanh(the [CLS] vector); ``sequence_output[:, 0]`` is ELECTRA's [CLS]
  vector.

keras-hub runs on Keras 3, beside the tf_keras this project trains with; the savers run in this
process (Keras 3 is a separate package from ``tf.keras``), loading is best done in a process
without ``TF_USE_LEGACY_KERAS``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from electra_tf import atomic_io
from electra_tf.finetuning import task_base

KERAS_HUB_DIR = "keras_hub"
MISSING = ("keras-hub is not installed: pip install keras-hub (requirements.txt pins it) "
           "to write the keras_hub/ preset")

METADATA_FILE = "metadata.json"  # keras-hub's, written by its savers
NOTE_KEY = "electra_tf"  # our field in it
GELU_NOTE = ("keras-hub's ElectraBackbone computes GELU by its tanh approximation; ELECTRA, "
             "which trained these weights, computes it exactly (erf): sequence_output differs "
             "slightly from the original model's")
POOLED_NOTE = ("pooled_dense is the identity: pooled_output = tanh(the [CLS] vector); "
               "ELECTRA has no pooler, sequence_output[:, 0] is its [CLS] vector")
_SCOPE = "electra"
# our TF1 layer scope -> keras-hub sublayer of transformer_layer_<i>
_LAYER_PARTS = {
    "attention/output/LayerNorm": "self_attention_layer_norm",
    "intermediate/dense": "feedforward_intermediate_dense",
    "output/dense": "feedforward_output_dense",
    "output/LayerNorm": "feedforward_layer_norm",
}
_ATTENTION = ("query", "key", "value")


def backbone_config(variables: Mapping[str, np.ndarray], num_heads: int,
                    hidden_act: str = "gelu") -> dict[str, Any]:
  """``ElectraBackbone`` arguments from the ``electra/*`` tensor shapes and the head count."""
  if hidden_act.lower() != "gelu":
    raise ValueError(f"hidden_act={hidden_act!r}: keras-hub's ElectraBackbone always uses "
                     "gelu, so this model cannot be a keras-hub preset")
  vocab, embedding = variables[f"{_SCOPE}/embeddings/word_embeddings"].shape
  hidden = variables[f"{_SCOPE}/encoder/layer_0/attention/self/query/kernel"].shape[0]
  layers = 0
  while f"{_SCOPE}/encoder/layer_{layers}/attention/self/query/kernel" in variables:
    layers += 1
  if hidden % num_heads:
    raise ValueError(f"hidden size {hidden} is not divisible by {num_heads} attention heads")
  return {
      "vocab_size": int(vocab), "num_layers": layers, "num_heads": int(num_heads),
      "hidden_dim": int(hidden), "embedding_dim": int(embedding),
      "intermediate_dim": int(
          variables[f"{_SCOPE}/encoder/layer_0/intermediate/dense/kernel"].shape[1]),
      "dropout": 0.1,  # keras-hub's default, only active when training
      "max_sequence_length": int(variables[f"{_SCOPE}/embeddings/position_embeddings"].shape[0]),
      "num_segments": int(variables[f"{_SCOPE}/embeddings/token_type_embeddings"].shape[0]),
  }


def backbone_weights(variables: Mapping[str, np.ndarray],
                     config: Mapping[str, Any]) -> dict[str, np.ndarray]:
  """keras-hub weight path (``transformer_layer_0/self_attention_layer/query/kernel``...) ->
  array, reshaped to keras-hub's per-head ``EinsumDense`` layouts."""
  h, n = config["hidden_dim"], config["num_heads"]
  d = h // n
  emb = f"{_SCOPE}/embeddings"
  out = {
      "token_embedding/embeddings": variables[f"{emb}/word_embeddings"],
      "position_embedding/embeddings": variables[f"{emb}/position_embeddings"],
      "segment_embedding/embeddings": variables[f"{emb}/token_type_embeddings"],
      "embeddings_layer_norm/gamma": variables[f"{emb}/LayerNorm/gamma"],
      "embeddings_layer_norm/beta": variables[f"{emb}/LayerNorm/beta"],
      # ELECTRA has no pooler: identity, so pooled_output = tanh([CLS] vector)
      "pooled_dense/kernel": np.eye(h, dtype=np.float32),
      "pooled_dense/bias": np.zeros([h], np.float32),
  }
  if config["embedding_dim"] != h:
    out["embeddings_projection/kernel"] = variables[f"{_SCOPE}/embeddings_project/kernel"]
    out["embeddings_projection/bias"] = variables[f"{_SCOPE}/embeddings_project/bias"]
  for i in range(config["num_layers"]):
    ours, theirs = f"{_SCOPE}/encoder/layer_{i}", f"transformer_layer_{i}"
    attention = f"{theirs}/self_attention_layer"
    for name in _ATTENTION:  # [H, H] -> [H, heads, head_dim]
      source = f"{ours}/attention/self/{name}"
      out[f"{attention}/{name}/kernel"] = variables[f"{source}/kernel"].reshape(h, n, d)
      out[f"{attention}/{name}/bias"] = variables[f"{source}/bias"].reshape(n, d)
    out[f"{attention}/attention_output/kernel"] = (
        variables[f"{ours}/attention/output/dense/kernel"].reshape(n, d, h))
    out[f"{attention}/attention_output/bias"] = variables[f"{ours}/attention/output/dense/bias"]
    for part, layer in _LAYER_PARTS.items():
      kinds = ("gamma", "beta") if part.endswith("LayerNorm") else ("kernel", "bias")
      for kind in kinds:
        out[f"{theirs}/{layer}/{kind}"] = variables[f"{ours}/{part}/{kind}"]
  return out


def read_tf1_variables(prefix: str) -> dict[str, np.ndarray]:
  """The ``electra/*`` tensors of a TF1-named checkpoint."""
  import tensorflow as tf

  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.startswith(_SCOPE + "/") and "adam_" not in name and "lamb_" not in name}


def export_preset(tf1_prefix: str, out_dir: str, num_heads: int, vocab_file: str | None,
                  do_lower_case: bool = True, hidden_act: str = "gelu") -> str:
  """Writes the keras-hub preset folder ``out_dir`` from the ``electra/*`` tower of
  ``tf1_prefix``; returns ``out_dir``. Needs keras-hub (ImportError with one line if missing)."""
  try:
    import keras_hub
  except ImportError as e:
    raise ImportError(MISSING) from e

  variables = read_tf1_variables(tf1_prefix)
  config = backbone_config(variables, num_heads, hidden_act)
  weights = backbone_weights(variables, config)
  backbone = keras_hub.models.ElectraBackbone(**config)
  by_path = {w.path: w for w in backbone.weights}
  missing = sorted(set(by_path) - set(weights))
  extra = sorted(set(weights) - set(by_path))
  if missing or extra:  # keras-hub renamed a layer: fail rather than write random weights
    raise ValueError(f"keras-hub ElectraBackbone weights do not match the export table "
                     f"(unfilled: {missing[:3]}, unknown: {extra[:3]})")
  for path, value in weights.items():
    if tuple(by_path[path].shape) != tuple(value.shape):
      raise ValueError(f"keras-hub {path} has shape {list(by_path[path].shape)}, ours "
                       f"{list(value.shape)}")
    by_path[path].assign(np.asarray(value, np.float32))
  os.makedirs(out_dir, exist_ok=True)
  backbone.save_to_preset(out_dir)
  if vocab_file:
    # FullTokenizer strips accents when it lower-cases; keras-hub's default does not.
    tokenizer = keras_hub.models.ElectraTokenizer(vocabulary=vocab_file,
                                                  lowercase=bool(do_lower_case),
                                                  strip_accents=bool(do_lower_case))
    tokenizer.save_to_preset(out_dir)
  note_differences(out_dir)
  return out_dir


def note_differences(preset_dir: str, measured: Mapping[str, Any] | None = None) -> None:
  """Writes ``GELU_NOTE`` and ``POOLED_NOTE`` into ``<preset_dir>/metadata.json`` (its
  ``"electra_tf"`` field; keras-hub's own fields are kept) and, when given, the measured
  difference (``{"max": max |difference|, "inputs": what it was measured on}``)."""
  path = os.path.join(preset_dir, METADATA_FILE)
  try:
    with open(path, encoding="utf-8") as f:
      metadata = json.load(f)
  except FileNotFoundError:
    metadata = {}
  except ValueError as e:
    raise ValueError(f"{path}: not JSON ({e})") from None
  gelu: dict[str, Any] = {"keras_hub": "tanh approximation", "electra": "exact (erf)",
                          "note": GELU_NOTE}
  if measured is not None:
    gelu["sequence_output_max_abs_difference"] = float(measured["max"])
    gelu["measured_on"] = str(measured["inputs"])
  metadata[NOTE_KEY] = {"gelu": gelu, "pooled_output": POOLED_NOTE}
  atomic_io.write_json(path, metadata, indent=4)


def sample_inputs(tasks: list, vocab_size: int, max_length: int, rows: int = 32
                  ) -> tuple[dict[str, np.ndarray], str]:
  """(int32 [B, T] encoder inputs, what they are): the first dev rows of the first task that
  has some, else seeded random token rows (a pre-training model, or no dev rows)."""
  for task in tasks:
    try:
      features = task_base.first_featurized(task, "dev", rows)
    except (OSError, ValueError):
      continue
    inputs = {k: np.asarray([f[k] for f in features], np.int32)
              for k in ("input_ids", "input_mask", "segment_ids")}
    return inputs, f"{len(features)} {task.name} dev rows"
  rng = np.random.default_rng(0)
  length = min(128, max_length)
  ids = rng.integers(5, vocab_size, [8, length]).astype(np.int32)
  ones = np.ones_like(ids)
  return ({"input_ids": ids, "input_mask": ones, "segment_ids": np.zeros_like(ids)},
          f"8 rows of {length} random tokens")


def measure_difference(preset_dir: str, encoder_dir: str, inputs: Mapping[str, np.ndarray]
                       ) -> float:
  """max |``sequence_output`` of the preset (keras-hub) - our ``encoder/`` SavedModel's| over
  the real tokens of ``inputs`` (int32 [B, T])."""
  import keras_hub
  import tensorflow as tf

  backbone = keras_hub.models.ElectraBackbone.from_preset(preset_dir)
  theirs = backbone.predict({"token_ids": inputs["input_ids"],
                             "segment_ids": inputs["segment_ids"],
                             "padding_mask": inputs["input_mask"]}, verbose=0)["sequence_output"]
  encoder = tf.saved_model.load(encoder_dir).signatures["serving_default"]
  ours = encoder(input_word_ids=tf.constant(inputs["input_ids"]),
                 input_mask=tf.constant(inputs["input_mask"]),
                 input_type_ids=tf.constant(inputs["segment_ids"]))["sequence_output"].numpy()
  mask = np.asarray(inputs["input_mask"]).astype(bool)
  return float(np.abs(np.asarray(theirs) - ours)[mask].max())
