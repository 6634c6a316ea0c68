"""The device install: ``pip install ".[device]"`` into a fresh venv brings numpy, absl-py,
the LiteRT interpreter and this package, no TensorFlow, and ``electra-predict`` labels a CSV
with an int8 ``.tflite`` there. A real install from the package index (pip's cache makes it a
few seconds), not imports blocked inside the test venv.

The other commands there, fast: Python without its site-packages (``-S``) and a folder of
links to only the device extra's packages, so TensorFlow is absent as in that install. Each
command runs (``--help``) or ends in one line naming the extra it needs."""

import csv
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest
from helpers import tiny_litert
from helpers.paths import REPO_ROOT

from electra_tf import commands, console

# ai-edge-litert's own requirements come along; nothing of TensorFlow does
ALLOWED = {"absl-py", "ai-edge-litert", "electra-tf", "numpy", "flatbuffers", "ml-dtypes",
           "protobuf", "tqdm", "typing-extensions", "backports-strenum", "pip", "setuptools"}


def _package_copy(dest):
  """What an install of the project reads, copied so the build leaves nothing in the repo."""
  dest.mkdir()
  for name in ("pyproject.toml", "requirements.txt", "requirements-device.txt",
               "requirements-data.txt", "LICENSE", "NOTICE", "run_pretraining.py",
               "run_finetuning.py"):
    shutil.copy(REPO_ROOT / name, dest / name)
  shutil.copytree(REPO_ROOT / "electra_tf", dest / "electra_tf",
                  ignore=shutil.ignore_patterns("__pycache__"))
  return dest


def _assert_licence_installed(venv):
  """The wheel carries the Apache-2.0 licence: its SPDX expression, LICENSE and NOTICE."""
  (info,) = venv.glob("lib/python*/site-packages/electra_tf-*.dist-info")
  metadata = (info / "METADATA").read_text(encoding="utf-8").splitlines()
  assert "License-Expression: Apache-2.0" in metadata
  assert {"License-File: LICENSE", "License-File: NOTICE"} <= set(metadata)
  for name in ("LICENSE", "NOTICE"):
    assert (info / "licenses" / name).read_bytes() == (REPO_ROOT / name).read_bytes()


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
  _assert_licence_installed(venv)

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


# what `.[device]` installs, as importable names (numpy.libs: numpy's own shared libraries;
# google: protobuf, which the interpreter needs)
DEVICE_IMPORTS = ("numpy", "numpy.libs", "absl", "ai_edge_litert", "flatbuffers", "ml_dtypes",
                  "google", "tqdm", "typing_extensions.py")
NEEDS_TRAIN = {"electra-pretrain": "run_pretraining.py", "electra-finetune": "run_finetuning.py",
               "electra-convert": "convert",
               "electra-build-pretraining-data": "build_pretraining_dataset",
               "electra-build-openwebtext-data": "build_openwebtext_pretraining_dataset",
               "electra-build-pretraining-data-beam": "build_pretraining_data_beam",
               "electra-learn-vocab": "learn_vocab.py"}


def _without_tensorflow(tmp_path):
  """Runs ``electra-<name> args`` (the console script's entry function) with only the device
  extra's packages importable."""
  site = tmp_path / "device_site"
  site.mkdir()
  purelib = sysconfig.get_paths()["purelib"]
  for name in DEVICE_IMPORTS:
    if os.path.exists(f"{purelib}/{name}"):
      (site / name).symlink_to(f"{purelib}/{name}")
  env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": f"{site}:{REPO_ROOT}"}

  def run(script, *args):
    code = (f"from electra_tf import commands; import sys; sys.argv[0] = {script!r}; "
            f"commands.{script.removeprefix(commands.PREFIX).replace('-', '_')}()")
    return subprocess.run([sys.executable, "-S", "-c", code, *map(str, args)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
  return run


def _one_line(proc, prog, what="this command"):
  assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr[-3000:]
  assert proc.stderr.splitlines() == [f"{prog}: error: {console.needs_tensorflow(what)}"]
  assert 'pip install ".[train]"' in proc.stderr


def test_each_command_without_tensorflow_runs_or_names_the_extra(tmp_path):
  run = _without_tensorflow(tmp_path)
  check = subprocess.run([sys.executable, "-S", "-c", "import tensorflow"], capture_output=True,
                         text=True, env={"PYTHONPATH": str(tmp_path / "device_site")})
  assert "No module named 'tensorflow'" in check.stderr
  assert set(NEEDS_TRAIN) < set(commands.COMMANDS)
  for script in commands.COMMANDS:
    proc = run(script, "--help")
    if script in NEEDS_TRAIN:
      _one_line(proc, NEEDS_TRAIN[script])
    else:  # runs: its help (absl's --help exits 1, argparse's 0)
      assert "--model" in proc.stdout and "Traceback" not in proc.stderr, proc.stderr[-3000:]

  rows = tmp_path / "rows.csv"
  rows.write_text("text_a,label\nA man plays.,1\n", encoding="utf-8")
  saved_model = tmp_path / "saved_model"
  saved_model.mkdir()
  proc = run("electra-predict", f"--model={saved_model}", f"--input={rows}",
             f"--output={tmp_path / 'out.csv'}")
  _one_line(proc, "predict", f"--model {saved_model}, a SavedModel or model directory,")
  events = tmp_path / "run"
  events.mkdir()
  (events / "events.out.tfevents.1").write_bytes(b"")
  _one_line(run("electra-curves", f"--model_dir={events}"), "learning_curves",
            "reading TensorBoard event files")


def test_the_beam_command_without_apache_beam_names_the_data_extra(tmp_path):
  """With TensorFlow but no Apache Beam (the train extra alone), one line naming the data extra."""
  code = ("import sys; sys.modules['apache_beam'] = None; "  # blocked: imports as missing
          "sys.argv[0] = 'electra-build-pretraining-data-beam'; "
          "from electra_tf import commands; commands.build_pretraining_data_beam()")
  proc = subprocess.run([sys.executable, "-c", code, "--help"], cwd=tmp_path, capture_output=True,
                        text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
  assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr[-3000:]
  assert proc.stderr.splitlines() == [
      "build_pretraining_data_beam: error: this command needs Apache Beam, which this install "
      'lacks: pip install ".[data]"']
