"""Model FLOPs of BERT / ELECTRA training, counted as the official ``flops_computation.py`` does.

Used for model-FLOPs-utilisation (MFU) logging, so the numbers are comparable with the ELECTRA
paper's compute column. The official conventions are kept on purpose:

- a matrix multiply of ``[m, k] x [k, n]`` costs ``2 m k n``; every other op (exp, add, ...) 1;
- the backward pass costs the same as the forward pass (train = 2 x forward);
- embedding lookups are dense one-hot matmuls unless ``sparse_embed_lookup``;
- the MLM softmax is paid only for ``output_frac`` of the positions (0.15625 = 20 / 128, the
  official default, i.e. ``max_predictions_per_seq / max_seq_length``);
- ``heads`` defaults to ``max(hidden // 64, 1)`` and the feed-forward size to ``4 * hidden``.

The official block count also keeps its quirk that the attention-output LayerNorm costs
``5`` FLOPs per token instead of ``5 * hidden`` (negligible, but kept so totals are equal).
All functions take plain numbers and return Python floats, except ``train_flops_per_example``,
which reads the tower sizes of a built pre-training model (what the training logs use).
"""

from __future__ import annotations

from typing import Any, NamedTuple

DROPOUT_FLOPS = 4  # random number, >=, multiply by mask, multiply by 1 / (1 - rate)
LAYER_NORM_FLOPS = 5  # mean (sum), variance (square and sum), bias (add), scale (multiply)
ACTIVATION_FLOPS = 8  # tanh-approximated GELU
SOFTMAX_FLOPS = 5  # max/subtract, exp, sum, divide

OFFICIAL_OUTPUT_FRAC = 0.15625


def _check_positive(**values: float) -> None:
  for name, value in values.items():
    if value is None or value <= 0:
      raise ValueError(f"{name} must be a positive number, got {value!r}")


def block_flops(hidden_size: int, seq_length: int, intermediate_size: int | None = None,
                num_heads: int | None = None, head_size: int | None = None,
                decoder: bool = False) -> float:
  """Forward FLOPs of one transformer layer over a ``[seq_length, hidden]`` sequence.

  ``head_size`` (with ``num_heads``) sets the query/key/value width ``num_heads * head_size``;
  without it that width is ``hidden_size``. ``decoder`` doubles the attention (cross-attention).
  """
  _check_positive(hidden_size=hidden_size, seq_length=seq_length)
  h, s = hidden_size, seq_length
  i = 4 * h if intermediate_size is None else intermediate_size
  if head_size is not None and num_heads is None:
    raise ValueError("head_size needs num_heads")
  kqv = h if head_size is None else head_size * num_heads
  heads = max(h // 64, 1) if num_heads is None else num_heads
  a = 2 if decoder else 1
  attention = (
      3 * 2 * h * kqv + 3 * kqv  # query/key/value projections and biases
      + 2 * kqv * s  # scores q.k
      + (SOFTMAX_FLOPS + DROPOUT_FLOPS + 1) * s * heads  # softmax, dropout, 1/sqrt(d) scale
      + 2 * h * s  # probabilities x values
      + 2 * h * h + h + DROPOUT_FLOPS * h + h  # output dense, bias, dropout, residual
      + LAYER_NORM_FLOPS  # official count: not multiplied by hidden_size
  ) * a
  feed_forward = (
      2 * h * i + ACTIVATION_FLOPS * i + i  # intermediate dense, GELU, bias
      + 2 * h * i + h + DROPOUT_FLOPS * h + h  # output dense, bias, dropout, residual
      + LAYER_NORM_FLOPS * h
  )
  return float((attention + feed_forward) * s)


def _embedding_sizes(hidden_size: int, seq_length: int, vocab_size: int,
                     embedding_size: int | None) -> tuple[int, int, int, int]:
  """(h, s, v, e) checked positive; ``e`` defaults to the hidden size."""
  _check_positive(hidden_size=hidden_size, seq_length=seq_length, vocab_size=vocab_size)
  return (hidden_size, seq_length, vocab_size,
          hidden_size if embedding_size is None else embedding_size)


def input_embedding_flops(hidden_size: int, seq_length: int, vocab_size: int = 30522,
                          embedding_size: int | None = None,
                          sparse_embed_lookup: bool = False) -> float:
  """Forward FLOPs of the embeddings (+ projection to ``hidden_size`` when sizes differ)."""
  h, s, v, e = _embedding_sizes(hidden_size, seq_length, vocab_size, embedding_size)
  per_token = 0 if sparse_embed_lookup else 2 * e * v  # one-hot word lookup
  # token-type + position lookups (official: 2 e (s + 2)), their add, LayerNorm, dropout
  per_token += 2 * e * (s + 2) + 2 * e + LAYER_NORM_FLOPS * e + DROPOUT_FLOPS * e
  if e != h:
    per_token += 2 * h * e + h  # embeddings_project kernel and bias
  return float(per_token * s)


def mlm_output_flops(hidden_size: int, seq_length: int, vocab_size: int = 30522,
                     embedding_size: int | None = None,
                     output_frac: float = OFFICIAL_OUTPUT_FRAC) -> float:
  """Forward FLOPs of the masked-LM head (dense + GELU + LayerNorm + tied softmax)."""
  h, s, v, e = _embedding_sizes(hidden_size, seq_length, vocab_size, embedding_size)
  per_token = (2 * e * v  # logits against the (tied) embedding table
               + 2 * h * e + e  # dense kernel and bias
               + ACTIVATION_FLOPS * e + LAYER_NORM_FLOPS * e
               + SOFTMAX_FLOPS * v + 2 * v)  # softmax and target-word pick
  return float(output_frac * per_token * s)


def binary_classification_flops(hidden_size: int, seq_length: int) -> float:
  """Forward FLOPs of the per-token discriminator head (dense + GELU + 1 logit)."""
  _check_positive(hidden_size=hidden_size, seq_length=seq_length)
  h = hidden_size
  return float((2 * h * h + h + ACTIVATION_FLOPS * h + 2 * h) * seq_length)


def transformer_train_flops_per_example(
    hidden_size: int, num_layers: int, seq_length: int = 512, vocab_size: int = 30522,
    embedding_size: int | None = None, intermediate_size: int | None = None,
    num_heads: int | None = None, head_size: int | None = None,
    output_frac: float = OFFICIAL_OUTPUT_FRAC, sparse_embed_lookup: bool = False,
    decoder: bool = False, discriminator: bool = False) -> float:
  """Forward + backward FLOPs of one sequence through one tower.

  ``discriminator=True`` ends in the binary token-classification head (ELECTRA's
  discriminator), else in the MLM softmax head (BERT / the ELECTRA generator).
  """
  _check_positive(num_layers=num_layers)
  forward = num_layers * block_flops(hidden_size, seq_length, intermediate_size, num_heads,
                                     head_size, decoder)
  forward += input_embedding_flops(hidden_size, seq_length, vocab_size, embedding_size,
                                   sparse_embed_lookup)
  if discriminator:
    forward += binary_classification_flops(hidden_size, seq_length)
  else:
    forward += mlm_output_flops(hidden_size, seq_length, vocab_size, embedding_size,
                                output_frac)
  return 2.0 * forward


def inference_flops_per_example(
    hidden_size: int, num_layers: int, seq_length: int = 512, vocab_size: int = 30522,
    embedding_size: int | None = None, intermediate_size: int | None = None,
    num_heads: int | None = None, head_size: int | None = None,
    sparse_embed_lookup: bool = False) -> float:
  """Forward FLOPs of one sequence through an encoder with a classification head."""
  _check_positive(num_layers=num_layers)
  return (num_layers * block_flops(hidden_size, seq_length, intermediate_size, num_heads,
                                   head_size)
          + input_embedding_flops(hidden_size, seq_length, vocab_size, embedding_size,
                                  sparse_embed_lookup)
          + binary_classification_flops(hidden_size, seq_length))


class TowerShape(NamedTuple):
  """Sizes of one transformer tower; None means the official default (see module docstring)."""

  hidden_size: int
  num_layers: int
  embedding_size: int | None = None  # width of the word-embedding table it reads
  intermediate_size: int | None = None
  num_heads: int | None = None

  @classmethod
  def of(cls, tower: Any) -> TowerShape:
    """The shape of a built ``Transformer`` (its ``config`` and ``embedding_size``)."""
    c = tower.config
    return cls(c.hidden_size, c.num_hidden_layers, tower.embedding_size, c.intermediate_size,
               c.num_attention_heads)


def pretraining_flops_per_example(
    seq_length: int, vocab_size: int, discriminator: TowerShape | None,
    generator: TowerShape | None, two_tower_generator: bool = False,
    output_frac: float = OFFICIAL_OUTPUT_FRAC, sparse_embed_lookup: bool = False) -> float:
  """Train FLOPs of one pre-training sequence: discriminator + generator.

  ``discriminator``: the tower under the binary head (None: masked LM only). ``generator``:
  the tower under the MLM head, its softmax over ``output_frac`` of the positions (None: the
  uniform generator); with ``two_tower_generator`` it is one of Electric's two towers, whose
  cloze head reads both (width ``2 * hidden``) at every position.
  """
  total = 0.0
  if discriminator is not None:
    d = discriminator
    total += transformer_train_flops_per_example(
        d.hidden_size, d.num_layers, seq_length, vocab_size, d.embedding_size,
        d.intermediate_size, d.num_heads, output_frac=output_frac,
        sparse_embed_lookup=sparse_embed_lookup, discriminator=True)
  if generator is None:
    return total
  g = generator
  if two_tower_generator:
    tower = (g.num_layers * block_flops(g.hidden_size, seq_length, g.intermediate_size,
                                        g.num_heads)
             + input_embedding_flops(g.hidden_size, seq_length, vocab_size, g.embedding_size,
                                     sparse_embed_lookup))
    head = mlm_output_flops(2 * g.hidden_size, seq_length, vocab_size, g.embedding_size,
                            output_frac=1.0)
    return total + 2.0 * (2 * tower + head)
  return total + transformer_train_flops_per_example(
      g.hidden_size, g.num_layers, seq_length, vocab_size, g.embedding_size,
      g.intermediate_size, g.num_heads, output_frac=output_frac,
      sparse_embed_lookup=sparse_embed_lookup)


def train_flops_per_example(model: Any, seq_length: int) -> float:
  """Train FLOPs of one sequence through a built ``PretrainingModel`` (the MFU numerator).

  Counted as ``pretraining_flops_per_example`` with the model's towers, the MLM softmax over
  ``max_predictions_per_seq / seq_length`` of the positions (the gathered slots), and
  embedding lookups as gathers (sparse), which is what the model runs: the official one-hot
  count would credit the step with vocabulary-sized matmuls it does not do.
  """
  # local: the FLOPs arithmetic above stays importable without TensorFlow
  from electra_tf.pretraining.objective import DISCRIMINATOR_TOWER, OWN_TOWER, TWO_TOWERS

  objective = model.objective
  generator = {OWN_TOWER: model.generator, TWO_TOWERS: model.generator_ltr,
               DISCRIMINATOR_TOWER: model.discriminator}.get(objective.generator)
  return pretraining_flops_per_example(
      seq_length, objective.vocab_size,
      TowerShape.of(model.discriminator) if objective.has_discriminator else None,
      None if generator is None else TowerShape.of(generator),
      two_tower_generator=objective.generator == TWO_TOWERS,
      output_frac=objective.max_predictions_per_seq / seq_length, sparse_embed_lookup=True)


def pretraining_train_flops_per_example(
    hidden_size: int, num_layers: int, generator_hidden_size: int,
    generator_num_layers: int | None = None, seq_length: int = 512, vocab_size: int = 30522,
    embedding_size: int | None = None, tied_embeddings: bool = True,
    output_frac: float = OFFICIAL_OUTPUT_FRAC, intermediate_size: int | None = None,
    num_heads: int | None = None, generator_intermediate_size: int | None = None,
    generator_num_heads: int | None = None) -> float:
  """Train FLOPs of one ELECTRA pre-training sequence: discriminator + generator.

  Matches the official ``get_electra_train_flops`` divided by ``batch_size * train_steps``.
  The generator reads the discriminator's embedding table when ``tied_embeddings`` (so its
  embedding size is ``embedding_size``), else it has its own of size
  ``generator_hidden_size``. ``generator_num_layers`` defaults to ``num_layers``.
  Sizes not given follow the official defaults (``4 * hidden`` feed-forward,
  ``max(hidden // 64, 1)`` heads; heads only change the softmax/dropout terms).
  """
  e = hidden_size if embedding_size is None else embedding_size
  discriminator = TowerShape(hidden_size, num_layers, e, intermediate_size, num_heads)
  generator = TowerShape(
      generator_hidden_size, num_layers if generator_num_layers is None else generator_num_layers,
      e if tied_embeddings else None, generator_intermediate_size, generator_num_heads)
  return pretraining_flops_per_example(seq_length, vocab_size, discriminator, generator,
                                       output_frac=output_frac)


def flops_per_train_step(batch_size: int, **pretraining_kwargs) -> float:
  """Model FLOPs of one ELECTRA pre-training step over ``batch_size`` sequences (global batch).

  ``pretraining_kwargs`` are those of ``pretraining_train_flops_per_example``.
  """
  _check_positive(batch_size=batch_size)
  return batch_size * pretraining_train_flops_per_example(**pretraining_kwargs)


def electra_train_flops(hidden_size: int, num_layers: int, generator_hidden_size: int,
                        generator_num_layers: int, batch_size: int, train_steps: float,
                        tied_embeddings: bool = True, embedding_size: int | None = None,
                        seq_length: int = 512, output_frac: float = OFFICIAL_OUTPUT_FRAC) -> float:
  """Total pre-training FLOPs: the official ``get_electra_train_flops`` with the same arguments."""
  _check_positive(train_steps=train_steps)
  return train_steps * flops_per_train_step(
      batch_size, hidden_size=hidden_size, num_layers=num_layers,
      generator_hidden_size=generator_hidden_size, generator_num_layers=generator_num_layers,
      seq_length=seq_length, embedding_size=embedding_size, tied_embeddings=tied_embeddings,
      output_frac=output_frac)
