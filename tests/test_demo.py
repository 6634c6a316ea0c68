"""run_demo.sh end to end at a tiny size: the real pipeline (corpus -> vocab -> TFRecords ->
pre-training -> eval -> learning curves -> fine-tuning beside random init) exits 0, writes the
PNG and the 5-row table, and its console is quiet: no TensorFlow C++ / absl log line from any
entry point, the eval run's config and metrics printed once, one final summary."""

import json
import os
import re
import subprocess
import sys

import pytest
from helpers.paths import REPO_ROOT

from electra_tf import console

TINY = {
    "MAX_MODULES": "30", "VOCAB_TARGET": "1000", "SEQ_LEN": "32", "BATCH": "8", "STEPS": "10",
    "LOG_EVERY": "2", "EVAL_STEPS": "2", "FT_TRAIN": "64", "FT_DEV": "32", "FT_SEQ_LEN": "32",
    "FT_SEEDS": "2",
    "MODEL_SHAPE": '"model_size": "small", "embedding_size": 16, "model_hparam_overrides": '
                   '{"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, '
                   '"intermediate_size": 64}'}


def _section(out: str, start: str, end: str) -> str:
  return out[out.index(start):out.index(end)]


@pytest.mark.slow
def test_tiny_demo_runs_end_to_end_quietly(tmp_path):
  demo_dir = tmp_path / "demo"
  # The test session sets TF_CPP_MIN_LOG_LEVEL (conftest); the demo must be quiet without it.
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  env.update(TINY, DEMO_DIR=str(demo_dir), ELECTRA_VENV=sys.prefix, CUDA_VISIBLE_DEVICES="-1")
  proc = subprocess.run(["bash", str(REPO_ROOT / "run_demo.sh")], env=env, text=True,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1200)
  out = proc.stdout
  assert proc.returncode == 0, out[-4000:]
  lines = out.splitlines()
  assert [line for line in lines if console.LOG_LINE.match(line)] == []

  png = demo_dir / "learning_curves.png"
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  curves = _section(out, "== 6/7", "== 7/7").splitlines()
  header = next(i for i, line in enumerate(curves) if line.split()[:2] == ["step", "mlm_loss"])
  rows = curves[header + 1:header + 6]
  assert [int(row.split()[0]) for row in rows] == [2, 4, 6, 8, 10]  # 5 rows, first and last
  assert curves[header + 6] == f"Learning curves: {png}"

  eval_run = _section(out, "== 5/7", "== 6/7")
  assert eval_run.count("Config:") == 1 and eval_run.count("disc_auc = ") == 1
  assert eval_run.count(console.RULE + "\nSummary: model demo, step 10\n") == 1
  assert out.count("Demo summary") == 1
  final = out[out.index("Demo summary"):]
  ours = json.loads((demo_dir / "models/demo/results/topic_results.json").read_text())
  rand = json.loads((demo_dir / "models/random_init/results/topic_results.json").read_text())
  match = re.search(r"from the demo model ([0-9.]+) +from random init ([0-9.]+)", final)
  assert match, final
  assert float(match.group(1)) == round(ours["median"]["topic"]["accuracy"], 1)
  assert float(match.group(2)) == round(rand["median"]["topic"]["accuracy"], 1)
  per_seed = re.search(r"per seed: demo model ([0-9. ]+); random init ([0-9. ]+) \(", final)
  assert per_seed, final
  for group, results in ((1, ours), (2, rand)):
    assert [float(v) for v in per_seed.group(group).split()] == [
        round(trial["topic"]["accuracy"], 1) for trial in results["trials"]]
  assert len(ours["trials"]) == len(rand["trials"]) == 2
  assert lines[-1] == console.RULE
