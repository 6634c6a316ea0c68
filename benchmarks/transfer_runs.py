"""How benchmarks/transfer.py runs the project: its scripts as subprocesses (one log file each),
the pre-training hparams at the experiment's sizes, FLOPs per example as the training log counts
them, and the results the runs write."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
  sys.path.insert(0, REPO)


class Runner:
  """Runs the project's entry points as subprocesses, each into its own log file."""

  def __init__(self, out_dir: str):
    self.log_dir = os.path.join(out_dir, "logs")
    os.makedirs(self.log_dir, exist_ok=True)
    self.env = dict(os.environ, TF_USE_LEGACY_KERAS="1", PYTHONPATH=os.pathsep.join(
                        [REPO] + [p for p in [os.environ.get("PYTHONPATH")] if p]))

  def __call__(self, name: str, script: str, *flags: str) -> float:
    """Runs ``script`` with ``flags``; returns its wall seconds. Exits naming the log on failure."""
    log = os.path.join(self.log_dir, name + ".log")
    start = time.time()
    with open(log, "w", encoding="utf-8") as f:
      code = subprocess.call([sys.executable, os.path.join(REPO, script), *flags], cwd=REPO,
                             env=self.env, stdout=f, stderr=subprocess.STDOUT)
    if code != 0:
      with open(log, encoding="utf-8", errors="replace") as f:
        tail = f.read().strip().splitlines()[-5:]
      sys.exit(f"transfer: {script} failed (exit {code}); log {log}:\n  " + "\n  ".join(tail))
    return time.time() - start


def shape_hparams(args: argparse.Namespace, vocab_size: int) -> dict[str, Any]:
  """The model shape, given explicitly so the random-init model is the same shape."""
  return {"model_size": "small", "vocab_size": vocab_size, "embedding_size": args.embedding_size,
          "model_hparam_overrides": {
              "num_hidden_layers": args.layers, "hidden_size": args.hidden,
              "num_attention_heads": args.heads, "intermediate_size": 4 * args.hidden}}


def pretraining_hparams(args: argparse.Namespace, vocab_size: int, electra: bool,
                        steps: int) -> dict[str, Any]:
  return {**shape_hparams(args, vocab_size), "electra_objective": electra,
          "generator_hidden_size": args.generator_size, "disc_weight": args.disc_weight,
          "mask_prob": args.mask_prob, "max_seq_length": args.seq_len,
          "train_batch_size": args.batch, "eval_batch_size": args.batch,
          "num_train_steps": steps, "num_warmup_steps": max(1, round(args.warmup_frac * steps)),
          "learning_rate": args.lr if electra or args.mlm_lr is None else args.mlm_lr,
          "uniform_generator": electra and args.uniform_generator,
          "temperature": args.temperature, "iterations_per_loop": min(args.log_every, steps),
          "save_checkpoints_steps": min(500, steps), "num_eval_steps": args.eval_batches,
          "seed": 1}


def flops_per_example(hparams: dict[str, Any]) -> float:
  """Train FLOPs of one pre-training sequence, as the training log counts them."""
  from electra_tf import console, early_interrupt

  early_interrupt.install()
  console.quiet_logs([])  # before TensorFlow loads: no C++ / absl log lines on this console
  console.use_tf_keras()
  from electra_tf.config import PretrainingConfig
  from electra_tf.pretraining import flops
  from electra_tf.pretraining.builder import build_pretraining_model

  config = PretrainingConfig("flops", "", **hparams)
  model = build_pretraining_model(config, vocab={})
  return flops.train_flops_per_example(model, config.max_seq_length)


def read_unsup_results(path: str) -> dict[str, float]:
  with open(path, encoding="utf-8") as f:
    return {k: float(v) for k, v in (line.strip().split(" = ") for line in f if " = " in line)}


def trial_accuracies(results_json: str) -> list[float]:
  with open(results_json, encoding="utf-8") as f:
    record = json.load(f)
  return [float(t["sst"]["accuracy"]) for t in record["trials"]]
