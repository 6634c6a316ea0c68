"""Classification fine-tuning throughput and serving latency: ours vs tf-models-official's
``BertClassifier``.

Shapes (``--shapes``): ELECTRA-Small (hidden 256, 12 layers, 4 heads, feed-forward 1024,
embedding 128 projected to 256) and ELECTRA-Base (hidden 768, 12 layers, 12 heads, feed-forward
3072, embedding 768); a 2-label sentence-pair task (``rte``), sequence 128, batch 32, dropout
0.1, float32, one device. Per shape:

- ``ours``: run_finetuning's train step (``FinetuningModel`` built by ``create_model`` from the
  task's ``FinetuningConfig`` defaults, the official summed loss, ``create_finetuning_optimizer``:
  AdamWeightDecay, lr 1e-4, weight decay 0.01, layer-wise lr decay 0.8, clip 1.0, 10% warmup +
  linear decay) driven by the project's Trainer loop (``strategy.run`` in a multi-step
  ``tf.function``), as ``ModelRunner.train`` drives it;
- ``ours_xla``, ``ours_bf16``, ``ours_xla_bf16``: the same step with the fine-tuning hparams
  ``jit_compile`` (XLA-compiled forward + backward) and / or ``mixed_precision: bfloat16``
  (bfloat16 matmuls and activations, float32 weights, optimizer, heads and loss);
- ``ours_fused_bf16``: ``ours_bf16`` with the hparam ``xla_elementwise`` (XLA on the elementwise
  work only); ``ours_eval``: forward only (logits and loss) through the Trainer's evaluation loop;
- ``tfm``: ``official.nlp.modeling.models.BertClassifier`` over a ``networks.BertEncoder`` of the
  same shape (tf-models' defaults: the encoder's pooler, then dropout and the dense classifier;
  GELU as tf-models has it), SentencePredictionTask's loss (mean cross-entropy), tf-models'
  ``adamw`` (``legacy_adamw``, the same lr and weight decay, clip 1.0, warmup + linear decay, no
  layer-wise decay), the same kind of multi-step ``tf.function`` loop;
- ``tfm_eval``: its forward only (logits and loss), the same loop without the update;
- ``latency``: batch-1 latency of one 128-token example: our model exported with
  ``interop.finetuned_saved_model`` (as ``convert`` writes it, to a temporary folder), loaded back
  and called through its ``classify`` signature; the same ``classify`` function called directly
  (a ``tf.function``, not loaded from disk); tf-models' classifier (with a softmax, as
  ``classify``) called as a ``tf.function``. Calls are interleaved; each reports its median.

All variants run on one fixed batch of real WordPiece ids (pairs of consecutive wikitext-2
text, no padding) with fixed random labels. After one untimed two-step warm-up call each
(tracing, grappler), repetitions are interleaved (ours, ours_eval, tfm, tfm_eval, ours, ...) and
each reports the median examples/s. Shapes run one after the other; with Base the process
peaks at about 12 GB of memory with two Base models and their optimizer states (run fewer
variants at a time there). Then (``--memory``, the default) each variant runs alone in a fresh
process of this script and prints its peak resident memory (VmHWM). The last lines are the
train step ratios ours* / tfm of each shape.

  python benchmarks/bench_finetune.py [--shapes=small,base] [--steps=3] [--repeats=3]
  python benchmarks/bench_finetune.py --shapes=small --variants=ours,tfm --num_layers=2
  python benchmarks/bench_finetune.py --shapes=base --variants=ours,ours_xla_bf16,tfm --steps=2
"""

from __future__ import annotations

import atexit
import gc
import os
import resource
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
from absl import logging as absl_logging  # noqa: E402
from official.modeling import tf_utils  # noqa: E402
from official.modeling.optimization import legacy_adamw, lr_schedule  # noqa: E402
from official.nlp.modeling import models, networks  # noqa: E402
from timing import Runner  # noqa: E402

from electra_tf import training  # noqa: E402
from electra_tf.config import FinetuningConfig  # noqa: E402
from electra_tf.finetuning import finetuning_model as model_lib  # noqa: E402
from electra_tf.finetuning import registry  # noqa: E402
from electra_tf.finetuning.runner import train_step_outputs  # noqa: E402
from electra_tf.interop.finetuned_saved_model import FinetunedExport, export_finetuned_saved_model  # noqa: E402
from electra_tf.model_sizes import get_bert_config  # noqa: E402
from electra_tf.modeling import fusion  # noqa: E402

_SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                       "shared")
flags.DEFINE_list("shapes", ["small", "base"], "Model shapes to run: small, base.")
flags.DEFINE_integer("batch_size", 32, "Examples per train / eval step.")
flags.DEFINE_integer("seq_length", 128, "Tokens per example.")
flags.DEFINE_integer("num_layers", 12, "Transformer layers (12 for both real shapes).")
flags.DEFINE_integer("steps", 3, "Steps per timed repetition.")
flags.DEFINE_integer("repeats", 3, "Timed repetitions per variant (interleaved).")
flags.DEFINE_integer("latency_calls", 30, "Timed batch-1 calls per latency variant.")
TRAIN_VARIANTS = {  # (jit_compile, precision, xla_elementwise)
    "ours": (False, None, False), "ours_xla": (True, None, False),
    "ours_bf16": (False, "bfloat16", False), "ours_xla_bf16": (True, "bfloat16", False),
    "ours_fused_bf16": (False, "bfloat16", True)}
VARIANTS = (*TRAIN_VARIANTS, "ours_eval", "tfm", "tfm_eval", "latency")
flags.DEFINE_list("variants", list(VARIANTS), f"What to run: {', '.join(VARIANTS)}.")
flags.DEFINE_bool("memory", True, "Also measure each variant's peak RSS alone, in a fresh "
                  "process of this script (each shape, each variant but latency).")
flags.DEFINE_bool("report_peak_rss", False, "Print this process's VmHWM at the end.")
flags.DEFINE_string("text", os.path.join(_SHARED, "data", "wikitext2", "wiki.test.raw"),
                    "Text the batch's token ids come from.")
flags.DEFINE_string("vocab_file", os.path.join(_SHARED, "reference", "vocab.txt"), "Vocabulary.")
FLAGS = flags.FLAGS

TASK, N_LABELS, TOTAL = "rte", 2, 10000  # TOTAL: the schedule's length (warmup 10% of it)
IDS = ("input_ids", "input_mask", "segment_ids")


def real_batch(batch_size: int, seq_length: int) -> dict[str, np.ndarray]:
  """``timing.packed_pairs`` rows of real text, with the task's ids and 0/1 labels."""
  batch = timing.packed_pairs(FLAGS.vocab_file, FLAGS.text, batch_size, seq_length)
  batch.update({"task_id": np.zeros([batch_size], np.int32),
                TASK + "_eid": np.arange(batch_size, dtype=np.int32),
                TASK + "_label_ids": np.random.RandomState(0).randint(0, N_LABELS, batch_size)
                                     .astype(np.int32)})
  return batch


def finetuning_config(shape: str) -> FinetuningConfig:
  """The task's FinetuningConfig defaults for ``shape``; its folders are a temp dir."""
  data_dir = tempfile.mkdtemp(prefix="bench_finetune_")
  atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
  return FinetuningConfig(
      "bench", data_dir, model_size=shape, task_names=[TASK], vocab_file=FLAGS.vocab_file,
      model_hparam_overrides={"num_hidden_layers": FLAGS.num_layers}, init_checkpoint=None,
      max_seq_length=FLAGS.seq_length, train_batch_size=FLAGS.batch_size,
      eval_batch_size=FLAGS.batch_size)


def _iterator(strategy, features: dict[str, np.ndarray]):
  dataset = tf.data.Dataset.from_tensors(features).repeat()
  return iter(strategy.experimental_distribute_dataset(dataset))


class Ours:
  """Our model, optimizer and Trainer for one shape, built as ``ModelRunner`` builds them."""

  def __init__(self, config: FinetuningConfig, batch: dict[str, np.ndarray], name: str = "ours"):
    self.name = name
    jit_compile, precision, xla_elementwise = TRAIN_VARIANTS[name]
    self.strategy = training.get_strategy("one_device")
    self.tasks = registry.get_tasks([TASK], registry.make_tokenizer(FLAGS.vocab_file),
                                    config.data_dir, config.max_seq_length)
    training.set_mixed_precision_policy(precision)  # as ModelRunner: for this model only
    try:
      with self.strategy.scope(), fusion.xla_elementwise(xla_elementwise):
        self.model = model_lib.create_model(config, self.tasks)
        optimizer = model_lib.create_finetuning_optimizer(config, TOTAL,
                                                          self.model.n_transformer_layers)
    finally:
      training.set_mixed_precision_policy(None)
    settings = training.TrainSettings(
        model_dir=config.model_dir, num_train_steps=TOTAL, train_batch_size=FLAGS.batch_size,
        save_checkpoints_steps=config.save_checkpoints_steps, seed=0, log_total_loss=False,
        micro_batch_losses="sum", jit_compile=jit_compile)
    model = self.model

    def step_fn(features, seed):  # ModelRunner.train's, unseeded (the default)
      out = model(features, training=True, seed=None)
      return train_step_outputs(out["loss"], features["task_id"], 1)

    self.trainer = training.Trainer(self.strategy, model, optimizer, settings, step_fn=step_fn,
                                    log_fn=lambda line: None)
    self.batch = batch

  def train_runner(self) -> Runner:
    loop = self.trainer._make_loop(self.trainer._replica_train_step, train=True)  # train()'s
    return Runner(self.name, lambda it, steps: loop(it, steps)[0],
                  _iterator(self.strategy, self.batch), FLAGS.batch_size)

  def eval_runner(self) -> Runner:
    model = self.model

    def replica_fn(features, index):  # what Trainer.evaluate runs per batch
      out = model(features, training=False, task_names=[TASK])
      return {"total_loss": out["loss"], "logits_sum": tf.reduce_sum(out[TASK]["logits"])}

    loop = self.trainer._make_loop(replica_fn, train=False)
    return Runner("ours_eval", lambda it, steps: loop(it, steps)[0],
                  _iterator(self.strategy, self.batch), FLAGS.batch_size)


class Tfm:
  """tf-models' BertClassifier + BertEncoder of the same shape, and its adamw optimizer."""

  def __init__(self, config: FinetuningConfig, batch: dict[str, np.ndarray]):
    bert = get_bert_config(config)
    self.strategy = training.get_strategy("one_device")
    self.features = {"input_word_ids": batch["input_ids"], "input_mask": batch["input_mask"],
                     "input_type_ids": batch["segment_ids"],
                     "label_ids": batch[TASK + "_label_ids"]}
    init = tf_keras.initializers.TruncatedNormal(stddev=bert.initializer_range)
    embedding = config.embedding_size
    with self.strategy.scope():
      encoder = networks.BertEncoder(
          vocab_size=bert.vocab_size, hidden_size=bert.hidden_size,
          num_layers=bert.num_hidden_layers, num_attention_heads=bert.num_attention_heads,
          max_sequence_length=bert.max_position_embeddings,
          type_vocab_size=bert.type_vocab_size, inner_dim=bert.intermediate_size,
          inner_activation=tf_utils.get_activation("gelu"),
          output_dropout=bert.hidden_dropout_prob,
          attention_dropout=bert.attention_probs_dropout_prob,
          embedding_width=embedding if embedding != bert.hidden_size else None,
          initializer=init, dict_outputs=True)
      self.model = models.BertClassifier(encoder, num_classes=N_LABELS, initializer=init,
                                         dropout_rate=bert.hidden_dropout_prob)
      self.model(self.inputs(self.features))
      schedule = lr_schedule.LinearWarmup(
          tf_keras.optimizers.schedules.PolynomialDecay(config.learning_rate, TOTAL, 0.0,
                                                        power=1.0),
          int(TOTAL * config.warmup_proportion), 0.0)
      self.optimizer = legacy_adamw.AdamWeightDecay(
          schedule, weight_decay_rate=config.weight_decay_rate, epsilon=1e-6,
          gradient_clip_norm=1.0, exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])

  @staticmethod
  def inputs(features):
    return {k: features[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}

  def loss(self, features, training: bool) -> tf.Tensor:
    """SentencePredictionTask.build_losses: mean sparse cross-entropy on the logits."""
    logits = self.model(self.inputs(features), training=training)
    losses = tf_keras.losses.sparse_categorical_crossentropy(
        features["label_ids"], tf.cast(logits, tf.float32), from_logits=True)
    return tf_utils.safe_mean(losses)

  def _runner(self, name: str, replica_fn) -> Runner:
    strategy = self.strategy

    @tf.function
    def loop(iterator, steps):
      total = tf.constant(0.0)
      for _ in tf.range(steps):
        total += strategy.reduce("MEAN", strategy.run(replica_fn, args=(next(iterator),)), None)
      return total

    return Runner(name, loop, _iterator(strategy, self.features), FLAGS.batch_size)

  def train_runner(self) -> Runner:
    model, optimizer = self.model, self.optimizer

    def train_step(features):  # tf-models base_task.Task.train_step
      with tf.GradientTape() as tape:
        loss = self.loss(features, training=True)
        scaled = loss / tf.distribute.get_strategy().num_replicas_in_sync
      variables = model.trainable_variables
      grads = tape.gradient(scaled, variables)
      optimizer.apply_gradients(list(zip(grads, variables, strict=True)))
      return loss

    return self._runner("tfm", train_step)

  def eval_runner(self) -> Runner:
    return self._runner("tfm_eval", lambda features: self.loss(features, training=False))


def latencies(ours: Ours | None, tfm: Tfm | None, batch: dict[str, np.ndarray]
              ) -> dict[str, list[float]]:
  """Milliseconds per batch-1 call of each latency variant, calls interleaved."""
  import tensorflow_text  # noqa: F401 -- registers the ops of the classify_text signatures

  example = {k: tf.constant(batch[k][:1]) for k in IDS}
  calls = {}
  if ours is not None:
    export_dir = os.path.join(tempfile.mkdtemp(prefix="bench_finetune_export_"), "saved_model")
    atexit.register(shutil.rmtree, os.path.dirname(export_dir), ignore_errors=True)
    export_finetuned_saved_model(ours.model, ours.tasks, export_dir, FLAGS.vocab_file, True,
                                 FLAGS.seq_length)
    classify = tf.saved_model.load(export_dir).signatures["classify"]
    direct = FinetunedExport(ours.model, ours.tasks).classify
    calls["ours classify SavedModel"] = lambda: classify(**example)
    calls["ours classify tf.function"] = lambda: direct(*(example[k] for k in IDS))
  if tfm is not None:
    model = tfm.model

    @tf.function
    def tfm_classify(inputs):
      logits = model(inputs, training=False)
      return {"logits": logits, "probabilities": tf.nn.softmax(logits)}

    tfm_example = {"input_word_ids": example["input_ids"], "input_mask": example["input_mask"],
                   "input_type_ids": example["segment_ids"]}
    calls["tfm BertClassifier tf.function"] = lambda: tfm_classify(tfm_example)
  times: dict[str, list[float]] = {name: [] for name in calls}
  for i in range(FLAGS.latency_calls + 3):  # 3 untimed warm-up calls each
    for name, call in calls.items():
      start = time.perf_counter()
      tf.nest.map_structure(lambda t: t.numpy(), call())
      if i >= 3:
        times[name].append(1000.0 * (time.perf_counter() - start))
  return times


def run_shape(shape: str, batch: dict[str, np.ndarray]) -> dict[str, float]:
  """Builds, warms up and times every variant of one shape; returns median examples/s."""
  config = finetuning_config(shape)
  variants = set(FLAGS.variants)
  ours = Ours(config, batch) if variants & {"ours", "ours_eval", "latency"} else None
  tfm = Tfm(config, batch) if variants & {"tfm", "tfm_eval", "latency"} else None
  builders = {"ours": lambda: ours.train_runner(), "ours_eval": lambda: ours.eval_runner(),
              "tfm": lambda: tfm.train_runner(), "tfm_eval": lambda: tfm.eval_runner()}
  for name in list(TRAIN_VARIANTS)[1:]:
    builders[name] = lambda name=name: Ours(config, batch, name).train_runner()
  runners = []
  for name in [v for v in FLAGS.variants if v in builders]:  # in --variants order
    start = time.perf_counter()
    runner = builders[name]()
    warm = runner.warm_up()
    print(f"{shape} {name}: built in {time.perf_counter() - start - warm:.1f}s, first step "
          f"(trace + optimise) {warm:.1f}s", flush=True)
    runners.append(runner)
  for _ in range(FLAGS.repeats):
    for runner in runners:
      runner.timed(FLAGS.steps)
  medians = {r.name: statistics.median(r.rates) for r in runners}
  for r in runners:
    print(f"{shape:5s} {r.name:10s} {medians[r.name]:8.2f} examples/s  (repetitions: "
          f"{', '.join(f'{x:.2f}' for x in r.rates)})", flush=True)
  if "latency" in variants:
    for name, ms in latencies(ours, tfm, batch).items():
      medians["latency " + name] = statistics.median(ms)
      print(f"{shape:5s} batch-1 latency, {name}: {statistics.median(ms):.2f} ms (median of "
            f"{len(ms)} calls; min {min(ms):.2f})", flush=True)
  return medians


def peak_rss_gib(shape: str, name: str) -> float:
  """Peak resident memory (GiB) of variant ``name`` of ``shape`` alone in a fresh process."""
  return timing.child_peak_rss_gib(name, [
      sys.executable, os.path.abspath(__file__), f"--shapes={shape}", f"--variants={name}",
      "--repeats=1", "--nomemory", "--report_peak_rss"] + [
          f"--{flag}={FLAGS[flag].value}" for flag in (
              "batch_size", "seq_length", "num_layers", "steps", "text", "vocab_file")])


def memory_lines(shape: str) -> list[str]:
  """Peak RSS of each variant of ``shape`` alone, and ours* / tfm."""
  rss = {name: peak_rss_gib(shape, name) for name in FLAGS.variants if name != "latency"}
  lines = [f"{shape} peak RSS, each variant alone: "
           + ", ".join(f"{n} {g:.2f} GiB" for n, g in rss.items())]
  if "tfm" in rss:
    lines += [f"{shape} peak RSS {n} / tfm = {g / rss['tfm']:.2f}x"
              for n, g in rss.items() if n in TRAIN_VARIANTS]
  return lines


def ratio_lines(shape: str, m: dict[str, float]) -> list[str]:
  lines = []
  for ours, tfm in (*((name, "tfm") for name in TRAIN_VARIANTS), ("ours_eval", "tfm_eval")):
    if ours in m and tfm in m:
      lines.append(f"{shape} {ours} / {tfm} = {m[ours] / m[tfm]:.2f}x")
  tfm_ms = m.get("latency tfm BertClassifier tf.function")
  for name in ("ours classify SavedModel", "ours classify tf.function"):
    if tfm_ms and "latency " + name in m:
      lines.append(f"{shape} batch-1 latency tfm / {name} = {tfm_ms / m['latency ' + name]:.2f}x"
                   " (> 1: ours faster)")
  return lines


def main(argv) -> None:
  del argv
  unknown = sorted(set(FLAGS.shapes) - {"small", "base"} | set(FLAGS.variants) - set(VARIANTS))
  if unknown:
    sys.exit(f"unknown shape or variant: {', '.join(unknown)}")
  absl_logging.set_verbosity(absl_logging.WARNING)  # SavedModel writing and tf-models' INFO
  tf.get_logger().setLevel("ERROR")
  # Once: a new global seed makes every tf.function retrace (and re-optimise) on its next call.
  training.set_seed(1)
  batch = real_batch(FLAGS.batch_size, FLAGS.seq_length)
  print(f"{TASK} classification ({N_LABELS} labels), shapes {','.join(FLAGS.shapes)}, "
        f"{FLAGS.num_layers} layers, batch {FLAGS.batch_size} x {FLAGS.seq_length}, "
        f"{FLAGS.steps} steps x {FLAGS.repeats} interleaved repetitions, TF {tf.__version__}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)
  results = {}
  for shape in FLAGS.shapes:
    results[shape] = run_shape(shape, batch)
    tf_keras.backend.clear_session()
    gc.collect()
  peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  print(f"peak RSS (whole process) {peak_mib:.0f} MiB, load average {os.getloadavg()[0]:.2f}")
  if FLAGS.report_peak_rss:
    timing.print_own_peak_rss()
    return
  if FLAGS.memory:
    for shape in results:
      print("\n".join(memory_lines(shape)), flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
  for shape, medians in results.items():
    for line in ratio_lines(shape, medians):
      print(line)
  for shape, m in results.items():
    for name in TRAIN_VARIANTS:
      if name in m and "tfm" in m:
        print(f"finetune {shape} {name} / tfm = {m[name] / m['tfm']:.2f}x")


if __name__ == "__main__":
  app.run(main)
