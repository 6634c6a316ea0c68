"""Pre-training train-step throughput: our step vs tf-models-official's ElectraPretrainer.

ELECTRA-Small shapes for both (discriminator hidden 256, 12 layers, 4 heads, embedding 128,
feed-forward 1024; generator 1/4: hidden 64, 12 layers, 1 head, tied embeddings; sequence 128,
19 masked positions; dropout 0.1; GELU as each code base has it: exact (erf) in ours as in the
official code, the tanh approximation in tf-models' "gelu"), one device, float32 unless stated:

- ``ours``: run_pretraining's step (dynamic masking, generator, gumbel sampling, discriminator,
  official losses) driven by the project's Trainer loop (``strategy.run`` in a multi-step
  ``tf.function``), the official AdamWeightDecay (no bias correction, clip 1.0, warmup+decay);
- ``ours_xla``: the same with ``jit_compile`` (XLA for forward + backward, as ``--jit_compile``);
- ``ours_bf16``: the same with ``--mixed_precision bfloat16``;
- ``ours_xla_bf16``: both (``--jit_compile --mixed_precision bfloat16``): float32 master
  weights, optimizer and loss, bfloat16 activations and matmuls, XLA-fused;
- ``ours_fused`` / ``ours_fused_bf16``: ``ours`` / ``ours_bf16`` with ``--xla_elementwise``:
  only each layer's elementwise work (GELU, softmax + dropout, dropout + residual + LayerNorm)
  XLA-compiled, the matmuls left to TensorFlow's oneDNN kernels (XLA on a CPU computes
  bfloat16 matmuls in float32, which is what holds ``ours_xla_bf16`` back on a CPU);
- ``ours_accum``: ``ours`` with ``gradient_accumulation_steps`` = ``--accumulation_steps``
  (default 4): the same global batch per update, run as k micro-batches of batch / k; the
  line ``ours_accum / ours`` is the throughput cost of accumulation (1.0 = free);
- ``tfm``: ``official.nlp.modeling.models.ElectraPretrainer`` with two ``BertEncoder`` networks
  (generator sharing the discriminator's embedding layer, as tf-models' ELECTRA task builds
  it), ElectraPretrainTask's losses, tf-models' ``adamw`` optimizer (``legacy_adamw``, clip 1.0,
  warmup + linear decay), the same kind of multi-step ``tf.function`` loop. Its inputs arrive
  already masked (tf-models masks in the input pipeline); that masking is not timed.

All variants run on the same fixed batch of real WordPiece ids (from wikitext-2). After one
untimed two-step warm-up call each (tracing, grappler / XLA compilation), repetitions are
interleaved (ours, ours_xla, ours_bf16, ours_xla_bf16, ours_fused, ours_fused_bf16, tfm, ours,
...) and each reports the
median examples/s over its repetitions, and its model FLOPs utilisation
(``electra_tf.pretraining.flops`` train FLOPs per example times examples/s, over the measured
peak: the fastest of ten 2048^3 matmuls in the variant's precision). Then (``--memory``, the
default) each variant runs alone in a fresh process of this script and its peak resident
memory (``ru_maxrss``) is printed. The last lines are each variant / tfm.

  python benchmarks/bench_pretrain.py [--batch_size=16] [--steps=3] [--repeats=3]
  python benchmarks/bench_pretrain.py --variants=ours,ours_accum --accumulation_steps=4
"""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # timing.py

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
import timing  # noqa: E402
from absl import app, flags  # noqa: E402
from official.modeling import tf_utils  # noqa: E402
from official.modeling.optimization import legacy_adamw, lr_schedule  # noqa: E402
from official.nlp.modeling import models, networks  # noqa: E402
from timing import Runner  # noqa: E402

from electra_tf import training  # noqa: E402
from electra_tf.config import PretrainingConfig  # noqa: E402
from electra_tf.modeling import fusion  # noqa: E402
from electra_tf.optimization import create_optimizer  # noqa: E402
from electra_tf.pretraining import flops, masking, task  # noqa: E402
from electra_tf.pretraining.builder import build_pretraining_model  # noqa: E402
from electra_tf.training import accumulation, hardware  # noqa: E402

_SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                       "shared")
flags.DEFINE_integer("batch_size", 16, "Examples per step.")
flags.DEFINE_integer("seq_length", 128, "Tokens per example.")
flags.DEFINE_integer("num_layers", 12, "Transformer layers of both towers.")
flags.DEFINE_integer("steps", 3, "Train steps per timed repetition.")
flags.DEFINE_integer("repeats", 3, "Timed repetitions per variant (interleaved).")
flags.DEFINE_list("variants", ["ours", "ours_xla", "ours_bf16", "ours_xla_bf16", "ours_fused",
                                "ours_fused_bf16", "tfm"],
                  "What to run (also: ours_accum).")
flags.DEFINE_integer("accumulation_steps", 4, "Micro-batches per update of ours_accum.")
flags.DEFINE_bool("report_peak_rss", False, "Print this process's VmHWM at the end.")
flags.DEFINE_bool("memory", True, "Also measure each variant's peak RSS alone, in a fresh "
                  "process (build + warm-up + one timed repetition).")
flags.DEFINE_string("text", os.path.join(_SHARED, "data", "wikitext2", "wiki.test.raw"),
                    "Text the batch's token ids come from.")
flags.DEFINE_string("vocab_file", os.path.join(_SHARED, "reference", "vocab.txt"), "Vocabulary.")
FLAGS = flags.FLAGS

HIDDEN, HEADS, EMBEDDING, GEN_FRACTION, LR, WARMUP, TOTAL = 256, 4, 128, 0.25, 5e-4, 10000, 10**6


def real_batch(batch_size: int, seq_length: int) -> dict[str, np.ndarray]:
  """``timing.packed_pairs`` rows of real text (no padding)."""
  return timing.packed_pairs(FLAGS.vocab_file, FLAGS.text, batch_size, seq_length)


def pretraining_config(batch_size: int, seq_length: int) -> PretrainingConfig:
  """The ELECTRA-Small config; its model_dir is a temporary folder removed at exit."""
  data_dir = tempfile.mkdtemp(prefix="bench_pretrain_")
  atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
  return PretrainingConfig(
      "bench", data_dir, model_size="small",
      model_hparam_overrides={"num_hidden_layers": FLAGS.num_layers},
      vocab_file=FLAGS.vocab_file, max_seq_length=seq_length, train_batch_size=batch_size,
      generator_hidden_size=GEN_FRACTION, num_warmup_steps=WARMUP, num_train_steps=TOTAL, seed=1)


def build_ours(name: str, batch: dict[str, np.ndarray], jit_compile: bool,
               mixed_precision: str | None, accumulation_steps: int = 1,
               xla_elementwise: bool = False) -> Runner:
  """The project's step through the project's Trainer loop (model_dir: a temp folder)."""
  config = pretraining_config(FLAGS.batch_size, FLAGS.seq_length)
  strategy = training.get_strategy("one_device")
  training.set_mixed_precision_policy(mixed_precision)
  try:
    with strategy.scope(), fusion.xla_elementwise(xla_elementwise):
      vocab = masking.read_special_ids(FLAGS.vocab_file)
      model = build_pretraining_model(config, vocab=vocab)
      optimizer = training.wrap_optimizer(create_optimizer(
          LR, TOTAL, weight_decay_rate=0.01, warmup_steps=WARMUP), mixed_precision)
  finally:
    training.set_mixed_precision_policy(None)
  trainer = training.Trainer(
      strategy, model, optimizer,
      training.TrainSettings(config.model_dir, TOTAL, FLAGS.batch_size, seed=1,
                             jit_compile=jit_compile,
                             gradient_accumulation_steps=accumulation_steps,
                             micro_batch_losses="sum"),
      step_fn=task.train_step_fn(model, []), log_fn=lambda line: None,
      batch_totals_fn=task.batch_totals_fn(model.objective))
  loop = trainer._make_loop(trainer._replica_train_step, train=True)  # the loop train() runs
  dataset = tf.data.Dataset.from_tensors(batch).repeat()
  iterator = iter(strategy.experimental_distribute_dataset(dataset))

  def run(iterator, steps):
    return loop(iterator, steps)[0]

  return Runner(name, run, iterator, FLAGS.batch_size)


def tfm_inputs(batch: dict[str, np.ndarray], config: PretrainingConfig) -> dict[str, np.ndarray]:
  """tf-models' input format, masked once (the official masking) outside the timed step."""
  vocab = masking.read_special_ids(FLAGS.vocab_file)
  masked = masking.mask(masking.features_to_inputs(batch), config.mask_prob,
                        config.max_predictions_per_seq, vocab, seed=tf.constant([1, 2], tf.int64))
  return {"input_word_ids": masked.input_ids.numpy(), "input_mask": batch["input_mask"],
          "input_type_ids": batch["segment_ids"],
          "masked_lm_positions": masked.masked_lm_positions.numpy(),
          "masked_lm_ids": masked.masked_lm_ids.numpy(),
          "masked_lm_weights": masked.masked_lm_weights.numpy()}


def tfm_model(config: PretrainingConfig, inputs: dict[str, np.ndarray]):
  """(ElectraPretrainer, its adamw optimizer), built as tf-models' ELECTRA task builds them."""
  gelu = tf_utils.get_activation("gelu")
  init = tf_keras.initializers.TruncatedNormal(stddev=0.02)
  gen_hidden = int(HIDDEN * GEN_FRACTION)
  discriminator = networks.BertEncoder(
      vocab_size=config.vocab_size, hidden_size=HIDDEN, num_layers=FLAGS.num_layers,
      num_attention_heads=HEADS, max_sequence_length=512, type_vocab_size=2,
      inner_dim=4 * HIDDEN, inner_activation=gelu, embedding_width=EMBEDDING,
      initializer=init, dict_outputs=True)
  generator = networks.BertEncoder(
      vocab_size=config.vocab_size, hidden_size=gen_hidden, num_layers=FLAGS.num_layers,
      num_attention_heads=max(1, gen_hidden // 64), max_sequence_length=512,
      type_vocab_size=2, inner_dim=4 * gen_hidden, inner_activation=gelu,
      embedding_width=EMBEDDING, initializer=init,
      embedding_layer=discriminator.get_embedding_layer(), dict_outputs=True)
  model = models.ElectraPretrainer(
      generator_network=generator, discriminator_network=discriminator,
      vocab_size=config.vocab_size, num_classes=2,
      num_token_predictions=config.max_predictions_per_seq, mlm_activation=gelu,
      mlm_initializer=init)
  model({k: tf.constant(v) for k, v in inputs.items()})
  schedule = lr_schedule.LinearWarmup(
      tf_keras.optimizers.schedules.PolynomialDecay(LR, TOTAL, 0.0, power=1.0), WARMUP, 0.0)
  optimizer = legacy_adamw.AdamWeightDecay(
      schedule, weight_decay_rate=0.01, epsilon=1e-6, gradient_clip_norm=1.0,
      exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])
  return model, optimizer


def tfm_loss(model, features) -> tf.Tensor:
  """tf-models ElectraPretrainTask.build_losses (no next-sentence loss), weight 50."""
  outputs = model(features, training=True)
  lm_losses = tf_keras.losses.sparse_categorical_crossentropy(
      features["masked_lm_ids"], tf.cast(outputs["lm_outputs"], tf.float32), from_logits=True)
  weights = features["masked_lm_weights"]
  mlm_loss = tf.math.divide_no_nan(tf.reduce_sum(lm_losses * weights), tf.reduce_sum(weights))
  rtd = tf.nn.sigmoid_cross_entropy_with_logits(
      logits=outputs["disc_logits"], labels=tf.cast(outputs["disc_label"], tf.float32))
  mask = tf.cast(features["input_mask"], tf.float32)
  rtd_loss = tf.math.divide_no_nan(tf.reduce_sum(mask * rtd), tf.reduce_sum(mask))
  return mlm_loss + 50.0 * rtd_loss


def build_tfm(batch: dict[str, np.ndarray]) -> Runner:
  config = pretraining_config(FLAGS.batch_size, FLAGS.seq_length)
  inputs = tfm_inputs(batch, config)
  strategy = training.get_strategy("one_device")
  with strategy.scope():
    model, optimizer = tfm_model(config, inputs)
  variables = model.trainable_variables

  def train_step(features):  # tf-models ElectraPretrainTask.train_step
    with tf.GradientTape() as tape:
      loss = tfm_loss(model, features)
      scaled = loss / tf.distribute.get_strategy().num_replicas_in_sync
    grads = tape.gradient(scaled, variables)
    optimizer.apply_gradients(list(zip(grads, variables, strict=True)))
    return loss

  @tf.function
  def loop(iterator, steps):
    loss = tf.constant(0.0)
    for _ in tf.range(steps):
      loss = strategy.reduce("MEAN", strategy.run(train_step, args=(next(iterator),)), None)
    return loss

  dataset = tf.data.Dataset.from_tensors(inputs).repeat()
  iterator = iter(strategy.experimental_distribute_dataset(dataset))
  return Runner("tfm", loop, iterator, FLAGS.batch_size)


def matmul_peak(dtype: tf.DType, n: int = 2048) -> float:
  """FLOP/s of the fastest of 10 [n, n] x [n, n] matmuls in ``dtype`` (the measured peak)."""
  a = tf.cast(tf.random.normal([n, n]), dtype)
  matmul = tf.function(lambda x: tf.matmul(x, x), autograph=False)
  matmul(a).numpy()
  best = float("inf")
  for _ in range(10):
    start = time.perf_counter()
    matmul(a).numpy()
    best = min(best, time.perf_counter() - start)
  return 2 * n**3 / best


def peak_rss_gib(name: str) -> float:
  """Peak resident memory (GiB) of ``name`` run alone in a fresh process of this script."""
  return timing.child_peak_rss_gib(name, [
      sys.executable, os.path.abspath(__file__), f"--variants={name}", "--repeats=1",
      "--nomemory", "--report_peak_rss"] + [f"--{flag}={FLAGS[flag].value}" for flag in (
          "batch_size", "seq_length", "num_layers", "steps", "accumulation_steps", "text",
          "vocab_file")])


def build_runners(batch: dict[str, np.ndarray]) -> list[Runner]:
  """The ``--variants``, built and warmed up in order, each with one line."""
  builders = {
      "ours": lambda: build_ours("ours", batch, False, None),
      "ours_xla": lambda: build_ours("ours_xla", batch, True, None),
      "ours_bf16": lambda: build_ours("ours_bf16", batch, False, "bfloat16"),
      "ours_xla_bf16": lambda: build_ours("ours_xla_bf16", batch, True, "bfloat16"),
      "ours_fused": lambda: build_ours("ours_fused", batch, False, None, xla_elementwise=True),
      "ours_fused_bf16": lambda: build_ours("ours_fused_bf16", batch, False, "bfloat16",
                                            xla_elementwise=True),
      "ours_accum": lambda: build_ours("ours_accum", batch, False, None,
                                       FLAGS.accumulation_steps),
      "tfm": lambda: build_tfm(batch),
  }
  if "ours_accum" in FLAGS.variants:
    # Accumulation changes a process-wide grappler option (training.accumulation.prepare);
    # set it before anything is built so every variant runs, and is optimised, under it.
    accumulation.prepare(FLAGS.accumulation_steps)
  runners = []
  for name in FLAGS.variants:
    start = time.perf_counter()
    runner = builders[name]()
    warm = runner.warm_up()
    print(f"{name}: built in {time.perf_counter() - start - warm:.1f}s, first step (trace + "
          f"compile) {warm:.1f}s", flush=True)
    runners.append(runner)
  return runners


def print_rates(runners: list[Runner], medians: dict[str, float]) -> None:
  """Median examples/s and MFU of each variant."""
  # MFU: the model's train FLOPs (electra_tf.pretraining.flops, the same for every variant: same
  # shapes)
  # over this CPU's estimated peak for the variant's precision (electra_tf.training.hardware).
  per_example = flops.train_flops_per_example(
      build_pretraining_model(pretraining_config(FLAGS.batch_size, FLAGS.seq_length),
                              vocab=masking.read_special_ids(FLAGS.vocab_file)), FLAGS.seq_length)
  peaks = {dtype: matmul_peak(dtype) for dtype in (tf.float32, tf.bfloat16)}
  for r in runners:
    peak = peaks[tf.bfloat16 if r.name.endswith("bf16") else tf.float32]
    print(f"{r.name:13s} {medians[r.name]:8.2f} examples/s  MFU "
          f"{100 * medians[r.name] * per_example / peak:4.1f}% of {peak / 1e9:.0f} GFLOP/s  "
          f"(repetitions: {', '.join(f'{x:.2f}' for x in r.rates)})")


def print_ratios(medians: dict[str, float]) -> None:
  """Peak memory (``--memory``) and the speed ratios between variants."""
  if FLAGS.memory:
    rss = {name: peak_rss_gib(name) for name in FLAGS.variants}
    print("peak RSS, each variant alone: " + ", ".join(f"{n} {g:.2f} GiB" for n, g in rss.items()))
    if "tfm" in rss:
      for name in rss:
        if name != "tfm":
          print(f"peak RSS {name} / tfm = {rss[name] / rss['tfm']:.2f}x")
  if "ours_accum" in medians and "ours" in medians:
    print(f"ours_accum / ours = {medians['ours_accum'] / medians['ours']:.2f}x "
          f"(k = {FLAGS.accumulation_steps} micro-batches of "
          f"{FLAGS.batch_size // FLAGS.accumulation_steps} vs one batch of {FLAGS.batch_size})")
  if "tfm" in medians:
    for name in ("ours_xla", "ours_bf16", "ours_xla_bf16", "ours_fused", "ours_fused_bf16"):
      if name in medians:
        print(f"{name} / tfm = {medians[name] / medians['tfm']:.2f}x")
    if "ours" in medians:
      print(f"ours / tfm = {medians['ours'] / medians['tfm']:.2f}x")


def main(argv) -> None:
  del argv
  # Once: a new global seed makes every tf.function retrace (and re-optimise) on its next call.
  training.set_seed(1)
  batch = real_batch(FLAGS.batch_size, FLAGS.seq_length)
  print(f"ELECTRA-Small shapes, {FLAGS.num_layers} layers, batch {FLAGS.batch_size} x "
        f"{FLAGS.seq_length}, {FLAGS.steps} steps x {FLAGS.repeats} interleaved repetitions, "
        f"TF {tf.__version__}, {os.cpu_count()} CPUs", flush=True)
  note = hardware.low_precision_note("bfloat16")
  if note and any(name.endswith("bf16") for name in FLAGS.variants):
    print(note, flush=True)
  runners = build_runners(batch)
  for _ in range(FLAGS.repeats):
    for runner in runners:
      runner.timed(FLAGS.steps)
  medians = {r.name: statistics.median(r.rates) for r in runners}
  print_rates(runners, medians)
  print_ratios(medians)
  if FLAGS.report_peak_rss:
    timing.print_own_peak_rss()
  # Release the variants' distributed-dataset iterators and loops while the runtime is whole,
  # not during interpreter shutdown (tests/tooling/test_benchmarks_exit.py checks the process ends).
  runners.clear()
  gc.collect()


if __name__ == "__main__":
  app.run(main)
