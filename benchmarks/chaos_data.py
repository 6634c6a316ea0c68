"""The data and commands of the runs benchmarks/chaos.py faults: a character vocabulary, two
pre-training shards and a small user task of real SST-2 rows; each trial's settings (variants)
and the command of each run of its series."""

from __future__ import annotations

import csv
import json
import pathlib
import shutil
import string
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
LOST_WORKER_SECS = 20  # two workers: one silent this long is lost (the other stops)
MODEL = "chaos"
TASK = "movie_reviews"
# A character vocabulary keeps the embeddings, the generator's softmax and the saves small.
CHARS = string.ascii_lowercase + string.digits + string.punctuation
CHAR_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *CHARS, *("##" + c for c in CHARS)]
TINY = {"model_hparam_overrides": {"hidden_size": 32, "num_hidden_layers": 1,
                                   "num_attention_heads": 2, "intermediate_size": 64},
        "embedding_size": 16, "max_seq_length": 32, "train_batch_size": 8,
        "vocab_size": len(CHAR_VOCAB)}
PRETRAIN = {**TINY, "num_train_steps": 200, "iterations_per_loop": 10,
            "save_checkpoints_steps": 10, "keep_checkpoint_max": 3, "num_warmup_steps": 10,
            "seed": 7}
FINETUNE = {**TINY, "eval_batch_size": 16, "init_checkpoint": None, "task_names": [TASK],
            "num_trials": 2, "keep_all_models": True, "num_train_epochs": 4.0,
            "iterations_per_loop": 4, "save_checkpoints_steps": 4, "write_test_outputs": True,
            "seed": 5}
KINDS = ("pretrain", "finetune")


def build_data(root: pathlib.Path, shared: pathlib.Path | None = None) -> None:
  """``root/pretrain``: the character vocab.txt + 2 TFRecord shards of length 32 from the
  reference corpus (3 novels' first chapters); ``root/finetune``: vocab.txt + a user task
  (task.json, CSV) of real SST-2 rows: 64 train, 32 dev, 16 test (further dev rows). Read from
  ``shared`` laid out as ../shared, else from the repository (tests/golden/, tests/data/)."""
  sys.path.insert(0, str(REPO))
  from data_prep import build_pretraining_dataset as bpd

  if shared is None:
    shared = root.parent / "inputs"
    shared.mkdir(parents=True, exist_ok=True)
    for name, target in (("reference", REPO / "tests" / "golden"),
                         ("data", REPO / "tests" / "data")):
      if not (shared / name).exists():
        (shared / name).symlink_to(target)

  vocab = "".join(t + "\n" for t in CHAR_VOCAB)
  pre = root / "pretrain"
  pre.mkdir(parents=True)
  (pre / "vocab.txt").write_text(vocab, encoding="utf-8")
  bpd.build(bpd.BuildArgs(corpus_dir=str(shared / "reference" / "pretrain_data" / "corpus"),
                          vocab_file=str(pre / "vocab.txt"),
                          output_dir=str(pre / "pretrain_tfrecords"), max_seq_length=32,
                          num_out_files=2, seed=1))
  task = root / "finetune" / "finetuning_data" / TASK
  task.mkdir(parents=True)
  (root / "finetune" / "vocab.txt").write_text(vocab, encoding="utf-8")
  (task / "task.json").write_text(json.dumps(
      {"type": "classification", "text_a": "review", "text_b": None, "label": "sentiment",
       "id": "review_id"}), encoding="utf-8")
  glue = shared / "data" / "glue" / "SST-2"
  train = _tsv(glue / "train.tsv")[1:65]
  dev = _tsv(glue / "dev.tsv")
  for name, header, rows in (
      ("train", ["sentiment", "review"], [[label, text] for text, label in train]),
      ("dev", ["sentiment", "review"], [[label, text] for text, label in dev[1:33]]),
      ("test", ["review_id", "review", "sentiment"],
       [[f"r{i}", text, label] for i, (text, label) in enumerate(dev[33:49])])):
    with open(task / f"{name}.csv", "w", encoding="utf-8", newline="") as f:
      csv.writer(f).writerows([header, *rows])
  sst = root / "finetune" / "finetuning_data" / "sst"  # a GLUE task: other SST-2 rows
  sst.mkdir()
  for name, rows, span in (("train", _tsv(glue / "train.tsv"), slice(65, 97)),
                           ("dev", dev, slice(49, 61)), ("test", _tsv(glue / "test.tsv"),
                                                         slice(1, 9))):
    (sst / f"{name}.tsv").write_text(
        "".join("\t".join(r) + "\n" for r in [rows[0], *rows[span]]), encoding="utf-8")


def _tsv(path: pathlib.Path) -> list[list[str]]:
  with open(path, encoding="utf-8-sig") as f:
    return [line.split("\t") for line in f.read().splitlines()]


def copy_data(data: pathlib.Path, kind: str, dest: pathlib.Path) -> pathlib.Path:
  """A fresh data_dir of ``kind`` for one run series (no models/ yet)."""
  shutil.copytree(data / kind, dest)
  return dest


# Settings a trial is drawn with: "hparams" (every run and the reference run), "first" (hparams
# of the series' first run only: flags changed before the reruns; "sets aside": a setting among
# them, so the reruns set the first run's work aside), "restart" (the second run
# gets --restart), "args" (command-line flags), "workers" (processes of one multi-worker run
# over loopback; the faults hit worker 0, the chief).
VARIANTS = {
  "pretrain": {"plain": {}, "accumulation": {"hparams": {"gradient_accumulation_steps": 2}},
               "mixed precision": {"args": ["--mixed_precision", "float16"]},
               "restart": {"restart": True},
               "two workers": {"workers": 2, "args": [
                   "--distribution_strategy=multi_worker_mirrored",
                   f"--lost_worker_secs={LOST_WORKER_SECS}"]}},
  "finetune": {"plain": {}, "keep_all_models false": {"hparams": {"keep_all_models": False}},
               "keep_all_models false->true": {"first": {"keep_all_models": False}},
               # with the learning rate changed too: the first run's trials are set aside
               "num_trials 3->2, lr": {"first": {"num_trials": 3, "learning_rate": 3e-4},
                                         "sets aside": True},
               "n_writes_test 2->1, lr": {"hparams": {"n_writes_test": 1},
                                            "first": {"n_writes_test": 2, "learning_rate": 3e-4},
                                            "sets aside": True},
               "with GLUE sst": {"hparams": {"task_names": [TASK, "sst"]}}},
}


def hparams_of(kind: str, variant: str, first: bool = False) -> dict:
  """The hparams of a run of (kind, variant): the series' first run, or any other (and the
  reference run)."""
  v = VARIANTS[kind][variant]
  base = PRETRAIN if kind == "pretrain" else FINETUNE
  return {**base, **v.get("hparams", {}), **(v.get("first", {}) if first else {})}


def command(kind: str, data_dir: pathlib.Path, variant: str = "plain", n: int = 0) -> list[str]:
  """The command of run n (1: the first of a series; 0: the reference run) of (kind, variant)."""
  v = VARIANTS[kind][variant]
  hparams = hparams_of(kind, variant, first=n == 1)
  args = [*v.get("args", []), *(["--restart"] if v.get("restart") and n == 2 else [])]
  if kind == "pretrain":
    return [sys.executable, str(REPO / "run_pretraining.py"), "--data-dir", str(data_dir),
            "--model-name", MODEL, "--hparams", json.dumps(hparams), *args]
  hparams["vocab_file"] = str(data_dir / "vocab.txt")
  return [sys.executable, str(REPO / "run_finetuning.py"), "--data-dir", str(data_dir),
          "--model-name", MODEL, "--hparams", json.dumps(hparams), *args]


def model_dirs(kind: str, data_dir: pathlib.Path, variant: str = "plain") -> list[pathlib.Path]:
  """The checkpoint folders a completed run of (kind, variant) keeps (fine-tuning: one per
  kept trial)."""
  home = data_dir / "models" / MODEL
  if kind == "pretrain":
    return [home]
  h = hparams_of(kind, variant)
  trials = range(1, h["num_trials"] + 1) if h["keep_all_models"] else [h["num_trials"]]
  return [home / "finetuning_models" / f"{tasks_of(variant)}_model_{t}" for t in trials]


def workers_of(kind: str, variant: str) -> int:
  """The processes one run of (kind, variant) is (a multi-worker cluster over loopback)."""
  return VARIANTS[kind][variant].get("workers", 1)


def tasks_of(variant: str) -> str:
  """The fine-tuning tasks of ``variant`` as the folder and results names join them."""
  return ",".join(hparams_of("finetune", variant)["task_names"])


