r"""LiteRT exports of a fine-tuned classifier: size, dev accuracy, agreement and batch-1 latency.

The classifier: ELECTRA-Small shapes (hidden 256, embedding 128, 4 heads, feed-forward 1024)
with ``--layers`` (default 2) transformer layers, fine-tuned by ``run_finetuning.py`` from
random initialisation on the first ``--train_rows`` (default 4000) SST-2 train sentences of
``$DATA_DIR/glue/SST-2``, sequence 64, 3 epochs, seed 1 (the settings of
docs/finetuning_results.md). It is cached in ``--work_dir`` and reused; so is its export.

``python -m electra_tf.convert --litert=all --keras_hub`` exports it; every LiteRT variant
(float32, float16, int8 dynamic-range, int8_full calibrated on 100 train sentences) and the
SavedModel's ``classify`` signature then run the full SST-2 dev set (872 sentences) at batch 1
(the SavedModel at batch 64: same outputs). One table: file size, dev accuracy, agreement with
the SavedModel's predicted labels, max |logit diff| to it, and batch-1 latency p50 / p95
(SavedModel ``classify`` vs each LiteRT variant on the same inputs and ``--threads`` threads,
calls interleaved round-robin over the dev sentences, after warm-up). Then the keras-hub
preset, loaded in a Keras 3 subprocess: max |sequence_output diff| to our encoder SavedModel on
the first 128 dev sentences, and tokenizer agreement. PyTorch ``transformers`` is timed only if
``torch`` is importable (one line otherwise). The last line compares int8 with float32 /
the SavedModel.

  nice -n 10 python benchmarks/bench_litert.py [--work_dir=/tmp/electra_bench_litert] \
      [--train_rows=4000] [--layers=2] [--threads=1] [--latency_calls=300]
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from electra_tf.interop.litert_runner import SPEC_FILE  # noqa: E402

_SHARED = os.environ.get("ELECTRA_SHARED", os.path.join(_REPO, "..", "shared"))
FLAGS = flags.FLAGS
flags.DEFINE_string("work_dir", os.path.join(tempfile.gettempdir(), "electra_bench_litert"),
                    "Cache of the fine-tuned model and its export.")
flags.DEFINE_string("sst_dir", os.path.join(_SHARED, "data", "glue", "SST-2"),
                    "SST-2 train.tsv / dev.tsv.")
flags.DEFINE_string("vocab_file", os.path.join(_SHARED, "reference", "vocab.txt"), "Vocabulary.")
flags.DEFINE_integer("train_rows", 4000, "SST-2 train sentences to fine-tune on.")
flags.DEFINE_integer("layers", 2, "Transformer layers (ELECTRA-Small shapes otherwise).")
flags.DEFINE_integer("max_seq_length", 64, "Tokens per example (the LiteRT input length).")
flags.DEFINE_integer("threads", 1, "Threads for the SavedModel and every LiteRT interpreter.")
flags.DEFINE_integer("latency_calls", 300, "Timed batch-1 calls per variant (interleaved).")
flags.DEFINE_list("variants", ["float32", "float16", "int8", "int8_full"], "LiteRT variants.")
flags.DEFINE_integer("keras_hub_rows", 128, "Dev sentences for the keras-hub comparison.")

MODEL_NAME = "model"


def _run(cmd: list[str], log: str, env: dict[str, str] | None = None) -> None:
  """Runs ``cmd`` (nice'd like the caller) with output to ``log``; a failure ends the run."""
  with open(log, "w") as f:
    proc = subprocess.run(cmd, cwd=_REPO, stdout=f, stderr=subprocess.STDOUT, env=env)
  if proc.returncode:
    raise RuntimeError(f"{' '.join(cmd[:3])} failed, see {log}")


def prepare_model(root: str) -> str:
  """Fine-tunes (once) and returns the trial directory of the SST-2 classifier."""
  data = root  # the official data_dir layout: finetuning_data/, vocab.txt, models/
  trial = os.path.join(data, "models", MODEL_NAME, "finetuning_models", "sst_model_1")
  if os.path.exists(os.path.join(trial, "checkpoint")):
    print(f"fine-tuned model: cached in {trial}")
    return trial
  sst = os.path.join(data, "finetuning_data", "sst")
  os.makedirs(sst, exist_ok=True)
  with open(os.path.join(FLAGS.sst_dir, "train.tsv")) as src, \
       open(os.path.join(sst, "train.tsv"), "w") as dst:
    for i, line in enumerate(src):
      if i > FLAGS.train_rows:
        break
      dst.write(line)
  for name, target in (("dev.tsv", os.path.join(FLAGS.sst_dir, "dev.tsv")),):
    if not os.path.exists(os.path.join(sst, name)):
      os.symlink(os.path.abspath(target), os.path.join(sst, name))
  if not os.path.exists(os.path.join(data, "vocab.txt")):
    os.symlink(os.path.abspath(FLAGS.vocab_file), os.path.join(data, "vocab.txt"))
  hparams = {"task_names": ["sst"], "model_size": "small", "init_checkpoint": None,
             "model_hparam_overrides": {"num_hidden_layers": FLAGS.layers}, "seed": 1,
             "iterations_per_loop": 100, "max_seq_length": FLAGS.max_seq_length}
  start = time.time()
  print(f"fine-tuning on {FLAGS.train_rows} SST-2 sentences ({FLAGS.layers} layers) ...",
        flush=True)
  _run([sys.executable, "run_finetuning.py", "--data_dir", data, "--model_name", MODEL_NAME,
        "--hparams", json.dumps(hparams)], os.path.join(root, "finetune.log"))
  print(f"fine-tuned in {time.time() - start:.0f} s")
  return trial


def prepare_export(root: str, trial: str) -> str:
  """Converts (once per variant set) the classifier with --litert and --keras_hub."""
  export = os.path.join(root, "export")
  spec_path = os.path.join(export, "litert", SPEC_FILE)
  if os.path.exists(spec_path):
    with open(spec_path) as f:
      spec = json.load(f)
    if set(FLAGS.variants) <= set(spec["variants"]) | set(spec["failed"]):
      print(f"export: cached in {export}")
      return export
  start = time.time()
  _run([sys.executable, "-m", "electra_tf.convert", "--checkpoint", trial, "--data_dir",
        root, "--output_dir", export, "--overwrite", "--keras_hub",
        "--litert", ",".join(FLAGS.variants)], os.path.join(root, "convert.log"))
  print(f"converted in {time.time() - start:.0f} s")
  return export


def dev_features(root: str) -> tuple[dict[str, np.ndarray], np.ndarray, list[str]]:
  """({input: [N, T] int32}, labels [N], texts) of the SST-2 dev set, featurised as in
  run_finetuning.py."""
  from electra_tf.config import FinetuningConfig
  from electra_tf.finetuning import registry

  config = FinetuningConfig(MODEL_NAME, root, task_names=["sst"],
                            max_seq_length=FLAGS.max_seq_length)
  task = registry.build_tasks(config)[0]
  rows, labels, texts = [], [], []
  for example in task.get_examples("dev"):
    features = task.featurize(example)[0]
    rows.append(features)
    labels.append(task.label_list.index(example.label))
    texts.append(example.text_a)
  inputs = {k: np.asarray([r[k] for r in rows], np.int32)
            for k in ("input_ids", "input_mask", "segment_ids")}
  return inputs, np.asarray(labels), texts


class SavedModelClassify:
  """The SavedModel's ``classify`` signature on numpy inputs."""

  def __init__(self, path: str):
    import tensorflow as tf

    self.tf = tf
    self.fn = tf.saved_model.load(path).signatures["classify"]

  def prepared(self, inputs: dict[str, np.ndarray]) -> dict[str, object]:
    return {k: self.tf.constant(v) for k, v in inputs.items()}

  def __call__(self, prepared: dict[str, object]) -> np.ndarray:
    return self.fn(**prepared)["logits"].numpy()


class LiteRTClassify:
  """A ``.tflite`` file's ``classify`` signature on numpy inputs."""

  def __init__(self, path: str, threads: int):
    from electra_tf.interop.litert_runner import LiteRTModel

    self.model = LiteRTModel(path, num_threads=threads)

  def prepared(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return inputs

  def __call__(self, prepared: dict[str, np.ndarray]) -> np.ndarray:
    return self.model.run(**prepared)["logits"]


def row(inputs: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
  return {k: v[i:i + 1] for k, v in inputs.items()}


def all_logits(model, inputs: dict[str, np.ndarray], batch: int) -> np.ndarray:
  n = len(inputs["input_ids"])
  return np.concatenate([model(model.prepared({k: v[i:i + batch] for k, v in inputs.items()}))
                         for i in range(0, n, batch)])


def latencies(models: dict[str, object], inputs: dict[str, np.ndarray], calls: int
              ) -> dict[str, np.ndarray]:
  """Batch-1 seconds per call, models interleaved call by call over the dev rows."""
  n = len(inputs["input_ids"])
  prepared = {name: [m.prepared(row(inputs, i)) for i in range(min(n, calls))]
              for name, m in models.items()}
  for name, m in models.items():  # warm-up
    for p in prepared[name][:10]:
      m(p)
  times = {name: [] for name in models}
  for i in range(calls):
    for name, m in models.items():
      p = prepared[name][i % len(prepared[name])]
      start = time.perf_counter()
      m(p)
      times[name].append(time.perf_counter() - start)
  return {name: np.asarray(t) for name, t in times.items()}


def keras_hub_check(export: str, inputs: dict[str, np.ndarray], texts: list[str]) -> None:
  """keras-hub preset vs our encoder SavedModel (one subprocess without legacy Keras)."""
  import tensorflow as tf

  from electra_tf import tokenization

  sys.path.insert(0, os.path.join(_REPO, "tests", "helpers"))
  from keras_hub_check import SCRIPT, check_env  # the tests' Keras 3 subprocess runner

  n = FLAGS.keras_hub_rows
  with tempfile.TemporaryDirectory() as tmp:
    np.savez(os.path.join(tmp, "in.npz"), texts=np.asarray(texts[:n]),
             **{k: v[:n] for k, v in inputs.items()})
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--preset",
         os.path.join(export, "keras_hub"), "--inputs", os.path.join(tmp, "in.npz"),
         "--output", os.path.join(tmp, "out.npz")],
        cwd=_REPO, env=check_env(), capture_output=True, text=True)
    if proc.returncode:
      print(f"keras-hub: preset check failed: {proc.stderr.strip().splitlines()[-1]}")
      return
    theirs = dict(np.load(os.path.join(tmp, "out.npz")))
  encoder = tf.saved_model.load(os.path.join(export, "encoder"))
  ours = encoder.signatures["serving_default"](
      input_word_ids=tf.constant(inputs["input_ids"][:n]),
      input_mask=tf.constant(inputs["input_mask"][:n]),
      input_type_ids=tf.constant(inputs["segment_ids"][:n]))["sequence_output"].numpy()
  mask = inputs["input_mask"][:n].astype(bool)
  diff = np.abs(theirs["sequence_output"] - ours)[mask]
  tokenizer = tokenization.FullTokenizer(os.path.join(export, "vocab.txt"), True)
  same = sum([i for i in ids if i >= 0] ==
             tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t))
             for t, ids in zip(texts[:n], theirs["token_ids"], strict=True))
  print(f"keras-hub preset (ElectraBackbone.from_preset, Keras 3, no network): sequence_output "
        f"max |diff| {diff.max():.2e}, mean {diff.mean():.2e} over {n} dev sentences "
        f"(|values| up to {np.abs(ours[mask]).max():.1f}; tanh-approximate vs erf GELU); "
        f"tokenizer ids equal FullTokenizer's on {same}/{n}")


def load_models(export: str, spec: dict) -> tuple[dict[str, object], dict[str, str]]:
  """The SavedModel and the ``--variants`` converted to LiteRT: (models, their files)."""
  models = {"savedmodel": SavedModelClassify(os.path.join(export, "saved_model"))}
  files = {"savedmodel": os.path.join(export, "saved_model")}
  for variant in FLAGS.variants:
    if variant in spec["variants"]:
      files[variant] = os.path.join(export, "litert", spec["variants"][variant])
      models[variant] = LiteRTClassify(files[variant], FLAGS.threads)
  return models, files


def score(models: dict[str, object], inputs: dict[str, np.ndarray], labels: np.ndarray
          ) -> dict[str, dict[str, float]]:
  """Per model: dev accuracy, agreement with the SavedModel's labels, max logit difference."""
  reference = all_logits(models["savedmodel"], inputs, 64)
  results = {}
  for name, model in models.items():
    logits = reference if name == "savedmodel" else all_logits(model, inputs, 1)
    predictions = logits.argmax(-1)
    results[name] = {
        "accuracy": 100.0 * float(np.mean(predictions == labels)),
        "agreement": 100.0 * float(np.mean(predictions == reference.argmax(-1))),
        "diff": float(np.abs(logits - reference).max()),
    }
  return results


def file_size(path: str) -> int:
  """Bytes of a file, or of every file under a folder."""
  if os.path.isdir(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
  return os.path.getsize(path)


def print_table(results: dict[str, dict[str, float]], times: dict[str, np.ndarray],
                files: dict[str, str], n_dev: int) -> None:
  print(f"\nSST-2 dev ({n_dev} sentences), {FLAGS.layers}-layer ELECTRA-Small shapes, "
        f"sequence {FLAGS.max_seq_length}, {FLAGS.threads} thread(s), "
        f"{FLAGS.latency_calls} interleaved batch-1 calls each")
  print(f"{'variant':<12}{'size MB':>9}{'dev acc %':>11}{'agree %':>9}{'max|dlogit|':>13}"
        f"{'p50 ms':>9}{'p95 ms':>9}")
  for name, r in results.items():
    t = times[name] * 1e3
    print(f"{name:<12}{file_size(files[name]) / 1e6:>9.2f}{r['accuracy']:>11.2f}"
          f"{r['agreement']:>9.2f}{r['diff']:>13.2e}{np.percentile(t, 50):>9.2f}"
          f"{np.percentile(t, 95):>9.2f}")
  print("(savedmodel size: the whole saved_model/ folder, raw-text signature included)")


def main(argv) -> None:
  del argv
  import tensorflow as tf

  tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  root = os.path.join(FLAGS.work_dir, f"sst2_{FLAGS.train_rows}rows_{FLAGS.layers}l")
  os.makedirs(root, exist_ok=True)
  print(f"load average at start: {', '.join(f'{x:.1f}' for x in os.getloadavg())} "
        f"({os.cpu_count()} CPUs)")
  trial = prepare_model(root)
  export = prepare_export(root, trial)
  with open(os.path.join(export, "litert", SPEC_FILE)) as f:
    spec = json.load(f)
  for variant, why in spec["failed"].items():
    print(f"litert {variant}: not converted ({why})")
  inputs, labels, texts = dev_features(root)
  models, files = load_models(export, spec)
  results = score(models, inputs, labels)
  times = latencies(models, inputs, FLAGS.latency_calls)
  print_table(results, times, files, len(labels))

  keras_hub_check(export, inputs, texts)
  if importlib.util.find_spec("torch") is None:
    print("pytorch transformers: skipped (torch is not importable)")
  else:
    print("pytorch transformers: skipped (convert writes hf/ for pre-training models only: "
          "there is no transformers export of a fine-tuned classifier to time)")
  print(f"load average at end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
  if "int8" in results and "float32" in results:
    drop = results["float32"]["accuracy"] - results["int8"]["accuracy"]
    ratio = file_size(files["int8"]) / file_size(files["float32"])
    latency = np.percentile(times["int8"], 50) / np.percentile(times["savedmodel"], 50)
    print(f"litert int8: accuracy drop {drop:.2f} pts, size {ratio:.2f}x, "
          f"latency {latency:.2f}x savedmodel")


if __name__ == "__main__":
  app.run(main)
