"""The device install: ``pip install ".[device]"`` into a fresh venv brings numpy, absl-py,
the LiteRT interpreter and this package, no TensorFlow, and ``electra-predict`` labels a CSV
with an int8 ``.tflite`` there. A real install from the package index (pip's cache makes it a
few seconds), not imports blocked inside the test venv."""

import csv
import shutil
import subprocess
import sys

import pytest
from helpers import tiny_litert
from helpers.paths import REPO_ROOT

# ai-edge-litert's own requirements come along; nothing of TensorFlow does
ALLOWED = {"absl-py", "ai-edge-litert", "electra-tf", "numpy", "flatbuffers", "ml-dtypes",
           "protobuf", "tqdm", "typing-extensions", "backports-strenum", "pip", "setuptools"}


def _package_copy(dest):
  """What an install of the project reads, copied so the build leaves nothing in the repo."""
  dest.mkdir()
  for name in ("pyproject.toml", "requirements.txt", "requirements-device.txt",
               "requirements-data.txt", "run_pretraining.py", "run_finetuning.py"):
    shutil.copy(REPO_ROOT / name, dest / name)
  shutil.copytree(REPO_ROOT / "electra_tf", dest / "electra_tf",
                  ignore=shutil.ignore_patterns("__pycache__"))
  return dest


@pytest.mark.slow  # 38 s to 77 s here under load: the venv and the install
def test_device_extra_installs_light_and_predicts_with_tflite(tiny_litert_export, tmp_path):
  export = tiny_litert_export
  venv = tmp_path / "venv"
  subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
  install = subprocess.run(
      [venv / "bin/python", "-m", "pip", "install", "-q", f"{_package_copy(tmp_path / 'pkg')}"
       "[device]"], capture_output=True, text=True, timeout=600)
  assert install.returncode == 0, install.stderr[-3000:]
  listed = subprocess.run([venv / "bin/python", "-m", "pip", "list", "--format=freeze"],
                          capture_output=True, text=True, check=True).stdout.split()
  names = {line.split("==")[0].lower().replace("_", "-").replace(".", "-") for line in listed}
  assert names <= ALLOWED, sorted(names - ALLOWED)
  assert {"numpy", "absl-py", "ai-edge-litert", "electra-tf"} <= names

  rows = tmp_path / "rows.csv"
  rows.write_text("text_a,text_b,label\nA man plays.,A man is playing.,entailment\n"
                  "It rains.,The sun shines.,not_entailment\n", encoding="utf-8")
  output = tmp_path / "labelled.csv"
  env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no PYTHONPATH: the venv's copy
  tflite = export / "litert" / "int8.tflite"
  proc = subprocess.run([venv / "bin/electra-predict", f"--model={tflite}", f"--input={rows}",
                         f"--output={output}"], cwd=tmp_path, env=env, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
  assert "(2 labelled rows)" in proc.stdout and "batch 1" in proc.stdout
  with open(output, encoding="utf-8") as f:
    table = list(csv.DictReader(f))
  assert [r["text_a"] for r in table] == ["A man plays.", "It rains."]
  assert {r["prediction"] for r in table} <= set(tiny_litert.LABELS)
  check = subprocess.run([venv / "bin/python", "-c", "import tensorflow"], capture_output=True,
                         text=True, env=env)
  assert check.returncode != 0 and "No module named 'tensorflow'" in check.stderr
