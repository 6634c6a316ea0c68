"""run_demo.sh end to end at a tiny size: the real pipeline (corpus -> vocab -> TFRecords ->
pre-training -> eval -> learning curves -> fine-tuning -> LiteRT int8 export -> new sentences
classified by the int8 model) exits 0, writes the PNG and the 5-row table, and its console is
quiet: no TensorFlow C++ / absl log line from any entry point, at most 20 lines before
pre-training's first progress line, the eval run's settings and metrics printed once, a short
fine-tuning start, one final summary ending on the int8 model's predictions (checked against
the .tflite file run here)."""

import csv
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter
from helpers.paths import REPO_ROOT

from electra_tf import console
from electra_tf.tokenization import FullTokenizer

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

  png = demo_dir / "learning_curves.png"
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  curves = _section(out, "== 6/9", "== 7/9").splitlines()
  header = next(i for i, line in enumerate(curves) if line.split()[:2] == ["step", "mlm_loss"])
  rows = curves[header + 1:header + 6]
  assert [int(row.split()[0]) for row in rows] == [2, 4, 6, 8, 10]  # 5 rows, first and last
  probe_header = curves.index(next(line for line in curves if line.split()[:1] == ["step"]
                                   and "probe/topic/mean" in line))
  assert probe_header > header + 5  # the probe's own table, after the losses'
  assert [int(row.split()[0]) for row in curves[probe_header + 1:probe_header + 6]] == [
      2, 4, 6, 8, 10]
  assert f"Learning curves: {png}" in curves

  pretraining = _section(out, "== 4/9", "== 5/9").splitlines()[1:]
  first = next(i for i, line in enumerate(pretraining) if re.match(r"\d+/10 = ", line))
  assert first <= 20, "\n".join(pretraining[:first + 1])  # a short start: settings, checks
  assert "  full config: " + str(demo_dir / "models/demo/config.json") in pretraining[:first]
  eval_run = _section(out, "== 5/9", "== 6/9")
  assert eval_run.count("  full config: ") == 1 and eval_run.count("disc_auc = ") == 1
  assert "Config:" not in out
  assert eval_run.count(console.RULE + "\nSummary: model demo, step 10\n") == 1

  finetuning = _section(out, "== 7/9", "== 8/9").splitlines()
  start = next(i for i, line in enumerate(finetuning) if line.startswith("model shape from"))
  first_progress = next(i for i, line in enumerate(finetuning) if re.match(r"\d+/\d+ = ", line))
  assert first_progress - start <= 20, "\n".join(finetuning[start:first_progress])
  assert "not used" not in "\n".join(finetuning)
  assert sum("unused as expected: pre-training heads and generator" in line
             for line in finetuning) == 2  # one line per seed
  assert not (demo_dir / "models" / "random_init").exists()

  assert out.count("Demo summary") == 1
  final = out[out.index("Demo summary"):]
  results = json.loads((demo_dir / "models/demo/results/topic_results.json").read_text())
  seeds = [trial["topic"]["accuracy"] for trial in results["trials"]]
  assert len(seeds) == 2
  match = re.search(r"dev accuracy ([0-9.]+) \(median; seeds ([0-9. ]+)\)", final)
  assert match, final
  assert float(match.group(1)) == round(results["median"]["topic"]["accuracy"], 1)
  assert [float(v) for v in match.group(2).split()] == [round(v, 1) for v in seeds]
  median_seed = sorted(range(2), key=seeds.__getitem__)[0] + 1  # the lower middle of two
  litert = demo_dir / "topic_export" / "litert"
  assert f"LiteRT int8 of seed {median_seed}'s model: {litert / 'int8.tflite'} (" in final

  # The predictions printed are the int8 model's on the demo's new sentences: rerun it here.
  spec = json.loads((litert / "litert.json").read_text())
  labels, length = spec["signatures"]["classify"]["labels"], spec["max_seq_length"]
  tokenizer = FullTokenizer(str(litert / "vocab.txt"), do_lower_case=spec["do_lower_case"])
  model = Interpreter(model_path=str(litert / "int8.tflite"),
                      num_threads=1).get_signature_runner("classify")
  with open(demo_dir / "new_sentences.csv", encoding="utf-8") as f:
    sentences = list(csv.DictReader(f))
  with open(demo_dir / "new_sentences_predictions.csv", encoding="utf-8") as f:
    written = list(csv.DictReader(f))
  assert len(sentences) == len(written) == 6
  printed = final[final.index("new sentences"):].splitlines()[1:1 + len(sentences)]
  for row, out, line in zip(sentences, written, printed, strict=True):
    ids = tokenizer.convert_tokens_to_ids(
        ["[CLS]", *tokenizer.tokenize(row["sentence"])[:length - 2], "[SEP]"])
    pad = [0] * (length - len(ids))
    inputs = {"input_ids": [ids + pad], "input_mask": [[1] * len(ids) + pad],
              "segment_ids": [[0] * length]}
    probabilities = model(**{k: np.array(v, np.int32) for k, v in inputs.items()})[
        "probabilities"][0]
    # the dynamic-range int8 model's softmax runs in float32: its sum is 1 to float rounding
    assert np.isclose(probabilities.sum(), 1.0, rtol=0, atol=1e-5)
    best = int(np.argmax(probabilities))
    assert out["prediction"] == labels[best], (out, probabilities)
    assert abs(float(out["probability"]) - probabilities[best]) < 1e-6, (out, probabilities)
    assert line.split()[:2] == [labels[best], f"{float(out['probability']):.2f}"], line
    assert line.endswith(f"[{row['written_for']}] {row['sentence']}"), line
  # The probe of 'topic' during pre-training: every STEPS/8 = 1 step, i.e. at each log line
  # (LOG_EVERY 2); its last one summarised.
  probe = json.loads((demo_dir / "models/demo/probe/topic.json").read_text())
  assert [h["step"] for h in probe["history"]] == [2, 4, 6, 8, 10]
  assert probe["num_probes"] == 10  # every STEPS/8 = 1 step: one per step planned
  last = probe["history"][-1]
  assert (f"probe of 'topic' (a linear read-out of the frozen features) at step {last['step']}: "
          f"[CLS] {last['cls']:.3f}, mean {last['mean']:.3f};") in final
  # the closing sentence: this run's verdict, median and int8 labels, nothing else
  above = sum(h["above"] for h in probe["history"])
  assert f"above random init in {above} of 5 probes); fine-tuned, 'topic' reaches" in final
  assert "edge past" not in final and "scores higher" not in final
  assert "docs/demo.md." in final and "total wall time: " in final
  assert lines[-1] == console.RULE
  assert [line for line in lines if console.LOG_LINE.match(line)] == []
